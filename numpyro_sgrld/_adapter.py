"""The NumPyro adapter shared by every stochastic-gradient kernel.

This is the only NumPyro-aware piece: it initialises the model, finds its subsample plates,
draws minibatch indices every step, asks the gradient estimator for :math:`\\nabla\\hat U` and
hands it to the kernel's transition (metric + integrator).
"""

import warnings
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro import handlers
from numpyro.distributions.transforms import biject_to
from numpyro.infer.initialization import init_to_uniform
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import (
    ParamInfo,
    constrain_fn,
    find_valid_initial_params,
    transform_fn,
)
from numpyro.util import identity, is_prng_key, not_jax_tracer

from numpyro_sgrld import _setup
from numpyro_sgrld._checks import integer, real
from numpyro_sgrld._tree import tree_all_finite, tree_norm, tree_where
from numpyro_sgrld.gradients import (
    control_variate,
    control_variate_estimate,
    find_mode,
    hessian_diagonal_estimate,
    minibatch_potential,
    value_and_grad_estimator,
)
from numpyro_sgrld.schedules import as_schedule
from numpyro_sgrld.sharding import check_divisible, index_sharding
from numpyro_sgrld.subsample import (
    as_jax_array,
    check_batching,
    draw_indices,
    full_batch,
    init_batching,
    placeholder_plates,
    trace_model,
)

__all__ = ["SGState", "SGMCMCKernel"]


