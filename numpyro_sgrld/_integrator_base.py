"""The :class:`Integrator` protocol of :mod:`numpyro_sgrld.integrators` and what its
integrators share."""

from collections.abc import Callable
from typing import NamedTuple

__all__ = ["Integrator"]


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
