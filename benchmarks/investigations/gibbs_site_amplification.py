"""What sets how far a Gibbs site moves under the SG step's bias: ``SGGibbs(K(model))`` runs (4
vectorised chains of 2,000 + ``--num-samples`` steps) on the prior-dominated Gaussian
regression of ``gibbs_prior_scale_bias.py`` (9 and 36 children; ``tau``'s posterior exact by
quadrature), on German credit's sparse logistic regression and its 60-predictor form
(``gibbs_scale_bias_width.py``; NUTS references cached in ``docs/results``), and on the
random-intercept regression (``gibbs_random_intercept.py``; the group scale ``sigma``), and
for each the quantities the run itself measures: the weakly informed children's count, the
decentred children's variance inflation (the mean equipartition reading of the children's
decentred coordinates less 1, ``numpyro_sgrld.check(mcmc)``), the scale's bulk ESS (its log)
and the children's median bulk ESS, and the product ``(T - 1) x ESS(children) / ESS(log
scale)``, beside the scale's own mean error in reference sds (with its Monte Carlo error)
and whether the verdict warned::

    python benchmarks/investigations/gibbs_site_amplification.py
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
from numpyro.infer import MCMC

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy"))
sys.path.insert(0, str(ROOT / "benchmarks" / "investigations"))
import gibbs_prior_scale_bias as prior  # noqa: E402
import gibbs_random_intercept as intercept  # noqa: E402
import gibbs_scale_bias_width as width  # noqa: E402
import gibbs_sparse_logistic as sparse  # noqa: E402
from numpyro_sgrld.models import logistic_regression as lr  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402


def configurations(cache):
    """``(name, kernel, args, scale site, children site, (mean, sd) of the log scale)``."""
    X, y = prior.data(9)
    for name in ("SGLD", "SGHMC", "BADODAB"):
        yield (f"prior, 9 children, {name}", ns.SGGibbs(getattr(ns, name)(prior.model)),
               (jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)), "tau", "w",
               prior.exact(X, y))
    X, y = prior.data(36)
    yield ("prior, 36 children, SGLD", ns.SGGibbs(ns.SGLD(prior.model)),
           (jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)), "tau", "w",
           prior.exact(X, y))
    X, y = lr.load_german_credit()
    X, y = jnp.asarray(X), jnp.asarray(y)
    ref = sparse.reference(X, y, cache)["log_tau"]
    model = partial(sparse.centred, subsample_size=100)
    for name, own in (("SGLD", {}), ("SGHMC", {}), ("BADODAB", {}),
                      ("BADODAB", {"target_bias": 0.4})):
        label = ", target_bias=0.4" if own else ""
        yield (f"German credit, {name}{label}", ns.SGGibbs(getattr(ns, name)(model, **own)),
               (X, y), "tau", "w", (float(ref["mean"][0]), float(ref["sd"][0])))
    X, y = width.data(60, 6)
    ref = width.reference(X, y, 4000, cache)["log_tau"]
    for name, own in (("SGLD", {}), ("BADODAB", {"target_bias": 0.4})):
        label = ", target_bias=0.4" if own else ""
        yield (f"60 predictors, {name}{label}", ns.SGGibbs(getattr(ns, name)(model, **own)),
               (X, y), "tau", "w", (float(ref["mean"][0]), float(ref["sd"][0])))
    args = intercept.data()[:3]
    ref = intercept.reference(args, cache)["log_sigma"]
    yield ("random intercept, SGLD",
           ns.SGGibbs(ns.SGLD(partial(intercept.model, subsample_size=1000))), args, "sigma",
           "alpha", (float(ref["mean"][0]), float(ref["sd"][0])))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-samples", type=int, default=40_000)
    parser.add_argument("--cache", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument("--only", default=None, help="the configurations whose name holds it")
    a = parser.parse_args()
    print("| run | children (count) | T - 1 of the children | ESS log scale | median ESS "
          "children | (T - 1) x ESS ratio | log scale error (sd) | its se | verdict |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, kernel, args, scale, children, (mean, sd) in configurations(a.cache):
        if a.only is not None and a.only not in name:
            continue
        mcmc = MCMC(kernel, num_warmup=2000, num_samples=a.num_samples, num_chains=4,
                    chain_method="vectorized", progress_bar=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc.run(jax.random.PRNGKey(0), *args)
        warned = any("cannot be trusted" in str(c.message) for c in caught)
        readings = ns.check(mcmc, warn=False).temperatures
        inflation = float(np.mean([e for n, e in zip(readings.names, readings.estimate)
                                   if n.startswith(f"{children}_decentered")])) - 1
        draws = mcmc.get_samples(group_by_chain=True)
        log_scale = np.log(np.asarray(draws[scale], np.float64))
        ess_scale = float(numpyro.diagnostics.effective_sample_size(log_scale))
        ess_children = float(np.median(numpyro.diagnostics.effective_sample_size(
            np.asarray(draws[children], np.float64))))
        product = inflation * ess_children / ess_scale
        err = (log_scale.mean() - mean) / sd
        se = log_scale.std() / np.sqrt(ess_scale) / sd
        print(f"| {name} | {float(np.mean(mcmc.last_state.children)):.1f} | {inflation:+.4f} "
              f"| {ess_scale:.0f} | {ess_children:.0f} | {product:+.4f} | {err:+.3f} "
              f"| {se:.3f} | {'warned' if warned else 'quiet'} |", flush=True)


if __name__ == "__main__":
    main()
