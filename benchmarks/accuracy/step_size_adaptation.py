"""The adapted step (``step_size=None``) against a log grid of fixed steps, at a fixed budget.

For every problem and preset: one run with ``step_size=None`` (the step chosen during the
warm-up, frozen after it), then six runs with a fixed step on the half-decade grid around the
adapted one, ``h_a * 10^{-1.5, -1, -0.5, 0.5, 1, 1.5}`` (``h_a`` the chains' geometric mean),
each with the same budget: ``--warmup`` warm-up steps (with the fixed step for the grid) and
``--steps`` sampling steps, ``--chains`` vectorised chains, the same seed.

Every run is compared with the problem's reference (:func:`numpyro_sgrld.analysis.diagnostics.
compare_to_reference`): the **total error** is the larger of the largest standardised mean
error ``|mean - ref| / ref_sd`` and the largest ``|sd / ref_sd - 1|`` over the parameters,
with the Monte Carlo standard error (ArviZ's ESS-based MCSE, the reference's included) of the
entry that attains it. A run is **divergent** when a step was rejected (non-finite potential,
gradient or state) or a draw is not finite, and **unconverged** when a split R-hat exceeds
1.01 or a bulk ESS is below 100 (Vehtari et al. 2021). The verdict per cell: the adapted
total error over the best grid step's (among grid steps that are neither divergent nor
unconverged, if there is one) is at most 1.5, and the adapted run is neither divergent nor
unconverged where such a grid step exists. Where the ratio exceeds 1.5, its **z-score**
``(e_a - 1.5 e_b) / sqrt(se_a^2 + (1.5 se_b)^2)`` says whether the excess is resolved beyond
the two runs' Monte Carlo errors (z > 2) or within them. It is a rough guide, not a test: the
grid's best is the smallest of up to six noisy errors (which raises z), the runs share a seed
(and, on the network, the same test points, which the unpaired standard error ignores), and
about 45 cells are read at once.

Problems: ``linear_regression`` (conjugate, exact posterior), ``german_credit`` (NUTS
reference, cached), ``sblrc-blr`` and ``diamonds`` (posteriordb's reference moments; need
``../shared/data``), ``funnel`` (Yu et al.'s, exact marginal moments), and ``digits_bnn`` (a
64-100-10 horseshoe MLP on scikit-learn's digits): no reference posterior exists for a network,
so its "total error" is the ensemble's test negative log-likelihood (± its standard error over
the test points), and only divergence counts against a run (R-hat and ESS of network weights
say nothing about convergence).

Results go to a JSON-lines file as they come (a rerun skips the cells already there):

    python benchmarks/accuracy/step_size_adaptation.py --out docs/results/step_size_adaptation.jsonl
    python benchmarks/accuracy/step_size_adaptation.py --problems funnel --kernels SGLD PSGLD
    python benchmarks/accuracy/step_size_adaptation.py \
        --table docs/results/step_size_adaptation.jsonl
    # the cost, per step
    python benchmarks/accuracy/step_size_adaptation.py --overhead german_credit

``--replicate CELL_FILE --seeds 1 2 3`` redoes, on other seeds, each cell's adapted run and its
best grid step (the same fixed step), and reports the mean total errors over the seeds with
standard errors from their spread (independent replicates; a single unconverged run's ESS-based
error is not to be trusted) and the ratio's z-score; a rerun adds its seeds to the earlier
records of the same cell:

    python benchmarks/accuracy/step_size_adaptation.py --problems diamonds --kernels ShampooSGLD \
        --replicate docs/results/step_size_adaptation_200k_b.jsonl --seeds 1 2 3 \
        --out replicates.jsonl

``--overhead`` measures what adaptation costs per step, side by side in one process (compiled
first, then best of 3 timed runs each, alternating, on the opt-in sampling loop so that a
repeated run does not recompile): the warm-up with ``step_size=None`` against a warm-up with a
fixed step, and sampling after the adapted warm-up (the step function behind its ``lax.cond``)
against sampling with the same step given as a float.
"""

import argparse
import json
import time
from functools import partial
from pathlib import Path

import jax
import numpy as np
from jax import random
from numpyro.infer import MCMC

