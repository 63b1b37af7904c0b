"""Every preset at its defaults against the HMC references of ``networks.py``, in function
space.

Each cell is ``K(model)`` with nothing else set, ``num_warmup=2000``, ``num_samples=20000``,
4 vectorised chains, thinned so that the run is judged with as many draws as each reference
ensemble holds (4 x 1,000 draws: every 20th kept; the 50,000-row shuttle's 2 x 250: every
160th). Its predictive at the test points
is compared with reference ensemble ``a`` (total variation and agreement for a classifier,
W2 per test point for a regressor) and judged against the floor (``a`` against ``b``):
*close* when the distance is at most twice the floor or the floor plus 0.01 and, for a
classifier, the agreement at most one point below the floor's
(:func:`numpyro_sgrld.analysis.predictive.within_band`). Whether the run warned is its own verdict
at the end of ``mcmc.run``. Each run's predictive is kept in
``docs/results/network_presets/<problem>_<preset>.npz`` (``probs`` and each chain's
``chain_probs``, or ``quantiles`` at 256 mid-levels). A far run that did not warn is a
**miss**, a close run that warned a **false alarm**. One JSON line per cell is appended to
``--out`` as it finishes (a rerun skips the cells there); ``--table`` prints the Markdown
table and the confusion matrix per problem::

    taskset -c 0 python benchmarks/references/presets.py --problems cancer cancer_horseshoe
    python benchmarks/references/presets.py --table docs/results/network_presets.jsonl
    python benchmarks/references/presets.py --rejudge --out docs/results/network_presets.jsonl

Wall times are on one core (``taskset``; XLA's own threads limited to one), compile
included, as NUTS's in ``networks.py``."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402
from numpyro_sgrld.analysis.predictive import (  # noqa: E402
    agreement,
    gaussian_mixture_quantiles,
    quantile_wasserstein2,
    total_variation,
    within_band,
)

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
PRESETS = ["SGLD", "SGHMC", "PSGLD", "MongeSGLD", "ShampooSGLD", "WenzelSGLD", "AdamSGLD",
           "BAOAB", "SGNHT", "BADODAB", "CyclicalSGLD", "CyclicalSGHMC", "BNPSGLD"]
WARNED = "cannot be trusted"


def reference(name):
    path = RESULTS / "references" / f"{name}.npz"
    if not path.exists():
        raise SystemExit(f"No reference for {name!r} at {path}: run "
                         f"benchmarks/references/networks.py --problems {name} first.")
    r = np.load(path)
    rows = [json.loads(line) for line in open(RESULTS / "network_references.jsonl")]
    meta = [m for m in rows if m["problem"] == name][-1]
    return {k: r[k] for k in r.files}, meta


def distances(problem, pred, ref):
    """The run's distance to ensemble ``a`` (and ``b``), the floor, and the band."""
    if problem["kind"] == "classifier":
        d = {w: total_variation(pred["probs"], ref[f"probs_{w}"]) for w in "ab"}
        agree = agreement(pred["probs"], ref["probs_a"])
        floor = total_variation(ref["probs_a"], ref["probs_b"])
        floor_agree = agreement(ref["probs_a"], ref["probs_b"])
        band = within_band(d["a"], floor, agree, floor_agree)
        return dict(metric="tv", distance=d["a"], distance_b=d["b"], floor=floor,
                    ratio=band.ratio, agreement=agree, floor_agreement=floor_agree,
                    close=band.close)
    q = pred["quantiles"]
    d = {w: quantile_wasserstein2(q, ref[f"quantiles_{w}"]) for w in "ab"}
    floor = quantile_wasserstein2(ref["quantiles_a"], ref["quantiles_b"])
    band = within_band(d["a"], floor)
    return dict(metric="w2", distance=d["a"], distance_b=d["b"], floor=floor,
                ratio=band.ratio, close=band.close)


