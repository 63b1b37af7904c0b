r"""The warm-up as a transformation around the step (:func:`numpyro_sgrld._step.step`) with
``step_size=None``: the step-size adaptation's update on every warm-up step (:func:`adapt`),
the learnt preconditioner's statistics and, at each slow window's end, the new metric, the
control variates' activation and the step measured again in the new geometry (:func:`learn`),
and the warm-up's state at the start (:func:`init_state`). :func:`transition` is a whole
transition: its keys, its minibatch, the step and, where there is a warm-up, these pieces
around it. Each function takes the kernel's :class:`~numpyro_sgrld._step.Spec`. What the
warm-up does, in one paragraph: ``docs/step_size.md``."""

import jax
import jax.numpy as jnp
from jax import random
from jax.flatten_util import ravel_pytree

from numpyro_sgrld._integrator_base import BiasLaw, Rescale, Settle
from numpyro_sgrld._step import StepInputs, context, start, step
from numpyro_sgrld._traits import trait
from numpyro_sgrld.gradients import (
    hessian_diagonal_estimate,
    shared_flag,
)
from numpyro_sgrld.metrics import Learnt, Restart
from numpyro_sgrld.warmup.adaptation import (
    init_step_size,
    phases,
    rayleigh,
    remeasure,
    stage_target,
    too_steep,
    update_step_size,
)
from numpyro_sgrld.warmup.preconditioner import (
    init_preconditioner,
    preconditioner_factor,
    preconditioner_scale,
    reset_preconditioner,
    update_preconditioner,
)
from numpyro_sgrld.warmup.schedule import final_window_start, first_window_start

__all__ = ["adapt", "capped", "hvp", "init_adaptation", "init_warmup", "learn",
           "learns_metric", "settled", "transition"]


def adapt(spec, state, est, target, idx, batch_state, key, preconditioner, ok):
    """The adaptation's state after this (warm-up) step: one power iteration at the
    step's starting point with a second minibatch's gradient (see
    :mod:`numpyro_sgrld.adaptation`)."""
    key, key_direction = random.split(key)
    idx2, _ = spec.draw(key, batch_state)
    grad2 = spec.gradient.estimate(start(state), idx2, state.gradient_state, target).grad
    rho, y, stiffness = rayleigh(
        state.adaptation.direction, start(state), preconditioner, hvp(target, idx),
        est.grad, grad2, bias_weights(spec), spec.temperature,
        with_noise=phases(state.i, state.adaptation.num_warmup)[0],
        target=stage_target(state.i, state.adaptation.num_warmup, spec.target_bias),
    )
    return capped(spec, update_step_size(
        state.adaptation, state.i, rho, y, stiffness, ok, spec.target_bias, key_direction,
    ))


def bias_weights(spec):
    """The integrator's :class:`~numpyro_sgrld.integrators.BiasLaw` weights (adaptation
    needs one: :func:`~numpyro_sgrld.adaptation.check_adaptation`)."""
    return trait(spec.sampler.integrator, BiasLaw).weights


def capped(spec, adaptation):
    """The adaptation's state with its step at most the integrator's ``max_step``
    (:class:`~numpyro_sgrld.integrators.Integrator`)."""
    law = trait(spec.sampler.integrator, BiasLaw)
    if law.max_step is None:
        return adaptation
    return adaptation._replace(
        step_size=jnp.minimum(adaptation.step_size,
                              law.max_step(spec.target_bias)))


def learns_metric(metric):
    """Whether warm-up learns ``metric`` (:func:`~numpyro_sgrld.metrics.learnt`, or the
    constant part of :func:`~numpyro_sgrld.metrics.whitened`) when the step is adapted."""
    return trait(metric, Learnt) is not None or trait(metric, Restart) is not None


def learn(spec, state, z, target, idx, est, adaptation, warmup, sampler_state, key):
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
        lambda x, b: target.potential(x, b)[0], start(state), idx, key_curv
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
        restart = trait(spec.sampler.metric, Restart)
        if restart is not None:  # the adaptive part, in the new coordinates
            metric_state = restart.fn(metric_state, z,
                                               context(spec, state.i, est.aux))
        preconditioner, _ = spec.sampler.metric.update(est.grad, metric_state, z,
                                               context(spec, state.i, est.aux))
        activate = spec.gradient.activate
        if activate is not None:
            # from the second window on, the window's mean is the centre, if it pays
            last = shared_flag(i + 1 > warmup.window_ends[0], target.axis_name)
            root = preconditioner.noise_transpose or preconditioner.noise
            gradient_state = jax.lax.cond(
                last,
                lambda g: activate(
                    g, warmup.mean, z, target,
                    lambda k: spec.draw(k, None)[0], root,
                    random.fold_in(key_end, 2)),
                lambda g: g,
                gradient_state,
            )

        def gradient(k):
            return spec.gradient.estimate(z, spec.draw(k, None)[0],
                                           gradient_state, target).grad

        adaptation = capped(spec, remeasure(
            adaptation, key_end, z, preconditioner, hvp(target, idx), gradient,
            bias_weights(spec), spec.temperature, spec.target_bias, i,
        ))
        integrator_state = spec.sampler.integrator.init(z, random.fold_in(key_end, 1),
                                                adaptation.step_size, spec.temperature)
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


