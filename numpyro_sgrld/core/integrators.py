r"""Integrators: how one step moves the position, given the gradient and the metric.

An integrator is a pair of pure functions (:class:`Integrator`)::

    init(position, key, step_size, temperature) -> state
    step(key, position, state, grad, preconditioner, setting) -> (position, state)

``grad`` is the gradient estimate :math:`\nabla\hat U` at ``position`` (from the gradient
estimator, :mod:`numpyro_sgrld.core.gradients`), ``preconditioner`` the metric's
:class:`~numpyro_sgrld.core.metrics.Preconditioner` for this step (:math:`D`, :math:`D^{1/2}` and,
when the kernel computes it, the Γ drift), ``setting`` the step's :class:`StepSetting`: the
step size, the temperature, the step's :class:`~numpyro_sgrld.core.metrics.StepContext` and
``oracle``. ``oracle(position) -> (value, grad)`` evaluates the
same gradient estimator on the same minibatch elsewhere, for schemes that need a gradient at an
intermediate point; the integrators here never call it (:func:`baoab` defers its last half
kick to the next step's gradient instead). The state
is a ``NamedTuple`` of arrays (momentum, moving averages); integrators know nothing about
NumPyro.

Every integrator takes every metric: :func:`sghmc` with
:func:`~numpyro_sgrld.core.metrics.rmsprop` is preconditioned SGHMC. Only :func:`langevin` carries
the Γ correction of a position-dependent metric (for the others the drift that makes an
adaptive metric exact is not this Γ; a kernel refuses the combination).

The one-step functions (:func:`langevin_step`, :func:`sghmc_step`, :func:`adaptive_drift_step`)
are exported too.
"""

import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_sgrld.core._thermostats import (
    BADODABState,
    SGNHTState,
    badodab,
    sgnht,
)
from numpyro_sgrld.core.acceptance import Averages
from numpyro_sgrld.core.checks import flag, integer, real
from numpyro_sgrld.core.correction import GammaBias
from numpyro_sgrld.core.integrator_base import (
    BiasLaw,
    Integrator,
    NeedsConstantMetric,
    Overdamp,
    PendingKick,
    Rescale,
    Settle,
    StepHint,
    StepSetting,
    identity_closing,
    kicked,
    merged_kick,
    time_step_law,
)
from numpyro_sgrld.core.tree import tree_normal, tree_where

__all__ = [
    "Integrator",
    "Averages",
    "BiasLaw",
    "StepHint",
    "Rescale",
    "Settle",
    "Overdamp",
    "StepSetting",
    "NeedsConstantMetric",
    "langevin",
    "sghmc",
    "adaptive_drift",
    "baoab",
    "badodab",
    "sgnht",
    "langevin_step",
    "sghmc_step",
    "adaptive_drift_step",
    "LangevinState",
    "SGHMCState",
    "AdamState",
    "BAOABState",
    "BADODABState",
    "SGNHTState",
]


# --------------------------------------------------------------------------- Langevin
class LangevinState(NamedTuple):
    """The Euler–Maruyama Langevin step keeps no state."""


def langevin_step(key, position, grad, preconditioner, step_size, temperature):
    r"""Euler–Maruyama step of the (Riemannian) Langevin diffusion.

    .. math::
        \theta \leftarrow \theta - h\,D\nabla\hat U(\theta) + hT\,\Gamma
                          + \sqrt{2hT}\,D^{1/2}\xi, \qquad \xi \sim \mathcal N(0, I).

    With :math:`D = I` this is SGLD (Welling & Teh 2011). ``step_size`` is :math:`h`,
    ``temperature`` is :math:`T`; :math:`\Gamma` is ``preconditioner.correction`` (skipped when
    ``None``). Γ is multiplied by :math:`T`: the diffusion :math:`\sqrt{2T D}\,dW` has
    stationary density :math:`\propto e^{-U/T}` only with the drift :math:`-D\nabla U + T\,
    \nabla\cdot D` (Fokker–Planck), so a tempered or cold chain (:math:`T \ne 1`) needs
    :math:`T\Gamma`, and none at :math:`T = 0`.
    """
    xi = tree_normal(key, position)
    drift = preconditioner.drift(grad)
    noise = preconditioner.noise(xi)
    scale = jnp.sqrt(2.0 * step_size * temperature)
    new = jax.tree.map(lambda x, d, n: x - step_size * d + scale * n, position, drift, noise)
    if preconditioner.correction is not None:
        new = jax.tree.map(
            lambda x, g: x + step_size * temperature * g, new, preconditioner.correction
        )
    return new


