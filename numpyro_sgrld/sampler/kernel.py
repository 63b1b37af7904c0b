"""The NumPyro adapter: the one NumPyro-aware piece of a stochastic-gradient kernel.

:class:`SGMCMC` sets the model up (its plates, data checks, initial values), builds the run's
one minibatch draw over the model's plates (the :class:`~numpyro_sgrld.core.gradients.Target`'s
``draw``) and the warm-up's :class:`~numpyro_sgrld.warmup.pieces.Setting` (the algorithm, the
bias target, the step-size rule), hands each chain's state to the transition
(:func:`numpyro_sgrld.warmup.steps.transition`: it draws the minibatch and runs the algorithm's
step, :func:`numpyro_sgrld.core.algorithm.step`, which estimates the gradient, composes the step
and applies the acceptance policy), runs chains and postprocesses draws.
"""

from functools import partial

import jax
import jax.numpy as jnp
from jax import random
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import constrain_fn, transform_fn
from numpyro.util import identity, is_prng_key

from numpyro_sgrld.core.schedules import as_schedule
from numpyro_sgrld.core.state import SGState
from numpyro_sgrld.data import sharded_data
from numpyro_sgrld.data.sharding import check_divisible, index_sharding
from numpyro_sgrld.data.subsample import (
    as_jax_array,
    check_batching,
    full_batch,
)
from numpyro_sgrld.sampler import model as model_host
from numpyro_sgrld.sampler import parts, run_verdict
from numpyro_sgrld.sampler import setup as _setup
from numpyro_sgrld.warmup import cycles as cycles_
from numpyro_sgrld.warmup.adaptation import CHAIN_AXIS, check_adaptation
from numpyro_sgrld.warmup.pieces import Setting
from numpyro_sgrld.warmup.steps import transition

__all__ = ["SGMCMC", "SGState"]


