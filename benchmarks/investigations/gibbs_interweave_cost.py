"""What the non-centred draws' rate after warm-up costs and buys where the data are larger than
the network's: German credit's sparse logistic regression
(``benchmarks/accuracy/gibbs_sparse_logistic.py``: N = 1,000, minibatch 100, 26 interwoven
scale elements; the default's rate every 260 steps) and the random intercept
(``benchmarks/accuracy/gibbs_random_intercept.py``: N = 100,000, minibatch 1,000, ``mu`` and
``sigma``; every 200), ``SGGibbs(SGLD(model))`` at its defaults, 4 vectorised chains of
2,000 + 20,000 steps, with the schedule's steps after warm-up set to ``default / k`` for each
``k`` of ``--divisors`` (1: the default's; the schedule of
:func:`~numpyro_sgrld.sampler.interweaving.auto_every` before dividing). Each seed's runs
alternate their order from seed to seed, side by side in one process (the first run of a
process also compiles what the later ones reuse, so the first seed's times are read apart).
Per run: the largest mean error in reference sds, the sd ratios, the smallest bulk ESS,
the largest split R-hat, the verdict and the wall time; the references are the accuracy
scripts' cached NUTS runs::

    python benchmarks/investigations/gibbs_interweave_cost.py --problem sparse_logistic \\
        --divisors 1 4 8 --seeds 0 1 2 3
    python benchmarks/investigations/gibbs_interweave_cost.py --problem random_intercept \\
        --divisors 1 4 8 --seeds 0 1
"""

import argparse
import sys
import time
import warnings
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy"))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402
from reference_moments import errors  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402
from numpyro_sgrld.sampler import interweaving  # noqa: E402

CACHE = ROOT / "docs" / "results"


def problem(name):
    """``(model, args, judged, reference)`` of the named benchmark."""
    if name == "sparse_logistic":
        import gibbs_sparse_logistic as g
        from numpyro_sgrld.models import logistic_regression as lr

        X, y = (jnp.asarray(v) for v in lr.load_german_credit())
        return (partial(g.centred, subsample_size=100), (X, y), g.judged,
                g.reference(X, y, CACHE))
    import gibbs_random_intercept as g

    group, x, y, _ = g.data()
    args = (group, x, y)
    return partial(g.model, subsample_size=1000), args, g.judged, g.reference(args, CACHE)


def run(model, args, judged, ref, divisor, seed):
    """One default run with the schedule's steps after warm-up divided by ``divisor``."""
    original = interweaving.schedule
    every = {}

    def schedule(*a, **k):
        plan = original(*a, **k)
        if plan is None:
            return None
        every["default"] = plan.every
        return plan._replace(every=max(1, round(plan.every / divisor)))

    interweaving.schedule = schedule
    try:
        kernel = ns.SGGibbs(ns.SGLD(model))
        mcmc = MCMC(kernel, num_warmup=2000, num_samples=20_000, num_chains=4,
                    chain_method="vectorized", progress_bar=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            mcmc.run(jax.random.PRNGKey(seed), *args)
            jax.block_until_ready(mcmc.get_samples())
            seconds = time.perf_counter() - start
    finally:
        interweaving.schedule = original
    warned = any("cannot be trusted" in str(c.message) for c in caught)
    draws = judged(mcmc.get_samples(group_by_chain=True))
    worst, low, high = errors(draws, ref)
    summary = numpyro.diagnostics.summary(draws)
    ess = min(float(np.min(s["n_eff"])) for s in summary.values())
    rhat = max(float(np.max(s["r_hat"])) for s in summary.values())
    steps = max(1, round(every["default"] / divisor))
    print(f"| {seed} | {every['default']} / {divisor} = {steps} | {worst:.3f} "
          f"| {low:.2f}–{high:.2f} | {ess:.0f} | {rhat:.3f} "
          f"| {'warned' if warned else 'quiet'} | {seconds:.1f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", choices=["sparse_logistic", "random_intercept"],
                        default="sparse_logistic")
    parser.add_argument("--divisors", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    a = parser.parse_args()
    model, args, judged, ref = problem(a.problem)
    print(f"problem: {a.problem}")
    print("| seed | steps between draws | max mean err (sd) | sd ratios | min bulk ESS "
          "| max R-hat | verdict | time (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for i, seed in enumerate(a.seeds):
        order = a.divisors if i % 2 == 0 else a.divisors[::-1]
        for divisor in order:
            run(model, args, judged, ref, divisor, seed)


if __name__ == "__main__":
    main()
