"""The report of ``sgrld compare``: the table, the verdict paragraph and ``report.md``.

:func:`verdict_paragraph` opens the report: which kernel is most accurate, which are not and
by how much (with Monte Carlo standard errors), which did not converge, and, with the large
problem, which method reached the stated accuracy first (:mod:`numpyro_sgrld.time_to_accuracy`).
"""

import numpy as np

from numpyro_sgrld.analysis import _arviz
from numpyro_sgrld.host.kernels import KERNELS
from numpyro_sgrld.host.verdict import MAX_RHAT, MIN_ESS

__all__ = ["format_table", "distance_cell", "verdict_paragraph"]

#: A row is accurate when its worst standardised mean error and every sd ratio are inside
#: these bounds (max |mean error| <= 0.15 sd, sd ratios in [0.87, 1.15]).
ACCURATE_MEAN, ACCURATE_SD = 0.15, (0.87, 1.15)
#: Baselines that are not SG-MCMC kernels (:mod:`numpyro_sgrld.baselines`), run on the same
#: model and reported like the kernels: MALA (the Metropolis-adjusted Langevin algorithm) on
#: the full data, Bayes by Backprop (mean-field VI), constant SGD (Mandt et al. 2017).
BASELINES = ("MALA", "BayesByBackprop", "ConstantSGD")
#: Other names accepted for a baseline where kernels are named (``--kernels LMC``).
BASELINE_ALIASES = {"LMC": "MALA"}
#: Columns of distance estimates that can come out negative through Monte Carlo noise, and
#: the columns of their Monte Carlo errors: the table prints each pair as one cell
#: (:func:`distance_cell`).
DISTANCE_ERRORS = {"energy dist": "± se (energy)", "KSD²": "± se (KSD²)"}


def equipartition_reading(idata):
    """The chains' mean equipartition reading, from a run's ``equipartition`` group
    (``nan`` for a kernel without one: docs/diagnostics.md)."""
    if "equipartition" not in _arviz.group_names(idata):
        return float("nan")
    return float(np.mean(np.asarray(_arviz.dataset(idata, "equipartition")["temperature"])))

def _write_tables(out, rows, tables):
    import pandas as pd

    pd.DataFrame.from_dict(rows, orient="index").to_csv(out / "comparison.csv")
    pd.concat(tables, names=["kernel"]).to_csv(out / "per_parameter.csv")


def _fmt(v):
    if isinstance(v, float):
        if not np.isfinite(v):
            return "—"
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def distance_cell(value, se):
    """A distance estimate as printed: ``"value ± se"``; ``"within noise (± se)"`` where it is
    below two Monte Carlo standard errors (negative ones included: an unbiased estimate of a
    distance that is zero comes out negative half the time); ``"—"`` where there is none."""
    if not np.isfinite(value):
        return "—"
    if not np.isfinite(se):
        return "within noise" if value <= 0 else _fmt(float(value))
    if value < 2 * se or value <= 0:
        return f"within noise (± {se:.2g})"
    return f"{_fmt(float(value))} ± {se:.2g}"


def _cells(row):
    """A row's printed cells, keyed by column: each distance and its error in one cell."""
    errors = set(DISTANCE_ERRORS.values())
    return {key: (distance_cell(v, row.get(DISTANCE_ERRORS[key], float("nan")))
                  if key in DISTANCE_ERRORS else _fmt(v))
            for key, v in row.items() if key not in errors}


def format_table(rows, markdown=False):
    """The summary rows as a plain-text (or Markdown) table: no ``inf`` or ``nan`` (``"—"``
    where there is no number), distances as :func:`distance_cell` prints them."""
    printed = {name: _cells(row) for name, row in rows.items()}
    headers = ["kernel", *next(iter(printed.values()))]
    cells = [[name, *row.values()] for name, row in printed.items()]
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells])
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = lambda items: "  ".join(s.rjust(w) for s, w in zip(items, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(c) for c in cells])


def _gamma_text(gamma):
    if not gamma:
        return []
    lines = [
        "## The Γ bias, visible and removed",
        "",
        "pSGLD (decay 0.9, eps 1, h = 1e-3, 2000 vectorized chains) on Rensmeyer & Niggemann's "
        "1-D target θ ~ N(0, 1). Dropping Γ, its small-step law is ∝ φ(θ)(1 + |θ|) (sd 1.20, "
        "red); `correction=\"exact\"` restores N(0, 1) (dashed). sd ± its Monte Carlo "
        "standard error; L1 distances between the histogram (bin width 0.1) and each density.",
        "",
        "| kernel | sd (target 1) | L1 to N(0, 1) | L1 to φ(θ)(1 + \\|θ\\|) |",
        "|---|---|---|---|",
    ]
    for name, r in gamma.items():
        lines.append(f"| {name} | {_number(r['sd'], '.3f')} ± {_number(r['sd_se'], '.3f')} | "
                     f"{_number(r['l1_normal'], '.3f')} | {_number(r['l1_predicted'], '.3f')} |")
    return lines + ["", "![gamma](gamma.png)", ""]


