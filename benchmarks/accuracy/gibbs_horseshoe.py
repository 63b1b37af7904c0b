"""A layer-wise horseshoe regression's scale with and without its declared Gibbs update:
NUTS on the full data (the reference), SGLD at its defaults within Gibbs (``SGGibbs``, the
scale drawn from its conditional given the weights each step) and SGLD at its defaults on
every site. 200 rows, 3 predictors (true weights 1, 0, -0.5), minibatch 50; 4 sequential
chains of 1,000 warm-up and 4,000 draws each. Prints the log scale's mean, sd, bulk ESS and
split R-hat, the weights' means and smallest ESS, and whether the verdict warned.

    python benchmarks/record.py docs/results/gibbs_horseshoe.json -- \
        python benchmarks/accuracy/gibbs_horseshoe.py
"""

import time
import warnings

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS

import numpyro_sgrld as ns


def regression(X, y):
    w = numpyro.sample("w", ns.priors.horseshoe(scale=1.0)("w", (X.shape[1], 1)))
    with numpyro.plate("data", X.shape[0], subsample_size=50) as idx:
        numpyro.sample("y", dist.Normal((X[idx] @ w)[:, 0], 1.0), obs=y[idx])


def main():
    X = np.asarray(jax.random.normal(jax.random.PRNGKey(2), (200, 3)))
    y = X @ np.array([1.0, 0.0, -0.5]) + np.asarray(
        jax.random.normal(jax.random.PRNGKey(3), (200,)))
    print("| kernel | time (s) | log scale: mean | sd | bulk ESS | split R-hat "
          "| weights' means | weights' smallest ESS | verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, kernel in (("NUTS, full data", NUTS(ns.full_batch(regression))),
                         ("SGGibbs(SGLD)", ns.SGGibbs(ns.SGLD(regression))),
                         ("SGLD", ns.SGLD(regression))):
        start = time.perf_counter()
        mcmc = MCMC(kernel, num_warmup=1000, num_samples=4000, num_chains=4,
                    chain_method="sequential", progress_bar=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc.run(jax.random.PRNGKey(0), X, y)
        seconds = time.perf_counter() - start
        draws = mcmc.get_samples(group_by_chain=True)
        log_scale = np.log(np.asarray(draws["w_scale"], np.float64))
        w = np.asarray(draws["w"], np.float64)[..., 0]
        summary = numpyro.diagnostics.summary({"log_scale": log_scale, "w": w})
        warned = any("cannot be trusted" in str(c.message) for c in caught)
        print(f"| {name} | {seconds:.1f} | {log_scale.mean():.3f} | {log_scale.std():.3f} "
              f"| {summary['log_scale']['n_eff']:.0f} | {summary['log_scale']['r_hat']:.3f} "
              f"| {', '.join(f'{m:.3f}' for m in w.mean(axis=(0, 1)))} "
              f"| {summary['w']['n_eff'].min():.0f} | {'warned' if warned else 'quiet'} |")


if __name__ == "__main__":
    main()
