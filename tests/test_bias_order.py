"""The bias against the step size, measured to a target ESS with error bars, and its order."""

from functools import partial

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from numpyro_sgrld import SGLD, diagnostics


def _noisy(values, se, seed):
    return values + np.random.default_rng(seed).normal(0.0, se)


@pytest.mark.parametrize("order", [1.0, 2.0])
def test_fit_bias_order_recovers_the_order_and_tells_1_from_2(order):
    """Biases c h^p observed with known Gaussian errors: the interval covers p and, for p = 2,
    excludes 1 (and vice versa). Over 200 data sets the 95 % interval covers the truth about
    95 % of the time (binomial: within 4 standard errors)."""
    h = np.array([0.025, 0.05, 0.1, 0.2, 0.4])
    truth = 0.5 * h**order
    se = 0.05 * truth + 1e-4
    covered = 0
    for seed in range(200):
        fit = diagnostics.fit_bias_order(h, _noisy(truth, se, seed), se)
        covered += fit["order_low"] <= order <= fit["order_high"]
        other = 3.0 - order
        assert not fit["order_low"] <= other <= fit["order_high"]
    assert abs(covered / 200 - 0.95) < 4 * np.sqrt(0.95 * 0.05 / 200)


def test_fit_bias_order_input_errors():
    with pytest.raises(ValueError, match="same length, at least 3"):
        diagnostics.fit_bias_order([0.1, 0.2], [0.1, 0.2], [0.01, 0.01])
    with pytest.raises(ValueError, match="must be > 0"):
        diagnostics.fit_bias_order([0.1, 0.2, 0.4], [0.1, 0.2, 0.4], [0.01, 0.0, 0.01])


def _gaussian():
    numpyro.sample("theta", dist.Normal(0.0, 1.0))


@pytest.mark.slow
def test_sgld_bias_matches_the_discretised_chain_and_has_order_one():
    """SGLD with exact gradients on N(0, 1): the stationary sd is (1 - h/2)^(-1/2), so
    1 - sd_ratio^(-2) = h/2 exactly. Each step size run to the same ESS (1e5): every measured
    sd ratio within 4 standard errors of the closed form, and the fit of c h^p to
    1 - sd_ratio^(-2) (errors by the delta method) gives an interval holding p = 1 and
    excluding p = 2, with a chi-square that fits. ~20 s."""
    h = np.array([0.05, 0.1, 0.2, 0.4])
    table = diagnostics.bias_vs_step_size(
        partial(SGLD, _gaussian), h, {"theta": {"mean": 0.0, "sd": 1.0}},
        num_warmup=200, num_samples=1000, num_chains=256, target_ess=100_000,
    )
    assert np.all(table["ess_min"] >= 100_000)
    # small steps mix slowly: they needed more draws for the same precision
    assert np.all(np.diff(table["num_samples"].to_numpy()) < 0)
    ratio, se = table["worst_sd_ratio"].to_numpy(), table["worst_sd_ratio_se"].to_numpy()
    exact = (1 - h / 2) ** -0.5
    assert np.all(np.abs(ratio - exact) < 4 * se)
    fit = diagnostics.fit_bias_order(h, 1 - ratio**-2, 2 * se / ratio**3)
    assert fit["order_low"] <= 1.0 <= fit["order_high"]
    assert not fit["order_low"] <= 2.0 <= fit["order_high"]
    assert fit["chi2"] < 13.8  # chi-square with 2 dof: P(> 13.8) = 0.001
