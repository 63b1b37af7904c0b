"""The non-SG baselines of ``sgrld compare`` (numpyro_sgrld.analysis.baselines): Mandt et al.'s step
against its closed form on the conjugate regression, MALA's law, and their place in compare."""

from functools import partial

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import assert_moments
from numpyro_sgrld.models import linear_regression as lr

from numpyro_sgrld.analysis import baselines


def test_mandt_step_is_the_closed_form_on_the_conjugate_regression():
    """At the posterior mean w*, one data point's gradient is x_i (x_i'w* - y_i) / s^2, so
    tr C is exact; the estimate from 4000 minibatch gradients is within 5 standard errors of
    it (the relative se of a sum of d sample variances of near-Gaussian minibatch means is at
    most sqrt(2 / (K - 1))), and the step is 2 S d / (N^2 tr C)."""
    X, y, _ = lr.make_data(seed=0, num_data=2000, num_features=5)
    model = partial(lr.model, subsample_size=100)
    exact = lr.exact_posterior(X, y)
    z = {"w": np.asarray(exact.mean, np.float32)}
    K = 4000
    h, trace_c = baselines.mandt_step_size(model, (X, y), z, num_batches=K)
    X64, y64 = np.asarray(X, np.float64), np.asarray(y, np.float64)
    s2 = 0.5**2  # the model's default noise_scale
    per_datum = X64 * ((X64 @ exact.mean - y64) / s2)[:, None]
    expected = float(np.sum(np.var(per_datum, axis=0)))
    assert abs(trace_c / expected - 1) < 5 * np.sqrt(2 / (K - 1)), (trace_c, expected)
    np.testing.assert_allclose(h, 2 * 100 * 5 / (2000**2 * trace_c), rtol=1e-6)


def test_mandt_step_needs_a_subsampled_model():
    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="needs a subsampled model"):
        baselines.mandt_step_size(model, (), {"x": np.zeros(())})


@pytest.mark.slow
def test_lmc_is_mala_and_samples_its_target():
    """One leapfrog step per proposal (MALA), step adapted; on N(1, 2^2) the draws' mean and sd
    agree with the target (z-scores with ESS-based standard errors)."""

    def model():
        numpyro.sample("x", dist.Normal(1.0, 2.0))

    mcmc = baselines.run_mala(model, (), 500, 4000, 1, 2, 0)
    assert mcmc.sampler._num_steps == 1
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    assert_moments(draws, 1.0, 2.0)


def test_compare_refuses_a_step_for_a_baseline():
    from numpyro_sgrld.app.compare import check_options

    with pytest.raises(ValueError, match="MALA is a baseline that chooses its own step"):
        check_options("linear_regression", ["SGLD", "MALA"], {"MALA": 1e-3}, 100, 200, 1, 2, 10)
    # LMC, the other name of MALA, is accepted where kernels are named
    with pytest.raises(ValueError, match="MALA is a baseline that chooses its own step"):
        check_options("linear_regression", ["SGLD", "LMC"], {"LMC": 1e-3}, 100, 200, 1, 2, 10)
    assert check_options("linear_regression", ["SGLD", "LMC"], None, 100, 200, 1, 2,
                         10) == ["SGLD", "MALA"]
    assert check_options("linear_regression", ["all"], None, 100, 200, 1, 2, 10)[-3:] == [
        "MALA", "BayesByBackprop", "ConstantSGD"]


@pytest.mark.slow
def test_compare_reports_the_baselines(tmp_path):
    """The three baselines through ``sgrld compare`` on the conjugate regression: rows, the
    report's notes, and MALA and constant SGD within their Monte Carlo error of the reference
    (MALA is exact; Mandt's Gaussian is right for a Gaussian posterior with isotropic noise,
    here within the run's error), Bayes by Backprop's draws iid (ESS = draws)."""
    import pandas as pd

    from numpyro_sgrld.app.compare import run_compare

    rows = run_compare("linear_regression",
                       kernels=["MALA", "BayesByBackprop", "ConstantSGD", "SGNHT", "CyclicalSGLD"],
                       step_sizes={"SGNHT": 1e-3, "CyclicalSGLD": 2e-6},
                       num_steps=4000, num_warmup=500, thinning=2, num_chains=2,
                       reference_samples=500, bias_kernels=("CyclicalSGLD",), out=tmp_path,
                       progress_bar=False, log=lambda *a: None, gamma_panel=False)
    report = (tmp_path / "report.md").read_text()
    for name in ("MALA", "BayesByBackprop", "ConstantSGD"):
        assert f"| {name} |" in report and f"- {name}: " in report
    # the fixed-step kernels run with their given steps (no bias curve for a cyclical step)
    assert "| SGNHT | 0.001 |" in report and "| CyclicalSGLD |" in report
    assert "## Bias against the step size" not in report
    assert "LMC" not in report
    assert rows["MALA"]["converged"] == "yes" and rows["MALA"]["accurate"] == "yes"
    per = pd.read_csv(tmp_path / "per_parameter.csv", index_col=["kernel", "parameter"])
    assert not per.loc["MALA", "resolved"].any()  # no difference from the reference resolved
    assert rows["BayesByBackprop"]["min ESS"] > 0.5 * 2 * 2000


def test_compare_runs_every_kernel_at_its_defaults():
    """Every preset adapts its step, so none needs --step-size; the default list is
    DEFAULT_KERNELS, 'all' every kernel and baseline."""
    from numpyro_sgrld.app.compare import BASELINES, DEFAULT_KERNELS, KERNELS, check_options

    assert check_options("linear_regression", ["BAOAB", "CyclicalSGLD"], None, 100, 200, 1, 2,
                         10) == ["BAOAB", "CyclicalSGLD"]
    assert check_options("linear_regression", None, None, 100, 200, 1, 2, 10) == list(
        DEFAULT_KERNELS)
    every = check_options("linear_regression", ["all"], None, 100, 200, 1, 2, 10)
    assert every == [k for k in KERNELS if k != "BNPSGLD"] + list(BASELINES)
