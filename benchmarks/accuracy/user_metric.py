"""A user's own metric at given steps far too large, one short chain: the runs the verdict
must not let through. A conjugate regression with two weights whose columns are scaled 1 and
10 (N = 1,000, minibatch 100, unit noise, N(0, 1) prior: the exact posterior), one chain of
300 warm-up and 500 kept steps, nothing else set, for

- ``Adagrad``: an Adagrad-style diagonal metric written against ``metrics.Metric`` as
  docs/composition.md shows (:func:`adagrad`), ``SGMCMC(model, h, metric=adagrad())``;
- ``PSGLD``: ``PSGLD(model, h)``;

at ``h`` = 10, 100 and 1,000 times the step PSGLD adapts on this problem at its defaults
(one chain, the same run length), and at the defaults themselves. Each row is labelled
accurate or not from its errors against the exact posterior, as ``tests/test_verdict_grid.py``
counts them, and says whether the run warned. One JSON line per run, appended to ``--out``
(a rerun skips the rows there)::

    python benchmarks/accuracy/user_metric.py --out docs/results/verdict_grid_c.jsonl
"""

import argparse
import json
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC

import numpyro_sgrld as ns
from numpyro_sgrld import SGMCMC, metrics

N, n = 1_000, 100
MAX_MEAN_ERROR, SD_RATIO = 0.15, (0.87, 1.15)


class AdagradState(NamedTuple):
    total: Any


def adagrad(eps=1e-8):
    r"""Adagrad's diagonal: :math:`D = \mathrm{diag}(1/(\lambda + \sqrt{\sum_t \bar g_t^2}))`,
    :math:`\bar g = \nabla\hat U/N`."""

    def init(position):
        return AdagradState(jax.tree.map(jnp.zeros_like, position))

    def update(grad, state, position, context=None):
        num_data = 1.0 if context is None else context.num_data
        total = jax.tree.map(lambda s, g: s + (g / num_data) ** 2, state.total, grad)
        diag = jax.tree.map(lambda s: 1.0 / (eps + jnp.sqrt(s)), total)
        return metrics.Preconditioner(
            drift=lambda t: jax.tree.map(jnp.multiply, diag, t),
            noise=lambda t: jax.tree.map(lambda d, x: jnp.sqrt(d) * x, diag, t),
        ), AdagradState(total)

    return metrics.Metric(init, update, name="adagrad")


def problem():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 2)) * np.array([1.0, 10.0])
    y = X @ np.array([0.5, -0.2]) + rng.normal(size=N)
    precision = X.T @ X + np.eye(2)
    cov = np.linalg.inv(precision)
    return (jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)), cov @ (X.T @ y), cov


def model(X, y):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
    with numpyro.plate("data", N, subsample_size=n) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])


def run(kernel, args):
    mcmc = MCMC(kernel, num_warmup=300, num_samples=500, progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(0), *args)
    said = [str(w.message) for w in caught if "cannot be trusted" in str(w.message)]
    return mcmc, said


def row(label, kernel, args, mean, cov, step_x):
    mcmc, said = run(kernel, args)
    w = np.asarray(mcmc.get_samples(group_by_chain=True)["w"], np.float64)
    sd = np.sqrt(np.diag(cov))
    err = np.abs(w.mean((0, 1)) - mean) / sd
    ratio = w.reshape(-1, 2).std(0) / sd
    # as ArviZ caps it: an oscillating chain's Geyer estimate is negative
    ess = ns.verdict.capped_ess(np.asarray(effective_sample_size(w), np.float64), w.size // 2)
    accurate = bool(err.max() <= MAX_MEAN_ERROR and SD_RATIO[0] <= ratio.min()
                    and ratio.max() <= SD_RATIO[1])
    t = ns.check(mcmc, warn=False).temperatures
    return {"problem": "conjugate_scaled", "kernel": label, "chains": 1, "wrong": step_x > 1,
            "step_x": step_x, "warned": bool(said), "warning": said[0][:400] if said else "",
            "accurate": accurate, "silent_failure": not accurate and not said,
            "max_mean_error_sd": float(err.max()), "sd_ratio_min": float(ratio.min()),
            "sd_ratio_max": float(ratio.max()), "mean_error_sd": err.round(4).tolist(),
            "sd_ratio": ratio.round(4).tolist(), "ess": ess.round(1).tolist(),
            "temperature": None if t is None else t.overall,
            "temperature_se": None if t is None else t.overall_se,
            "step_size": float(np.median(np.asarray(mcmc.last_state.step_size)))}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("docs/results/verdict_grid_c.jsonl"))
    a = p.parse_args()
    args, mean, cov = problem()
    done = set()
    if a.out.exists():
        done = {r["kernel"] for r in map(json.loads, a.out.read_text().splitlines())
                if r.get("problem") == "conjugate_scaled"}
    adapted, _ = run(ns.PSGLD(model), args)
    h0 = float(np.median(np.asarray(adapted.last_state.step_size)))
    cells = [("PSGLD", lambda: ns.PSGLD(model), 1)]
    for x in (10, 100, 1000):
        cells += [(f"Adagrad@{x}x", lambda x=x: SGMCMC(model, x * h0, metric=adagrad()), x),
                  (f"PSGLD@{x}x", lambda x=x: ns.PSGLD(model, x * h0), x)]
    for label, make, x in cells:
        if label in done:
            continue
        r = row(label, make(), args, mean, cov, x)
        print(json.dumps(r), flush=True)
        with a.out.open("a") as f:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