from numpyro_sgrld import (
    PSGLD,
    SGHMC,
    SGLD,
    AdamSGLD,
    MongeSGLD,
    ShampooSGLD,
    WenzelSGLD,
    diagnostics,
)

GRID = (-1.5, -1.0, -0.5, 0.5, 1.0, 1.5)  # log10 factors around the adapted step
MAX_RHAT = 1.01
MIN_ESS = 100
RATIO = 1.5
#: An excess over RATIO is called resolved when its z-score exceeds this.
RESOLVED_Z = 2.0

KERNELS = {
    "SGLD": SGLD,
    "SGHMC": SGHMC,
    "PSGLD": PSGLD,
    "PSGLD+Γ": partial(PSGLD, correction="exact"),
    # the exact Γ costs d Hessian-vector products per step: for networks, the estimator
    "PSGLD+Γ(Hutchinson)": partial(PSGLD, correction="hutchinson"),
    "MongeSGLD": partial(MongeSGLD, alpha2=1.0),  # the default before "auto"
    "MongeSGLD(auto)": partial(MongeSGLD, alpha2="auto"),
    "ShampooSGLD": ShampooSGLD,
    "WenzelSGLD": WenzelSGLD,
    "AdamSGLD": AdamSGLD,
}

#: How the tables name a kernel whose key differs from the preset's default.
LABELS = {"MongeSGLD": "MongeSGLD(α²=1)", "MongeSGLD(auto)": "MongeSGLD (auto, default)"}


def _linear_regression():
    from numpyro_sgrld.models import linear_regression as lr

    X, y, _ = lr.make_data(seed=0, num_data=2000, num_features=5)
    exact = lr.exact_posterior(X, y)
    return dict(model=partial(lr.model, subsample_size=100), args=(X, y), kwargs={},
                reference={"w": {"mean": exact.mean, "sd": exact.sd}})


def _german_credit():
    from numpyro_sgrld.models import logistic_regression as lr

    from numpyro_sgrld.analysis.inference_data import reference_posterior

    X, y = lr.load_german_credit()
    ref = reference_posterior(lr.model, X, y, num_samples=5000, num_warmup=1000)
    return dict(model=partial(lr.model, subsample_size=100), args=(X, y), kwargs={},
                reference=ref)


def _sblrc():
    from numpyro_sgrld.models import sblrc_blr

    X, y, moments = sblrc_blr.load()
    return dict(model=partial(sblrc_blr.model, subsample_size=50), args=(X, y), kwargs={},
                reference=moments)


def _diamonds():
    from numpyro_sgrld.models import diamonds

    X, y, moments = diamonds.load()
    return dict(model=partial(diamonds.model, subsample_size=100), args=(X, y), kwargs={},
                reference=moments)


def _funnel():
    from numpyro_sgrld.models import funnel

    # x | v ~ N(2, softplus(v)) (a variance): sd(x)^2 = E[softplus(v)], v ~ N(0, 80)
    nodes, weights = np.polynomial.hermite_e.hermegauss(200)
    var_x = float(np.sum(weights * np.logaddexp(funnel.V_SCALE * nodes, 0.0)) / weights.sum())
    reference = {"v": {"mean": 0.0, "sd": funnel.V_SCALE}, "x": {"mean": 2.0,
                                                                 "sd": np.sqrt(var_x)}}
    return dict(model=funnel.model, args=(funnel.make_gradient_noise(),),
                kwargs={"num_data": 1}, reference=reference)


def _digits_bnn():
    from numpyro_sgrld.models.bnn import load_digits, mlp_classifier

    from numpyro_sgrld import priors
    from numpyro_sgrld.analysis.predictive import classification_metrics

    X_train, y_train, X_test, y_test = load_digits()
    model = partial(mlp_classifier, hidden=(100,), prior=priors.horseshoe("layer"),
                    subsample_size=100)

    def evaluate(mcmc):
        out = classification_metrics(model, mcmc.get_samples(), X_test, y_test)
        point = -np.log(out["probs"][np.arange(len(y_test)), np.asarray(y_test)])
        return dict(total=float(point.mean()), total_se=float(point.std() / np.sqrt(point.size)),
                    worst="test NLL", accuracy=out["accuracy"], max_rhat=float("nan"),
                    min_ess=float("nan"))

    return dict(model=model, args=(X_train, y_train), kwargs={}, evaluate=evaluate,
                converged=lambda row: True)