class SGState(NamedTuple):
    """State of every stochastic-gradient kernel.

    - **i** – iteration counter (0 before the first step); the schedule is evaluated at ``i``.
    - **z** – the current position: a dict of unconstrained latent values.
    - **sampler_state** – the kernel's own state (metric statistics, momentum, ...).
    - **batch_state** – the minibatch sampler's state (``None`` when drawing with replacement).
    - **potential_energy** – the *minibatch estimate* :math:`\\hat U` at the position the last
      step started from (one step behind ``z``: it comes free with that step's gradient). It is
      an unbiased but noisy estimate of the full-data potential, not ``-log p(z | data)``.
    - **grad_norm** – Euclidean norm of that step's minibatch gradient :math:`\\nabla\\hat U`.
    - **step_size** – the step size :math:`h_i` used by the last step.
    - **diverging** – True when the last step was rejected: the potential or the gradient at
      its start was not finite, or the potential at the position it proposed (evaluated on
      the same minibatch), or the proposed position or kernel state, or the step size was not
      positive; ``z`` is then the previous position. (In draws collected by ``MCMC`` with
      ``thinning``, the recorded ``diverging`` is True when *any* step since the previous
      recorded draw was rejected.) (The checks are sums: a gradient whose squared norm, or a
      state whose entries sum, beyond the float range, |sum| > 3.4e38 in float32, counts as
      non-finite too. A kernel whose state is moving averages of the gradient keeps the
      state's update when only the new position was non-finite; see ``_accept``.)
    - **rng_key** – random key for the next step.
    - **num_rejected** – how many steps have been rejected since ``init`` (cumulative, whatever
      the ``thinning``): a chain stuck at a point whose gradient is not finite rejects every
      step from there on, and this count shows it.
    - **control_variate** – with ``control_variate`` set on the kernel, the
      :class:`~numpyro_sgrld.gradients.ControlVariate` (centre, full-data potential and
      gradient there, estimated distance of the centre from the mode); ``None`` otherwise.
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
    control_variate: Any = None


def _constraining_transforms(model_trace):
    """Constraining transforms of the latent sites, and whether postprocessing must replay the
    model (deterministic sites, or supports that depend on other latent values)."""
    transforms, replay = {}, False
    for name, site in model_trace.items():
        if site["type"] == "deterministic":
            replay = True
        elif site["type"] == "sample" and not site["is_observed"]:
            support = site["fn"].support
            transforms[name] = biject_to(support)
            for bound in ("lower_bound", "upper_bound"):
                if hasattr(support, bound) and not isinstance(
                    getattr(support, bound), (int, float)
                ):
                    replay = True
    return transforms, replay


def _check_temperature(temperature):
    return real(temperature, "temperature", low=0, hint="1 samples the posterior.")


def _check_num_data(num_data):
    if num_data is None:
        return None
    return integer(num_data, "num_data", hint="Or None (inferred from the model's plates).")


class SGMCMCKernel(MCMCKernel):
    """Base class of the stochastic-gradient kernels: a :class:`numpyro.infer.mcmc.MCMCKernel`.

    Subclasses define :meth:`_init_sampler` and :meth:`_transition`; everything NumPyro-related
    (initialisation, subsampling, chains, postprocessing) lives here.

    :param model: a NumPyro model (first positional, as for ``NUTS``). Every
        ``numpyro.plate(name, N, subsample_size=n)`` in it is redrawn every step.
    :param step_size: :math:`h`, a float > 0 or a schedule ``t -> h_t`` (see
        :mod:`numpyro_sgrld.schedules`). Required: SG kernels do not adapt it.
    :param potential_fn: instead of ``model``, a potential ``z -> U(z)`` on an unconstrained
        pytree; ``init_params`` is then required and minibatching is the caller's business.
    :param temperature: :math:`T` (1 samples the posterior; 0 gives stochastic gradient descent).
    :param num_data: :math:`N`, used by adaptive metrics to form the per-datum gradient
        :math:`\\bar g = \\nabla\\hat U / N`. Defaults to the size of the largest subsample
        plate, or 1 without one.
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
    :param control_variate: ``None`` (default: the plain minibatch gradient), ``"mode"`` or a
        dict of unconstrained latent values: use the control-variate gradient estimator
        (Baker et al. 2019) centred there (:func:`~numpyro_sgrld.gradients.control_variate_
        estimate`). ``"mode"`` finds the centre at initialisation with ``mode_steps`` Adam steps
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
    # True when the kernel's own state is moving averages of the gradient (or its square) and
    # counters, finite whenever the gradient's squared norm is: see :func:`_accept`.
    _state_averages_gradient = False

    def __init__(
        self,
        model=None,
        step_size=None,
        *,
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
    ):
        if (model is None) == (potential_fn is None):
            raise ValueError("Give exactly one of `model` or `potential_fn`.")
        if step_size is None:
            raise ValueError(
                "`step_size` is required (a float > 0 or a schedule): stochastic-gradient "
                "kernels do not adapt it. As a start, try 1/(N * largest Hessian eigenvalue "
                "per datum) and shrink it until the answer stops changing."
            )
        self._model = model
        self._potential_fn = potential_fn
        self._schedule = as_schedule(step_size)
        self._temperature = _check_temperature(temperature)
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
        self._control_variate = _check_control_variate(control_variate, model)
        self._mode_steps = integer(mode_steps, "mode_steps")
        if not isinstance(start_at_centre, (bool, np.bool_)):
            raise ValueError(f"`start_at_centre` must be True or False, got {start_at_centre!r}.")
        if start_at_centre and control_variate is None:
            raise ValueError(
                "`start_at_centre=True` starts the chain at the control-variate centre: also pass "
                "`control_variate='mode'` (or a dict of unconstrained latent values)."
            )
        self._start_at_centre = bool(start_at_centre)
        if not isinstance(check_proposal, (bool, np.bool_)):
            raise ValueError(f"`check_proposal` must be True or False, got {check_proposal!r}.")
        self._check_proposal = bool(check_proposal)
        self._plates = ()
        self._inferred_num_data = None
        self._checked_data = None
        self._prepared_model = None
        self._inv_transforms = None
        self._replay = False
        self._sample_fn = None
        self._jitted = {}

    # ------------------------------------------------------------------ subclass hooks
    def _init_sampler(self, key, z, curvature):
        """The kernel's own initial state at position ``z``; ``curvature()`` estimates the
        diagonal of the potential's Hessian there (for metrics with a ``warm_start``)."""
        raise NotImplementedError

    def _prepare(self):
        """Called by :meth:`init` once the plates (and so ``num_data``) are known."""

    def _transition(self, key, z, sampler_state, grad, grad_fn, step_size, i):
        """One step from ``z`` given the minibatch gradient ``grad``; returns
        ``(z, sampler_state)``. ``grad_fn(z)`` re-evaluates the gradient on the same minibatch
        (for correction terms)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ properties
    @property
    def model(self):
        return self._model

    @property
    def step_size(self):
        """The step-size schedule ``t -> h_t``."""
        return self._schedule

    @property
    def temperature(self):
        return self._temperature

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
        self._inv_transforms, self._replay = _constraining_transforms(model_trace)
        with _setup.evaluate_now():
            prototype = {
                name: transform.inv(model_trace[name]["value"])
                for name, transform in self._inv_transforms.items()
            }
        self._prototype = prototype
        self._check_data(model_args, model_kwargs)
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
        _setup.check_observed_shapes(model_trace)
        self._inferred_num_data = _setup.infer_num_data(model_trace, declared)
        self._model_trace = model_trace
        return model_trace

    def _check_data(self, model_args, model_kwargs):
        """Refuse plates larger than the data they index (JAX would clamp the indices)."""
        if not self._plates:
            return
        args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        if not _concrete((args, kwargs)):
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
        if not _concrete((args, kwargs)):
            return
        # a repeated run on the same (immutable) JAX arrays was checked already: skip the
        # full-data pass (NumPy data is converted anew on every run, so it is checked again)
        seen = (self._prepared_model, self._plates, jax.tree.leaves((args, kwargs)))
        if self._checked_data is not None and _same_objects(seen, self._checked_data):
            return
        z = z if _concrete(z) else self._prototype
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
        find = partial(_find_valid_batched, placeholder_plates(self._model), self._init_strategy)
        find = self._jit_once("find_valid", find, model_args, model_kwargs)
        z, valid = find(keys, prototype, model_args, model_kwargs)
        if not_jax_tracer(valid) and not bool(jnp.all(valid)):
            raise RuntimeError(
                "Cannot find valid initial parameters for every chain (the potential or its "
                "gradient is not finite at the values drawn by `init_strategy`). Check the "
                "model, or pass another `init_strategy` or `init_params`."
            )
        return z

    def _potential(self, model_args, model_kwargs):
        if self._model is None:
            return lambda z, idx: self._potential_fn(z)
        # NumPy arrays in the model arguments become JAX arrays, so that the model can index
        # them with the (traced) minibatch indices, e.g. ``X[idx]``.
        model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        return minibatch_potential(self._prepared_model, model_args, model_kwargs)

    def _draw_indices(self, key, batch_state):
        idx, batch_state = draw_indices(key, self._plates, batch_state)
        if self._index_sharding is not None:
            idx = {
                name: jax.lax.with_sharding_constraint(i, self._index_sharding)
                for name, i in idx.items()
            }
        return idx, batch_state

    def _init_one(self, z, rng_key, model_args, model_kwargs):
        key_next, key_sampler, key_batch, key_idx = random.split(rng_key, 4)
        key_curv = random.fold_in(key_sampler, 2)
        batch_state = init_batching(key_batch, self._plates, self._batching)
        idx, _ = self._draw_indices(key_idx, batch_state)
        potential = self._potential(model_args, model_kwargs)
        cv = None
        if self._control_variate is not None:
            cv = self._init_control_variate(z, key_sampler, model_args, model_kwargs)
            if self._start_at_centre:
                z = tree_where(tree_all_finite(cv.centre), cv.centre, z)
            value, grad, _ = control_variate_estimate(potential, cv, z, idx)
        else:
            value, grad = value_and_grad_estimator(potential)(z, idx)
        return SGState(
            i=jnp.zeros((), jnp.int32),
            z=z,
            sampler_state=self._init_sampler(
                key_sampler, z, partial(hessian_diagonal_estimate, potential, z, idx, key_curv)
            ),
            batch_state=batch_state,
            potential_energy=value,
            grad_norm=tree_norm(grad),
            step_size=jnp.asarray(self._schedule(0), jnp.result_type(float)),
            diverging=jnp.zeros((), bool),
            rng_key=key_next,
            num_rejected=jnp.zeros((), jnp.int32),
            control_variate=cv,
        )

    def _init_control_variate(self, z, key, model_args, model_kwargs):
        if isinstance(self._control_variate, dict):
            missing = set(z) - set(self._control_variate)
            if missing:
                raise ValueError(
                    f"`control_variate` lacks the latent sites {sorted(missing)}: give an "
                    "unconstrained value for every latent site, or use control_variate='mode'."
                )
            centre = {k: jnp.asarray(self._control_variate[k], jnp.result_type(z[k])) for k in z}
        else:
            potential = self._potential(model_args, model_kwargs)
            centre = find_mode(
                potential,
                z,
                random.fold_in(key, 1),
                lambda k: draw_indices(k, self._plates, None)[0],
                self._mode_steps,
            )
        args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        full = minibatch_potential(full_batch(self._prepared_model), args, kwargs)
        return control_variate(lambda c: full(c, {}), centre)

    def _sample_one(self, state, model_args, model_kwargs):
        potential = self._potential(model_args, model_kwargs)
        key_next, key_idx, key_step = random.split(state.rng_key, 3)
        idx, batch_state = self._draw_indices(key_idx, state.batch_state)
        grad_fn = jax.grad(partial(_swap_args, potential, idx))
        if state.control_variate is not None:
            value, grad, shift = control_variate_estimate(
                potential, state.control_variate, state.z, idx
            )
            grad_fn = partial(_shifted, grad_fn, shift)
        else:
            value, grad = value_and_grad_estimator(potential)(state.z, idx)
        step_size = jnp.asarray(self._schedule(state.i), jnp.result_type(float))
        z, sampler_state = self._transition(
            key_step, state.z, state.sampler_state, grad, grad_fn, step_size, state.i
        )
        grad_norm = tree_norm(grad)
        usable = (
            jnp.isfinite(grad_norm)
            & jnp.isfinite(value)
            & (step_size > 0)
            & jnp.isfinite(step_size)
        )
        # A step may not land where the density is zero (a factor wall, log of a negative
        # number): the potential at the proposal, on this minibatch, must be finite too.
        landed = jnp.isfinite(potential(z, idx)) if self._check_proposal else True
        ok, sampler_state = _accept(
            usable, z, landed, sampler_state, state.sampler_state, self._state_averages_gradient
        )
        return SGState(
            i=state.i + 1,
            z=tree_where(ok, z, state.z),
            sampler_state=sampler_state,
            batch_state=batch_state,
            potential_energy=value,
            grad_norm=grad_norm,
            step_size=step_size,
            diverging=~ok,
            rng_key=key_next,
            num_rejected=state.num_rejected + (~ok).astype(jnp.int32),
            control_variate=state.control_variate,
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
        elif _concrete(init_params):
            _setup.check_potential_init_params(
                init_params, rng_key.shape[0] if vectorized else None
            )
        check_divisible(self._plates, self._index_sharding)
        self._prepare()
        if vectorized:
            self._sample_fn = jax.vmap(self._sample_one, in_axes=(0, None, None))
            init_one = jax.vmap(self._init_one, in_axes=(0, 0, None, None))
        else:
            self._sample_fn = self._sample_one
            init_one = self._init_one
        init_one = self._jit_once(("init", vectorized), init_one, model_args, model_kwargs)
        state = init_one(init_params, rng_key, model_args, model_kwargs)
        if state.control_variate is not None:
            _warn_if_far_centre(state.control_variate)
        return state

    def sample(self, state, model_args, model_kwargs):
        return self._sample_fn(state, model_args, model_kwargs)

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
        return "h={:.2e} |grad|={:.2e} U_batch={:.4g}{}{}".format(
            float(state.step_size),
            float(state.grad_norm),
            float(state.potential_energy),
            f" rejected={rejected}" if rejected else "",
            " DIVERGING" if bool(state.diverging) else "",
        )


def _same_objects(a, b):
    """``(model, plates, leaves)`` of two runs: the same model, plates and array objects."""
    return (
        a[0] is b[0]
        and a[1] == b[1]
        and len(a[2]) == len(b[2])
        and all(x is y for x, y in zip(a[2], b[2]))
    )


def _concrete(tree):
    """Whether no leaf of ``tree`` is a tracer (values known now, not inside a trace)."""
    return all(not_jax_tracer(x) for x in jax.tree.leaves(tree))


def _find_valid_batched(model, init_strategy, keys, prototype, model_args, model_kwargs):
    (z, _, _), valid = find_valid_initial_params(
        keys,
        model,
        init_strategy=init_strategy,
        model_args=model_args,
        model_kwargs=model_kwargs,
        prototype_params=prototype,
    )
    return z, valid


def _check_control_variate(value, model):
    if value is None:
        return None
    if model is None:
        raise ValueError(
            "`control_variate` needs a model with subsample plates (it evaluates the full-data "
            "gradient at the centre); it is not available with `potential_fn`."
        )
    if value == "mode" or isinstance(value, dict):
        return value
    raise ValueError(
        f"`control_variate` must be None, 'mode' or a dict of unconstrained latent values, got "
        f"{value!r}."
    )


def _warn_if_far_centre(cv):
    r"""Warn when the control-variate centre's estimated distance from the mode
    (:func:`~numpyro_sgrld.gradients.centre_distance`, in posterior sds) exceeds
    :math:`\sqrt d`, d the number of unconstrained latent dimensions: for a near-Gaussian
    posterior the chain's own squared distance from the mode averages d (in the same units), so
    beyond that the centre's offset adds more to the estimator's variance than the chain's
    spread does."""
    if not not_jax_tracer(cv.distance):
        return
    dim = sum(np.size(x) for x in jax.tree.leaves(cv.centre)) // max(np.size(cv.distance), 1)
    worst = float(np.max(np.asarray(cv.distance)))
    if np.isnan(worst):
        warnings.warn(
            "The control-variate centre, or the full-data gradient or curvature there, is not "
            "finite: every gradient estimate will be non-finite too. Check the model at the "
            "centre; with control_variate='mode', try another `init_strategy` or `init_params` "
            "for the mode search.",
            UserWarning,
            stacklevel=2,
        )
    elif worst > np.sqrt(dim):
        warnings.warn(
            f"The control-variate centre is about {worst:.3g} posterior standard deviations "
            f"from the mode (estimated along the full-data gradient; more than sqrt(d) = "
            f"{np.sqrt(dim):.3g} for the d = {dim} latent dimensions): the gradient estimator "
            "stays unbiased but its variance is dominated by the centre's offset. With "
            "control_variate='mode', increase `mode_steps`; with a centre dict, pass a value "
            "closer to the mode.",
            UserWarning,
            stacklevel=2,
        )


def _accept(usable, z, landed, sampler_state, old_sampler_state, state_averages_gradient):
    r"""Whether a step is accepted, and the kernel state to keep.

    A step is rejected (``diverging``) when the potential, the gradient, its squared norm or
    the step size is not finite (``usable`` false: :math:`\|\nabla\hat U\|^2` is computed
    anyway for the ``grad_norm`` field, so this costs nothing), when the potential at the new
    position is not finite (``landed`` false: one forward pass on the same minibatch), or when
    the new position or kernel state is not finite
    (:func:`~numpyro_sgrld._tree.tree_all_finite`); a rejected step keeps the old position.

    When the kernel state is made of moving averages of :math:`\bar g` or
    :math:`\bar g\odot\bar g` (``state_averages_gradient``: RMSprop, Monge, Adam, the
    identity), a usable gradient cannot make it non-finite, since every new entry is a convex
    combination of a finite old entry and a finite statistic. Then the state is selected on
    ``usable`` alone, a scalar known before the update, so XLA fuses the selection into the
    update itself instead of reading the new state once more for a check and again for the
    selection (on the 478k parameters of the 784-400-400-10 MLP that is two passes over the
    state per step). The price: a step rejected only because its new *position* overflowed
    keeps its statistics update, which comes from a gradient evaluated at the position the
    chain stays at.
    """
    if state_averages_gradient:
        ok = usable & landed & tree_all_finite(z)
        return ok, tree_where(usable, sampler_state, old_sampler_state)
    ok = usable & landed & tree_all_finite(z) & tree_all_finite(sampler_state)
    return ok, tree_where(ok, sampler_state, old_sampler_state)


def _shifted(grad_fn, shift, z):
    return jax.tree.map(jnp.add, grad_fn(z), shift)


def _swap_args(potential, idx, z):
    return potential(z, idx)
