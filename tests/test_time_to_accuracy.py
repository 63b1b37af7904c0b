"""The time-to-accuracy race (``numpyro_sgrld.app.time_to_accuracy``): the Laplace importance
sampling reference against the exact posterior by quadrature, the Pareto shape against known
tails, the accuracy rule, the race's clock and cap, the CSV file and its data dictionary, and the
report's verdict."""

import numpy as np
import pytest

from numpyro_sgrld.app import time_to_accuracy as tta


def _quadrature_moments(X, y, half_width=8.0, n=401):
    """Posterior mean and sd of a 2-D logistic regression with w ~ N(0, I) by quadrature on a
    grid (float64): the exact answer to 1e-6."""
    X, y = np.asarray(X, np.float64), np.asarray(y)
    s = 2.0 * y - 1.0
    # a grid around the mode found by brute force on a coarse grid first
    g = np.linspace(-half_width, half_width, 161)
    W = np.stack(np.meshgrid(g, g, indexing="ij"), -1).reshape(-1, 2)
    logp = -np.logaddexp(0, -(s[:, None] * (X @ W.T))).sum(0) - 0.5 * (W**2).sum(1)
    centre = W[np.argmax(logp)]
    g1 = centre[0] + np.linspace(-3, 3, n)
    g2 = centre[1] + np.linspace(-3, 3, n)
    W = np.stack(np.meshgrid(g1, g2, indexing="ij"), -1).reshape(-1, 2)
    logp = -np.logaddexp(0, -(s[:, None] * (X @ W.T))).sum(0) - 0.5 * (W**2).sum(1)
    p = np.exp(logp - logp.max())
    p /= p.sum()
    mean = p @ W
    sd = np.sqrt(p @ (W - mean) ** 2)
    return mean, sd


def test_the_laplace_reference_is_the_posterior_within_its_monte_carlo_error(tmp_path):
    """N = 60 points, d = 2: a posterior visibly skewed, so the Laplace approximation alone is
    off, and the importance weights correct it. The reference's means and sds agree with
    quadrature within 4 of their own standard errors, and its k-hat says it is reliable."""
    X, y = tta.logistic_data(60, 2, seed=3)
    ref = tta.laplace_reference(X, y, num_draws=20000, seed=1, folder=tmp_path)
    mean, sd = _quadrature_moments(X, y)
    assert ref.khat < 0.7
    assert np.all(np.abs(ref.mean - mean) <= 4 * ref.mean_se)
    assert np.all(np.abs(ref.sd - sd) <= 4 * ref.sd_se)
    assert not ref.cached and tta.laplace_reference(X, y, num_draws=20000, seed=1,
                                                    folder=tmp_path).cached


@pytest.mark.parametrize("alpha", [4.0, 1.5, 0.8])
def test_pareto_khat_recovers_the_tail_shape(alpha):
    """Weights with a Pareto tail of index alpha have shape k = 1 / alpha; the estimate from
    the M = 3 sqrt(S) largest of S = 40,000 has a standard error of about (1 + k) / sqrt(M)."""
    rng = np.random.default_rng(0)
    S = 40000
    log_w = np.log1p(rng.pareto(alpha, S))
    k = 1 / alpha
    M = int(3 * np.sqrt(S))
    assert abs(tta.pareto_khat(log_w) - k) <= 4 * (1 + k) / np.sqrt(M)


def _reference(d=3):
    return tta.Reference(np.zeros(d), np.ones(d), np.zeros(d), np.zeros(d), 0.0, 1e4, 10000,
                         1.0, False)


def test_accuracy_is_the_stated_rule():
    rng = np.random.default_rng(1)
    ref = _reference()
    exact = rng.standard_normal((200000, 3))
    err, worst, ok = tta.accuracy(exact, ref)
    assert ok and err < 0.02 and abs(worst - 1) < 0.02
    assert not tta.accuracy(exact + [0, 0.2, 0], ref)[2]  # a mean 0.2 sd off
    assert not tta.accuracy(exact * [1, 1, 1.2], ref)[2]  # an sd 20 % too wide
    assert tta.accuracy(exact * [1, 1, 1.05], ref)[2]  # 5 %: inside the band
    assert not tta.accuracy(exact[:1], ref)[2]


