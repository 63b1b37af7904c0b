"""What sets how far a Gibbs site moves under the SG step's bias: for default ``SGGibbs(SGLD)``
runs (4 vectorised chains of 2,000 + ``--num-samples`` steps) on the prior-dominated Gaussian
regression of ``gibbs_prior_scale_bias.py`` (9 and 36 children) and on German credit's sparse
logistic regression (at the default and at ``target_bias=0.2``), the quantities a run itself
measures: the weakly informed children's count, the decentred children's variance inflation
(the equipartition readings of ``"w_decentered"`` less 1, ``numpyro_sgrld.check(mcmc)``),
the global scale's bulk ESS (``log tau``) and the children's median bulk ESS, and their
product ``(T - 1) x ESS(w) / ESS(log tau)``, beside the global scale's mean error measured
by the records of ``gibbs_prior_scale_bias.py`` and ``gibbs_sparse_logistic.py`` (given as
constants below, with their records)::

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
import gibbs_sparse_logistic as sparse  # noqa: E402
from numpyro_sgrld.models import logistic_regression as lr  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402

#: ``log tau``'s mean error (reference sds) of the same configurations' records:
#: docs/results/gibbs_prior_scale_bias_9.json and _36.json (seed 0, 100,000 draws a chain);
#: gibbs_sparse_logistic_step_bias.json (SGLD, mean of seeds 0-2) and
#: gibbs_sparse_logistic_step_bias_whole.json (a fixed half of target_bias 0.2, SGLD).
MEASURED = {"prior, 9 children": 0.269, "prior, 36 children": 0.435,
            "German credit": 0.036, "German credit, target_bias=0.2": 0.089}


def runs():
    for n in (9, 36):
        X, y = prior.data(n)
        yield (f"prior, {n} children", ns.SGGibbs(ns.SGLD(prior.model)),
               (jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)))
    X, y = lr.load_german_credit()
    model = partial(sparse.centred, subsample_size=100)
    yield "German credit", ns.SGGibbs(ns.SGLD(model)), (jnp.asarray(X), jnp.asarray(y))
    yield ("German credit, target_bias=0.2", ns.SGGibbs(ns.SGLD(model, target_bias=0.2)),
           (jnp.asarray(X), jnp.asarray(y)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-samples", type=int, default=40_000)
    a = parser.parse_args()
    print("| run | children (count) | T - 1 of the children | ESS log tau | median ESS w "
          "| (T - 1) x ESS ratio | log tau error (sd, its record) | error / product |")
    print("|---|---|---|---|---|---|---|---|")
    for name, kernel, args in runs():
        mcmc = MCMC(kernel, num_warmup=2000, num_samples=a.num_samples, num_chains=4,
                    chain_method="vectorized", progress_bar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc.run(jax.random.PRNGKey(0), *args)
        readings = ns.check(mcmc, warn=False).temperatures
        inflation = float(np.mean([e for n, e in zip(readings.names, readings.estimate)
                                   if n.startswith("w_decentered")])) - 1
        draws = mcmc.get_samples(group_by_chain=True)
        ess_scale = float(numpyro.diagnostics.effective_sample_size(
            np.log(np.asarray(draws["tau"], np.float64))))
        ess_children = float(np.median(numpyro.diagnostics.effective_sample_size(
            np.asarray(draws["w"], np.float64))))
        product = inflation * ess_children / ess_scale
        print(f"| {name} | {float(np.mean(mcmc.last_state.children)):.1f} | {inflation:.4f} "
              f"| {ess_scale:.0f} | {ess_children:.0f} | {product:.4f} | {MEASURED[name]:+.3f} "
              f"| {MEASURED[name] / product:.1f} |", flush=True)


if __name__ == "__main__":
    main()
