"""Does the SG step within Gibbs keep a global scale within the tolerance when it has more
children that the data say little about? The sparse logistic regression of
``benchmarks/accuracy/gibbs_sparse_logistic.py`` (centred, Gamma(1/2, 1/2) scales) on
simulated data of ``--width`` standard-normal predictors, ``--relevant`` of which carry weight
(1, -1, 1, ... times 0.8), N = 1,000 rows, minibatch 100. The reference is NUTS on the full
data, non-centred, 4 x (1,000 + ``--nuts-draws``), its moments cached in ``--cache``. Each
``SGGibbs(K(model))`` run (4 vectorised chains of 2,000 + 20,000 steps) prints the global
scale's ``log tau`` mean error in reference sds (every chain's too), the worst coordinate's,
the smallest bulk ESS and whether the verdict warned, for each of ``--target-biases`` (the
kernel's; within Gibbs the step aims at a share of it, which falls with the count of weakly
informed children, :mod:`numpyro_sgrld.sampler.gibbs_bias`; both are printed, averaged over
the chains, with the target the step aimed at)::

    python benchmarks/investigations/gibbs_scale_bias_width.py --width 60 --relevant 6 \\
        --kernels SGLD BADODAB --seeds 0 1
    python benchmarks/investigations/gibbs_scale_bias_width.py --width 60 --relevant 6 \\
        --kernels SGLD BADODAB --seeds 0 1 --target-biases 0.05
    python benchmarks/investigations/gibbs_scale_bias_width.py --width 200 --relevant 6 \\
        --kernels SGLD BADODAB --seeds 0 1 --target-biases default
"""

import argparse
import sys
import time
import warnings
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC, NUTS

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy"))
import gibbs_sparse_logistic as sparse  # noqa: E402
from reference_moments import cached_reference, errors  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402

ROWS = 1000


def data(width, relevant, seed=0):
    """``(X, y)``: standard-normal predictors, the first ``relevant`` weighted +-0.8 in turn."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(ROWS, width)).astype(np.float32)
    w = np.zeros(width)
    w[:relevant] = 0.8 * (-1.0) ** np.arange(relevant)
    y = (rng.uniform(size=ROWS) < 1 / (1 + np.exp(-X @ w))).astype(np.float32)
    return jnp.asarray(X), jnp.asarray(y)


def reference(X, y, draws, cache):
    def run():
        mcmc = MCMC(NUTS(sparse.non_centred), num_warmup=1000, num_samples=draws,
                    num_chains=4, chain_method="sequential", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(1), X, y)
        return sparse.judged(mcmc.get_samples(group_by_chain=True))

    path = cache / f"gibbs_scale_bias_width_{X.shape[1]}_reference.npz"
    return cached_reference(path, run, ("log_tau", "log_lam", "w"))


def sg_run(kernel_name, X, y, seed, target_bias):
    own = {} if target_bias is None else {"target_bias": target_bias}
    kernel = ns.SGGibbs(getattr(ns, kernel_name)(partial(sparse.centred, subsample_size=100),
                                                 **own))
    mcmc = MCMC(kernel, num_warmup=2000, num_samples=20000, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(seed), X, y)
    warned = any("cannot be trusted" in str(c.message) for c in caught)
    state = mcmc.last_state
    return (sparse.judged(mcmc.get_samples(group_by_chain=True)), warned,
            time.perf_counter() - start, kernel.inner_kernel.target_bias,
            float(np.mean(state.bias_share)), float(np.mean(state.children)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=60)
    parser.add_argument("--relevant", type=int, default=6)
    parser.add_argument("--kernels", nargs="+", default=["SGLD", "BADODAB"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--nuts-draws", type=int, default=4000)
    parser.add_argument("--cache", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument("--target-biases", nargs="+", default=["0.2", "default"],
                        help="the SG kernels' target_bias values ('default': the kernel's); "
                             "within Gibbs the step aims at a share of each")
    a = parser.parse_args()
    X, y = data(a.width, a.relevant)
    start = time.perf_counter()
    ref = reference(X, y, a.nuts_draws, a.cache)
    r = ref["log_tau"]
    print(f"reference: NUTS 4 x {a.nuts_draws} (non-centred), {time.perf_counter() - start:.0f} s "
          f"or cached; log tau mean {float(r['mean'][0]):.3f}, sd {float(r['sd'][0]):.3f}, "
          f"its Monte Carlo error {float(r['mean_se'][0] / r['sd'][0]):.3f} sd; smallest ESS "
          f"{min(float(np.min(v['ess'])) for v in ref.values()):.0f}")
    print("| kernel | target_bias | weakly informed children | share | step's bias target | seed "
          "| log tau err (sd) | chains | worst err (sd) | sd ratios | min bulk ESS | verdict "
          "| time (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in a.kernels:
        for given in a.target_biases:
            target_bias = None if given == "default" else float(given)
            for seed in a.seeds:
                draws, warned, seconds, given_target, share, children = sg_run(
                    name, X, y, seed, target_bias)
                label = f"{given_target:g}" + (" (default)" if target_bias is None else "")
                tau = (draws["log_tau"][..., 0].mean(1) - r["mean"][0]) / r["sd"][0]
                worst, low, high = errors(draws, ref)
                ess, _ = sparse.mixing(draws)
                print(f"| {name} | {label} | {children:.1f} | {share:.3f} "
                      f"| {given_target * share:.3g} | {seed} | {float(tau.mean()):+.3f} "
                      f"| {', '.join(f'{t:+.3f}' for t in tau)} | {worst:.3f} "
                      f"| {low:.2f}–{high:.2f} | {ess:.0f} | {'warned' if warned else 'quiet'} "
                      f"| {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
