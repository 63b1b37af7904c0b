r"""The metric protocol: :class:`Metric`, :class:`Preconditioner`, :class:`StepContext`."""

from collections.abc import Callable
from typing import Any, NamedTuple

from numpyro_sgrld.core.checks import integer, real


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


def step_context(context):
    """``context``, or the :class:`StepContext` of a metric's ``update`` called without one
    (:math:`N = 1`, step 0, no auxiliary values)."""
    return StepContext() if context is None else context


class Metric(NamedTuple):
    r"""A metric as a pair of pure functions (see the module docstring): ``init(position) ->
    state`` and ``update(grad, state, position, context) -> (Preconditioner, state)``, what
    the step calls. ``name`` names it in error messages. ``traits``: what other parts of the
    library read from it (:mod:`numpyro_sgrld.core.traits`), each only where it applies:
    :class:`~numpyro_sgrld.core.correction.Lag` (the Γ correction's moving average) or
    :class:`~numpyro_sgrld.core.correction.NoLag` (why there is none),
    :class:`~numpyro_sgrld.core.acceptance.Averages` (a state that stays finite with the gradient),
    :class:`Aux` (auxiliary values read from the model), :class:`WarmStart`,
    :class:`Restart` and :class:`Learnt`."""

    init: Callable
    update: Callable
    name: str = "metric"
    traits: tuple = ()


class Aux(NamedTuple):
    """A metric's trait: the auxiliary values it reads (see :class:`StepContext`); a kernel
    refuses a model that does not record them (a name ending in ``*`` asks for at least one
    value whose name starts with the rest). ``hint`` says where they come from."""

    names: tuple
    hint: str = ""


class WarmStart(NamedTuple):
    r"""A metric's trait: ``fn(state, curvature, context) -> state`` gives a metric whose
    statistic estimates :math:`E[\bar g\odot\bar g]` a starting value that does not depend on
    where the chain starts: ``curvature`` is an unbiased estimate of the diagonal of the
    minibatch potential's Hessian at the initial position, and under the posterior
    :math:`E_\pi[(\partial_i U)^2] = E_\pi[\partial_{ii} U]` (integration by parts, the
    Fisher identity), so it is what the squared gradient averages to — also at a mode, where
    the gradient itself is zero. ``context`` is the :class:`StepContext` of the first step."""

    fn: Callable


class AdaptsUntil(NamedTuple):
    """A metric's trait: it still adapts ``what`` over its first ``steps`` updates and holds it
    fixed after them (:func:`~numpyro_sgrld.core.metrics.monge`'s ``freeze_after``). The Γ
    correction is that of a metric that no longer adapts, so :meth:`SGMCMC.init
    <numpyro_sgrld.SGMCMC.init>` warns when a corrected kernel's warm-up is shorter. (Whitened
    in a dense learnt metric, with ``step_size=None`` and at most
    :data:`~numpyro_sgrld.core.metrics.constant.DENSE_MAX_DIM` coordinates, the metric
    restarts at each window's end and adapts ``steps`` updates more after the last one; the
    warning does not count those.)"""

    steps: int
    what: str


class Constant(NamedTuple):
    """A metric's trait: :math:`D` depends neither on the position nor on the chain's path
    once warm-up has ended (the identity, a given diagonal, one learnt in warm-up). An
    integrator that measures a temperature in the metric's coordinates (SGNHT's and BADODAB's
    thermostats, their :class:`~numpyro_sgrld.core.integrators.NeedsConstantMetric`) takes only
    such a metric."""


class Learnt(NamedTuple):
    """A metric's trait: warm-up learns it when the step size is adapted
    (:func:`~numpyro_sgrld.core.metrics.learnt`,
    :func:`~numpyro_sgrld.core.metrics.learnt_diagonal`):
    the state's ``scale`` (and, where dense, ``factor``) becomes the estimate of each slow
    window's statistics at the window's end (:mod:`numpyro_sgrld.warmup`)."""


class Restart(NamedTuple):
    """A metric's trait: ``fn(state, position, context) -> state`` marks a metric with a
    constant part that warm-up learns (:func:`~numpyro_sgrld.core.metrics.whitened`): the state's
    ``scale`` and ``factor`` are set as for :func:`~numpyro_sgrld.core.metrics.learnt` at the end
    of each slow window, and ``fn`` then gives the state in the new coordinates."""

    fn: Callable


def unchanged(tree):
    return tree


def check_decay(decay, name="decay"):
    return real(decay, name, low=0, high=1, high_open=True)


def check_nonnegative(value, name):
    return real(value, name, low=0)


def check_interval(value, name="update_interval"):
    return integer(value, name, low=1)
