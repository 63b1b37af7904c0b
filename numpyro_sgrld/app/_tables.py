"""The CSV files of ``sgrld compare``'s first problem and what their columns mean.

``comparison.csv`` holds the report's table, a row per run; ``per_parameter.csv`` every run's
every scalar parameter. Each has its data dictionary beside it
(:func:`~numpyro_sgrld.app._columns.write_columns`: :data:`COMPARISON_COLUMNS`,
:data:`PER_PARAMETER_COLUMNS`). :func:`step_units` says what each row's step size measures,
which differs between kernels.
"""

import numpy as np

from numpyro_sgrld.app._columns import write_columns
from numpyro_sgrld.app._rows import outside_promise
from numpyro_sgrld.app.report import (
    ACCURATE_MEAN,
    ACCURATE_SD,
    DISTANCE_ERRORS,
    MAX_RHAT,
    MIN_ESS,
    PROMISE_Z,
    distance_cell,
)
from numpyro_sgrld.core.metrics.constant import DENSE_MAX_DIM

__all__ = ["COMPARISON_COLUMNS", "PER_PARAMETER_COLUMNS", "step_units", "write_tables"]


#: The kernels whose own metric adapts as they run: their step multiplies that metric. With
#: ``step_size=None`` it runs in the coordinates learnt in warm-up (dense up to
#: ``DENSE_MAX_DIM`` coordinates; above, and for BNPSGLD, on its own).
_ADAPTIVE_METRICS = {"PSGLD": "RMSprop", "PSGLD+Γ": "RMSprop", "MongeSGLD": "Monge",
                     "MongeSGLD+Γ": "Monge", "ShampooSGLD": "Shampoo", "WenzelSGLD": "Wenzel",
                     "BNPSGLD": "BNP"}
#: The kernels whose step is a time step of underdamped Langevin dynamics.
_TIME_STEPS = ("BAOAB", "SGNHT", "BADODAB")


def step_units(name, adapted, dim=None):
    """What the ``step size`` of the row ``name`` measures, in a few words (the
    ``step units`` column, explained in :data:`COMPARISON_COLUMNS`): the quantity (``h``, a
    Langevin step; ``η``, SGHMC's learning rate; ``time h``; ``ε``, a leapfrog step) and its
    coordinates (``whitened``: those of the preconditioner learnt in warm-up; ``raw``: the
    model's unconstrained ones), ``× <metric>`` where it multiplies the kernel's own adaptive
    metric. ``adapted``: whether warm-up chose the step (``step_size=None``); ``dim``: the
    model's number of unconstrained coordinates (an adaptive metric runs in the learnt
    coordinates only up to ``DENSE_MAX_DIM`` of them)."""
    if name.startswith("NUTS"):
        return "ε, NUTS leapfrog (adapted diagonal mass)"
    if name == "MALA":
        return "ε, raw (Langevin h = ε²/2)"
    if name == "BayesByBackprop":
        return "—"
    if name == "ConstantSGD":
        return "h (learning rate), raw"
    quantity = "η" if "SGHMC" in name else "time h" if name in _TIME_STEPS else "h"
    if name.startswith("Cyclical"):
        quantity = f"mean {quantity}"
    metric = _ADAPTIVE_METRICS.get(name)
    whitened = adapted and (metric is None or (
        name != "BNPSGLD" and (dim is None or dim <= DENSE_MAX_DIM)))
    return (f"{quantity}{f' × {metric}' if metric else ''}, "
            f"{'whitened' if whitened else 'raw'}")


_WITHIN_NOISE = ("yes where the estimate is below 2 of its standard errors (negative values "
                 "included): no difference detected, which the report prints as 'within "
                 "noise'; no where it is above them; empty where there is no estimate")
_EMPTY = "Empty where there is no number (no finite draws, or none defined for the row)."

