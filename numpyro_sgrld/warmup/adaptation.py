r"""Step-size adaptation during warm-up: ``step_size=None``.

The step is chosen so that the chain's stationary law is close to the posterior **in the
kernel's own geometry**. On a Gaussian target the discretised chain's law is known, and that
law gives the rule.

**Langevin** (Euler–Maruyama, any constant preconditioner :math:`D`). In the coordinates
:math:`D^{-1/2}\theta` a direction with curvature :math:`\lambda` (an eigenvalue of
:math:`A = D^{1/2} H D^{1/2}`, :math:`H` the Hessian of :math:`U`) and gradient-noise variance
:math:`s^2` (of :math:`D^{1/2}\nabla\hat U`, an eigenvalue of :math:`S = D^{1/2}\Sigma D^{1/2}`,
:math:`\Sigma` the covariance of the gradient estimator) evolves as
:math:`x' = x - h(\lambda x + \epsilon) + \sqrt{2hT}\xi`, whose stationary variance is

.. math::
    \frac{T}{\lambda}\cdot\frac{1 + h s^2 / (2T)}{1 - h\lambda/2}
    \approx \frac{T}{\lambda}\Big(1 + \tfrac h2\big(\lambda + s^2/T\big)\Big).

**SGHMC** (Chen et al.'s parametrisation, friction :math:`\alpha`): the 2×2 discrete Lyapunov
equation of :math:`(x, v)` gives

.. math::
    \frac{T}{\lambda}\cdot\frac{1 + h s^2 / (2\alpha T)}{1 - h\lambda/(2(2-\alpha))}.

Both are :math:`\frac T\lambda(1 + h\,m)` to first order, with
:math:`m = c_\lambda\lambda + c_s s^2/T` and the integrator's weights
(:class:`numpyro_sgrld.core.integrators.BiasLaw`: :math:`(\tfrac12, \tfrac12)` for
Langevin and the adaptive drift, :math:`(\tfrac1{2(2-\alpha)}, \tfrac1{2\alpha})` for SGHMC).
The worst direction inflates the variance by :math:`h\,\mu` with
:math:`\mu = \lambda_{\max}(c_\lambda A + c_s S / T)`, so

.. math::
    h = \delta / \mu

keeps every direction's variance within a factor :math:`1 + \delta` of the posterior's (sd
within about :math:`1 + \delta/2`; ``target_bias`` :math:`\delta`, default 0.1). The step is
then also stable: :math:`h\lambda \le 2\delta/c_\lambda`-ish is far below Euler's limit
:math:`h\lambda < 2` (SGHMC's :math:`2(2-\alpha)`). The curvature term is the stability limit
from curvature, the noise term Welling & Teh's condition (injected noise must dominate the
gradient noise, :math:`h s^2/2 \ll T`), both in one eigenvalue.

**Estimating** :math:`\mu`: a stochastic power iteration on :math:`c_\lambda A + c_s S/T` that
runs along the warm-up, one iteration per step at the chain's current position and with the
metric's current preconditioner. Each iteration costs one Hessian-vector product of the
step's minibatch potential (:math:`A u`) and one more gradient estimate on a second minibatch
at the same position: with :math:`e = D^{1/2}(g_1 - g_2)/\sqrt 2`,
:math:`E[(e^\top u)\,e] = S u`. The Rayleigh quotient :math:`\rho = |u^\top y|` of
:math:`y = c_\lambda A u + (c_s/T)(e^\top u)e` estimates :math:`\mu`, and
:math:`u \leftarrow (3\bar\rho u + y)/\lVert\cdot\rVert` (:data:`SHIFT`).

The warm-up (``num_warmup`` >= :data:`MIN_WARMUP`) has three stages
(:mod:`numpyro_sgrld.warmup.schedule`). The approach (the first fifth) moves to the
posterior's bulk with the curvature alone, ``h c_curv lambda_max = 1/2``
(:data:`FAST_TARGET`), from a maximum of the Rayleigh quotients that decays over
:data:`SMOOTHING` steps; ``init`` starts it with :data:`INIT_ITERATIONS` iterations at the
initial position. After it the quotient includes the gradient noise and the step is the
stage's bias (:func:`stage_target`: :data:`WINDOW_BIAS` in the slow windows, at whose ends a
learnt preconditioner changes and the step is measured again in its geometry,
:func:`remeasure`; ``target_bias`` in the final window) over a :data:`SMOOTHING`-step moving
average, capped by the stability limit of the recent curvature. The step freezes at
``target_bias`` over the mean quotient of the final window (the last fifth), capped by the
largest curvature term seen after the approach. During warm-up a step whose minibatch
potential rises by more than :data:`MAX_RISE` is rejected (:func:`too_steep`), and a rejected
step divides the step by :data:`SHRINK`. See ``docs/step_size.md``.

Why not the alternatives: a kernel Stein discrepancy on a grid of short runs (Coullon, South &
Nemeth 2021) needs full-data gradients at every kept draw and several runs inside one
warm-up, and loses power in high dimensions (our KSD tests need hundreds of draws for a
handful of parameters); the stability limit alone (:math:`c/\lambda_{\max}`) ignores the
gradient noise, which dominates when :math:`N/n` is large (:math:`s^2 \approx (N/n)\lambda`);
the noise condition alone ignores curvature when the minibatch is the whole data. The rule
above is both, from the law the chain actually has.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_sgrld.core.integrator_base import BiasLaw, StepHint
from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.core.tree import tree_dot, tree_normal
from numpyro_sgrld.warmup.schedule import final_window_start, first_window_start

__all__ = [
    "CHAIN_AXIS",
    "MIN_WARMUP",
    "StepSizeState",
    "check_adaptation",
    "too_steep",
    "init_step_size",
    "update_step_size",
]

#: The fewest warm-up steps step-size adaptation accepts: the frozen step averages the
#: Rayleigh quotients of the final window, the warm-up's last fifth (at least 40 of them:
#: their relative spread is up to sqrt(2) each, about 22 % for the mean of 40), and each of
#: the approach and the four slow windows needs a few steps.
MIN_WARMUP = 200

#: Iterations of the power iteration at the initial position.
INIT_ITERATIONS = 20

#: Steps in the warm-up's moving average of the Rayleigh quotient.
SMOOTHING = 20

#: The approach (the warm-up's first fifth) moves towards the posterior's bulk with the step
#: ``FAST_TARGET / (c_curv * lambda_max(A))`` (curvature only: ``h * lambda_max = 1`` for
#: Langevin, stable and fast; the curvature weight is raised by ``2 * c_noise`` where the
#: integrator amplifies gradient noise more than Langevin, as SGHMC does by ``1/friction``);
#: the slow windows use :data:`WINDOW_BIAS` and the final window ``target_bias``, both with the
#: gradient noise.
FAST_TARGET = 0.5

#: During warm-up a step whose minibatch potential rises by more than this (over the
#: temperature) is rejected as unstable, as NUTS flags a divergence when its energy error
#: exceeds NumPyro's ``max_delta_energy = 1000``: where the curvature changes faster than the
#: step (a funnel's neck) a step that was stable where it started can land where it is not.
MAX_RISE = 1000.0

#: The bias the step aims at in the slow windows (:mod:`numpyro_sgrld.warmup.schedule`): a
#: variance inflation of at most 1.5 where the gradient noise dominates and 2 where the
#: curvature does (the stability cap), five times ``target_bias``'s default, so that the
#: chain crosses its slow directions five times faster while the preconditioner is learnt
#: from its draws; the final window aims at ``target_bias``.
WINDOW_BIAS = 0.5

#: A rejected warm-up step multiplies the curvature estimate (divides the step) by this.
SHRINK = 4.0

#: The name of the vectorised chains' axis (the kernel's own ``vmap`` over chains,
#: ``chain_method="vectorized"``): flags shared by the chains are made one value over it, so
#: that a ``lax.cond`` on them stays a branch (``Target.axis_name``).
CHAIN_AXIS = "chains"


class StepSizeState(NamedTuple):
    r"""The adaptation's state (``SGState.adaptation``; ``None`` with a given step size).

    - **step_size** – the step the next step uses: during warm-up the stage's target over
      ``estimate`` (:func:`stage_target`), after it the frozen value.
    - **direction** – the power iteration's unit vector :math:`u` (same tree as the position).
    - **estimate** – :math:`\bar\rho`, the moving average of the Rayleigh quotient (during the
      approach, its decaying maximum).
    - **total**, **count** – the sum and number of Rayleigh quotients in the warm-up's final
      window (:func:`phases`).
    - **stiffness** – the largest curvature term :math:`c_\lambda u^\top A u` seen after the
      approach (the stability cap: the frozen step is at most
      ``FAST_TARGET / stiffness``); **recent_stiffness**, its maximum decaying by
      ``1 - 1/SMOOTHING`` per step, caps the warm-up's steps the same way.
    - **num_warmup** – the warm-up length; the step freezes when ``i`` reaches it.
    - **bias_share** – the share of ``target_bias`` the step aims at where a composition sets
      one (:class:`~numpyro_sgrld.SGGibbs`, whose Gibbs sites read the step's bias
      amplified); ``None``: the whole.
    """

    step_size: Any
    direction: Any
    estimate: Any
    total: Any
    count: Any
    num_warmup: Any
    stiffness: Any = 0.0
    recent_stiffness: Any = 0.0
    bias_share: Any = None


def _scale_add(a, x, b, y):
    return jax.tree.map(lambda u, v: a * u + b * v, x, y)


def _normalise(x, fallback):
    norm = jnp.sqrt(tree_dot(x, x))
    ok = jnp.isfinite(norm) & (norm > 0)
    return jax.tree.map(lambda u, f: jnp.where(ok, u / jnp.where(ok, norm, 1.0), f), x, fallback)


def curvature_product(direction, position, preconditioner, hvp):
    r""":math:`A u = R^\top H R\,u`, the curvature in the coordinates :math:`R^{-1}\theta`
    (:math:`RR^\top = D`, ``preconditioner.noise`` is :math:`R`), with ``hvp(position, v)``
    the Hessian-vector product of the step's minibatch potential."""
    root = preconditioner.noise
    root_t = preconditioner.noise_transpose or root
    return root_t(hvp(position, root(direction)))