def _score(row):
    """How far a row is off: the larger of its worst mean error and its worst sd ratio's
    distance from 1 (both in reference sds); ``inf`` for a row without finite numbers."""
    score = max(row["max abs mean err/sd"], abs(row["worst sd ratio"] - 1))
    return score if np.isfinite(score) else float("inf")


def _off_words(name, row):
    """How a row that is not accurate is off, in words."""
    pct = 100 * (row["worst sd ratio"] - 1)
    if not np.isfinite([pct, row["max abs mean err/sd"]]).all():
        return f"{name} (no finite draws)"
    return (f"{name} (sds {'too wide' if pct > 0 else 'too narrow'} by up to "
            f"{abs(pct):.0f} ± {100 * row['± se (sd)']:.0f} %, worst mean off "
            f"by {row['max abs mean err/sd']:.2f} ± {row['± se']:.2f} sd)")


def _best_sentence(sg, name):
    """The sentence naming the most accurate of the SG rows ``sg`` on the problem called
    ``name`` (none where no row has finite numbers)."""
    if not any(np.isfinite(_score(r)) for r in sg.values()):
        return []
    best = min(sg, key=lambda k: _score(sg[k]))
    b = sg[best]
    return [f"On {name} the most accurate SG kernel is **{best}**: its worst parameter "
            f"mean is off by {b['max abs mean err/sd']:.3f} ± {b['± se']:.3f} posterior sd and "
            f"its sd ratio farthest from 1 is {b['worst sd ratio']:.3f} ± {b['± se (sd)']:.3f} "
            "(NUTS on the full data is the reference; ± one Monte Carlo standard error)."]


def verdict_paragraph(rows, race=None, name="German credit"):
    """The report's opening paragraph: the most accurate SG kernel, the accurate and the
    biased rows with their errors and Monte Carlo errors, the rows that did not converge, and,
    with ``race`` (:class:`~numpyro_sgrld.time_to_accuracy.LargeRace`), which method reached
    the stated accuracy first on the large problem and by how much. ``name``: what the
    report calls the problem the rows are from."""
    sg = {k: r for k, r in rows.items() if k in KERNELS}
    text = []
    if sg:
        text += _best_sentence(sg, name)
        good = [k for k, r in rows.items() if r.get("accurate") == "yes"]
        bad = [k for k, r in rows.items() if str(r.get("accurate", "")).startswith("NO")]
        if good:
            text.append(
                f"{len(good)} of {len(rows) - 1} rows are accurate (every mean within "
                f"{ACCURATE_MEAN} sd, every sd within {ACCURATE_SD[0]}–{ACCURATE_SD[1]} times "
                f"the reference's): {', '.join(good)}.")
        if bad:
            text.append("**Not accurate**: " + "; ".join(_off_words(k, rows[k]) for k in bad)
                        + ".")
        ratios = [r["worst sd ratio"] for r in sg.values() if np.isfinite(r["worst sd ratio"])]
        wide = all(r["worst sd ratio"] - 1 > 2 * r["± se (sd)"] for r in sg.values())
        if ratios and wide:  # every SG row's sd beyond 2 standard errors above the reference's
            text.append(
                "Every SG kernel's sds are somewhat too wide (worst ratio "
                + (f"{min(ratios):.2f}–{max(ratios):.2f}" if len(ratios) > 1
                   else f"{ratios[0]:.2f}")
                + "): that is the step's own bias, which warm-up sets on purpose "
                "(the default `target_bias=0.1` inflates the variance by about 10 %, the sd by "
                "about 5 %); a smaller `target_bias` is more exact and mixes more slowly.")
        stuck = [k for k, r in rows.items() if str(r.get("converged", "yes")) != "yes"]
        if stuck:
            text.append("**Did not converge** (their errors are mixing error, not bias; run "
                        "longer): " + ", ".join(f"{k} ({rows[k]['converged'][4:]})"
                                                for k in stuck) + ".")
        else:
            text.append(f"Every run converged (split R-hat ≤ {MAX_RHAT}, bulk ESS ≥ "
                        f"{MIN_ESS}).")
    if race is not None:
        text.append(_race_sentence(race))
    return " ".join(text)


