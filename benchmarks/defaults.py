"""The defaults a user gets: every preset as ``K(model)``, ``num_warmup=2000``,
``num_samples=20000``, 4 vectorised chains, nothing else set, against NUTS on
``full_batch(model)``.

Each cell is *accurate* (max |mean error| <= 0.15 reference sd and every sd ratio in
[0.87, 1.15]) or *warned* (the run's verdict, :func:`numpyro_sgrld.check`, says the draws
cannot be trusted, or names the metric's uncorrected bias), or a **silent failure**. One JSON
line per cell is appended to ``--out`` as it finishes (a rerun skips the cells there).

    python benchmarks/defaults.py --problems logistic_20k german_credit --out F.jsonl

Problems here: ``logistic_20k`` (a synthetic logistic regression, N = 20,000, 11 parameters,
minibatch 200) and ``german_credit`` (bundled, N = 1,000, 25 parameters, minibatch 100).
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS
from numpyro_sgrld.models import logistic_regression

import numpyro_sgrld as ns

PRESETS = ["SGLD", "SGHMC", "PSGLD", "MongeSGLD", "ShampooSGLD", "WenzelSGLD", "AdamSGLD"]


def logistic_20k():
    n, d = 20_000, 10
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d)) * np.linspace(0.2, 3, d)
    w = rng.normal(size=d)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ w + 0.5)))).astype(np.float32)

    def model(X, y):
        b = numpyro.sample("b", dist.Normal(0, 5))
        w = numpyro.sample("w", dist.Normal(0, 5).expand([d]).to_event(1))
        with numpyro.plate("data", X.shape[0], subsample_size=200) as idx:
            numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w + b), obs=y[idx])

    return model, (jnp.asarray(X, jnp.float32), jnp.asarray(y))


def german_credit():
    X, y = logistic_regression.load_german_credit()

    def model(X, y):
        logistic_regression.model(X, y, subsample_size=100)

    return model, (X, y)


PROBLEMS = {"logistic_20k": logistic_20k, "german_credit": german_credit}


def flat(samples):
    """(draws, coordinates) from a dict of draws without a chain axis."""
    return np.concatenate([np.asarray(v).reshape(v.shape[0], -1) for _, v in
                           sorted(samples.items())], axis=1)


def reference(name, model, args, cache):
    path = cache / f"defaults_reference_{name}.npz"
    if path.exists():
        return np.load(path)["draws"], None
    t = time.time()
    m = MCMC(NUTS(ns.full_batch(model)), num_warmup=1000, num_samples=10_000, num_chains=2,
             chain_method="vectorized", progress_bar=False)
    m.run(jax.random.PRNGKey(1), *args)
    draws = flat(m.get_samples())
    np.savez(path, draws=draws)
    return draws, time.time() - t


def cell(kernel_name, model, args, ref):
    kernel = getattr(ns, kernel_name)(model)
    mcmc = MCMC(kernel, num_warmup=2000, num_samples=20_000, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = time.time()
        mcmc.warmup(jax.random.PRNGKey(0), *args)
        jax.block_until_ready(mcmc.post_warmup_state)
        warm = time.time() - t
        mcmc.run(jax.random.PRNGKey(0), *args)
        jax.block_until_ready(mcmc.get_samples())
        total = time.time() - t
        verdict = ns.check(mcmc)
    warned = any("cannot be trusted" in str(w.message) or "Γ-corrected" in str(w.message)
                 for w in caught) or not verdict.trusted or bool(verdict.notes and any(
                     "Γ-corrected" in n for n in verdict.notes))
    draws = flat(mcmc.get_samples())
    mean_err = np.abs(draws.mean(0) - ref.mean(0)) / ref.std(0)
    ratio = draws.std(0) / ref.std(0)
    accurate = bool(mean_err.max() <= 0.15 and np.all((ratio >= 0.87) & (ratio <= 1.15)))
    steps = np.asarray(mcmc.last_state.step_size)
    gs = mcmc.last_state.gradient_state
    return {
        "kernel": kernel_name, "accurate": accurate, "warned": bool(warned),
        "silent_failure": bool(not accurate and not warned),
        "max_mean_error_sd": float(mean_err.max()), "sd_ratio_min": float(ratio.min()),
        "sd_ratio_max": float(ratio.max()), "max_rhat": verdict.max_rhat,
        "min_ess": verdict.min_ess, "step_spread": float(steps.max() / steps.min()),
        "warmup_seconds": warm, "total_seconds": total,
        "control_variates": None if gs is None or not hasattr(gs, "active")
        else bool(np.all(gs.active)),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    parser.add_argument("--kernels", nargs="+", default=PRESETS)
    parser.add_argument("--out", type=Path, default=Path("docs/results/defaults.jsonl"))
    parser.add_argument("--cache", type=Path, default=Path("docs/results"))
    a = parser.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if a.out.exists():
        done = {(r["problem"], r["kernel"]) for r in map(json.loads, a.out.read_text().split(
            "\n")) if r} if a.out.read_text().strip() else set()
    for problem in a.problems:
        model, args = PROBLEMS[problem]()
        ref, ref_time = reference(problem, model, args, a.cache)
        for k in a.kernels:
            if (problem, k) in done:
                continue
            row = {"problem": problem, **cell(k, model, args, ref),
                   "reference_seconds": ref_time}
            print(json.dumps(row), flush=True)
            with a.out.open("a") as f:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
