"""What warm-up learnt within Gibbs, given back, on German credit's sparse logistic regression
(the centred model of ``gibbs_sparse_logistic.py``): for each seed, a default
``SGGibbs(SGLD(model))`` run (4 vectorised chains of 2,000 warm-up and 20,000 draws), then
``SGGibbs(SGLD(model, settings=learnt_settings(mcmc)))`` with ``num_warmup=0`` and 20,000
draws from a fresh key, in the same process (the second kernel's set-up and loop compile
again: nothing is cached between them but JAX's own per-process caches). Each judged against
the NUTS reference (``log tau``, ``log lam``, ``w``: the largest |mean error| in reference
sds, the sd ratios, the smallest bulk ESS, the largest split R-hat, whether the verdict
warned) with its wall time::

    python benchmarks/record.py docs/results/gibbs_settings_reuse.json -- \\
        python benchmarks/accuracy/gibbs_settings_reuse.py --seeds 0 1
"""

import argparse
import time
import warnings
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
from gibbs_sparse_logistic import accurate, centred, judged, mixing, reference
from numpyro.infer import MCMC
from reference_moments import errors

import numpyro_sgrld as ns


def timed(kernel, num_warmup, num_samples, seed, X, y):
    """``(mcmc, seconds, warned)`` of a run of 4 vectorised chains."""
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(seed), X, y)
    seconds = time.perf_counter() - start
    return mcmc, seconds, any("cannot be trusted" in str(c.message) for c in caught)


def main():
    from numpyro_sgrld.models import logistic_regression as lr

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--num-warmup", type=int, default=2000)
    parser.add_argument("--num-samples", type=int, default=20000)
    parser.add_argument("--cache", type=Path, default=Path("docs/results"))
    a = parser.parse_args()
    X, y = lr.load_german_credit()
    X, y = jnp.asarray(X), jnp.asarray(y)
    ref = reference(X, y, a.cache)
    model = partial(centred, subsample_size=100)
    print("| seed | run | max mean err (sd) | sd ratios | min bulk ESS | max R-hat | accurate "
          "| verdict | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for seed in a.seeds:
        learnt_run, seconds, warned = timed(ns.SGGibbs(ns.SGLD(model)), a.num_warmup,
                                            a.num_samples, seed, X, y)
        learnt = ns.learnt_settings(learnt_run)
        again, seconds_again, warned_again = timed(
            ns.SGGibbs(ns.SGLD(model, settings=learnt)), 0, a.num_samples, seed + 100, X, y)
        for label, mcmc, s, w in (
                (f"default, {a.num_warmup:,} + {a.num_samples:,}", learnt_run, seconds, warned),
                (f"its settings given back, 0 + {a.num_samples:,}", again, seconds_again,
                 warned_again)):
            draws = judged(mcmc.get_samples(group_by_chain=True))
            err = errors(draws, ref)
            ess, rhat = mixing(draws)
            print(f"| {seed} | {label} | {err[0]:.3f} | {err[1]:.2f}–{err[2]:.2f} | {ess:.0f} "
                  f"| {rhat:.3f} | {'yes' if accurate(err) else 'no'} | "
                  f"{'warned' if w else 'quiet'} | {s:.1f} |", flush=True)


if __name__ == "__main__":
    main()