def langevin() -> Integrator:
    r"""The Euler–Maruyama discretisation of the Riemannian Langevin diffusion
    (:func:`langevin_step`): with the identity metric SGLD, with RMSprop pSGLD, with the Monge or
    Shampoo metric SGRLD. Carries the Γ correction."""

    def init(position, key, step_size, temperature):
        return LangevinState()

    def step(key, position, state, grad, preconditioner, setting):
        step_size, temperature, context, oracle = setting
        return langevin_step(key, position, grad, preconditioner, step_size, temperature), state

    return Integrator(init, step, name="langevin", carries_correction=True,
                      traits=(Averages(), BiasLaw((0.5, 0.5))))


# --------------------------------------------------------------------------- SGHMC
class SGHMCState(NamedTuple):
    """SGHMC's state: the momentum ``v`` (same tree as the position) and ``closing``
    (:class:`~numpyro_sgrld.core.integrator_base.PendingKick`)."""

    momentum: Any
    closing: Any = None


def sghmc_step(
    key, position, momentum, grad, preconditioner, step_size, friction, noise_estimate,
    temperature,
):
    r"""One SGHMC step (Chen, Fox & Guestrin 2014, Eq. 15), with mass matrix :math:`M = D^{-1}`.

    .. math::
        v \leftarrow (1 - \alpha) v - h D\nabla\hat U(\theta)
                     + \sqrt{2(\alpha - \hat\beta) h T}\,D^{1/2}\xi, \qquad
        \theta \leftarrow \theta + v.

    ``step_size`` :math:`h` is Chen's learning rate :math:`\eta`, ``friction`` :math:`\alpha` the
    momentum decay, ``noise_estimate`` :math:`\hat\beta` the estimated gradient-noise term. With
    :math:`D = I` it is Chen et al.'s update with unit mass. For a constant :math:`D` it is their
    update for the momentum :math:`p = D^{-1}v/\sqrt h` with mass :math:`M = D^{-1}` and friction
    :math:`C = \alpha M/\sqrt h`, whose stationary law is :math:`e^{-U/T}\otimes
    \mathcal N(0, hTD)` in :math:`(\theta, v)` as :math:`h \to 0`. Returns
    ``(position, momentum)``.
    """
    xi = tree_normal(key, position)
    scale = jnp.sqrt(2.0 * (friction - noise_estimate) * step_size * temperature)
    drift = preconditioner.drift(grad)
    noise = preconditioner.noise(xi)
    momentum = jax.tree.map(
        lambda v, g, n: (1.0 - friction) * v - step_size * g + scale * n, momentum, drift, noise
    )
    position = jax.tree.map(lambda x, v: x + v, position, momentum)
    return position, momentum


def _check_friction(friction, noise_estimate):
    friction = real(
        friction, "friction", low=0, low_open=True, high=1,
        hint="It is the momentum decay alpha; 0.01 to 0.1 is typical.",
    )
    noise_estimate = real(noise_estimate, "noise_estimate", low=0)
    if not noise_estimate < friction:
        raise ValueError(
            f"`noise_estimate` must satisfy 0 <= noise_estimate < friction ({friction}), "
            f"got {noise_estimate!r}: the injected noise variance 2(friction - noise_estimate)h "
            "must stay positive. Lower it or raise `friction`."
        )
    return float(friction), float(noise_estimate)


def _fresh_momentum(key, position, noise, step_size, temperature):
    r""":math:`v \sim \mathcal N(0, hT D)`, the momentum's stationary law (``noise`` applies
    :math:`D^{1/2}`)."""
    scale = jnp.sqrt(step_size * temperature)
    return jax.tree.map(lambda n: scale * n, noise(tree_normal(key, position)))


