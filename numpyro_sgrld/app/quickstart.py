"""Quickstart: SGLD and SGHMC with subsampling against NUTS and the closed form.

The problem is the conjugate Bayesian linear regression of
:mod:`numpyro_sgrld.models.linear_regression` (N = 2000, d = 5, minibatch 100), whose posterior
is known exactly; each sampler's error is reported in posterior standard deviations.
"""

import time
from functools import partial

import numpy as np
from jax import random
from numpyro.infer import MCMC, NUTS

from numpyro_sgrld.data.subsample import full_batch
from numpyro_sgrld.models import linear_regression as lr
from numpyro_sgrld.presets.table import SGHMC, SGLD

__all__ = ["run_quickstart", "format_table"]


def run_quickstart(num_samples=20000, num_chains=4, seed=0, progress_bar=True):
    """Run the three samplers; return one row (a dict) per sampler."""
    X, y, _ = lr.make_data(seed=seed, num_data=2000, num_features=5)
    post = lr.exact_posterior(X, y)
    model = partial(lr.model, subsample_size=100)
    runs = [
        # step sizes chosen during warm-up (step_size=None, the default)
        ("SGLD", SGLD(model), num_samples, num_chains, "vectorized"),
        (
            "SGHMC",
            SGHMC(model, friction=0.1),
            num_samples,
            num_chains,
            "vectorized",
        ),
        ("NUTS (full data)", NUTS(full_batch(model)), max(num_samples // 10, 500), 1, "sequential"),
    ]
    rows = []
    for name, kernel, samples, chains, method in runs:
        mcmc = MCMC(
            kernel,
            num_warmup=max(200, min(2000, samples)),
            num_samples=samples,
            num_chains=chains,
            chain_method=method,
            progress_bar=progress_bar,
        )
        start = time.perf_counter()
        mcmc.run(random.PRNGKey(seed + 1), X, y)
        w = np.asarray(mcmc.get_samples()["w"], np.float64)  # waits for the run to finish
        seconds = time.perf_counter() - start
        h = getattr(mcmc.last_state, "step_size", None)  # NUTS's state holds none
        rows.append(
            {
                "sampler": name,
                "step size": "adapted" if h is None else f"{np.exp(np.mean(np.log(h))):.2e}",
                "draws": w.shape[0],
                "max |mean error| / sd": float(np.max(np.abs(w.mean(0) - post.mean) / post.sd)),
                "min sd ratio": float(np.min(w.std(0) / post.sd)),
                "max sd ratio": float(np.max(w.std(0) / post.sd)),
                "seconds": seconds,
            }
        )
    return rows


def format_table(rows):
    headers = list(rows[0])
    cells = [[f"{v:.3f}" if isinstance(v, float) else str(v) for v in row.values()] for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = lambda items: "  ".join(s.rjust(w) for s, w in zip(items, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(c) for c in cells])
