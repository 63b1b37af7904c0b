"""Where SGGibbs(SGLD)'s quiet runs on German credit's sparse regression miss the sd tolerance:
the widest coordinate of each run, chain by chain, and what ArviZ's tail diagnostics read.

Each run: ``SGGibbs(SGLD)`` at its defaults (as ``benchmarks/accuracy/gibbs_sparse_logistic.py``
runs it: the centred model, minibatch 100, 4 vectorised chains) of ``num_warmup +
num_samples`` steps at a seed; against the NUTS reference (``gibbs_sparse_logistic_reference.npz``,
4 x 20,000 draws): the largest |mean error| (sd) and the sd ratios' range over the 51 judged
coordinates (``log tau``, ``log lam``, ``w``), whether the verdict warned, the smallest bulk
and tail ESS and the largest rank-normalised and folded split R-hat (ArviZ, Vehtari et al.
2021) over those coordinates, and the widest coordinate: its sd ratio and mean error pooled
and in each chain. A run whose widest coordinate is wide in every chain is not one chain's
visit to a tail::

    python benchmarks/investigations/gibbs_widest_coordinate.py
"""

import argparse
import sys
from pathlib import Path

import arviz as az
import jax.numpy as jnp

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy"))
sys.path.insert(0, str(ROOT / "benchmarks"))
import gibbs_sparse_logistic as g  # noqa: E402
from numpyro_sgrld.models import logistic_regression as lr  # noqa: E402
from reference_moments import errors  # noqa: E402

RUNS = ((2, 4000, 4000), (2, 8000, 8000), (2, 2000, 20000), (0, 2000, 20000))


def diagnostics(draws):
    """The smallest bulk and tail ESS and the largest rank and folded split R-hat."""
    ds = az.convert_to_dataset(draws)
    return (min(float(az.ess(ds, method="bulk")[k].min()) for k in draws),
            min(float(az.ess(ds, method="tail")[k].min()) for k in draws),
            max(float(az.rhat(ds, method="rank")[k].max()) for k in draws),
            max(float(az.rhat(ds, method="folded")[k].max()) for k in draws))


def widest(draws, ref):
    """``(name, index, sd ratio, mean error, per-chain sd ratios, per-chain mean errors)``."""
    rows = []
    for name, r in ref.items():
        for j in range(draws[name].shape[-1]):
            x = draws[name][..., j]
            rows.append((name, j, x.std() / r["sd"][j], (x.mean() - r["mean"][j]) / r["sd"][j],
                         x.std(1) / r["sd"][j], (x.mean(1) - r["mean"][j]) / r["sd"][j]))
    return max(rows, key=lambda t: t[2])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", default=[",".join(map(str, r)) for r in RUNS],
                        metavar="SEED,WARMUP,SAMPLES")
    a = parser.parse_args()
    X, y = lr.load_german_credit()
    X, y = jnp.asarray(X), jnp.asarray(y)
    ref = g.reference(X, y, ROOT / "docs" / "results")
    print("| seed | steps | max mean err (sd) | sd ratios | verdict | min bulk ESS | min tail "
          "ESS | max rank R-hat | max folded R-hat | widest: sd ratio, mean err | its chains: "
          "sd ratios; mean errs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for run in a.runs:
        seed, warmup, samples = map(int, run.split(","))
        draws, _, warned, _ = g.sg_gibbs("SGLD", X, y, warmup, samples, seed=seed,
                                         chain_method="vectorized")
        worst, low, high = errors(draws, ref)
        bulk, tail, rank, folded = diagnostics(draws)
        name, j, ratio, err, chain_ratios, chain_errs = widest(draws, ref)
        print(f"| {seed} | {warmup:,} + {samples:,} | {worst:.3f} | {low:.3f}–{high:.3f} "
              f"| {'warned' if warned else 'quiet'} | {bulk:.0f} | {tail:.0f} | {rank:.4f} "
              f"| {folded:.4f} | {name}[{j}]: {ratio:.3f}, {err:+.3f} "
              f"| {', '.join(f'{v:.2f}' for v in chain_ratios)}; "
              f"{', '.join(f'{v:+.2f}' for v in chain_errs)} |", flush=True)


if __name__ == "__main__":
    main()
