r"""The metric protocol: :class:`Metric`, :class:`Preconditioner`, :class:`StepContext`."""

from collections.abc import Callable
from typing import Any, NamedTuple

from numpyro_sgrld._checks import integer, real


class Preconditioner(NamedTuple):
    """The metric at the current step: ``drift(v) = D v``, ``noise(xi) = R xi`` for a root
    :math:`R R^\top = D` (the symmetric :math:`D^{1/2}` unless ``noise_transpose`` is given),
    the correction drift Γ when it was computed (``None`` otherwise), and
    ``noise_transpose(v) = R^T v`` for a root that is not symmetric (``None``: :math:`R` is
    symmetric). Step-size adaptation measures the curvature :math:`R^\top H R` with it."""

    drift: Callable
    noise: Callable
    correction: Any | None = None
    noise_transpose: Callable | None = None


class StepContext(NamedTuple):
    r"""What a metric may know about a step besides the gradient and the position.

    - **num_data** – :math:`N`, to form the per-datum gradient :math:`\bar g = \nabla\hat U/N`.
    - **steps_per_epoch** – :math:`N/n` of the largest subsample plate (1 without one).
    - **step** – the step counter :math:`t` (0 on the first step).
    - **aux** – a dict of the auxiliary values the model's forward pass recorded on this
      minibatch with :func:`numpyro_sgrld.auxiliary` (computed in the same pass as the gradient),
      e.g. a layer's inputs; ``None`` when the model records none.

    ``num_data`` and ``steps_per_epoch`` are Python numbers fixed when the kernel is
    initialised; ``step`` and ``aux`` are arrays. Called directly, ``update(grad, state,
    position)`` uses ``StepContext()`` (:math:`N = 1`).
    """

    num_data: Any = 1
    steps_per_epoch: Any = 1
    step: Any = 0
    aux: Any = None


def _context(context):
    return StepContext() if context is None else context


class Metric(NamedTuple):
    r"""A metric as a pair of pure functions (see the module docstring).

    ``averages_gradient`` declares that the state is made only of moving averages of
    :math:`\bar g` or :math:`\bar g\odot\bar g` (and integer counters), so it stays finite
    whenever the gradient's squared norm is finite: every new entry is a convex combination of
    a finite old entry and a finite statistic. The kernels then need not check the new state
    for finiteness on every step (only the gradient and the new position);
    ``False`` (the default, e.g. for roots of an eigendecomposition) keeps that check.

    ``statistic_order`` is the power of the gradient in the averaged statistic (2 for
    :math:`\bar g\odot\bar g` or :math:`\bar g\bar g^\top`, 1 for :math:`\bar g`); the
    lagged Γ correction uses it (:func:`numpyro_sgrld.correction.lag_response`).

    ``warm_start(state, curvature) -> state`` (optional) gives a metric whose statistic
    estimates :math:`E[\bar g\odot\bar g]` a starting value that does not depend on where the
    chain starts: ``curvature`` is an unbiased estimate of the diagonal of the minibatch
    potential's Hessian at the initial position, and under the posterior
    :math:`E_\pi[(\partial_i U)^2] = E_\pi[\partial_{ii} U]` (integration by parts, the
    Fisher identity), so it is what the squared gradient averages to — also at a mode, where
    the gradient itself is zero. ``context`` is the :class:`StepContext` of the first step.

    ``correction_hint`` says why the Γ correction is not available when ``decay`` is
    ``None`` (and what to change); ``name`` names the metric in error messages;
    ``needs_aux`` names the auxiliary values (see :class:`StepContext`) the metric reads: a
    kernel refuses a model that does not record them (a name ending in ``*`` asks for at least
    one value whose name starts with the rest); ``aux_hint`` says where they come from.

    ``restart(state, position, context) -> state`` (optional) marks a metric with a constant
    part that warm-up learns (:func:`~numpyro_sgrld.metrics.whitened`): the state's ``scale``
    and ``factor`` are set as for :func:`~numpyro_sgrld.metrics.learnt` at the end of each slow
    window, and ``restart`` then gives the state in the new coordinates.
    """

    init: Callable
    update: Callable
    decay: float | None = None
    averages_gradient: bool = False
    warm_start: Callable | None = None
    statistic_order: int = 2
    correction_hint: str = ""
    needs_aux: tuple = ()
    name: str = "metric"
    aux_hint: str = ""
    restart: Callable | None = None


def _same(tree):
    return tree


def _check_decay(decay, name="decay"):
    return real(decay, name, low=0, high=1, high_open=True)


def _check_nonnegative(value, name):
    return real(value, name, low=0)


def _check_interval(value, name="update_interval"):
    return integer(value, name, low=1)
