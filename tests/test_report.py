"""The report of ``sgrld compare`` on small synthetic runs: what it prints (no negative
distance, no ``inf`` or ``nan``, one name per method), the most accurate kernel named only where
the noise resolves it, a table that cannot contradict itself, CSV files that explain their
columns, the energy distance's Monte Carlo error, and the trace plots' parameters, each run's
own."""

import copy
import csv
import re
from statistics import NormalDist
from types import SimpleNamespace

import numpy as np
import pytest

from numpyro_sgrld import diagnostics
from numpyro_sgrld.analysis import arviz_io as _arviz
from numpyro_sgrld.app import _rows, _tables
from numpyro_sgrld.app import time_to_accuracy as tta
from numpyro_sgrld.app.report import (
    BEST_LEVEL,
    distance_cell,
    format_table,
    verdict_paragraph,
    write_report,
)

D = 5


def _idata(rng, shift=0.0, scale=1.0, chains=4, draws=200):
    w = shift + scale * rng.standard_normal((chains, draws, D))
    return _arviz.from_dict(posterior={"w": w},
                            sample_stats={"diverging": np.zeros((chains, draws), bool)})


@pytest.fixture(scope="module")
def runs():
    """A reference and three runs of D parameters: SGLD off in w[1], PSGLD in w[3] (wider),
    MALA exact."""
    rng = np.random.default_rng(0)
    ref = _idata(rng, draws=400)
    shifts = {"SGLD": np.eye(D)[1] * 0.4, "PSGLD": np.zeros(D), "MALA": np.zeros(D)}
    scales = {"SGLD": 1.0, "PSGLD": 1.0 + 0.5 * np.eye(D)[3], "MALA": 1.0}
    idatas = {k: _idata(rng, shifts[k], scales[k]) for k in shifts}
    tables = {k: diagnostics.compare_to_reference(v, ref) for k, v in idatas.items()}
    return ref, idatas, tables


def _gaussian_scores(draws):
    """The draws of N(0, I) and their scores, as a problem's ``score_function`` gives them."""
    x = np.asarray(draws["w"], np.float64)
    return x, -x


def _rows_of(runs):
    ref, idatas, tables = runs
    ref_draws = _arviz.dataset(ref, "posterior")["w"].values.reshape(-1, D)
    rows = {"NUTS (reference)": _rows.reference_row(
        ref, 3.0, (-0.004, 0.003), _rows.ksd_with_error(_gaussian_scores, {"w": ref_draws}))}
    for name, idata in idatas.items():
        draws = _arviz.dataset(idata, "posterior")["w"].values.reshape(-1, D)
        energy = _rows.energy_distance_with_error(draws, ref_draws)
        rows[name] = _rows.summary_row(tables[name], idata, 1.0, energy,
                                       _rows.ksd_with_error(_gaussian_scores, {"w": draws}))
    rows["MALA"]["energy dist"] = -0.002  # unbiased, the estimate is often negative for equal laws
    # a method that produced no draws: every number missing
    empty = tables["MALA"].copy()
    empty[[c for c in empty.columns if c != "resolved"]] = np.nan
    rows["BayesByBackprop"] = _rows.summary_row(empty, idatas["MALA"], 1.0,
                                                (np.nan, np.nan), (np.nan, np.nan))
    return rows


@pytest.fixture(scope="module")
def rows(runs):
    """:func:`_rows_of` the runs, computed once (each test takes a copy)."""
    return _rows_of(runs)


def _race():
    results = [tta.RaceResult("SGLD", 10.0, True, 10.0, 4000, 0.05, 1.05),
               tta.RaceResult("NUTS", 50.0, False, 50.0, 0, np.inf, np.nan, "cap"),
               tta.RaceResult("MALA", 10.0, False, 10.0, 500, 0.3, 1.4)]
    ref = tta.Reference(np.zeros(3), np.ones(3), np.zeros(3), np.zeros(3), np.nan, 1e4, 10000,
                        1.0, False)
    return tta.LargeRace(tta.Setting(), ref, results, 90.0, 50.0, 10.0, 5.0)


