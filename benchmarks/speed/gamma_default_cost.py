"""What Γ would cost by default: the per-step wall time (after warm-up, compiled, side by side
in one process) and XLA's flop count of one step after warm-up, for PSGLD, MongeSGLD and
ShampooSGLD at their defaults, with ``correction="exact"`` and ``"hutchinson"`` (Shampoo with
``update_interval=1``, which its Γ needs), on problems of growing dimension:

    python benchmarks/speed/gamma_default_cost.py --out docs/results/gamma_default_cost.jsonl

One JSON line per cell; ``--table`` prints the Markdown table of a results file.
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

import numpyro_sgrld as ns

KERNELS = ["PSGLD", "MongeSGLD", "ShampooSGLD"]
CORRECTIONS = [None, "exact", "hutchinson"]


def problems():
    from numpyro_sgrld.models import linear_regression as lin
    from numpyro_sgrld.models import logistic_regression as lr

    X, y, _ = lin.make_data(seed=0, num_data=2000, num_features=5)
    yield "conjugate (d=5)", partial(lin.model, subsample_size=100), (X, y)
    X, y = lr.load_german_credit()
    yield "german_credit (d=25)", partial(lr.model, subsample_size=100), (X, y)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5000, 100)).astype(np.float32)
    y = (X[:, 0] > 0).astype(np.int32)
    yield "logistic (d=100)", partial(lr.model, subsample_size=100), (X, y)


def flops(kernel, state, args):
    host = kernel.after_warmup(state) or kernel
    cost = jax.jit(lambda s: host.sample(s, args, {})).lower(state).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]


def cell(name, correction, model, args, num_samples):
    kw = {} if correction is None else {"correction": correction}
    if name == "ShampooSGLD" and correction is not None:
        kw["update_interval"] = 1
    kernel = getattr(ns, name)(model, **kw)
    mcmc = MCMC(kernel, num_warmup=500, num_samples=num_samples, progress_bar=False)
    mcmc.warmup(random.PRNGKey(0), *args)
    state = mcmc.post_warmup_state
    mcmc.run(state.rng_key, *args)  # compiles
    jax.block_until_ready(mcmc.get_samples())
    times = []
    for _ in range(3):
        mcmc.post_warmup_state = state
        t = time.perf_counter()
        mcmc.run(state.rng_key, *args)
        jax.block_until_ready(mcmc.get_samples())
        times.append((time.perf_counter() - t) / num_samples)
    return {"kernel": name, "correction": correction, "us_per_step": 1e6 * min(times),
            "flops_per_step": flops(kernel, state, args)}


def table(path):
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line]
    base = {(r["problem"], r["kernel"]): r for r in rows if r["correction"] is None}
    print("| problem | kernel | correction | µs/step | × uncorrected | flops/step | × |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        b = base[(r["problem"], r["kernel"])]
        print(f"| {r['problem']} | {r['kernel']} | {r['correction'] or '–'} | "
              f"{r['us_per_step']:.1f} | {r['us_per_step'] / b['us_per_step']:.2f} | "
              f"{r['flops_per_step']:.3g} | {r['flops_per_step'] / b['flops_per_step']:.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/results/gamma_default_cost.jsonl"))
    parser.add_argument("--num-samples", type=int, default=5000)
    parser.add_argument("--table", type=Path, default=None)
    a = parser.parse_args()
    if a.table is not None:
        return table(a.table)
    with a.out.open("w") as f:
        for problem, model, args in problems():
            for name in KERNELS:
                for correction in CORRECTIONS:
                    row = {"problem": problem, **cell(name, correction, model, args,
                                                      a.num_samples)}
                    print(json.dumps(row), flush=True)
                    f.write(json.dumps(row) + "\n")
                    f.flush()


if __name__ == "__main__":
    main()