def test_the_race_stops_at_the_target_and_at_the_cap():
    """A runner whose draws come from the reference reaches it; one whose draws are 30 %
    too wide runs until the cap and is reported with the time it ran."""
    rng = np.random.default_rng(2)
    ref = _reference()

    def runner(scale):
        chunk = lambda *a: scale * rng.standard_normal((20000, 3))  # noqa: E731
        return tta.Runner(chunk, chunk)

    lines = []
    good = tta.race("exact", runner(1.0), ref, cap=60.0, key=None, log=lines.append)
    assert good.reached and good.seconds_to_target < 60 and good.draws >= 20000
    bad = tta.race("wide", runner(1.3), ref, cap=0.05, key=None, log=lines.append)
    assert not bad.reached and bad.seconds_run >= 0.05 and abs(bad.worst_sd_ratio - 1.3) < 0.05
    assert "target reached" in lines[0] and "time cap" in lines[-1]


def test_the_verdict_names_the_best_kernel_the_biased_ones_and_the_race():
    from numpyro_sgrld.app.compare import verdict_paragraph

    def row(err, ratio, accurate="yes", converged="yes"):
        return {"max abs mean err/sd": err, "± se": 0.02, "worst sd ratio": ratio,
                "± se (sd)": 0.01, "accurate": accurate, "converged": converged}

    rows = {"NUTS (reference)": row(np.nan, np.nan, "—"),
            "SGLD": row(0.05, 1.04),
            "PSGLD": row(0.06, 1.30, "NO: sd ratios 1.00–1.30"),
            "MongeSGLD": row(0.30, 1.02, "NO: mean error 0.30 sd", "NO: R-hat 1.050")}
    results = [tta.RaceResult("SGLD", 10.0, True, 10.0, 4000, 0.05, 1.05),
               tta.RaceResult("NUTS", 50.0, False, 50.0, 0, np.inf, np.nan, "cap"),
               tta.RaceResult("HMCECS", 80.0, True, 80.0, 600, 0.05, 1.08)]
    race = tta.LargeRace(tta.Setting(), _reference(), results, 90.0, 50.0, 20.0, 5.0)
    text = verdict_paragraph(rows, race)
    assert "On German credit the most accurate SG kernel is **SGLD**" in text
    # the problem the rows come from is named as the report's caller names it
    assert verdict_paragraph(rows, name="the digits MLP").startswith("On the digits MLP the")
    assert "1 of 3 rows are accurate" in text and ": SGLD." in text
    assert "PSGLD (sds too wide by up to 30 ± 1 %" in text
    assert "**Did not converge**" in text and "MongeSGLD (R-hat 1.050)" in text
    assert "**SGLD** reached it first, in 10 s" in text
    assert "NUTS had not reached it when stopped after 50 s, so SGLD is more than 5.0×" in text
    assert "HMCECS reached it in 80 s (8.0× SGLD's time)" in text
    # where an exact method is faster (a small data set), the verdict says so
    faster = race._replace(results=[*results, tta.RaceResult("MALA", 6.0, True, 6.0, 900, 0.05,
                                                             1.02)])
    text = verdict_paragraph(rows, faster)
    assert "MALA reached it first, in 6 s; the fastest SG kernel, **SGLD**, took 10 s" in text
    assert "MALA reached it in 6 s (0.6× SGLD's time)" in text
    # an exact method's own time to the target, measured once and cached: a measured ratio
    nuts = tta.RaceResult("NUTS", 120.0, True, 120.0, 900, 0.05, 1.05)
    measured = race._replace(measured={"NUTS": (nuts, "2026-11-28")})
    text = verdict_paragraph(rows, measured)
    assert ("NUTS reached it in 120 s (measured on this machine on 2026-11-28, cached): "
            "**SGLD was 12.0× faster than NUTS**") in text


