"""Whether the chains' common start moves what the verdict reads: on German credit's sparse
regression (the centred model of ``benchmarks/accuracy/gibbs_sparse_logistic.py``),
``SGGibbs(SGLD(model))`` at its defaults starts each chain at its own control variates'
mode search (before commit 04f80bb: every chain at one mode, the record at 3a9496e).
For each seed, the default run (4 vectorised chains of 2,000 + 20,000 from those points) and
the same kernel run again with a full warm-up from four points apart (``init_params``: the
first run's four last positions, each a draw of the posterior), each with its smallest bulk
ESS over ``log tau``, ``log lam`` and ``w`` (and on each half of its draws), its largest
split R-hat, how many chains kept their control variates (``state.centre.on``), and the mean
over the 51 coordinates of :math:`z^2`, :math:`z` each mean's error against the NUTS reference
in the run's own ESS-based standard errors (``sd / sqrt(ESS)``): about 1 where
the ESS is right (the reference's own error, at most 0.010 of its sd, and the step's bias
add a little), above 1 where it reads high::

    python benchmarks/record.py docs/results/gibbs_common_start_ess.json -- \\
        python benchmarks/investigations/gibbs_common_start_ess.py --seeds 0 1 2
"""

import argparse
import sys
import warnings
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
from numpyro.infer import MCMC

import numpyro_sgrld as ns

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "accuracy"))
from gibbs_sparse_logistic import centred, judged, reference  # noqa: E402


def readings(mcmc, ref):
    """``(min ESS, its coordinate, min ESS of the first and second half, max R-hat, mean z^2)``
    (module docstring)."""
    draws = judged(mcmc.get_samples(group_by_chain=True))
    v = np.concatenate([draws[k].reshape(draws[k].shape[0], draws[k].shape[1], -1)
                        for k in ref], -1)
    mean = np.concatenate([ref[k]["mean"] for k in ref])
    half = v.shape[1] // 2
    ess = effective_sample_size(v)
    flat = v.reshape(-1, v.shape[-1])
    z = (flat.mean(0) - mean) / (flat.std(0) / np.sqrt(ess))
    return (float(ess.min()), int(ess.argmin()), float(effective_sample_size(v[:, :half]).min()),
            float(effective_sample_size(v[:, half:]).min()), float(split_gelman_rubin(v).max()),
            float(np.mean(z**2)))


def main():
    from numpyro_sgrld.models import logistic_regression as lr

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    a = parser.parse_args()
    X, y = lr.load_german_credit()
    X, y = jnp.asarray(X), jnp.asarray(y)
    model = partial(centred, subsample_size=100)
    ref = reference(X, y, Path("docs/results"))
    print("| seed | start | min bulk ESS (coordinate) | first half | second half | max R-hat "
          "| chains with control variates | mean z^2 |")
    print("|---|---|---|---|---|---|---|---|")
    for seed in a.seeds:
        last = None
        for label in ("one point (the default)", "four points apart"):
            mcmc = MCMC(ns.SGGibbs(ns.SGLD(model)), num_warmup=2000, num_samples=20000,
                        num_chains=4, chain_method="vectorized", progress_bar=False)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mcmc.run(jax.random.PRNGKey(seed if last is None else seed + 200), X, y,
                         init_params=last)
            ess, where, first, second, rhat, z2 = readings(mcmc, ref)
            on = int(np.sum(np.asarray(mcmc.last_state.centre.on)))
            print(f"| {seed} | {label} | {ess:.0f} ({where}) | {first:.0f} | {second:.0f} | "
                  f"{rhat:.3f} | {on} of 4 | {z2:.2f} |", flush=True)
            last = mcmc.last_state.z


if __name__ == "__main__":
    main()
