r"""Distances between a sampler's draws and the posterior: the energy distance between two
samples, and the kernel Stein discrepancy, which needs no reference draws, only the model's
full-data score (:func:`numpyro_sgrld.analysis.diagnostics.model_scores`). Both by matrix products
over chunks of rows (no (rows x rows x d) array). And the L1 distance of a 1-D histogram to a
density (:func:`histogram_l1`). Re-exported by
:mod:`numpyro_sgrld.analysis.diagnostics`."""

import numpy as np

__all__ = ["chunk_rows", "energy_distance", "histogram_l1", "imq_stein_kernel",
           "kernel_stein_discrepancy", "squared_distances"]


def chunk_rows(y):
    """Rows per chunk so that a chunk x ``y`` block has about 2^22 numbers."""
    return max(1, 2**22 // len(y))


def squared_distances(a, b):
    r""":math:`\|a_i - b_j\|^2` as :math:`\|a_i\|^2 + \|b_j\|^2 - 2 a_i^\top b_j` (one matrix
    product; float64, clipped at 0 against rounding)."""
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * (a @ b.T), 0.0)


def _mean_distance(x, y):
    r"""The mean of :math:`\|x_i - y_j\|` over all pairs, in chunks of rows."""
    chunk = chunk_rows(y)
    total = sum(float(np.sqrt(squared_distances(x[i : i + chunk], y)).sum())
                for i in range(0, len(x), chunk))
    return total / (len(x) * len(y))


def energy_distance(x, y):
    r"""Energy distance (Székely & Rizzo 2013) between the laws of two samples ``x`` (n, d)
    and ``y`` (m, d) (1-D arrays are one-dimensional samples):

    .. math:: \mathcal E = 2\,\mathbb E\|X - Y\| - \mathbb E\|X - X'\| - \mathbb E\|Y - Y'\|,

    with U-statistics for the within-sample terms (pairs ``i != j``), so that its expectation
    is 0 when the laws are equal; it is 0 only for equal laws. Cost O((n + m)^2 d), chunked.
    """
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    x = x[:, None] if x.ndim == 1 else x.reshape(len(x), -1)
    y = y[:, None] if y.ndim == 1 else y.reshape(len(y), -1)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"The samples have different dimensions: {x.shape[1]} and {y.shape[1]}.")
    if len(x) < 2 or len(y) < 2:
        raise ValueError("Each sample needs at least 2 draws.")
    n, m = len(x), len(y)
    xy = _mean_distance(x, y)
    xx = _mean_distance(x, x) * n / (n - 1)
    yy = _mean_distance(y, y) * m / (m - 1)
    return 2 * xy - xx - yy


def imq_stein_kernel(c, beta):
    r""":math:`k_0(x_i, y_j)` of the IMQ kernel for blocks ``x`` (n, d), ``y`` (m, d) with
    scores ``sx``, ``sy``; the cross term :math:`(s_y - s_x)^\top (x - y)` expanded into
    matrix products."""
    def k0(x, sx, y, sy):
        r2 = squared_distances(x, y)
        q = c**2 + r2
        d = x.shape[-1]
        cross = (x @ sy.T - (sy * y).sum(1)[None, :] - (sx * x).sum(1)[:, None] + sx @ y.T)
        return (
            (sx @ sy.T) * q**beta
            + 2 * beta * q ** (beta - 1) * cross
            - 2 * beta * d * q ** (beta - 1)
            - 4 * beta * (beta - 1) * r2 * q ** (beta - 2)
        )

    return k0


def kernel_stein_discrepancy(x, scores, c=1.0, beta=-0.5):
    r"""Kernel Stein discrepancy with the inverse multiquadric kernel
    :math:`k(x, y) = (c^2 + \|x - y\|^2)^\beta` (Gorham & Mackey 2017; Liu, Lee & Jordan 2016):

    .. math::
        \mathrm{KSD}^2 = \frac1{n^2}\sum_{i,j} k_0(x_i, x_j), \\
        k_0(x, y) = s(x)^\top s(y)\,k + s(x)^\top\nabla_y k + s(y)^\top\nabla_x k
                    + \mathrm{tr}\,\nabla_x\nabla_y k,

    :math:`s = \nabla\log p` the target's score at each draw (``scores``, same shape as ``x``,
    (n, d)). It needs no draws from the target, only its score: it is near 0 for draws from
    ``p`` and bounded away from 0 otherwise (with :math:`\beta \in (-1, 0)` it detects
    non-convergence). The V-statistic (the square root of a non-negative quantity) is
    returned; it is :math:`O(n^{-1/2})` for exact draws. Use
    :func:`~numpyro_sgrld.analysis.diagnostics.model_scores` to get ``x`` and ``scores`` for a
    NumPyro model.
    """
    x = np.asarray(x, np.float64)
    s = np.asarray(scores, np.float64)
    x = x[:, None] if x.ndim == 1 else x
    s = s[:, None] if s.ndim == 1 else s
    if x.shape != s.shape:
        raise ValueError(f"`x` {x.shape} and `scores` {s.shape} must have the same shape.")
    if not (c > 0 and -1 < beta < 0):
        raise ValueError(f"Need c > 0 and -1 < beta < 0, got c={c}, beta={beta}.")
    k0 = imq_stein_kernel(float(c), float(beta))
    chunk = chunk_rows(x)
    total = 0.0
    for i in range(0, len(x), chunk):
        total += float(k0(x[i : i + chunk], s[i : i + chunk], x, s).sum())
    return float(np.sqrt(max(total, 0.0)) / len(x))


def histogram_l1(samples, density, bin_width=0.1, low=-5.0, high=5.0, resolution=200):
    r"""L1 distance between the histogram of 1-D ``samples`` and a density.

    .. math:: \sum_b \Big|\hat P_b - \int_b p\Big| + \Big|\hat P_{out} - P_{out}\Big|,

    over bins of width ``bin_width`` on ``[low, high]`` (Rensmeyer & Niggemann's Figure 1 uses
    0.1), plus the mass outside. ``density`` is a vectorised normalised density; bin masses are
    integrated with ``resolution`` midpoints per bin. 0 is a perfect match, 2 the maximum.
    """
    samples = np.asarray(samples, np.float64).ravel()
    edges = np.arange(low, high + bin_width / 2, bin_width)
    counts = np.histogram(samples, edges)[0] / samples.size
    offsets = (np.arange(resolution) + 0.5) / resolution
    mids = edges[:-1, None] + bin_width * offsets[None, :]
    masses = density(mids).mean(axis=1) * bin_width
    return float(np.abs(counts - masses).sum() + abs((1 - counts.sum()) - (1 - masses.sum())))
