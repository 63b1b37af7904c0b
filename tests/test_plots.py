"""The plots' numerical parts (the figures themselves are looked at, not tested)."""

import numpy as np
import pytest
from scipy.stats import gaussian_kde

from numpyro_sgrld.plots import _kde


@pytest.mark.parametrize("shape", ["normal", "bimodal", "few"])
def test_binned_kde_matches_the_exact_sum(shape):
    """The binned density against SciPy's exact sum, within the linear-binning error
    bound: a draw's weight split between two cells of width ``s`` moves the kernel's value
    by at most ``s^2 max|K''| / 8 = s^2 K(0) / (8 h^2)`` per unit weight, so the density by
    at most ``(s / h)^2 / 8`` times its kernel's peak ``1 / (h sqrt(2 pi))``."""
    rng = np.random.default_rng(3)
    x = {"normal": rng.normal(size=16000),
         "bimodal": np.concatenate([rng.normal(size=8000), rng.normal(3.0, 0.2, 8000)]),
         "few": rng.normal(size=40)}[shape]
    lo, hi = np.percentile(x, [0.5, 99.5])
    grid = np.linspace(lo - (hi - lo) / 2, hi + (hi - lo) / 2, 200)
    exact = gaussian_kde(x)(grid)
    h = np.std(x, ddof=1) * len(x) ** -0.2
    step = (grid[1] - grid[0]) / 4
    bound = (step / h) ** 2 / 8 / (h * np.sqrt(2 * np.pi)) if step <= h / 2 else 1e-12
    assert np.max(np.abs(_kde(x, grid) - exact)) <= bound + 1e-12


def test_binned_kde_of_a_constant_is_zero_not_an_error():
    assert np.all(_kde(np.ones(10), np.linspace(0, 2, 5)) == 0)
