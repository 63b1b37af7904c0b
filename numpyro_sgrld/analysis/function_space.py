r"""Distances between two runs' predictive distributions on the same test points: how the
field scores an approximate posterior of a network against an HMC reference (Izmailov et al.
2021, "What are Bayesian neural network posteriors really like?"; Wilson et al. 2022, the
NeurIPS 2021 approximate-inference competition).

For classifiers, with :math:`p_i` and :math:`q_i` the two ensembles' predictive class
probabilities at test point :math:`i` (each the mean over draws of the draws' class
probabilities, :func:`~numpyro_sgrld.analysis.predictive.predictive_probs`):

.. math::
    \mathrm{agreement} = \frac1n\sum_i \mathbb 1[\arg\max p_i = \arg\max q_i], \qquad
    \mathrm{TV} = \frac1n\sum_i \tfrac12 \lVert p_i - q_i\rVert_1 .

For regression the predictive law at each point is one-dimensional and the distance is the
Wasserstein-2 distance between the two laws, averaged over points:

.. math::
    W_2 = \frac1n\sum_i \Big(\int_0^1 \big(F_i^{-1}(u) - G_i^{-1}(u)\big)^2\,du\Big)^{1/2},

exact for two samples (:func:`wasserstein2`) and, for a Gaussian likelihood, computed from the
predictive mixtures' quantiles :math:`\frac1S\sum_s\mathcal N(\mu_s, \sigma_s^2)`
(:func:`gaussian_mixture_quantiles`, :func:`quantile_wasserstein2`). (The competition's
``metrics.py`` scores regression with ``scipy.stats.wasserstein_distance``, which is
:math:`W_1`.)

A distance between two finite ensembles is never 0: two independent exact ensembles of the
same size differ by Monte Carlo noise. :func:`within_band` judges a run against a reference
with that *floor*, the distance between two independent reference ensembles of the size the
run is judged with.
"""

from typing import NamedTuple

import numpy as np
from scipy.special import ndtr

__all__ = [
    "agreement",
    "total_variation",
    "wasserstein2",
    "gaussian_mixture_quantiles",
    "quantile_wasserstein2",
    "FunctionSpaceBand",
    "within_band",
]


def _probs(p, q):
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    if p.shape != q.shape or p.ndim != 2:
        raise ValueError(
            "Predictive probabilities must be two arrays of the same shape (points, classes); "
            f"got {p.shape} and {q.shape}. Average each run's class probabilities over its "
            "draws first (numpyro_sgrld.analysis.predictive.predictive_probs)."
        )
    return p, q


def agreement(p, q):
    """The fraction of test points where the two predictive distributions ``p`` and ``q``
    (points x classes) pick the same top class."""
    p, q = _probs(p, q)
    return float(np.mean(p.argmax(-1) == q.argmax(-1)))


def total_variation(p, q):
    r"""The mean over test points of :math:`\tfrac12\lVert p_i - q_i\rVert_1` between two
    predictive distributions ``p`` and ``q`` (points x classes); in [0, 1]."""
    p, q = _probs(p, q)
    return float(0.5 * np.abs(p - q).sum(-1).mean())


def wasserstein2(a, b):
    r"""The mean over test points of the exact :math:`W_2` distance between two empirical
    one-dimensional laws: ``a`` (draws_a, points) and ``b`` (draws_b, points), samples of each
    point's predictive. The quantile functions are step functions; the integral of their
    squared difference is summed over the merged steps (no interpolation, any two sizes)."""
    a, b = np.sort(np.asarray(a, np.float64), 0), np.sort(np.asarray(b, np.float64), 0)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(
            f"Samples must be arrays (draws, points) with the same points; got {a.shape} and "
            f"{b.shape}."
        )
    na, nb = len(a), len(b)
    edges = np.union1d(np.arange(na + 1) / na, np.arange(nb + 1) / nb)
    mid, width = 0.5 * (edges[1:] + edges[:-1]), np.diff(edges)
    ia = np.minimum((mid * na).astype(int), na - 1)
    ib = np.minimum((mid * nb).astype(int), nb - 1)
    return float(np.sqrt((width[:, None] * (a[ia] - b[ib]) ** 2).sum(0)).mean())


def gaussian_mixture_quantiles(mean, scale, num_levels=256, grid=4096):
    r"""Quantiles of each point's predictive mixture :math:`\frac1S\sum_s\mathcal N(\mu_s,
    \sigma_s^2)` at the mid-levels :math:`(k + \frac12)/K`, ``K = num_levels``: ``mean``
    (draws, points) and ``scale`` (broadcast to it). The mixture's CDF is evaluated on a
    ``grid`` of values spanning every component's :math:`\pm 8\sigma` and inverted by linear
    interpolation. Returns (num_levels, points)."""
    mean = np.asarray(mean, np.float64)
    scale = np.broadcast_to(np.asarray(scale, np.float64), mean.shape)
    levels = (np.arange(num_levels) + 0.5) / num_levels
    out = np.empty((num_levels, mean.shape[1]))
    for i in range(mean.shape[1]):
        m, s = mean[:, i], scale[:, i]
        y = np.linspace((m - 8 * s).min(), (m + 8 * s).max(), grid)
        cdf = np.zeros(grid)
        for start in range(0, len(m), 512):
            cdf += ndtr((y[:, None] - m[None, start:start + 512]) / s[None, start:start + 512]
                        ).sum(1)
        out[:, i] = np.interp(levels, cdf / len(m), y)
    return out


def quantile_wasserstein2(qa, qb):
    r"""The mean over points of :math:`W_2` from two laws' quantiles at the same mid-levels
    (levels x points, :func:`gaussian_mixture_quantiles`): the midpoint rule for
    :math:`\int_0^1 (F^{-1} - G^{-1})^2`."""
    qa, qb = np.asarray(qa, np.float64), np.asarray(qb, np.float64)
    if qa.shape != qb.shape:
        raise ValueError(f"Quantiles must have the same shape; got {qa.shape} and {qb.shape}.")
    return float(np.sqrt(((qa - qb) ** 2).mean(0)).mean())


class FunctionSpaceBand(NamedTuple):
    """A run's distance to a reference against the reference's own floor: ``close`` when
    ``distance <= max(factor * floor, floor + margin)`` and, for classifiers, the agreement
    is at most ``agreement_margin`` below the floor's."""

    distance: float
    floor: float
    ratio: float
    limit: float
    agreement: float | None
    floor_agreement: float | None
    close: bool


def within_band(distance, floor, agreement_=None, floor_agreement=None, *, factor=2.0,
                margin=0.01, agreement_margin=0.01):
    """Judge a distance (TV or W2) to a reference against the floor, the distance between two
    independent reference ensembles of the same size: close when at most ``factor`` times
    the floor or the floor plus ``margin``, and (when given) the agreement at most
    ``agreement_margin`` below the floor's agreement."""
    limit = max(factor * floor, floor + margin)
    close = distance <= limit
    if agreement_ is not None and floor_agreement is not None:
        close = close and agreement_ >= floor_agreement - agreement_margin
    return FunctionSpaceBand(float(distance), float(floor), float(distance / floor),
                             float(limit), agreement_, floor_agreement, bool(close))
