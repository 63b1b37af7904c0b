"""NumPyro's sampling loop against ours on Yu et al.'s 784-400-400-10 horseshoe MLP.

One sampler (``identity``, ``Monge``, ...: the keys of ``yu_table1_long.KERNELS``, with the
authors' updates), thinning 100, each run a separate ``MCMC.run`` continuing the last state,
as ``yu_table1_long.py``'s segments are. Each loop runs ``--short`` and ``--long`` steps, in
``--repeats`` alternating rounds; from the fastest time of each length, the **marginal cost**
per step ``(t_long - t_short) / (long - short)`` and the **fixed cost** of a run (``t_short``
less ``short`` marginal steps: compiling, and whatever else a run does once) are reported,
and whether the kept draws of the two loops are the same::

    python benchmarks/speed/yu_loop_speed.py Monge

NumPyro's loop builds its compiled loop anew on every ``MCMC.run`` (a new closure per run) and
postprocesses (constrains) every step's state; ours (``numpyro_sgrld.fast_sampling_loop``,
docs/scaling.md) compiles once per run length and postprocesses only the kept draws.
``yu_table1_long.py`` runs on ours.
"""

import argparse
import contextlib
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld.models.mnist import load_mnist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "papers"))
from yu_table1_long import KERNELS, build_kernel, build_model  # noqa: E402

import numpyro_sgrld


def make(model, name, steps):
    kernel = build_kernel(name, model, "authors")
    return MCMC(kernel, num_warmup=0, num_samples=steps, thinning=100, progress_bar=False,
                jit_model_args=True)


def timed_run(mcmc, data, fast, state=None):
    """Seconds of one ``run`` (from ``state``, or a fresh start), and its kept draws."""
    X, y = data
    with numpyro_sgrld.fast_sampling_loop() if fast else contextlib.nullcontext():
        start = time.perf_counter()
        if state is None:
            mcmc.run(random.PRNGKey(0), X, y)
        else:
            mcmc.post_warmup_state = state
            mcmc.run(state.rng_key, X, y)
        samples = jax.block_until_ready(mcmc.get_samples())
    return time.perf_counter() - start, samples


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sampler", choices=list(KERNELS))
    p.add_argument("--short", type=int, default=500)
    p.add_argument("--long", type=int, default=2500)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    X, y, _, _ = (jnp.asarray(a) for a in load_mnist(validation="drop"))
    data = (X, y)
    model = build_model(400, "horseshoe", 100)
    runs = {(fast, n): make(model, args.sampler, n) for fast in (False, True)
            for n in (args.short, args.long)}
    start = {}
    for (fast, n), mcmc in runs.items():  # a first run each: a start and a compiled loop
        _, _ = timed_run(mcmc, data, fast)
        start[(fast, n)] = mcmc.last_state
    best = {key: np.inf for key in runs}
    draws = {}
    for _ in range(args.repeats):
        for key, mcmc in runs.items():
            t, draws[key] = timed_run(mcmc, data, key[0], start[key])
            best[key] = min(best[key], t)
    same = all(np.array_equal(np.asarray(draws[(False, n)][k]), np.asarray(draws[(True, n)][k]))
               for n in (args.short, args.long) for k in draws[(False, n)])
    for fast, label in ((False, "NumPyro's loop"), (True, "ours")):
        t_short, t_long = best[(fast, args.short)], best[(fast, args.long)]
        marginal = (t_long - t_short) / (args.long - args.short)
        print(f"{args.sampler}, {label}: marginal {1e3 * marginal:.2f} ms/step, fixed "
              f"{t_short - args.short * marginal:.2f} s per run, {t_long:.2f} s for "
              f"{args.long} steps", flush=True)
    print(f"identical draws: {same}")


if __name__ == "__main__":
    main()
