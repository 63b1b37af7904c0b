"""Whether a longer warm-up (or run, or another start) brings a network's default run into
the HMC reference's band.

Each row is one run of ``benchmarks/references/presets.py``'s cell (``K(model)`` with nothing
else set, 4 vectorised chains, ``--samples`` steps, 20,000 by default, thinned to the
reference's draw count) with ``num_warmup`` 2,000 (the documented default) or 12,000 (a
longer warm-up, as the verdict's advice for a network asks), seeds 0 and 1, and NumPyro's
``init_to_uniform`` (the kernels' default) or, with ``--init unit_scales``, the references'
start ``priors.init_to_unit_scales``, on the problems of
``benchmarks/references/problems.py``. Each row holds the run's distance to reference ensemble
``a`` as a multiple of the floor, its agreement, whether it is within the band, whether it
warned and its wall time on one core; rows are appended to
``docs/results/network_warmup.jsonl`` as they finish (a rerun skips the rows there), and each
run's predictive is kept in ``benchmarks/investigations/.cache/network_warmup/``::

    taskset -c 1 python benchmarks/investigations/network_warmup.py --problems cancer digits
    taskset -c 0 python benchmarks/investigations/network_warmup.py --problems cancer \
        cancer_horseshoe --kernels SGLD SGHMC PSGLD MongeSGLD ShampooSGLD WenzelSGLD \
        AdamSGLD BAOAB SGNHT BADODAB CyclicalSGLD CyclicalSGHMC BNPSGLD --warmups 12000 \
        --seeds 0
    taskset -c 1 python benchmarks/investigations/network_warmup.py --problems concrete
    taskset -c 1 python benchmarks/investigations/network_warmup.py --problems concrete \
        --kernels SGLD --seeds 0 --init unit_scales
    taskset -c 1 python benchmarks/investigations/network_warmup.py --problems concrete \
        --kernels SGLD SGHMC --seeds 0 --warmups 50000 --samples 200000 [--init unit_scales]
    K="SGLD SGHMC PSGLD MongeSGLD ShampooSGLD WenzelSGLD AdamSGLD BAOAB SGNHT BADODAB \
       CyclicalSGLD CyclicalSGHMC BNPSGLD"
    taskset -c 1 python benchmarks/investigations/network_warmup.py --problems concrete \
        digits --kernels $K --warmups 12000 --seeds 0
    taskset -c 0 python benchmarks/investigations/network_warmup.py --problems shuttle_1000 \
        shuttle_10000 shuttle --kernels $K --warmups 12000 --seeds 0
    python benchmarks/investigations/network_warmup.py --table docs/results/network_warmup.jsonl
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "references"))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import argparse  # noqa: E402
import json  # noqa: E402

import presets  # noqa: E402

OUT = ROOT / "docs" / "results" / "network_warmup.jsonl"
FOLDER = Path(__file__).resolve().parent / ".cache" / "network_warmup"


def table(path):
    """The rows of ``path`` as a Markdown table, and per problem and warm-up (seed 0, the
    default start and run length) the confusion of close against warned."""
    rows = [json.loads(line) for line in open(path)]
    print("| problem | preset | warm-up + steps | start | seed | distance / floor | agreement "
          "(floor's) | close | warned | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        agree = presets.agreement_cell(r)
        print(f"| {r['problem']} | {r['kernel']} | {r['warmup']:,} + "
              f"{r.get('samples', 20_000):,} | {r.get('init', 'uniform')} | {r['seed']} | "
              f"{r['metric'].upper()} {r['ratio']:.1f}x | {agree} | "
              f"{'yes' if r['close'] else 'no'} | {'yes' if r['warned'] else 'no'} | "
              f"{r['seconds']:.0f} |")
    print("\n| problem | warm-up | runs | close, quiet | close, warned | far, warned | "
          "far, quiet |")
    print("|---|---|---|---|---|---|---|")
    plain = [r for r in rows if r["seed"] == 0 and r.get("init", "uniform") == "uniform"
             and r.get("samples", 20_000) == 20_000]
    for key in dict.fromkeys((r["problem"], r["warmup"]) for r in plain):
        sub = [r for r in plain if (r["problem"], r["warmup"]) == key]
        n = presets.confusion(sub)
        print(f"| {key[0]} | {key[1]:,} | {len(sub)} | " + " | ".join(map(str, n)) + " |")
    longest = max(r["warmup"] for r in plain)
    print(f"\nWhy the close runs (by the band) warned, at {longest:,} warm-up steps:\n")
    presets.reasons_table([(p, [r for r in plain if (r["problem"], r["warmup"]) == (p, longest)])
                           for p in dict.fromkeys(r["problem"] for r in plain)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", nargs="+", default=["cancer", "digits"])
    parser.add_argument("--kernels", nargs="+", default=["SGLD", "SGHMC"])
    parser.add_argument("--warmups", nargs="+", type=int, default=[2000, 12000])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--init", choices=["uniform", "unit_scales"], default="uniform",
                        help="the start: NumPyro's init_to_uniform (the kernels' default) or "
                             "priors.init_to_unit_scales (the NUTS references')")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--table", type=Path, help="print the table of these rows and stop")
    a = parser.parse_args()
    if a.table:
        return table(a.table)
    done = set()
    if a.out.exists():
        done = {(r["problem"], r["kernel"], r["warmup"], r["seed"], r.get("init", "uniform"),
                 r.get("samples", 20_000)) for r in map(json.loads, open(a.out))}
    options = {} if a.init == "uniform" else dict(init_strategy=P.INIT)
    for name in a.problems:
        problem = P.PROBLEMS[name]()
        ref, meta = presets.reference(name)
        for k in a.kernels:
            for seed in a.seeds:
                for warmup in a.warmups:
                    if (name, k, warmup, seed, a.init, a.samples) in done:
                        continue
                    folder = FOLDER / f"w{warmup}_n{a.samples}_s{seed}_{a.init}"
                    folder.mkdir(parents=True, exist_ok=True)
                    row = presets.cell(name, k, problem, ref, meta, warmup=warmup,
                                       samples=a.samples, seed=seed, folder=folder, **options)
                    row.update(warmup=warmup, samples=a.samples, seed=seed, init=a.init)
                    with open(a.out, "a") as f:
                        f.write(json.dumps(row) + "\n")
                    print(json.dumps({k_: v for k_, v in row.items() if k_ != "warning"}),
                          flush=True)


if __name__ == "__main__":
    main()
