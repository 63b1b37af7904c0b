"""The report of ``sgrld compare``: the table, the verdict paragraph and ``report.md``.

:func:`verdict_paragraph` opens the report: which SG kernel is the most accurate where the
Monte Carlo noise resolves it (else which tie, :func:`most_accurate`), which rows are not
accurate and by how much (with Monte Carlo standard errors), which did not converge, and, with
the large problem, which method reached the stated accuracy first
(:mod:`numpyro_sgrld.app.time_to_accuracy`).

The CSV files (:mod:`numpyro_sgrld.app._tables`) have their columns' meanings beside them, so
that they can be read without ``report.md``.
"""

from statistics import NormalDist

import numpy as np

from numpyro_sgrld.analysis import arviz_io as _arviz
from numpyro_sgrld.app._race_report import number, race_sentence, race_text
from numpyro_sgrld.presets.table import KERNELS
from numpyro_sgrld.verdict.judge import MAX_RHAT, MIN_ESS

__all__ = ["format_table", "distance_cell", "verdict_paragraph", "most_accurate"]

#: A row is accurate when its worst standardised mean error and every sd ratio are inside
#: these bounds (max |mean error| <= 0.15 sd, sd ratios in [0.87, 1.15]).
ACCURATE_MEAN, ACCURATE_SD = 0.15, (0.87, 1.15)
#: A parameter is outside the promise beyond noise when its error exceeds these bounds by more
#: than this many of its Monte Carlo standard errors (the threshold at which
#: :func:`~numpyro_sgrld.analysis.diagnostics.compare_to_reference` calls a difference resolved).
PROMISE_Z = 3.0
#: The level of the one-sided z-test by which the verdict names one SG kernel the most
#: accurate (:func:`most_accurate`), Bonferroni-corrected over the kernels it is compared with.
BEST_LEVEL = 0.05
#: Baselines that are not SG-MCMC kernels (:mod:`numpyro_sgrld.analysis.baselines`), run on the same
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
        lines.append(f"| {name} | {number(r['sd'], '.3f')} ± {number(r['sd_se'], '.3f')} | "
                     f"{number(r['l1_normal'], '.3f')} | {number(r['l1_predicted'], '.3f')} |")
    return lines + ["", "![gamma](gamma.png)", ""]


def _error(row):
    """How far a row is off, with its Monte Carlo standard error: the larger of its worst mean
    error and its worst sd ratio's distance from 1 (both in reference sds), and the standard
    error of the larger; ``(inf, nan)`` for a row without finite numbers."""
    mean, ratio = row["max abs mean err/sd"], abs(row["worst sd ratio"] - 1)
    if not np.isfinite([mean, ratio]).all():
        return float("inf"), float("nan")
    return (float(mean), float(row["± se"])) if mean >= ratio else (
        float(ratio), float(row["± se (sd)"]))


def most_accurate(rows, level=BEST_LEVEL):
    r"""``(best, tied, z)``: which of ``rows`` (``{name: row}``) has the smallest error
    (:func:`_error`), and the rows that the Monte Carlo noise does not resolve from it.

    A row is resolved as less accurate than ``best`` when the difference of their errors
    exceeds ``z`` of its standard errors, the two rows' combined,
    :math:`(e_k - e_{best}) / \sqrt{se_{best}^2 + se_k^2} > z`: a one-sided z-test at ``level``,
    Bonferroni-corrected over the other rows, :math:`z = \Phi^{-1}(1 - level / (n - 1))`
    for ``n`` rows with finite errors. ``tied`` is ``best`` and every row not resolved from it
    (a row whose error has no finite standard error is never resolved), ordered by error;
    ``best`` is the most accurate row only where ``tied`` holds it alone. Rows without finite
    numbers take no part; ``(None, [], nan)`` where none has them."""
    errors = {k: _error(r) for k, r in rows.items()}
    finite = sorted((k for k in errors if np.isfinite(errors[k][0])),
                    key=lambda k: errors[k][0])
    if not finite:
        return None, [], float("nan")
    best = finite[0]
    if len(finite) == 1:
        return best, [best], float("nan")
    z = NormalDist().inv_cdf(1 - level / (len(finite) - 1))
    e0, se0 = errors[best]

    def resolved(k):
        e, se = errors[k]
        spread = float(np.hypot(se0, se))
        if not np.isfinite(spread):
            return False
        return e - e0 > z * spread

    return best, [best] + [k for k in finite[1:] if not resolved(k)], z


def _off_words(name, row):
    """How a row that is not accurate is off, in words."""
    pct = 100 * (row["worst sd ratio"] - 1)
    if not np.isfinite([pct, row["max abs mean err/sd"]]).all():
        return f"{name} (no finite draws)"
    within = (", within the noise of the promise: no parameter outside it by more than "
              f"{PROMISE_Z:g} standard errors"
              if str(row.get("outside promise beyond noise", "")).startswith("0/") else "")
    return (f"{name} (sds {'too wide' if pct > 0 else 'too narrow'} by up to "
            f"{abs(pct):.0f} ± {100 * row['± se (sd)']:.0f} %, worst mean off "
            f"by {row['max abs mean err/sd']:.2f} ± {row['± se']:.2f} sd{within})")


