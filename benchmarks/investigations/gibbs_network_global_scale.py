"""What the unit-horseshoe network's global scale follows within Gibbs: the network of
``benchmarks/accuracy/gibbs_network.py`` (``cancer_unit_horseshoe``, ``SGGibbs(SGLD(model))``
at its defaults, 4 vectorised chains of 2,000 + 20,000 steps, every 5th draw kept), with the
centred horseshoe's ridge move (:func:`numpyro_sgrld.bridges.priors.unit_ridge_move`, the
default) and without it (``--without-ridge``: a handler that strips the declared joint move,
so the scales are drawn one site at a time). Per run, the bulk ESS of the first layer's
``log tau`` (global scale), of the mean ``log lam_j`` (the ridge's direction, given the
weights), of the units' mean log weight norm, of the layer's log weight norm ``log ||W||``
and of ``log tau - log ||W||``; the within-chain correlation of ``log tau`` with
``log ||W||``; each chain's means; the wall time::

    python benchmarks/investigations/gibbs_network_global_scale.py --seeds 0 1 --without-ridge
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "references"))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import numpy as np  # noqa: E402
import numpyro  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402
from numpyro.primitives import Messenger  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402

NAME = "cancer_unit_horseshoe"
LAYER = "net/mlp/linear_0/w"


class without_joint_moves(Messenger):  # noqa: N801  (a NumPyro handler)
    """The model with every declared :class:`~numpyro_sgrld.Conditional`'s joint move
    removed: the sweep then draws each scale given the others alone."""

    def process_message(self, msg):
        conditional = msg.get("infer", {}).get(ns.CONDITIONAL)
        if conditional is not None and conditional.joint is not None:
            msg["infer"] = {**msg["infer"], ns.CONDITIONAL: conditional._replace(joint=None)}


def ess(x):
    """Bulk ESS of ``(chains, draws)``."""
    return float(numpyro.diagnostics.effective_sample_size(np.asarray(x)[..., None])[0])


def run(problem, ridge, seed):
    model = problem["gibbs_model"]
    model = model if ridge else without_joint_moves(model)
    kernel = ns.SGGibbs(ns.SGLD(model))
    mcmc = MCMC(kernel, num_warmup=2000, num_samples=20_000, num_chains=4, thinning=5,
                chain_method="vectorized", progress_bar=False)
    seconds = P.timed_run(mcmc, seed, problem)
    s = mcmc.get_samples(group_by_chain=True)
    log_tau = np.log(np.asarray(s[f"{LAYER}_global"], np.float64)).reshape(4, -1)
    log_lam = np.log(np.asarray(s[f"{LAYER}_local"], np.float64))
    w = np.asarray(s[LAYER], np.float64)
    unit_norm = 0.5 * np.log((w**2).sum(axis=2)).mean(-1)
    norm = 0.5 * np.log((w**2).sum(axis=(2, 3)))
    a, b = log_tau - log_tau.mean(1, keepdims=True), norm - norm.mean(1, keepdims=True)
    corr = float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))
    label = "ridge move (default)" if ridge else "one site at a time"
    print(f"| {seed} | {label} | {ess(log_tau):.0f} | {ess(log_lam.mean(-1)):.0f} "
          f"| {ess(unit_norm):.0f} | {ess(norm):.0f} | {ess(log_tau - norm):.0f} "
          f"| {corr:.2f} | {', '.join(f'{m:.2f}' for m in log_tau.mean(1))} "
          f"| {', '.join(f'{m:.2f}' for m in norm.mean(1))} | {seconds:.0f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--without-ridge", action="store_true",
                        help="also run each seed with the scales drawn one site at a time")
    a = parser.parse_args()
    problem = P.PROBLEMS[NAME]()
    print("| seed | scales' sweep | ESS log tau | ESS mean log lam | ESS units' mean log norm "
          "| ESS log norm | ESS log tau - log norm | corr(log tau, log norm) within chains "
          "| chains' mean log tau | chains' mean log norm | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for seed in a.seeds:
        for ridge in (True, False) if a.without_ridge else (True,):
            run(problem, ridge, seed)


if __name__ == "__main__":
    main()
