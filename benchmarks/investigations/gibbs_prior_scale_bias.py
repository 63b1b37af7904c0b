"""How far the SG step's bias moves a Gibbs site whose children the data barely touch: a
Gaussian linear regression ``y ~ N(X w, 1)`` with ``--children`` weights ``w_j ~ N(0, tau^2)``,
``tau ~ Gamma(2, 2)``, on ``ROWS`` rows of predictors of sd ``SCALE`` (each weight's data
curvature about ``ROWS * SCALE^2 = 0.08``: every child counts as weakly informed), minibatch
20. ``tau``'s posterior is known exactly: given ``tau``, ``y ~ N(0, tau^2 X X^T + I)``, so
``log tau``'s posterior mean and sd come from a quadrature on a grid of 3,000 points.
``SGGibbs(SGLD(model, target_bias=...))`` (4 vectorised chains of 2,000 +
``--num-samples`` steps) draws ``tau`` exactly given ``w`` and moves ``w`` partially
non-centred; printed for each of ``--target-biases``: ``log tau``'s mean error in posterior
sds with its Monte Carlo error (ESS-based) and z-score, its sd ratio and bulk ESS, the
share of ``target_bias`` the step aimed at and the weakly informed children's count
(averaged over the chains), and whether the verdict warned::

    python benchmarks/investigations/gibbs_prior_scale_bias.py --children 36 \\
        --target-biases default 0.35 0.025
"""

import argparse
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

import numpyro_sgrld as ns

A, B = 2.0, 2.0  # tau's Gamma prior
ROWS, SCALE = 200, 0.02


def model(X, y, prior=(A, B)):
    tau = numpyro.sample("tau", dist.Gamma(*prior))
    w = numpyro.sample("w", dist.Normal(0.0, tau).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])


def data(children, seed=0, scale=SCALE):
    rng = np.random.default_rng(seed)
    return scale * rng.normal(size=(ROWS, children)), rng.normal(size=ROWS)


def exact(X, y, prior=(A, B)):
    r"""``log tau``'s posterior mean and sd: :math:`p(\log\tau \mid y) \propto
    \tau\,\mathrm{Gamma}(\tau; a, b)\,\mathcal N(y; 0, \tau^2 XX^\top + I)` on a grid
    (``prior``: :math:`(a, b)`)."""
    a, b = prior
    log_tau = np.linspace(-6.0, 3.0, 3000)
    eigenvalues, vectors = np.linalg.eigh(X @ X.T)
    z = vectors.T @ y
    variances = np.exp(2 * log_tau)[:, None] * eigenvalues + 1.0
    log_lik = -0.5 * np.sum(np.log(variances) + z ** 2 / variances, axis=1)
    log_p = log_lik + a * log_tau - b * np.exp(log_tau)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    mean = np.sum(p * log_tau)
    return mean, np.sqrt(np.sum(p * (log_tau - mean) ** 2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--children", type=int, default=36)
    parser.add_argument("--target-biases", nargs="+", default=["default"])
    parser.add_argument("--num-samples", type=int, default=100_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    a = parser.parse_args()
    X, y = data(a.children)
    mean, sd = exact(X, y)
    print(f"exact: log tau mean {mean:.3f}, sd {sd:.3f}")
    print("| target_bias | seed | share | weakly informed children | log tau err (sd) | its se "
          "| z | sd ratio | bulk ESS | verdict | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for given in a.target_biases:
        own = {} if given == "default" else {"target_bias": float(given)}
        for seed in a.seeds:
            mcmc = MCMC(ns.SGGibbs(ns.SGLD(model, **own)), num_warmup=2000,
                        num_samples=a.num_samples, num_chains=4, chain_method="vectorized",
                        progress_bar=False)
            start = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                mcmc.run(jax.random.PRNGKey(seed), jnp.asarray(X, jnp.float32),
                         jnp.asarray(y, jnp.float32))
            seconds = time.perf_counter() - start
            draws = np.log(np.asarray(mcmc.get_samples(group_by_chain=True)["tau"], np.float64))
            ess = float(numpyro.diagnostics.effective_sample_size(draws))
            err = (draws.mean() - mean) / sd
            se = draws.std() / np.sqrt(ess) / sd
            warned = any("cannot be trusted" in str(c.message) for c in caught)
            state = mcmc.last_state
            print(f"| {given} | {seed} | {float(np.mean(state.bias_share)):.3f} "
                  f"| {float(np.mean(state.children)):.1f} | {err:+.3f} | {se:.3f} "
                  f"| {err / se:+.1f} | {draws.std() / sd:.3f} | {ess:.0f} "
                  f"| {'warned' if warned else 'quiet'} | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
