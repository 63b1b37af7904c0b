"""The adaptive-thermostat integrators of :mod:`numpyro_sgrld.core.integrators` (re-exported there):
SGNHT and BADODAB."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_sgrld.core.checks import real
from numpyro_sgrld.core.integrator_base import (
    BiasLaw,
    Integrator,
    NeedsConstantMetric,
    Overdamp,
    PendingKick,
    Settle,
    identity_closing,
    kicked,
    merged_kick,
    time_step_law,
)
from numpyro_sgrld.core.tree import tree_normal

__all__ = ["sgnht", "badodab", "SGNHTState", "BADODABState"]


# --------------------------------------------------------------------------- SGNHT

_THERMOSTAT_METRICS = (
    "its thermostat measures the kinetic temperature p^T p / d in the metric's coordinates, "
    "which a position-dependent metric would change under it"
)


def _root_t(preconditioner):
    """:math:`R^\top` of the preconditioner :math:`D = RR^\top` (``noise_transpose``, or
    ``noise`` where :math:`R` is symmetric)."""
    return preconditioner.noise_transpose or preconditioner.noise

class SGNHTState(NamedTuple):
    r"""SGNHT's momentum ``p`` (tree of the position) and thermostat ``xi`` (a scalar); the
    mean ``heat`` over ``heated`` steps of the variance that each step adds to the momentum,
    the momentum's relaxation times those steps span (``relaxations``), and the
    ``equilibrium`` friction the heat calls for (:func:`settle`); ``closing``
    (:class:`~numpyro_sgrld.core.integrator_base.PendingKick`)."""

    momentum: Any
    thermostat: Any
    heat: Any = None
    heated: Any = None
    relaxations: Any = None
    equilibrium: Any = None
    closing: Any = None


#: Warm-up sets the thermostat to the equilibrium it measured (:func:`settle`) where that
#: measurement's relative error is at most ``SETTLE_ERROR`` and the thermostat is more than
#: ``SETTLE_Z`` such errors from it.
SETTLE_ERROR, SETTLE_Z = 0.25, 2.0


def _heating(state, xi, new_xi, kinetic, size, step_size, temperature):
    r"""``(heat, heated, relaxations, equilibrium)`` after a step whose momentum of ``size``
    coordinates has the kinetic temperature ``kinetic`` (:math:`K`), the friction having
    been ``xi``. With the momentum at its equilibrium for the friction :math:`\xi`,
    :math:`E[K] = S/(1 - e^{-2\xi h})`, :math:`S` the variance a step adds per coordinate
    (the injected noise's :math:`2AhT`, the gradient noise's :math:`h^2\sigma^2`); so
    :math:`(1 - e^{-2\xi h})K` is averaged (since :func:`restart`), and the friction that
    holds :math:`K = T` against it is :math:`-\log(1 - \bar S/T)/(2h)`
    (:math:`A + h\sigma^2/(2T)` to first order), capped where :math:`\bar S \ge T` (no
    friction can: the step is too large). :math:`K` has relative sd :math:`\sqrt{2/d}` and
    decorrelates over a relaxation time :math:`1/(2\xi h)` steps, so the mean's relative error
    is about :math:`\sqrt{2/(d\,n)}` over :math:`n` relaxation times. Where that error is
    above :data:`SETTLE_ERROR` (a short warm-up at a small step measures little) or the
    thermostat is within :data:`SETTLE_Z` errors of the measured equilibrium, the equilibrium
    is the thermostat's own next value ``new_xi`` (nothing to settle)."""
    w = 1.0 / (state.heated + 1.0)
    decay = -jnp.expm1(-2.0 * xi * step_size)
    heat = state.heat + w * (decay * kinetic - state.heat)
    relaxations = state.relaxations + jnp.minimum(decay, 1.0)
    share = jnp.clip(heat / temperature, 0.0, 0.99)
    target = -jnp.log1p(-share) / (2.0 * step_size)
    relative = jnp.sqrt(2.0 / (size * jnp.maximum(relaxations, 1e-12)))
    settles = (relative <= SETTLE_ERROR) & (jnp.abs(target - xi) > SETTLE_Z * relative * target)
    equilibrium = jnp.where(settles, target, new_xi)
    return heat, state.heated + 1, relaxations, equilibrium


