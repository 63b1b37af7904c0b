r"""The verdict on NumPyro's own sampling loop: streaming moments of the run, judged at its end.

``numpyro.infer.MCMC`` gives a kernel no call at the end of a run, and its loop keeps the
draws where the kernel cannot see them. So a stochastic-gradient kernel that ``MCMC`` drives
keeps, in its state, per chain and for at most :data:`~numpyro_sgrld.verdict.judge.MAX_COORDINATES`
coordinates of the unconstrained position, the sums and sums of squares of the run's
post-warm-up steps in :data:`BATCHES` consecutive batches (:class:`RunMonitor`), and on the
run's last step hands them to the host, which judges them (:func:`judge`) and warns through
:func:`numpyro_sgrld.verdict.judge.verdict`'s rules.

From batch :math:`b` of chain :math:`c` (``n_b`` steps, sum :math:`S_{cb}`, sum of squares
:math:`Q_{cb}`, of the position minus the run's first post-warm-up position):

- **split** :math:`\hat R`: the first and the second half of the batches are two chains each;
  their means and variances follow from the sums, and :math:`\hat R` is Gelman et al.'s
  (2013, eq. 11.4) over those :math:`2C` half-chains (not rank-normalised);
- **bulk ESS** by batch means: the batch means :math:`m_{cb} = S_{cb}/n_b` form :math:`C`
  chains of length :data:`BATCHES`; their own effective size :math:`\mathrm{ESS}_m`
  (``numpyro.diagnostics.effective_sample_size``, Geyer's initial monotone sequence, so
  correlated batches count less) gives the variance of the grand mean,
  :math:`\sigma_m^2/\mathrm{ESS}_m`, and so :math:`\mathrm{ESS} = \mathrm{ESS}_m\,
  \hat\sigma^2/\sigma_m^2` (Flegal & Jones 2010), at most the number of steps.

Every post-warm-up step counts (with ``thinning`` the kept draws are a subset of them), and the
coordinates are the unconstrained ones the kernel moves (split :math:`\hat R` and ESS are
invariant under the coordinate-wise monotone constraining transforms only approximately). On
the kernels' own loop (:func:`numpyro_sgrld.enable_fast_sampling_loop`) the verdict reads the
kept draws instead, and no moments are kept.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.diagnostics import effective_sample_size

from numpyro_sgrld.core import equipartition
from numpyro_sgrld.verdict.judge import MAX_COORDINATES, capped_ess

__all__ = ["BATCHES", "RunMonitor", "batch_sizes", "centring", "coordinates", "init_monitor",
           "judge", "update_monitor"]

#: The batches a run's post-warm-up steps are split into (even: two halves for split R-hat).
#: With 64, one chain's ESS estimate had a log-sd of 0.35 on autoregressive chains of ESS 300
#: and the least of 25 coordinates read under half the truth; with 256, 0.19 and 0.6x
#: (``tests/test_verdict_rules.py`` checks the rule on such chains).
BATCHES = 256


class RunMonitor(NamedTuple):
    """One chain's streaming moments of the current run (arrays over the judged coordinates).

    - **sums**, **squares** – ``(BATCHES, K)``: per batch, the sums of ``x - origin`` and of
      its square.
    - **origin** – ``(K,)``: the run's first post-warm-up position (a shift that keeps the
      sums of squares accurate in float32).
    - **rejected** – rejected steps before the run's first post-warm-up step.
    - **transitions** – the transitions observed since the kernel's ``init`` (one per
      ``MCMC`` draw, warm-up included; a cyclical preset's transition may run many steps).
    - **held** – ``(H,)``: the last values of readings evaluated every few steps only (a
      network's :mod:`numpyro_sgrld.verdict.evaluation`), judged as the last ``H`` coordinates;
      ``None`` without such readings.
    - **composed** – what a composing kernel keeps for its own check of the run
      (:class:`~numpyro_sgrld.SGGibbs`:
      :class:`~numpyro_sgrld.sampler.gibbs_bias_check.GibbsMoments`), ``None`` without.
    """

    sums: Any
    squares: Any
    origin: Any
    rejected: Any
    transitions: Any = 0
    held: Any = None
    composed: Any = None


def coordinates(size):
    """The judged flat indices of a position of ``size`` coordinates: all of them, or
    :data:`~numpyro_sgrld.verdict.judge.MAX_COORDINATES` evenly spaced ones."""
    if size <= MAX_COORDINATES:
        return np.arange(size)
    return np.unique(np.linspace(0, size - 1, MAX_COORDINATES).round().astype(int))


def init_monitor(num_coordinates, dtype=jnp.float32, held=0):
    """Zero moments over ``num_coordinates`` coordinates, the last ``held`` of them
    readings held between evaluations."""
    zeros = jnp.zeros((BATCHES, num_coordinates), dtype)
    return RunMonitor(zeros, zeros, jnp.zeros((num_coordinates,), dtype),
                      jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32),
                      jnp.zeros((held,), dtype) if held else None)


def update_monitor(monitor, x, offset, num_steps, rejected_before):
    """The moments after a step that moved the chain to ``x`` (the judged coordinates).
    ``offset``: the step's index within the run's post-warm-up steps (negative in warm-up:
    nothing changes); the run's first step (``offset == 0``) starts afresh. ``num_steps``:
    the run's post-warm-up steps; ``rejected_before``: rejected steps before this one."""
    first = offset == 0
    origin = jnp.where(first, x, monitor.origin)
    # a branch, not a select over every batch on every step (the offset is the same for
    # vectorised chains)
    sums, squares = jax.lax.cond(first, lambda s: jax.tree.map(jnp.zeros_like, s),
                                 lambda s: s, (monitor.sums, monitor.squares))
    weight = (offset >= 0).astype(x.dtype)
    batch = jnp.clip(offset, 0, num_steps - 1) * BATCHES // num_steps
    y = (x - origin) * weight
    return monitor._replace(sums=sums.at[batch].add(y), squares=squares.at[batch].add(y * y),
                            origin=origin,
                            rejected=jnp.where(first, rejected_before, monitor.rejected),
                            transitions=monitor.transitions + 1)


def batch_sizes(num_steps):
    """The steps in each batch of a run of ``num_steps`` post-warm-up steps."""
    return np.bincount(np.arange(num_steps) * BATCHES // num_steps, minlength=BATCHES)


def centring(sums, squares, origin, num_steps):
    """Per coordinate, :func:`~numpyro_sgrld.core.equipartition.centring_factor` of the chains'
    whole runs, from the moments that :func:`judge` reads (``NaN`` with one chain)."""
    n = batch_sizes(num_steps)[None, :, None].astype(np.float64)
    o = np.asarray(origin, np.float64)[:, None, :]
    s = np.asarray(sums, np.float64)
    total = (s + n * o).sum(1)
    squares = (np.asarray(squares, np.float64) + 2 * o * s + n * o**2).sum(1)
    if total.shape[0] < 2 or num_steps < 2:
        return np.full(total.shape[-1], np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = total / num_steps
        var = (squares - num_steps * mean**2) / (num_steps - 1)
        return equipartition.centring_factor(mean, var)


def judge(sums, squares, origin, num_steps):
    """Split R-hat and bulk ESS per coordinate, ``(K,)`` each, from moments ``(C, BATCHES, K)``
    about ``origin`` ``(C, K)`` of ``C`` chains' runs of ``num_steps`` steps (at least 4: a
    shorter run's batches below :data:`BATCHES` are empty and left out)."""
    n = batch_sizes(num_steps)[None, :, None].astype(np.float64)
    o = np.asarray(origin, np.float64)[:, None, :]
    s = np.asarray(sums, np.float64)
    sums = s + n * o
    squares = np.asarray(squares, np.float64) + 2 * o * s + n * o**2
    half = BATCHES // 2
    with np.errstate(divide="ignore", invalid="ignore"):
        hs = np.concatenate([sums[:, :half].sum(1), sums[:, half:].sum(1)])
        hq = np.concatenate([squares[:, :half].sum(1), squares[:, half:].sum(1)])
        hn = np.concatenate([np.full_like(hs[:1], n[0, :half].sum()),
                             np.full_like(hs[:1], n[0, half:].sum())])
        hn = np.repeat(hn, sums.shape[0], axis=0)
        mean = hs / hn
        var = (hq - hn * mean**2) / (hn - 1)
        length = hn.mean()
        within = var.mean(0)
        between = length * mean.var(0, ddof=1)
        rhat = np.sqrt(((length - 1) / length * within + between / length) / within)
        total = sums.shape[0] * num_steps
        grand = sums.sum((0, 1)) / total
        sigma2 = (squares.sum((0, 1)) - total * grand**2) / (total - 1)
        # a run of fewer steps than batches leaves some empty: the others are its batches
        means = (sums / n)[:, n[0, :, 0] > 0]
        sigma2_m = means.reshape(-1, means.shape[-1]).var(0, ddof=1)
        ess_m = np.asarray(effective_sample_size(means), np.float64)
        ess = np.minimum(capped_ess(ess_m, means.shape[0] * means.shape[1]) * sigma2 / sigma2_m,
                         total)
    flat = ~(sigma2 > 0)
    rhat = np.where(flat | ~np.isfinite(rhat), np.inf, rhat)
    ess = np.where(flat | ~np.isfinite(ess), 0.0, ess)
    return rhat, ess
