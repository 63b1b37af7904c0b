r"""Integrators: how one step moves the position, given the gradient and the metric.

An integrator is a pair of pure functions (:class:`Integrator`)::

    init(position, key, step_size, temperature) -> state
    step(key, position, state, grad, preconditioner, step_size, temperature, context, oracle)
        -> (position, state)

``grad`` is the gradient estimate :math:`\nabla\hat U` at ``position`` (from the gradient
estimator, :mod:`numpyro_sgrld.gradients`), ``preconditioner`` the metric's
:class:`~numpyro_sgrld.metrics.Preconditioner` for this step (:math:`D`, :math:`D^{1/2}` and,
when the kernel computes it, the Γ drift), ``context`` the step's
:class:`~numpyro_sgrld.metrics.StepContext`. ``oracle(position) -> (value, grad)`` evaluates the
same gradient estimator on the same minibatch elsewhere, for schemes that need a gradient at an
intermediate point; the integrators here never call it (:func:`baoab` defers its last half
kick to the next step's gradient instead). The state
is a ``NamedTuple`` of arrays (momentum, moving averages); integrators know nothing about
NumPyro.

Every integrator takes every metric: :func:`sghmc` with
:func:`~numpyro_sgrld.metrics.rmsprop` is preconditioned SGHMC. Only :func:`langevin` carries
the Γ correction of a position-dependent metric (for the others the drift that makes an
adaptive metric exact is not this Γ; a kernel refuses the combination).

The one-step functions (:func:`langevin_step`, :func:`sghmc_step`, :func:`adaptive_drift_step`)
are exported too.
"""

import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_sgrld._checks import flag, integer, real
from numpyro_sgrld._tree import tree_normal, tree_where

__all__ = [
    "Integrator",
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


class Integrator(NamedTuple):
    r"""An integrator as a pair of pure functions (see the module docstring).

    ``carries_correction``: whether the step adds the Γ drift of a position-dependent metric
    (``preconditioner.correction``) as the Riemannian Langevin diffusion needs it.
    ``bias_weights``: :math:`(c_\lambda, c_s)`, the first-order inflation of the discretised
    chain's stationary variance on a Gaussian, :math:`1 + h(c_\lambda\lambda + c_s s^2/T)` for
    curvature :math:`\lambda` and gradient-noise variance :math:`s^2` (both in the metric's
    coordinates), which ``step_size=None`` uses to choose the step
    (:mod:`numpyro_sgrld.adaptation`); a third element 2 makes the curvature term second
    order, :math:`c_\lambda h^2\lambda` (time-step integrators, :func:`_time_step_law`);
    ``None`` if not known (the step must then be given).
    ``rescale(state, ratio)``: the state after the step size is multiplied by ``ratio``
    during warm-up (``None``: nothing in the state depends on it); SGHMC's momentum, in units
    of position per step, scales with :math:`\sqrt h`.
    ``state_averages_gradient``: the state is made only of moving averages of the gradient and
    its square (finite whenever the gradient is), so the kernel need not check it for
    finiteness every step (see :func:`numpyro_sgrld._acceptance.accept`). ``name`` names the
    integrator in error messages. ``metrics``: the names of the metrics it can take (``None``:
    any), with ``metrics_hint`` saying why. ``step_hint`` says how to choose a step where
    there are no ``bias_weights``. ``max_step(target_bias)``: the largest step
    ``step_size=None`` may choose, where the integrator has a bias or limit that does not
    depend on the posterior (``None``: none).
    """

    init: Callable
    step: Callable
    carries_correction: bool = False
    state_averages_gradient: bool = True
    name: str = "integrator"
    bias_weights: tuple | None = None
    rescale: Callable | None = None
    metrics: tuple | None = None
    metrics_hint: str = ""
    step_hint: str = ""
    max_step: Callable | None = None


def _time_step_law(friction):
    r"""The second-order bias law of a time-step integrator (BAOAB, SGNHT, BADODAB) with
    friction :math:`\gamma` (the thermostats': their diffusion :math:`A`):
    ``(1/4, 1/(2 gamma), 2)``, a variance inflation of
    :math:`\tfrac14 h^2\lambda + h s^2/(2\gamma T)`.

    The noise term is BAOAB's exactly (a kick of :math:`h` per step carries gradient noise of
    variance :math:`h^2 s^2` into a velocity that the O step cools at rate :math:`2\gamma hT`;
    the discrete Lyapunov equation of :math:`(\theta, v)` on a Gaussian gives
    :math:`1 + h s^2/(2\gamma T) + O(h^2)`). A thermostat absorbs the noise's average, so for
    SGNHT and BADODAB it bounds the anisotropic rest. The curvature term keeps the step well
    inside the stability limit :math:`h\sqrt{\lambda} < 2` (at ``target_bias=0.1``,
    :math:`h\sqrt\lambda \le 0.63`), where none of the three changes a Gaussian's variance
    by much: BAOAB's and BADODAB's positions are exact there, and SGNHT's bias at its
    thermostat's equilibrium is the curvature-free :math:`-hA/2` that its ``max_step``
    bounds (symplectic Euler alone would inflate by :math:`1/(1 - h^2\lambda/4)`, which is
    where the weight 1/4 comes from)."""
    return (0.25, 1.0 / (2.0 * friction), 2)


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

    def step(key, position, state, grad, preconditioner, step_size, temperature, context, oracle):
        return langevin_step(key, position, grad, preconditioner, step_size, temperature), state

    return Integrator(
        init, step, carries_correction=True, name="langevin", bias_weights=(0.5, 0.5),
    )


# --------------------------------------------------------------------------- SGHMC
class SGHMCState(NamedTuple):
    """SGHMC's state: the momentum ``v`` (same tree as the position)."""

    momentum: Any


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
    return SGHMCState(jax.tree.map(lambda v: (root * v).astype(v.dtype), state.momentum))


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

    def step(key, position, state, grad, preconditioner, step_size, temperature, context, oracle):
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
            key, position, momentum, grad, preconditioner, step_size, friction, noise_estimate,
            temperature,
        )
        return position, SGHMCState(momentum)

    if naive:  # no friction: no stationary law to aim a step at
        return Integrator(init, step, state_averages_gradient=False, name="naive sghmc",
                          rescale=_rescale_momentum,
                          step_hint="without friction the chain has no stationary law for "
                          "a step to aim at")
    return Integrator(
        init, step, state_averages_gradient=False, name="sghmc",
        bias_weights=(1.0 / (2.0 * (2.0 - friction)), 1.0 / (2.0 * friction)),
        rescale=_rescale_momentum,
    )


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

    def step(key, position, state, grad, preconditioner, step_size, temperature, context, oracle):
        m = jax.tree.map(lambda a, g: beta1 * a + (1 - beta1) * g, state.m, grad)
        v = jax.tree.map(lambda a, g: beta2 * a + (1 - beta2) * g * g, state.v, grad)
        extra = jax.tree.map(lambda mm, vv: drift_scale * mm / (jnp.sqrt(vv) + eps), m, v)
        position = adaptive_drift_step(
            key, position, grad, extra, preconditioner, step_size, temperature
        )
        return position, AdamState(m, v)

    return Integrator(init, step, name="adaptive_drift", bias_weights=(0.5, 0.5))


