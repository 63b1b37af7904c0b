"""ArviZ conversion, comparison with a reference, KSD, energy distance, the `sgrld` report."""

from functools import partial

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC, NUTS
from numpyro_sgrld.models import linear_regression as lr
from scipy import stats

from numpyro_sgrld import SGLD, diagnostics, full_batch, to_inference_data
from numpyro_sgrld.analysis import arviz_io as _arviz
from numpyro_sgrld.analysis.inference_data import SG_EXTRA_FIELDS, reference_posterior


@pytest.fixture(scope="module")
def small_regression():
    X, y, _ = lr.make_data(seed=1, num_data=200, num_features=2)
    return np.asarray(X), np.asarray(y)


def test_to_inference_data_on_a_subsampled_model(small_regression):
    import arviz as az

    X, y = small_regression
    model = partial(lr.model, subsample_size=20)
    mcmc = MCMC(
        SGLD(model, step_size=1e-5),
        num_warmup=100,
        num_samples=60,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), X, y, extra_fields=SG_EXTRA_FIELDS)
    idata = to_inference_data(mcmc, X, y, batch_size=7)  # chunks that do not divide the draws

    w = np.asarray(idata.posterior["w"])
    assert w.shape == (2, 60, 2)
    np.testing.assert_allclose(w, np.asarray(mcmc.get_samples(group_by_chain=True)["w"]))
    # full-data pointwise log-likelihood, by hand
    loglik = np.asarray(idata.log_likelihood["y"])
    assert loglik.shape == (2, 60, len(y))
    expected = stats.norm.logpdf(y, np.einsum("cdk,nk->cdn", w, X), 0.5)
    np.testing.assert_allclose(loglik, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(np.asarray(idata.observed_data["y"]), y)
    # honest names: the minibatch potential is not a log density
    stats_names = set(idata.sample_stats.data_vars)
    assert {"minibatch_potential_energy", "minibatch_grad_norm", "step_size", "diverging"} <= (
        stats_names
    )
    assert "lp" not in stats_names
    summary = az.summary(idata, var_names=["w"])
    assert list(summary.index) == ["w[0]", "w[1]"]
    loo = az.loo(idata)  # ArviZ 1.x names the estimate `elpd`, 0.x `elpd_loo`
    assert np.isfinite(loo.elpd if _arviz.is_datatree() else loo.elpd_loo)
    _arviz_plots_draw(idata, "w")


def _arviz_plots_draw(idata, site):
    """ArviZ's trace, rank, posterior, forest, ESS and R-hat plots of ``idata`` each draw a
    figure with a panel per coordinate of ``site`` (ArviZ 0.x: matplotlib axes; 1.x: a
    ``PlotCollection`` holding the figure)."""
    import arviz as az
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = idata.posterior[site].size // (idata.posterior.sizes["chain"]
                                          * idata.posterior.sizes["draw"])
    if _arviz.is_datatree():
        kw = dict(var_names=[site], backend="matplotlib")
        plotted = {
            "trace": az.plot_trace_dist(idata, **kw),
            "rank": az.plot_rank(idata, **kw),
            "posterior": az.plot_dist(idata, **kw),
            "forest": az.plot_forest(idata, **kw),
            "ess": az.plot_ess(idata, **kw),
            "ess and r_hat": az.plot_convergence_dist(idata, **kw),
        }
    else:
        plotted = {
            "trace": az.plot_trace(idata, var_names=[site], compact=True),
            "rank": az.plot_rank(idata, var_names=[site]),
            "posterior": az.plot_posterior(idata, var_names=[site]),
            "forest": az.plot_forest(idata, var_names=[site], r_hat=True, ess=True),
            "ess": az.plot_ess(idata, var_names=[site]),
        }
    for name, result in plotted.items():
        fig = _arviz.figure_of(result)
        drawn = [ax for ax in fig.axes if ax.has_data()]
        assert drawn, f"{name}: nothing drawn"
        if name in ("rank", "posterior", "ess"):  # a panel per coordinate
            assert len(drawn) >= size, (name, len(drawn))
        plt.close(fig)


def test_to_inference_data_on_nuts_full_batch(small_regression):
    X, y = small_regression
    mcmc = MCMC(NUTS(full_batch(lr.model)), num_warmup=100, num_samples=50, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y, extra_fields=("potential_energy", "diverging"))
    idata = to_inference_data(mcmc, X, y)
    np.testing.assert_allclose(
        np.asarray(idata.sample_stats["lp"])[0],
        -np.asarray(mcmc.get_extra_fields()["potential_energy"]),
    )
    assert np.asarray(idata.log_likelihood["y"]).shape == (1, 50, len(y))


