"""Which test points of the ``cancer`` network problem change their top class against the
HMC reference, and whether the step, the start, the warm-up or the seed decides it.

Each row is one run on ``benchmarks/references/problems.py``'s ``cancer`` (4 chains): SGLD at
its defaults and with one setting changed (``target_bias=0.025``, ``num_warmup=10000``, NUTS's
start ``priors.init_to_unit_scales``, another seed), 2,000 warm-up steps unless changed and
20,000 kept steps thinned to 4,000 draws, or NUTS on ``full_batch(model)`` from the presets'
start (``init_to_uniform``), 4 x 1,000 + 1,000. Its TV and agreement to reference ensemble
``a`` and its class-1 probability at the three test points whose reference probability is
nearest one half are appended to ``docs/results/cancer_flips.jsonl`` (a rerun skips the rows
there)::

    taskset -c 1 python benchmarks/investigations/cancer_flips.py
"""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "references"))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import json  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import MCMC, NUTS, init_to_uniform  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402
from numpyro_sgrld.analysis.predictive import agreement, predictive_probs, total_variation  # noqa: E402

OUT = ROOT / "docs" / "results" / "cancer_flips.jsonl"
RUNS = {
    "SGLD defaults, seed 0": dict(seed=0),
    "SGLD defaults, seed 1": dict(seed=1),
    "SGLD target_bias=0.025, seed 0": dict(seed=0, kernel=dict(target_bias=0.025)),
    "SGLD num_warmup=10000, seed 0": dict(seed=0, warmup=10_000),
    "SGLD num_warmup=10000, seed 1": dict(seed=1, warmup=10_000),
    "SGLD from init_to_unit_scales, seed 0": dict(seed=0, kernel=dict(init_strategy=P.INIT)),
    "NUTS from init_to_uniform, 4 x 1,000": dict(seed=3, nuts=True),
}


def run(problem, seed, kernel=None, warmup=2000, nuts=False):
    if nuts:
        mcmc = MCMC(NUTS(problem["full"], init_strategy=init_to_uniform), num_warmup=1000,
                    num_samples=1000, num_chains=4, chain_method="sequential",
                    progress_bar=False)
    else:
        mcmc = MCMC(ns.SGLD(problem["model"], **(kernel or {})), num_warmup=warmup,
                    num_samples=20_000, num_chains=4, thinning=20, chain_method="vectorized",
                    progress_bar=False)
    mcmc.run(jax.random.PRNGKey(seed), *problem["train"])
    samples = {k: v for k, v in mcmc.get_samples().items() if k.startswith("net/")}
    return np.asarray(predictive_probs(problem["full"], samples, problem["X_test"]))


def main():
    problem = P.cancer()
    ref = np.load(ROOT / "docs" / "results" / "references" / "cancer.npz")["probs_a"]
    points = np.argsort(np.abs(ref[:, 1] - 0.5))[:3]
    done = {json.loads(line)["run"] for line in open(OUT)} if OUT.exists() else set()
    for name, settings in RUNS.items():
        if name in done:
            continue
        probs = run(problem, **settings)
        row = dict(run=name, tv=total_variation(probs, ref), agreement=agreement(probs, ref),
                   points=points.tolist(), p=probs[points, 1].round(3).tolist(),
                   reference=ref[points, 1].round(3).tolist())
        with open(OUT, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