# --------------------------------------------------------------------------- BAOAB
class BAOABState(NamedTuple):
    """BAOAB's velocity :math:`v = Dp` after the O and A parts (the last half kick is applied
    at the start of the next step, with that step's gradient) and ``started`` (False before
    the first step, whose state has no pending half kick)."""

    velocity: Any
    started: Any


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
    :func:`_time_step_law`.
    """
    friction = real(friction, "friction", low=0, low_open=True,
                    hint="It is the rate gamma of the O step's velocity decay, exp(-gamma h).")

    def init(position, key, step_size, temperature):
        return BAOABState(jax.tree.map(jnp.zeros_like, position), jnp.zeros((), bool))

    def step(key, position, state, grad, preconditioner, step_size, temperature, context, oracle):
        kick = jnp.where(state.started, step_size, 0.5 * step_size)  # pending B + this B
        drift = preconditioner.drift(grad)
        v = jax.tree.map(lambda u, d: u - kick * d, state.velocity, drift)
        position = jax.tree.map(lambda x, u: x + 0.5 * step_size * u, position, v)
        decay = jnp.exp(-friction * step_size)
        scale = jnp.sqrt(temperature * (1.0 - decay ** 2))
        noise = preconditioner.noise(tree_normal(key, position))
        v = jax.tree.map(lambda u, n: decay * u + scale * n, v, noise)
        position = jax.tree.map(lambda x, u: x + 0.5 * step_size * u, position, v)
        return position, BAOABState(v, jnp.ones((), bool))

    return Integrator(init, step, state_averages_gradient=False, name="baoab",
                      bias_weights=_time_step_law(friction))


# --------------------------------------------------------------------------- SGNHT
#: The metrics a thermostat takes: the constant ones (the identity, a given diagonal, the
#: preconditioners learnt in warm-up), in whose coordinates it measures the kinetic temperature.
CONSTANT_METRICS = ("identity", "diagonal", "learnt_diagonal", "learnt")

_THERMOSTAT_METRICS = (
    "its thermostat measures the kinetic temperature p^T p / d in the metric's coordinates, "
    "which a position-dependent metric would change under it"
)


def _root_t(preconditioner):
    """:math:`R^\top` of the preconditioner :math:`D = RR^\top` (``noise_transpose``, or
    ``noise`` where :math:`R` is symmetric)."""
    return preconditioner.noise_transpose or preconditioner.noise

class SGNHTState(NamedTuple):
    """SGNHT's momentum ``p`` (tree of the position) and thermostat ``xi`` (a scalar)."""

    momentum: Any
    thermostat: Any