def _rescale_momentum(state, ratio):
    r"""SGHMC's momentum :math:`v = \sqrt h\,D p` for a step multiplied by ``ratio``."""
    root = jnp.sqrt(ratio)
    return state._replace(
        momentum=jax.tree.map(lambda v: (root * v).astype(v.dtype), state.momentum))


def _unit(xi):
    return xi


def sghmc(
    friction=0.1, noise_estimate=0.0, initial_momentum="zero", resample_momentum_every=None,
    partial_refresh=0.0, naive=False,
) -> Integrator:
    r"""SGHMC's momentum step (:func:`sghmc_step`; Chen, Fox & Guestrin 2014).

    :param friction: :math:`\alpha \in (0, 1]`, the momentum decay.
    :param noise_estimate: :math:`\hat\beta \in [0, \alpha)`, the estimated gradient noise.
    :param initial_momentum: ``"zero"`` (default) or ``"random"``
        (:math:`\mathcal N(0, h_0 T)`, identity metric: the metric is not known before the first
        step).
    :param resample_momentum_every: redraw :math:`v \sim \mathcal N(0, h_t T D)` every this
        many steps (``None``: never).
    :param partial_refresh: :math:`a \in [0, 1)`, Horowitz's (1991) partial momentum
        refreshment at each resampling (the survey's eq. 41): :math:`v \leftarrow a v +
        \sqrt{1 - a^2}\,v'` with :math:`v' \sim \mathcal N(0, h_t T D)`, which keeps the
        momentum's stationary law; 0 (default) redraws it. Needs ``resample_momentum_every``.
    :param naive: **naive SGHMC** (Chen et al. 2014, Sec. 3.2): Hamiltonian dynamics with
        stochastic gradients, no friction and no injected noise (``friction`` and
        ``noise_estimate`` are ignored), momentum resampled every ``resample_momentum_every``
        steps (required). Its stationary law is **not** the posterior: the gradient noise heats
        the momentum between resamplings and nothing takes the heat out (their Fig. 1;
        ``benchmarks/papers/chen_double_well.py``). Warns; for comparisons only.

    Not Γ-corrected: with a position-dependent metric the drift that keeps the second-order
    dynamics exact differs from the first-order Γ (Ma, Chen & Fox 2015); a kernel refuses
    ``correction`` with this integrator.
    """
    friction, noise_estimate = _check_friction(friction, noise_estimate)
    partial_refresh = real(
        partial_refresh, "partial_refresh", low=0, high=1, high_open=True,
        hint="It is the fraction of the momentum kept at each resampling (0 redraws it).",
    )
    naive = flag(naive, "naive")
    if initial_momentum not in ("zero", "random"):
        raise ValueError(
            f"Unknown initial_momentum={initial_momentum!r}; use 'zero' or 'random'."
        )
    if resample_momentum_every is not None:
        resample_momentum_every = integer(
            resample_momentum_every, "resample_momentum_every", hint="Or None (never)."
        )
    elif partial_refresh > 0:
        raise ValueError(
            f"`partial_refresh={partial_refresh!r}` mixes fresh momentum in at each resampling, "
            "but `resample_momentum_every` is None (never): give resample_momentum_every=k "
            "(k=1 refreshes every step)."
        )
    if naive:
        if resample_momentum_every is None:
            raise ValueError(
                "`naive=True` (no friction, no injected noise) needs `resample_momentum_every`: "
                "without friction the gradient noise heats the momentum without bound between "
                "resamplings. Give resample_momentum_every=k (e.g. 50)."
            )
        warnings.warn(
            "naive=True: SGHMC without friction (Chen, Fox & Guestrin 2014, Sec. 3.2) does not "
            "sample the posterior with stochastic gradients (the gradient noise heats the "
            "momentum and nothing removes the heat); use it to show that, not for inference. "
            "Leave naive=False for SGHMC.",
            UserWarning,
            stacklevel=3,
        )
        friction, noise_estimate = 0.0, 0.0

    def init(position, key, step_size, temperature):
        if initial_momentum == "zero":
            return SGHMCState(jax.tree.map(jnp.zeros_like, position))
        return SGHMCState(
            _fresh_momentum(key, position, _unit, step_size, temperature)
        )

    def step(key, position, state, grad, preconditioner, setting):
        step_size, temperature, context, oracle = setting
        momentum = state.momentum
        if resample_momentum_every is not None:
            key, key_momentum = random.split(key)
            i = context.step
            resample = (i > 0) & (i % resample_momentum_every == 0)
            fresh = _fresh_momentum(
                key_momentum, position, preconditioner.noise, step_size, temperature
            )
            if partial_refresh > 0:
                keep, mix = partial_refresh, np.sqrt(1.0 - partial_refresh**2)
                fresh = jax.tree.map(lambda v, f: keep * v + mix * f, momentum, fresh)
            momentum = tree_where(resample, fresh, momentum)
        position, momentum = sghmc_step(
            key, position, momentum, kicked(state, grad), preconditioner, step_size, friction,
            noise_estimate, temperature,
        )
        return position, SGHMCState(momentum, identity_closing(state.closing))

    if naive:  # no friction: no stationary law to aim a step at
        return Integrator(init, step, name="naive sghmc", traits=(
            Rescale(_rescale_momentum),
            StepHint("without friction the chain has no stationary law for a step to aim at")))
    return Integrator(init, step, name="sghmc", traits=(
        BiasLaw((1.0 / (2.0 * (2.0 - friction)), 1.0 / (2.0 * friction))),
        Rescale(_rescale_momentum), PendingKick()))


