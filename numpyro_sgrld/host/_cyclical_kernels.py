r"""The cyclical presets (re-exported by :mod:`numpyro_sgrld.kernels`): cyclical SGLD and
SGHMC (Zhang et al. 2020)."""

import math

from numpyro_sgrld.core._checks import integer, real
from numpyro_sgrld.core.integrators import langevin, sghmc
from numpyro_sgrld.core.schedules import cyclical
from numpyro_sgrld.host._adapter import SGMCMC
from numpyro_sgrld.host._cycles import Cycles, position

__all__ = ["CYCLE_LENGTH", "CyclicalSGHMC", "CyclicalSGLD"]


#: Steps per cycle of the cyclical presets when ``cycle_length`` is not given: with the default
#: ``exploration=0.5``, 500 draws per cycle.
CYCLE_LENGTH = 1000


def _cycle(kernel, step_size, cycle_length, exploration):
    """The cosine schedule with peak ``step_size`` and period ``cycle_length`` (``None`` with
    ``step_size=None``: the peak is adapted in warm-up), and the exploration stage's
    :class:`~numpyro_sgrld.host._cycles.Cycles`, checked."""
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


class _Cyclical:
    """What the cyclical presets add to :class:`~numpyro_sgrld.SGMCMC` given their
    :class:`~numpyro_sgrld.host._cycles.Cycles`: a draw's place in its cycle, and the cycle's
    shape."""

    def cycle_position(self, i):
        r"""``(cycle, step_in_cycle)`` of the step that produced the state with counter ``i``
        (the ``i`` extra field of a draw): ``(k - 1) // L`` and ``(k - 1) % L`` for
        ``k = i - W``, ``W`` the warm-up's length when the step is adapted (the cycles begin
        after it), else 0. Every draw has ``step_in_cycle >= E`` (a sampling step)."""
        return position(self.cycles, self.cycle_start, i)

    @property
    def cycle_length(self):
        """:math:`L`, steps per cycle (exploration included)."""
        return self.cycles.length

    @property
    def exploration_steps(self):
        r""":math:`E = \lceil\beta L\rceil`, exploration steps at the start of each cycle."""
        return self.cycles.explore


_CYCLICAL_DOC = r"""

    **The step:** :math:`h_k = \frac{h_0}{2}\big[\cos(\pi\,\mathrm{mod}(k, L)/L) + 1\big]`
    (:class:`~numpyro_sgrld.schedules.cyclical`), :math:`k` the step counter, :math:`L` =
    ``cycle_length``. **The stages:** the first :math:`E = \lceil\beta L\rceil` steps of every
    cycle (``exploration`` :math:`\beta`) are an *exploration stage*: the same update at
    temperature 0 (no injected noise), which moves fast towards a mode while the step is large;
    the remaining :math:`L - E` steps sample. Exploration states are not posterior draws, so
    they never reach ``MCMC``'s draws: ``MCMC`` records one state per transition on a fixed
    grid, and the transition that starts a cycle runs the whole exploration stage internally
    (a loop of :math:`E` steps) before its one sampling step. Every recorded state is a
    sampling-stage state; ``num_samples`` counts sampling steps (each cycle gives
    :math:`L - E` of them, at the cost of :math:`L` gradients) and the step counter ``i`` counts
    all steps. :meth:`cycle_position` maps a draw's ``i`` (``extra_fields=("i",)``) to its
    cycle and step within the cycle.

    **By default** (``step_size=None``) warm-up runs the plain kernel (SGLD or SGHMC) with
    its adaptation: the preconditioner learnt in warm-up, control variates where they pay,
    and the step of the bias target (:mod:`numpyro_sgrld.adaptation`), which becomes the
    peak :math:`h_0`. The cycles start when warm-up ends (:math:`k` counts the steps since),
    so every draw is taken at a step of at most :math:`h_0/2` (with ``exploration=0.5``) and
    inflates the variance by at most half the ``target_bias``. See ``docs/cyclical.md``.

    :param model: NumPyro model (or ``potential_fn=``).
    :param step_size: :math:`h_0`, the cycle's peak step (a float > 0), or ``None`` (default):
        adapted in warm-up.
    :param cycle_length: :math:`L`, steps per cycle (exploration included; >= 2; default
        :data:`CYCLE_LENGTH`).
    :param exploration: :math:`\beta \in [0, 1)`, the fraction of each cycle spent exploring
        (default 0.5, our choice; Zhang et al. tune it per experiment). 0: cyclical step sizes
        only."""


class CyclicalSGLD(_Cyclical, SGMCMC):
    __doc__ = r"""Cyclical SGLD (Zhang, Li, Zhang, Chen & Wilson 2020, "Cyclical stochastic
    gradient MCMC for Bayesian deep learning", cSGLD): SGLD (or preconditioned Langevin with
    ``metric=``) with a cosine step size restarted every cycle and an exploration stage at the
    start of each cycle.""" + _CYCLICAL_DOC + r"""
    :param metric: a :class:`~numpyro_sgrld.metrics.Metric` (default: learnt in warm-up with
        ``step_size=None``, else the identity).
    :param kwargs: as :class:`~numpyro_sgrld.SGMCMC` (``gradient``, ``correction``, ...).
    """

    def __init__(self, model=None, step_size=None, *, cycle_length=None, exploration=0.5,
                 metric=None, **kwargs):
        schedule, cycles = _cycle("CyclicalSGLD", step_size, cycle_length, exploration)
        super().__init__(model, schedule, metric=metric, integrator=langevin(), cycles=cycles,
                         **kwargs)


class CyclicalSGHMC(_Cyclical, SGMCMC):
    __doc__ = r"""Cyclical SGHMC (Zhang et al. 2020, cSGHMC): SGHMC
    (:class:`~numpyro_sgrld.SGHMC`, Chen et al.'s parametrisation, ``step_size`` the learning rate)
    with a cosine step size restarted
    every cycle and an exploration stage (momentum SGD: friction, no injected noise) at the
    start of each cycle. The momentum is kept across stages and cycles.""" + _CYCLICAL_DOC + r"""
    :param friction: :math:`\alpha \in (0, 1]`, default 0.1.
    :param noise_estimate: :math:`\hat\beta \in [0, \alpha)`, default 0.
    :param metric: a :class:`~numpyro_sgrld.metrics.Metric` (default: learnt in warm-up with
        ``step_size=None``, else the identity).
    :param kwargs: as :class:`~numpyro_sgrld.SGMCMC`.
    """

    def __init__(self, model=None, step_size=None, *, cycle_length=None, exploration=0.5,
                 friction=0.1, noise_estimate=0.0, metric=None, **kwargs):
        schedule, cycles = _cycle("CyclicalSGHMC", step_size, cycle_length, exploration)
        super().__init__(model, schedule, metric=metric,
                         integrator=sghmc(friction, noise_estimate), cycles=cycles, **kwargs)
