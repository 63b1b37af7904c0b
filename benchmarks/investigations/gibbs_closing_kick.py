"""The momentum kernels' closing half kick across a Gibbs sweep
(``numpyro_sgrld.sampler.gibbs_kick``), carried and not: a Gaussian linear regression whose
9 weights ``w_j ~ N(0, tau^2)`` the data barely touch (``tau ~ Gamma(2, 2)``, 200 rows of
predictors of sd 0.1), whose ``log tau`` posterior is exact by quadrature
(``gibbs_prior_scale_bias.exact``). Each row: ``SGGibbs`` (a sweep every step) with a kernel
(BAOAB on the full data, exact gradients, at ``step_size=1.5``; BAOAB, BADODAB, SGHMC and
SGNHT on minibatches of 20 at their defaults), 4 vectorised chains of 1,000 +
``--num-samples`` steps, seed 0; ``log tau``'s mean error in posterior sds with its ESS-based
error, its sd ratio, bulk ESS, once with the half kick carried (the library's) and once read
from the next step's gradient as it is (``prior_gradient`` replaced by ``None`` for the
run)::

    python benchmarks/investigations/gibbs_closing_kick.py

``--composition``: BAOAB with exact gradients and the half kick carried, at ``step_size``
1.5, 0.75 and 0.375, ``--chains`` vectorised chains (64) at each of ``--seeds`` (1 2), and
as read at the first seed:
within Gibbs the momentum a sweep carries over is in BAOAB's equilibrium for the scale it
was drawn under, whose law given the position depends on that scale, so the composition's
``log tau`` can move with the step where BAOAB alone samples a Gaussian exactly::

    python benchmarks/investigations/gibbs_closing_kick.py --composition
"""

import argparse
import sys
import warnings
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gibbs_prior_scale_bias import exact  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402
from numpyro_sgrld.sampler import gibbs_kick  # noqa: E402


def model(X, y, subsample_size=None):
    tau = numpyro.sample("tau", dist.Gamma(2.0, 2.0))
    w = numpyro.sample("w", dist.Normal(0.0, tau).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])


RUNS = {  # name: (kernel, its arguments, the model's minibatch)
    "BAOAB, exact gradients, step_size=1.5": ("BAOAB", {"step_size": 1.5}, None),
    "BAOAB, minibatch 20, defaults": ("BAOAB", {}, 20),
    "BADODAB, minibatch 20, defaults": ("BADODAB", {}, 20),
    "SGHMC, minibatch 20, defaults": ("SGHMC", {}, 20),
    "SGNHT, minibatch 20, defaults": ("SGNHT", {}, 20),
}


def run(name, carried, X, y, num_samples, num_chains=4, seed=0, step_size=None):
    kernel, own, subsample_size = RUNS[name]
    own = own if step_size is None else {**own, "step_size": step_size}
    original = gibbs_kick.prior_gradient
    if not carried:
        gibbs_kick.prior_gradient = lambda *a: None
    try:
        mcmc = MCMC(ns.SGGibbs(getattr(ns, kernel)(partial(model, subsample_size=subsample_size),
                                                   **own)),
                    num_warmup=1000, num_samples=num_samples, num_chains=num_chains,
                    chain_method="vectorized", progress_bar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc.run(jax.random.PRNGKey(seed), jnp.asarray(X, jnp.float32),
                     jnp.asarray(y, jnp.float32))
    finally:
        gibbs_kick.prior_gradient = original
    draws = np.log(np.asarray(mcmc.get_samples(group_by_chain=True)["tau"], np.float64))
    ess = float(numpyro.diagnostics.effective_sample_size(draws))
    mean, sd = exact(X, y)
    return ((draws.mean() - mean) / sd, draws.std() / np.sqrt(ess) / sd, draws.std() / sd, ess)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-samples", type=int, default=20_000)
    parser.add_argument("--composition", action="store_true",
                        help="BAOAB with exact gradients, the half kick carried, at three steps")
    parser.add_argument("--chains", type=int, default=64)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    a = parser.parse_args()
    rng = np.random.default_rng(0)
    X, y = 0.1 * rng.normal(size=(200, 9)), rng.normal(size=200)
    if a.composition:
        composition(a, X, y)
        return
    print("| run | half kick | log tau error (sd) ± se | sd ratio | bulk ESS |")
    print("|---|---|---|---|---|")
    for name in RUNS:
        for carried in (True, False):
            err, se, ratio, ess = run(name, carried, X, y, a.num_samples)
            print(f"| {name} | {'carried' if carried else 'as read'} | {err:+.3f} ± {se:.3f} "
                  f"| {ratio:.3f} | {ess:.0f} |", flush=True)


def composition(a, X, y):
    """BAOAB, exact gradients, carried: ``log tau``'s error at three steps, each seed's and
    their inverse-variance mean."""
    name = "BAOAB, exact gradients, step_size=1.5"
    print("| step_size | seed | log tau error (sd) ± se | sd ratio | bulk ESS |")
    print("|---|---|---|---|---|")
    for step_size in (1.5, 0.75, 0.375):
        found = []
        for seed in a.seeds:
            err, se, ratio, ess = run(name, True, X, y, a.num_samples, a.chains, seed, step_size)
            found.append((err, se))
            print(f"| {step_size} | {seed} | {err:+.4f} ± {se:.4f} | {ratio:.4f} | {ess:.0f} |",
                  flush=True)
        weights = np.array([1 / se ** 2 for _, se in found])
        mean = np.sum(weights * np.array([e for e, _ in found])) / weights.sum()
        print(f"| {step_size} | all | {mean:+.4f} ± {1 / np.sqrt(weights.sum()):.4f} | | |",
              flush=True)
        err, se, ratio, ess = run(name, False, X, y, a.num_samples, a.chains, a.seeds[0],
                                  step_size)
        print(f"| {step_size}, as read | {a.seeds[0]} | {err:+.4f} ± {se:.4f} | {ratio:.4f} "
              f"| {ess:.0f} |", flush=True)


if __name__ == "__main__":
    main()
