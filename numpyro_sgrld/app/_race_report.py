"""The large problem's part of ``sgrld compare``'s report: the verdict's sentence on which
method reached the stated accuracy first and by how much (:func:`race_sentence`), and the
section with the race's settings, reference and table (:func:`race_text`;
:mod:`numpyro_sgrld.app.time_to_accuracy`)."""

import numpy as np

from numpyro_sgrld.app.time_to_accuracy import MEAN_TOL, SD_BAND
from numpyro_sgrld.presets.table import KERNELS

__all__ = ["race_sentence", "race_text", "race_row", "number"]


def race_sentence(race):
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


def race_text(race):
    if race is None:
        return []
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
        f"draws; Pareto k̂ = {number(ref.khat, '.2f')}, reliable below 0.7; importance ESS "
        f"{number(ref.ess, '.0f')}; "
        f"Monte Carlo error of its means ≤ {number(np.max(ref.mean_se / ref.sd), '.3f')} sd "
        f"and of its sds ≤ {number(100 * np.max(ref.sd_se / ref.sd), '.1f')} %); computing "
        "it took "
        f"{ref.seconds:.1f} s, and it is cached for later runs.",
        "",
        r"| method | seconds to target | reached | draws | max \|mean error\| (sd) | "
        "worst sd ratio | note |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [race_row(r) for r in race.results]
    live = {r.method: r for r in race.results}
    for method, (m, date) in (race.measured or {}).items():
        r = live.get(method)
        if r is None or (r.seconds_to_target, r.draws) != (m.seconds_to_target, m.draws):
            # on the first run the live race is the measurement
            lines.append(race_row(m._replace(
                method=f"{method} (its own run to the target, {date})")))
    return lines + ["", "![time to accuracy](time_to_accuracy.png)", "",
                    "The same numbers: `time_to_accuracy.csv` (its columns explained in "
                    "`time_to_accuracy.columns.csv`: `seconds_to_target` is empty for a method "
                    "that did not reach the target, `seconds_run` how long it ran).", ""]


def number(value, spec):
    """``value`` formatted by ``spec``, or ``"—"`` where it is not a finite number."""
    return format(value, spec) if np.isfinite(value) else "—"


def race_row(r):
    """A method's row of the race's table; ``"no draws"`` for the errors of a method that
    gave none (or too few to have a spread)."""
    secs = f"{r.seconds_to_target:.1f}" if r.reached else f"> {r.seconds_to_target:.1f}"
    if r.draws < 2:
        err = ratio = "no draws"
    else:
        err, ratio = number(r.max_mean_error, ".3f"), number(r.worst_sd_ratio, ".3f")
    return (f"| {r.method} | {secs} | {'yes' if r.reached else 'no'} | {r.draws:,} | {err} | "
            f"{ratio} | {r.note} |")
