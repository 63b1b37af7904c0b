"""The NumPyro adapter: the one NumPyro-aware piece of a stochastic-gradient kernel.

:class:`SGMCMC` sets the model up (its plates, data checks, initial values), draws the
minibatch indices every step, asks the gradient estimator for :math:`\\nabla\\hat U`, builds
the step's :class:`~numpyro_sgrld.metrics.StepContext`, runs the composed step
(:func:`numpyro_sgrld._composition.transition_with_preconditioner`), applies the acceptance
policy (:mod:`numpyro_sgrld._acceptance`) and postprocesses draws.
"""

import sys
import warnings
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.mcmc import MCMC, MCMCKernel
from numpyro.infer.util import ParamInfo, constrain_fn, transform_fn
from numpyro.util import identity, is_prng_key, not_jax_tracer

from numpyro_sgrld import _setup, monitor
from numpyro_sgrld._acceptance import accept, usable
from numpyro_sgrld._checks import flag, integer, named_field_lookup, real
from numpyro_sgrld._compat import fast_sampling_loop_enabled
from numpyro_sgrld._composition import (
    build_sampler,
    init_sampler,
    transition_with_preconditioner,
)
from numpyro_sgrld._tree import tree_norm, tree_where
from numpyro_sgrld.adaptation import (
    CHAIN_AXIS,
    check_adaptation,
    init_step_size,
    phases,
    rayleigh,
    remeasure,
    stage_target,
    too_steep,
    update_step_size,
)
from numpyro_sgrld.gradients import (
    ControlVariate,
    GradientEstimator,
    Target,
    activate_control_variates,
    control_variates,
    hessian_diagonal_estimate,
    minibatch,
    minibatch_potential,
    minibatch_potential_with_aux,
    shared_flag,
    warmup_control_variates,
)
from numpyro_sgrld.integrators import langevin
from numpyro_sgrld.metrics import StepContext, learnt
from numpyro_sgrld.metrics import identity as identity_metric
from numpyro_sgrld.schedules import as_schedule
from numpyro_sgrld.sharding import check_divisible, index_sharding
from numpyro_sgrld.subsample import (
    as_jax_array,
    check_batching,
    draw_indices,
    full_batch,
    full_batch_opaque,
    init_batching,
    placeholder_plates,
    trace_model,
)
from numpyro_sgrld.verdict import biased, judgement
from numpyro_sgrld.warmup import (
    first_window_start,
    init_preconditioner,
    preconditioner_factor,
    preconditioner_scale,
    reset_preconditioner,
    update_preconditioner,
)
from numpyro_sgrld.warmup.schedule import final_window_start

__all__ = ["SGState", "SGMCMC"]


class _RunInfo(NamedTuple):
    """What the verdict on ``MCMC``'s own loop needs of the run: its warm-up and sampling
    steps, its chains, the judged flat coordinates and their ``(site, index)``, the chains'
    reports received so far, and the ``id`` of the ``MCMC``."""

    num_warmup: int
    num_samples: int
    num_chains: int
    index: Any
    names: list
    reports: list
    owner: int


