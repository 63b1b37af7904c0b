r"""The warm-up's pieces, each a :class:`Piece`: an ``init``, an ``update`` run on every
warm-up step, and a ``window_end`` run at the end of each slow window
(:mod:`numpyro_sgrld.warmup.schedule`), composed in that order by
:func:`numpyro_sgrld.warmup.steps.update_warmup`:

1. :data:`STEP_SIZE` – the step of the bias law (:mod:`numpyro_sgrld.warmup.adaptation`):
   one power iteration per warm-up step, measured again in the new geometry at a window's end;
2. :data:`MOMENTUM` – the integrator's momentum rescaled while the step moves
   (:class:`~numpyro_sgrld.integrators.Rescale`), restarted at a window's end (its momentum
   belongs to the old geometry);
3. :data:`PRECONDITIONER` – the constant preconditioner learnt over the windows
   (:mod:`numpyro_sgrld.warmup.preconditioner`): the window's statistics, and at its end the
   new metric (and an adaptive metric restarted in its coordinates,
   :class:`~numpyro_sgrld.metrics.Restart`);
4. :data:`CONTROL_VARIATES` – the gradient estimator's ``activate``: from the second window
   on, the window's mean becomes the control variates' centre where that pays, moved onto the
   mode first where it is far from it (:func:`~numpyro_sgrld.gradients.nearer_centre`, the
   chain with it).

At a window's end the pieces run in the order preconditioner, control variates, step size,
momentum: each reads what the one before it left in the :class:`WindowEnd` (the new
preconditioner, the new gradient state, the new step). Every function takes the
:class:`Setting`, none the kernel.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import random
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.core._integrator_base import BiasLaw, Rescale
from numpyro_sgrld.core._step import context, start
from numpyro_sgrld.core._traits import trait
from numpyro_sgrld.core._tree import tree_where
from numpyro_sgrld.core.gradients import hessian_diagonal_estimate, shared_flag
from numpyro_sgrld.core.metrics import Learnt, Restart
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

__all__ = ["CONTROL_VARIATES", "MOMENTUM", "PRECONDITIONER", "STEP_SIZE", "Begin", "Moment",
           "Piece", "Setting", "WindowEnd", "capped", "hvp", "learns_metric"]


class Setting(NamedTuple):
    """What the warm-up knows of a kernel: its :class:`~numpyro_sgrld.core._step.Algorithm`, the
    minibatch draw ``(key, batch_state) -> (idx, batch_state)``, the bias target
    :math:`\\delta` and the step-size rule ``(i, warmup_state, held) -> h_i`` (the schedule's
    step without a warm-up state, else the adapted one, or a cyclical preset's cosine of it;
    ``held``, the chain's current step, is the step of a chain started from
    :class:`~numpyro_sgrld.LearntSettings`);
    ``ahead``, for data read from the host, ``(idx, next_idx) -> context`` in which a step at
    the minibatch ``idx`` is traced so that it reads the next step's rows while it runs
    (``None``: nothing to read ahead)."""

    algorithm: Any
    draw: Callable
    target_bias: float
    step_size: Callable
    ahead: Callable | None = None

    def cold(self):
        """The same setting at temperature 0 (an exploration stage's descent)."""
        return self._replace(algorithm=self.algorithm._replace(temperature=0.0))


class Begin(NamedTuple):
    """What the pieces' ``init`` read: the chain's :class:`~numpyro_sgrld.core._step.Start`, its
    first minibatch's ``target``, a key, the warm-up's length and the composed sampler's state
    at step 1."""

    start: Any
    target: Any
    key: Any
    num_warmup: Any
    sampler_state: Any


class Moment(NamedTuple):
    """What the pieces' ``update`` read: the chain's state before the step (``before``), the
    step's :class:`~numpyro_sgrld.core._step.StepInfo`, its target, minibatch and the minibatch
    sampler's state after it, the pieces' keys and the warm-up's length."""

    before: Any
    info: Any
    target: Any
    idx: Any
    batch_state: Any
    key_step_size: Any
    key_curvature: Any
    num_warmup: Any


class WindowEnd(NamedTuple):
    """What the pieces' ``window_end`` read and leave for the next: the position ``z``, the
    step's estimate, target and minibatch, the chain's state before the step, the key, the
    window's mean position (``centre``), the new :class:`~numpyro_sgrld.metrics.
    Preconditioner` (set by :data:`PRECONDITIONER`) and the new step's state."""

    z: Any
    estimate: Any
    target: Any
    idx: Any
    before: Any
    key: Any
    centre: Any = None
    preconditioner: Any = None


class Piece(NamedTuple):
    """One piece of the warm-up: ``init(setting, begin) -> piece state`` (``None``: the piece
    does not apply), ``update(setting, moment, warm, chain) -> (warm, chain)`` on every
    warm-up step, ``window_end(setting, end, warm, chain) -> (end, warm, chain)``
    at a slow window's end (``None``: nothing then), where ``warm`` is the dict of the pieces'
    states by ``name`` and ``chain`` the :class:`~numpyro_sgrld.core._state.ChainState`."""

    name: str
    init: Callable
    update: Callable | None = None
    window_end: Callable | None = None


def hvp(target, idx):
    """``(z, v) -> H v`` of the minibatch potential on ``idx``."""
    grad = jax.grad(lambda x: target.potential(x, idx)[0])
    return lambda z, v: jax.jvp(grad, (z,), (v,))[1]


def _bias_weights(setting):
    """The integrator's :class:`~numpyro_sgrld.integrators.BiasLaw` weights (adaptation
    needs one: :func:`~numpyro_sgrld.adaptation.check_adaptation`)."""
    return trait(setting.algorithm.sampler.integrator, BiasLaw).weights


def capped(setting, adaptation):
    """The adaptation's state with its step at most the integrator's ``max_step``
    (:class:`~numpyro_sgrld.integrators.Integrator`)."""
    law = trait(setting.algorithm.sampler.integrator, BiasLaw)
    if law.max_step is None:
        return adaptation
    return adaptation._replace(
        step_size=jnp.minimum(adaptation.step_size, law.max_step(setting.target_bias)))


# -- the step size -------------------------------------------------------------------------


def _step_init(setting, begin):
    """The adaptation's state at the initial position."""
    algorithm, s, target = setting.algorithm, begin.start, begin.target
    est = s.estimate
    preconditioner, _ = algorithm.sampler.metric.update(
        est.grad, begin.sampler_state.metric, s.z, context(target, 0, est.aux))

    def gradient(k):
        return algorithm.gradient.estimate(s.z, setting.draw(k, None)[0], est.state,
                                           target).grad

    return capped(setting, init_step_size(
        begin.key, s.z, preconditioner, hvp(target, s.idx), gradient,
        _bias_weights(setting), algorithm.temperature, setting.target_bias, begin.num_warmup,
    ))


def _step_update(setting, moment, warm, chain):
    """One power iteration at the step's starting point with a second minibatch's gradient
    (:mod:`numpyro_sgrld.adaptation`)."""
    algorithm, before, adaptation = setting.algorithm, moment.before, warm["step"]
    key, key_direction = random.split(moment.key_step_size)
    idx2, _ = setting.draw(key, moment.batch_state)
    target = moment.target
    grad2 = algorithm.gradient.estimate(start(before), idx2, before.gradient_state,
                                        target).grad
    rho, y, stiffness = rayleigh(
        adaptation.direction, start(before), moment.info.preconditioner,
        hvp(target, moment.idx), moment.info.estimate.grad, grad2,
        _bias_weights(setting), algorithm.temperature,
        with_noise=phases(before.i, adaptation.num_warmup)[0],
        target=stage_target(before.i, adaptation.num_warmup, setting.target_bias),
    )
    adaptation = capped(setting, update_step_size(
        adaptation, before.i, rho, y, stiffness, moment.info.accepted,
        setting.target_bias, key_direction,
    ))
    return {**warm, "step": adaptation}, chain


def _step_window_end(setting, end, warm, chain):
    """The step measured again in the new geometry
    (:func:`~numpyro_sgrld.warmup.adaptation.remeasure`), with the gradient estimator as the
    control variates left it."""
    algorithm, target = setting.algorithm, end.target

    def gradient(k):
        return algorithm.gradient.estimate(end.z, setting.draw(k, None)[0],
                                           chain.gradient_state, target).grad

    adaptation = capped(setting, remeasure(
        warm["step"], end.key, end.z, end.preconditioner, hvp(target, end.idx), gradient,
        _bias_weights(setting), algorithm.temperature, setting.target_bias, target.step,
    ))
    return end, {**warm, "step": adaptation}, chain


#: The step of the bias law.
STEP_SIZE = Piece("step", _step_init, _step_update, _step_window_end)


# -- the momentum ----------------------------------------------------------------------------


def _momentum_update(setting, moment, warm, chain):
    """The integrator's momentum rescaled to the new step while the adaptation moves it."""
    rescale = trait(setting.algorithm.sampler.integrator, Rescale)
    if rescale is None:
        return warm, chain
    ratio = warm["step"].step_size / moment.info.step_size
    sampler_state = chain.sampler_state
    return warm, chain._replace(sampler_state=sampler_state._replace(
        integrator=rescale.fn(sampler_state.integrator, ratio)))


def _momentum_window_end(setting, end, warm, chain):
    """The integrator started afresh at the new step: its momentum belongs to the old
    geometry."""
    algorithm = setting.algorithm
    integrator = algorithm.sampler.integrator.init(
        end.z, random.fold_in(end.key, 1), warm["step"].step_size, algorithm.temperature)
    return end, warm, chain._replace(
        sampler_state=chain.sampler_state._replace(integrator=integrator))


#: The integrator's momentum.
MOMENTUM = Piece("momentum", lambda setting, begin: None, _momentum_update,
                 _momentum_window_end)


# -- the preconditioner --------------------------------------------------------------------


def learns_metric(metric):
    """Whether warm-up learns ``metric`` (:func:`~numpyro_sgrld.metrics.learnt`, or the
    constant part of :func:`~numpyro_sgrld.core.metrics.whitened`) when the step is adapted."""
    return trait(metric, Learnt) is not None or trait(metric, Restart) is not None


def _preconditioner_init(setting, begin):
    """The first window's statistics, for a metric learnt in warm-up (``None`` where there is
    nothing to learn)."""
    metric = setting.algorithm.sampler.metric
    if not learns_metric(metric):
        return None
    dense = getattr(begin.sampler_state.metric, "factor", None) is not None
    # whitened: nothing to learn unless dense
    if dense or trait(metric, Restart) is None:
        return init_preconditioner(begin.start.z, begin.num_warmup, dense)
    return None


def _preconditioner_update(setting, moment, warm, chain):
    """The new position and a Hessian-diagonal estimate at the step's start join the
    window's statistics (on the steps inside the slow windows)."""
    stats = warm["preconditioner"]
    if stats is None:
        return warm, chain
    target = moment.target
    i = target.step  # unbatched for vectorised chains
    in_windows = (i >= first_window_start(moment.num_warmup)) & (
        i < final_window_start(moment.num_warmup))
    curvature = hessian_diagonal_estimate(
        lambda x, b: target.potential(x, b)[0], start(moment.before), moment.idx,
        moment.key_curvature)
    updated = update_preconditioner(stats, start(chain), curvature)
    stats = jax.tree.map(lambda new, old: jnp.where(in_windows, new, old), updated, stats)
    return {**warm, "preconditioner": stats}, chain


def _preconditioner_window_end(setting, end, warm, chain):
    """The metric becomes the window's estimate (diagonal, or dense with the full-data
    Hessian at the window's mean where there is one), an adaptive metric restarts in its
    coordinates, and the statistics empty for the next window."""
    stats, metric = warm["preconditioner"], setting.algorithm.sampler.metric
    target, z, est = end.target, end.z, end.estimate
    sampler_state = chain.sampler_state
    scale = preconditioner_scale(stats, sampler_state.metric.scale)
    metric_state = sampler_state.metric._replace(scale=scale)
    if stats.cross is not None:
        hessian = None
        if target.full_potential is not None:
            flat, unravel = ravel_pytree(stats.mean)
            hessian = jax.hessian(lambda x: target.full_potential(unravel(x)))(flat)
            if target.axis_name is not None:  # vectorised chains share one metric
                hessian = jax.lax.pmean(hessian, target.axis_name)
        factor = preconditioner_factor(stats, scale, sampler_state.metric.factor, hessian)
        diagonal = ravel_pytree(scale)[1](jnp.sum(factor * factor, axis=1))
        metric_state = metric_state._replace(scale=diagonal, factor=factor)
    restart = trait(metric, Restart)
    if restart is not None:  # the adaptive part, in the new coordinates
        metric_state = restart.fn(metric_state, z, context(target, end.before.i, est.aux))
    preconditioner, _ = metric.update(est.grad, metric_state, z,
                                      context(target, end.before.i, est.aux))
    end = end._replace(centre=stats.mean, preconditioner=preconditioner)
    chain = chain._replace(sampler_state=sampler_state._replace(metric=metric_state))
    return end, {**warm, "preconditioner": reset_preconditioner(stats)}, chain


def window_ends(warm):
    """The steps after which a slow window ends, or ``None`` without windows (no metric is
    learnt)."""
    stats = warm.get("preconditioner")
    return None if stats is None else stats.window_ends


#: The constant preconditioner learnt over the windows.
PRECONDITIONER = Piece("preconditioner", _preconditioner_init, _preconditioner_update,
                       _preconditioner_window_end)


# -- the control variates ------------------------------------------------------------------


def _control_variates_window_end(setting, end, warm, chain):
    """From the second window on, the window's mean becomes the control variates' centre
    where that pays (the gradient estimator's ``activate``, with the new preconditioner's
    ``drift`` to move a far centre towards the mode: :func:`~numpyro_sgrld.gradients.
    nearer_centre`); a centre so moved takes the chain (and the step's measurement at the
    window's end) with it."""
    activate = setting.algorithm.gradient.activate
    if activate is None:
        return end, warm, chain
    target, z = end.target, end.z
    last = shared_flag(target.step + 1 > warm["preconditioner"].window_ends[0],
                       target.axis_name)
    root = end.preconditioner.noise_transpose or end.preconditioner.noise
    gradient_state = jax.lax.cond(
        last,
        lambda g: activate(g, end.centre, z, target, lambda k: setting.draw(k, None)[0], root,
                           random.fold_in(end.key, 2), end.preconditioner.drift),
        lambda g: g,
        chain.gradient_state,
    )
    # a centre moved towards the mode (nearer_centre) takes the chain with it
    centre = gradient_state.cv.centre
    moved = gradient_state.active & ~(_same(centre, end.centre)
                                      | _same(centre, chain.gradient_state.cv.centre))

    def to_centre(x):
        return None if x is None else tree_where(moved, centre, x)

    end = end._replace(z=to_centre(end.z))
    chain = chain._replace(z=to_centre(chain.z), proposal=to_centre(chain.proposal),
                           gradient_state=gradient_state)
    return end, warm, chain


def _same(a, b):
    """Whether two trees hold the same values."""
    return jnp.all(jnp.stack([jnp.all(x == y) for x, y in
                              zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)]))


#: The control variates switched on in warm-up.
CONTROL_VARIATES = Piece("control_variates", lambda setting, begin: None,
                         window_end=_control_variates_window_end)
