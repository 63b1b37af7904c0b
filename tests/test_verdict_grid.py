"""The verdict as a classifier, read from the recorded grid (``docs/results/verdict_grid*.jsonl``,
written by ``benchmarks/accuracy/defaults.py``: every preset at its defaults with 4 chains and
with 1, and the deliberately wrong runs): no run that is inaccurate beyond its Monte Carlo
error may be quiet, and at most 5 % of the accurate runs may warn. Each row's label is
recomputed from its recorded errors, so a row cannot pass on a stale label."""

import json
from pathlib import Path

import numpy as np
import pytest

RESULTS = sorted((Path(__file__).parent.parent / "docs" / "results").glob("verdict_grid*.jsonl"))
MAX_MEAN_ERROR, SD_RATIO = 0.15, (0.87, 1.15)


def _rows():
    rows = [json.loads(line) for path in RESULTS for line in path.read_text().splitlines()
            if line]
    return [r for r in rows if "refused" not in r]


def _accurate(r):
    if "test_nll" in r:
        return r["accurate"]
    return (r["max_mean_error_sd"] <= MAX_MEAN_ERROR
            and SD_RATIO[0] <= r["sd_ratio_min"] and r["sd_ratio_max"] <= SD_RATIO[1])


#: How many Monte Carlo standard errors beyond the promise a coordinate must be for its run to
#: be inaccurate beyond noise.
BEYOND = 2.0


def _clearly_inaccurate(r):
    """Inaccurate beyond the run's own Monte Carlo error: some coordinate's mean error or sd
    ratio is more than :data:`BEYOND` standard errors outside the promise (a mean's error
    1/sqrt(ESS) sd, an sd ratio's r/sqrt(2 ESS), with the coordinate's bulk ESS; a coordinate
    whose ESS could not be estimated cannot decide). Rows recorded without per-coordinate
    errors, and the network's (labelled by a test NLL that carries its own error), keep their
    label."""
    if "test_nll" in r or "ess" not in r:
        return not _accurate(r)
    ess = np.array([e if e is not None and e > 0 else np.nan for e in r["ess"]], float)
    err, ratio = np.asarray(r["mean_error_sd"], float), np.asarray(r["sd_ratio"], float)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.concatenate([(err - MAX_MEAN_ERROR) * np.sqrt(ess),
                            (ratio - SD_RATIO[1]) / (ratio / np.sqrt(2 * ess)),
                            (SD_RATIO[0] - ratio) / (ratio / np.sqrt(2 * ess))])
    return bool(np.nanmax(z, initial=-np.inf) > BEYOND)


@pytest.fixture(scope="module")
def rows():
    rows = _rows()
    if not rows:
        pytest.skip("no recorded verdict grid in docs/results")
    return rows


def test_every_label_follows_from_the_recorded_errors(rows):
    assert all(_accurate(r) == r["accurate"] for r in rows)


def test_no_run_inaccurate_beyond_its_noise_is_quiet(rows):
    missed = [(r["problem"], r["kernel"], r.get("chains")) for r in rows
              if _clearly_inaccurate(r) and not r["warned"]]
    assert missed == []


def test_at_most_five_percent_of_accurate_runs_warn(rows):
    accurate = [r for r in rows if _accurate(r)]
    alarms = [(r["problem"], r["kernel"], r.get("chains")) for r in accurate if r["warned"]]
    assert len(alarms) <= 0.05 * len(accurate), alarms


def test_the_grid_holds_right_and_wrong_runs_of_both_chain_counts(rows):
    wrong = [r for r in rows if r.get("wrong")]
    assert wrong and any(not _accurate(r) for r in wrong)
    assert {r.get("chains") for r in rows} >= {1, 4}


def test_every_deliberately_wrong_run_that_is_inaccurate_warns(rows):
    """A deliberately wrong setting that the library now gets right (SGNHT at a small given
    step, whose thermostat warm-up settles) counts as an accurate run."""
    quiet = [(r["problem"], r["kernel"]) for r in rows
             if r.get("wrong") and not _accurate(r) and not r["warned"]]
    assert quiet == []