# --------------------------------------------------------------------------- adaptive drift
class AdamState(NamedTuple):
    """The adaptive drift's moving averages of the gradient (``m``) and its square (``v``)."""

    m: Any
    v: Any


def adaptive_drift_step(key, position, grad, extra_drift, preconditioner, step_size, temperature):
    r"""Langevin step with an extra drift term (AdamSGLD; Kim, Song & Liang 2022).

    .. math::
        \theta \leftarrow \theta - h\,D(\nabla\hat U + a) + \sqrt{2hT}\,D^{1/2}\xi,

    ``extra_drift`` :math:`a` (e.g. :math:`a\,m / (\sqrt{V} + \lambda)`).
    """
    xi = tree_normal(key, position)
    scale = jnp.sqrt(2.0 * step_size * temperature)
    drift = preconditioner.drift(jax.tree.map(jnp.add, grad, extra_drift))
    noise = preconditioner.noise(xi)
    return jax.tree.map(
        lambda x, d, n: x - step_size * d + scale * n, position, drift, noise
    )


def _check_decay(value, name):
    return real(value, name, low=0, high=1, high_open=True)


def adaptive_drift(drift_scale=1.0, beta1=0.9, beta2=0.999, eps=1e-8) -> Integrator:
    r"""AdamSGLD's adaptive drift (Kim, Song & Liang 2022; :func:`adaptive_drift_step`):

    .. math::
        m \leftarrow \beta_1 m + (1-\beta_1)\nabla\hat U, \quad
        V \leftarrow \beta_2 V + (1-\beta_2)\nabla\hat U\odot\nabla\hat U, \quad
        a = \text{drift\_scale}\cdot m / (\sqrt V + \lambda),

    both averages starting at 0. Not Γ-corrected: the extra drift changes the stationary law
    whatever the metric (Rensmeyer & Niggemann 2023)."""
    drift_scale = real(drift_scale, "drift_scale", low=0)
    beta1, beta2 = _check_decay(beta1, "beta1"), _check_decay(beta2, "beta2")
    eps = real(eps, "eps", low=0)

    def init(position, key, step_size, temperature):
        zeros = jax.tree.map(jnp.zeros_like, position)
        return AdamState(zeros, zeros)

    def step(key, position, state, grad, preconditioner, setting):
        step_size, temperature, context, oracle = setting
        m = jax.tree.map(lambda a, g: beta1 * a + (1 - beta1) * g, state.m, grad)
        v = jax.tree.map(lambda a, g: beta2 * a + (1 - beta2) * g * g, state.v, grad)
        extra = jax.tree.map(lambda mm, vv: drift_scale * mm / (jnp.sqrt(vv) + eps), m, v)
        position = adaptive_drift_step(
            key, position, grad, extra, preconditioner, step_size, temperature
        )
        return position, AdamState(m, v)

    return Integrator(init, step, name="adaptive_drift",
                      traits=(Averages(), BiasLaw((0.5, 0.5)), GammaBias(correctable=False)))


