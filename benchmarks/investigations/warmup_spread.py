"""How much the warm-up's step-size statistics differ between independent chains.

Step-size adaptation (``step_size=None``, ``docs/step_size.md``) runs in each chain on that
chain's own warm-up path. Where the warm-up is long against the posterior's slowest relaxation,
the chains' statistics agree; where it is not (a funnel, whose ``v`` relaxes over thousands of
steps at a stable step), each chain measures the part of the posterior it happened to visit.
This script runs the warm-up of ``--chains`` sequential chains and prints, per chain, what
the adaptation saw at the end of the warm-up: the frozen step; the bias target's step
``target_bias / mean quotient`` of the final window; the stability cap
``FAST_TARGET / max stiffness`` after the approach (the frozen step is the smaller of the
two). The spread across chains (max / min) ends each row.

    python benchmarks/investigations/warmup_spread.py --problem funnel \\
        --kernels PSGLD "PSGLD+Γ" ShampooSGLD MongeSGLD
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from jax import random
from numpyro.infer import MCMC

from numpyro_sgrld.warmup.adaptation import FAST_TARGET

sys.path.insert(0, str(Path(__file__).parents[1] / "accuracy"))
import step_size_adaptation as bench  # noqa: E402

TARGET_BIAS = 0.1  # the kernels' default ``target_bias``


def spread(problem_name, kernel_name, warmup, chains, seed):
    """The per-chain statistics of one warm-up, as a dict of arrays."""
    problem = bench.PROBLEMS[problem_name]()
    kernel = bench.KERNELS[kernel_name](problem["model"], step_size=None, **problem["kwargs"])
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=1, num_chains=chains,
                chain_method="sequential", progress_bar=False)
    mcmc.warmup(random.PRNGKey(seed), *problem["args"])
    state = mcmc.post_warmup_state
    a = state.adaptation
    count = np.maximum(np.asarray(a.count), 1)
    mean_quotient = np.asarray(a.total) / count
    return {
        "frozen step": np.asarray(state.step_size),
        "bias target": TARGET_BIAS / mean_quotient,
        "stability cap": FAST_TARGET / np.asarray(a.stiffness),
    }


def table(rows):
    """Markdown: one row per (kernel, statistic), the chains' values and their spread."""
    out = []
    for kernel_name, stats in rows:
        chains = len(next(iter(stats.values())))
        if not out:
            head = " | ".join(f"chain {c}" for c in range(chains))
            out += [f"| kernel | statistic | {head} | max / min |",
                    "|---" * (chains + 3) + "|"]
        for name, values in stats.items():
            cells = " | ".join(f"{v:.3g}" for v in values)
            positive = np.all(values > 0)
            ratio = f"{values.max() / values.min():.1f}" if positive else "—"
            out.append(f"| {kernel_name} | {name} | {cells} | {ratio} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problem", choices=sorted(bench.PROBLEMS), default="funnel")
    p.add_argument("--kernels", nargs="+", choices=sorted(bench.KERNELS),
                   default=["PSGLD", "PSGLD+Γ", "ShampooSGLD", "MongeSGLD"])
    p.add_argument("--warmup", type=int, default=10_000)
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    rows = [(k, spread(args.problem, k, args.warmup, args.chains, args.seed))
            for k in args.kernels]
    print(table(rows))


if __name__ == "__main__":
    main()