PROBLEMS = {
    "linear_regression": _linear_regression,
    "german_credit": _german_credit,
    "sblrc-blr": _sblrc,
    "diamonds": _diamonds,
    "funnel": _funnel,
    "digits_bnn": _digits_bnn,
}


def _summary(mcmc, problem=None):
    table = diagnostics.compare_to_reference(mcmc, problem["reference"])
    mean_err = table["std_mean_error"].abs()
    sd_err = (table["sd_ratio"] - 1.0).abs()
    m, s = mean_err.idxmax(), sd_err.idxmax()
    if mean_err[m] >= sd_err[s]:
        total, se, worst = float(mean_err[m]), float(table.loc[m, "std_mean_error_se"]), m
        worst = f"{m} (mean)"
    else:
        se_sd = np.hypot(table.loc[s, "mcse_sd"], table.loc[s, "ref_mcse_sd"])
        total, se = float(sd_err[s]), float(se_sd / table.loc[s, "ref_sd"])
        worst = f"{s} (sd)"
    return dict(
        total=total, total_se=se, worst=worst,
        max_mean_err=float(mean_err[m]), max_sd_err=float(sd_err[s]),
        max_rhat=float(np.nanmax(table["r_hat"])), min_ess=float(np.nanmin(table["ess_bulk"])),
    )


def run_one(problem, kernel_name, step_size, warmup, steps, chains, seed):
    kernel = KERNELS[kernel_name](problem["model"], step_size=step_size, **problem["kwargs"])
    thinning = max(1, steps // 2000)
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=steps, thinning=thinning,
                num_chains=chains, chain_method="vectorized", progress_bar=False)
    key = random.PRNGKey(seed)
    start = time.perf_counter()
    mcmc.warmup(key, *problem["args"])
    jax.block_until_ready(mcmc.post_warmup_state)
    t_warmup = time.perf_counter() - start
    adapted = np.asarray(mcmc.post_warmup_state.step_size, np.float64)
    rejected_in_warmup = int(np.sum(np.asarray(mcmc.post_warmup_state.num_rejected)))
    start = time.perf_counter()
    mcmc.run(mcmc.post_warmup_state.rng_key, *problem["args"])
    samples = jax.block_until_ready(mcmc.get_samples(group_by_chain=True))
    t_sampling = time.perf_counter() - start
    finite = all(bool(np.all(np.isfinite(v))) for v in jax.tree.leaves(samples))
    # rejections while sampling (warm-up's rejections are the adaptation's stability check)
    rejected = int(np.sum(np.asarray(mcmc.last_state.num_rejected))) - rejected_in_warmup
    row = dict(step_size=adapted.tolist(), rejected=rejected, finite=finite,
               rejected_in_warmup=rejected_in_warmup,
               warmup_seconds=t_warmup, sampling_seconds=t_sampling, thinning=thinning)
    evaluate = problem.get("evaluate", partial(_summary, problem=problem))
    row.update(evaluate(mcmc) if finite else dict(total=float("inf")))
    row["divergent"] = rejected > 0 or not finite
    if "converged" in problem:  # a network: R-hat and ESS of its weights mean nothing
        row["unconverged"] = not finite
    else:
        row["unconverged"] = (not finite) or row["max_rhat"] > MAX_RHAT or row["min_ess"] < MIN_ESS
    return row


def run_cell(problem_name, kernel_name, warmup, steps, chains, seed):
    problem = PROBLEMS[problem_name]()
    cell = dict(problem=problem_name, kernel=kernel_name, warmup=warmup, steps=steps,
                chains=chains, seed=seed)
    cell["adapted"] = run_one(problem, kernel_name, None, warmup, steps, chains, seed)
    centre = float(np.exp(np.mean(np.log(cell["adapted"]["step_size"]))))
    cell["grid"] = []
    for f in GRID:
        row = run_one(problem, kernel_name, centre * 10**f, warmup, steps, chains, seed)
        row["factor"] = f
        cell["grid"].append(row)
    return verdict(cell)