#: The columns of ``comparison.csv``, one row per run (its data dictionary,
#: ``comparison.columns.csv``).
COMPARISON_COLUMNS = {
    "kernel": "The run: an SG kernel (at its defaults, or with the step given by "
    "--step-size), a baseline (MALA, BayesByBackprop, ConstantSGD), or 'NUTS (reference)': "
    "NUTS on the full data, the reference of every error in the file.",
    "step size": "The step the run used after warm-up (the chains' geometric mean; for a "
    "cyclical kernel over its schedule). Its units differ between rows: see 'step units'. "
    + _EMPTY,
    "step units": "What 'step size' measures. The quantity: h, a Langevin step (θ moves by "
    "h·D·∇log p plus noise of variance 2h·D); η, SGHMC's learning rate; time h, a time step "
    "of underdamped Langevin dynamics (BAOAB, SGNHT, BADODAB); ε, a leapfrog step of "
    "NumPyro's HMC or NUTS (MALA's Langevin step is h = ε²/2); 'mean', the geometric mean of "
    "a cyclical schedule. The coordinates: 'whitened', those of the preconditioner learnt in "
    "warm-up (dense up to 100 coordinates, diagonal above), where the posterior has about "
    "unit scale, so that whitened steps of one quantity are comparable; 'raw', the model's "
    "unconstrained coordinates, where a step's size depends on the posterior's scale. "
    "'× RMSprop' (or × Monge, × Shampoo, × Wenzel, × BNP): the step multiplies the kernel's "
    "own adaptive metric, whose scale is its own, so it is comparable with no other row. "
    "'—': no step recorded (variational inference has none; the reference's draws carry "
    "none).",
    "max abs mean err/sd": "The largest |mean − reference mean| / reference sd over the "
    "scalar parameters, in reference posterior sds. " + _EMPTY + " (On the reference row "
    "it is zero by construction.)",
    "± se": "One Monte Carlo standard error of 'max abs mean err/sd' (at that parameter; "
    "the run's and the reference's ESS-based errors combined).",
    "worst sd ratio": "Of the parameters' sd ratios (the run's sd over the reference's), "
    "the one farthest from 1. " + _EMPTY,
    "± se (sd)": "One Monte Carlo standard error of 'worst sd ratio'.",
    "outside promise beyond noise": f"k/d: of the d scalar parameters, how many miss the "
    f"accuracy promise (|mean error| ≤ {ACCURATE_MEAN} sd, sd ratio in [{ACCURATE_SD[0]}, "
    f"{ACCURATE_SD[1]}]) by more than {PROMISE_Z:g} Monte Carlo standard errors. 0/d wherever "
    "'accurate' is yes; 'accurate' NO with 0/d: the point estimate misses the promise by less "
    "than the run's noise can resolve. Whether a parameter differs from the reference at "
    "all, however little, is per_parameter.csv's 'resolved'. '—' on the reference row and "
    "without finite draws.",
    "mean W1/sd": "The Wasserstein-1 distance between each parameter's marginal and the "
    "reference's, in reference sds, averaged over the parameters. " + _EMPTY,
    "energy dist": "The energy distance between the run's pooled draws (at most 2,000, "
    "evenly spaced) and the reference's; on the reference row, between the two halves of its "
    "own chains (how far apart two exact samples of this size are). An unbiased estimate: "
    "where the laws agree it is negative about half the time, so a negative value means no "
    "difference detected, not an error. " + _EMPTY,
    "± se (energy)": "The energy distance's Monte Carlo standard error (a delete-a-block "
    "jackknife over 20 blocks of consecutive draws).",
    "energy within noise": "'energy dist' within its noise: " + _WITHIN_NOISE + ".",
    "KSD²": "The squared IMQ kernel Stein discrepancy of at most 1,000 of the run's draws, "
    "from the model's full-data score, in the reference's standardised coordinates; it needs "
    "no reference. An unbiased U-statistic: 0 in expectation for exact independent draws, so "
    "for them it is negative about half the time (a negative value means no difference "
    "detected); positive for draws from another law (autocorrelated draws read a little above "
    "0). " + _EMPTY,
    "± se (KSD²)": "The squared KSD's Monte Carlo standard error (the same jackknife).",
    "KSD² within noise": "'KSD²' within its noise: " + _WITHIN_NOISE + ".",
    "min ESS": "The smallest bulk effective sample size over the parameters (ArviZ, "
    "rank-normalised). " + _EMPTY,
    "max R-hat": "The largest split R-hat over the parameters (ArviZ). " + _EMPTY,
    "equipartition T": "The run's own check of its spread, needing no reference: the mean "
    "over coordinates of E[(θ − m)·∂U/∂θ] from the steps' minibatch gradients; 1 for chains "
    "that sample the posterior, about the sd ratio squared for chains too wide or too narrow "
    "(docs/diagnostics.md). Empty for a run without the check (NUTS, the baselines).",
    "converged": f"yes, or 'NO: ...' with what is off: a split R-hat above {MAX_RHAT} or a "
    f"bulk ESS below {MIN_ESS} (that row's errors are then mixing error, not bias), or no "
    "finite draws.",
    "accurate": f"yes when every parameter's |mean error| ≤ {ACCURATE_MEAN} sd and every sd "
    f"ratio is in [{ACCURATE_SD[0]}, {ACCURATE_SD[1]}] (the point estimates, the promise); "
    "else 'NO: ...' with what is off; '—' on the reference row.",
    "diverging": "The draws marked diverging: for an SG kernel, thinning windows in which a "
    "step was rejected (a potential, gradient or state that was not finite); for MALA and "
    "NUTS, NumPyro's divergent transitions.",
    "seconds": "The run's wall time in seconds, compilation and warm-up included (the "
    "reference's: when it was computed, where it was read from the cache).",
}