def rayleigh(direction, position, preconditioner, hvp, grad1, grad2, weights, temperature,
             with_noise=True, target=FAST_TARGET):
    r"""One power-iteration product: ``(rho, y, stiffness)`` with
    :math:`y = c_\lambda D^{1/2}H D^{1/2}u + (c_s/T)(e^\top u)\,e`,
    :math:`e = D^{1/2}(g_1 - g_2)/\sqrt 2`, :math:`\rho = |u^\top y|` and the stiffness
    :math:`c_\lambda|u^\top D^{1/2}HD^{1/2}u|` (the curvature term alone, for the stability
    cap).

    ``hvp(position, v)`` is :math:`Hv` of the step's minibatch potential; ``grad1`` and
    ``grad2`` are two gradient estimates at ``position`` on independent minibatches;
    ``with_noise=False`` leaves the noise term out (the warm-up's approach).

    With a **second-order** law (``weights`` of length 3 ending in 2: a time-step integrator,
    whose variance inflates by :math:`c_\lambda h^2\lambda + c_s h s^2/T`,
    :func:`~numpyro_sgrld.core.integrators.baoab`) the curvature term of :math:`\rho` is
    :math:`\sqrt{c_\lambda\lambda_u\delta}` (:math:`\lambda_u = |u^\top Au|`,
    :math:`\delta` the stage's ``target``), so that :math:`h = \delta/\rho` keeps
    :math:`c_\lambda h^2\lambda \le \delta` where the curvature dominates; :math:`y` weights
    :math:`Au` by :math:`\sqrt{c_\lambda\delta/\lambda_u}` (then :math:`\rho = u^\top y`),
    and the stiffness is :math:`\sqrt{c_\lambda\lambda_u}\cdot` ``FAST_TARGET``
    :math:`^{1/2}` (the cap :math:`c_\lambda h^2\lambda \le` :data:`FAST_TARGET`)."""
    c_curv, c_noise = weights[0], weights[1]
    order = weights[2] if len(weights) > 2 else 1
    base = c_curv
    # without the noise term, the curvature term is weighted up by the integrator's noise
    # amplification relative to Langevin's, 2 c_s (SGHMC: 1/friction), so that the first
    # half of warm-up inflates the variance by gradient noise no more than Langevin would
    c_curv = jnp.where(with_noise, c_curv, c_curv * max(1.0, 2.0 * c_noise))
    c_noise = jnp.where(with_noise, c_noise, 0.0)
    curvature = curvature_product(direction, position, preconditioner, hvp)
    root_t = preconditioner.noise_transpose or preconditioner.noise
    e = root_t(jax.tree.map(lambda a, b: (a - b) / np.sqrt(2.0), grad1, grad2))
    lam = jnp.abs(tree_dot(direction, curvature))
    if order == 2:
        weight = jnp.sqrt(c_curv * target / jnp.where(lam > 0, lam, 1.0))
        stiffness = jnp.sqrt(base * lam * FAST_TARGET)
    else:
        weight, stiffness = c_curv, base * lam
    y = _scale_add(weight, curvature, (c_noise / temperature) * tree_dot(e, direction), e)
    return jnp.abs(tree_dot(direction, y)), y, stiffness


