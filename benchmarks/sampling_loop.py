"""The kernels' sampling loop against NumPyro's, side by side in one process.

    python benchmarks/sampling_loop.py               # ~6 min on 2 cores
    python benchmarks/sampling_loop.py --repeats 2 --out loop.md

SGLD on logistic regression (N = 50,000, d = 50, minibatch 500, float32) through
``MCMC(..., jit_model_args=True)``, once with ``numpyro_sgrld.use_sampling_loop("numpyro")``
(NumPyro's ``fori_collect``: postprocessing and a write of the state on every step, one
dispatch per step with the progress bar on) and once with ``"sgrld"`` (the default,
``numpyro_sgrld._loop``), in four settings:

- ``plain``: the model above, ``thinning=100``, no progress bar;
- ``deterministic site``: the model also records ``numpyro.deterministic("p", sigmoid(logits))``
  per data point, which postprocessing computes for all N points (``thinning=100``);
- ``progress bar``: the plain model, ``thinning=10``, ``progress_bar=True`` (the default);
- ``both``: the deterministic site with the progress bar on (``thinning=100``).

Each contender is one ``MCMC`` object, timed at T1 = 2,000 and T2 = 12,000 steps (compiled
before timing); repeats interleave all contenders in a shuffled order. Marginal cost per step:
(min t(T2) - min t(T1)) / (T2 - T1).
"""

import argparse
import contextlib
import io
import random as pyrandom
import time

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import random
from numpyro.infer import MCMC

import numpyro_sgrld
from numpyro_sgrld import SGLD

N, D, BATCH, T1, T2 = 50_000, 50, 500, 2_000, 12_000
SETTINGS = {  # name: (deterministic site, thinning, progress bar)
    "plain": (False, 100, False),
    "deterministic site": (True, 100, False),
    "progress bar": (False, 10, True),
    "both": (True, 100, True),
}


def make_model(deterministic):
    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([D]).to_event(1))
        with numpyro.plate("data", N, subsample_size=BATCH) as idx:
            logits = X[idx] @ w
            if deterministic:
                numpyro.deterministic("p", jax.nn.sigmoid(logits))
            numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y[idx])

    return model


def contender(setting, loop, X, y):
    """``run(T, key)``: a T-step run of one ``MCMC`` object with the given loop."""
    deterministic, thinning, progress_bar = SETTINGS[setting]
    mcmc = MCMC(
        SGLD(make_model(deterministic), step_size=1e-5),
        num_warmup=0,
        num_samples=T1,
        thinning=thinning,
        progress_bar=progress_bar,
        jit_model_args=True,
    )

    def run(t, key):
        mcmc.num_samples = t
        mcmc._set_collection_params()  # NumPyro reads these, set from num_samples at init
        numpyro_sgrld.use_sampling_loop(loop)
        try:
            with contextlib.redirect_stderr(io.StringIO()):  # the progress bar
                mcmc.run(key, X, y)
            return jax.block_until_ready(mcmc.get_samples())
        finally:
            numpyro_sgrld.use_sampling_loop("sgrld")

    return run


def _timed(run, t, key):
    start = time.perf_counter()
    run(t, key)
    return time.perf_counter() - start


def measure(repeats, settings, seed=0):
    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.normal(size=(N, D)), jnp.float32)
    y = jnp.asarray(rng.random(N) < 0.5, jnp.int32)
    runs = {(s, loop): contender(s, loop, X, y) for s in settings for loop in ("numpyro", "sgrld")}
    for run in runs.values():  # compile both run lengths
        for t in (T1, T2):
            run(t, random.PRNGKey(0))
    times = {name: ([], []) for name in runs}
    order, shuffle = list(runs), pyrandom.Random(seed)
    for r in range(repeats):
        shuffle.shuffle(order)
        for name in order:
            key = random.PRNGKey(r + 1)
            times[name][0].append(_timed(runs[name], T1, key))
            times[name][1].append(_timed(runs[name], T2, key))
        print(f"  repeat {r + 1}/{repeats} done", flush=True)
    return {name: (min(b) - min(a)) / (T2 - T1) for name, (a, b) in times.items()}


def table(marginal, settings, repeats):
    lines = [
        f"SGLD, logistic regression N = {N:,}, d = {D}, minibatch {BATCH}; run lengths {T1:,} "
        f"and {T2:,}, {repeats} interleaved repeats; jax {jax.__version__}\n",
        "| setting | NumPyro's loop µs / step | ours µs / step | NumPyro's / ours |",
        "|---|---|---|---|",
    ]
    for s in settings:
        a, b = marginal[(s, "numpyro")], marginal[(s, "sgrld")]
        lines.append(f"| {s} | {a * 1e6:.1f} | {b * 1e6:.1f} | {a / b:.2f}× |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--out", default=None, help="write the Markdown table here")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    out = table(measure(args.repeats, args.settings), args.settings, args.repeats)
    print(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
