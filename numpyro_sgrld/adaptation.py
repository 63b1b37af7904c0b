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
(:attr:`numpyro_sgrld.integrators.Integrator.bias_weights`: :math:`(\tfrac12, \tfrac12)` for
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

The warm-up (``num_warmup`` >= :data:`MIN_WARMUP`) has three parts. The first half approaches
the posterior's bulk with the curvature alone, ``h c_curv lambda_max = 1/2``
(:data:`FAST_TARGET`), from a maximum of the Rayleigh quotients that decays over
:data:`SMOOTHING` steps; ``init`` starts it with :data:`INIT_ITERATIONS` iterations at the
initial position. The second half uses the bias target with a :data:`SMOOTHING`-step moving
average, capped by the stability limit of the recent curvature. The step freezes at
``target_bias`` over the mean quotient of the last quarter, capped by the largest curvature
term of the second half. During warm-up a step whose minibatch potential rises by more than
:data:`MAX_RISE` is rejected, and a rejected step divides the step by :data:`SHRINK`. See
``docs/step_size.md``.

**The budget** (``sampling_steps``, optional): the bias target ignores the run's length. With
it, a second power iteration on :math:`\sigma I - A` estimates the smallest curvature
:math:`\lambda_{\min}` and the frozen step is raised, up to the stability cap and a
predicted variance inflation of :data:`MAX_INFLATION`, to the :func:`mixing_step` at which the
slowest direction has an effective sample size of :data:`MIXING_ESS` per chain
(:func:`slow_rayleigh`, :func:`update_step_size`).

**Pooling vectorised chains** (with the budget): where the mean curvature along the slow
direction, over all chains, is not significantly positive (a funnel: one chain's warm-up sees
only the part of the posterior it visited, and the chains' own steps differ by one to two
orders of magnitude), the chains of ``chain_method="vectorized"`` (run under the kernel's
own ``vmap`` over :data:`CHAIN_AXIS`) freeze at one step from their pooled statistics, the
larger of the bias target and ``min(lyapunov_step, MAX_INFLATION / mu_bar)``
(:func:`pooled_step`): stable on average along all the chains' paths (:func:`lyapunov_step`),
its predicted variance inflation bounded. The step is tried over the warm-up's last
:data:`TRIAL_FRACTION`-th; if a chain rejects a step there, every chain freezes at its own
rule's step from the warm-up before the trial and goes back to where the trial began
(:func:`trial_restart`).

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

from numpyro_sgrld._tree import tree_normal
from numpyro_sgrld.warmup.schedule import final_window_start, first_window_start

__all__ = [
    "CHAIN_AXIS",
    "MIN_WARMUP",
    "StepSizeState",
    "check_adaptation",
    "too_steep",
    "init_step_size",
    "lyapunov_step",
    "mixing_step",
    "pooled_step",
    "trial_restart",
    "update_step_size",
]

#: The fewest warm-up steps step-size adaptation accepts: the frozen step averages the
#: Rayleigh quotients of the warm-up's second half (at least 100 of them: their relative
#: spread is up to sqrt(2) each, about 14 % for the mean of 100).
MIN_WARMUP = 200

#: Iterations of the power iteration at the initial position.
INIT_ITERATIONS = 20

#: Steps in the warm-up's moving average of the Rayleigh quotient.
SMOOTHING = 20

#: The first half of warm-up moves towards the posterior's bulk with the step
#: ``FAST_TARGET / (c_curv * lambda_max(A))`` (curvature only: ``h * lambda_max = 1`` for
#: Langevin, stable and fast; the curvature weight is raised by ``2 * c_noise`` where the
#: integrator amplifies gradient noise more than Langevin, as SGHMC does by ``1/friction``);
#: the second half uses ``target_bias`` with the gradient noise.
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

#: With ``sampling_steps`` (the run's length) given, the frozen step is raised, up to the
#: stability limit, until the slowest direction's effective sample size over the run is at
#: least this, per chain, by the AR(1) formula ``ESS = N r / 2`` for a relaxation rate ``r``
#: per step. Split R-hat's excess over 1 is about ``(chi2_7 / 7) / (2 ESS_split)`` for four
#: chains (eight split halves), whose 99 % point is ``1.32 / ESS_split``: ESS >= 300 per chain
#: (150 per half) keeps it under 1.01 in about 99 % of runs.
MIXING_ESS = 300

#: The budget rule raises the step at most until the predicted variance inflation of the
#: worst direction, ``h * mu`` (``mu`` the window's mean Rayleigh quotient: ``target_bias`` at
#: the bias target's step), is this: a standard deviation up to ``sqrt(1 + 3) = 2`` times the
#: posterior's, an error of one posterior sd, which is the error of a chain that has not
#: crossed its slowest direction, so raising the step further for mixing is not expected to
#: lower the total error (except where no step reaches the posterior's bulk, when every error
#: is far larger). The first-order prediction ``sqrt(1 + h mu) - 1`` of the sd error holds far
#: out where the gradient noise dominates: 0.60 predicted, 0.56 measured on German credit at
#: 15.6x the bias target's step; 2.70 against 2.52 +- 0.03 on posteriordb's diamonds at 127x
#: (``docs/step_size.md``).
MAX_INFLATION = 3.0

#: The slow direction's power iteration runs on ``SLOW_SHIFT * lambda_max - A`` (its top
#: eigenvector is the bottom one of ``A`` when the shift exceeds ``(lambda_max + lambda_min)/2``;
#: 1.5 keeps that with a 25 % underestimate of ``lambda_max``).
SLOW_SHIFT = 1.5

#: The name of the vectorised chains' axis (the kernel's own ``vmap`` over chains): where the
#: curvature is indefinite along the chains' paths, the budget rule pools the chains' warm-up
#: statistics over it (:func:`pooled_step`).
CHAIN_AXIS = "chains"

#: With pooling, the warm-up's second half keeps a histogram of its curvature terms ``s_t``
#: in bins of ``STIFFNESS_BIN`` decades over ``STIFFNESS_RANGE`` (non-positive values count as
#: neutral), for :func:`lyapunov_step`.
STIFFNESS_RANGE = (-30.0, 30.0)
STIFFNESS_BIN = 0.125

#: :func:`lyapunov_step` searches multiples of the stability cap up to this.
LYAPUNOV_SPAN = 1000.0

#: The pooled rule applies where the mean curvature along the slow direction is not
#: significantly positive: at most this many standard errors above zero.
INDEFINITE_Z = 2.0

#: The pooled step is tried over the warm-up's last ``1 / TRIAL_FRACTION`` before it is kept.
TRIAL_FRACTION = 8


class StepSizeState(NamedTuple):
    r"""The adaptation's state (``SGState.adaptation``; ``None`` with a given step size).

    - **step_size** – the step the next step uses: during warm-up ``target_bias / estimate``,
      after it the frozen value.
    - **direction** – the power iteration's unit vector :math:`u` (same tree as the position).
    - **estimate** – :math:`\\bar\\rho`, the moving average of the Rayleigh quotient.
    - **total**, **count** – the sum and number of Rayleigh quotients in the warm-up's last
      quarter.
    - **stiffness** – the largest curvature term :math:`c_\lambda u^\top A u` seen in the
      warm-up's second half (the stability cap: the frozen step is at most
      ``FAST_TARGET / stiffness``); **recent_stiffness**, its maximum decaying by
      ``1 - 1/SMOOTHING`` per step, caps the warm-up's steps the same way;
      **first_stiffness**, that decaying maximum at the end of the first half, where the power
      iteration follows the curvature alone (its top direction): the budget rule's raised step
      is capped by it too, since the second half's direction follows the top of curvature
      *plus* gradient noise and misses the stiffest curvature where the noise points elsewhere.
    - **num_warmup** – the warm-up length; the step freezes when ``i`` reaches it.
    - **slow_direction**, **slow_total** – with ``sampling_steps`` given (``None`` and 0
      otherwise): the unit vector of the power iteration for the *smallest* curvature,
      :math:`\lambda_{\min}(A)`, and the sum of its Rayleigh quotients :math:`w^\top A w` in
      the warm-up's last quarter (:func:`slow_rayleigh`); **slow_score_total**, the sum of
      the score products :math:`(w^\top R^\top g_1)(w^\top R^\top g_2)/T` there (the
      fallback where the mean curvature along :math:`w` is not positive, see
      :func:`update_step_size`).
    - **stiffness_counts**, **trial_step**, **trial_rejected**, **trial_position**,
      **trial_failed** – with ``sampling_steps`` and vectorised chains (``None`` or 0
      otherwise): the histogram of the second half's curvature terms (:func:`lyapunov_step`),
      the pooled step on trial over the warm-up's last eighth (0: none), this chain's
      rejections during the trial, its position when the trial began, and whether the trial
      failed in any chain (the chains then go back to their trial positions and freeze at
      **own_step**, the step their own rule had chosen from the warm-up before the trial;
      :func:`pooled_step`, :func:`trial_restart`); **slow_square_total**, the sum of the
      squared slow-direction quotients (their standard error, :func:`pooled_step`).
    """

    step_size: Any
    direction: Any
    estimate: Any
    total: Any
    count: Any
    num_warmup: Any
    stiffness: Any = 0.0
    recent_stiffness: Any = 0.0
    slow_direction: Any = None
    slow_total: Any = 0.0
    slow_score_total: Any = 0.0
    stiffness_counts: Any = None
    trial_step: Any = 0.0
    trial_rejected: Any = 0
    trial_position: Any = None
    trial_failed: Any = False
    slow_square_total: Any = 0.0
    own_step: Any = 0.0
    first_stiffness: Any = 0.0


def _vdot(a, b):
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _scale_add(a, x, b, y):
    return jax.tree.map(lambda u, v: a * u + b * v, x, y)


def _normalise(x, fallback):
    norm = jnp.sqrt(_vdot(x, x))
    ok = jnp.isfinite(norm) & (norm > 0)
    return jax.tree.map(lambda u, f: jnp.where(ok, u / jnp.where(ok, norm, 1.0), f), x, fallback)


def curvature_product(direction, position, preconditioner, hvp):
    r""":math:`A u = R^\top H R\,u`, the curvature in the coordinates :math:`R^{-1}\theta`
    (:math:`RR^\top = D`, ``preconditioner.noise`` is :math:`R`), with ``hvp(position, v)``
    the Hessian-vector product of the step's minibatch potential."""
    root = preconditioner.noise
    root_t = preconditioner.noise_transpose or root
    return root_t(hvp(position, root(direction)))


def slow_rayleigh(direction, position, preconditioner, hvp, shift, grad1=None, grad2=None,
                  temperature=1.0):
    r"""One iteration for the smallest curvature: ``(r, w')`` with :math:`r = w^\top A w`
    (an unbiased estimate of it with a minibatch Hessian) and
    :math:`w' \propto (\sigma I - A)w`, the power iteration on the shifted operator whose top
    eigenvector is :math:`A`'s bottom one (``shift`` :math:`\sigma` above
    :math:`(\lambda_{\max} + \lambda_{\min})/2`). The quotient is at least
    :math:`\lambda_{\min}`: a direction not yet converged overestimates it, which makes the
    budget rule (:func:`update_step_size`) raise the step less, not more.

    With two gradient estimates ``grad1``, ``grad2`` on independent minibatches at the same
    position, the triple ``(r, w', f)`` also holds the **score product**
    :math:`f = (w^\top R^\top g_1)(w^\top R^\top g_2)/T`: its mean under the posterior
    :math:`\pi \propto e^{-U/T}` is :math:`E_\pi[(w^\top R^\top\nabla U)^2]/T =
    E_\pi[w^\top A w]` (integration by parts; the minibatch noise cancels between the two
    independent estimates), the posterior-averaged curvature along :math:`w`, whose expectation
    is non-negative even where the local curvature is not (a funnel's neck). The identity holds
    for a fixed :math:`w` and :math:`R`; the warm-up's :math:`w` follows the power iteration
    and :math:`R` the metric, so the mean of ``f`` over the window approximates it."""
    a = curvature_product(direction, position, preconditioner, hvp)
    r = _vdot(direction, a)
    w = _normalise(_scale_add(shift, direction, -1.0, a), direction)
    if grad1 is None:
        return r, w
    root_t = preconditioner.noise_transpose or preconditioner.noise
    f = _vdot(direction, root_t(grad1)) * _vdot(direction, root_t(grad2)) / temperature
    return r, w, f


def slow_shift(state, stiffness, c_curv):
    """:data:`SLOW_SHIFT` times the recent largest curvature of ``A``: the decaying maximum of
    the stiffness (``c_curv`` times the curvature along the top direction), this step's
    included."""
    return SLOW_SHIFT * jnp.maximum(state.recent_stiffness, stiffness) / c_curv


def rayleigh(direction, position, preconditioner, hvp, grad1, grad2, weights, temperature,
             with_noise=True):
    r"""One power-iteration product: ``(rho, y, stiffness)`` with
    :math:`y = c_\lambda D^{1/2}H D^{1/2}u + (c_s/T)(e^\top u)\,e`,
    :math:`e = D^{1/2}(g_1 - g_2)/\sqrt 2`, :math:`\rho = |u^\top y|` and the stiffness
    :math:`c_\lambda|u^\top D^{1/2}HD^{1/2}u|` (the curvature term alone, for the stability
    cap).

    ``hvp(position, v)`` is :math:`Hv` of the step's minibatch potential; ``grad1`` and
    ``grad2`` are two gradient estimates at ``position`` on independent minibatches;
    ``with_noise=False`` leaves the noise term out (the first half of warm-up)."""
    c_curv, c_noise = weights
    base = c_curv
    # without the noise term, the curvature term is weighted up by the integrator's noise
    # amplification relative to Langevin's, 2 c_s (SGHMC: 1/friction), so that the first
    # half of warm-up inflates the variance by gradient noise no more than Langevin would
    c_curv = jnp.where(with_noise, c_curv, c_curv * max(1.0, 2.0 * c_noise))
    c_noise = jnp.where(with_noise, c_noise, 0.0)
    curvature = curvature_product(direction, position, preconditioner, hvp)
    root_t = preconditioner.noise_transpose or preconditioner.noise
    e = root_t(jax.tree.map(lambda a, b: (a - b) / np.sqrt(2.0), grad1, grad2))
    y = _scale_add(c_curv, curvature, (c_noise / temperature) * _vdot(e, direction), e)
    return jnp.abs(_vdot(direction, y)), y, base * jnp.abs(_vdot(direction, curvature))


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
    if integrator.bias_weights is None:
        raise ValueError(
            f"The integrator {integrator.name!r} has no `bias_weights`, so `step_size=None` "
            "cannot choose its step: give `step_size=` (a float > 0 or a schedule)."
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
            f"second half), got num_warmup={num_warmup}: raise num_warmup to {MIN_WARMUP} or "
            "more, or give `step_size=`."
        )


def init_step_size(key, position, preconditioner, hvp, gradient, weights, temperature,
                   target_bias, num_warmup, slow=False, pooled=False):
    r"""The :class:`StepSizeState` at the initial position: :data:`INIT_ITERATIONS` power
    iterations, each with two fresh minibatch gradients (``gradient(key) -> grad``) and a
    Hessian-vector product; the estimate is the mean Rayleigh quotient of the second half.
    ``slow``: also start the iteration for the smallest curvature (a random direction);
    ``pooled`` (with ``slow``, for vectorised chains): also keep what :func:`pooled_step`
    needs."""
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
        slow_direction=(
            _normalise(tree_normal(random.fold_in(key, 1), position), position) if slow else None
        ),
        slow_total=jnp.zeros(()),
        slow_score_total=jnp.zeros(()),
        stiffness_counts=jnp.zeros(_num_bins()) if pooled else None,
        trial_step=jnp.zeros(()),
        trial_rejected=jnp.zeros((), jnp.int32),
        trial_position=position if pooled else None,
        trial_failed=jnp.zeros((), bool),
        slow_square_total=jnp.zeros(()),
        own_step=jnp.zeros(()),
        first_stiffness=jnp.zeros(()),
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

    def body(j, carry):
        u, total, stiff = carry
        k1, k2 = random.split(random.fold_in(key_it, j))
        rho, y, s = rayleigh(u, position, preconditioner, hvp, gradient(k1), gradient(k2),
                             weights, temperature, with_noise=True)
        rho = jnp.where(jnp.isfinite(rho), rho, 0.0)
        s = jnp.where(jnp.isfinite(s), s, 0.0)
        total = total + jnp.where(j >= INIT_ITERATIONS // 2, rho, 0.0)
        return _rotate(u, y, rho), total, jnp.maximum(stiff, s)

    u, total, stiff = jax.lax.fori_loop(
        0, INIT_ITERATIONS, body, (u, jnp.zeros(()), jnp.zeros(()))
    )
    estimate = total / (INIT_ITERATIONS - INIT_ITERATIONS // 2)
    target = stage_target(i + 1, state.num_warmup, target_bias)
    step = _step(target, jnp.maximum(estimate, stiff * target / FAST_TARGET), state.step_size)
    estimate = jnp.where(jnp.isfinite(estimate) & (estimate > 0), estimate, state.estimate)
    return state._replace(step_size=step, direction=u, estimate=estimate, stiffness=stiff,
                          recent_stiffness=stiff)


def _num_bins():
    lo, hi = STIFFNESS_RANGE
    return int(round((hi - lo) / STIFFNESS_BIN))


def count_stiffness(counts, stiffness):
    """``counts`` with one more curvature term in its bin of ``log10`` (the first bin for a
    non-positive or non-finite one)."""
    lo, _ = STIFFNESS_RANGE
    ok = jnp.isfinite(stiffness) & (stiffness > 0)
    k = jnp.floor((jnp.log10(jnp.where(ok, stiffness, 1.0)) - lo) / STIFFNESS_BIN)
    k = jnp.clip(jnp.where(ok, k, 0), 0, counts.shape[0] - 1).astype(jnp.int32)
    return counts.at[k].add(1.0)


def lyapunov_step(counts, stiffness):
    r"""The largest multiple of the stability cap :math:`h_c` = ``FAST_TARGET / stiffness``
    (up to :data:`LYAPUNOV_SPAN`) at which the linearised recursion along the recorded path is
    stable **on average**: with :math:`x_t = h s_t /` ``FAST_TARGET`` (:math:`h\lambda_t` for
    Langevin; 1 at the stiffest point at the cap, half the Euler limit 2),

    .. math:: \frac1T\sum_t \log|1 - x_t| \le 0,

    the Lyapunov exponent of :math:`\prod_t (1 - h\lambda_t)` (each :math:`s_t` at its bin's
    upper edge, ``counts`` the histogram of :func:`count_stiffness`). For a constant curvature
    it is the Euler limit itself, twice the cap; where the stiffest point is rare it can be far
    above the cap."""
    lo, _ = STIFFNESS_RANGE
    edges = 10.0 ** (lo + STIFFNESS_BIN * (jnp.arange(counts.shape[0]) + 1.0))
    edges = jnp.minimum(edges, stiffness).at[0].set(0.0)
    cap = FAST_TARGET / stiffness
    multiples = jnp.geomspace(1.0, LYAPUNOV_SPAN, 241)
    x = multiples[:, None] * cap * edges[None, :] / FAST_TARGET
    growth = jnp.sum(counts * jnp.log(jnp.abs(1.0 - x) + 1e-30), axis=1)
    stable = jnp.cumprod(growth <= 0.0)
    return cap * jnp.max(jnp.where(stable > 0, multiples, 1.0))


def pooled_step(counts, stiffness, total, count, slow_total, slow_square_total, target_bias,
                axis_name):
    r"""``(h, use)``: the budget rule over all vectorised chains (``axis_name``) where the
    curvature is indefinite along their paths. Pooled over the chains: the window's mean
    quotient :math:`\bar\mu`, the largest stiffness, the histogram of curvature terms and the
    mean curvature along the slow direction. ``use`` where that mean is not significantly
    positive, at most :data:`INDEFINITE_Z` standard errors above zero (a
    funnel: one chain's warm-up sees only the part of the posterior it happened to visit, and
    the chains' own steps differ by one to two orders of magnitude, ``docs/step_size.md``);
    then ``h`` is the
    larger of the pooled bias target (with its stability cap) and
    ``min(lyapunov_step, MAX_INFLATION / mu_bar)``: stable on average along every chain's
    path, its predicted variance inflation bounded. It is tried before it is kept
    (:func:`update_step_size`)."""
    n = jax.lax.psum(count, axis_name)
    mean = jax.lax.psum(total, axis_name) / jnp.maximum(n, 1)
    slow_mean = jax.lax.psum(slow_total, axis_name) / jnp.maximum(n, 1)
    slow_var = jax.lax.psum(slow_square_total, axis_name) / jnp.maximum(n, 1) - slow_mean**2
    slow_se = jnp.sqrt(jnp.maximum(slow_var, 0.0) / jnp.maximum(n, 1))
    stiff = jax.lax.pmax(stiffness, axis_name)
    hist = jax.lax.psum(counts, axis_name)
    base = target_bias / jnp.maximum(mean, stiff * target_bias / FAST_TARGET)
    raised = jnp.minimum(lyapunov_step(hist, stiff), MAX_INFLATION / mean)
    h = jnp.maximum(base, raised)
    return h, (slow_mean <= INDEFINITE_Z * slow_se) & jnp.isfinite(h) & (h > 0) & (n > 0)


def trial_start(num_warmup):
    """The first warm-up step of the pooled step's trial."""
    return num_warmup - num_warmup // TRIAL_FRACTION


def trial_restart(state, i, axis_name=None):
    """Whether warm-up step ``i`` is the last and the pooled step's trial failed: the chain
    then continues from ``state.trial_position``. With ``axis_name`` the flag is made the same
    object in every chain (it is the same value: the step index and the trial's verdict are
    shared), so a ``lax.cond`` on it stays a branch under the chains' ``vmap``."""
    flag = (i == state.num_warmup - 1) & state.trial_failed
    if axis_name is None:
        return flag
    return jax.lax.pmax(flag.astype(jnp.int32), axis_name) > 0


def mixing_step(slow_mean, sampling_steps, relaxation_weight):
    r"""The smallest step whose slowest direction mixes within the run: the AR(1) chain with
    relaxation rate :math:`r = g h \lambda_{\min}` per step (:math:`g` the integrator's
    ``relaxation_weight``) has integrated autocorrelation time :math:`\tau \approx 2/r`, so
    :math:`N/\tau \ge` :data:`MIXING_ESS` over :math:`N` = ``sampling_steps`` needs
    :math:`h \ge 2\,\mathrm{ESS}/(g\lambda_{\min}N)`."""
    return 2.0 * MIXING_ESS / (relaxation_weight * slow_mean * sampling_steps)


def update_step_size(state, i, rho, y, stiffness, accepted, target_bias, key, slow=None,
                     mixing=None, axis_name=None, position=None):
    """The state after warm-up step ``i`` (0-based) with Rayleigh quotient ``rho`` and product
    ``y``; ``accepted`` is False when the step was rejected. The step is
    ``FAST_TARGET / estimate`` in the first half of warm-up (curvature only), then
    ``target_bias / estimate``; at ``i = num_warmup - 1`` it freezes at ``target_bias`` over
    the mean of ``rho`` over the warm-up's last quarter. The power iteration restarts from a
    random direction (``key``) when the noise term joins: the first half's direction is the
    top one of the curvature alone, and an exact eigenvector would never leave it.

    ``slow = (r, w')`` or ``(r, w', f)`` (:func:`slow_rayleigh`) and ``mixing =
    (sampling_steps, relaxation_weight)``: the run's length is known, and the frozen step is at
    least :func:`mixing_step` of the mean of ``r`` over the last quarter, but no more than the
    stability limit ``FAST_TARGET / max(stiffness, first_stiffness)`` (the second half's largest
    curvature term and the first half's last, :class:`StepSizeState`) nor ``MAX_INFLATION``
    over the window's mean
    quotient (:data:`MAX_INFLATION`; the budget rule: a step that mixes within the
    run, more biased, where the bias target's step would not). Where that mean is not
    positive (the Hessian is indefinite along the chain's path, as in a funnel: the local
    curvature says nothing about relaxation), the mean of the score products ``f`` takes its
    place: the curvature averaged over the posterior, non-negative in expectation (the window's
    mean may still not be positive; then the bias target's step stays).

    With vectorised chains (``axis_name``, and ``state.stiffness_counts`` kept) the chains
    pool their statistics (the window's so far) where the mean curvature along the slow
    direction, over all chains, is not significantly positive (:func:`pooled_step`). The
    pooled step is computed when the warm-up's last eighth begins and the chains run at it
    until the end; if no chain rejects a step there (a rise above :data:`MAX_RISE`, or a
    proposal that is not finite), every chain keeps it. A chain that rejects one returns to
    its own current step at once; then every chain freezes at the step its own rule had
    chosen from the warm-up before the trial (``own_step``) and goes back to where it was
    when the trial began (``position``, the chain's position at the start of step ``i``;
    :func:`trial_restart`)."""
    noisy, in_window = phases(i, state.num_warmup)
    rho = jnp.where(jnp.isfinite(rho), rho, state.estimate)
    since = jnp.where(noisy, i - first_window_start(state.num_warmup), i)  # since the phase began
    weight = 1.0 / jnp.minimum(since + 2, SMOOTHING).astype(rho.dtype)
    forget = 1.0 - 1.0 / SMOOTHING
    # first half: a decaying maximum (a stiff region the chain visited keeps the step small
    # for a while: the step follows the curvature down at once, up only slowly); second
    # half: a moving average (the noise term is a chi-square, its mean is what counts)
    estimate = jnp.where(noisy, (1.0 - weight) * state.estimate + weight * rho,
                         jnp.maximum(rho, forget * state.estimate))
    estimate = jnp.where(accepted, estimate, SHRINK * estimate)
    stiffness = jnp.where(jnp.isfinite(stiffness), stiffness, 0.0)
    term = stiffness  # this step's curvature term s_t (``stiffness`` becomes their maximum)
    recent = jnp.maximum(stiffness, forget * state.recent_stiffness)
    # the first half's last step: the curvature's own top, before the noise joins the iteration
    first_stiffness = jnp.where(~noisy & phases(i + 1, state.num_warmup)[0], recent,
                                state.first_stiffness)
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
    slow_direction, slow_total = state.slow_direction, state.slow_total
    slow_square_total = state.slow_square_total
    slow_score_total = state.slow_score_total
    if slow is not None:
        r, slow_direction = slow[:2]
        r = jnp.where(jnp.isfinite(r), r, 0.0)
        slow_total = jnp.where(accepted & in_window, slow_total + r, slow_total)
        slow_square_total = jnp.where(accepted & in_window, state.slow_square_total + r * r,
                                      state.slow_square_total)
        slow_mean = slow_total / jnp.maximum(count, 1)
        if len(slow) == 3:
            f = jnp.where(jnp.isfinite(slow[2]), slow[2], 0.0)
            slow_score_total = jnp.where(accepted & in_window, slow_score_total + f,
                                         slow_score_total)
            slow_mean = jnp.where(slow_mean > 0, slow_mean,
                                  slow_score_total / jnp.maximum(count, 1))
        if mixing is not None:
            raised = jnp.minimum(mixing_step(slow_mean, *mixing),
                                 FAST_TARGET / jnp.maximum(stiffness, first_stiffness))
            raised = jnp.minimum(raised, MAX_INFLATION / final)
            usable = jnp.isfinite(raised) & (raised > 0) & (count > 0)
            step_size = jnp.where(last & usable, jnp.maximum(step_size, raised), step_size)
            # the step this chain's own rule would freeze at if the warm-up ended here
            own_now = _step(target_bias, final, state.step_size)
            own_now = jnp.where(usable, jnp.maximum(own_now, raised), own_now)
    pool = state.stiffness_counts is not None and axis_name is not None and mixing is not None
    counts, trial_step, trial_rejected = (state.stiffness_counts, state.trial_step,
                                          state.trial_rejected)
    trial_position, trial_failed = state.trial_position, state.trial_failed
    own_step = state.own_step
    if pool:
        counts = jnp.where(noisy, count_stiffness(counts, term), counts)
        start = trial_start(state.num_warmup)
        # computed once, when the trial begins (the flag is the same in every chain, so the
        # branch stays a branch under the chains' vmap)
        begins = jax.lax.pmax((i == start - 1).astype(jnp.int32), axis_name) > 0

        def candidate():
            h, use = pooled_step(counts, stiffness, total, count, slow_total,
                                 slow_square_total, target_bias, axis_name)
            return jnp.where(use, h, 0.0).astype(jnp.result_type(float))

        trial_step = jax.lax.cond(begins, candidate, lambda: trial_step)
        # a failed trial falls back to this: the chain's own rule on the warm-up before it
        own_step = jnp.where(i == start - 1, own_now, own_step)
        on_trial = (i >= start) & (state.trial_step > 0)
        trial_rejected = trial_rejected + (on_trial & ~accepted).astype(jnp.int32)
        # the position is kept once, when the trial begins (a branch, as above: no select
        # over the whole position on every warm-up step)
        keeps = jax.lax.pmax((i == start).astype(jnp.int32), axis_name) > 0
        trial_position = jax.lax.cond(keeps, lambda: position, lambda: trial_position)
        # this chain's next step is on trial until it rejects one
        step_size = jnp.where((i >= start - 1) & (trial_step > 0) & (trial_rejected == 0)
                              & ~last, trial_step, step_size)
        clean = jax.lax.psum(trial_rejected, axis_name) == 0
        step_size = jnp.where(last & (trial_step > 0) & clean, trial_step, step_size)
        trial_failed = last & (trial_step > 0) & ~clean
        step_size = jnp.where(trial_failed, own_step, step_size)
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
        slow_direction=slow_direction,
        slow_total=slow_total,
        slow_score_total=slow_score_total,
        stiffness_counts=counts,
        trial_step=trial_step,
        trial_rejected=trial_rejected,
        trial_position=trial_position,
        trial_failed=trial_failed,
        slow_square_total=slow_square_total,
        own_step=own_step,
        first_stiffness=first_stiffness,
    )
