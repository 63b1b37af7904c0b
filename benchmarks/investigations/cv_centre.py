"""How close the control-variate centre found by ``control_variate="mode"`` is to the mode.

    python benchmarks/investigations/cv_centre.py --out docs/results/cv_centre.json   # ~1 min
    python benchmarks/investigations/cv_centre.py --mode-steps 1000 3000

The time-to-accuracy problem (``time_to_accuracy.make_data``: logistic regression, N = 100,000,
d = 20, minibatches of 500). For each ``mode_steps`` the kernel's initialisation runs the Adam
search and reports ``control_variate.distance`` (``numpyro_sgrld.core.gradients.centre_distance``:
the estimated distance from the mode in posterior sds along the full-data gradient). The exact
mode comes from Newton's method on the full data (float64 Hessian); the table compares the
estimate with the Mahalanobis distance sqrt((c - m)^T H (c - m)) of the centre c from the mode
m, H the full-data Hessian at m (the posterior precision of the Laplace approximation).
"""

import argparse
import os
import sys
import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld.models import logistic_regression as lr

from numpyro_sgrld import SGLD, full_batch, minibatch_potential

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed"))
from time_to_accuracy import make_data  # noqa: E402


def newton_mode(potential, start, steps=20):
    w = np.asarray(start, np.float64)
    grad, hess = jax.grad(potential), jax.hessian(potential)
    for _ in range(steps):
        g = np.asarray(grad(jnp.asarray(w, jnp.float32)), np.float64)
        h = np.asarray(hess(jnp.asarray(w, jnp.float32)), np.float64)
        w = w - np.linalg.solve(h, g)
    return w, np.asarray(hess(jnp.asarray(w, jnp.float32)), np.float64)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-data", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=20)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--mode-steps", type=int, nargs="+", default=[1000, 3000, 10000])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="a JSON record of the table")
    args = ap.parse_args(argv)
    rows = []
    X, y = make_data(args.num_data, args.dim)
    full = minibatch_potential(full_batch(lr.model), (X, y), {})

    def potential(w):
        return full({"w": w}, {})

    mode, precision = None, None
    print("| mode_steps | estimated distance (sd) | Mahalanobis distance to the mode (sd) |")
    print("|---|---|---|")
    for steps in args.mode_steps:
        kernel = SGLD(
            partial(lr.model, subsample_size=args.batch),
            step_size=1e-6,
            control_variate="mode",
            mode_steps=steps,
        )
        mcmc = MCMC(kernel, num_warmup=0, num_samples=1, progress_bar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # the table reports the distance
            mcmc.run(random.PRNGKey(args.seed), X, y)
        cv = mcmc.last_state.control_variate
        centre = np.asarray(cv.centre["w"], np.float64)
        if mode is None:
            mode, precision = newton_mode(potential, centre)
        offset = centre - mode
        mahalanobis = np.sqrt(offset @ precision @ offset)
        print(f"| {steps} | {float(cv.distance):.2f} | {mahalanobis:.2f} |")
        rows.append({"mode_steps": steps, "estimated_distance_sd": float(cv.distance),
                     "mahalanobis_distance_sd": float(mahalanobis)})
    if args.out:
        import json

        with open(args.out, "w") as f:
            json.dump({"num_data": args.num_data, "dim": args.dim, "batch": args.batch,
                       "seed": args.seed, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