def _kinetic_temperature(p):
    """:math:`p^\\top p / d`, the kinetic temperature of the momentum ``p``."""
    leaves = jax.tree.leaves(p)
    return sum(jnp.sum(u * u) for u in leaves) / sum(u.size for u in leaves)


def sgnht(diffusion=1.0) -> Integrator:
    r"""The stochastic gradient Nosé–Hoover thermostat (Ding, Fang, Babbush, Chen, Skeel & Neven
    2014, Algorithm 2), with temperature :math:`T` and time step :math:`h`:

    .. math::
        p \leftarrow e^{-\xi h}p - \nabla\hat U(\theta)\,h + \sqrt{2AhT}\,\eta, \qquad
        \theta \leftarrow \theta + p\,h, \qquad
        \xi \leftarrow \xi + \big(p^\top p/d - T\big)h,

    the friction applied as the decay :math:`e^{-\xi h}` (Ding et al. write :math:`1 - \xi h`,
    equal to first order; the decay stays stable when a chain far from the posterior heats
    the thermostat to :math:`\xi h > 2`, where :math:`1 - \xi h` flips and amplifies the
    momentum). ``step_size=None`` adapts the step by :func:`_time_step_law`, at most
    :math:`\min(\delta, 1/4)/A` (``target_bias`` :math:`\delta`): the thermostat measures
    the momentum after the kick, half a step from the positions, and at its equilibrium on a
    Gaussian the positions' variance is :math:`1 - hA/2` of the target's to first order,
    whatever the curvature (the discrete Lyapunov equation at the :math:`\xi` that gives
    :math:`E[p^2] = T`: 0.995, 0.974 and 0.887 at :math:`hA` = 0.01, 0.05 and 0.2); at
    :math:`h = \delta/A` and every curvature the step law allows the deflation stays below
    :math:`0.6\,\delta` for :math:`\delta \le 0.1` (``tests/test_adaptation.py``). And the
    injected noise alone gives the momentum the kinetic temperature
    :math:`2AhT/(1 - e^{-2\xi h})`, which the thermostat can bring to :math:`T` only for
    :math:`2Ah < 1`.
    ``diffusion`` :math:`A > 0` the injected noise, :math:`\xi` starting at :math:`A`,
    :math:`p` at 0, :math:`d` the number of parameters. The thermostat keeps the kinetic
    temperature :math:`p^\top p/d` at :math:`T` whatever the gradient noise: with exact
    gradients the joint law :math:`\propto e^{-U/T - p^\top p/(2T) - d(\xi - A)^2/(2T)}` is
    invariant (so :math:`E[\xi] = A`); a gradient noise of variance :math:`\sigma^2` per
    coordinate adds :math:`h\sigma^2/2` to the diffusion, and :math:`E[\xi]` becomes
    :math:`A + h\sigma^2/(2T)` (``tests/test_sgnht.py`` checks both).

    With a constant metric :math:`D = RR^\top` the dynamics run in the coordinates
    :math:`R^{-1}\theta`: the kick is :math:`R^\top\nabla\hat U`, the drift
    :math:`\theta \leftarrow \theta + hRp`, and :math:`p^\top p/d` is the kinetic temperature
    there (:data:`CONSTANT_METRICS`; a position-dependent metric would change the coordinates
    under the thermostat).
    """
    diffusion = real(diffusion, "diffusion", low=0, low_open=True,
                     hint="It is the injected noise A of Ding et al.; 1 is typical.")

    def init(position, key, step_size, temperature):
        return SGNHTState(jax.tree.map(jnp.zeros_like, position),
                          jnp.asarray(diffusion, jnp.result_type(float)))

    def step(key, position, state, grad, preconditioner, step_size, temperature, context, oracle):
        xi = state.thermostat
        scale = jnp.sqrt(2.0 * diffusion * step_size * temperature)
        noise = tree_normal(key, position)
        decay = jnp.exp(-xi * step_size)  # 1 - xi h to first order, stable for any xi h >= 0
        p = jax.tree.map(lambda u, g, n: decay * u - step_size * g + scale * n,
                         state.momentum, _root_t(preconditioner)(grad), noise)
        position = jax.tree.map(lambda x, u: x + step_size * u, position,
                                preconditioner.noise(p))
        xi = xi + (_kinetic_temperature(p) - temperature) * step_size
        return position, SGNHTState(p, xi)

    return Integrator(
        init, step, state_averages_gradient=False, name="sgnht", metrics=CONSTANT_METRICS,
        bias_weights=_time_step_law(diffusion), metrics_hint=_THERMOSTAT_METRICS,
        max_step=lambda target_bias: min(target_bias, 0.25) / diffusion,
    )