def restart(state):
    """The heat's mean started afresh (halfway through warm-up: a chain's way in from its
    initial point heats the momentum far more than its equilibrium does)."""
    return state._replace(heated=jnp.zeros_like(state.heated),
                          relaxations=jnp.zeros_like(state.relaxations))


def settle(state, temperature):
    r"""The thermostat set to the friction its measured heating calls for (the
    :class:`~numpyro_sgrld.core.integrators.Settle` of warm-up). The thermostat's own dynamics,
    :math:`\dot\xi = K - T` with :math:`K \approx T\xi^*/\xi`, reach their equilibrium
    :math:`\xi^*` only over several relaxation times :math:`\xi^*/T` (hundreds of time units
    when the gradient noise dominates), and a chain started far from the posterior heats
    :math:`\xi` far above :math:`\xi^*` on its way in: until it settles the positions are
    too narrow (or, below :math:`\xi^*`, too wide)."""
    return state._replace(thermostat=state.equilibrium)


def _fresh(key, p, temperature):
    r"""A momentum like ``p`` drawn from its equilibrium law :math:`\mathcal N(0, T)` (the
    thermostats' momentum lives in the preconditioner's whitened coordinates)."""
    return jax.tree.map(lambda u: jnp.sqrt(temperature) * u, tree_normal(key, p))


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
    momentum). ``step_size=None`` adapts the step by :func:`time_step_law`, at most
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
    :math:`A + h\sigma^2/(2T)` (``tests/test_sgnht.py`` checks both). The thermostat relaxes
    towards that equilibrium only at the rate :math:`T/\xi` per time unit, and a chain's way
    in from its initial point heats it far above; so warm-up ends by setting :math:`\xi` to
    the friction that the heating it measured calls for (:func:`settle`).

    With a constant metric :math:`D = RR^\top` the dynamics run in the coordinates
    :math:`R^{-1}\theta`: the kick is :math:`R^\top\nabla\hat U`, the drift
    :math:`\theta \leftarrow \theta + hRp`, and :math:`p^\top p/d` is the kinetic temperature
    there (a metric with the :class:`~numpyro_sgrld.core.metrics.Constant` trait; a
    position-dependent metric would change the coordinates under the thermostat).
    """
    diffusion = real(diffusion, "diffusion", low=0, low_open=True,
                     hint="It is the injected noise A of Ding et al.; 1 is typical.")

    def init(position, key, step_size, temperature):
        xi = jnp.asarray(diffusion, jnp.result_type(float))
        zero = jnp.zeros((), xi.dtype)
        return SGNHTState(jax.tree.map(jnp.zeros_like, position), xi, zero,
                          jnp.zeros((), jnp.int32), zero, xi)

    def step(key, position, state, grad, preconditioner, setting):
        step_size, temperature, context, oracle = setting
        xi = state.thermostat
        scale = jnp.sqrt(2.0 * diffusion * step_size * temperature)
        noise = tree_normal(key, position)
        decay = jnp.exp(-xi * step_size)  # 1 - xi h to first order, stable for any xi h >= 0
        p = jax.tree.map(lambda u, g, n: decay * u - step_size * g + scale * n,
                         state.momentum, _root_t(preconditioner)(kicked(state, grad)), noise)
        position = jax.tree.map(lambda x, u: x + step_size * u, position,
                                preconditioner.noise(p))
        kinetic = _kinetic_temperature(p)
        size = sum(u.size for u in jax.tree.leaves(p))
        new_xi = xi + (kinetic - temperature) * step_size
        heating = _heating(state, xi, new_xi, kinetic, size, step_size, temperature)
        return position, SGNHTState(p, new_xi, *heating, identity_closing(state.closing))

    return Integrator(init, step, name="sgnht", traits=(
        NeedsConstantMetric(_THERMOSTAT_METRICS), Settle(settle, restart), PendingKick(),
        Overdamp(lambda s, key, temperature, preconditioner: init(
            s.momentum, None, None, None)._replace(momentum=_fresh(key, s.momentum,
                                                                   temperature),
                                                   closing=identity_closing(s.closing))),
        BiasLaw(time_step_law(diffusion),
                max_step=lambda target_bias: min(target_bias, 0.25) / diffusion)))


# --------------------------------------------------------------------------- BADODAB
class BADODABState(NamedTuple):
    """BADODAB's momentum ``p`` (the last half kick pending, as for
    :class:`~numpyro_sgrld.core.integrators.BAOABState`), its thermostat ``xi`` (a scalar),
    ``started`` and ``closing`` (:class:`~numpyro_sgrld.core.integrator_base.PendingKick`)."""

    momentum: Any
    thermostat: Any
    started: Any
    closing: Any = None


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
    \,\eta` (:math:`\sqrt{2ATh}\,\eta` at :math:`\xi = 0`), then D, A, B. As in
    :func:`~numpyro_sgrld.core.integrators.baoab`, the closing B is merged with the next step's
    opening one (one gradient per step).
    ``diffusion`` :math:`A > 0` (the injected noise, as in :func:`sgnht`), ``thermal_mass``
    :math:`\mu > 0`; :math:`\xi` starts at :math:`A`, :math:`p` at 0. With exact gradients the
    invariant law is :math:`\propto e^{-U/T - p^\top p/(2T) - d\mu(\xi - A)^2/(2T)}`, so
    :math:`E[\xi] = A`; gradient noise of variance :math:`\sigma^2` per coordinate adds
    :math:`h\sigma^2/2` to the diffusion (both half kicks at a step boundary share a minibatch:
    a kick of :math:`h` per step), and the thermostat settles at :math:`A + h\sigma^2/(2T)`
    (``tests/test_badodab.py``). A constant metric :math:`D = RR^\top` is taken as in
    :func:`sgnht` (kick :math:`R^\top\nabla\hat U`, drift :math:`Rp`);
    ``step_size=None`` adapts the step by :func:`time_step_law`.
    """
    diffusion = real(diffusion, "diffusion", low=0, low_open=True,
                     hint="It is the injected noise A (the thermostat's target); 1 is typical.")
    thermal_mass = real(thermal_mass, "thermal_mass", low=0, low_open=True,
                        hint="It is the thermostat's inertia mu; 1 is typical.")

    def init(position, key, step_size, temperature):
        return BADODABState(jax.tree.map(jnp.zeros_like, position),
                            jnp.asarray(diffusion, jnp.result_type(float)),
                            jnp.zeros((), bool))

    def step(key, position, state, grad, preconditioner, setting):
        step_size, temperature, context, oracle = setting
        h = step_size
        kick = merged_kick(_root_t(preconditioner), state, grad, h)  # pending B + this B
        root = preconditioner.noise
        p = jax.tree.map(jnp.subtract, state.momentum, kick)
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
        return position, BADODABState(p, xi, jnp.ones((), bool), identity_closing(state.closing))

    def refresh(state, key, temperature, preconditioner):
        return state._replace(momentum=_fresh(key, state.momentum, temperature),
                              thermostat=jnp.full_like(state.thermostat, diffusion),
                              started=jnp.zeros_like(state.started))

    return Integrator(init, step, name="badodab", traits=(
        NeedsConstantMetric(_THERMOSTAT_METRICS), BiasLaw(time_step_law(diffusion)),
        Overdamp(refresh), PendingKick()))
