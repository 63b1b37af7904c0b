"""Whether the verdict's equipartition reading on the unit-horseshoe network within Gibbs is
the draws' or the check's: the reading recomputed from the draws themselves, with the
full-data gradient, at NUTS's draws and at ``SGGibbs(SGLD(model))``'s (its defaults), site by
site.

For any smooth posterior :math:`p \\propto e^{-U}`, :math:`\\mathbb E_p[(x_i - c)\\,\\partial_i U]
= 1` for every coordinate (``numpyro_sgrld.core.equipartition``). Given the Gibbs sites (the
first layer's global and per-unit scales) the SG sites' conditional is
:math:`e^{-U(x \\mid g)}`, so at draws of the joint posterior each SG site's average of
:math:`(x_i - \\bar x_i)\\,\\partial_i U(x \\mid g)` over its coordinates and the draws reads 1,
whatever the coordinates (the kernel's own reading, in its decentred coordinates with its
minibatch gradient, estimates the same). :math:`U` here is the centred model's
(``gibbs_full``: all 400 rows) potential with the scales conditioned on, its gradient exact.
NUTS (4 chains of 400 warm-up and 200 draws, non-centred as the reference writes the model,
the first layer's weights recorded as their product) gives the posterior's readings; the
SG run (4 vectorised chains, 2,000 warm-up and 20,000 steps, every 50th kept) gives its own.
The readings' standard errors come from the draws' batch means (4 chains x 5 batches). The
first layer's weights read heavy-tailed products (a saturated unit far out), so their reading
and its error depend on whether the draws reach the tail: ``--nuts-draws 2000`` (and another
seed) gives NUTS's reading from ten times the draws::

    python benchmarks/record.py docs/results/gibbs_network_equipartition.json -- \\
        python benchmarks/investigations/gibbs_network_equipartition.py
    python benchmarks/record.py docs/results/gibbs_network_equipartition_long_nuts.json -- \\
        python benchmarks/investigations/gibbs_network_equipartition.py --nuts-draws 2000 \\
        --nuts-seed 11
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "references"))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from numpyro import handlers  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402
from numpyro.infer.util import potential_energy  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402

NAME = "cancer_unit_horseshoe"
GIBBS = ("net/mlp/linear_0/w_global", "net/mlp/linear_0/w_local")
BATCHES = 5


def readings(problem, draws):
    """``{site: (reading, se)}``: each SG site's :math:`(x - \\bar x)\\cdot\\partial U / d` at
    ``draws`` (``(chains, draws, ...)`` each), the mean over its coordinates and the draws,
    with the batch means' standard error (``BATCHES`` a chain)."""
    X, y = problem["train"]
    sites = sorted(k for k in draws if k.startswith("net/") and k not in GIBBS
                   and not k.endswith("_raw"))

    def energy(params, gibbs):
        return potential_energy(handlers.condition(problem["gibbs_full"], data=gibbs), (X, y),
                                {}, params)

    grad = jax.jit(jax.vmap(jax.grad(energy)))
    chains, n = draws[GIBBS[0]].shape[:2]
    flat = {k: jnp.asarray(v).reshape((chains * n,) + v.shape[2:]) for k, v in draws.items()}
    g = grad({k: flat[k] for k in sites}, {k: flat[k] for k in GIBBS})
    out = {}
    for k in sites:
        x = np.asarray(flat[k], np.float64).reshape(chains * n, -1)
        products = ((x - x.mean(0)) * np.asarray(g[k], np.float64).reshape(x.shape)).mean(1)
        batches = products.reshape(chains * BATCHES, -1).mean(1)
        out[k] = (products.mean(), batches.std(ddof=1) / np.sqrt(batches.size))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nuts-draws", type=int, default=200,
                        help="NUTS's draws per chain (after 400 warm-up steps)")
    parser.add_argument("--nuts-seed", type=int, default=7)
    a = parser.parse_args()
    problem = P.PROBLEMS[NAME]()
    start = time.perf_counter()
    nuts = MCMC(NUTS(problem["full"], init_strategy=P.INIT()), num_warmup=400,
                num_samples=a.nuts_draws, num_chains=4, chain_method="sequential",
                progress_bar=False)
    nuts.run(jax.random.PRNGKey(a.nuts_seed), *problem["train"])
    nuts_seconds = time.perf_counter() - start
    kernel = ns.SGGibbs(ns.SGLD(problem["gibbs_model"]))
    sg = MCMC(kernel, num_warmup=2000, num_samples=20000, num_chains=4, thinning=50,
              chain_method="vectorized", progress_bar=False)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sg.run(jax.random.PRNGKey(0), *problem["train"])
    sg_seconds = time.perf_counter() - start
    said = [str(w.message) for w in caught if "cannot be trusted" in str(w.message)]
    runs = {f"NUTS (4 x {a.nuts_draws} draws)": nuts,
            "SGGibbs(SGLD), defaults (4 x 400 kept)": sg}
    values = {label: readings(problem, {k: np.asarray(v) for k, v in
                                        m.get_samples(group_by_chain=True).items()})
              for label, m in runs.items()}
    print(f"NUTS {nuts_seconds:.0f} s, SGGibbs {sg_seconds:.0f} s; the SG run's verdict: "
          + (said[0].split(". ")[0] if said else "quiet"))
    labels = list(values)
    print("| site | " + " | ".join(f"{label}: reading ± se" for label in labels) + " |")
    print("|---|" + "---|" * len(labels))
    for site in values[labels[0]]:
        print(f"| {site} | " + " | ".join(f"{values[label][site][0]:.3f} ± "
                                          f"{values[label][site][1]:.3f}"
                                          for label in labels) + " |")


if __name__ == "__main__":
    main()