# --------------------------------------------------------------------------- BADODAB
class BADODABState(NamedTuple):
    """BADODAB's momentum ``p`` (the last half kick pending, as for :class:`BAOABState`), its
    thermostat ``xi`` (a scalar) and ``started``."""

    momentum: Any
    thermostat: Any
    started: Any


def badodab(diffusion=1.0, thermal_mass=1.0) -> Integrator:
    r"""BADODAB (Leimkuhler & Shang 2016, "Adaptive thermostats for noisy gradient
    systems"): the adaptive Langevin (Ad-Langevin) dynamics

    .. math::
        d\theta = p\,dt, \quad dp = -\nabla U\,dt - \xi p\,dt + \sqrt{2AT}\,dW, \quad
        d\xi = \mu^{-1}\big(p^\top p/d - T\big)\,dt,

    split as B A D O D A B with time step :math:`h`: B :math:`p \leftarrow p - \tfrac h2
    \nabla\hat U`, A :math:`\theta \leftarrow \theta + \tfrac h2 p`, D :math:`\xi
    \leftarrow \xi + \tfrac h{2\mu}(p^\top p/d - T)`, O the exact Ornstein–Uhlenbeck step at
    friction :math:`\xi`, :math:`p \leftarrow e^{-\xi h}p + \sqrt{AT(1 - e^{-2\xi h})/\xi}
    \,\eta` (:math:`\sqrt{2ATh}\,\eta` at :math:`\xi = 0`), then D, A, B. As in :func:`baoab`,
    the closing B is merged with the next step's opening one (one gradient per step).
    ``diffusion`` :math:`A > 0` (the injected noise, as in :func:`sgnht`), ``thermal_mass``
    :math:`\mu > 0`; :math:`\xi` starts at :math:`A`, :math:`p` at 0. With exact gradients the
    invariant law is :math:`\propto e^{-U/T - p^\top p/(2T) - d\mu(\xi - A)^2/(2T)}`, so
    :math:`E[\xi] = A`; gradient noise of variance :math:`\sigma^2` per coordinate adds
    :math:`h\sigma^2/2` to the diffusion (both half kicks at a step boundary share a minibatch:
    a kick of :math:`h` per step), and the thermostat settles at :math:`A + h\sigma^2/(2T)`
    (``tests/test_badodab.py``). A constant metric :math:`D = RR^\top` is taken as in
    :func:`sgnht` (kick :math:`R^\top\nabla\hat U`, drift :math:`Rp`);
    ``step_size=None`` adapts the step by :func:`_time_step_law`.
    """
    diffusion = real(diffusion, "diffusion", low=0, low_open=True,
                     hint="It is the injected noise A (the thermostat's target); 1 is typical.")
    thermal_mass = real(thermal_mass, "thermal_mass", low=0, low_open=True,
                        hint="It is the thermostat's inertia mu; 1 is typical.")

    def init(position, key, step_size, temperature):
        return BADODABState(jax.tree.map(jnp.zeros_like, position),
                            jnp.asarray(diffusion, jnp.result_type(float)),
                            jnp.zeros((), bool))

    def step(key, position, state, grad, preconditioner, step_size, temperature, context, oracle):
        h = step_size
        kick = jnp.where(state.started, h, 0.5 * h)  # pending B + this B
        root = preconditioner.noise
        p = jax.tree.map(lambda u, g: u - kick * g, state.momentum, _root_t(preconditioner)(grad))
        position = jax.tree.map(lambda x, u: x + 0.5 * h * u, position, root(p))
        xi = state.thermostat + 0.5 * h * (_kinetic_temperature(p) - temperature) / thermal_mass
        decay = jnp.exp(-xi * h)
        small = jnp.abs(xi * h) < 1e-6
        # (1 - e^{-2 xi h}) / (2 xi), -> h as xi -> 0
        spread = jnp.where(small, h, -jnp.expm1(-2.0 * xi * h) / jnp.where(small, 1.0, 2.0 * xi))
        scale = jnp.sqrt(2.0 * diffusion * temperature * spread)
        noise = tree_normal(key, position)
        p = jax.tree.map(lambda u, n: decay * u + scale * n, p, noise)
        xi = xi + 0.5 * h * (_kinetic_temperature(p) - temperature) / thermal_mass
        position = jax.tree.map(lambda x, u: x + 0.5 * h * u, position, root(p))
        return position, BADODABState(p, xi, jnp.ones((), bool))

    return Integrator(
        init, step, state_averages_gradient=False, name="badodab", metrics=CONSTANT_METRICS,
        bias_weights=_time_step_law(diffusion), metrics_hint=_THERMOSTAT_METRICS,
    )