# --------------------------------------------------------------------------- BAOAB
class BAOABState(NamedTuple):
    """BAOAB's velocity :math:`v = Dp` after the O and A parts (the last half kick is applied
    at the start of the next step, with that step's gradient), ``started`` (False before
    the first step, whose state has no pending half kick) and ``closing`` (``None``, or how
    the pending half kick reads the next gradient: :class:`PendingKick`)."""

    velocity: Any
    started: Any
    closing: Any = None


def baoab(friction=1.0) -> Integrator:
    r"""BAOAB (Leimkuhler & Matthews 2013) for underdamped Langevin dynamics
    :math:`d\theta = Dp\,dt`, :math:`dp = -\nabla U\,dt - \gamma p\,dt + \sqrt{2\gamma T}
    D^{-1/2}dW` (mass :math:`D^{-1}`), in the velocity :math:`v = Dp`, with time step
    :math:`h`:

    .. math::
        \text{B: } v \leftarrow v - \tfrac h2 D\nabla\hat U, \quad
        \text{A: } \theta \leftarrow \theta + \tfrac h2 v, \quad
        \text{O: } v \leftarrow e^{-\gamma h}v + \sqrt{T(1 - e^{-2\gamma h})}\,D^{1/2}\xi,
        \quad \text{A}, \quad \text{B}.

    The closing B uses the gradient at the new position, which is the next step's: it is
    applied then, merged with that step's opening B (one gradient per step; with minibatches
    both half kicks of a step boundary use that step's minibatch). With exact gradients and a
    constant metric, the positions of BAOAB sample a Gaussian target's law **exactly** for every
    stable step (:math:`h\sqrt{\lambda_{\max}} < 2`), unlike Euler–Maruyama Langevin, whose
    variance is inflated by :math:`1/(1 - h\lambda/2)` (``tests/test_baoab.py``); with
    gradient noise the usual :math:`O(h)` bias returns. ``friction`` :math:`\gamma > 0` (per
    unit of time). Not Γ-corrected; ``step_size=None`` adapts the step by
    :func:`time_step_law`.
    """
    friction = real(friction, "friction", low=0, low_open=True,
                    hint="It is the rate gamma of the O step's velocity decay, exp(-gamma h).")

    def init(position, key, step_size, temperature):
        return BAOABState(jax.tree.map(jnp.zeros_like, position), jnp.zeros((), bool))

    def step(key, position, state, grad, preconditioner, setting):
        step_size, temperature, context, oracle = setting
        kick = merged_kick(preconditioner.drift, state, grad, step_size)  # pending B + this B
        v = jax.tree.map(jnp.subtract, state.velocity, kick)
        position = jax.tree.map(lambda x, u: x + 0.5 * step_size * u, position, v)
        decay = jnp.exp(-friction * step_size)
        scale = jnp.sqrt(temperature * (1.0 - decay ** 2))
        noise = preconditioner.noise(tree_normal(key, position))
        v = jax.tree.map(lambda u, n: decay * u + scale * n, v, noise)
        position = jax.tree.map(lambda x, u: x + 0.5 * step_size * u, position, v)
        return position, BAOABState(v, jnp.ones((), bool), identity_closing(state.closing))

    def refresh(state, key, temperature, preconditioner):
        v = preconditioner.noise(tree_normal(key, state.velocity))
        return state._replace(velocity=jax.tree.map(lambda u: jnp.sqrt(temperature) * u, v),
                              started=jnp.zeros_like(state.started))

    return Integrator(init, step, name="baoab", traits=(
        BiasLaw(time_step_law(friction)), Overdamp(refresh), PendingKick()))
