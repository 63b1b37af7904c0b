"""What interweaving does to the unit-horseshoe network's scales in warm-up: one chain of
``SGGibbs(SGLD(model), interweave_every=K)`` (``--interweave-every``; ``0``: no interweaving)
on ``benchmarks/references/problems.py``'s ``cancer_unit_horseshoe`` (30-16-2 tanh network,
centred unit-wise horseshoe on the first layer), 2,000 warm-up steps collected, seed 0. Printed
every few steps: the global log scale, the per-unit log scales' smallest, median and largest,
the largest |first-layer weight|; at the end, the adapted step size::

    python benchmarks/investigations/gibbs_network_interweave.py --interweave-every 10
    python benchmarks/investigations/gibbs_network_interweave.py --interweave-every 0
"""

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "references"))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import jax  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402

LAYER = "net/mlp/linear_0/"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interweave-every", type=int, default=10)
    parser.add_argument("--num-warmup", type=int, default=2000)
    a = parser.parse_args()
    problem = P.PROBLEMS["cancer_unit_horseshoe"]()
    kernel = ns.SGGibbs(ns.SGLD(problem["gibbs_model"]),
                        interweave_every=a.interweave_every or None)
    mcmc = MCMC(kernel, num_warmup=a.num_warmup, num_samples=1, num_chains=1,
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.warmup(jax.random.PRNGKey(0), *problem["train"], collect_warmup=True)
    draws = mcmc.get_samples()
    log_tau = np.log(np.asarray(draws[LAYER + "w_global"])).ravel()
    log_lam = np.log(np.asarray(draws[LAYER + "w_local"]))
    w = np.abs(np.asarray(draws[LAYER + "w"])).reshape(len(log_tau), -1).max(axis=1)
    print("| warm-up step | log tau | log lam (min, median, max) | max abs first-layer w |")
    print("|---|---|---|---|")
    steps = sorted({*range(0, 40, 5), *range(40, a.num_warmup, a.num_warmup // 20)})
    for i in steps:
        lo, mid, hi = np.quantile(log_lam[i], [0.0, 0.5, 1.0])
        print(f"| {i} | {log_tau[i]:.2f} | {lo:.2f}, {mid:.2f}, {hi:.2f} | {w[i]:.3g} |")
    print(f"\nadapted step size at the warm-up's end: "
          f"{float(np.ravel(mcmc.last_state.sg_state.step_size)[0]):.3g}")


if __name__ == "__main__":
    main()
