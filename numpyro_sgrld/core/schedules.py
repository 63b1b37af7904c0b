r"""Step-size schedules :math:`t \mapsto h_t` (``t`` is the 0-based iteration counter).

Every kernel's ``step_size`` accepts a positive float or one of these schedules (or any
callable of the iteration counter that returns positive values). ``h`` is in potential units:
the Langevin step is :math:`\theta \leftarrow \theta - h D \nabla\hat U + \sqrt{2hT} D^{1/2}\xi`.
Learning rates of papers that write ``lr`` for the sum-of-log-likelihood gradient map as
``h = lr / N``; those that write :math:`(\epsilon/2)\nabla\log p + \mathcal N(0, \epsilon)` map
as ``h = epsilon / 2``.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_sgrld.core.checks import as_scalar, integer, real

__all__ = ["constant", "polynomial_decay", "cyclical", "as_schedule"]


def _check_positive(name, value):
    real(value, name, low=0, low_open=True)


class constant(NamedTuple):
    """A constant step size :math:`h_t = h`."""

    step_size: float

    def __call__(self, t):
        return jnp.asarray(self.step_size, dtype=jnp.result_type(float)) + 0 * t


class polynomial_decay(NamedTuple):
    r"""Polynomial decay :math:`h_t = a (b + t)^{-\gamma}` (Welling & Teh 2011).

    ``a`` > 0, ``b`` > 0 (so that :math:`h_0` is finite) and ``gamma`` ≥ 0; Welling & Teh use
    :math:`\gamma \in (0.5, 1]`, for which :math:`\sum h_t = \infty` and
    :math:`\sum h_t^2 < \infty`.
    """

    a: float
    b: float = 1.0
    gamma: float = 0.55

    def __call__(self, t):
        return self.a * (self.b + jnp.asarray(t, dtype=jnp.result_type(float))) ** (-self.gamma)


class cyclical(NamedTuple):
    r"""Cyclical cosine schedule of Zhang et al. (2020), "Cyclical SG-MCMC", Eq. (1).

    .. math::
        h_t = \frac{h_0}{2}\left[\cos\left(\frac{\pi\,\mathrm{mod}(t, L)}{L}\right) + 1\right],
        \qquad L = \lceil K / M \rceil,

    with ``K = num_steps`` (total steps), ``M = num_cycles``. The step size never reaches zero:
    its smallest value is :math:`h_0 (1 + \cos(\pi (L-1)/L))/2 > 0`.
    """

    step_size: float
    num_steps: int
    num_cycles: int = 4

    def __call__(self, t):
        cycle_len = math.ceil(self.num_steps / self.num_cycles)
        phase = jnp.mod(jnp.asarray(t), cycle_len) / cycle_len
        return 0.5 * self.step_size * (jnp.cos(jnp.pi * phase) + 1.0)


def _validate(schedule):
    if isinstance(schedule, constant):
        _check_positive("step_size", schedule.step_size)
    elif isinstance(schedule, polynomial_decay):
        _check_positive("polynomial_decay.a", schedule.a)
        _check_positive("polynomial_decay.b", schedule.b)
        if not schedule.gamma >= 0:
            raise ValueError(f"`polynomial_decay.gamma` must be >= 0, got {schedule.gamma!r}.")
    elif isinstance(schedule, cyclical):
        _check_positive("cyclical.step_size", schedule.step_size)
        for field in ("num_steps", "num_cycles"):
            integer(getattr(schedule, field), f"cyclical.{field}")
    # Any schedule, built-in or user supplied: probe it on a grid of iterations that covers
    # runs of up to ten million steps, so that a schedule that goes non-positive fails now,
    # loudly, rather than deep inside a compiled loop.
    # It is called as the kernels call it: on a traced 0-d int32 step counter, inside jit (here
    # vmapped over the probe; a schedule that ignores t is broadcast).
    probe = np.unique(np.concatenate([np.arange(1000), np.geomspace(1000, 1e7, 200).astype(int)]))
    try:
        values = np.asarray(jax.jit(jax.vmap(schedule))(jnp.asarray(probe, jnp.int32)))
    except jax.errors.ConcretizationTypeError as e:
        raise ValueError(
            "The step-size schedule cannot be traced: it is called with the step counter t as a "
            "traced JAX integer inside a compiled loop, so Python control flow on t (`if t < "
            "100`, `min(t, ...)`, `math.` functions) fails. Write it with jax.numpy, e.g. "
            "`lambda t: jnp.where(t < 100, 1e-3, 1e-4)`, or use `polynomial_decay`/`cyclical`."
        ) from e
    except Exception as e:  # noqa: BLE001 (any failure of user code, explained)
        raise ValueError(
            f"The step-size schedule raised {type(e).__name__} when called on the step counter "
            f"t (a traced 0-d int32 JAX array): {e}"
        ) from e
    if values.shape != probe.shape or not np.all(np.isfinite(values)) or np.any(values <= 0):
        bad = probe[~(np.isfinite(values) & (values > 0))] if values.shape == probe.shape else probe
        raise ValueError(
            "The step-size schedule must return finite values > 0 for every iteration t "
            f"(elementwise on an array of t); it does not at t = {bad[:5].tolist()}. "
            "Use `constant`, `polynomial_decay` or `cyclical`, or fix the callable."
        )


def as_schedule(step_size) -> Callable:
    """Turn ``step_size`` (a float or a schedule) into a validated schedule ``t -> h_t``."""
    if isinstance(step_size, (bool, np.bool_)) or step_size is None:
        raise ValueError(f"`step_size` must be a number > 0 or a schedule, got {step_size!r}.")
    if as_scalar(step_size) is not None:
        schedule = constant(real(step_size, "step_size", low=0, low_open=True))
    elif callable(step_size):
        schedule = step_size
    else:
        raise ValueError(
            f"`step_size` must be a number > 0 or a callable schedule t -> h_t, got {step_size!r}."
        )
    _validate(schedule)
    return schedule