def init_adaptation(spec, key, z, est, sampler_state, target, idx, num_warmup):
    """The step-size adaptation's state at the initial position (``step_size=None``)."""
    preconditioner, _ = spec.sampler.metric.update(
        est.grad, sampler_state.metric, z, context(spec, 0, est.aux)
    )

    def gradient(k):
        return spec.gradient.estimate(z, spec.draw(k, None)[0], est.state,
                                       target).grad

    return capped(spec, init_step_size(
        key, z, preconditioner, hvp(target, idx), gradient,
        bias_weights(spec), spec.temperature, spec.target_bias, num_warmup,
    ))


def init_warmup(spec, key, z, est, sampler_state, target, idx, num_warmup):
    """The warm-up's state at the initial position: the step-size adaptation's
    (:func:`init_adaptation`) and, for a metric learnt in warm-up, the first window's
    statistics (``None`` where there is nothing to learn)."""
    adaptation = init_adaptation(spec, key, z, est, sampler_state, target, idx, num_warmup)
    warmup = None
    if learns_metric(spec.sampler.metric):
        dense = getattr(sampler_state.metric, "factor", None) is not None
        # whitened: nothing to learn unless dense
        if dense or trait(spec.sampler.metric, Restart) is None:
            warmup = init_preconditioner(z, num_warmup, dense)
    return adaptation, warmup


def transition(spec, state, target, adapting=None):
    """One transition from ``state``: its keys (three, five with a warm-up: a split's cost
    grows with its keys), its minibatch, the step (:func:`numpyro_sgrld._step.step`) and,
    with a warm-up (``state.adaptation``), during it: the check of each proposal on its own
    minibatch and the rejection of steps that climb too steeply, the adaptation's update,
    the integrator's momentum rescaled to the new step, and the learnt preconditioner's
    statistics. ``adapting`` is whether this is a warm-up step
    (given unbatched for vectorised chains, so that the warm-up's branches stay branches;
    ``False`` in Python for a step known to come after warm-up, which then has none of them:
    the same step as with a traced ``False``)."""
    key_next, key_idx, key_step, *keys = jax.random.split(
        state.rng_key, 3 if state.adaptation is None else 5)
    idx, batch_state = spec.draw(key_idx, state.batch_state)
    if state.adaptation is None:
        new = step(spec, state, StepInputs(target, idx, batch_state, key_step, key_next))[0]
        return settled(spec, new)
    if adapting is False:  # after warm-up, known when traced: none of its branches
        new = step(spec, state, StepInputs(target, idx, batch_state, key_step, key_next))[0]
        return new._replace(step_size=spec.step_size(state.i + 1, state.adaptation))
    if adapting is None:
        adapting = state.i < state.adaptation.num_warmup
    inputs = StepInputs(target, idx, batch_state, key_step, key_next, adapting,
                        lambda a, b: too_steep(a, b, spec.temperature))
    new, info = step(spec, state, inputs)
    adaptation = jax.lax.cond(
        adapting,
        lambda: adapt(spec, state, info.estimate, target, idx, batch_state, keys[0],
                      info.preconditioner, info.accepted),
        lambda: state.adaptation,
    )
    sampler_state, integrator = new.sampler_state, spec.sampler.integrator
    rescale = trait(integrator, Rescale)
    if rescale is not None:  # while the adaptation moves the step
        ratio = jnp.where(adapting, adaptation.step_size / info.step_size, 1.0)
        sampler_state = sampler_state._replace(
            integrator=rescale.fn(sampler_state.integrator, ratio))
    warmup, gradient_state = state.warmup, new.gradient_state
    if warmup is not None:
        adaptation, warmup, sampler_state, gradient_state = jax.lax.cond(
            adapting,
            lambda: learn(spec, state, start(new), target, idx, info.estimate, adaptation, warmup,
                          sampler_state, keys[1]),
            lambda: (adaptation, warmup, sampler_state, gradient_state),
        )
    # the next step's: after warm-up the frozen one (a cyclical preset's, its cosine)
    return settled(spec, new._replace(sampler_state=sampler_state,
                                      gradient_state=gradient_state,
                                      step_size=spec.step_size(state.i + 1, adaptation),
                                      adaptation=adaptation, warmup=warmup))


def settled(spec, new):
    """``new`` with the integrator's state restarted halfway through warm-up and settled at
    its end (:class:`~numpyro_sgrld.integrators.Settle`): in the state from which the
    equipartition check starts counting."""
    settle, acc = trait(spec.sampler.integrator, Settle), new.equipartition
    if settle is None or acc is None:
        return new
    integrator = new.sampler_state.integrator
    for at, fn in ((acc.start // 2, settle.restart),
                   (acc.start, lambda s: settle.fn(s, spec.temperature))):
        # a select over the leaves the trait changes (its thermostat's scalars), not over
        # the leaves it returns unchanged (the momentum, the size of the position)
        integrator = jax.tree.map(
            lambda a, b, at=at: b if a is b else jnp.where(new.i == at, a, b),
            fn(integrator), integrator)
    return new._replace(sampler_state=new.sampler_state._replace(integrator=integrator))
