"""Whether the unit-horseshoe network's weights within Gibbs are off their posterior's spread
because the children's data curvature :math:`F` is stale: learnt in warm-up, where the centred
sweep holds the scales small, and frozen, while the non-centred draws after warm-up move the
scales up to NUTS's, where the units saturate and :math:`F` is smaller.

``SGGibbs(SGLD(model))`` at its defaults on ``cancer_unit_horseshoe`` (4 vectorised chains,
2,000 warm-up and 6,000 steps, so that the draws have moved the scales), then two
continuations of 16,000 steps from the same state (every 40th kept): one with :math:`F` as
warm-up left it, one with :math:`F` learnt again at the chains' last position
(``gibbs_warmup.learn_curvature`` applied 500 times there: its average then holds less than
1 % of the warm-up's). Each is judged by the equipartition reading recomputed from its draws
with the exact full-data gradient given the scales
(``gibbs_network_equipartition.readings``: 1 at draws of the posterior) and by the global
log scale's mean against NUTS's ensemble ``a``::

    python benchmarks/record.py docs/results/gibbs_network_curvature.json -- \\
        python benchmarks/investigations/gibbs_network_curvature.py
"""

import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "references"))
sys.path.insert(0, str(ROOT / "benchmarks" / "investigations"))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import jax  # noqa: E402
import numpy as np  # noqa: E402
from gibbs_network_equipartition import readings  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402
from presets import reference  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402
from numpyro_sgrld.sampler import gibbs_warmup  # noqa: E402

NAME = "cancer_unit_horseshoe"
GLOBAL = "net/mlp/linear_0/w_global"
RELEARN = 500


def continued(kernel, state, train, num_samples=16_000):
    """The draws of ``num_samples`` more steps from ``state`` (after warm-up)."""
    mcmc = MCMC(kernel, num_warmup=2000, num_samples=num_samples, num_chains=4,
                chain_method="vectorized", thinning=40, progress_bar=False)
    mcmc.post_warmup_state = state
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(state.rng_key, *train)
    return {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}


def main():
    problem = P.PROBLEMS[NAME]()
    train = problem["train"]
    ref, _ = reference(NAME)
    ref_global = ref[f"log_scale_a:{GLOBAL}"].ravel()
    kernel = ns.SGGibbs(ns.SGLD(problem["gibbs_model"]))
    mcmc = MCMC(kernel, num_warmup=2000, num_samples=6000, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), *train)
    state = mcmc.last_state
    print("after 2,000 + 6,000 steps, each chain's global log scale: "
          + ", ".join(f"{v:.2f}" for v in np.log(np.ravel(state.z[GLOBAL])))
          + f" (NUTS {ref_global.mean():.2f}, sd {ref_global.std():.2f})")
    gibbs = {k: state.z[k] for k in kernel.gibbs_sites}
    learn = jax.jit(kernel._warmup(gibbs_warmup.learn_curvature, train, {},
                                   children=kernel.decentred_sites))
    relearnt = state
    for _ in range(RELEARN):
        relearnt = learn(relearnt, gibbs)
    for site in kernel.decentred_sites:
        print(f"F at {site}: median {np.median(np.asarray(state.curvature[site])):.3g} as "
              f"warm-up left it, {np.median(np.asarray(relearnt.curvature[site])):.3g} "
              "learnt again at the chains' last position")
    runs = {"F as warm-up left it": state, "F learnt again": relearnt}
    values = {label: continued(kernel, start, train) for label, start in runs.items()}
    got = {label: readings(problem, d) for label, d in values.items()}
    sites = list(got["F as warm-up left it"])
    print("| continuation (16,000 steps) | global log scale: err (NUTS sd) | "
          + " | ".join(f"{s}: reading ± se" for s in sites) + " |")
    print("|---|---|" + "---|" * len(sites))
    for label, d in values.items():
        err = (np.log(d[GLOBAL]).mean() - ref_global.mean()) / ref_global.std()
        print(f"| {label} | {err:+.2f} | " + " | ".join(
            f"{got[label][s][0]:.2f} ± {got[label][s][1]:.2f}" for s in sites) + " |")


if __name__ == "__main__":
    main()
