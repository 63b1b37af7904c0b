"""The thermostat presets' adapted steps on a horseshoe network: BAOAB, SGNHT and BADODAB at
their defaults on a 64-H-10 horseshoe MLP on digits (``priors.horseshoe("layer")``,
minibatch 100), 4 vectorised chains, ``--warmup`` steps; each chain's adapted step and the
largest over the smallest. ``--carry-momentum`` runs the warm-up's approach with the
momentum carried from step to step (no :class:`~numpyro_sgrld.core.integrators.Overdamp`), as
before the approach redrew it::

    OUT=docs/results/thermostat_steps.jsonl
    python benchmarks/investigations/thermostat_steps.py --out $OUT
    python benchmarks/investigations/thermostat_steps.py --carry-momentum --out $OUT
"""

import argparse
import json
import time
from functools import partial
from pathlib import Path

import jax
import numpy as np
from numpyro.infer import MCMC
from numpyro_sgrld.models.bnn import load_digits, mlp_classifier

import numpyro_sgrld as ns
from numpyro_sgrld.warmup import steps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--kernels", nargs="+", default=["BAOAB", "SGNHT", "BADODAB"])
    parser.add_argument("--carry-momentum", action="store_true")
    parser.add_argument("--out", type=Path, required=True)
    a = parser.parse_args()
    if a.carry_momentum:
        steps.overdamped = lambda algorithm, new, *args: new
    X, y, _, _ = load_digits()
    model = partial(mlp_classifier, hidden=(a.hidden,), prior=ns.priors.horseshoe("layer"),
                    subsample_size=100)
    for name in a.kernels:
        t = time.perf_counter()
        mcmc = MCMC(getattr(ns, name)(model), num_warmup=a.warmup, num_samples=1,
                    num_chains=4, chain_method="vectorized", progress_bar=False)
        mcmc.warmup(jax.random.PRNGKey(0), X, y)
        s = np.asarray(mcmc.post_warmup_state.step_size, np.float64)
        row = dict(kernel=name, hidden=a.hidden, warmup=a.warmup,
                   approach="carried" if a.carry_momentum else "redrawn",
                   step_size=s.tolist(), spread=float(s.max() / s.min()),
                   seconds=time.perf_counter() - t)
        with open(a.out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