def test_to_inference_data_needs_a_model():
    mcmc = MCMC(
        SGLD(potential_fn=lambda z: 0.5 * jnp.sum(z**2), step_size=0.1),
        num_warmup=0,
        num_samples=5,
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), init_params=jnp.zeros(2))
    with pytest.raises(ValueError, match="potential_fn"):
        to_inference_data(mcmc)


def _rhat_numpy(x):
    """Rank-normalised split R-hat (Vehtari et al. 2021), written out in numpy."""

    def basic(chains):
        n = chains.shape[1]
        w = chains.var(axis=1, ddof=1).mean()
        b = n * chains.mean(axis=1).var(ddof=1)
        return np.sqrt(((n - 1) / n * w + b / n) / w)

    def rank_normal(chains):
        r = stats.rankdata(chains, method="average").reshape(chains.shape)
        return stats.norm.ppf((r - 3 / 8) / (chains.size + 1 / 4))

    half = x.shape[1] // 2
    split = np.concatenate([x[:, :half], x[:, -half:]])
    bulk = basic(rank_normal(split))
    folded = basic(rank_normal(np.abs(split - np.median(split))))
    return max(bulk, folded)


def test_compare_to_reference_matches_numpy():
    rng = np.random.default_rng(0)
    draws = {"a": rng.normal(0.3, 1.2, (2, 400, 3)), "s": rng.gamma(2.0, 1.0, (2, 400))}
    ref = {"a": rng.normal(0.0, 1.0, (800, 3)), "s": rng.gamma(2.0, 1.1, 800)}
    table = diagnostics.compare_to_reference(draws, ref, group_by_chain=True)
    assert list(table.index) == ["a[0]", "a[1]", "a[2]", "s"]
    for label, x, r in [
        *((f"a[{j}]", draws["a"][..., j], ref["a"][:, j]) for j in range(3)),
        ("s", draws["s"], ref["s"]),
    ]:
        row = table.loc[label]
        pooled = x.ravel()
        assert row["mean"] == pytest.approx(pooled.mean())
        assert row["sd"] == pytest.approx(pooled.std(ddof=1))
        assert row["std_mean_error"] == pytest.approx((pooled.mean() - r.mean()) / r.std(ddof=1))
        assert row["sd_ratio"] == pytest.approx(pooled.std(ddof=1) / r.std(ddof=1))
        # equal sample sizes: W1 is the mean distance between order statistics
        assert row["w1"] == pytest.approx(np.abs(np.sort(pooled) - np.sort(r)).mean())
        assert row["r_hat"] == pytest.approx(_rhat_numpy(x), rel=1e-6)
        assert row["ess_bulk"] == pytest.approx(_arviz.ess(x, method="bulk"))
    # published moments as the reference
    moments = {"a": {"mean": np.zeros(3), "sd": np.full(3, 2.0)}, "s": {"mean": 1.0, "sd": 0.5}}
    table = diagnostics.compare_to_reference(draws, moments, group_by_chain=True)
    assert table.loc["a[1]", "std_mean_error"] == pytest.approx(draws["a"][..., 1].mean() / 2)
    assert table.loc["s", "sd_ratio"] == pytest.approx(draws["s"].std(ddof=1) / 0.5)
    assert "w1" not in table
    with pytest.raises(ValueError, match="no site in common"):
        diagnostics.compare_to_reference({"b": np.zeros(10)}, ref)