#: The power iteration's shift, in units of the current estimate: ``u <- (SHIFT * rho_bar * u
#: + y) / norm``. With heavy-tailed noise in ``y`` (a chi-square along the noise's top
#: direction) an unshifted iteration drifts to the direction whose ``y`` is least noisy, not
#: the largest on average (its log-growth rate is what counts); the shift makes each step small
#: enough that the mean wins (Oja's regime): log-growth per step 0.036 at SHIFT = 3 against
#: 0.011 at 1 for a noise eigenvalue 1.45 times the curvature's (tests/test_adaptation.py).
SHIFT = 3.0


def _rotate(direction, y, rho_bar):
    return _normalise(_scale_add(SHIFT * rho_bar, direction, 1.0, y), direction)


def check_adaptation(num_warmup, integrator, temperature):
    """Refuse what step-size adaptation cannot do, naming the fix (``num_warmup=None``: the
    checks of the kernel's construction, before the warm-up length is known)."""
    if trait(integrator, BiasLaw) is None:
        hint = trait(integrator, StepHint)
        raise ValueError(
            f"The integrator {integrator.name!r} has no bias law (`BiasLaw` trait), so "
            "`step_size=None` cannot choose its step: give `step_size=` (a float > 0 or a "
            "schedule)" + (f"; {hint.text}." if hint else ".")
        )
    if not temperature > 0:
        raise ValueError(
            f"`step_size=None` adapts the step against the injected noise, which temperature="
            f"{temperature!r} switches off: give `step_size=` or a temperature > 0."
        )
    if num_warmup is None:
        return
    if num_warmup == 0:
        raise ValueError(
            "`step_size=None` chooses the step size during warm-up, but num_warmup=0: give "
            f"MCMC(..., num_warmup=N) with N >= {MIN_WARMUP}, or a step size "
            "(`step_size=` a float > 0 or a schedule)."
        )
    if num_warmup < MIN_WARMUP:
        raise ValueError(
            f"`step_size=None` needs at least {MIN_WARMUP} warm-up steps to choose the step "
            f"size (it averages a curvature and gradient-noise estimate over the warm-up's "
            f"final fifth), got num_warmup={num_warmup}: raise num_warmup to {MIN_WARMUP} or "
            "more, or give `step_size=`."
        )