def _settings(kernels):
    return dict(kernels=kernels, steps={k: 1e-3 for k in kernels}, adapted=["SGLD"],
                num_steps=100, num_warmup=200, thinning=1, num_chains=4, reference_samples=400,
                seed=0, target_ess=200, max_steps=500, taken={k: 100 for k in kernels},
                latent_sites=["w"], ref_cached=False)


def _column(report, header):
    """The cells of column ``header`` of the report's table of runs (the one headed
    ``| kernel |``)."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| kernel |"))
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith("|"))
    heads = [c.strip() for c in lines[start].strip("|").split(" | ")]
    at = heads.index(header)
    return [[c.strip() for c in line.strip("|").split(" | ")][at]
            for line in lines[start + 2 : end]]


def test_the_report_prints_no_negative_distance_no_inf_or_nan_and_one_name_per_method(
        rows, tmp_path):
    rows = copy.deepcopy(rows)
    kernels = [k for k in rows if k != "NUTS (reference)"]
    problem = SimpleNamespace(description="A synthetic problem", name="the synthetic problem")
    write_report(tmp_path, problem, rows, {}, None, _settings(kernels), _race())
    report = (tmp_path / "report.md").read_text()
    printed = report + "\n" + format_table(rows)
    assert not re.search(r"\b(inf|nan)\b", printed, re.IGNORECASE)
    assert "LMC" not in printed
    assert "| MALA |" in report and "- MALA: " in report  # the row and the baseline's note
    energy = _column(report, "energy dist")
    assert len(energy) == len(rows)
    for cell in energy:
        assert cell == "—" or cell.startswith("within noise (± ") or re.fullmatch(
            r"\d[\d.e+-]* ± [\d.e-]+", cell), cell
    assert energy[list(rows).index("MALA")].startswith("within noise (± ")
    assert energy[list(rows).index("SGLD")][0].isdigit()  # a shift of 0.4 sd: above the noise
    # the exact reference's KSD² reads no worse than any run's: within its noise
    ksd = _column(report, "KSD²")
    assert ksd[0].startswith("within noise (± "), ksd[0]
    # the method without draws: a word, not a number
    assert "NO: no finite draws" in report
    assert "| NUTS | > 50.0 | no | 0 | no draws | no draws | cap |" in report
    # the verdict and the bias section name the problem the rows come from
    assert "**Verdict.** On the synthetic problem " in report
    assert "## The bias of each kernel: the synthetic problem" in report


def test_the_squared_ksd_reads_exact_draws_as_closest():
    """The U-statistic's z-score is below 3 for exact N(0, I) draws and above 3 for draws
    20 % too narrow or 25 % too wide (the V-statistic reads too-narrow draws as closer than
    exact ones: its diagonal ‖score‖² shrinks towards the mode)."""
    rng = np.random.default_rng(3)
    d, n = 25, 1000
    z = {}
    for scale in (1.0, 0.8, 1.25):
        w = scale * rng.standard_normal((n, d))
        value, se = _rows.ksd_with_error(_gaussian_scores, {"w": w})
        z[scale] = value / se
    assert z[1.0] < 3 and z[0.8] > 3 and z[1.25] > 3, z


@pytest.mark.slow
def test_the_squared_ksd_error_follows_its_spread():
    """The block jackknife's standard error of the squared KSD against the estimate's spread
    over replicates, for exact and for too-wide draws, at the report's 1,000 draws. The
    jackknife is conservative (Efron & Stein 1981), more so for exact draws, where the
    U-statistic is degenerate (1.2x its spread here, 1.8x with 300 draws in 5 dimensions):
    it must neither understate the spread nor overstate it twice over."""
    rng = np.random.default_rng(4)
    n, d = 1000, 25
    for scale in (1.0, 1.5):
        values, errors = zip(*(_rows.ksd_with_error(
            _gaussian_scores, {"w": scale * rng.standard_normal((n, d))}) for _ in range(30)))
        ratio = np.mean(errors) / np.std(values, ddof=1)
        assert 0.8 < ratio < 2.0, (scale, ratio)


def test_distance_cells():
    assert distance_cell(-0.01, 0.02) == "within noise (± 0.02)"
    assert distance_cell(0.03, 0.02) == "within noise (± 0.02)"
    assert distance_cell(0.5, 0.02) == "0.5 ± 0.02"
    assert distance_cell(float("nan"), 0.02) == "—"
    assert distance_cell(-0.01, float("nan")) == "within noise"


def test_the_energy_distance_error_follows_its_spread():
    """The block jackknife's standard error against the estimate's spread over replicates,
    where the laws agree (spread of order 1/n) and where they differ (1/sqrt(n)); the estimate
    is :func:`~numpyro_sgrld.analysis.diagnostics.energy_distance`'s."""
    rng = np.random.default_rng(2)
    n, d = 300, 3
    for shift in (0.0, 0.3):
        values, errors = [], []
        for _ in range(40):
            x, y = rng.standard_normal((n, d)) + shift, rng.standard_normal((n, d))
            value, se = _rows.energy_distance_with_error(x, y)
            values.append(value)
            errors.append(se)
        assert value == pytest.approx(diagnostics.energy_distance(x, y), abs=1e-12)
        ratio = np.mean(errors) / np.std(values, ddof=1)
        assert 0.7 < ratio < 1.6, (shift, ratio)
    assert np.isnan(_rows.energy_distance_with_error(np.zeros((3, 2)), np.ones((5, 2)))[1])


