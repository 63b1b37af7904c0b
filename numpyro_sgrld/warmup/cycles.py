r"""Cyclical SG-MCMC (Zhang et al. 2020), all of it: :class:`Cycles`, cycles of ``length``
steps whose first ``explore`` steps are an exploration stage at temperature 0, checked and
made with their cosine schedule from a preset's options (:func:`cycles_of`), and what the
cycles change, each a function of the value (the presets :class:`~numpyro_sgrld.CyclicalSGLD`
and :class:`~numpyro_sgrld.CyclicalSGHMC` are :class:`~numpyro_sgrld.SGMCMC` given one):

- the transition: :func:`exploration_stage` runs the exploration in front of the transition
  that starts a cycle, so the state a transition returns, the draw, is a sampling-stage state;
- the step after an adapted warm-up: the adapted step times the cycle's cosine
  (:func:`step_size`);
- when the first cycle begins (:func:`cycle_start`) and where the sampling phase starts in
  the step counter (:func:`first_sampling_step`);
- a draw's place in its cycle (:func:`position`).
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from numpyro_sgrld.core.checks import integer, real
from numpyro_sgrld.core.schedules import cyclical

__all__ = ["CYCLE_LENGTH", "Cycles", "cycle_start", "cycles_of", "exploration_stage",
           "first_sampling_step", "position", "step_size"]

#: Steps per cycle of the cyclical presets when ``cycle_length`` is not given: with the default
#: ``exploration=0.5``, 500 draws per cycle.
CYCLE_LENGTH = 1000


class Cycles(NamedTuple):
    r"""Cycles of ``length`` (:math:`L`) steps, the first ``explore`` (:math:`E`) of each an
    exploration stage."""

    length: int
    explore: int


def cycles_of(kernel, step_size, cycle_length, exploration):
    """The cosine schedule with peak ``step_size`` and period ``cycle_length``
    (:func:`~numpyro_sgrld.core.schedules.cyclical`; ``None`` with ``step_size=None``: the
    peak is adapted in warm-up) and the exploration stage's :class:`Cycles`, checked, for the
    preset named ``kernel``."""
    length = integer(CYCLE_LENGTH if cycle_length is None else cycle_length, "cycle_length",
                     low=2, hint="It is the number of steps per cycle, exploration included.")
    beta = real(exploration, "exploration", low=0, high=1, high_open=True,
                hint="It is the fraction beta of each cycle spent exploring (no noise, no draws).")
    explore = math.ceil(beta * length)
    if explore >= length:
        raise ValueError(
            f"exploration={beta!r} of cycle_length={length} leaves no sampling step in a cycle "
            f"({explore} exploration steps): lower `exploration` or raise `cycle_length`."
        )
    if step_size is None:
        return None, Cycles(length, explore)
    h0 = real(step_size, "step_size", low=0, low_open=True,
              hint=f"It is the cycle's peak step h0 (a number: the schedule is the cosine), "
              f"or None to adapt it in warm-up: {kernel}(model).")
    return cyclical(h0, length, 1), Cycles(length, explore)


def cycle_start(num_warmup, adapts_step_size):
    """The step at which the first cycle begins: after an adapted warm-up, else at once."""
    return int(num_warmup) if adapts_step_size else 0


def exploration_stage(transition, length, explore, start):
    """``transition`` (``(setting, state, target, adapting) -> state``,
    :func:`numpyro_sgrld.warmup.steps.transition`) with cyclical SG-MCMC's exploration stage
    (Zhang et al. 2020) in front of it at the first step of every cycle of ``length`` steps
    counted from step ``start``: ``explore`` transitions at temperature 0 (stochastic gradient
    descent, or with momentum for SGHMC), so that the state the transition returns, the draw,
    is a sampling-stage state. The transition's index is ``target.step`` (unbatched for
    vectorised chains: the branch stays a branch)."""

    def with_exploration(setting, state, target, adapting=None):
        i = target.step
        starts = (i - start >= 0) & ((i - start) % length == 0)
        cold = setting.cold()
        # after warm-up (``adapting=False`` known when traced) so are the exploration's steps
        during = False if adapting is False else None

        def run(state):
            return jax.lax.fori_loop(
                0, explore,
                lambda j, s: transition(cold, s, target._replace(step=i + j), during), state)

        state = jax.lax.cond(starts, run, lambda s: s, state)
        return transition(setting, state, target._replace(step=i + explore * starts), adapting)

    return with_exploration


def step_size(cycles, i, adaptation):
    r""":math:`h_i` after an adapted warm-up: the adapted step times the cosine of the
    cycle's position, :math:`\tfrac12[\cos(\pi\,\mathrm{mod}(k, L)/L) + 1]` for the
    :math:`k`-th step after warm-up; during warm-up the adaptation's step."""
    k = i - adaptation.num_warmup
    cosine = 0.5 * (jnp.cos(jnp.pi * (k % cycles.length) / cycles.length) + 1)
    return jnp.where(k >= 0, adaptation.step_size * cosine, adaptation.step_size)


def first_sampling_step(cycles, num_warmup, adapts_step_size):
    """The step counter after ``num_warmup`` transitions: with a given peak step the cycles
    run from the first step, and each cycle of ``L`` steps is ``L - E`` transitions (its first
    runs the ``E`` exploration steps before its own)."""
    if adapts_step_size:
        return num_warmup
    length, explore = cycles
    full, rest = num_warmup // (length - explore), num_warmup % (length - explore)
    return full * length + jnp.where(rest > 0, explore + rest, 0)


def position(cycles, cycle_start, i):
    r"""``(cycle, step_in_cycle)`` of the step that produced the state with counter ``i``:
    ``(k - 1) // L`` and ``(k - 1) % L`` for ``k = i - cycle_start``."""
    k = i - cycle_start
    return (k - 1) // cycles.length, (k - 1) % cycles.length