def test_compare_to_reference_mcse_columns_are_arviz_numbers():
    rng = np.random.default_rng(1)
    # autocorrelated chains (AR(1), rho 0.9): the ESS-based errors differ from sd / sqrt(n)
    noise = rng.normal(size=(4, 2000))
    x = np.zeros_like(noise)
    for t in range(1, noise.shape[1]):
        x[:, t] = 0.9 * x[:, t - 1] + noise[:, t]
    ref = rng.normal(0.0, 2.0, 5000)  # reference draws: a leading draw axis, one chain
    table = diagnostics.compare_to_reference({"a": x}, {"a": ref}, group_by_chain=True)
    row = table.loc["a"]
    assert row["mcse_mean"] == pytest.approx(_arviz.mcse(x, method="mean"))
    assert row["mcse_sd"] == pytest.approx(_arviz.mcse(x, method="sd"))
    assert row["ref_mcse_mean"] == pytest.approx(_arviz.mcse(ref[None], method="mean"))
    se = np.hypot(row["mcse_mean"], row["ref_mcse_mean"])
    assert row["z_mean"] == pytest.approx((x.mean() - ref.mean()) / se)
    assert row["std_mean_error_se"] == pytest.approx(se / ref.std(ddof=1))
    # an exact reference (moments): only the draws' error counts
    moments = {"a": {"mean": 0.0, "sd": np.sqrt(1 / (1 - 0.81))}}
    exact = diagnostics.compare_to_reference({"a": x}, moments, group_by_chain=True).loc["a"]
    assert exact["ref_mcse_mean"] == 0 and exact["z_mean"] == pytest.approx(
        x.mean() / exact["mcse_mean"]
    )


def test_z_scores_are_standard_normal_on_exact_draws():
    """Draws and reference from the same law (iid and AR(1) chains): the z-scores of 400
    parameters are standard normal, so about 4.55 % lie beyond 2 (binomial: within 4 standard
    errors) and the resolved flag (|z| > 3 for mean or sd) has probability
    1 - (1 - 2 Phi(-3))^2 = 0.54 % per parameter (binomial over 400: within 4 standard errors);
    a sampler shifted by 0.3 (z ~ 8: the draws' MCSE ~ 0.032 with ESS ~ 1300, the
    reference's 0.018) is resolved on all but a few parameters."""
    rng = np.random.default_rng(2)
    n_par = 400
    noise = rng.normal(size=(4, 1000, n_par))
    x = np.zeros_like(noise)
    for t in range(1, noise.shape[1]):
        x[:, t] = 0.5 * x[:, t - 1] + noise[:, t]
    ref = rng.normal(0.0, np.sqrt(1 / 0.75), (4000, n_par))
    table = diagnostics.compare_to_reference({"a": x}, {"a": ref}, group_by_chain=True)
    z = np.concatenate([table["z_mean"].to_numpy(), table["z_sd"].to_numpy()])
    p = np.mean(np.abs(z) > 2)
    expected = 2 * stats.norm.sf(2)
    assert abs(p - expected) < 4 * np.sqrt(expected * (1 - expected) / z.size)
    flagged = 1 - (1 - 2 * stats.norm.sf(3)) ** 2
    assert abs(table["resolved"].mean() - flagged) < 4 * np.sqrt(flagged * (1 - flagged) / n_par)
    shifted = diagnostics.compare_to_reference(
        {"a": x + 0.3}, {"a": ref}, group_by_chain=True
    )
    assert shifted["resolved"].mean() > 0.95


def _gaussian_ksd(x):
    return diagnostics.kernel_stein_discrepancy(x, -x)  # score of N(0, I)


def test_kernel_stein_discrepancy():
    """KSD's closed form at one point; for exact N(0, I) draws the V-statistic's mean is
    E k0(x, x) / n = 2d / n (k0(x, x) = |x|^2 + d here; the off-diagonal U-statistic has mean
    0), checked on a simulated null of 200 replicates within 4 standard errors of that mean;
    a shifted and a widened sample lie beyond every null replicate and more than 10 null sds
    above the null mean."""
    # one draw at the mode of N(0, I_d): KSD^2 = k0(0, 0) = -2 beta d c^(2 beta - 2) = d
    assert diagnostics.kernel_stein_discrepancy(np.zeros((1, 2)), np.zeros((1, 2))) == (
        pytest.approx(np.sqrt(2))
    )
    rng = np.random.default_rng(1)
    n, d, replicates = 400, 2, 200
    null = np.array([_gaussian_ksd(rng.normal(size=(n, d))) ** 2 for _ in range(replicates)])
    se = null.std(ddof=1) / np.sqrt(replicates)
    assert abs(null.mean() - 2 * d / n) < 4 * se, (null.mean(), 2 * d / n, se)
    shifted = _gaussian_ksd(rng.normal(size=(n, d)) + 0.5) ** 2
    wide = _gaussian_ksd(1.5 * rng.normal(size=(n, d))) ** 2
    threshold = max(null.max(), null.mean() + 10 * null.std(ddof=1))
    assert shifted > threshold and wide > threshold, (null.mean(), null.std(), shifted, wide)