def test_the_exact_methods_run_to_the_target_once_and_are_read_from_the_cache(
        tmp_path, monkeypatch):
    """On the first run NUTS and HMCECS race until the target (at most LIMIT) and their
    results are cached; a later run races them at the cap and reports the cached times."""
    from numpyro_sgrld.app import _race_cache

    monkeypatch.setenv("NUMPYRO_SGRLD_CACHE", str(tmp_path))
    own = {"SGLD": 10.0, "NUTS": 120.0, "HMCECS": 40.0, "MALA": 5.0}
    caps = {}

    def fake_race(method, reference, cap, log=print):
        caps[method] = cap
        t = min(own[method], cap)
        reached = own[method] <= cap
        return tta.RaceResult(method, t, reached, t, 100 if reached else 0, 0.05, 1.05,
                              "" if reached else f"stopped at the time cap of {cap:.0f} s")

    monkeypatch.setattr(tta, "race_in_process", fake_race)
    setting = tta.Setting(num_data=1000)

    def race():
        contenders = {m: m for m in own}
        return tta._race_all(contenders, ["SGLD"], setting, None, 90.0, 5.0, 1.0,
                             lambda text: None)

    results, exact_cap, _, measured = race()
    assert caps["NUTS"] == caps["HMCECS"] == _race_cache.LIMIT and caps["MALA"] == 10.0
    assert {r.method: r.reached for r in results} == dict.fromkeys(own, True)
    assert measured["NUTS"][0].seconds_to_target == 120.0 and "MALA" not in measured
    results, exact_cap, _, measured = race()
    assert caps["NUTS"] == caps["HMCECS"] == exact_cap == 50.0
    live = {r.method: r for r in results}
    assert not live["NUTS"].reached and live["HMCECS"].reached
    assert measured["NUTS"][0].reached and measured["NUTS"][0].seconds_to_target == 120.0
    # another setting is another measurement
    assert _race_cache.load(setting._replace(seed=1), "NUTS") is None


def test_the_csv_says_what_was_not_reached_and_what_could_not_be_measured(tmp_path):
    """A method that did not reach the target has no time to the target (an empty value, not
    the time it ran, nor ``inf``); one without draws has no errors (empty, not ``inf`` or
    ``nan``); every column is explained in ``time_to_accuracy.columns.csv``."""
    import csv
    import re

    import pandas as pd

    results = [tta.RaceResult("SGLD", 10.0, True, 10.0, 4000, 0.05, 1.05),
               tta.RaceResult("NUTS", 50.0, False, 50.0, 0, np.inf, np.nan,
                              "stopped at the time cap of 50 s"),
               tta.RaceResult("MALA", 12.0, False, 12.0, 900, 0.3, 1.4)]
    path = tmp_path / "time_to_accuracy.csv"
    tta.write_csv(results, path)
    assert not re.search(r"\b(inf|nan)\b", path.read_text(), re.IGNORECASE)
    table = pd.read_csv(path, index_col="method")
    assert table.loc["SGLD", "seconds_to_target"] == 10.0
    for method in ("NUTS", "MALA"):
        assert pd.isna(table.loc[method, "seconds_to_target"]) and not table.loc[method,
                                                                                 "reached"]
    assert table.loc["NUTS", "seconds_run"] == 50.0
    assert pd.isna(table.loc["NUTS", "max_mean_error"])
    assert pd.isna(table.loc["NUTS", "worst_sd_ratio"])
    assert table.loc["MALA", "max_mean_error"] == 0.3
    columns = pd.read_csv(tmp_path / "time_to_accuracy.columns.csv", index_col="column")
    assert list(columns.index) == next(csv.reader(path.open()))
    assert "Empty where it did not reach it" in columns.loc["seconds_to_target", "meaning"]


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="num_data"):
        tta.logistic_data(1, 2)
    with pytest.raises(ValueError, match="num_features"):
        tta.logistic_data(10, 0)
