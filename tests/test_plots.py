"""The plots' numerical parts, and what makes the report's figures readable: colours, styles,
legends and labels, translucent traces, rank histograms with a scale, axis limits."""

import numpy as np
import pytest
from scipy.stats import gaussian_kde

from numpyro_sgrld.analysis.plots import _kde


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


def _tables(names, params=6, seed=0):
    """Synthetic comparison tables: the columns :func:`plot_errors` reads."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    labels = [f"w[{i}]" for i in range(params)]
    return {name: pd.DataFrame({"std_mean_error": rng.normal(0, 0.03, params),
                                "std_mean_error_se": np.full(params, 0.01),
                                "sd_ratio": rng.normal(1, 0.02, params),
                                "mcse_sd": np.full(params, 0.01),
                                "ref_mcse_sd": np.full(params, 0.01),
                                "ref_sd": np.ones(params)}, index=labels) for name in names}


def test_the_error_plot_names_kernels_and_parameters_and_zooms_to_the_data():
    from matplotlib.colors import to_hex

    from numpyro_sgrld.analysis.plots import plot_errors

    names = ["SGLD", "SGHMC", "MALA"]
    fig = plot_errors(_tables(names), mean_tol=0.15, sd_band=(0.87, 1.15))
    left, right = fig.axes[:2]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == names
    assert len({to_hex(c.lines[0].get_color()) for c in left.containers}) == len(names)
    assert [t.get_text() for t in left.get_yticklabels()] == [f"w[{i}]" for i in range(6)]
    # the accuracy band fills at most 60 % of each axis, the data inside the limits
    for ax, band in ((left, (-0.15, 0.15)), (right, (0.87, 1.15))):
        lo, hi = ax.get_xlim()
        assert (band[1] - band[0]) / (hi - lo) <= 0.6 + 1e-9 and lo < band[0] < band[1] < hi


def test_trace_plot_chains_show_through_and_rank_histograms_keep_their_scale():
    from numpyro_sgrld.analysis.arviz_io import from_dict
    from numpyro_sgrld.analysis.plots import plot_trace_rank

    draws = from_dict(posterior={"w": np.random.default_rng(1).normal(size=(4, 300, 2))})
    fig = plot_trace_rank(draws, params=["w[0]", "w[1]"])
    trace, rank = fig.axes[0], fig.axes[1]
    assert len(trace.lines) == 4 and all(line.get_alpha() <= 0.5 for line in trace.lines)
    assert len(rank.get_yticks()) > 1 and rank.get_ylim()[0] == 0
    # the histograms' outlines: their tops only, no drop to zero at either end
    assert len(rank.patches) == 4 and all(p.get_data().baseline is None for p in rank.patches)


def test_marginal_curves_differ_in_colour_and_style_and_are_named():
    from numpyro_sgrld.analysis.plots import plot_marginals

    rng = np.random.default_rng(2)
    runs = {f"k{i}": {"w": rng.normal(size=(400, 2))} for i in range(12)}
    fig = plot_marginals(runs, {"w": rng.normal(size=(400, 2))})
    lines = fig.axes[0].lines
    assert len({(str(line.get_color()), str(line.get_linestyle())) for line in lines}) == 12
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["reference", *runs]