def init_step_size(key, position, preconditioner, hvp, gradient, weights, temperature,
                   target_bias, num_warmup):
    r"""The :class:`StepSizeState` at the initial position: :data:`INIT_ITERATIONS` power
    iterations, each with two fresh minibatch gradients (``gradient(key) -> grad``) and a
    Hessian-vector product; the estimate is the mean Rayleigh quotient of their second half."""
    key_u, key_it = random.split(key)
    u = _normalise(tree_normal(key_u, position), position)

    def body(i, carry):
        u, total = carry
        k1, k2 = random.split(random.fold_in(key_it, i))
        rho, y, _ = rayleigh(u, position, preconditioner, hvp, gradient(k1), gradient(k2),
                             weights, temperature, with_noise=False)
        total = total + jnp.where(i >= INIT_ITERATIONS // 2, rho, 0.0)
        return _rotate(u, y, rho), total

    u, total = jax.lax.fori_loop(0, INIT_ITERATIONS, body, (u, jnp.zeros(())))
    estimate = total / (INIT_ITERATIONS - INIT_ITERATIONS // 2)
    return StepSizeState(
        step_size=_step(FAST_TARGET, estimate, jnp.inf),
        direction=u,
        estimate=estimate,
        total=jnp.zeros(()),
        count=jnp.zeros((), jnp.int32),
        num_warmup=jnp.asarray(num_warmup, jnp.int32),
        stiffness=jnp.zeros(()),
        recent_stiffness=jnp.zeros(()),
    )


def too_steep(value, new_value, temperature):
    """Whether a warm-up step's minibatch potential rose by more than :data:`MAX_RISE`."""
    return (new_value - value) / temperature > MAX_RISE


def _step(target_bias, estimate, previous):
    """``target_bias / estimate``; the previous step where that is not a finite positive."""
    h = target_bias / estimate
    return jnp.where(jnp.isfinite(h) & (h > 0), h, previous)


def phases(i, num_warmup):
    """``(noisy, in_window)`` for warm-up step ``i``: whether the step's Rayleigh quotient
    includes the gradient noise (after the approach), and whether it counts towards the frozen
    step (the final window; :mod:`numpyro_sgrld.warmup.schedule`)."""
    return i >= first_window_start(num_warmup), i >= final_window_start(num_warmup)


def stage_target(i, num_warmup, target_bias):
    """The bias the step at warm-up step ``i`` aims at: :data:`FAST_TARGET` (curvature only)
    during the approach, :data:`WINDOW_BIAS` in the slow windows, ``target_bias`` in the
    final window (where the frozen step is averaged)."""
    noisy, final = phases(i, num_warmup)
    return jnp.where(final, target_bias, jnp.where(noisy, WINDOW_BIAS, FAST_TARGET))


def remeasure(state, key, position, preconditioner, hvp, gradient, weights, temperature,
              target_bias, i):
    r"""The step-size state after the preconditioner changed at the end of a slow window
    (step ``i``): :data:`INIT_ITERATIONS` power iterations with the noise term at
    ``position`` in the new geometry (each with two fresh gradients, ``gradient(key) ->
    grad``), as :func:`init_step_size` does at the start. The estimate is the mean Rayleigh
    quotient of their second half, the stiffness their largest curvature term; the step is
    the next stage's target over it."""
    key_u, key_it = random.split(key)
    u = _normalise(tree_normal(key_u, position), position)
    target = stage_target(i + 1, state.num_warmup, target_bias)

    def body(j, carry):
        u, total, stiff = carry
        k1, k2 = random.split(random.fold_in(key_it, j))
        rho, y, s = rayleigh(u, position, preconditioner, hvp, gradient(k1), gradient(k2),
                             weights, temperature, with_noise=True, target=target)
        rho = jnp.where(jnp.isfinite(rho), rho, 0.0)
        s = jnp.where(jnp.isfinite(s), s, 0.0)
        total = total + jnp.where(j >= INIT_ITERATIONS // 2, rho, 0.0)
        return _rotate(u, y, rho), total, jnp.maximum(stiff, s)

    u, total, stiff = jax.lax.fori_loop(
        0, INIT_ITERATIONS, body, (u, jnp.zeros(()), jnp.zeros(()))
    )
    estimate = total / (INIT_ITERATIONS - INIT_ITERATIONS // 2)
    step = _step(target, jnp.maximum(estimate, stiff * target / FAST_TARGET), state.step_size)
    estimate = jnp.where(jnp.isfinite(estimate) & (estimate > 0), estimate, state.estimate)
    return state._replace(step_size=step, direction=u, estimate=estimate, stiffness=stiff,
                          recent_stiffness=stiff)


def update_step_size(state, i, rho, y, stiffness, accepted, target_bias, key):
    """The state after warm-up step ``i`` (0-based) with Rayleigh quotient ``rho``, product
    ``y`` and curvature term ``stiffness`` (:func:`rayleigh`); ``accepted`` is False when the
    step was rejected (a rejection multiplies the estimate by :data:`SHRINK`). The step is
    ``FAST_TARGET / estimate`` during the approach (curvature only, from a decaying maximum of
    the quotients), then the stage's target (:func:`stage_target`) over a moving average of
    them, capped by the stability limit of the recent curvature; at ``i = num_warmup - 1`` it
    freezes at ``target_bias`` over the mean of ``rho`` over the final window, capped by the
    largest curvature term after the approach. The power iteration restarts from a random
    direction (``key``) when the noise term joins: the approach's direction is the top one of
    the curvature alone, and an exact eigenvector would never leave it."""
    noisy, in_window = phases(i, state.num_warmup)
    rho = jnp.where(jnp.isfinite(rho), rho, state.estimate)
    since = jnp.where(noisy, i - first_window_start(state.num_warmup), i)  # since the phase began
    weight = 1.0 / jnp.minimum(since + 2, SMOOTHING).astype(rho.dtype)
    forget = 1.0 - 1.0 / SMOOTHING
    # the approach: a decaying maximum (a stiff region the chain visited keeps the step small
    # for a while: the step follows the curvature down at once, up only slowly); after it: a
    # moving average (the noise term is a chi-square, its mean is what counts)
    estimate = jnp.where(noisy, (1.0 - weight) * state.estimate + weight * rho,
                         jnp.maximum(rho, forget * state.estimate))
    estimate = jnp.where(accepted, estimate, SHRINK * estimate)
    stiffness = jnp.where(jnp.isfinite(stiffness), stiffness, 0.0)
    recent = jnp.maximum(stiffness, forget * state.recent_stiffness)
    recent = jnp.where(accepted, recent, SHRINK * recent)
    # a rejection in the window scales the window's mean by SHRINK too (the frozen step shrinks)
    total = jnp.where(accepted, state.total + jnp.where(in_window, rho, 0.0), SHRINK * state.total)
    count = state.count + (in_window & accepted).astype(jnp.int32)
    stiffness = jnp.where(noisy, jnp.maximum(state.stiffness, stiffness), state.stiffness)
    last = i == state.num_warmup - 1
    final = jnp.where(count > 0, total / jnp.maximum(count, 1), estimate)
    # the stability cap: where the curvature varies along the chain (a funnel), the mean
    # Rayleigh quotient may allow a step that is unstable where the chain has been
    final = jnp.maximum(final, stiffness * target_bias / FAST_TARGET)
    target = stage_target(i + 1, state.num_warmup, target_bias)
    # after the approach the same cap, from the decaying maximum of the stiffness
    current = jnp.where(phases(i + 1, state.num_warmup)[0],
                        jnp.maximum(estimate, recent * target / FAST_TARGET), estimate)
    step_size = _step(target, jnp.where(last, final, current), state.step_size)
    return StepSizeState(
        step_size=step_size,
        direction=jax.lax.cond(
            i + 1 == first_window_start(state.num_warmup),
            lambda: _normalise(tree_normal(key, state.direction), state.direction),
            lambda: _rotate(state.direction, y, estimate),
        ),
        estimate=estimate,
        total=total,
        count=count,
        num_warmup=state.num_warmup,
        stiffness=stiffness,
        recent_stiffness=recent,
        bias_share=state.bias_share,
    )
