"""With and without ``enable_fast_sampling_loop()``, side by side in one process.

    python benchmarks/speed/sampling_loop.py               # ~8 min on 2 cores
    python benchmarks/speed/sampling_loop.py --repeats 2 --out loop.md

SGLD on logistic regression (N = 50,000, d = 50, minibatch 500, float32) through
``MCMC(..., jit_model_args=True)``, once without the opt-in (NumPyro's ``fori_collect``:
postprocessing and a write of the state on every step, one dispatch per step with the progress
bar on, the loop compiled again on every run) and once inside
``numpyro_sgrld.fast_sampling_loop()`` (``numpyro_sgrld.sampler.loop``), in four settings:

- ``plain``: the model above, ``thinning=100``, no progress bar;
- ``deterministic site``: the model also records ``numpyro.deterministic("p", sigmoid(logits))``
  per data point, which postprocessing computes for all N points (``thinning=100``);
- ``progress bar``: the plain model, ``thinning=10``, ``progress_bar=True`` (the default);
- ``both``: the deterministic site with the progress bar on (``thinning=100``).

Each contender is one ``MCMC`` object, timed at T1 = 2,000 and T2 = 12,000 steps (compiled
before timing); repeats interleave all contenders in a shuffled order. Marginal cost per step:
(min t(T2) - min t(T1)) / (T2 - T1). For these per-step costs NumPyro's loop is timed with its
compiled loops reused (:func:`numpyro_reusing_its_loop`, a patch of ``numpyro.util.maybe_jit``
in this script only): its recompilation costs the same at both lengths and would only add
noise to the difference.

The **fixed cost of a repeated run** is measured as users meet it, with no such patch: the wall
time of a 1-step ``MCMC.run`` (``num_samples=1``, no progress bar) on an ``MCMC`` object that
has run before with the same shapes, median over ``--repeats`` x 3 runs, with and without the
opt-in.
"""

import argparse
import contextlib
import io
import random as pyrandom
import time
from collections import OrderedDict

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


_JIT_WRAPPERS = OrderedDict()  # kept across runs: that is the point


@contextlib.contextmanager
def numpyro_reusing_its_loop():
    """NumPyro's ``fori_collect`` with its jitted loop body reused across runs: its
    ``maybe_jit`` wraps the (cached) body in a new ``jax.jit`` object per call, a static
    argument of the jitted loop, so the whole loop is compiled again on every run. Here the
    wrapper of the same function and options is memoised, for this script's timings only."""
    import numpyro.util

    original = numpyro.util.maybe_jit

    def maybe_jit(fn, *args, **kwargs):
        key = (fn, args, tuple(sorted(kwargs.items())))
        if key not in _JIT_WRAPPERS:
            _JIT_WRAPPERS[key] = original(fn, *args, **kwargs)
        return _JIT_WRAPPERS[key]

    numpyro.util.maybe_jit = maybe_jit
    try:
        yield
    finally:
        numpyro.util.maybe_jit = original


def _loop(loop):
    if loop == "sgrld":
        return numpyro_sgrld.fast_sampling_loop()
    return numpyro_reusing_its_loop()


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
        with _loop(loop), contextlib.redirect_stderr(io.StringIO()):  # the progress bar
            mcmc.run(key, X, y)
        return jax.block_until_ready(mcmc.get_samples())

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


def fixed_cost(repeats, seed=0):
    """Median wall time (s) of a repeated 1-step ``MCMC.run``, without and with the opt-in."""
    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.normal(size=(N, D)), jnp.float32)
    y = jnp.asarray(rng.random(N) < 0.5, jnp.int32)
    opt_in = {"numpyro": contextlib.nullcontext, "sgrld": numpyro_sgrld.fast_sampling_loop}
    mcmcs = {
        loop: MCMC(SGLD(make_model(False), step_size=1e-5), num_warmup=0, num_samples=1,
                   progress_bar=False, jit_model_args=True)
        for loop in opt_in
    }

    def run(loop, key):
        start = time.perf_counter()
        with opt_in[loop]():
            mcmcs[loop].run(key, X, y)
        jax.block_until_ready(mcmcs[loop].get_samples())
        return time.perf_counter() - start

    for loop in opt_in:
        run(loop, random.PRNGKey(0))  # the first run compiles either way
    times = {loop: [] for loop in opt_in}
    for r in range(3 * repeats):
        for loop in opt_in:
            times[loop].append(run(loop, random.PRNGKey(r + 1)))
    return {loop: float(np.median(t)) for loop, t in times.items()}


def table(marginal, settings, repeats, fixed):
    lines = [
        f"SGLD, logistic regression N = {N:,}, d = {D}, minibatch {BATCH}; run lengths {T1:,} "
        f"and {T2:,}, {repeats} interleaved repeats; jax {jax.__version__}, numpyro "
        f"{numpyro.__version__}\n",
        "| setting | without the opt-in (NumPyro's loop) µs / step | with "
        "`enable_fast_sampling_loop()` µs / step | without / with |",
        "|---|---|---|---|",
    ]
    for s in settings:
        a, b = marginal[(s, "numpyro")], marginal[(s, "sgrld")]
        lines.append(f"| {s} | {a * 1e6:.1f} | {b * 1e6:.1f} | {a / b:.2f}× |")
    a, b = fixed["numpyro"], fixed["sgrld"]
    lines.append(f"| fixed cost of a repeated run (s) | {a:.3f} | {b:.3f} | {a / b:.0f}× |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    ap.add_argument("--out", default=None, help="write the Markdown table here")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    fixed = fixed_cost(args.repeats)
    out = table(measure(args.repeats, args.settings), args.settings, args.repeats, fixed)
    print(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(out + "\n")


if __name__ == "__main__":
    main()
