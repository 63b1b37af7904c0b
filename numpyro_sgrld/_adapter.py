"""The NumPyro adapter: the one NumPyro-aware piece of a stochastic-gradient kernel.

:class:`SGMCMC` sets the model up (its plates, data checks, initial values), draws the
minibatch indices every step, asks the gradient estimator for :math:`\\nabla\\hat U`, builds
the step's :class:`~numpyro_sgrld.metrics.StepContext`, runs the composed step
(:func:`numpyro_sgrld._composition.transition_with_preconditioner`), applies the acceptance
policy (:mod:`numpyro_sgrld._acceptance`) and postprocesses draws.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import random
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import constrain_fn, transform_fn
from numpyro.util import identity, is_prng_key

from numpyro_sgrld import _model_host as model_host
from numpyro_sgrld import _run_verdict as run_verdict
from numpyro_sgrld import _setup, equipartition
from numpyro_sgrld._checks import flag, integer, real
from numpyro_sgrld._composition import build_sampler, init_sampler
from numpyro_sgrld._potentials import minibatch_potential, minibatch_potential_with_aux
from numpyro_sgrld._state import SGState
from numpyro_sgrld._step import Spec, context
from numpyro_sgrld._traits import trait
from numpyro_sgrld._tree import tree_norm
from numpyro_sgrld.gradients import (
    GradientEstimator,
    Target,
    control_variates,
    hessian_diagonal_estimate,
    minibatch,
)
from numpyro_sgrld.integrators import langevin
from numpyro_sgrld.metrics import Aux
from numpyro_sgrld.schedules import as_schedule
from numpyro_sgrld.sharding import check_divisible, index_sharding
from numpyro_sgrld.subsample import (
    as_jax_array,
    check_batching,
    draw_indices,
    full_batch,
    full_batch_opaque,
    init_batching,
)
from numpyro_sgrld.warmup import choices
from numpyro_sgrld.warmup import steps as warmup_steps
from numpyro_sgrld.warmup.adaptation import CHAIN_AXIS, check_adaptation

__all__ = ["SGMCMC", "SGState"]


def _check_scalars(temperature, target_bias):
    return (real(temperature, "temperature", low=0, hint="1 samples the posterior."),
            real(target_bias, "target_bias", low=0, low_open=True,
                 hint="It is the relative inflation of the stationary variance that "
                 "`step_size=None` allows (default 0.1)."))


def _check_init_strategy(init_strategy):
    if not callable(init_strategy):
        raise ValueError(
            f"`init_strategy` must be a NumPyro init strategy (a callable such as "
            f"numpyro.infer.init_to_uniform, init_to_median or init_to_value(values=...)), "
            f"got {init_strategy!r}."
        )
    return init_strategy


def _check_aux(metric, model):
    reads = trait(metric, Aux)
    if reads is not None and model is None:
        raise ValueError(
            f"The metric {metric.name!r} reads auxiliary values of the model's forward pass "
            f"({list(reads.names)}); a kernel built from `potential_fn` has none. Give a "
            "model that records them with numpyro_sgrld.auxiliary(name, value)."
        )


def _check_num_data(num_data):
    if num_data is None:
        return None
    return integer(num_data, "num_data", hint="Or None (inferred from the model's plates).")


def _gradient_estimator(gradient, control_variate, mode_steps, start_at_centre, model):
    """The gradient estimator from ``gradient=`` or the ``control_variate`` shortcut."""
    if gradient is not None and control_variate is not None:
        raise ValueError(
            "Give either `gradient=` or `control_variate=` (the shortcut for "
            "gradient=gradients.control_variates(...)), not both."
        )
    if start_at_centre and control_variate is None:
        raise ValueError(
            "`start_at_centre=True` starts the chain at the control-variate centre: also pass "
            "`control_variate='mode'` (or a dict of unconstrained latent values)."
        )
    if control_variate is not None:
        gradient = control_variates(control_variate, mode_steps, start_at_centre)
    else:
        integer(mode_steps, "mode_steps")
        flag(start_at_centre, "start_at_centre")
    gradient = minibatch() if gradient is None else gradient
    if not isinstance(gradient, GradientEstimator):
        raise TypeError(
            "`gradient` must be a numpyro_sgrld.gradients.GradientEstimator such as "
            f"gradients.minibatch() or gradients.control_variates('mode'), got {gradient!r}."
        )
    if gradient.needs_full_data and model is None:
        raise ValueError(
            f"The gradient estimator {gradient.name!r} (`control_variate`) needs a model with "
            "subsample plates (it evaluates the full-data gradient at the centre); it is not "
            "available with `potential_fn`."
        )
    return gradient


class SGMCMC(MCMCKernel):
    r"""A stochastic-gradient kernel composed of a metric, an integrator and a gradient estimator:
    a :class:`numpyro.infer.mcmc.MCMCKernel`.

    .. math::
        \theta \leftarrow \mathrm{step}\big(\theta,\ \nabla\hat U(\theta),\ D(\theta)\big)

    with :math:`\nabla\hat U` from ``gradient`` (:mod:`numpyro_sgrld.gradients`), :math:`D` from
    ``metric`` (:mod:`numpyro_sgrld.metrics`) and the step from ``integrator``
    (:mod:`numpyro_sgrld.integrators`), plus :math:`hT\Gamma` with ``correction``
    (:mod:`numpyro_sgrld.correction`). Any metric composes with any integrator: for example
    preconditioned SGHMC is ::

        SGMCMC(model, 1e-4, metric=metrics.rmsprop(), integrator=integrators.sghmc(friction=0.1))

    The named kernels (:class:`~numpyro_sgrld.SGLD`, :class:`~numpyro_sgrld.PSGLD`,
    :class:`~numpyro_sgrld.SGHMC`, ...) are presets of this class. Everything NumPyro-related
    (model set-up and plates, index drawing, the acceptance policy of
    :mod:`numpyro_sgrld._acceptance`, chains, postprocessing) lives here; the step itself is
    :func:`numpyro_sgrld._composition.transition_with_preconditioner`.

    The kernel's ``sampler_state`` is a :class:`~numpyro_sgrld._composition.SamplerState`
    (``metric``, ``integrator``, ``correction``), e.g. SGHMC's momentum is
    ``sampler_state.integrator.momentum`` (``extra_fields=("sampler_state.integrator.momentum",)``).

    :param metric: a :class:`~numpyro_sgrld.metrics.Metric` (default
        :func:`~numpyro_sgrld.metrics.identity`).
    :param integrator: an :class:`~numpyro_sgrld.integrators.Integrator` (default
        :func:`~numpyro_sgrld.integrators.langevin`).
    :param gradient: a :class:`~numpyro_sgrld.gradients.GradientEstimator` (default
        :func:`~numpyro_sgrld.gradients.minibatch`; ``control_variate=`` is the shortcut for
        :func:`~numpyro_sgrld.gradients.control_variates`).
    :param correction: ``None`` (default), ``"exact"`` or ``"hutchinson"``: add the Γ drift of
        the metric (needs a metric with a moving-average statistic and an integrator that carries
        it, :func:`~numpyro_sgrld.integrators.langevin`; other compositions are refused).
    :param correction_form: ``"lagged"`` (default) or ``"instant"``
        (:mod:`numpyro_sgrld.correction`).

    :param model: a NumPyro model (first positional, as for ``NUTS``). Every
        ``numpyro.plate(name, N, subsample_size=n)`` in it is redrawn every step.
    :param step_size: :math:`h`, a float > 0 or a schedule ``t -> h_t`` (see
        :mod:`numpyro_sgrld.schedules`), used as given; or ``None`` (default): chosen during
        warm-up (at least 200 steps of ``num_warmup``) so that the discretised chain's
        stationary variance is within a factor ``1 + target_bias`` of the posterior's in every
        direction of the kernel's geometry, and frozen at the end of warm-up, as ``NUTS``
        does with its dual averaging (:mod:`numpyro_sgrld.adaptation`). The adapted step is
        ``state.step_size`` (in ``last_state``, the ``step_size`` extra field, the progress
        bar and ``to_inference_data``'s sample stats); ``post_warmup_state`` continues with it.
    :param target_bias: with ``step_size=None``, :math:`\delta`, the relative inflation of the
        stationary variance allowed in the worst direction (default 0.1: sds within about
        5 %). Smaller is more exact and mixes more slowly.
    :param potential_fn: instead of ``model``, a potential ``z -> U(z)`` on an unconstrained
        pytree; ``init_params`` is then required and minibatching is the caller's business.
    :param temperature: :math:`T` (1 samples the posterior; 0 gives stochastic gradient descent).
    :param num_data: :math:`N` (``StepContext.num_data``), used by adaptive metrics to form the
        per-datum gradient :math:`\bar g = \nabla\hat U / N`. Defaults to the size of the
        largest subsample plate, or 1 without one.
    :param batching: ``"replacement"`` (default: independent uniform indices every step) or
        ``"epoch"`` (shuffle once per epoch and sweep without replacement).
    :param init_strategy: a NumPyro init strategy, as for ``NUTS`` (ignored when
        ``init_params`` are given to ``MCMC.run``; those are unconstrained values).
    :param data_parallel: split every minibatch across devices (data parallelism): ``None``
        (default, one device), ``True`` (all of ``jax.devices()``), a sequence of devices, or a
        one-axis :class:`jax.sharding.Mesh`. The minibatch indices are constrained to be
        sharded along that axis (``jax.lax.with_sharding_constraint``); XLA then gathers and
        differentiates each device's share of the data points where they are and sums the
        gradient across devices (an all-reduce). Results equal the one-device results up to
        floating-point summation order. Every subsample size must be a multiple of the number
        of devices. The model's data arguments should be uncommitted (``jnp.asarray``) or
        replicated on the mesh. Use either this or ``chain_method="parallel"``, not both.
    :param control_variate: shortcut for ``gradient=gradients.control_variates(
        control_variate, mode_steps, start_at_centre)``: ``None`` (default: the plain minibatch
        gradient), ``"mode"`` or a dict of unconstrained latent values: use the
        control-variate gradient estimator (Baker et al. 2019) centred there
        (:func:`~numpyro_sgrld.gradients.control_variate_estimate`). ``"mode"`` finds the centre
        at initialisation with ``mode_steps`` Adam steps
        on minibatches from the initial position (:func:`~numpyro_sgrld.gradients.find_mode`).
        Each step then costs two minibatch gradients (at the position and at the centre), and
        initialisation one full-data gradient and Hessian-vector product. Its gradient noise
        shrinks as the chain approaches the centre, so much larger step sizes keep the
        stationary law close to the posterior when N is large and the posterior concentrated.
        ``init`` warns when the centre is estimated to be more than sqrt(d) posterior
        sds from the mode (:func:`~numpyro_sgrld.gradients.centre_distance`).
    :param mode_steps: Adam steps of ``control_variate="mode"`` (default 1000).
    :param start_at_centre: start the chain at the control-variate centre instead of the
        initial position given by ``init_strategy`` or ``init_params`` (default ``False``).
        Baker et al. (2019) start SGLD-CV at the mode they find: a chain that starts in the
        bulk of the posterior needs little or no burn-in. Keep the default where the chains'
        starting points should be spread out (e.g. to compare chains with R-hat): started at
        the centre, every chain starts at (almost) the same point. A centre that is not finite
        is not used (the chain then starts at the initial position). Needs
        ``control_variate``.
    :param check_proposal: a step may not land where the minibatch potential is not finite
        (zero density: a ``numpyro.factor`` wall, a ``log`` of a negative number; default
        ``True``). The next step's gradient estimate brings the potential at the proposal
        with it, so the check costs no forward pass: the proposal is held as the state's
        ``proposal`` and becomes ``z`` (the recorded draw, one step behind the proposal)
        once its potential, gradient and entries are finite there; else the chain goes back
        to ``z``. During warm-up each proposal is also checked at once on its own minibatch
        (:func:`numpyro_sgrld._step.step`). The cyclical presets check every proposal at once
        (one forward pass per step): a draw there must be a sampling-stage state, and the
        next step after the exploration stage starts at its end. ``False``: only the
        proposal's entries are checked, and a chain that lands at zero density stays there,
        rejecting every step.
    """

    sample_field = "z"
    default_fields = ("z", "diverging", "num_rejected")
    #: ``MCMC`` may run this kernel on :func:`numpyro_sgrld._loop.collect` once
    #: :func:`~numpyro_sgrld.enable_fast_sampling_loop` is on (:mod:`numpyro_sgrld._compat`).
    own_sampling_loop = True
    #: With ``check_proposal``: whether the next step checks a proposal (``SGState.proposal``,
    #: no forward pass) rather than the step itself on its own minibatch.
    _checks_proposal_next_step = True

    def __init__(
        self,
        model=None,
        step_size=None,
        *,
        metric=None,
        integrator=None,
        gradient=None,
        correction=None,
        correction_form="lagged",
        potential_fn=None,
        temperature=1.0,
        num_data=None,
        batching="replacement",
        init_strategy=init_to_uniform,
        data_parallel=None,
        control_variate=None,
        mode_steps=1000,
        start_at_centre=False,
        check_proposal=True,
        target_bias=0.1,
    ):
        if (model is None) == (potential_fn is None):
            raise ValueError("Give exactly one of `model` or `potential_fn`.")
        self._model, self._potential_fn = model, potential_fn
        self._schedule = None if step_size is None else as_schedule(step_size)
        #: Whether the step size is chosen during warm-up (``step_size=None``).
        self.adapts_step_size = step_size is None
        #: :math:`T`, and :math:`\delta` of the step-size adaptation.
        self.temperature, self.target_bias = _check_scalars(temperature, target_bias)
        self._num_data_arg = _check_num_data(num_data)
        self._batching = check_batching(batching)
        self._init_strategy = _check_init_strategy(init_strategy)
        self._index_sharding = index_sharding(data_parallel)
        self._check_proposal = flag(check_proposal, "check_proposal")
        #: The :class:`~numpyro_sgrld.gradients.GradientEstimator`.
        self.gradient = _gradient_estimator(
            gradient, control_variate, mode_steps, start_at_centre, model)
        # what step_size=None turns on: numpyro_sgrld.warmup.choices
        self.gradient = choices.default_gradient(
            step_size, gradient, control_variate, model is not None) or self.gradient
        if metric is None:
            metric = choices.default_metric(step_size)
        integrator = langevin() if integrator is None else integrator
        build_sampler(metric, integrator, correction, correction_form)  # refuses misfits now
        self._correction_form = correction_form
        _check_aux(metric, model)
        #: The :class:`~numpyro_sgrld.metrics.Metric`, the
        #: :class:`~numpyro_sgrld.integrators.Integrator` and the correction (``None``,
        #: ``"exact"`` or ``"hutchinson"``).
        self.metric, self.integrator, self.correction = metric, integrator, correction
        if step_size is None:
            check_adaptation(None, integrator, self.temperature)
        #: The model's :class:`~numpyro_sgrld._model_host.ModelSetup` (its plates, :math:`N`,
        #: transforms, network sites), set by :meth:`init`.
        self.setup = model_host.ModelSetup()
        #: ``(args, kwargs)`` of the last run (for the verdict's advice and readings).
        self.model_args = None
        self._spec = None  # the step's Spec, built by init once the plates are known
        # (spec, state, target, adapting) -> state: the step with the warm-up around it (a
        # cyclical preset wraps it in its exploration stage)
        self._transition = warmup_steps.transition
        self._sample_fn = None
        self._axis_name = None  # CHAIN_AXIS with vectorised chains: the kernel's own vmap's
        self._once = model_host.Once()
        self.run_info = None  # the run MCMC's own loop drives, for the verdict at its end
        self._settled = {}  # settled gradient estimator -> _AfterWarmup

    @property
    def model(self):
        return self._model

    @property
    def step_size(self):
        """The step-size schedule ``t -> h_t``; ``None`` when it is adapted during warm-up
        (``step_size=None``: the adapted value is the state's ``step_size``)."""
        return self._schedule

    @property
    def subsample_plates(self):
        """The subsample plates found in the model (set by :meth:`init`)."""
        return self.setup.plates

    @property
    def network_sites(self):
        """The latent sites a network bridge sampled (set by :meth:`init`): the verdict
        judges a network in function space."""
        return self.setup.network_sites

    @property
    def num_data(self):
        """:math:`N`: the ``num_data`` argument; else the size of the largest plate given a
        ``subsample_size`` (also when it equals the plate's size, so that :math:`N` does not
        jump when the minibatch grows to the whole data set); else the size of the largest
        plate that holds an observed site (e.g. ``full_batch(model)``, or a model written
        without subsampling); else 1."""
        if self._num_data_arg is not None:
            return self._num_data_arg
        return self.setup.num_data or 1

    def _step_size(self, i, adaptation=None):
        """:math:`h_i`: the schedule's, or the adaptation's current step."""
        if adaptation is None:
            return jnp.asarray(self._schedule(i), jnp.result_type(float))
        return adaptation.step_size

    def _target(self, model_args, model_kwargs, step=None):
        """The :class:`~numpyro_sgrld.gradients.Target` the gradient estimator evaluates, at
        transition ``step`` (unbatched for vectorised chains: a branch on it stays one)."""
        if self._model is None:
            return Target(lambda z, idx: (self._potential_fn(z), {}), None, None, step=step,
                          axis_name=self._axis_name)
        # NumPy arrays in the model arguments become JAX arrays, so that the model can index
        # them with the (traced) minibatch indices, e.g. ``X[idx]``.
        args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        setup = self.setup
        full = minibatch_potential(full_batch_opaque(setup.prepared), args, kwargs)
        return Target(
            minibatch_potential_with_aux(setup.prepared, args, kwargs),
            lambda z: full(z, {}),
            lambda key: draw_indices(key, setup.plates, None)[0],
            steps_per_epoch=_setup.steps_per_epoch(setup.plates),
            step=step,
            axis_name=self._axis_name,
        )

    def _init_one(self, z, rng_key, model_args, model_kwargs, num_warmup=0):
        spec = self._spec
        key_next, key_sampler, key_batch, key_idx = random.split(rng_key, 4)
        batch_state = init_batching(key_batch, self.setup.plates, self._batching)
        idx, _ = spec.draw(key_idx, batch_state)
        target = self._target(model_args, model_kwargs)._replace(axis_name=None)
        gradient_state = self.gradient.init(z, key_sampler, target)
        if self.gradient.start is not None:
            z = self.gradient.start(gradient_state, z)
        est = self.gradient.estimate(z, idx, gradient_state, target)
        curvature = partial(hessian_diagonal_estimate, lambda x, b: target.potential(x, b)[0],
                            z, idx, random.fold_in(key_sampler, 2))
        start = partial(init_sampler, spec.sampler, key_sampler, z, curvature,
                        context(spec, 0, est.aux))
        adaptation = warmup = None
        if self.adapts_step_size:
            adaptation, warmup = warmup_steps.init_warmup(
                spec, random.fold_in(key_sampler, 3), z, est,
                start(1.0, self.temperature), target, idx, num_warmup)
        step_size = self._step_size(0, adaptation)
        return SGState(
            i=jnp.zeros((), jnp.int32),
            z=z,
            sampler_state=start(step_size, self.temperature),
            batch_state=batch_state,
            potential_energy=est.value,
            grad_norm=tree_norm(est.grad),
            step_size=step_size,
            diverging=jnp.zeros((), bool),
            rng_key=key_next,
            num_rejected=jnp.zeros((), jnp.int32),
            gradient_state=est.state,
            adaptation=adaptation,
            warmup=warmup,
            proposal=z if spec.check_proposal and self._checks_proposal_next_step else None,
            equipartition=equipartition.init(z, self._first_sampling_step(num_warmup)),
            configurational_temperature=jnp.zeros((), step_size.dtype),
        )

    def _sample_one(self, state, model_args, model_kwargs, adapting=None, step=None,
                    gradient=None):
        """One transition of one chain (:func:`numpyro_sgrld.warmup.steps.transition`);
        ``step`` is its index, unbatched for vectorised chains; ``gradient`` replaces the
        spec's estimator (its settled form after warm-up, :meth:`after_warmup`)."""
        target = self._target(model_args, model_kwargs, state.i if step is None else step)
        spec = self._spec if gradient is None else self._spec._replace(gradient=gradient)
        return self._transition(spec, state, target, adapting)

    def after_warmup(self, state):
        """This kernel's transitions for the steps after the step-size adaptation's warm-up,
        given the (concrete) state at its end: an object whose ``sample`` is :meth:`sample`
        with ``adapting=False`` known when traced (none of the warm-up's branches:
        :func:`~numpyro_sgrld.warmup.steps.transition`) and the gradient estimator in its
        settled form (:attr:`~numpyro_sgrld.gradients.GradientEstimator.settled`: the
        control variates on or off, no branch). The same transitions as :meth:`sample`'s;
        the same object for the same settled form, so that a loop compiled for it is found
        again. ``None`` without a step-size adaptation (nothing to settle)."""
        if state.adaptation is None or self._spec is None:
            return None
        gradient = self._spec.gradient
        if gradient.settled is not None:
            gradient = gradient.settled(state.gradient_state)
        if gradient not in self._settled:  # one per settled form: the spec is read when traced
            self._settled[gradient] = _AfterWarmup(self, gradient)
        return self._settled[gradient]

    def init(self, rng_key, num_warmup, init_params=None, model_args=(), model_kwargs=None):
        model_kwargs = {} if model_kwargs is None else model_kwargs
        # NumPy data becomes JAX arrays once, here: a model indexes it with traced indices
        with _setup.evaluate_now():  # concrete, even when MCMC calls init inside pmap
            model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        vectorized = not is_prng_key(rng_key)
        if vectorized:
            rng_key, key_init = jnp.swapaxes(jax.vmap(random.split)(rng_key), 0, 1)
        else:
            rng_key, key_init = random.split(rng_key)
        if self._model is not None:
            self.model_args = (model_args, model_kwargs)
            self.setup = model_host.set_up(self._model, self.metric, self._init_strategy,
                                           model_args, model_kwargs)
            model_host.check_data(self.setup, self._once, model_args, model_kwargs)
            init_params = model_host.initial_positions(
                self.setup, self._model, self._init_strategy, self._once, key_init,
                init_params, model_args, model_kwargs)
            first = init_params if not vectorized else jax.tree.map(lambda x: x[0], init_params)
            model_host.check_observed(self.setup, self._once, first, model_args, model_kwargs)
        elif init_params is None:
            raise ValueError(
                "`init_params` must be given when the kernel is built from `potential_fn`: "
                "pass `init_params=` (an unconstrained pytree) to `MCMC.run`."
            )
        elif _setup.concrete(init_params):
            _setup.check_potential_init_params(
                init_params, rng_key.shape[0] if vectorized else None
            )
        check_divisible(self.setup.plates, self._index_sharding)
        if self.adapts_step_size:
            check_adaptation(num_warmup, self.integrator, self.temperature)
        self._axis_name = CHAIN_AXIS if vectorized else None
        # the composed sampler from the attributes (one source: they are what a reader sees)
        sampler = build_sampler(self.metric, self.integrator, self.correction,
                                self._correction_form)
        self._spec = Spec(sampler, self.gradient, self.temperature, self._check_proposal,
                          self.target_bias, self._step_size,
                          partial(_draw, self.setup.plates, self._index_sharding),
                          self.num_data, _setup.steps_per_epoch(self.setup.plates))
        if vectorized:
            self._sample_fn = partial(_sample_vectorized, self._sample_one)
            init_one = jax.vmap(self._init_one, in_axes=(0, 0, None, None, None))
        else:
            self._sample_fn = self._sample_one
            init_one = self._init_one
        init_one = model_host.jit_once(self._once, ("init", vectorized), init_one, model_args,
                                       model_kwargs)
        state = init_one(
            init_params, rng_key, model_args, model_kwargs, jnp.asarray(num_warmup, jnp.int32)
        )
        _setup.check_initial_density(state, vectorized, self.setup.prepared, model_args,
                                     model_kwargs)
        if self.gradient.check is not None:
            self.gradient.check(state.gradient_state)
        return run_verdict.arm(self, state, num_warmup, vectorized)

    def _first_sampling_step(self, num_warmup):
        """The step counter after ``num_warmup`` transitions (one step each): where the
        equipartition check starts counting."""
        return num_warmup

    def sample(self, state, model_args, model_kwargs):
        return self._observed(state, self._sample_fn(state, model_args, model_kwargs),
                              model_args, model_kwargs)

    def _observed(self, state, new, model_args, model_kwargs):
        """``new`` with the run's moments updated when ``MCMC``'s own loop drives the kernel
        (:func:`~numpyro_sgrld._run_verdict.observe`)."""
        if state.monitor is not None and self.run_info is not None:
            new = run_verdict.observe(self, state, new, model_args, model_kwargs)
        return new

    def postprocess_fn(self, model_args, model_kwargs):
        """Constrained values (and deterministic sites, computed on the *full* data, as
        ``NUTS(full_batch(model))`` returns them)."""
        if self._model is None:
            return identity
        model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs or {}))
        if self.setup.replay:
            return partial(
                constrain_fn,
                full_batch(self.setup.prepared),
                model_args,
                model_kwargs,
                return_deterministic=True,
            )
        return partial(transform_fn, self.setup.inv_transforms)

    def get_diagnostics_str(self, state):
        adapting = state.adaptation is not None and int(state.i) < int(
            state.adaptation.num_warmup)
        rejected = int(state.num_rejected)
        return (f"h={float(state.step_size):.2e}{' (adapting)' if adapting else ''} "
                f"|grad|={float(state.grad_norm):.2e} U_batch={float(state.potential_energy):.4g}"
                f"{f' rejected={rejected}' if rejected else ''}"
                f"{' DIVERGING' if bool(state.diverging) else ''}")