def check_warmup(cell):
    """The cell's adapted warm-up again with the current code: the steps it freezes at, to
    compare with the recorded ones after a change to the adaptation (a cell whose steps are the
    same needs no rerun)."""
    problem = PROBLEMS[cell["problem"]]()
    kernel = KERNELS[cell["kernel"]](problem["model"], step_size=None, **problem["kwargs"])
    mcmc = MCMC(kernel, num_warmup=cell["warmup"], num_samples=cell["steps"],
                num_chains=cell["chains"], chain_method="vectorized", progress_bar=False)
    mcmc.warmup(random.PRNGKey(cell["seed"]), *problem["args"])
    return np.asarray(mcmc.post_warmup_state.step_size, np.float64)


def run_replicates(cell, seeds):
    """The cell's adapted run and its best grid step (the same fixed step) redone on each of
    ``seeds``: independent replicates whose spread is
    the Monte Carlo error of each mean total error, without the single run's ESS-based
    estimate (which is unreliable for an unconverged chain)."""
    problem = PROBLEMS[cell["problem"]]()
    best = next(g for g in cell["grid"] if g["factor"] == cell["best_factor"])
    fixed = float(best["step_size"][0])
    rows = []
    for seed in seeds:
        adapted = run_one(problem, cell["kernel"], None, cell["warmup"], cell["steps"],
                          cell["chains"], seed)
        grid = run_one(problem, cell["kernel"], fixed, cell["warmup"], cell["steps"],
                       cell["chains"], seed)
        jax.clear_caches()
        rows.append(dict(seed=seed, adapted=adapted, grid=grid))
        print(f"  seed {seed}: adapted {_fmt_run(adapted)}, grid {_fmt_run(grid)}", flush=True)
    return dict(problem=cell["problem"], kernel=cell["kernel"], warmup=cell["warmup"],
                steps=cell["steps"], chains=cell["chains"], grid_step=fixed,
                grid_factor=cell["best_factor"], replicates=rows)


def merged_replicates(path, rep):
    """``rep`` with the replicates of every earlier record of the same cell in ``path`` (one
    per seed)."""
    same = ("problem", "kernel", "warmup", "steps", "chains", "grid_step")
    seeds = {}
    for line in path.read_text().splitlines():
        other = json.loads(line)
        if all(other.get(k) == rep.get(k) for k in same):
            seeds.update({r["seed"]: r for r in other["replicates"]})
    return dict(rep, replicates=[seeds[k] for k in sorted(seeds)])


def replicate_summary(rep):
    """Mean total error of the adapted and the grid step over the replicates, each with its
    standard error from the spread between seeds, their ratio, and the z-score of the ratio's
    excess over :data:`RATIO` (unpaired: adapted and grid runs of one seed share it, and a
    positive correlation between them makes this conservative). The original cell's runs are
    left out: its grid step is the best of six on that seed, chosen for being low."""
    a = np.asarray([r["adapted"]["total"] for r in rep["replicates"]])
    g = np.asarray([r["grid"]["total"] for r in rep["replicates"]])
    n = len(a)
    ma, mg = a.mean(), g.mean()
    sa, sg = a.std(ddof=1) / np.sqrt(n), g.std(ddof=1) / np.sqrt(n)
    z = (ma - RATIO * mg) / np.hypot(sa, RATIO * sg)
    return dict(n=n, adapted=ma, adapted_se=sa, grid=mg, grid_se=sg, ratio=ma / mg, z=z,
                adapted_unconverged=int(sum(r["adapted"]["unconverged"]
                                            for r in rep["replicates"])),
                grid_unconverged=int(sum(r["grid"]["unconverged"] for r in rep["replicates"])))


def verdict(cell):
    good = [g for g in cell["grid"] if not (g["divergent"] or g["unconverged"])]
    pool = good or cell["grid"]
    best = min(pool, key=lambda g: g["total"])
    a = cell["adapted"]
    cell["best_factor"] = best["factor"]
    cell["ratio"] = a["total"] / best["total"] if best["total"] > 0 else float("inf")
    cell["within"] = bool(cell["ratio"] <= RATIO)
    se = np.hypot(a.get("total_se", np.nan), RATIO * best.get("total_se", np.nan))
    cell["excess_z"] = float((a["total"] - RATIO * best["total"]) / se) if se > 0 else float("nan")
    cell["healthy_where_possible"] = bool(not good or not (a["divergent"] or a["unconverged"]))
    return cell


