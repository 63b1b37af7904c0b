"""The :class:`Integrator` protocol of :mod:`numpyro_sgrld.core.integrators` and what its
integrators share."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Integrator", "StepSetting", "BiasLaw", "StepHint", "Rescale", "Settle",
           "Overdamp", "NeedsConstantMetric", "PendingKick", "closed", "identity_closing",
           "kicked", "merged_kick"]


class Integrator(NamedTuple):
    r"""An integrator as a pair of pure functions (see the module docstring): ``init(position,
    key, step_size, temperature) -> state`` and ``step(key, position, state, grad,
    preconditioner, setting) -> (position, state)`` with a :class:`StepSetting`, what the
    step calls. ``name``
    names it in error messages; ``carries_correction``: whether the step adds the Γ drift of
    a position-dependent metric (``preconditioner.correction``) as the Riemannian Langevin
    diffusion needs it. ``traits``: what other parts of the library read from it
    (:mod:`numpyro_sgrld.core.traits`), each only where it applies: :class:`BiasLaw`,
    :class:`StepHint`, :class:`Rescale`, :class:`NeedsConstantMetric` and
    :class:`~numpyro_sgrld.core.acceptance.Averages` (a state that a finite gradient keeps
    finite, so that the kernel need not check it every step)."""

    init: Callable
    step: Callable
    name: str = "integrator"
    carries_correction: bool = False
    traits: tuple = ()


class StepSetting(NamedTuple):
    """What an integrator's ``step(key, position, state, grad, preconditioner, setting)`` is
    told about this step besides where it starts and what drives it: the step size
    :math:`h`, the temperature :math:`T`, the metric's
    :class:`~numpyro_sgrld.core.metrics.StepContext`, and ``oracle(z) -> (value, grad)``, the
    gradient estimator on the same minibatch at another point (``None`` where there is
    none; a splitting scheme such as BAOAB asks it for the gradient at an intermediate
    position)."""

    step_size: Any
    temperature: Any
    context: Any = None
    oracle: Callable | None = None


class BiasLaw(NamedTuple):
    r"""An integrator's trait, read by step-size adaptation
    (:mod:`numpyro_sgrld.warmup.adaptation`):
    ``weights`` :math:`(c_\lambda, c_s)`, the first-order inflation of the discretised chain's
    stationary variance on a Gaussian, :math:`1 + h(c_\lambda\lambda + c_s s^2/T)` for
    curvature :math:`\lambda` and gradient-noise variance :math:`s^2` (both in the metric's
    coordinates); a third element 2 makes the curvature term second order,
    :math:`c_\lambda h^2\lambda` (time-step integrators, :func:`time_step_law`).
    ``max_step(target_bias)``: the largest step ``step_size=None`` may choose, where the
    integrator has a bias or limit that does not depend on the posterior (``None``: none).
    Without it the step must be given."""

    weights: tuple
    max_step: Callable | None = None


class StepHint(NamedTuple):
    """An integrator's trait: how to choose a step where it has no :class:`BiasLaw`."""

    text: str


class Rescale(NamedTuple):
    r"""An integrator's trait: ``fn(state, ratio)``, the state after the step size is
    multiplied by ``ratio`` during warm-up (absent: nothing in the state depends on it);
    SGHMC's momentum, in units of position per step, scales with :math:`\sqrt h`."""

    fn: Callable


class Settle(NamedTuple):
    r"""An integrator's trait: ``fn(state, temperature)``, its state at the end of warm-up,
    and ``restart(state)``, its state halfway through (absent: nothing to settle); a
    thermostat is set to the equilibrium it measured over the second half of warm-up, which
    its own dynamics would reach only after many relaxation times."""

    fn: Callable
    restart: Callable


