"""SGNHT at a given time step on the conjugate regression of ``benchmarks/accuracy/defaults.py``
(N = 2,000, 5 weights, minibatch 100): the sd ratios against the exact posterior and the
thermostat's last value, for exact and minibatch gradients, after warm-ups of 2 and 20 time
units (h x steps).

A thermostat far from its equilibrium relaxes to it at the rate T/xi per time unit
(``numpyro_sgrld.verdict.judge.thermostat_relaxation``): with the momentum at its equilibrium for
the friction xi, the kinetic temperature is T xi*/xi, so d(xi)/dt = T (xi*/xi - 1). This
records how far from the posterior's spread the positions are while it has not settled.

    python benchmarks/investigations/sgnht_relaxation.py --out docs/results/sgnht_relaxation.jsonl
"""

import argparse
import json
import sys
import warnings
from functools import partial
from pathlib import Path

import jax
import numpy as np
from numpyro.infer import MCMC

import numpyro_sgrld as ns

sys.path.insert(0, str(Path(__file__).parent.parent / "accuracy"))
from defaults import conjugate  # noqa: E402

CELLS = [  # (gradient's minibatch size, step, num_warmup, num_samples)
    (None, 1e-3, 20_000, 40_000),
    (100, 3e-4, 20_000, 40_000),
    (100, 1e-3, 2_000, 20_000),
    (100, 1e-3, 20_000, 40_000),
    (100, 1e-3, 2_000, 100_000),
    (100, 3e-3, 20_000, 40_000),
    (1000, 1e-3, 20_000, 40_000),
]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("docs/results/sgnht_relaxation.jsonl"))
    a = parser.parse_args()
    from numpyro_sgrld.models import linear_regression as lr

    ns.enable_fast_sampling_loop()
    problem = conjugate()
    X, y = problem["args"]
    mean, sd = problem["reference"]["w"]
    a.out.write_text("")
    for batch, h, warmup, samples in CELLS:
        kernel = ns.SGNHT(partial(lr.model, subsample_size=batch), step_size=h)
        mcmc = MCMC(kernel, num_warmup=warmup, num_samples=samples, num_chains=4,
                    chain_method="vectorized", progress_bar=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc.run(jax.random.PRNGKey(0), X, y)
        w = np.asarray(mcmc.get_samples()["w"], np.float64)
        xi = np.asarray(mcmc.last_state.sampler_state.integrator.thermostat, np.float64)
        row = dict(minibatch=batch, step_size=h, warmup_time=h * warmup,
                   sampling_time=h * samples, sd_ratio=(w.std(0) / sd).tolist(),
                   max_mean_error_sd=float(np.max(np.abs(w.mean(0) - mean) / sd)),
                   thermostat=xi.tolist(),
                   warned=any("cannot be trusted" in str(c.message) for c in caught))
        print(json.dumps(row), flush=True)
        with a.out.open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