def _fmt_run(r):
    if not np.isfinite(r["total"]):
        return "not finite"
    flags = ("div. " if r["divergent"] else "") + ("unconv." if r["unconverged"] else "")
    return f"{r['total']:.3f} ± {r['total_se']:.3f}{' (' + flags.strip() + ')' if flags else ''}"


def _h(run):
    return float(np.exp(np.mean(np.log(run["step_size"]))))


def _within(c):
    """``yes``, or ``**no**`` with the excess's z-score (``within MC error`` when z <= 2)."""
    if c["within"]:
        return "yes"
    z = c["excess_z"] if "excess_z" in c else verdict(dict(c))["excess_z"]
    resolved = "" if not np.isfinite(z) else (
        f" (z = {z:.1f})" if z > RESOLVED_Z else f" (z = {z:.1f}, within MC error)")
    return "**no**" + resolved


def table(cells):
    lines = [
        "| problem | kernel | adapted h | adapted error | warm-up s (adapted / fixed) "
        "| best grid h | best grid error | ratio | ≤ 1.5 | healthy where possible |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        a = c["adapted"]
        best = next(g for g in c["grid"] if g["factor"] == c["best_factor"])
        centre = _h(a)  # the grid is around the adapted step
        fixed = np.median([g["warmup_seconds"] for g in c["grid"]])
        lines.append(
            f"| {c['problem']} | {LABELS.get(c['kernel'], c['kernel'])} "
            f"| {centre:.2e} | {_fmt_run(a)} "
            f"| {a['warmup_seconds']:.1f} / {fixed:.1f} "
            f"| {centre * 10 ** best['factor']:.2e} (×10^{best['factor']:+.1f}) | {_fmt_run(best)} "
            f"| {c['ratio']:.2f} | {_within(c)} "
            f"| {'yes' if c['healthy_where_possible'] else '**no**'} |"
        )
    return "\n".join(lines)


def _timed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def _warm(problem, m):
    m.warmup(random.PRNGKey(1), *problem["args"])
    jax.block_until_ready(m.post_warmup_state)


def _sample(problem, m, state):
    m.post_warmup_state = state
    m.run(state.rng_key, *problem["args"])
    jax.block_until_ready(m.get_samples())


def _overhead_one(problem, name, warmup, steps, chains, repeats):
    def mcmc(step):
        kernel = KERNELS[name](problem["model"], step_size=step, **problem["kwargs"])
        return MCMC(kernel, num_warmup=warmup, num_samples=steps, num_chains=chains,
                    chain_method="vectorized", progress_bar=False)

    adapted = mcmc(None)
    adapted.warmup(random.PRNGKey(0), *problem["args"])
    state = adapted.post_warmup_state
    fixed = mcmc(float(np.exp(np.mean(np.log(np.asarray(state.step_size))))))
    fixed.warmup(random.PRNGKey(0), *problem["args"])
    fixed_state = fixed.post_warmup_state
    _sample(problem, adapted, state)  # compile the sampling loops
    _sample(problem, fixed, fixed_state)
    best = dict(warm_adapted=np.inf, warm_fixed=np.inf, samp_adapted=np.inf, samp_fixed=np.inf)
    for _ in range(repeats):
        for key, t in (("warm_adapted", _timed(_warm, problem, adapted)),
                       ("warm_fixed", _timed(_warm, problem, fixed)),
                       ("samp_adapted", _timed(_sample, problem, adapted, state)),
                       ("samp_fixed", _timed(_sample, problem, fixed, fixed_state))):
            best[key] = min(best[key], t)
    return {k: v / (warmup if k.startswith("warm") else steps) for k, v in best.items()}


def overhead(problem_name, kernels, warmup=2000, steps=20000, chains=4, repeats=3):
    """Seconds per step: adapted and fixed warm-up, sampling after adaptation and with the
    same step given (see the module docstring); one dict per kernel."""
    import numpyro_sgrld

    problem = PROBLEMS[problem_name]()
    with numpyro_sgrld.fast_sampling_loop():
        return [dict(kernel=name, problem=problem_name,
                     **_overhead_one(problem, name, warmup, steps, chains, repeats))
                for name in kernels]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("step_size_adaptation.jsonl"))
    parser.add_argument("--overhead", default=None, choices=list(PROBLEMS),
                        help="measure the per-step cost of adaptation on this problem and exit")
    parser.add_argument("--table", type=Path, default=None,
                        help="print the markdown table of a results file and exit")
    parser.add_argument("--replicate", type=Path, default=None, metavar="CELL_FILE",
                        help="redo the adapted run and the best grid step of every cell of "
                        "CELL_FILE (matching --problems and --kernels) on --seeds; results to "
                        "--out")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--check-warmups", type=Path, default=None, metavar="CELL_FILE",
                        help="rerun the adapted warm-up of every cell of CELL_FILE (matching "
                        "--problems and --kernels; a replicate file's every seed) and print "
                        "whether it freezes at the recorded steps")
    args = parser.parse_args(argv)
    if args.check_warmups is not None:
        for line in args.check_warmups.read_text().splitlines():
            cell = json.loads(line)
            if cell["problem"] not in args.problems or cell["kernel"] not in args.kernels:
                continue
            runs = ([(r["seed"], r["adapted"]) for r in cell["replicates"]]
                    if "replicates" in cell else [(cell["seed"], cell["adapted"])])
            for seed, adapted in runs:
                new = check_warmup(dict(cell, seed=seed))
                old = np.asarray(adapted["step_size"], np.float64)
                print(f"{cell['problem']} {cell['kernel']} seed {seed}: "
                      f"{'same' if np.array_equal(new, old) else 'CHANGED'} "
                      f"(recorded {np.array2string(old, precision=3)}, now "
                      f"{np.array2string(new, precision=3)})", flush=True)
            jax.clear_caches()
        return
    if args.replicate is not None:
        if args.out == parser.get_default("out"):
            parser.error("--replicate writes records of its own: name their file with --out")
        for line in args.replicate.read_text().splitlines():
            cell = json.loads(line)
            if cell["problem"] not in args.problems or cell["kernel"] not in args.kernels:
                continue
            rep = run_replicates(cell, args.seeds)
            with args.out.open("a") as f:
                f.write(json.dumps(rep) + "\n")
            s = replicate_summary(merged_replicates(args.out, rep))
            print(f"{cell['problem']} {cell['kernel']}: {s['n']} seeds, adapted "
                  f"{s['adapted']:.3f} ± {s['adapted_se']:.3f}, grid {s['grid']:.3f} ± "
                  f"{s['grid_se']:.3f}, ratio {s['ratio']:.2f}, z = {s['z']:.1f}", flush=True)
        return
    if args.overhead is not None:
        print("| kernel | warm-up µs/step: adapted / fixed (ratio) | sampling µs/step: after "
              "adaptation / fixed (ratio) |\n|---|---|---|")
        for r in overhead(args.overhead, args.kernels, args.warmup, args.steps, args.chains):
            print(f"| {r['kernel']} | {1e6 * r['warm_adapted']:.1f} / {1e6 * r['warm_fixed']:.1f} "
                  f"({r['warm_adapted'] / r['warm_fixed']:.2f}) | {1e6 * r['samp_adapted']:.2f} / "
                  f"{1e6 * r['samp_fixed']:.2f} ({r['samp_adapted'] / r['samp_fixed']:.2f}) |",
                  flush=True)
        return
    if args.table is not None:
        cells = [json.loads(line) for line in args.table.read_text().splitlines() if line]
        print(table(cells))
        return
    done = set()
    if args.out.exists():
        for line in args.out.read_text().splitlines():
            c = json.loads(line)
            done.add((c["problem"], c["kernel"], c["warmup"], c["steps"], c["chains"], c["seed"]))
    for p in args.problems:
        for k in args.kernels:
            key = (p, k, args.warmup, args.steps, args.chains, args.seed)
            if key in done:
                continue
            cell = run_cell(p, k, args.warmup, args.steps, args.chains, args.seed)
            jax.clear_caches()  # seven compiled runs per cell: free their executables
            with args.out.open("a") as f:
                f.write(json.dumps(cell) + "\n")
            print(table([cell]).splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
