"""The warm-up's pieces, each an ``init``/``update`` pair with its own state (as NumPyro's
``hmc_util`` adapts NUTS): the schedule of windows (:mod:`~numpyro_sgrld.warmup.schedule`) and
the constant preconditioner learnt over them (:mod:`~numpyro_sgrld.warmup.preconditioner`).
The step size is chosen by :mod:`numpyro_sgrld.adaptation` in the geometry they give.
``docs/step_size.md`` says in one paragraph what the warm-up does."""

from numpyro_sgrld.warmup.preconditioner import (
    PreconditionerWarmup,
    init_preconditioner,
    preconditioner_factor,
    preconditioner_scale,
    reset_preconditioner,
    update_preconditioner,
)
from numpyro_sgrld.warmup.schedule import (
    NUM_WINDOWS,
    final_window_start,
    first_window_start,
    window_ends,
)

__all__ = [
    "NUM_WINDOWS",
    "PreconditionerWarmup",
    "final_window_start",
    "first_window_start",
    "init_preconditioner",
    "preconditioner_factor",
    "preconditioner_scale",
    "reset_preconditioner",
    "update_preconditioner",
    "window_ends",
]
