"""NumPyro's sampling loop against ours on Yu et al.'s 784-400-400-10 horseshoe MLP.

One sampler (``identity``, ``Monge``, ...: the keys of ``yu_table1_long.KERNELS``, with the
authors' updates), 1000 steps with thinning 100 after a compiling run of the same length,
timed per step on each loop in one process (alternating, ``--repeats`` times), and whether the
kept draws are the same::

    python benchmarks/yu_loop_speed.py Monge

NumPyro's loop postprocesses (constrains) every step's state; ours only the kept draws
(``numpyro_sgrld.fast_sampling_loop``, docs/scaling.md). ``yu_table1_long.py`` runs on ours.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld.models.mnist import load_mnist
from yu_table1_long import KERNELS, build_kernel, build_model

import numpyro_sgrld


def per_step(model, name, data, fast, steps):
    """Milliseconds per step of a second run (the first compiles), and its kept draws."""
    X, y = data
    kernel = build_kernel(name, model, "authors")
    mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, thinning=100, progress_bar=False,
                jit_model_args=True)
    with numpyro_sgrld.fast_sampling_loop() if fast else _nothing():
        mcmc.run(random.PRNGKey(0), X, y)
        jax.block_until_ready(mcmc.get_samples())
        start = time.perf_counter()
        mcmc.post_warmup_state = mcmc.last_state
        mcmc.run(mcmc.last_state.rng_key, X, y)
        samples = jax.block_until_ready(mcmc.get_samples())
    return (time.perf_counter() - start) / steps * 1e3, samples


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sampler", choices=list(KERNELS))
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args(argv)
    X, y, _, _ = (jnp.asarray(a) for a in load_mnist(validation="drop"))
    model = build_model(400, "horseshoe", 100)
    for _ in range(args.repeats):
        slow, a = per_step(model, args.sampler, (X, y), False, args.steps)
        fast, b = per_step(model, args.sampler, (X, y), True, args.steps)
        same = all(np.array_equal(np.asarray(a[k]), np.asarray(b[k])) for k in a)
        print(f"{args.sampler}: NumPyro's loop {slow:.2f} ms/step, ours {fast:.2f} ms/step, "
              f"ratio {slow / fast:.2f}, identical draws: {same}", flush=True)


if __name__ == "__main__":
    main()