def _draw(plates, sharding, key, batch_state):
    """A minibatch's indices for every subsample plate, sharded across devices with
    ``data_parallel``: ``(idx, batch_state)``."""
    idx, batch_state = draw_indices(key, plates, batch_state)
    if sharding is not None:
        idx = {name: jax.lax.with_sharding_constraint(i, sharding) for name, i in idx.items()}
    return idx, batch_state


def _sample_vectorized(sample_one, state, model_args, model_kwargs, adapting=None,
                       gradient=None):
    """``sample_one`` over a batch of chains. The chains step in lockstep, so whether they
    are in warm-up is one unbatched flag: the adaptation's ``lax.cond`` stays a branch (under
    ``vmap`` a batched predicate would run both branches on every step). ``adapting`` and
    ``gradient`` as in :meth:`SGMCMC._sample_one` (``adapting=None``: from the state)."""
    if adapting is None and state.adaptation is not None:
        adapting = state.i[0] < state.adaptation.num_warmup[0]
    return jax.vmap(partial(sample_one, adapting=adapting, step=state.i[0], gradient=gradient),
                    in_axes=(0, None, None), axis_name=CHAIN_AXIS)(
        state, model_args, model_kwargs
    )


class _AfterWarmup:
    """A kernel's transitions after warm-up (:meth:`SGMCMC.after_warmup`): ``sample`` as
    the kernel's, with ``adapting=False`` known when traced and ``gradient`` as its
    estimator. What :func:`numpyro_sgrld._loop.collect` runs after the step-size
    adaptation's warm-up on an accelerator."""

    def __init__(self, kernel, gradient):
        self.kernel, self.gradient = kernel, gradient

    def sample(self, state, model_args, model_kwargs):
        kernel = self.kernel
        new = kernel._sample_fn(state, model_args, model_kwargs, adapting=False,
                                gradient=self.gradient)
        return kernel._observed(state, new, model_args, model_kwargs)