def test_model_scores_include_the_jacobian():
    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        numpyro.sample("s", dist.LogNormal(0.0, 1.0))

    s = np.array([0.5, 2.0])
    draws = {"x": np.array([[0.0, 1.0], [2.0, -1.0]]), "s": s}
    x, scores = diagnostics.model_scores(model, draws)
    # unconstrained u = log s: log p(u) = log LogNormal(e^u) + u = -u^2 / 2 + const
    # columns in sorted site order (as jax.flatten_util.ravel_pytree): s, then x
    np.testing.assert_allclose(x, np.column_stack([np.log(s), draws["x"]]), rtol=1e-6)
    np.testing.assert_allclose(scores, -x, rtol=1e-5, atol=1e-6)


def test_energy_distance():
    """By hand on two points; on two exact samples of the same law the statistic (over pairs
    i != j, unbiased) has mean 0: a simulated null of 100 replicates has its mean within 4
    standard errors of 0, and a 0.3 shift lies beyond every replicate and more than 10 null
    sds above the null mean."""
    # by hand: E|X-Y| = 1/2, E|X-X'| = E|Y-Y'| = 1 over pairs i != j
    assert diagnostics.energy_distance([0.0, 1.0], [0.0, 1.0]) == pytest.approx(-1.0)
    rng = np.random.default_rng(2)
    n, d, replicates = 500, 3, 100
    null = np.array(
        [
            diagnostics.energy_distance(rng.normal(size=(n, d)), rng.normal(size=(n, d)))
            for _ in range(replicates)
        ]
    )
    other = diagnostics.energy_distance(rng.normal(size=(n, d)), rng.normal(0.3, 1.0, (n, d)))
    assert abs(null.mean()) < 4 * null.std(ddof=1) / np.sqrt(replicates), null.mean()
    assert other > max(null.max(), null.mean() + 10 * null.std(ddof=1)), (null.std(), other)
    with pytest.raises(ValueError, match="different dimensions"):
        diagnostics.energy_distance(np.zeros((5, 2)), np.zeros((5, 3)))


def test_reference_posterior_is_cached(small_regression, tmp_path):
    X, y = small_regression
    kwargs = dict(num_samples=100, num_warmup=100, num_chains=1, folder=tmp_path)
    first = reference_posterior(lr.model, X, y, **kwargs)
    files = list(tmp_path.glob("reference-*.nc"))
    assert len(files) == 1 and np.asarray(first.posterior["w"]).shape == (1, 100, 2)
    again = reference_posterior(lr.model, X, y, **kwargs)
    np.testing.assert_array_equal(
        np.asarray(again.posterior["w"]), np.asarray(first.posterior["w"])
    )
    reference_posterior(lr.model, X, y + 1.0, **kwargs)  # other data, other file
    assert len(list(tmp_path.glob("reference-*.nc"))) == 2


