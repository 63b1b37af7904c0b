"""Distances between a sampler's draws and the truth."""

import numpy as np

__all__ = ["histogram_l1"]


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