class Overdamp(NamedTuple):
    r"""An integrator's trait: ``fn(state, key, temperature, preconditioner)``, its state with
    a fresh momentum, drawn from its equilibrium law at ``temperature`` (in the
    preconditioner's geometry), no half kick pending and the thermostat at its start.
    Warm-up's approach (:func:`numpyro_sgrld.warmup.schedule.first_window_start`) applies it
    after every step, so that a chain on its way in from its initial point moves as
    overdamped Langevin dynamics (one step from a fresh momentum is a Langevin step of
    :math:`h^2/2`, noise included) and carries no momentum from one step to the next: a
    momentum carried through a funnel's neck (a horseshoe scale, whose restoring force falls
    as the scale grows) throws the chain out to scales many orders of magnitude beyond the
    posterior's, where the weights' curvature vanishes and the preconditioner learnt there
    does not fit the posterior."""

    fn: Callable


class NeedsConstantMetric(NamedTuple):
    """An integrator's trait: it takes only a metric with the
    :class:`~numpyro_sgrld.core.metrics.Constant` trait, for the reason ``hint`` (absent: any
    metric)."""

    hint: str = ""


class PendingKick(NamedTuple):
    r"""An integrator's trait: its state carries a step's closing half kick to the next step,
    which applies it with that step's gradient (BAOAB, BADODAB; and SGHMC, SGNHT, whose
    velocity is a half step from the positions, the kick between two steps one merged
    kick), and a field ``closing``,
    ``None`` or ``(scale, shift)`` (trees like the position): the closing half kick then
    takes :math:`r \odot \nabla\hat U + q` in place of :math:`\nabla\hat U` (the
    opening one :math:`\nabla\hat U`), and the step leaves :math:`r = 1, q = 0`. SG-MCMC
    within Gibbs (:mod:`numpyro_sgrld.sampler.gibbs_kick`) sets it where a sweep between two
    steps changes the potential and the coordinates: the closing half kick is then still
    the gradient of the potential the step ended in, at the point where it ended."""


def closed(closing, grad):
    r""":math:`r \odot g + q` for ``closing`` :math:`(r, q)` and the gradient tree ``g``."""
    scale, shift = closing
    return jax.tree.map(lambda g, r, q: r * g + q, grad, scale, shift)


def merged_kick(drift, state, grad, step_size):
    r"""The velocity change of a step boundary's two half kicks merged into one, less its
    sign: ``drift`` the preconditioner's :math:`D` (linear) applied to a gradient tree,
    ``state`` an integrator state with ``started`` (no closing half kick before the first
    step) and ``closing`` (:class:`PendingKick`), ``grad`` the step's gradient. Without a
    ``closing``: :math:`h D\nabla\hat U` (:math:`\tfrac h2` before the first step); with
    one, :math:`D(\tfrac h2\nabla\hat U + \tfrac h2 c)`, :math:`c` the gradient the last step
    ended in (``0`` before the first step), :math:`D` applied once."""
    kick = jnp.where(state.started, step_size, 0.5 * step_size)  # pending B + this B
    if state.closing is None:
        return jax.tree.map(lambda d: kick * d, drift(grad))
    pending = jnp.where(state.started, 0.5 * step_size, 0.0)
    # D is linear: applied once, to the two half kicks' gradients combined
    return drift(jax.tree.map(lambda g, c: 0.5 * step_size * g + pending * c,
                              grad, closed(state.closing, grad)))


def kicked(state, grad):
    r"""The gradient a merged kick of a first-order scheme (SGHMC, SGNHT: the velocity a half
    step from the positions) takes: ``grad``, or with a ``closing``
    (:class:`PendingKick`) :math:`\tfrac12(\nabla\hat U + r\odot\nabla\hat U + q)`, its
    first half the potential's the last step ended in."""
    if state.closing is None:
        return grad
    return jax.tree.map(lambda g, c: 0.5 * (g + c), grad, closed(state.closing, grad))


def identity_closing(closing):
    """``closing`` reset: :math:`r = 1, q = 0` (``None`` stays ``None``)."""
    if closing is None:
        return None
    return jax.tree.map(jnp.ones_like, closing[0]), jax.tree.map(jnp.zeros_like, closing[1])


def time_step_law(friction):
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