def _compare(tmp_path, monkeypatch, *options):
    from numpyro_sgrld.__main__ import main

    monkeypatch.setenv("NUMPYRO_SGRLD_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "report"
    main(
        [
            "compare",
            "--kernels",
            "SGLD",
            "PSGLD",
            "--num-steps",
            "600",
            "--budget",
            "0.5",
            "--num-warmup",
            "200",
            "--reference-samples",
            "200",
            "--out",
            str(out),
            "--no-progress-bar",
            *options,
        ]
    )
    report = (out / "report.md").read_text()
    assert "| SGLD |" in report and "| PSGLD |" in report and "marginals.png" in report
    # the verdict first; errors with their standard errors, accuracy and convergence
    assert report.split("\n")[2].startswith("**Verdict.** On German credit") or \
        report.split("\n")[2].startswith("**Verdict.** On ")
    assert ("the most accurate SG kernel is **" in report.split("\n")[2]
            or "no SG kernel is resolved as the most accurate" in report.split("\n")[2])
    assert "| ± se |" in report and "| outside promise beyond noise |" in report
    assert (out / "comparison.columns.csv").exists() and "| step units |" in report
    assert "| converged |" in report and "| accurate |" in report
    assert "continued until the smallest bulk ESS reached 200" in report
    assert "largest split R-hat was at most 1.01" in report
    # a run of 300 steps, continued at most to 1500: SGLD's steps per chain are in the text
    steps = int(report.split("steps per chain: SGLD ")[1].split(",")[0])
    assert 300 <= steps <= 1500
    for name in ("reference", "SGLD", "PSGLD"):
        assert (out / f"{name}.nc").stat().st_size > 0
    assert (out / "comparison.csv").read_text().count("\n") == 4  # header, NUTS, 2 kernels
    return out, report


def _assert_images(out, names):
    import matplotlib.image as mpimg

    for name in names:
        image = mpimg.imread(out / f"{name}.png")
        assert image.ndim == 3 and image.shape[0] > 150 and image.shape[1] > 200, name


@pytest.mark.slow
def test_sgrld_compare_writes_a_report(tmp_path, monkeypatch):
    """The report on the small regression without the bias curves and the Γ panel (each a
    set of further compiled runs); the full report is the slow test below."""
    out, report = _compare(
        tmp_path, monkeypatch, "--model", "linear_regression", "--no-large",
        "--step-size", "PSGLD=1e-6",
    )
    assert "## The Γ bias, visible and removed" not in report
    # SGLD chose its step during the burn-in, PSGLD's was given: the text says which
    steps = report.split("step sizes ")[1]
    assert "SGLD " in steps and "(adapted)" in steps.split("PSGLD")[0]
    assert "PSGLD 1e-06 (" in steps and "| step size |" in report
    _assert_images(out, ("errors", "marginals", "trace_SGLD", "trace_PSGLD",
                         "trace_reference"))
    assert "## Where SG-MCMC wins" not in report


@pytest.mark.slow
def test_sgrld_compare_writes_the_full_report(tmp_path, monkeypatch):
    """Every section: the bias curves, the Γ panel, and the time-to-accuracy race (on a
    small data set here: the default's million rows take minutes)."""
    out, report = _compare(tmp_path, monkeypatch, "--bias-kernels", "SGLD", "PSGLD",
                           "--gamma-panel", "--large-rows", "20000", "--large-kernels", "SGLD")
    # the Γ panel: pSGLD with and without Γ on the 1-D target, sds with standard errors
    assert "## The Γ bias, visible and removed" in report and "| PSGLD+Γ | " in report
    assert "## Where SG-MCMC wins" in report and "reached it first" in report.split("\n")[2]
    csv = (out / "time_to_accuracy.csv").read_text().splitlines()
    assert csv[0].startswith("method,seconds_to_target,reached")
    assert [line.split(",")[0] for line in csv[1:]] == ["SGLD", "NUTS", "HMCECS", "MALA"]
    _assert_images(out, ("errors", "marginals", "bias", "gamma", "trace_SGLD", "trace_PSGLD",
                         "time_to_accuracy"))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--step-size", "SGLD=0"], "STEP > 0"),
        (["--step-size", "FOO=1e-3"], "unknown kernel"),
        (["--num-steps", "0"], "num_steps"),
        (["--kernels", "NUTS"], "Unknown kernels"),
        (["--large-kernels", "NUTS"], "--large-kernels: unknown"),
    ],
)
def test_sgrld_compare_rejects_bad_options(argv, message, capsys):
    from numpyro_sgrld.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["compare", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_reference_group_travels_with_the_posterior(tmp_path):
    import arviz as az

    from numpyro_sgrld import plots
    from numpyro_sgrld.analysis.inference_data import REFERENCE_GROUP

    def model():
        numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([2]).to_event(1))

    mcmc = MCMC(SGLD(model, step_size=0.1), num_warmup=50, num_samples=200, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(random.PRNGKey(0))
    ref = {"theta": np.random.default_rng(0).normal(size=(3, 500, 2))}
    idata = to_inference_data(mcmc, reference=ref, log_likelihood=False)
    np.testing.assert_array_equal(idata[REFERENCE_GROUP]["theta"].values, ref["theta"])
    idata.to_netcdf(tmp_path / "run.nc")
    again = az.from_netcdf(tmp_path / "run.nc")
    assert REFERENCE_GROUP in _arviz.group_names(again)
    summary = az.summary(again, group=REFERENCE_GROUP, kind="stats", round_to="none")
    assert summary.loc["theta[1]", "mean"] == pytest.approx(ref["theta"][..., 1].mean(), abs=1e-3)
    fig = plots.plot_rank_against_reference(again)
    # the sampler's 2 chains and the reference's 3, ranked together
    assert "chains 0-1: the sampler; 2-4: the reference" in fig._suptitle.get_text()
    fig = plots.plot_dist_against_reference(again)
    assert [ax.get_title() for ax in fig.axes[:2]] == ["theta[0]", "theta[1]"]
    with pytest.raises(ValueError, match="No reference"):
        plots.plot_rank_against_reference(to_inference_data(mcmc, log_likelihood=False))
