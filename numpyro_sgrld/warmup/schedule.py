r"""The warm-up's schedule: three stages, as NumPyro's ``build_adaptation_schedule``.

For ``num_warmup`` :math:`W` steps (all boundaries integer arithmetic on :math:`W`, so they
work on Python ints and on traced arrays alike):

1. **Approach**, steps :math:`[0, W/5)`: the chain moves to the posterior's bulk with a large,
   stable step (curvature only, :mod:`numpyro_sgrld.warmup.adaptation`); nothing is learnt from
   these positions.
2. **Slow windows**, steps :math:`[W/5, 4W/5)`: :data:`NUM_WINDOWS` windows, each twice as long
   as the one before (lengths :math:`b, 2b, 4b, 8b` with :math:`b = \lfloor L/15\rfloor` over
   the stage's length :math:`L`, the last taking the rest). A learnt preconditioner is
   re-estimated from each window's draws at its end (:mod:`~numpyro_sgrld.warmup.preconditioner`)
   and the step is measured again in the new geometry. Short windows first: the preconditioner
   improves quickly while the chain is still settling; long ones last: the final estimate
   averages many draws.
3. **Final window**, steps :math:`[4W/5, W)`: the geometry is fixed; the step freezes at the
   bias target averaged over this window.
"""

import jax.numpy as jnp

__all__ = ["NUM_WINDOWS", "final_window_start", "first_window_start", "window_ends"]

#: The number of slow windows (lengths b, 2b, 4b, 8b: 15 b in all).
NUM_WINDOWS = 4


def first_window_start(num_warmup):
    """The first step after the approach: ``num_warmup // 5``."""
    return num_warmup // 5


def final_window_start(num_warmup):
    """The first step of the final window: ``num_warmup - num_warmup // 5``."""
    return num_warmup - num_warmup // 5


def window_ends(num_warmup):
    """The steps after which each slow window ends (an array of :data:`NUM_WINDOWS`; the last
    is :func:`final_window_start`): warm-up step ``i`` closes a window when ``i + 1`` is one of
    them."""
    start = first_window_start(num_warmup)
    stop = final_window_start(num_warmup)
    base = (stop - start) // (2**NUM_WINDOWS - 1)
    ends = [start + base * (2 ** (k + 1) - 1) for k in range(NUM_WINDOWS - 1)] + [stop]
    return jnp.stack([jnp.asarray(e, jnp.int32) for e in ends])
