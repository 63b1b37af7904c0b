"""Marginal cost per step of each kernel through ``numpyro.infer.MCMC``, against a hand-written
jitted ``lax.scan`` SGLD loop on the same potential, and the fixed cost of one ``MCMC.run``.

Problem: Bayesian logistic regression, N = 50,000 synthetic points, d = 50, w ~ N(0, I),
minibatch 500 drawn with replacement (``randint``) every step. For a run length T the wall
time is t(T) = fixed + T * marginal; the marginal cost per step is
(t(T2) - t(T1)) / (T2 - T1), the fixed cost of a run t(T1) - T1 * marginal. Each time is the
median of ``--repeats`` runs, all in one process, side by side.

    python benchmarks/speed.py
"""

import argparse
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from numpyro.infer import MCMC
from numpyro_sgrld.models import logistic_regression as lr

from numpyro_sgrld import PSGLD, SGHMC, SGLD, AdamSGLD, MongeSGLD, ShampooSGLD

NUM_DATA, DIM, BATCH, STEP = 50_000, 50, 500, 1e-5

KERNELS = {
    "SGLD": SGLD,
    "SGHMC": partial(SGHMC, friction=0.1),
    "PSGLD": PSGLD,
    "MongeSGLD": MongeSGLD,
    "ShampooSGLD": ShampooSGLD,
    "AdamSGLD": AdamSGLD,
    "PSGLD+Γ (Hutchinson)": partial(PSGLD, correction="hutchinson"),
    "MongeSGLD+Γ (Hutchinson)": partial(MongeSGLD, correction="hutchinson"),
}


def make_data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(NUM_DATA, DIM)).astype(np.float32)
    w = rng.normal(size=DIM).astype(np.float32) / np.sqrt(DIM)
    y = (rng.random(NUM_DATA) < 1 / (1 + np.exp(-X @ w))).astype(np.int32)
    return jnp.asarray(X), jnp.asarray(y)


def hand_written_sgld(X, y):
    """Plain SGLD on the minibatch potential, written directly in JAX: returns run(w0, key, T)."""

    def potential(w, idx):
        logits = X[idx] @ w
        loglik = jnp.sum(y[idx] * logits - jnp.logaddexp(0.0, logits))
        return 0.5 * jnp.sum(w**2) - NUM_DATA / BATCH * loglik

    def step(w, key):
        k_idx, k_noise = random.split(key)
        idx = random.randint(k_idx, (BATCH,), 0, NUM_DATA)
        g = jax.grad(potential)(w, idx)
        w = w - STEP * g + jnp.sqrt(2 * STEP) * random.normal(k_noise, w.shape)
        return w, None

    @partial(jax.jit, static_argnums=2)
    def run(w0, key, num_steps):
        return lax.scan(step, w0, random.split(key, num_steps))[0]

    return run


def _median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def measure_hand_written(X, y, t1, t2, repeats):
    run = hand_written_sgld(X, y)
    w0 = jnp.zeros(DIM)
    out = {}
    for t in (t1, t2):
        run(w0, random.PRNGKey(0), t).block_until_ready()  # compile
        out[t] = _median_time(lambda t=t: run(w0, random.PRNGKey(1), t), repeats)
    return out


def measure_kernel(kernel, X, y, t1, t2, repeats):
    model = partial(lr.model, subsample_size=BATCH)
    out = {}
    for t in (t1, t2):
        # thinning = t: one draw is kept, so collection costs nothing
        mcmc = MCMC(
            kernel(model, step_size=STEP),
            num_warmup=0,
            num_samples=t,
            thinning=t,
            progress_bar=False,
            jit_model_args=True,
        )
        mcmc.run(random.PRNGKey(0), X, y)  # first run: compilation of everything

        def again(mcmc=mcmc):
            mcmc.run(random.PRNGKey(1), X, y)
            return mcmc.get_samples()

        out[t] = _median_time(again, repeats)
    return out


def marginal_and_fixed(times, t1, t2):
    marginal = (times[t2] - times[t1]) / (t2 - t1)
    return marginal, times[t1] - t1 * marginal


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--t1", type=int, default=5_000)
    p.add_argument("--t2", type=int, default=45_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    p.add_argument("--out", default=None, help="write the Markdown table here")
    args = p.parse_args(argv)
    if not 0 < args.t1 < args.t2:
        p.error("need 0 < --t1 < --t2")

    X, y = make_data()
    hand = marginal_and_fixed(
        measure_hand_written(X, y, args.t1, args.t2, args.repeats), args.t1, args.t2
    )
    rows = {"hand-written lax.scan SGLD": hand}
    print(f"hand-written: {hand[0] * 1e6:.1f} us/step", flush=True)
    for name in args.kernels:
        times = measure_kernel(KERNELS[name], X, y, args.t1, args.t2, args.repeats)
        rows[name] = marginal_and_fixed(times, args.t1, args.t2)
        print(f"{name}: {rows[name][0] * 1e6:.1f} us/step, fixed {rows[name][1]:.2f} s", flush=True)

    base = hand[0]
    lines = [
        f"Logistic regression, N = {NUM_DATA:,}, d = {DIM}, minibatch {BATCH}; run lengths "
        f"{args.t1} and {args.t2} steps, median of {args.repeats} runs each, one process.\n",
        "| sampler | marginal µs / step | vs hand-written | fixed cost per run (s) |",
        "|---|---|---|---|",
    ]
    for name, (marginal, fixed) in rows.items():
        lines.append(f"| {name} | {marginal * 1e6:.1f} | {marginal / base:.2f}x | {fixed:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
