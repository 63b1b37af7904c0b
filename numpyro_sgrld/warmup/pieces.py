r"""The warm-up's pieces, each three functions over its own state: an ``init``, an ``update``
run on every warm-up step, and a ``final`` run at the end of each slow window
(:mod:`numpyro_sgrld.warmup.schedule`) that returns what the piece learnt, which the sampler
starts from (as BlackJAX's ``window_adaptation`` returns its parameters).
:func:`numpyro_sgrld.warmup.steps.update_warmup` calls them, and puts their results in the
chain's state and the warm-up's; no piece reads or edits another's state:

1. the step of the bias law (:mod:`numpyro_sgrld.warmup.adaptation`, :func:`step_size_init`,
   :func:`step_size_update`, :func:`step_size_final`): one power iteration per warm-up step,
   measured again in the new geometry at a window's end;
2. the momentum (:func:`momentum_update`, :func:`momentum_final`): rescaled while the step
   moves (:class:`~numpyro_sgrld.core.integrators.Rescale`), restarted at a window's end (its
   momentum belongs to the old geometry);
3. the constant preconditioner learnt over the windows
   (:mod:`numpyro_sgrld.warmup.preconditioner`, :func:`preconditioner_init`,
   :func:`preconditioner_update`, :func:`preconditioner_final`): the window's statistics, and
   at its end the new metric (and an adaptive metric restarted in its coordinates,
   :class:`~numpyro_sgrld.core.metrics.Restart`);
4. the control variates (:func:`control_variates_final`): the gradient estimator's
   ``activate``: from the second window on, the window's mean becomes the control variates'
   centre where that pays, moved onto the mode first where it is far from it
   (:func:`~numpyro_sgrld.core.gradients.nearer_centre`, the chain with it).

At a window's end they run in the order preconditioner, control variates, step size,
momentum, each given what the ones before returned (the new preconditioner, the new gradient
estimator's state and position, the new step). Every function takes the :class:`Setting`,
none the kernel.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import random
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.core.algorithm import context, start
from numpyro_sgrld.core.gradients import hessian_diagonal_estimate, shared_flag
from numpyro_sgrld.core.integrator_base import BiasLaw, Rescale, identity_closing
from numpyro_sgrld.core.metrics import Learnt, Restart
from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.warmup.adaptation import (
    init_step_size,
    phases,
    rayleigh,
    remeasure,
    stage_target,
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

__all__ = ["Begin", "LearntMetric", "Moment", "Setting", "capped", "control_variates_final", "hvp",
           "learns_metric", "momentum_final", "momentum_update", "moved_centre",
           "preconditioner_final",
           "preconditioner_init", "preconditioner_update", "step_size_final", "step_size_init",
           "step_size_update"]


class Setting(NamedTuple):
    """What the warm-up knows of a kernel: its :class:`~numpyro_sgrld.core.algorithm.Algorithm`,
    the bias target :math:`\\delta` and the step-size rule ``(i, warmup_state, held) -> h_i``
    (the schedule's step without a warm-up state, else the adapted one, or a cyclical preset's
    cosine of it;
    ``held``, the chain's current step, is the step of a chain started from
    :class:`~numpyro_sgrld.LearntSettings`);
    ``ahead``, for data read from the host, ``(idx, next_idx) -> context`` in which a step at
    the minibatch ``idx`` is traced so that it reads the next step's rows while it runs
    (``None``: nothing to read ahead); ``site_scale``, ``(i, warmup_state) -> {site: s} or
    None``, the factor on the metric of the sites a composition steps farther than the rest
    (:func:`~numpyro_sgrld.core.composition.site_scaled`; ``None``: none)."""

    algorithm: Any
    target_bias: float
    step_size: Callable
    ahead: Callable | None = None
    site_scale: Callable | None = None

    def cold(self):
        """The same setting at temperature 0 (an exploration stage's descent)."""
        return self._replace(algorithm=self.algorithm._replace(temperature=0.0))


class Begin(NamedTuple):
    """What the pieces' ``init`` read: the chain's :class:`~numpyro_sgrld.core.algorithm.Start`, its
    first minibatch's ``target``, a key, the warm-up's length and the composed sampler's state
    at step 1."""

    start: Any
    target: Any
    key: Any
    num_warmup: Any
    sampler_state: Any


class Moment(NamedTuple):
    """What the pieces' ``update`` read: the chain's state before the step (``before``), the
    step's :class:`~numpyro_sgrld.core.algorithm.StepInfo` and size, its target, minibatch and the
    minibatch sampler's state after it, the pieces' keys and the warm-up's length."""

    before: Any
    info: Any
    step_size: Any
    target: Any
    idx: Any
    batch_state: Any
    key_step_size: Any
    key_curvature: Any
    num_warmup: Any


def hvp(target, idx):
    """``(z, v) -> H v`` of the minibatch potential on ``idx``."""
    grad = jax.grad(lambda x: target.potential(x, idx)[0])
    return lambda z, v: jax.jvp(grad, (z,), (v,))[1]


def _bias_weights(setting):
    """The integrator's :class:`~numpyro_sgrld.core.integrators.BiasLaw` weights (adaptation
    needs one: :func:`~numpyro_sgrld.warmup.adaptation.check_adaptation`)."""
    return trait(setting.algorithm.sampler.integrator, BiasLaw).weights


def target_bias(setting, adaptation):
    """The bias the adapted step aims at: the setting's ``target_bias``, times the
    adaptation's ``bias_share`` where it has one."""
    if adaptation.bias_share is None:
        return setting.target_bias
    return setting.target_bias * adaptation.bias_share


def capped(setting, adaptation):
    """The adaptation's state with its step at most the integrator's ``max_step``
    (:class:`~numpyro_sgrld.core.integrators.Integrator`) at ``target_bias``, times the
    adaptation's ``bias_share`` where it has one."""
    law = trait(setting.algorithm.sampler.integrator, BiasLaw)
    if law.max_step is None:
        return adaptation
    largest = law.max_step(setting.target_bias)
    if adaptation.bias_share is not None:
        largest = largest * adaptation.bias_share
    return adaptation._replace(step_size=jnp.minimum(adaptation.step_size, largest))


# -- the step size -------------------------------------------------------------------------


def step_size_init(setting, begin):
    """The adaptation's state at the initial position."""
    algorithm, s, target = setting.algorithm, begin.start, begin.target
    est = s.estimate
    preconditioner, _ = algorithm.sampler.metric.update(
        est.grad, begin.sampler_state.metric, s.z, context(target, 0, est.aux))

    def gradient(k):
        return algorithm.gradient.estimate(s.z, target.draw(k, None)[0], est.state,
                                           target).grad

    return capped(setting, init_step_size(
        begin.key, s.z, preconditioner, hvp(target, s.idx), gradient,
        _bias_weights(setting), algorithm.temperature, setting.target_bias, begin.num_warmup,
    ))


def step_size_update(setting, moment, adaptation):
    """The adaptation's state after one power iteration at the step's starting point with a
    second minibatch's gradient (:mod:`numpyro_sgrld.warmup.adaptation`)."""
    algorithm, before = setting.algorithm, moment.before
    key, key_direction = random.split(moment.key_step_size)
    idx2, _ = moment.target.draw(key, moment.batch_state)
    target = moment.target
    grad2 = algorithm.gradient.estimate(start(before), idx2, before.gradient_state,
                                        target).grad
    rho, y, stiffness = rayleigh(
        adaptation.direction, start(before), moment.info.preconditioner,
        hvp(target, moment.idx), moment.info.estimate.grad, grad2,
        _bias_weights(setting), algorithm.temperature,
        with_noise=phases(before.i, adaptation.num_warmup)[0],
        target=stage_target(before.i, adaptation.num_warmup, target_bias(setting, adaptation)),
    )
    return capped(setting, update_step_size(
        adaptation, before.i, rho, y, stiffness, moment.info.accepted,
        target_bias(setting, adaptation), key_direction,
    ))


def step_size_final(setting, adaptation, z, preconditioner, gradient_state, target, idx, key):
    """The step measured again at ``z`` in the new geometry (``preconditioner``;
    :func:`~numpyro_sgrld.warmup.adaptation.remeasure`), with the gradient estimator's state
    ``gradient_state`` as the control variates left it."""
    algorithm = setting.algorithm

    def gradient(k):
        return algorithm.gradient.estimate(z, target.draw(k, None)[0], gradient_state,
                                           target).grad

    return capped(setting, remeasure(
        adaptation, key, z, preconditioner, hvp(target, idx), gradient,
        _bias_weights(setting), algorithm.temperature, target_bias(setting, adaptation),
        target.step,
    ))


# -- the momentum ----------------------------------------------------------------------------


def momentum_update(setting, integrator_state, ratio):
    """The integrator's state with its momentum rescaled by ``ratio``, the new step over the
    one the step used, while the adaptation moves it
    (:class:`~numpyro_sgrld.core.integrators.Rescale`; unchanged without that trait)."""
    rescale = trait(setting.algorithm.sampler.integrator, Rescale)
    if rescale is None:
        return integrator_state
    return rescale.fn(integrator_state, ratio)


def momentum_final(setting, z, key, step_size, previous):
    """The integrator's state started afresh at ``z`` for the new step: its momentum belongs
    to the old geometry. A closing half kick that ``previous`` (the state it replaces) carries
    (:class:`~numpyro_sgrld.core.integrator_base.PendingKick`) is kept, reset."""
    algorithm = setting.algorithm
    fresh = algorithm.sampler.integrator.init(z, random.fold_in(key, 1), step_size,
                                              algorithm.temperature)
    if getattr(previous, "closing", None) is None:
        return fresh
    return fresh._replace(closing=identity_closing(previous.closing))


# -- the preconditioner --------------------------------------------------------------------


def learns_metric(metric):
    """Whether warm-up learns ``metric`` (:func:`~numpyro_sgrld.core.metrics.learnt`, or the
    constant part of :func:`~numpyro_sgrld.core.metrics.whitened`) when the step is adapted."""
    return trait(metric, Learnt) is not None or trait(metric, Restart) is not None


def preconditioner_init(setting, begin):
    """The first window's statistics, for a metric learnt in warm-up (``None`` where there is
    nothing to learn: then there are no windows)."""
    metric = setting.algorithm.sampler.metric
    if not learns_metric(metric):
        return None
    dense = getattr(begin.sampler_state.metric, "factor", None) is not None
    # whitened: nothing to learn unless dense
    if dense or trait(metric, Restart) is None:
        return init_preconditioner(begin.start.z, begin.num_warmup, dense)
    return None


def preconditioner_update(setting, moment, stats, position):
    """The window's statistics with the chain's new ``position`` and a Hessian-diagonal
    estimate at the step's start (on the steps inside the slow windows)."""
    target = moment.target
    i = target.step  # unbatched for vectorised chains
    in_windows = (i >= first_window_start(moment.num_warmup)) & (
        i < final_window_start(moment.num_warmup))
    curvature = hessian_diagonal_estimate(
        lambda x, b: target.potential(x, b)[0], start(moment.before), moment.idx,
        moment.key_curvature)
    updated = update_preconditioner(stats, position, curvature)
    return jax.tree.map(lambda new, old: jnp.where(in_windows, new, old), updated, stats)


class LearntMetric(NamedTuple):
    """What a window taught the preconditioner (:func:`preconditioner_final`): the metric's
    new state, the step's :class:`~numpyro_sgrld.core.metrics.Preconditioner` in it at the
    window's end, the window's mean position (``centre``) and the next window's empty
    statistics."""

    metric_state: Any
    preconditioner: Any
    centre: Any
    stats: Any


def preconditioner_final(setting, stats, metric_state, z, estimate, target, i):
    """The window's :class:`LearntMetric`: the metric becomes the window's estimate (diagonal, or
    dense with the full-data Hessian at the window's mean where there is one), an adaptive
    metric restarts in its coordinates, and the statistics empty for the next window."""
    metric = setting.algorithm.sampler.metric
    scale = preconditioner_scale(stats, metric_state.scale)
    new_state = metric_state._replace(scale=scale)
    if stats.cross is not None:
        hessian = None
        if target.full_potential is not None:
            flat, unravel = ravel_pytree(stats.mean)
            hessian = jax.hessian(lambda x: target.full_potential(unravel(x)))(flat)
            if target.axis_name is not None:  # vectorised chains share one metric
                hessian = jax.lax.pmean(hessian, target.axis_name)
        factor = preconditioner_factor(stats, scale, metric_state.factor, hessian)
        diagonal = ravel_pytree(scale)[1](jnp.sum(factor * factor, axis=1))
        new_state = new_state._replace(scale=diagonal, factor=factor)
    restart = trait(metric, Restart)
    if restart is not None:  # the adaptive part, in the new coordinates
        new_state = restart.fn(new_state, z, context(target, i, estimate.aux))
    preconditioner, _ = metric.update(estimate.grad, new_state, z,
                                      context(target, i, estimate.aux))
    return LearntMetric(new_state, preconditioner, stats.mean, reset_preconditioner(stats))


# -- the control variates ------------------------------------------------------------------


def control_variates_final(setting, gradient_state, learnt, z, target, key, first_end):
    """The gradient estimator's state after a window's end: from the second window on
    (after the step ``first_end``), the window's mean (``learnt.centre``) becomes the control
    variates' centre where that pays (the gradient estimator's ``activate``, with the new
    preconditioner's ``drift`` to move a far centre towards the mode:
    :func:`~numpyro_sgrld.core.gradients.nearer_centre`); ``gradient_state`` unchanged without
    ``activate``; ``key`` is the window end's (the estimator's is drawn from it)."""
    activate = setting.algorithm.gradient.activate
    if activate is None:
        return gradient_state
    last = shared_flag(target.step + 1 > first_end, target.axis_name)
    root = learnt.preconditioner.noise_transpose or learnt.preconditioner.noise
    return jax.lax.cond(
        last,
        lambda g: activate(g, learnt.centre, z, target, lambda k: target.draw(k, None)[0],
                           root, random.fold_in(key, 2), learnt.preconditioner.drift),
        lambda g: g,
        gradient_state,
    )


def moved_centre(new, old, centre):
    """``(moved, where)``: whether the control variates' new state ``new`` moved its centre
    towards the mode (:func:`~numpyro_sgrld.core.gradients.nearer_centre`), neither staying at the
    window's mean ``centre`` nor at the previous state ``old``'s, and that centre, to which
    the chain goes with it."""
    where = new.cv.centre
    return new.active & ~(_same(where, centre) | _same(where, old.cv.centre)), where


def _same(a, b):
    """Whether two trees hold the same values."""
    return jnp.all(jnp.stack([jnp.all(x == y) for x, y in
                              zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)]))
