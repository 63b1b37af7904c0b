r"""The warm-up around the step (``step_size=None``): the step-size adaptation's update on
every warm-up step (:func:`adapt`), the learnt preconditioner's statistics and, at each slow
window's end, the new metric, the control variates' activation and the step measured again
in the new geometry (:func:`learn`), and the adaptation's state at the start
(:func:`init_adaptation`). Each takes the kernel for its pieces (metric, integrator,
gradient estimator, temperature, minibatch draws); the step itself is
:meth:`numpyro_sgrld.SGMCMC.sample`'s transition. What the warm-up does, in one paragraph:
``docs/step_size.md``."""

import jax
import jax.numpy as jnp
from jax import random
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.adaptation import (
    init_step_size,
    phases,
    rayleigh,
    remeasure,
    stage_target,
    update_step_size,
)
from numpyro_sgrld.gradients import (
    activate_control_variates,
    hessian_diagonal_estimate,
    shared_flag,
)
from numpyro_sgrld.warmup.preconditioner import (
    preconditioner_factor,
    preconditioner_scale,
    reset_preconditioner,
    update_preconditioner,
)
from numpyro_sgrld.warmup.schedule import final_window_start, first_window_start

__all__ = ["adapt", "capped", "hvp", "init_adaptation", "learn", "learns_metric"]


def adapt(kernel, state, est, target, idx, batch_state, key, preconditioner, ok):
    """The adaptation's state after this (warm-up) step: one power iteration at the
    step's starting point with a second minibatch's gradient (see
    :mod:`numpyro_sgrld.adaptation`)."""
    key, key_direction = random.split(key)
    idx2, _ = kernel._draw_indices(key, batch_state)
    grad2 = kernel._gradient.estimate(state.z, idx2, state.gradient_state, target).grad
    rho, y, stiffness = rayleigh(
        state.adaptation.direction, state.z, preconditioner, hvp(target, idx),
        est.grad, grad2, kernel.integrator.bias_weights, kernel._temperature,
        with_noise=phases(state.i, state.adaptation.num_warmup)[0],
        target=stage_target(state.i, state.adaptation.num_warmup, kernel._target_bias),
    )
    return capped(kernel, update_step_size(
        state.adaptation, state.i, rho, y, stiffness, ok, kernel._target_bias, key_direction,
    ))


def capped(kernel, adaptation):
    """The adaptation's state with its step at most the integrator's ``max_step``
    (:class:`~numpyro_sgrld.integrators.Integrator`)."""
    if kernel.integrator.max_step is None:
        return adaptation
    return adaptation._replace(
        step_size=jnp.minimum(adaptation.step_size,
                              kernel.integrator.max_step(kernel._target_bias)))


def learns_metric(kernel):
    """Whether warm-up learns the metric (:func:`~numpyro_sgrld.metrics.learnt`, or the
    constant part of :func:`~numpyro_sgrld.metrics.whitened`, with ``step_size=None``)."""
    return kernel.adapts_step_size and (
        kernel.metric.name in ("learnt", "learnt_diagonal") or kernel.metric.restart is not None)


def learn(kernel, state, z, target, idx, est, adaptation, warmup, sampler_state, key):
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
        if kernel.metric.restart is not None:  # the adaptive part, in the new coordinates
            metric_state = kernel.metric.restart(metric_state, z,
                                               kernel._context(state.i, est.aux))
        preconditioner, _ = kernel.metric.update(est.grad, metric_state, z,
                                               kernel._context(state.i, est.aux))
        if kernel._gradient.name == "warmup_control_variates":
            # from the second window on, the window's mean is the centre, if it pays
            last = shared_flag(i + 1 > warmup.window_ends[0], target.axis_name)
            root = preconditioner.noise_transpose or preconditioner.noise
            gradient_state = jax.lax.cond(
                last,
                lambda g: activate_control_variates(
                    g, warmup.mean, z, target,
                    lambda k: kernel._draw_indices(k, None)[0], root,
                    random.fold_in(key_end, 2)),
                lambda g: g,
                gradient_state,
            )

        def gradient(k):
            return kernel._gradient.estimate(z, kernel._draw_indices(k, None)[0],
                                           gradient_state, target).grad

        adaptation = capped(kernel, remeasure(
            adaptation, key_end, z, preconditioner, hvp(target, idx), gradient,
            kernel.integrator.bias_weights, kernel._temperature, kernel._target_bias, i,
        ))
        integrator_state = kernel.integrator.init(z, random.fold_in(key_end, 1),
                                                adaptation.step_size, kernel._temperature)
        sampler_state = sampler_state._replace(metric=metric_state,
                                               integrator=integrator_state)
        return adaptation, reset_preconditioner(warmup), sampler_state, gradient_state

    # one flag for the lockstep chains (the window ends are per-chain state): a batched
    # predicate would run the window's end, a full-data Hessian, on every warm-up step
    ends = shared_flag(jnp.any(i + 1 == warmup.window_ends), target.axis_name)
    return jax.lax.cond(ends, window_end, lambda *a: a,
                        adaptation, warmup, sampler_state, est.state)


def hvp(target, idx):
    """``(z, v) -> H v`` of the minibatch potential on ``idx``."""
    grad = jax.grad(lambda x: target.potential(x, idx)[0])
    return lambda z, v: jax.jvp(grad, (z,), (v,))[1]


def init_adaptation(kernel, key, z, est, sampler_state, target, idx, num_warmup):
    """The step-size adaptation's state at the initial position (``step_size=None``)."""
    preconditioner, _ = kernel.metric.update(
        est.grad, sampler_state.metric, z, kernel._context(0, est.aux)
    )

    def gradient(k):
        return kernel._gradient.estimate(z, kernel._draw_indices(k, None)[0], est.state,
                                       target).grad

    return capped(kernel, init_step_size(
        key, z, preconditioner, hvp(target, idx), gradient,
        kernel.integrator.bias_weights, kernel._temperature, kernel._target_bias, num_warmup,
    ))