def test_each_trace_plot_shows_its_runs_own_worst_parameters(runs, tmp_path, monkeypatch):
    from numpyro_sgrld.analysis import plots
    from numpyro_sgrld.app import compare

    ref, idatas, tables = runs
    shown = {}
    monkeypatch.setattr(plots, "plot_trace_rank",
                        lambda draws, params, title, path: shown.update({path.name: params}))
    compare._trace_plots(tmp_path, tables, idatas, ref)
    assert shown["trace_SGLD.png"][0] == "w[1]" and shown["trace_PSGLD.png"][0] == "w[3]"
    assert shown["trace_SGLD.png"] != shown["trace_PSGLD.png"]
    assert set(shown["trace_reference.png"]) <= set().union(*shown.values())


def _row(err, se, ratio=1.0, ratio_se=0.01):
    return {"max abs mean err/sd": err, "± se": se, "worst sd ratio": ratio,
            "± se (sd)": ratio_se, "accurate": "yes", "converged": "yes"}


def test_the_most_accurate_kernel_is_named_only_where_the_noise_resolves_it():
    """The errors 0.038 ± 0.019 and 0.044 ± 0.020 overlap: a tie, not a ranking. One kernel is
    named only where its error is below each other's by more than z standard errors of the
    difference, z the one-sided level's quantile Bonferroni-corrected over the comparisons:
    just above z it is named, just below it the two tie."""
    rows = {"NUTS (reference)": {**_row(np.nan, np.nan), "accurate": "—"},
            "AdamSGLD": _row(0.044, 0.020),
            "SGHMC": _row(0.038, 0.019)}
    text = verdict_paragraph(rows)
    assert "the most accurate SG kernel is" not in text
    assert "no SG kernel is resolved as the most accurate: **SGHMC**" in text
    assert "**AdamSGLD** (0.044 ± 0.020 posterior sd) tie" in text
    for others in (1, 3):
        z = NormalDist().inv_cdf(1 - BEST_LEVEL / others)
        spread = np.hypot(0.01, 0.01)
        for factor, named in ((1.02, True), (0.98, False)):
            rows = {"SGLD": _row(0.05, 0.01)}
            rows.update({k: _row(0.05 + factor * z * spread, 0.01)
                         for k in ("PSGLD", "SGHMC", "MongeSGLD")[:others]})
            text = verdict_paragraph(rows, name="P")
            assert text.startswith("On P the most accurate SG kernel is **SGLD**") == named, text
            assert f"by more than {z:.2f} standard errors of the difference" in text
    # the sd ratio's distance from 1 is the error where it is the larger, with its own error
    rows = {"SGLD": _row(0.01, 0.001, 1.30, 0.01), "PSGLD": _row(0.20, 0.01)}
    assert verdict_paragraph(rows, name="P").startswith("On P the most accurate SG kernel is "
                                                         "**PSGLD**")