class SGMCMC(MCMCKernel):
    r"""A stochastic-gradient kernel composed of a metric, an integrator and a gradient estimator:
    a :class:`numpyro.infer.mcmc.MCMCKernel`.

    .. math::
        \theta \leftarrow \mathrm{step}\big(\theta,\ \nabla\hat U(\theta),\ D(\theta)\big)

    with :math:`\nabla\hat U` from ``gradient`` (:mod:`numpyro_sgrld.core.gradients`), :math:`D`
    from ``metric`` (:mod:`numpyro_sgrld.core.metrics`) and the step from ``integrator``
    (:mod:`numpyro_sgrld.core.integrators`), plus :math:`hT\Gamma` with ``correction``
    (:mod:`numpyro_sgrld.core.correction`). Any metric composes with any integrator: for example
    preconditioned SGHMC is ::

        SGMCMC(model, 1e-4, metric=metrics.rmsprop(), integrator=integrators.sghmc(friction=0.1))

    The named kernels (:class:`~numpyro_sgrld.SGLD`, :class:`~numpyro_sgrld.PSGLD`,
    :class:`~numpyro_sgrld.SGHMC`, ...) are presets of this class.

    The composition is a value, :attr:`algorithm` (:func:`~numpyro_sgrld.compose`); it may be
    given whole: ``SGMCMC(model, algorithm=compose(metrics.rmsprop(), integrators.langevin()))``.

    The kernel's ``sampler_state`` is a :class:`~numpyro_sgrld.core.composition.SamplerState`
    (``metric``, ``integrator``, ``correction``), e.g. SGHMC's momentum is
    ``sampler_state.integrator.momentum`` (``extra_fields=("sampler_state.integrator.momentum",)``).

    :param metric: a :class:`~numpyro_sgrld.core.metrics.Metric` (default: learnt in warm-up with
        ``step_size=None``, else :func:`~numpyro_sgrld.core.metrics.identity`). With
        ``step_size=None`` an adaptive metric runs in the coordinates learnt in warm-up, as
        every adaptive preset's does (:func:`~numpyro_sgrld.warmup.choices.kernel_metric`).
    :param integrator: an :class:`~numpyro_sgrld.core.integrators.Integrator` (default
        :func:`~numpyro_sgrld.core.integrators.langevin`).
    :param gradient: a :class:`~numpyro_sgrld.core.gradients.GradientEstimator` (default
        :func:`~numpyro_sgrld.core.gradients.minibatch`; ``control_variate=`` is the shortcut for
        :func:`~numpyro_sgrld.core.gradients.control_variates`).
    :param algorithm: instead of the pieces, an :class:`~numpyro_sgrld.Algorithm`
        (:func:`~numpyro_sgrld.compose`): its metric, integrator, gradient estimator,
        correction, temperature and proposal check (``step_size=None`` then adapts the step
        and learns nothing else: the composition is as given).
    :param correction: ``None`` (default), ``"exact"`` or ``"hutchinson"`` (or a
        :class:`~numpyro_sgrld.core.correction.Correction`): add the Γ drift of
        the metric (needs a metric with a moving-average statistic and an integrator that carries
        it, :func:`~numpyro_sgrld.core.integrators.langevin`; other compositions are refused).
    :param correction_form: ``"lagged"`` (default) or ``"instant"``
        (:mod:`numpyro_sgrld.core.correction`).

    :param model: a NumPyro model (first positional, as for ``NUTS``). Every
        ``numpyro.plate(name, N, subsample_size=n)`` in it is redrawn every step.
    :param step_size: :math:`h`, a float > 0 or a schedule ``t -> h_t``
        (:mod:`numpyro_sgrld.core.schedules`), used as given in the metric as composed (nothing is
        learnt; SGLD's is the identity); or ``None`` (default): chosen in warm-up so that the
        chain's stationary variance is within ``1 + target_bias`` of the posterior's in every
        direction, then frozen, as ``NUTS`` freezes its dual averaging
        (:mod:`numpyro_sgrld.warmup.adaptation`): ``state.step_size``, in the learnt metric's units.
    :param settings: a default run's :class:`~numpyro_sgrld.LearntSettings`, which the chains
        start from (steps, metric and gradient states, positions); nothing is learnt.
    :param target_bias: with ``step_size=None``, :math:`\delta`, the relative inflation of the
        stationary variance allowed in the worst direction (default 0.1: sds within about
        5 %). Smaller is more exact and mixes more slowly.
    :param potential_fn: instead of ``model``, a potential ``z -> U(z)`` on an unconstrained
        pytree; ``init_params`` is then required and minibatching is the caller's business.
    :param temperature: :math:`T` (default 1, which samples the posterior; 0 gives stochastic
        gradient descent).
    :param num_data: :math:`N` (``StepContext.num_data``), used by adaptive metrics to form the
        per-datum gradient :math:`\bar g = \nabla\hat U / N`. Defaults to the size of the
        largest subsample plate, or 1 without one.
    :param batching: ``"replacement"`` (default: independent uniform indices every step),
        ``"epoch"`` (shuffle once per epoch, sweep without replacement) or ``"contiguous"``
        (runs of consecutive rows, :class:`~numpyro_sgrld.data.subsample.Contiguous`).
    :param init_strategy: a NumPyro init strategy, as for ``NUTS`` (ignored when
        ``init_params`` are given to ``MCMC.run``; those are unconstrained values).
    :param data_parallel: split every minibatch across devices: ``None`` (default, one
        device), ``True`` (all of ``jax.devices()``), a sequence of devices, or a one-axis
        :class:`jax.sharding.Mesh`. Every subsample size must be a multiple of the number of
        devices; results equal one device's up to summation order (docs/scaling.md). Not
        together with ``chain_method="parallel"``.
    :param control_variate: shortcut for ``gradient=gradients.control_variates(
        control_variate, mode_steps, start_at_centre)`` (Baker et al. 2019): ``None``
        (default), ``"mode"`` (a centre found at initialisation by ``mode_steps`` Adam steps
        on minibatches, :func:`~numpyro_sgrld.core.gradients.find_mode`) or a dict of
        unconstrained latent values. A step then costs two minibatch gradients, and its
        noise shrinks near the centre (docs/subsampling.md); ``init`` warns when the centre
        is more than sqrt(d) posterior sds from the mode.
    :param mode_steps: Adam steps of ``control_variate="mode"`` (default 1000).
    :param start_at_centre: start the chain at the control-variate centre (default
        ``False``: at the initial position, so that chains start spread out for R-hat).
        Needs ``control_variate``.
    :param check_proposal: a step may not land where the minibatch potential is not finite
        (default ``True``). The next step's gradient estimate brings the potential at the
        proposal, so the check costs no forward pass: the proposal is the state's
        ``proposal`` and becomes ``z`` once its potential, gradient and entries are finite;
        else the chain goes back to ``z``. Warm-up and the cyclical presets check each
        proposal at once on its own minibatch. ``False``: only the proposal's entries are
        checked (docs/quickstart.md).
    :param cycles: a :class:`~numpyro_sgrld.warmup.cycles.Cycles`: the transitions run in cycles
        with an exploration stage (:class:`~numpyro_sgrld.CyclicalSGLD`); ``None`` (default).
    """

    sample_field = "z"
    default_fields = ("z", "diverging", "num_rejected")
    #: ``MCMC`` may run this kernel on :func:`numpyro_sgrld.sampler.loop.collect` once
    #: :func:`~numpyro_sgrld.enable_fast_sampling_loop` is on (:mod:`numpyro_sgrld.sampler.compat`).
    own_sampling_loop = True

    def __init__(self, model=None, step_size=None, *, algorithm=None, metric=None,
                 integrator=None, gradient=None, correction=None, correction_form=None,
                 potential_fn=None, temperature=None, num_data=None, batching="replacement",
                 init_strategy=init_to_uniform, data_parallel=None, control_variate=None,
                 mode_steps=1000, start_at_centre=False, check_proposal=None,
                 target_bias=0.1, cycles=None, settings=None):
        if (model is None) == (potential_fn is None):
            raise ValueError("Give exactly one of `model` or `potential_fn`.")
        #: The NumPyro model (``None`` with ``potential_fn``).
        self.model, self._potential_fn = model, potential_fn
        self._schedule = None if step_size is None else as_schedule(step_size)
        self.settings = parts.check_settings(settings, step_size, cycles)
        #: Whether the step size is chosen during warm-up (``step_size=None``, no settings).
        self.adapts_step_size = step_size is None and settings is None
        #: :math:`\delta` of the step-size adaptation.
        self.target_bias = parts.check_target_bias(target_bias)
        self._num_data_arg = parts.check_num_data(num_data)
        self._batching = check_batching(batching)
        self._init_strategy = parts.check_init_strategy(init_strategy)
        self._index_sharding = index_sharding(data_parallel)
        algorithm = parts.learnt_algorithm(parts.algorithm(
            algorithm, step_size, model, metric, integrator, gradient, correction,
            correction_form, control_variate, temperature, check_proposal, mode_steps,
            start_at_centre), self.settings)
        parts.check_aux(algorithm.sampler.metric, model)
        #: The :class:`~numpyro_sgrld.Algorithm`: metric, integrator, gradient estimator,
        #: correction, temperature; its pieces are also read as ``metric``, ``integrator``,
        #: ``gradient``, ``correction`` (a :class:`~numpyro_sgrld.core.correction.Correction` or
        #: ``None``) and ``temperature``.
        self.algorithm = algorithm
        self.metric, self.integrator, self.correction = algorithm.sampler
        self.gradient, self.temperature = algorithm.gradient, algorithm.temperature
        if self.adapts_step_size:
            check_adaptation(None, self.integrator, self.temperature)
        #: The model's :class:`~numpyro_sgrld.sampler.model.ModelSetup` (its plates, :math:`N`,
        #: transforms, network sites), set by :meth:`init`.
        self.setup = model_host.ModelSetup()
        #: ``(args, kwargs)`` of the last run (for the verdict's advice and readings).
        self.model_args = None
        self._setting = None  # the warm-up's Setting, built by init once the plates are known
        # (setting, state, target, adapting) -> state, wrapped by a cyclical kernel's stages
        self._transition = transition
        #: The :class:`~numpyro_sgrld.warmup.cycles.Cycles` of a cyclical kernel (``None``: none),
        #: and the step its first cycle begins at (set by :meth:`init`).
        self.cycles, self.cycle_start = cycles, 0
        self._sample_fn, self._axis_name = None, None  # CHAIN_AXIS: the kernel's own vmap's
        self._once = model_host.Once()
        self.run_info = self.judged_values = self.judged_name = None  # the verdict's hooks
        #: Set by :class:`~numpyro_sgrld.SGGibbs`: the model keyword arguments holding one value
        #: per vectorised chain, and ``(i, warmup_state) -> {site: factor}`` on the metric of
        #: the sites it steps farther than the rest (``gibbs_bias.full_step``; ``None``: none).
        self.chain_kwargs, self.site_scale = (), None
        self._settled = {}  # settled gradient estimator -> _AfterWarmup

    @property
    def step_size(self):
        """The step-size schedule ``t -> h_t``; ``None`` where the step is adapted in warm-up
        or held from ``settings`` (each chain's is its state's ``step_size``)."""
        return self._schedule

    @property
    def subsample_plates(self):
        """The subsample plates found in the model (set by :meth:`init`)."""
        return self.setup.plates

    @property
    def network_sites(self):
        """The latent sites a network bridge sampled (set by :meth:`init`) as the verdict
        names them (``judged_name``): it judges a network in function space."""
        return frozenset(map(self.judged_name or str, self.setup.network_sites))

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

    def _init_one(self, z, rng_key, model_args, model_kwargs, num_warmup=0, settings=None):
        target = parts.target(self.setup, self.model, self._potential_fn, None, model_args,
                              model_kwargs, self._draw, num_data=self.num_data)
        return parts.init_state(
            self._setting, target, z, rng_key, num_warmup, self.setup.plates, self._batching,
            self.adapts_step_size, self.algorithm.check_proposal and self.cycles is None,
            num_warmup if self.cycles is None else cycles_.first_sampling_step(
                self.cycles, num_warmup, self.adapts_step_size), settings)

    def _sample_one(self, state, model_args, model_kwargs, adapting=None, step=None,
                    gradient=None):
        """One transition of one chain (:func:`numpyro_sgrld.warmup.steps.transition`);
        ``step`` is its index, unbatched for vectorised chains; ``gradient`` replaces the
        algorithm's estimator (its settled form after warm-up, :meth:`after_warmup`)."""
        target = parts.target(self.setup, self.model, self._potential_fn, self._axis_name,
                              model_args, model_kwargs, self._draw,
                              state.i if step is None else step, self.num_data)
        setting = self._setting if gradient is None else parts.with_gradient(self._setting,
                                                                             gradient)
        return self._transition(setting, state, target, adapting)

    def after_warmup(self, state):
        """This kernel's transitions for the steps after the step-size adaptation's warm-up,
        given the (concrete) state at its end: an object whose ``sample`` is :meth:`sample`
        with ``adapting=False`` known when traced (none of the warm-up's branches:
        :func:`~numpyro_sgrld.warmup.steps.transition`) and the gradient estimator in its
        settled form (:attr:`~numpyro_sgrld.core.gradients.GradientEstimator.settled`: the
        control variates on or off, no branch). The same transitions as :meth:`sample`'s;
        the same object for the same settled form, so that a loop compiled for it is found
        again. ``None`` without a step-size adaptation (nothing to settle)."""
        if state.warmup is None or self._setting is None:
            return None
        gradient = self.algorithm.gradient
        if gradient.settled is not None:
            gradient = gradient.settled(state.gradient_state)
        if gradient not in self._settled:  # one per settled form: the spec is read when traced
            self._settled[gradient] = _AfterWarmup(self, gradient)
        return self._settled[gradient]

    def init(self, rng_key, num_warmup, init_params=None, model_args=(), model_kwargs=None):
        parts.check_warmup_length(self.metric, self.correction, num_warmup)
        model_args, model_kwargs = model_host.jax_arguments(model_args, model_kwargs)
        vectorized = not is_prng_key(rng_key)
        init_params = parts.start(init_params, self.settings, vectorized and rng_key.shape[0])
        if vectorized:
            rng_key, key_init = jnp.swapaxes(jax.vmap(random.split)(rng_key), 0, 1)
        else:
            rng_key, key_init = random.split(rng_key)
        chain_kwargs = self.chain_kwargs if vectorized else ()
        first_kwargs = parts.first_chain_kwargs(model_kwargs, chain_kwargs)
        if self.model is not None:
            self.model_args = (model_args, first_kwargs)
            self.setup, init_params = model_host.start_model(
                self.model, self.metric, self._init_strategy, self._once, key_init,
                init_params, model_args, first_kwargs)
        elif init_params is None:
            raise ValueError(
                "`init_params` must be given when the kernel is built from `potential_fn`: "
                "pass `init_params=` (an unconstrained pytree) to `MCMC.run`."
            )
        elif _setup.concrete(init_params):
            _setup.check_potential_init_params(init_params, vectorized and rng_key.shape[0]
                                               or None)
        sharding, strata = sharded_data.plan((model_args, model_kwargs), self._index_sharding,
                                             self.setup.plates, self._batching)
        check_divisible(self.setup.plates, sharding)
        if self.adapts_step_size:
            check_adaptation(num_warmup, self.integrator, self.temperature)
        self._axis_name = CHAIN_AXIS if vectorized else None
        if self.cycles is not None:  # the cycles begin after an adapted warm-up
            self.cycle_start = cycles_.cycle_start(num_warmup, self.adapts_step_size)
            self._transition = cycles_.exploration_stage(transition, *self.cycles,
                                                         self.cycle_start)
        self._draw = partial(parts.draw, self.setup.plates, sharding, strata=strata,
                             batching=self._batching)
        self._setting = Setting(
            self.algorithm, self.target_bias, parts.step_size_rule(self._schedule, self.cycles),
            parts.ahead((model_args, model_kwargs)), self.site_scale)
        self._sample_fn = (partial(parts.sample_vectorized, self._sample_one,
                                   chain_kwargs=chain_kwargs) if vectorized
                           else self._sample_one)
        init_one = parts.chains_init(self._init_one, self.settings,
                                     rng_key.shape[0] if vectorized else None, chain_kwargs)
        init_one = model_host.jit_once(self._once, ("init", vectorized), init_one, model_args,
                                       model_kwargs)
        state = init_one(init_params, rng_key, model_args, model_kwargs,
                         jnp.asarray(num_warmup, jnp.int32), self.settings)
        _setup.check_initial_density(state, vectorized, self.setup.prepared, model_args,
                                     first_kwargs)
        if self.gradient.check is not None:
            self.gradient.check(state.gradient_state)
        return run_verdict.arm(self, state, num_warmup, vectorized, model_args, model_kwargs)

    def sample(self, state, model_args, model_kwargs):
        return run_verdict.observed(self, state, self._sample_fn(state, model_args, model_kwargs),
                                    model_args, model_kwargs)

    def postprocess_fn(self, model_args, model_kwargs):
        """Constrained values (and deterministic sites, computed on the *full* data, as
        ``NUTS(full_batch(model))`` returns them)."""
        if self.model is None:
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
        return parts.diagnostics_str(state)


class _AfterWarmup:
    """A kernel's transitions after warm-up (:meth:`SGMCMC.after_warmup`): ``sample`` as
    the kernel's, with ``adapting=False`` known when traced and ``gradient`` as its
    estimator. What :func:`numpyro_sgrld.sampler.loop.collect` runs after the step-size
    adaptation's warm-up on an accelerator."""

    def __init__(self, kernel, gradient):
        self.kernel, self.gradient = kernel, gradient

    def sample(self, state, model_args, model_kwargs):
        kernel = self.kernel
        new = kernel._sample_fn(state, model_args, model_kwargs, adapting=False,
                                gradient=self.gradient)
        return run_verdict.observed(kernel, state, new, model_args, model_kwargs)

