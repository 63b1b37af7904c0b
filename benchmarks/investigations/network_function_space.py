"""A network's chains in function space: the log-likelihood of the verdict's fixed evaluation
batch along each chain, for SGLD at its defaults on the digits horseshoe MLP, with the default
warm-up and with a longer one.

    OUT=docs/results/network_function_space.jsonl
    python benchmarks/investigations/network_function_space.py --warmup 2000 --out $OUT
    python benchmarks/investigations/network_function_space.py --warmup 12000 --out $OUT
    python benchmarks/investigations/network_function_space.py --init unit_scales --out $OUT

``--init unit_scales`` starts the chains with ``priors.init_to_unit_scales`` instead of the
kernels' default (NumPyro's ``init_to_uniform``).

Each row: the warm-up, each chain's mean evaluation log-likelihood over ten consecutive
segments of the kept draws (every 20th of 20,000 steps), the split R-hat and bulk ESS of that
log-likelihood over the kept draws, the ensemble's test NLL, and the run's own verdict.
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import jax
import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
from numpyro.infer import MCMC

import numpyro_sgrld as ns
from numpyro_sgrld.verdict import evaluation
from numpyro_sgrld.verdict.judge import with_evaluation

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "accuracy"))
import defaults  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--kernel", default="SGLD")
    parser.add_argument("--init", choices=["uniform", "unit_scales"], default="uniform")
    parser.add_argument("--out", type=Path, required=True)
    a = parser.parse_args()
    problem = defaults.digits_bnn()
    init = {} if a.init == "uniform" else {"init_strategy": ns.priors.init_to_unit_scales}
    kernel = getattr(ns, a.kernel)(problem["model"], **init)
    mcmc = MCMC(kernel, num_warmup=a.warmup, num_samples=20_000, num_chains=4, thinning=20,
                chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(0), *problem["args"])
        jax.effects_barrier()
        seconds = time.perf_counter() - start
    said = [str(w.message) for w in caught if "cannot be trusted" in str(w.message)]
    draws = mcmc.get_samples(group_by_chain=True)
    ell = np.asarray(with_evaluation(draws, kernel, constrained=True)[evaluation.NAME])
    segments = ell[:, : ell.shape[1] // 10 * 10].reshape(4, 10, -1).mean(-1)
    row = dict(kernel=a.kernel, warmup=a.warmup, init=a.init, seconds=seconds,
               segment_means=np.round(segments, 2).tolist(),
               rhat=float(split_gelman_rubin(ell)), ess=float(effective_sample_size(ell)),
               warned=bool(said), warning=said[0][:600] if said else "",
               **problem["evaluate"](mcmc))
    with open(a.out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