def _race_sentence(race):
    from numpyro_sgrld.app.time_to_accuracy import MEAN_TOL, SD_BAND

    results = race.results
    sg = [r for r in results if r.method in KERNELS]
    done = [r for r in sg if r.reached]
    n = race.setting.num_data
    head = (f"On the large problem (logistic regression, N = {n:,}), the stated accuracy is "
            f"every mean within {MEAN_TOL} sd and every sd within {SD_BAND[0]}–{SD_BAND[1]} "
            "times the reference's. ")
    if not done:
        return head + "No SG kernel reached it within its time cap."
    fast = min(done, key=lambda r: r.seconds_to_target)
    first = min((r for r in results if r.reached), key=lambda r: r.seconds_to_target)
    if first is fast:
        words = [f"**{fast.method}** reached it first, in {fast.seconds_to_target:.0f} s "
                 "(compilation and warm-up included)."]
    else:
        words = [f"{first.method} reached it first, in {first.seconds_to_target:.0f} s; the "
                 f"fastest SG kernel, **{fast.method}**, took {fast.seconds_to_target:.0f} s "
                 "(compilation and warm-up included)."]
    measured = race.measured or {}
    for r in results:
        if r.method in measured:
            words.append(_measured_words(r.method, *measured[r.method], fast))
        elif r.method in ("NUTS", "HMCECS", "MALA"):
            if r.reached:
                ratio = r.seconds_to_target / fast.seconds_to_target
                words.append(f"{r.method} reached it in {r.seconds_to_target:.0f} s "
                              f"({ratio:.1f}× {fast.method}'s time).")
            else:
                ratio = r.seconds_to_target / fast.seconds_to_target
                faster = (f"more than {ratio:.1f}× faster" if ratio >= 1.5 else "faster")
                words.append(f"{r.method} had not reached it when stopped after "
                             f"{r.seconds_to_target:.0f} s, so {fast.method} is {faster}.")
    return head + " ".join(words)


def _measured_words(method, m, date, fast):
    """The sentence for an exact method's own time to the target (run once uncapped and
    cached, :mod:`numpyro_sgrld.app._race_cache`) against the fastest SG kernel's."""
    ratio = m.seconds_to_target / fast.seconds_to_target
    when = f"measured on this machine on {date}, cached"
    if m.reached:
        return (f"{method} reached it in {m.seconds_to_target:.0f} s ({when}): "
                f"**{fast.method} was {ratio:.1f}× faster than {method}**.")
    return (f"{method} had not reached it after {m.seconds_to_target:.0f} s ({when}): "
            f"{fast.method} was more than {ratio:.1f}× faster.")


