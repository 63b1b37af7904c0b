"""How often the non-centred draws run after warm-up, against what they buy: the unit-horseshoe
network of ``benchmarks/accuracy/gibbs_network.py`` (``cancer_unit_horseshoe``,
``SGGibbs(SGLD(model))`` at its defaults, 4 sequential chains of 2,000 + 20,000 steps, seed 0)
with the interweaving schedule's step count after warm-up set to each of ``--every`` (the
default's is :func:`~numpyro_sgrld.sampler.interweaving.auto_every`, 213 here: its cost model
counts the draws' full-data rows against the SG steps' minibatch rows). Per run: the global
log scale's bulk ESS, its mean error against NUTS's ensemble ``a`` (in ``a``'s sds), each
chain's mean, the per-unit scales' smallest ESS, the predictive's TV and agreement against
``a`` (the band of the network references), and the run's wall time::

    python benchmarks/investigations/gibbs_interweave_rate.py --every 213 53 26
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
from presets import distances, reference  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402
from numpyro_sgrld.sampler import interweaving  # noqa: E402

NAME = "cancer_unit_horseshoe"
GLOBAL = "net/mlp/linear_0/w_global"
LOCAL = "net/mlp/linear_0/w_local"


def run(problem, every, seed):
    """One run with the schedule's steps after warm-up set to ``every``."""
    original = interweaving.schedule

    def schedule(*args, **kwargs):
        plan = original(*args, **kwargs)
        return None if plan is None else plan._replace(every=every)

    interweaving.schedule = schedule
    try:
        kernel = ns.SGGibbs(ns.SGLD(problem["gibbs_model"]))
        mcmc = MCMC(kernel, num_warmup=2000, num_samples=20_000, num_chains=4, thinning=20,
                    chain_method="sequential", progress_bar=False)
        seconds = P.timed_run(mcmc, seed, problem)
    finally:
        interweaving.schedule = original
    return mcmc, kernel, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every", type=int, nargs="+", default=[213, 53, 26])
    parser.add_argument("--seed", type=int, default=0)
    a = parser.parse_args()
    problem = P.PROBLEMS[NAME]()
    ref, _ = reference(NAME)
    nuts = ref[f"log_scale_a:{GLOBAL}"].reshape(-1)
    print("| steps between draws | global log scale: ESS, err (sd), chains' means | unit scales' "
          "smallest ESS | TV | agreement | within the band | time (s) |")
    print("|---|---|---|---|---|---|---|")
    for every in a.every:
        mcmc, kernel, seconds = run(problem, every, a.seed)
        by_chain = mcmc.get_samples(group_by_chain=True)
        g = np.log(np.asarray(by_chain[GLOBAL], np.float64)).reshape(4, -1, 1)
        units = np.log(np.asarray(by_chain[LOCAL], np.float64)).reshape(4, g.shape[1], -1)
        ess = float(numpyro.diagnostics.effective_sample_size(g)[0])
        unit_ess = float(np.min(numpyro.diagnostics.effective_sample_size(np.sort(units, -1))))
        err = (g.mean() - nuts.mean()) / nuts.std()
        samples = {k: v for k, v in mcmc.get_samples().items() if k.startswith("net/")}
        d = distances(problem, P.predictive({**problem, "full": problem["gibbs_full"]},
                                            samples), ref)
        print(f"| {every} ({kernel.interweave_schedule.every}) | {ess:.0f}, {err:+.3f}, "
              f"{', '.join(f'{m:.2f}' for m in g.mean((1, 2)))} | {unit_ess:.0f} "
              f"| {d['distance']:.4f} | {d['agreement']:.3f} | {'yes' if d['close'] else 'no'} "
              f"| {seconds:.0f} |", flush=True)
    print(f"NUTS a: global log scale {nuts.mean():.2f} (sd {nuts.std():.2f})")


if __name__ == "__main__":
    main()