#: The columns of ``per_parameter.csv``, one row per run and scalar parameter (its data
#: dictionary, ``per_parameter.columns.csv``;
#: :func:`~numpyro_sgrld.analysis.diagnostics.compare_to_reference`).
PER_PARAMETER_COLUMNS = {
    "kernel": "The run, as in comparison.csv.",
    "parameter": "The scalar parameter: site[index] in the model's constrained coordinates.",
    "mean": "The mean of the run's draws (all chains pooled).",
    "sd": "The sd of the run's draws.",
    "ref_mean": "The reference's (NUTS on the full data) mean.",
    "ref_sd": "The reference's sd.",
    "mcse_mean": "The Monte Carlo standard error of 'mean' (ArviZ, ESS-based).",
    "mcse_sd": "The Monte Carlo standard error of 'sd'.",
    "ref_mcse_mean": "The Monte Carlo standard error of 'ref_mean'.",
    "ref_mcse_sd": "The Monte Carlo standard error of 'ref_sd'.",
    "std_mean_error": "(mean − ref_mean) / ref_sd: the mean error in reference sds.",
    "std_mean_error_se": "Its standard error, √(mcse_mean² + ref_mcse_mean²) / ref_sd.",
    "z_mean": "(mean − ref_mean) / √(mcse_mean² + ref_mcse_mean²): standard normal for an "
    "exact sampler.",
    "sd_ratio": "sd / ref_sd.",
    "z_sd": "(sd − ref_sd) / √(mcse_sd² + ref_mcse_sd²): standard normal for an exact sampler.",
    "resolved": f"True where |z_mean| or |z_sd| exceeds {PROMISE_Z:g}: the run differs from the "
    "reference at this parameter beyond its noise, however little (a long run resolves even a "
    "harmless difference, one well within the promise).",
    "outside_promise": f"True where the parameter misses the accuracy promise (|mean error| ≤ "
    f"{ACCURATE_MEAN} sd, sd ratio in [{ACCURATE_SD[0]}, {ACCURATE_SD[1]}]) by more than "
    f"{PROMISE_Z:g} of its standard errors; comparison.csv's 'outside promise beyond noise' "
    "counts them.",
    "w1": "The Wasserstein-1 distance between the run's and the reference's marginals.",
    "w1_sd": "w1 / ref_sd.",
    "ess_bulk": "The run's bulk effective sample size at this parameter (ArviZ).",
    "r_hat": "The run's split R-hat at this parameter (ArviZ); empty with fewer than 4 draws "
    "a chain.",
}


def _distance_flags(row):
    """A row's ``within noise`` flags, as :func:`distance_cell` reads its distances:
    ``{flag column: "yes" | "no" | ""}``."""
    flags = {}
    for key, flag in (("energy dist", "energy within noise"), ("KSD²", "KSD² within noise")):
        value = row.get(key, float("nan"))
        cell = distance_cell(value, row.get(DISTANCE_ERRORS[key], float("nan")))
        flags[flag] = "" if cell == "—" else "yes" if cell.startswith("within noise") else "no"
    return flags


def _csv_rows(rows):
    """The rows as ``comparison.csv`` holds them: each distance's ``within noise`` flag after
    its standard error, ``inf`` written as an empty value (as ``nan`` is)."""
    out = {}
    for name, row in rows.items():
        flags = _distance_flags(row)
        new = {}
        for key, value in row.items():
            new[key] = (float("nan") if isinstance(value, float) and np.isinf(value)
                        else value)
            if key == DISTANCE_ERRORS["energy dist"]:
                new["energy within noise"] = flags["energy within noise"]
            if key == DISTANCE_ERRORS["KSD²"]:
                new["KSD² within noise"] = flags["KSD² within noise"]
        out[name] = new
    return out


def write_tables(out, rows, tables):
    """``comparison.csv`` (the table's rows) and ``per_parameter.csv`` (every run's every
    parameter, with its ``outside_promise`` flag), each with its data dictionary
    (:func:`write_columns`)."""
    import pandas as pd

    frame = pd.DataFrame.from_dict(_csv_rows(rows), orient="index")
    frame.index.name = "kernel"
    frame.to_csv(out / "comparison.csv")
    write_columns(out / "comparison.csv", ["kernel", *frame.columns], COMPARISON_COLUMNS)
    per = pd.concat({k: t.assign(outside_promise=outside_promise(t))
                     for k, t in tables.items()}, names=["kernel"])
    per = per.replace([np.inf, -np.inf], np.nan)
    per.to_csv(out / "per_parameter.csv")
    write_columns(out / "per_parameter.csv", [*per.index.names, *per.columns],
                  PER_PARAMETER_COLUMNS)