def _race_text(race):
    if race is None:
        return []
    from numpyro_sgrld.app.time_to_accuracy import MEAN_TOL, SD_BAND

    ref, s = race.reference, race.setting
    lines = [
        "## Where SG-MCMC wins: time to accuracy on a large data set",
        "",
        f"Bayesian logistic regression, w ~ N(0, I), on {s.num_data:,} synthetic rows with "
        f"{s.num_features} standard normal features. A method has reached the stated accuracy "
        f"when, over all its draws so far, every coordinate's mean is within {MEAN_TOL} "
        f"reference sd of the reference mean and every sd ratio is within "
        f"[{SD_BAND[0]}, {SD_BAND[1]}]. Its time is the wall time of its runs until the first "
        "check that passed (checks after every chunk, off the clock): tracing, compilation, "
        "initialisation, warm-up and sampling count. Every method runs "
        f"{s.chains} chain(s) (NumPyro's default for `MCMC`). The SG kernels run at their "
        f"defaults (minibatch {s.batch}, {s.sg_warmup} warm-up steps, chunks of {s.sg_chunk} "
        f"steps, every 10th kept), each for at most {race.sg_cap:.0f} s; NUTS (`NUTS("
        "full_batch(model))`), MALA (`HMC` with one leapfrog step, full data) and NumPyro's "
        f"HMCECS (NUTS within Gibbs on subsamples of {s.hmcecs_subsample}, 100 blocks, Taylor "
        "proxy around a MAP found by SVI, as in NumPyro's HMCECS example; the MAP search "
        f"counts) run {s.exact_warmup} warm-up iterations. NUTS and HMCECS run until the "
        f"target or {race.speedup:.0f}× the fastest SG kernel's time ({race.exact_cap:.0f} s), "
        f"which is what it takes to tell whether that kernel is {race.speedup:.0f}× faster; "
        "on the first run on a machine each runs instead until the target, and that time is "
        "cached with the reference: the speed-ups in the verdict are those measured times; "
        f"MALA for at most {race.mala_cap:.0f} s (whether it is faster at all). Each method "
        "runs in a process of its own, one after another (each process starts, imports and "
        "builds its data beside the reference's computation, before the first race); every "
        "`MCMC` gets the data as arguments (`jit_model_args=True`).",
        "",
        f"Reference: importance sampling from the Laplace approximation ({ref.num_draws} "
        f"draws; Pareto k̂ = {_number(ref.khat, '.2f')}, reliable below 0.7; importance ESS "
        f"{_number(ref.ess, '.0f')}; "
        f"Monte Carlo error of its means ≤ {_number(np.max(ref.mean_se / ref.sd), '.3f')} sd "
        f"and of its sds ≤ {_number(100 * np.max(ref.sd_se / ref.sd), '.1f')} %); computing "
        "it took "
        f"{ref.seconds:.1f} s, and it is cached for later runs.",
        "",
        r"| method | seconds to target | reached | draws | max \|mean error\| (sd) | "
        "worst sd ratio | note |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [_race_row(r) for r in race.results]
    live = {r.method: r for r in race.results}
    for method, (m, date) in (race.measured or {}).items():
        r = live.get(method)
        if r is None or (r.seconds_to_target, r.draws) != (m.seconds_to_target, m.draws):
            # on the first run the live race is the measurement
            lines.append(_race_row(m._replace(
                method=f"{method} (its own run to the target, {date})")))
    return lines + ["", "![time to accuracy](time_to_accuracy.png)", "",
                    "The same numbers: `time_to_accuracy.csv`.", ""]


def _number(value, spec):
    """``value`` formatted by ``spec``, or ``"—"`` where it is not a finite number."""
    return format(value, spec) if np.isfinite(value) else "—"


def _race_row(r):
    """A method's row of the race's table; ``"no draws"`` for the errors of a method that
    gave none (or too few to have a spread)."""
    secs = f"{r.seconds_to_target:.1f}" if r.reached else f"> {r.seconds_to_target:.1f}"
    if r.draws < 2:
        err = ratio = "no draws"
    else:
        err, ratio = _number(r.max_mean_error, ".3f"), _number(r.worst_sd_ratio, ".3f")
    return (f"| {r.method} | {secs} | {'yes' if r.reached else 'no'} | {r.draws:,} | {err} | "
            f"{ratio} | {r.note} |")


def _write_report(out, problem, rows, curves, gamma, settings, race=None):
    steps = ", ".join(
        f"{k} {settings['steps'][k]:.3g}{' (adapted)' if k in settings['adapted'] else ''}"
        for k in settings["kernels"] if np.isfinite(settings["steps"][k])
    )
    baselines = [k for k in settings["kernels"] if k in BASELINES]
    text = [
        "# SG-MCMC against exact methods",
        "",
        "**Verdict.** " + verdict_paragraph(rows, race, problem.name),
        "",
        f"## The bias of each kernel: {problem.name}",
        "",
        problem.description + ".",
        "",
        f"SG kernels at their defaults (`step_size=None`: the step, the preconditioner and "
        f"control variates where they pay are chosen in warm-up): {settings['num_chains']} "
        f"vectorized chains x at least {settings['num_steps']} steps after "
        f"{settings['num_warmup']} warm-up steps, every {settings['thinning']}th kept, "
        f"continued until the smallest bulk ESS reached {settings['target_ess']} and the "
        f"largest split R-hat was at most {MAX_RHAT}, or {settings['max_steps']} steps (steps "
        "per chain: " + ", ".join(f"{k} {v}" for k, v in settings["taken"].items())
        + f"); step sizes {steps} (the chains' geometric mean); seed {settings['seed']}. "
        f"Reference: NUTS on the full data, 4 chains x {settings['reference_samples']} draws"
        + (" (read from the cache; its time is the time it took when computed)."
           if settings.get("ref_cached") else "."),
        "",
        "How to read the table. Errors are in reference posterior standard deviations, per "
        "scalar parameter: the worst standardised mean error and the sd ratio farthest from 1, "
        "each ± its Monte Carlo standard error (the draws' and the reference's, ESS-based). "
        f"*accurate* is yes when every mean is within {ACCURATE_MEAN} sd and every sd ratio "
        f"within [{ACCURATE_SD[0]}, {ACCURATE_SD[1]}]. *off beyond noise* counts the "
        "parameters whose mean or sd differs from the reference by more than 3 standard "
        "errors: with long runs even a harmless difference is resolved, so read it with the "
        f"errors' size. *converged* is NO when the split R-hat exceeds {MAX_RHAT} or the "
        f"smallest bulk ESS is below {MIN_ESS}: that row's errors are mixing error, not bias. "
        "*equipartition T* is the run's own check of its spread, needing no reference: the "
        "mean over coordinates of E[(θ - m)·∂U/∂θ], estimated from the minibatch gradients the "
        "steps computed, 1 for a chain that samples the posterior, about the sd ratio squared "
        "for one that is too wide or too narrow (docs/diagnostics.md). "
        "The energy distance is between pooled draws and the reference (the NUTS row: between "
        "two halves of its own chains, the distance two exact samples of this size are apart), "
        "± its Monte Carlo standard error (a jackknife over blocks of consecutive draws); "
        "*within noise* where it is below two of them (its estimate is unbiased, so where the "
        "laws agree it comes out negative half the time). "
        "KSD² is the squared IMQ kernel Stein discrepancy from the model's full-data score at "
        "1,000 of the run's draws, which needs no reference: an unbiased U-statistic, 0 in "
        "expectation for exact independent draws (the NUTS row reads its own draws) and "
        "positive for draws from another law (autocorrelated draws read a little above 0), "
        "± its jackknife error, *within noise* below two of them. *seconds* is each run's wall "
        "time, compilation included. Per-parameter numbers, with z-scores: `per_parameter.csv`.",
        "",
        format_table(rows, markdown=True),
        "",
        *_baseline_text(baselines),
        *_wenzel_note(settings),
        "",
        "![errors of every parameter](errors.png)",
        "",
        "Marginal densities of the 8 parameters farthest off (over all rows), the reference "
        "shaded:",
        "",
        "![marginals](marginals.png)",
        "",
    ]
    text += _race_text(race)
    text += _gamma_text(gamma)
    if curves:
        text += [
            "## Bias against the step size",
            "",
            "The sd ratio averaged over the parameters, |mean sd ratio − 1|, ± 2 standard "
            "errors (the parameters' combined as if independent); each step size run until its "
            "smallest bulk ESS reached the target. "
            "A curve that falls with h is the step's bias; one that stays flat as h → 0 is a "
            "bias of the stationary law (the Γ bias) or the noise floor of the run.",
            "",
            "![bias](bias.png)",
            "",
        ]
        for name, table in curves.items():
            text += [f"{name}:", "", _frame_markdown(table), ""]
    text += ["## Traces and rank plots", "",
             "Each run's own 4 parameters farthest off (the reference: the 4 farthest off over "
             "all runs): traces by chain and rank histograms by chain (flat when the chains "
             "sample the same law).", ""]
    text += [f"![{p.stem}]({p.name})" for p in sorted(out.glob("trace_*.png"))]
    (out / "report.md").write_text("\n".join(text) + "\n")


_BASELINE_NOTES = {
    "MALA": "MALA: the Metropolis-adjusted Langevin algorithm on the full data: "
    "NumPyro's `HMC` with one leapfrog step, its step ε adapted by dual averaging to an "
    "acceptance rate of 0.574 (the Langevin step is h = ε²/2). Exact up to Monte Carlo error; "
    "each step costs a full-data gradient.",
    "BayesByBackprop": "BayesByBackprop: mean-field normal VI (`AutoNormal`, Adam 1e-2 "
    "decaying to 1e-4, minibatch ELBO) for as many SVI steps as the kernels' first run; its "
    "rows are independent "
    "draws of the fitted normal (so its ESS is the number of draws and R-hat 1): its error is "
    "the mean-field approximation's, typically sds too small where parameters correlate.",
    "ConstantSGD": "ConstantSGD: SGD iterates at Mandt, Hoffman & Blei's (2017) KL-optimal "
    "constant learning rate, started at the MAP; their stationary Gaussian approximates the "
    "posterior (sds roughly right where the gradient noise is isotropic, not in general).",
}


def _baseline_text(baselines):
    return [f"- {_BASELINE_NOTES[k]}" for k in baselines] + ([""] if baselines else [])


def _wenzel_note(settings):
    if "WenzelSGLD" not in settings["kernels"] or len(settings["latent_sites"]) != 1:
        return []
    return [
        f"- WenzelSGLD: this model has one latent site ({settings['latent_sites'][0]}), so "
        "the layer-wise scale, normalised by the smallest site's, is exactly 1 and the kernel "
        "is SGLD (its row equals SGLD's when their step sizes agree)."
    ]


def _frame_markdown(frame):
    headers = [frame.index.name or "", *frame.columns]
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    for idx, row in frame.iterrows():
        lines.append("| " + " | ".join([_fmt(float(idx)), *(_fmt(v) for v in row.values)]) + " |")
    return "\n".join(lines)
