r"""What ``step_size=None`` turns on, in one place. A kernel built without a step size
(every preset's default) has warm-up choose, for a stated bias (``target_bias``):

1. **the step size**: measured in warm-up and frozen after it
   (:mod:`numpyro_sgrld.warmup.adaptation`);
2. **a constant preconditioner** learnt over warm-up's windows, where the kernel is given no
   metric (:func:`default_metric`: :func:`~numpyro_sgrld.core.metrics.learnt`; with a step size,
   the identity);
3. **an adaptive metric in the learnt coordinates**, a preset's or the user's alike
   (:func:`kernel_metric`: :func:`~numpyro_sgrld.core.metrics.whitened`, a dense metric for
   at most :data:`~numpyro_sgrld.core.metrics.constant.DENSE_MAX_DIM` coordinates under the
   adaptive one), unless it is constant (:class:`~numpyro_sgrld.core.metrics.Constant`), reads the
   model's auxiliary values in the model's own coordinates
   (:class:`~numpyro_sgrld.core.metrics.Aux`)
   or is whitened already (:class:`~numpyro_sgrld.core.metrics.Restart`);
4. **control variates switched on in warm-up** where they reduce the gradient noise enough to
   pay for their second gradient, where the kernel is given no gradient estimator and has a
   model (:func:`default_gradient`);
5. **when a cyclical preset's cycles start**: after warm-up, with the adapted step as their
   peak; with a given step, from the first step
   (:func:`~numpyro_sgrld.warmup.cycles.cycle_start`).

With a given ``step_size`` none of these happen: the step, the identity metric, the plain
minibatch gradient, the adaptive metric in the model's own coordinates, cycles from step 0.
With learnt settings (``settings=``, :mod:`numpyro_sgrld.warmup.settings`) the kernel is
composed as with ``step_size=None`` and starts from what a warm-up learnt, learning nothing.
"""

from numpyro_sgrld.core.gradients import warmup_control_variates
from numpyro_sgrld.core.metrics import (
    Aux,
    Constant,
    Metric,
    Restart,
    identity,
    learnt,
    whitened,
)
from numpyro_sgrld.core.traits import trait

__all__ = ["default_gradient", "default_metric", "kernel_metric",
           "preset_metric"]


def default_metric(step_size):
    """The metric of a kernel given none: learnt in warm-up with ``step_size=None``, else the
    identity."""
    return learnt() if step_size is None else identity()


def preset_metric(metric, step_size):
    """An adaptive metric: in the coordinates of a dense metric learnt in warm-up with
    ``step_size=None``; as given otherwise."""
    return whitened(metric) if step_size is None else metric


def kernel_metric(metric, step_size):
    """The metric a kernel composed from its pieces runs with, the one rule for every preset
    and every metric a user gives: :func:`default_metric` where none is given; with
    ``step_size=None`` an adaptive metric in learnt coordinates (:func:`preset_metric`), but
    not a constant one, one that reads the model's auxiliary values, or one whitened
    already; ``metric`` as given otherwise."""
    if metric is None:
        return default_metric(step_size)
    if not isinstance(metric, Metric):  # refused, with the fix, by the composition
        return metric
    if any(trait(metric, kind) is not None for kind in (Constant, Aux, Restart)):
        return metric
    return preset_metric(metric, step_size)


def default_gradient(step_size, gradient, control_variate, has_model):
    """The gradient estimator chosen for the kernel, or ``None`` where the kernel's own
    arguments decide it: control variates switched on in warm-up, with ``step_size=None``, a
    model, and neither ``gradient`` nor ``control_variate`` given."""
    if step_size is None and gradient is None and control_variate is None and has_model:
        return warmup_control_variates()
    return None