def test_no_row_reads_accurate_beside_parameters_outside_the_promise(tmp_path):
    """A long run off by 0.08 sd in every parameter: each difference is resolved (z > 3), and
    every one is within the 0.15 sd promise. The row is accurate and counts no parameter
    outside the promise; a run 0.4 sd off in one parameter counts that one. Over every row,
    accurate implies none outside (a point estimate within the promise never misses it)."""
    rng = np.random.default_rng(5)
    ref = _idata(rng, draws=2000)
    runs = {"long": _idata(rng, shift=0.08, draws=5000),
            "off": _idata(rng, shift=0.4 * np.eye(D)[2], draws=5000)}
    rows = {}
    for name, idata in runs.items():
        table = diagnostics.compare_to_reference(idata, ref)
        rows[name] = _rows.summary_row(table, idata, 1.0, (np.nan, np.nan), (np.nan, np.nan))
        if name == "long":
            assert table["resolved"].all()
    assert rows["long"]["accurate"] == "yes"
    assert rows["long"]["outside promise beyond noise"] == f"0/{D}"
    assert rows["off"]["outside promise beyond noise"] == f"1/{D}"
    assert "off beyond noise" not in format_table(rows)
    for row in rows.values():
        if row["accurate"] == "yes":
            assert row["outside promise beyond noise"].startswith("0/")


def test_the_csv_files_explain_their_columns_and_hold_no_inf_or_nan(runs, rows, tmp_path):
    """comparison.csv and per_parameter.csv, read without report.md: every column is
    explained in the data dictionary beside the file, both read cleanly with pandas and csv;
    a negative distance stays as estimated, with its flag; no ``inf`` or ``nan``."""
    import pandas as pd

    rows = copy.deepcopy(rows)
    rows["SGLD"]["max R-hat"] = float("inf")
    _tables.write_tables(tmp_path, rows, runs[2])
    for name in ("comparison", "per_parameter"):
        path = tmp_path / f"{name}.csv"
        text = path.read_text()
        assert not re.search(r"\b(inf|nan)\b", text, re.IGNORECASE), name
        columns = pd.read_csv(tmp_path / f"{name}.columns.csv", index_col="column")
        header = next(csv.reader(path.open()))
        assert header == list(columns.index), name
        assert columns["meaning"].str.len().min() > 10
    table = pd.read_csv(tmp_path / "comparison.csv", index_col="kernel")
    assert table.loc["MALA", "energy dist"] < 0
    assert table.loc["MALA", "energy within noise"] == "yes"
    assert table.loc["SGLD", "energy within noise"] == "no"
    assert pd.isna(table.loc["BayesByBackprop", "energy within noise"])
    assert pd.isna(table.loc["SGLD", "max R-hat"])
    per = pd.read_csv(tmp_path / "per_parameter.csv", index_col=["kernel", "parameter"])
    assert per.loc["SGLD", "outside_promise"].sum() == 1


def test_each_row_says_what_its_step_size_measures():
    """A whitened step, a raw one and MALA's leapfrog ε are different quantities; each row
    names its own, and an adaptive preset's metric leaves the learnt coordinates above
    DENSE_MAX_DIM coordinates."""
    units = _tables.step_units
    assert units("SGLD", True, 5) == "h, whitened" and units("SGLD", False, 5) == "h, raw"
    assert units("SGHMC", True, 5) == "η, whitened"
    assert units("BAOAB", True, 5) == "time h, whitened"
    assert units("PSGLD", True, 5) == "h × RMSprop, whitened"
    assert units("PSGLD", True, 500) == "h × RMSprop, raw"
    assert units("BNPSGLD", True, 5) == "h × BNP, raw"
    assert units("CyclicalSGLD", True, 5) == "mean h, whitened"
    assert units("MALA", True, 5).startswith("ε, raw")
    assert units("BayesByBackprop", True, 5) == "—"
    assert set(_tables.COMPARISON_COLUMNS) >= {"step size", "step units"}