def _calling_mcmc(depth=8):
    """The ``numpyro.infer.MCMC`` whose method called (within ``depth`` frames), or None."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, MCMC):
            return owner
        frame = frame.f_back
    return None


class SGState(NamedTuple):
    """State of every stochastic-gradient kernel.

    - **i** – iteration counter (0 before the first step); the schedule is evaluated at ``i``.
    - **z** – the current position: a dict of unconstrained latent values.
    - **sampler_state** – the composed kernel's own state
      (:class:`~numpyro_sgrld._composition.SamplerState`: metric, integrator, correction).
    - **batch_state** – the minibatch sampler's state (``None`` when drawing with replacement).
    - **potential_energy** – the *minibatch estimate* :math:`\\hat U` at the position the last
      step started from (one step behind ``z``: it comes free with that step's gradient). It is
      an unbiased but noisy estimate of the full-data potential, not ``-log p(z | data)``.
    - **grad_norm** – Euclidean norm of that step's gradient estimate :math:`\\nabla\\hat U`.
    - **step_size** – the step size :math:`h_i` used by the last step; with
      ``step_size=None`` the adapted step: during warm-up the one the next step will use, after
      it the frozen value (so ``post_warmup_state.step_size`` is the step sampling uses).
    - **diverging** – True when the last step was rejected (:mod:`numpyro_sgrld._acceptance`):
      the potential or the gradient at its start was not finite, or the potential at the
      position it proposed (evaluated on the same minibatch), or the proposed position or
      kernel state, or the step size was not positive; ``z`` is then the previous position. (In
      draws collected by ``MCMC`` with ``thinning``, the recorded ``diverging`` is True when
      *any* step since the previous recorded draw was rejected.) (The checks are sums: a
      gradient whose squared norm, or a state whose entries sum, beyond the float range,
      |sum| > 3.4e38 in float32, counts as non-finite too.)
    - **rng_key** – random key for the next step.
    - **num_rejected** – how many steps have been rejected since ``init`` (cumulative, whatever
      the ``thinning``): a chain stuck at a point whose gradient is not finite rejects every
      step from there on, and this count shows it.
    - **gradient_state** – the gradient estimator's state: ``None`` for the plain minibatch
      gradient; the :class:`~numpyro_sgrld.gradients.ControlVariate` (centre, full-data
      potential and gradient there, estimated distance of the centre from the mode) for control
      variates (also readable as ``control_variate``).
    - **adaptation** – with ``step_size=None``, the step-size adaptation's
      :class:`~numpyro_sgrld.adaptation.StepSizeState` (``None`` with a given step size).
    - **warmup** – with ``step_size=None`` and a metric learnt in warm-up
      (:func:`~numpyro_sgrld.metrics.learnt`, the default then, or the dense part of an
      adaptive preset's :func:`~numpyro_sgrld.metrics.whitened`), the current slow
      window's statistics (:class:`~numpyro_sgrld.warmup.PreconditionerWarmup`); ``None``
      otherwise. The learnt preconditioner itself is ``sampler_state.metric.scale`` (its
      diagonal) and ``sampler_state.metric.factor`` (a root of it, where it is dense).
    - **monitor** – when ``numpyro.infer.MCMC``'s own loop runs the kernel, the run's streaming
      moments for the verdict at its end (:class:`~numpyro_sgrld.monitor.RunMonitor`);
      ``None`` otherwise.
    """

    i: Any
    z: Any
    sampler_state: Any
    batch_state: Any
    potential_energy: Any
    grad_norm: Any
    step_size: Any
    diverging: Any
    rng_key: Any
    num_rejected: Any = 0
    gradient_state: Any = None
    adaptation: Any = None
    warmup: Any = None
    monitor: Any = None

    @property
    def control_variate(self):
        """The :class:`~numpyro_sgrld.gradients.ControlVariate`, or ``None`` without one."""
        state = self.gradient_state
        return state if isinstance(state, ControlVariate) else None

    # NumPyro's `extra_fields` look-up tries `state[name]` after `getattr` fails
    __getitem__ = named_field_lookup


def _check_temperature(temperature):
    return real(temperature, "temperature", low=0, hint="1 samples the posterior.")


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
    """

    sample_field = "z"
    default_fields = ("z", "diverging", "num_rejected")
    #: ``MCMC`` may run this kernel on :func:`numpyro_sgrld._loop.collect` once
    #: :func:`~numpyro_sgrld.enable_fast_sampling_loop` is on (:mod:`numpyro_sgrld._compat`).
    own_sampling_loop = True

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
        self._model = model
        self._potential_fn = potential_fn
        self._schedule = None if step_size is None else as_schedule(step_size)
        self._temperature = _check_temperature(temperature)
        self._target_bias = real(
            target_bias, "target_bias", low=0, low_open=True,
            hint="It is the relative inflation of the stationary variance that "
            "`step_size=None` allows (default 0.1).",
        )
        self._exploration = None  # cyclical SG-MCMC: (cycle length, exploration steps)
        self._cycle_start = 0  # the step at which the cycles begin: the warm-up's end if adapted
        self._num_data_arg = _check_num_data(num_data)
        self._batching = check_batching(batching)
        if not callable(init_strategy):
            raise ValueError(
                f"`init_strategy` must be a NumPyro init strategy (a callable such as "
                f"numpyro.infer.init_to_uniform, init_to_median or init_to_value(values=...)), "
                f"got {init_strategy!r}."
            )
        self._init_strategy = init_strategy
        self._index_sharding = index_sharding(data_parallel)
        self._gradient = _gradient_estimator(
            gradient, control_variate, mode_steps, start_at_centre, model
        )
        self._check_proposal = flag(check_proposal, "check_proposal")
        if metric is None:
            metric = learnt() if step_size is None else identity_metric()
        if step_size is None and gradient is None and control_variate is None and (
                model is not None):
            self._gradient = warmup_control_variates()
        integrator = langevin() if integrator is None else integrator
        self._sampler = build_sampler(metric, integrator, correction, correction_form)
        if step_size is None:
            check_adaptation(None, integrator, self._temperature)
        if metric.needs_aux and model is None:
            raise ValueError(
                f"The metric {metric.name!r} reads auxiliary values of the model's forward pass "
                f"({list(metric.needs_aux)}); a kernel built from `potential_fn` has none. Give a "
                "model that records them with numpyro_sgrld.auxiliary(name, value)."
            )
        self._plates = ()
        self._inferred_num_data = None
        self._checked_data = None
        self._prepared_model = None
        self._inv_transforms = None
        self._replay = False
        self._sample_fn = None
        self._axis_name = None  # CHAIN_AXIS with vectorised chains: the kernel's own vmap's
        self._jitted = {}
        self._run = None  # the run MCMC's own loop drives, for the verdict at its end

    # ------------------------------------------------------------------ properties
    @property
    def model(self):
        return self._model

    @property
    def step_size(self):
        """The step-size schedule ``t -> h_t``; ``None`` when it is adapted during warm-up
        (``step_size=None``: the adapted value is the state's ``step_size``)."""
        return self._schedule

    @property
    def adapts_step_size(self):
        """Whether the step size is chosen during warm-up (``step_size=None``)."""
        return self._schedule is None

    @property
    def temperature(self):
        return self._temperature

    @property
    def metric(self):
        """The :class:`~numpyro_sgrld.metrics.Metric`."""
        return self._sampler.metric

    @property
    def integrator(self):
        """The :class:`~numpyro_sgrld.integrators.Integrator`."""
        return self._sampler.integrator

    @property
    def gradient(self):
        """The :class:`~numpyro_sgrld.gradients.GradientEstimator`."""
        return self._gradient

    @property
    def correction(self):
        """``None``, ``"exact"`` or ``"hutchinson"``."""
        return self._sampler.correction

    @property
    def subsample_plates(self):
        """The subsample plates found in the model (set by :meth:`init`)."""
        return self._plates

    @property
    def num_data(self):
        """:math:`N`: the ``num_data`` argument; else the size of the largest plate given a
        ``subsample_size`` (also when it equals the plate's size, so that :math:`N` does not
        jump when the minibatch grows to the whole data set); else the size of the largest
        plate that holds an observed site (e.g. ``full_batch(model)``, or a model written
        without subsampling); else 1."""
        if self._num_data_arg is not None:
            return self._num_data_arg
        return self._inferred_num_data or 1

    def _context(self, step, aux):
        return StepContext(
            num_data=self.num_data,
            steps_per_epoch=_setup.steps_per_epoch(self._plates),
            step=step,
            aux=aux or None,
        )

    # ------------------------------------------------------------------ NumPyro interface
    def _setup_model(self, rng_key, init_params, model_args, model_kwargs):
        with _setup.evaluate_now():  # concrete even when MCMC runs init inside pmap
            model_trace = self._trace_model(model_args, model_kwargs)
        fixed = {
            name: site["value"]
            for name, site in model_trace.items()
            if site["type"] in ("param", "mutable")
        }
        self._prepared_model = (
            handlers.substitute(self._model, data=fixed) if fixed else self._model
        )
        self._inv_transforms, self._replay = _setup.constraining_transforms(model_trace)
        with _setup.evaluate_now():
            prototype = {
                name: transform.inv(model_trace[name]["value"])
                for name, transform in self._inv_transforms.items()
            }
        self._prototype = prototype
        self._check_data(model_args, model_kwargs)
        _setup.check_init_values(self._init_strategy, model_trace)
        if init_params is not None:
            init_params = init_params.z if isinstance(init_params, ParamInfo) else init_params
            num_chains = None if is_prng_key(rng_key) else rng_key.shape[0]
            _setup.check_init_params(init_params, prototype, num_chains)
            return init_params
        if is_prng_key(rng_key):
            z = self._batched_init_params(rng_key[None], prototype, model_args, model_kwargs)
            return jax.tree.map(lambda x: x[0], z)
        return self._batched_init_params(rng_key, prototype, model_args, model_kwargs)

    def _trace_model(self, model_args, model_kwargs):
        """Trace the model once with placeholder minibatches; find its subsample plates and
        :math:`N`; refuse what cannot be sampled (see :mod:`numpyro_sgrld._setup`)."""
        try:
            model_trace, self._plates, declared = trace_model(
                self._model, model_args, model_kwargs
            )
        except _setup.ModelSetupError:
            raise
        except Exception as e:
            e.add_note(
                "numpyro_sgrld: raised by the model when the kernel ran it once to find its "
                "sites (minibatch indices 0..n-1 for every subsample plate), with arguments "
                f"{_setup.describe_args(model_args, model_kwargs)}."
            )
            raise
        _setup.check_latent_sites(model_trace, self._plates)
        _setup.check_aux(model_trace, self.metric)
        _setup.check_observed_shapes(model_trace)
        self._inferred_num_data = _setup.infer_num_data(model_trace, declared)
        self._model_trace = model_trace
        return model_trace

    def _check_data(self, model_args, model_kwargs):
        """Refuse plates larger than the data they index (JAX would clamp the indices)."""
        if not self._plates:
            return
        args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        if not _setup.concrete((args, kwargs)):
            return
        with _setup.evaluate_now():  # MCMC calls init inside pmap for parallel chains
            fn = _setup.indices_in_bounds_fn(self._prepared_model, self._plates)
            fn = self._jit_once(("bounds", self._plates), fn, args, kwargs)
            error = fn(args, kwargs)
        _setup.raise_if_out_of_bounds(error, self._plates)

    def _check_observed(self, z, model_args, model_kwargs):
        """Refuse data points whose log-density is not finite at the initial position ``z``
        (one chain's; the model's prototype position when ``z`` is traced, as under
        ``pmap``), checked on the full data."""
        args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        if not _setup.concrete((args, kwargs)):
            return
        # a repeated run on the same (immutable) JAX arrays was checked already: skip the
        # full-data pass (NumPy data is converted anew on every run, so it is checked again)
        seen = (self._prepared_model, self._plates, jax.tree.leaves((args, kwargs)))
        if self._checked_data is not None and _setup.same_objects(seen, self._checked_data):
            return
        z = z if _setup.concrete(z) else self._prototype
        key = ("observed", self._plates, id(self._prepared_model))
        fn = self._jit_once(key, _setup.observed_ok_fn(self._prepared_model), args, kwargs)
        with _setup.evaluate_now():
            checked = fn(z, args, kwargs)
        _setup.raise_if_bad_data(checked, self._model_trace)
        self._checked_data = seen

    def _jit_once(self, name, fn, model_args, model_kwargs):
        """``fn`` jitted once per kernel (so a repeated ``MCMC.run`` with the same shapes does
        not trace or compile it again), when the model arguments are arrays; else ``fn``."""
        leaves = jax.tree.leaves((model_args, model_kwargs))
        if not all(isinstance(x, (jax.Array, np.ndarray)) for x in leaves):
            return fn
        if name not in self._jitted:
            self._jitted[name] = jax.jit(fn)
        return self._jitted[name]

    def _batched_init_params(self, keys, prototype, model_args, model_kwargs):
        """Initial positions, one per key: NumPyro's search for valid initial values
        (``find_valid_initial_params``, the one ``NUTS`` uses) on the model with placeholder
        minibatch indices, compiled once per kernel. (Called eagerly, it costs a few tenths of
        a second on every ``MCMC.run``; with a batch of keys NumPyro compiles it every time.)"""
        find = partial(
            _setup.find_valid_batched, placeholder_plates(self._model), self._init_strategy
        )
        find = self._jit_once("find_valid", find, model_args, model_kwargs)
        z, valid = find(keys, prototype, model_args, model_kwargs)
        if not_jax_tracer(valid) and not bool(jnp.all(valid)):
            raise RuntimeError(
                "Cannot find valid initial parameters for every chain (the potential or its "
                "gradient is not finite at the values drawn by `init_strategy`). Check the "
                "model, or pass another `init_strategy` or `init_params`."
            )
        return z

    def _target(self, model_args, model_kwargs):
        """The :class:`~numpyro_sgrld.gradients.Target` the gradient estimator evaluates."""
        if self._model is None:
            return Target(lambda z, idx: (self._potential_fn(z), {}), None, None)
        # NumPy arrays in the model arguments become JAX arrays, so that the model can index
        # them with the (traced) minibatch indices, e.g. ``X[idx]``.
        args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        full = minibatch_potential(full_batch_opaque(self._prepared_model), args, kwargs)
        return Target(
            minibatch_potential_with_aux(self._prepared_model, args, kwargs),
            lambda z: full(z, {}),
            lambda key: draw_indices(key, self._plates, None)[0],
            steps_per_epoch=_setup.steps_per_epoch(self._plates),
        )

    def _draw_indices(self, key, batch_state):
        idx, batch_state = draw_indices(key, self._plates, batch_state)
        if self._index_sharding is not None:
            idx = {
                name: jax.lax.with_sharding_constraint(i, self._index_sharding)
                for name, i in idx.items()
            }
        return idx, batch_state

    def _step_size(self, i, adaptation=None):
        """:math:`h_i`: the schedule's, or the adaptation's current step (for the cyclical
        presets, after warm-up, times the cosine of the cycle's position)."""
        if adaptation is None:
            return jnp.asarray(self._schedule(i), jnp.result_type(float))
        if self._exploration is None:
            return adaptation.step_size
        k = i - adaptation.num_warmup
        cosine = 0.5 * (jnp.cos(jnp.pi * (k % self._exploration[0]) / self._exploration[0]) + 1)
        return jnp.where(k >= 0, adaptation.step_size * cosine, adaptation.step_size)

    def _starts_cycle(self, i):
        """Whether step ``i`` is the first of a cyclical preset's cycle."""
        k = i - self._cycle_start
        return (k >= 0) & (k % self._exploration[0] == 0)

    def _adapt(self, state, est, target, idx, batch_state, key, preconditioner, ok):
        """The adaptation's state after this (warm-up) step: one power iteration at the
        step's starting point with a second minibatch's gradient (see
        :mod:`numpyro_sgrld.adaptation`)."""
        key, key_direction = random.split(key)
        idx2, _ = self._draw_indices(key, batch_state)
        grad2 = self._gradient.estimate(state.z, idx2, state.gradient_state, target).grad
        rho, y, stiffness = rayleigh(
            state.adaptation.direction, state.z, preconditioner, self._hvp(target, idx),
            est.grad, grad2, self.integrator.bias_weights, self._temperature,
            with_noise=phases(state.i, state.adaptation.num_warmup)[0],
            target=stage_target(state.i, state.adaptation.num_warmup, self._target_bias),
        )
        return self._capped(update_step_size(
            state.adaptation, state.i, rho, y, stiffness, ok, self._target_bias, key_direction,
        ))

    def _capped(self, adaptation):
        """The adaptation's state with its step at most the integrator's ``max_step``
        (:class:`~numpyro_sgrld.integrators.Integrator`)."""
        if self.integrator.max_step is None:
            return adaptation
        return adaptation._replace(
            step_size=jnp.minimum(adaptation.step_size,
                                  self.integrator.max_step(self._target_bias)))

    @property
    def _learns_metric(self):
        """Whether warm-up learns the metric (:func:`~numpyro_sgrld.metrics.learnt`, or the
        constant part of :func:`~numpyro_sgrld.metrics.whitened`, with ``step_size=None``)."""
        return self.adapts_step_size and (
            self.metric.name in ("learnt", "learnt_diagonal") or self.metric.restart is not None)

    def _learn(self, state, z, target, idx, est, adaptation, warmup, sampler_state, key):
        """A warm-up step of the learnt preconditioner (:mod:`numpyro_sgrld.warmup`): the new
        position ``z`` and a Hessian-diagonal estimate at the step's start join the window's
        statistics; at a window's end the metric becomes their estimate, the step is measured
        again in that geometry (:func:`~numpyro_sgrld.adaptation.remeasure`), the integrator
        starts afresh (its momentum belongs to the old geometry) and the next window begins."""
        i = target.step  # unbatched for vectorised chains: the branch below stays one
        key_curv, key_end = random.split(key)
        in_windows = (i >= first_window_start(adaptation.num_warmup)) & (
            i < final_window_start(adaptation.num_warmup))
        curvature = hessian_diagonal_estimate(
            lambda x, b: target.potential(x, b)[0], state.z, idx, key_curv
        )
        updated = update_preconditioner(warmup, z, curvature)
        warmup = jax.tree.map(lambda new, old: jnp.where(in_windows, new, old), updated, warmup)

        def window_end(adaptation, warmup, sampler_state, gradient_state):
            scale = preconditioner_scale(warmup, sampler_state.metric.scale)
            metric_state = sampler_state.metric._replace(scale=scale)
            if warmup.cross is not None:
                hessian = None
                if target.full_potential is not None:
                    flat, unravel = ravel_pytree(warmup.mean)
                    hessian = jax.hessian(lambda x: target.full_potential(unravel(x)))(flat)
                    if target.axis_name is not None:  # vectorised chains share one metric
                        hessian = jax.lax.pmean(hessian, target.axis_name)
                factor = preconditioner_factor(warmup, scale, sampler_state.metric.factor,
                                               hessian)
                diagonal = ravel_pytree(scale)[1](jnp.sum(factor * factor, axis=1))
                metric_state = metric_state._replace(scale=diagonal, factor=factor)
            if self.metric.restart is not None:  # the adaptive part, in the new coordinates
                metric_state = self.metric.restart(metric_state, z,
                                                   self._context(state.i, est.aux))
            preconditioner, _ = self.metric.update(est.grad, metric_state, z,
                                                   self._context(state.i, est.aux))
            if self._gradient.name == "warmup_control_variates":
                # from the second window on, the window's mean is the centre, if it pays
                last = shared_flag(i + 1 > warmup.window_ends[0], target.axis_name)
                root = preconditioner.noise_transpose or preconditioner.noise
                gradient_state = jax.lax.cond(
                    last,
                    lambda g: activate_control_variates(
                        g, warmup.mean, z, target,
                        lambda k: self._draw_indices(k, None)[0], root,
                        random.fold_in(key_end, 2)),
                    lambda g: g,
                    gradient_state,
                )

            def gradient(k):
                return self._gradient.estimate(z, self._draw_indices(k, None)[0],
                                               gradient_state, target).grad

            adaptation = self._capped(remeasure(
                adaptation, key_end, z, preconditioner, self._hvp(target, idx), gradient,
                self.integrator.bias_weights, self._temperature, self._target_bias, i,
            ))
            integrator_state = self.integrator.init(z, random.fold_in(key_end, 1),
                                                    adaptation.step_size, self._temperature)
            sampler_state = sampler_state._replace(metric=metric_state,
                                                   integrator=integrator_state)
            return adaptation, reset_preconditioner(warmup), sampler_state, gradient_state

        # one flag for the lockstep chains (the window ends are per-chain state): a batched
        # predicate would run the window's end, a full-data Hessian, on every warm-up step
        ends = shared_flag(jnp.any(i + 1 == warmup.window_ends), target.axis_name)
        return jax.lax.cond(ends, window_end, lambda *a: a,
                            adaptation, warmup, sampler_state, est.state)

    def _hvp(self, target, idx):
        """``(z, v) -> H v`` of the minibatch potential on ``idx``."""
        grad = jax.grad(lambda x: target.potential(x, idx)[0])
        return lambda z, v: jax.jvp(grad, (z,), (v,))[1]

    def _init_adaptation(self, key, z, est, sampler_state, target, idx, num_warmup):
        """The step-size adaptation's state at the initial position (``step_size=None``)."""
        preconditioner, _ = self.metric.update(
            est.grad, sampler_state.metric, z, self._context(0, est.aux)
        )

        def gradient(k):
            return self._gradient.estimate(z, self._draw_indices(k, None)[0], est.state,
                                           target).grad

        return self._capped(init_step_size(
            key, z, preconditioner, self._hvp(target, idx), gradient,
            self.integrator.bias_weights, self._temperature, self._target_bias, num_warmup,
        ))

    def _init_one(self, z, rng_key, model_args, model_kwargs, num_warmup=0):
        key_next, key_sampler, key_batch, key_idx = random.split(rng_key, 4)
        batch_state = init_batching(key_batch, self._plates, self._batching)
        idx, _ = self._draw_indices(key_idx, batch_state)
        target = self._target(model_args, model_kwargs)
        gradient_state = self._gradient.init(z, key_sampler, target)
        if self._gradient.start is not None:
            z = self._gradient.start(gradient_state, z)
        est = self._gradient.estimate(z, idx, gradient_state, target)
        curvature = partial(
            hessian_diagonal_estimate,
            lambda x, b: target.potential(x, b)[0],
            z,
            idx,
            random.fold_in(key_sampler, 2),
        )
        context = self._context(0, est.aux)
        adaptation = None
        if self.adapts_step_size:
            sampler_state = init_sampler(
                self._sampler, key_sampler, z, curvature, context, 1.0, self._temperature
            )
            adaptation = self._init_adaptation(
                random.fold_in(key_sampler, 3), z, est, sampler_state, target, idx, num_warmup
            )
        step_size = self._step_size(0, adaptation)
        sampler_state = init_sampler(
            self._sampler, key_sampler, z, curvature, context, step_size, self._temperature,
        )
        warmup = None
        if self._learns_metric:
            dense = getattr(sampler_state.metric, "factor", None) is not None
            if dense or self.metric.restart is None:  # whitened: nothing to learn when not dense
                warmup = init_preconditioner(z, num_warmup, dense)
        return SGState(
            i=jnp.zeros((), jnp.int32),
            z=z,
            sampler_state=sampler_state,
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
        )

    def _sample_one(self, state, model_args, model_kwargs, adapting=None, step=None):
        if self._exploration is not None:
            state = self._explore(state, model_args, model_kwargs, step)
            step = None if step is None else step + self._exploration[1] * self._starts_cycle(
                step)
        return self._transition(state, model_args, model_kwargs, adapting, step,
                                self._temperature)

    def _explore(self, state, model_args, model_kwargs, step=None):
        """Cyclical SG-MCMC's exploration stage (Zhang et al. 2020): at the first step of
        every cycle of ``L`` steps, its first ``E`` steps at temperature 0 (stochastic
        gradient descent, or with momentum for SGHMC), inside this one transition, so that the
        state the transition returns, the draw, is a sampling-stage state. ``step`` is the
        transition's index, unbatched for vectorised chains: the branch stays a branch."""
        explore = self._exploration[1]
        i = state.i if step is None else step

        def run(state):
            def body(j, s):
                return self._transition(s, model_args, model_kwargs, None,
                                        None if step is None else step + j, 0.0)

            return jax.lax.fori_loop(0, explore, body, state)

        return jax.lax.cond(self._starts_cycle(i), run, lambda s: s, state)

    def _transition(self, state, model_args, model_kwargs, adapting, step, temperature):
        target = self._target(model_args, model_kwargs)
        # the transition's index, unbatched for vectorised chains (a branch on it stays one)
        target = target._replace(step=state.i if step is None else step,
                                 axis_name=self._axis_name)
        key_next, key_idx, key_step, key_adapt, key_learn = random.split(state.rng_key, 5)
        idx, batch_state = self._draw_indices(key_idx, state.batch_state)
        est = self._gradient.estimate(state.z, idx, state.gradient_state, target)
        step_size = self._step_size(state.i, state.adaptation)
        if state.adaptation is not None and adapting is None:  # (vectorised: given, unbatched)
            adapting = state.i < state.adaptation.num_warmup
        z, sampler_state, preconditioner = transition_with_preconditioner(
            self._sampler, key_step, state.z, state.sampler_state, est.grad, est.oracle,
            step_size, temperature, self._context(state.i, est.aux),
        )
        grad_norm = tree_norm(est.grad)
        # A step may not land where the density is zero (a factor wall, log of a negative
        # number): the potential at the proposal, on this minibatch, must be finite too.
        landed = True
        if self._check_proposal:
            value = target.potential(z, idx)[0]
            landed = jnp.isfinite(value)
            if state.adaptation is not None:
                start = est.value if est.batch_value is None else est.batch_value
                landed = landed & ~(adapting & too_steep(start, value, self._temperature))
        ok, sampler_state = accept(
            usable(est.value, grad_norm, step_size), z, landed, sampler_state,
            state.sampler_state, self._sampler.state_averages_gradient,
        )
        adaptation = state.adaptation
        if adaptation is not None:
            adaptation = jax.lax.cond(
                adapting,
                lambda: self._adapt(state, est, target, idx, batch_state,
                                    key_adapt, preconditioner, ok),
                lambda: adaptation,
            )
            if self.integrator.rescale is not None:  # while the adaptation moves the step
                ratio = jnp.where(adapting, adaptation.step_size / step_size, 1.0)
                sampler_state = sampler_state._replace(
                    integrator=self.integrator.rescale(sampler_state.integrator, ratio))
            # the next step's: after warm-up the frozen one (a cyclical preset's, its cosine)
            step_size = self._step_size(state.i + 1, adaptation)
        z = tree_where(ok, z, state.z)
        warmup, gradient_state = state.warmup, est.state
        if warmup is not None:
            adaptation, warmup, sampler_state, gradient_state = jax.lax.cond(
                adapting,
                lambda: self._learn(state, z, target, idx, est, adaptation, warmup,
                                    sampler_state, key_learn),
                lambda: (adaptation, warmup, sampler_state, gradient_state),
            )
            step_size = self._step_size(state.i + 1, adaptation)
        return SGState(
            i=state.i + 1,
            z=z,
            sampler_state=sampler_state,
            batch_state=batch_state,
            potential_energy=est.value,
            grad_norm=grad_norm,
            step_size=step_size,
            diverging=~ok,
            rng_key=key_next,
            num_rejected=state.num_rejected + (~ok).astype(jnp.int32),
            gradient_state=gradient_state,
            adaptation=adaptation,
            warmup=warmup,
            monitor=state.monitor,
        )

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
            init_params = self._setup_model(key_init, init_params, model_args, model_kwargs)
            first = init_params if not vectorized else jax.tree.map(lambda x: x[0], init_params)
            self._check_observed(first, model_args, model_kwargs)
        elif init_params is None:
            raise ValueError(
                "`init_params` must be given when the kernel is built from `potential_fn`: "
                "pass `init_params=` (an unconstrained pytree) to `MCMC.run`."
            )
        elif _setup.concrete(init_params):
            _setup.check_potential_init_params(
                init_params, rng_key.shape[0] if vectorized else None
            )
        check_divisible(self._plates, self._index_sharding)
        if self.adapts_step_size:
            check_adaptation(num_warmup, self.integrator, self._temperature)
        self._cycle_start = int(num_warmup) if self.adapts_step_size else 0
        self._axis_name = CHAIN_AXIS if vectorized else None
        if vectorized:
            self._sample_fn = partial(_sample_vectorized, self._sample_one)
            init_one = jax.vmap(self._init_one, in_axes=(0, 0, None, None, None))
        else:
            self._sample_fn = self._sample_one
            init_one = self._init_one
        init_one = self._jit_once(("init", vectorized), init_one, model_args, model_kwargs)
        state = init_one(
            init_params, rng_key, model_args, model_kwargs, jnp.asarray(num_warmup, jnp.int32)
        )
        self._check_initial_density(state, vectorized, model_args, model_kwargs)
        if self._gradient.check is not None:
            self._gradient.check(state.gradient_state)
        return self._arm_verdict(state, num_warmup, vectorized)

    def _arm_verdict(self, state, num_warmup, vectorized):
        """With ``MCMC``'s own loop driving the kernel: moments in the state for the verdict
        at the run's end (:mod:`numpyro_sgrld.monitor`). ``MCMC`` passes the run's length to
        no kernel, so it is read from the ``MCMC`` that called :meth:`init`; without one, or
        with the kernels' own loop (which judges the kept draws), or for a run of fewer than
        two steps a batch, nothing is kept."""
        previous, self._run = self._run, None
        mcmc = _calling_mcmc()
        if (mcmc is None or fast_sampling_loop_enabled() or not _setup.concrete(state.i)
                or mcmc.num_samples < 2 * monitor.BATCHES):
            return state
        first = jax.tree.map(lambda x: x[0], state.z) if vectorized else state.z
        flat, _ = ravel_pytree(first)
        index = monitor.coordinates(flat.size)
        names = [(name, j) for name, x in sorted(first.items())
                 for j in range(int(np.size(x)))] if isinstance(first, dict) else [
                     ("z", j) for j in range(flat.size)]
        # MCMC's sequential chains each call init: their reports join the earlier chains'
        reports = previous.reports if previous is not None and previous.owner == id(mcmc) else []
        self._run = _RunInfo(int(num_warmup), int(mcmc.num_samples), int(mcmc.num_chains),
                             index, [names[k] for k in index], reports, id(mcmc))
        fresh = monitor.init_monitor(index.size, flat.dtype)
        if vectorized:
            fresh = jax.tree.map(lambda x: jnp.broadcast_to(x, (state.i.shape[0], *x.shape)),
                                 fresh)
        return state._replace(monitor=fresh)

    def _observe(self, state, new):
        """The new state with the run's moments updated; on the run's last step, the moments
        go to the host for the verdict (:meth:`_report`)."""
        run = self._run
        vectorized = jnp.ndim(new.i) == 1
        # the transition's index (not the step counter i: a cyclical preset's exploration
        # runs several steps in one transition)
        t = state.monitor.transitions[0] if vectorized else state.monitor.transitions
        offset = t - run.num_warmup
        offset = jnp.where(offset >= 0, offset % run.num_samples, -1)
        index = jnp.asarray(run.index)

        def update(m, z, rejected, diverging):
            x = ravel_pytree(z)[0][index]
            return monitor.update_monitor(m, x, offset, run.num_samples,
                                          rejected - diverging.astype(jnp.int32))

        if vectorized:
            update = jax.vmap(update)
        moments = update(state.monitor, new.z, new.num_rejected, new.diverging)
        jax.lax.cond(
            offset == run.num_samples - 1,
            lambda: jax.debug.callback(self._report, moments.sums, moments.squares,
                                       moments.origin, new.num_rejected - moments.rejected,
                                       new.step_size),
            lambda: None,
        )
        return new._replace(monitor=moments)

    def _report(self, sums, squares, origin, rejected, step_size):
        """Host side: collect the chains' moments; once every chain of the run has reported,
        warn with the :func:`~numpyro_sgrld.verdict.judgement` when the draws cannot be
        trusted or the metric's bias is uncorrected."""
        run = self._run
        if run is None:
            return
        sums, squares, origin = (np.asarray(x) for x in (sums, squares, origin))
        if sums.ndim == 2:
            sums, squares, origin = sums[None], squares[None], origin[None]
        run.reports.append((sums, squares, origin, np.atleast_1d(rejected),
                            np.atleast_1d(step_size)))
        if sum(r[0].shape[0] for r in run.reports) < run.num_chains:
            return
        sums, squares, origin, rejected, step = (np.concatenate(x) for x in zip(*run.reports))
        run.reports.clear()
        rhat, ess = monitor.judge(sums, squares, origin, run.num_samples)
        v = judgement(rhat, ess, run.names, int(rejected.sum()), run.num_samples, self, step)
        if not v.trusted or biased(v):
            # sent from XLA's host callback: no user frame to point at
            warnings.warn_explicit(str(v), UserWarning, "numpyro_sgrld verdict", 0)

    def sample(self, state, model_args, model_kwargs):
        new = self._sample_fn(state, model_args, model_kwargs)
        if state.monitor is not None and self._run is not None:
            new = self._observe(state, new)
        return new

    def _check_initial_density(self, state, vectorized, model_args, model_kwargs):
        """Refuse an initial position where the log-density is -inf (the potential +inf):
        every step from there would be rejected and every draw would repeat it. (A NaN
        potential is left to the acceptance policy, which flags each rejected step.)"""
        value = state.potential_energy
        if not _setup.concrete(value):
            return
        finite = ~np.isposinf(np.asarray(value))
        if np.all(finite):
            return
        chain = int(np.flatnonzero(~finite.ravel())[0])
        z = jax.tree.map(lambda x: x[chain], state.z) if vectorized else state.z
        where = ""
        if self._model is not None:
            with _setup.evaluate_now():
                sites = _setup.nonfinite_sites(placeholder_plates(self._prepared_model),
                                               model_args, model_kwargs, z)
            where = f" at the sites {sites}" if sites else ""
        raise ValueError(
            f"The log-density is -inf at the initial position"
            f"{f' of chain {chain}' if vectorized else ''}{where} (potential "
            f"{float(np.asarray(value).ravel()[chain])}): every step would be rejected there. "
            "Give `init_params` (unconstrained values) or an init strategy "
            "(e.g. numpyro.infer.init_to_median) where every site has a positive density."
        )

    def postprocess_fn(self, model_args, model_kwargs):
        """Constrained values (and deterministic sites, computed on the *full* data, as
        ``NUTS(full_batch(model))`` returns them)."""
        if self._model is None:
            return identity
        model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs or {}))
        if self._replay:
            return partial(
                constrain_fn,
                full_batch(self._prepared_model),
                model_args,
                model_kwargs,
                return_deterministic=True,
            )
        return partial(transform_fn, self._inv_transforms)

    def get_diagnostics_str(self, state):
        rejected = int(state.num_rejected)
        adapting = state.adaptation is not None and int(state.i) < int(
            state.adaptation.num_warmup
        )
        return "h={:.2e}{} |grad|={:.2e} U_batch={:.4g}{}{}".format(
            float(state.step_size),
            " (adapting)" if adapting else "",
            float(state.grad_norm),
            float(state.potential_energy),
            f" rejected={rejected}" if rejected else "",
            " DIVERGING" if bool(state.diverging) else "",
        )


def _sample_vectorized(sample_one, state, model_args, model_kwargs):
    """``sample_one`` over a batch of chains. The chains step in lockstep, so whether they
    are in warm-up is one unbatched flag: the adaptation's ``lax.cond`` stays a branch (under
    ``vmap`` a batched predicate would run both branches on every step)."""
    adapting = None
    if state.adaptation is not None:
        adapting = state.i[0] < state.adaptation.num_warmup[0]
    return jax.vmap(partial(sample_one, adapting=adapting, step=state.i[0]),
                    in_axes=(0, None, None), axis_name=CHAIN_AXIS)(
        state, model_args, model_kwargs
    )