def beyond_noise(pred, ref):
    r"""For a classifier: the number of test points whose top class differs from reference
    ``a``'s, and the number an exact ensemble with the two runs' Monte Carlo errors would
    flip, :math:`\sum_i \Phi(-|m_i| / \sigma_i)`: :math:`m_i` the reference's margin between
    its top two classes, :math:`\sigma_i^2` the sum of the two ensembles' Monte Carlo
    variances of that margin (the run's from its chains' ensembles, between-chain variance
    over the number of chains; the reference's from its chunks' ensembles likewise)."""
    from scipy.special import ndtr

    if "chain_probs" not in pred or "chunk_probs_a" not in ref:
        return {}
    run, chunks = pred["chain_probs"], ref["chunk_probs_a"]
    v = run.var(0, ddof=1) / len(run) + chunks.var(0, ddof=1) / len(chunks)
    top = np.argsort(ref["probs_a"], -1)[:, -2:]
    rows = np.arange(len(top))
    margin = ref["probs_a"][rows, top[:, 1]] - ref["probs_a"][rows, top[:, 0]]
    sd = np.sqrt(v[rows, top[:, 1]] + v[rows, top[:, 0]])
    flips = float(ndtr(-margin / np.maximum(sd, 1e-12)).sum())
    return dict(expected_flips=flips,
                flips=int((pred["probs"].argmax(-1) != ref["probs_a"].argmax(-1)).sum()))


def cell(name, kernel_name, problem, ref, meta, warmup=2000, samples=20_000, chains=4, seed=0,
         folder=RESULTS / "network_presets", **options):
    """One preset's defaults (``warmup``, ``seed`` and the kernel's ``options`` aside) on one
    problem, its predictive stored in ``folder`` and scored against the reference."""
    kernel = getattr(ns, kernel_name)(problem["model"], **options)
    thinning = max(1, samples * chains // (meta["chains"] * meta["draws"]))
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=samples, num_chains=chains,
                thinning=thinning, chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed), *problem["train"])
        jax.block_until_ready(mcmc.get_samples())
        jax.effects_barrier()
        seconds = time.perf_counter() - t
    said = [str(w.message) for w in caught if WARNED in str(w.message)]
    by_chain = {k: v for k, v in mcmc.get_samples(group_by_chain=True).items()
                if k.startswith(("net/", "sig"))}
    parts = [P.predictive(problem, {k: v[c] for k, v in by_chain.items()})
             for c in range(chains)]
    if problem["kind"] == "regressor":
        mean = np.concatenate([p["mean"] for p in parts])
        scale = np.concatenate([p["scale"] for p in parts])
        pred = {"quantiles": gaussian_mixture_quantiles(mean, scale)}
    else:  # the chains' ensembles, and the run's (the chains hold equal numbers of draws)
        pred = {"chain_probs": np.stack([p["probs"] for p in parts])}
        pred["probs"] = pred["chain_probs"].mean(0)
    folder.mkdir(exist_ok=True)
    np.savez_compressed(folder / f"{name}_{kernel_name}.npz",
                        **{k: np.asarray(v, np.float32) for k, v in pred.items()})
    steps = np.asarray(mcmc.last_state.step_size, np.float64)
    return dict(problem=name, kernel=kernel_name, seconds=seconds, warned=bool(said),
                warning=said[0][:400] if said else "", step_size=steps.tolist(),
                step_spread=float(steps.max() / steps.min()),
                nuts_seconds=meta["seconds"]["a"], **distances(problem, pred, ref),
                **beyond_noise(pred, ref))


def rejudge(path):
    """Every row of ``path`` judged again from its run's stored predictive against the
    references as they are now (the file rewritten)."""
    rows = [json.loads(line) for line in open(path)]
    refs = {}
    for r in rows:
        stored = RESULTS / "network_presets" / f"{r['problem']}_{r['kernel']}.npz"
        if not stored.exists():
            continue
        if r["problem"] not in refs:
            problem = P.PROBLEMS[r["problem"]]()
            refs[r["problem"]] = (problem, reference(r["problem"])[0])
        problem, ref = refs[r["problem"]]
        pred = dict(np.load(stored))
        r.update(distances(problem, pred, ref), **beyond_noise(pred, ref))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def agreement_cell(row):
    """A classifier row's agreement and, in brackets, the floor's; empty for a regressor."""
    if "agreement" not in row:
        return ""
    return f"{row['agreement']:.3f} ({row['floor_agreement']:.3f})"


def confusion(rows, close=lambda r: r["close"]):
    """The counts of close and quiet, close and warned (false alarms), far and warned, and far
    and quiet (misses) among ``rows``."""
    return [sum(1 for r in rows if close(r) == c and r["warned"] == w)
            for c, w in ((True, False), (True, True), (False, True), (False, False))]


