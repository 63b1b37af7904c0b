"""What :class:`~numpyro_sgrld.SGMCMC` uses besides its methods: its arguments' checks, the
gradient estimator its arguments name, the :class:`~numpyro_sgrld.gradients.Target` a step
evaluates, a chain's first state, the minibatch draw (sharded with ``data_parallel``),
vectorised chains' lockstep transition and the progress bar's line."""

from functools import partial

import jax
import jax.numpy as jnp
from jax import random

from numpyro_sgrld import equipartition
from numpyro_sgrld._checks import flag, integer, real
from numpyro_sgrld._composition import init_sampler
from numpyro_sgrld._potentials import minibatch_potential, minibatch_potential_with_aux
from numpyro_sgrld._setup import steps_per_epoch
from numpyro_sgrld._state import SGState
from numpyro_sgrld._step import context
from numpyro_sgrld._traits import trait
from numpyro_sgrld._tree import tree_norm
from numpyro_sgrld.gradients import (
    GradientEstimator,
    Target,
    control_variates,
    hessian_diagonal_estimate,
    minibatch,
)
from numpyro_sgrld.metrics import Aux
from numpyro_sgrld.subsample import as_jax_array, draw_indices, full_batch_opaque, init_batching
from numpyro_sgrld.warmup import steps as warmup_steps
from numpyro_sgrld.warmup.adaptation import CHAIN_AXIS

__all__ = ["check_scalars", "check_init_strategy", "check_aux", "check_num_data",
           "gradient_estimator", "target", "init_state", "draw", "sample_vectorized",
           "diagnostics_str"]


def check_scalars(temperature, target_bias):
    """``(temperature, target_bias)``, checked."""
    return (real(temperature, "temperature", low=0, hint="1 samples the posterior."),
            real(target_bias, "target_bias", low=0, low_open=True,
                 hint="It is the relative inflation of the stationary variance that "
                 "`step_size=None` allows (default 0.1)."))


def check_init_strategy(init_strategy):
    """``init_strategy``, checked to be a NumPyro init strategy."""
    if not callable(init_strategy):
        raise ValueError(
            f"`init_strategy` must be a NumPyro init strategy (a callable such as "
            f"numpyro.infer.init_to_uniform, init_to_median or init_to_value(values=...)), "
            f"got {init_strategy!r}."
        )
    return init_strategy


def check_aux(metric, model):
    """Refuse a metric that reads the forward pass's auxiliary values without a model."""
    reads = trait(metric, Aux)
    if reads is not None and model is None:
        raise ValueError(
            f"The metric {metric.name!r} reads auxiliary values of the model's forward pass "
            f"({list(reads.names)}); a kernel built from `potential_fn` has none. Give a "
            "model that records them with numpyro_sgrld.auxiliary(name, value)."
        )


def check_num_data(num_data):
    """``num_data`` checked: ``None`` or a positive integer."""
    if num_data is None:
        return None
    return integer(num_data, "num_data", hint="Or None (inferred from the model's plates).")


def gradient_estimator(gradient, control_variate, mode_steps, start_at_centre, model):
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


def target(setup, model, potential_fn, axis_name, model_args, model_kwargs, step=None):
    """The :class:`~numpyro_sgrld.gradients.Target` the gradient estimator evaluates: the
    model's minibatch potential from its ``setup``
    (:class:`~numpyro_sgrld._model_host.ModelSetup`), or ``potential_fn`` without a model, at
    transition ``step`` (unbatched for vectorised chains: a branch on it stays one)."""
    if model is None:
        return Target(lambda z, idx: (potential_fn(z), {}), None, None, step=step,
                      axis_name=axis_name)
    # NumPy arrays in the model arguments become JAX arrays, so that the model can index
    # them with the (traced) minibatch indices, e.g. ``X[idx]``.
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    full = minibatch_potential(full_batch_opaque(setup.prepared), args, kwargs)
    return Target(
        minibatch_potential_with_aux(setup.prepared, args, kwargs),
        lambda z: full(z, {}),
        lambda key: draw_indices(key, setup.plates, None)[0],
        steps_per_epoch=steps_per_epoch(setup.plates),
        step=step,
        axis_name=axis_name,
    )