def _best_sentence(sg, name):
    """The sentences naming the most accurate of the SG rows ``sg`` on the problem called
    ``name`` where the Monte Carlo noise resolves it, else the kernels that tie
    (:func:`most_accurate`), with the rule; none where no row has finite numbers."""
    best, tied, z = most_accurate(sg)
    if best is None:
        return []
    b = sg[best]
    own = (f"its worst parameter mean is off by {b['max abs mean err/sd']:.3f} ± "
           f"{b['± se']:.3f} posterior sd and its sd ratio farthest from 1 is "
           f"{b['worst sd ratio']:.3f} ± {b['± se (sd)']:.3f} (NUTS on the full data is the "
           "reference; ± one Monte Carlo standard error)")
    if len(tied) == 1 and not np.isfinite(z):
        return [f"On {name} the one SG kernel with finite draws is **{best}**: {own}."]
    others = sum(np.isfinite(_error(r)[0]) for r in sg.values()) - 1
    rule = (f"one SG kernel is named the most accurate only where its error is below every "
            f"other's by more than {z:.2f} standard errors of the difference: a one-sided "
            f"z-test at {100 * BEST_LEVEL:g} %, Bonferroni-corrected over {others} "
            f"comparison{'s' if others > 1 else ''}; a row's error is the larger of its worst "
            "mean error and its worst sd ratio's distance from 1")
    if len(tied) == 1:
        return [f"On {name} the most accurate SG kernel is **{best}**: {own}. Its error is "
                f"below every other SG kernel's beyond the Monte Carlo noise ({rule})."]
    group = [f"**{k}** ({_error(sg[k])[0]:.3f} ± {_error(sg[k])[1]:.3f} posterior sd)"
             for k in tied]
    listed = ", ".join(group[:-1]) + " and " + group[-1]
    return [f"On {name} no SG kernel is resolved as the most accurate: {listed} tie within "
            f"their Monte Carlo noise (± one standard error; NUTS on the full data is the "
            f"reference; {rule})."]


def verdict_paragraph(rows, race=None, name="German credit"):
    """The report's opening paragraph: the most accurate SG kernel, the accurate and the
    biased rows with their errors and Monte Carlo errors, the rows that did not converge, and,
    with ``race`` (:class:`~numpyro_sgrld.app.time_to_accuracy.LargeRace`), which method reached
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
        text.append(race_sentence(race))
    return " ".join(text)


def write_report(out, problem, rows, curves, gamma, settings, race=None):
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
        + f"); step sizes {steps} (the chains' geometric mean; in the units the table's "
        f"*step units* gives); seed {settings['seed']}. "
        f"Reference: NUTS on the full data, 4 chains x {settings['reference_samples']} draws"
        + (" (read from the cache; its time is the time it took when computed)."
           if settings.get("ref_cached") else "."),
        "",
        "How to read the table. Errors are in reference posterior standard deviations, per "
        "scalar parameter: the worst standardised mean error and the sd ratio farthest from 1, "
        "each ± its Monte Carlo standard error (the draws' and the reference's, ESS-based). "
        f"*accurate* is yes when every mean is within {ACCURATE_MEAN} sd and every sd ratio "
        f"within [{ACCURATE_SD[0]}, {ACCURATE_SD[1]}] (the promise, read off the point "
        "estimates). *outside promise beyond noise* counts the parameters that miss that "
        f"promise by more than {PROMISE_Z:g} of their Monte Carlo standard errors: 0 wherever "
        "*accurate* is yes; where *accurate* is NO and it is 0, the miss is within the run's "
        "noise. (A difference from the reference that the noise resolves but that is within "
        "the promise is not counted: `per_parameter.csv`'s `resolved` marks those.) "
        "*step size* is the step after warm-up; *step units* says what it measures, which "
        "differs between rows: h a Langevin step, η SGHMC's learning rate, time h a time step "
        "of underdamped dynamics, ε a leapfrog step (MALA's Langevin step is ε²/2); "
        "*whitened* in the coordinates of the preconditioner learnt in warm-up, where the "
        "posterior has about unit scale (steps of one kind comparable across rows), *raw* in "
        "the model's unconstrained coordinates, *× RMSprop* (× Monge, ...) multiplying the "
        "kernel's own adaptive metric (comparable with no other row); the meaning of every "
        "column of the table is in `comparison.columns.csv`. "
        f"*converged* is NO when the split R-hat exceeds {MAX_RHAT} or the "
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
        "time, compilation included. The same numbers: `comparison.csv` (negative distances "
        "as estimated, with a `within noise` flag each); per parameter, with z-scores: "
        "`per_parameter.csv`; each CSV file's columns are explained beside it, in "
        "`comparison.columns.csv` and `per_parameter.columns.csv`.",
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
    text += race_text(race)
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
