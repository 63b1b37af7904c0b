"""The verdict as a classifier, read from the recorded grid (``docs/results/verdict_grid*.jsonl``,
written by ``benchmarks/accuracy/defaults.py``: every preset at its defaults with 4 chains and
with 1, and the deliberately wrong runs): no inaccurate run may be quiet, and at most 5 % of the
accurate runs may warn. Each row's label is recomputed from its recorded errors, so a row
cannot pass on a stale label."""

import json
from pathlib import Path

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


@pytest.fixture(scope="module")
def rows():
    rows = _rows()
    if not rows:
        pytest.skip("no recorded verdict grid in docs/results")
    return rows


def test_every_label_follows_from_the_recorded_errors(rows):
    assert all(_accurate(r) == r["accurate"] for r in rows)


#: The recorded grid does not meet the bounds yet (docs/benchmarks.md, "The verdict as a
#: classifier": 1 inaccurate run quiet, 12 of 82 accurate runs warned); strict, so that the mark
#: must go once a re-run grid meets them.
NOT_MET = pytest.mark.xfail(strict=True, reason="the recorded grid: 1 miss, 12 of 82 false alarms")


@NOT_MET
def test_no_inaccurate_run_is_quiet(rows):
    missed = [(r["problem"], r["kernel"], r.get("chains")) for r in rows
              if not _accurate(r) and not r["warned"]]
    assert missed == []


@NOT_MET
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