def init_state(spec, target, z, rng_key, num_warmup, plates, batching, adapts,
               proposal_next_step, first_sampling_step):
    """One chain's first :class:`~numpyro_sgrld._state.SGState` at the unconstrained
    position ``z``: the batching state, the gradient estimator's state (which may move the
    start, ``gradient.start``), the estimate there, the composed sampler's state, and with
    ``adapts`` (``step_size=None``) the warm-up's states
    (:func:`~numpyro_sgrld.warmup.steps.init_warmup`). ``proposal_next_step``: whether the
    next step checks the proposal (the state holds one); ``first_sampling_step``: the step
    counter where the equipartition check starts counting."""
    key_next, key_sampler, key_batch, key_idx = random.split(rng_key, 4)
    batch_state = init_batching(key_batch, plates, batching)
    idx, _ = spec.draw(key_idx, batch_state)
    gradient = spec.gradient
    gradient_state = gradient.init(z, key_sampler, target)
    if gradient.start is not None:
        z = gradient.start(gradient_state, z)
    est = gradient.estimate(z, idx, gradient_state, target)
    curvature = partial(hessian_diagonal_estimate, lambda x, b: target.potential(x, b)[0],
                        z, idx, random.fold_in(key_sampler, 2))
    start = partial(init_sampler, spec.sampler, key_sampler, z, curvature,
                    context(spec, 0, est.aux))
    adaptation = warmup = None
    if adapts:
        adaptation, warmup = warmup_steps.init_warmup(
            spec, random.fold_in(key_sampler, 3), z, est,
            start(1.0, spec.temperature), target, idx, num_warmup)
    step_size = spec.step_size(0, adaptation)
    return SGState(
        i=jnp.zeros((), jnp.int32),
        z=z,
        sampler_state=start(step_size, spec.temperature),
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
        proposal=z if proposal_next_step else None,
        equipartition=equipartition.init(z, first_sampling_step),
        configurational_temperature=jnp.zeros((), step_size.dtype),
    )


def diagnostics_str(state):
    """The progress bar's line for ``state``: the step (and whether it is still adapted), the
    gradient's norm, the minibatch potential, rejections and divergence."""
    adapting = state.adaptation is not None and int(state.i) < int(
        state.adaptation.num_warmup)
    rejected = int(state.num_rejected)
    return (f"h={float(state.step_size):.2e}{' (adapting)' if adapting else ''} "
            f"|grad|={float(state.grad_norm):.2e} U_batch={float(state.potential_energy):.4g}"
            f"{f' rejected={rejected}' if rejected else ''}"
            f"{' DIVERGING' if bool(state.diverging) else ''}")


def draw(plates, sharding, key, batch_state):
    """A minibatch's indices for every subsample plate, sharded across devices with
    ``data_parallel``: ``(idx, batch_state)``."""
    idx, batch_state = draw_indices(key, plates, batch_state)
    if sharding is not None:
        idx = {name: jax.lax.with_sharding_constraint(i, sharding) for name, i in idx.items()}
    return idx, batch_state


def sample_vectorized(sample_one, state, model_args, model_kwargs, adapting=None,
                       gradient=None):
    """``sample_one`` over a batch of chains. The chains step in lockstep, so whether they
    are in warm-up is one unbatched flag: the adaptation's ``lax.cond`` stays a branch (under
    ``vmap`` a batched predicate would run both branches on every step). ``adapting`` and
    ``gradient`` as in the kernel's one-chain transition (``adapting=None``: from the state)."""
    if adapting is None and state.adaptation is not None:
        adapting = state.i[0] < state.adaptation.num_warmup[0]
    return jax.vmap(partial(sample_one, adapting=adapting, step=state.i[0], gradient=gradient),
                    in_axes=(0, None, None), axis_name=CHAIN_AXIS)(
        state, model_args, model_kwargs
    )