#: The verdict's first reason, as its warning names it: the weights' or a scale's law off
#: (``spread``: the equipartition reading), a horseshoe scale that has not mixed (``scale``),
#: the evaluation batch's split R-hat beyond what its ESS allows (``R-hat``), or only its bulk
#: ESS under the 100 the verdict trusts (``ESS``).
REASONS = ("spread", "scale", "R-hat", "ESS")


def first_reason(warning):
    """The first of :data:`REASONS` a warned run's verdict gives (its second sentence)."""
    said = warning[warning.find(". The chains"):][:120]
    if "posterior's spread" in said:
        return "spread"
    if "scale'" in said:
        return "scale"
    return "R-hat" if "split R-hat" in said else "ESS"


def reasons_table(groups):
    """Per ``(label, rows)`` in ``groups``, how many close runs warned for each first reason,
    and the false alarms left if every warning for the evaluation batch's ESS alone went."""
    print("| problem | close runs | warned: " + " | ".join(REASONS) + " | false alarms "
          "without the ESS-only warnings |")
    print("|---|---|" + "---|" * len(REASONS) + "---|")
    counts, close = np.zeros(len(REASONS), int), 0
    for label, rows in groups:
        near = [r for r in rows if r["close"]]
        said = [first_reason(r["warning"]) for r in near if r["warned"]]
        n = np.array([said.count(k) for k in REASONS])
        counts, close = counts + n, close + len(near)
        print(f"| {label} | {len(near)} | " + " | ".join(map(str, n)) + f" | {n[:-1].sum()} |")
    print(f"| all | {close} | " + " | ".join(map(str, counts)) + f" | {counts[:-1].sum()} |")
    share = 100 / max(close, 1)
    print(f"\nFalse alarms: {counts.sum()} of {close} close runs ({share * counts.sum():.0f} %); "
          f"without the ESS-only warnings {counts[:-1].sum()} ({share * counts[:-1].sum():.0f} %).")


def table(path):
    rows = [json.loads(line) for line in open(path)]
    print("| problem | preset | distance / floor | agreement (floor's) | points flipped "
          "(expected from noise) | close | warned | time (s) | NUTS (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        agree = agreement_cell(r)
        flips = f"{r['flips']} ({r['expected_flips']:.1f})" if "flips" in r else ""
        print(f"| {r['problem']} | {r['kernel']} | {r['metric'].upper()} {r['ratio']:.1f}x | "
              f"{agree} | {flips} | {'yes' if r['close'] else 'no'} | "
              f"{'yes' if r['warned'] else 'no'} | {r['seconds']:.0f} | "
              f"{r['nuts_seconds']:.0f} |")
    from crossover import strictly_close

    for label, close in (("the band", lambda r: r["close"]),
                         ("twice the floor", strictly_close)):
        print(f"\nClose by {label}:\n")
        print("| problem | close, quiet | close, warned (false alarm) | far, warned | "
              "far, quiet (miss) |")
        print("|---|---|---|---|---|")
        for p in dict.fromkeys(r["problem"] for r in rows):
            n = confusion([r for r in rows if r["problem"] == p], close)
            print(f"| {p} | " + " | ".join(map(str, n)) + " |")
    print("\nWhy the close runs (by the band) warned:\n")
    reasons_table([(p, [r for r in rows if r["problem"] == p])
                   for p in dict.fromkeys(r["problem"] for r in rows)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", nargs="+", default=["cancer", "cancer_horseshoe",
                                                           "concrete", "digits", "shuttle"])
    parser.add_argument("--kernels", nargs="+", default=PRESETS)
    parser.add_argument("--out", type=Path, default=RESULTS / "network_presets.jsonl")
    parser.add_argument("--table", type=Path)
    parser.add_argument("--rejudge", action="store_true",
                        help="judge the rows of --out again from their stored predictives")
    a = parser.parse_args()
    if a.table:
        return table(a.table)
    if a.rejudge:
        return rejudge(a.out)
    done = set()
    if a.out.exists():
        done = {(r["problem"], r["kernel"]) for r in map(json.loads, open(a.out))}
    for name in a.problems:
        problem = P.PROBLEMS[name]()
        ref, meta = reference(name)
        for k in a.kernels:
            if (name, k) in done:
                continue
            row = cell(name, k, problem, ref, meta)
            with open(a.out, "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps({k_: v for k_, v in row.items() if k_ != "warning"}), flush=True)


if __name__ == "__main__":
    main()
