"""The fixed cost of a host call inside a compiled loop: a ``lax.scan`` of ``--steps`` steps,
each drawing 1,000 row indices, with no call, with a ``jax.pure_callback`` and with the
``jax.experimental.buffer_callback`` of ``numpyro_sgrld.data.host_data.host_call``, each call
returning the same 1,000 x 20 float32 rows (no reading: the call's own cost). The three loops
run side by side, each timed as the best of ``--repeats`` runs after compiling.

    python benchmarks/speed/host_call.py
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_sgrld.data.host_data import host_call

ROWS, D, N = 1000, 20, 10**7


def _loop(call, steps):
    @jax.jit
    def run(key):
        def body(total, i):
            idx = jax.random.randint(jax.random.fold_in(key, i), (ROWS,), 0, N)
            return total + call(idx), None

        return jax.lax.scan(body, jnp.float32(0), jnp.arange(steps))[0]

    return run


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=5000)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    rows = np.ones((ROWS, D), np.float32)
    out = jax.ShapeDtypeStruct((ROWS, D), jnp.float32)
    calls = {
        "no call": lambda idx: idx.sum().astype(jnp.float32),
        "jax.pure_callback": lambda idx: jax.pure_callback(
            lambda i: rows, out, idx, vmap_method="expand_dims").sum(),
        "host_call (buffer_callback on CPU)": lambda idx: host_call(
            lambda i: (rows,), (out,), idx)[0].sum(),
    }
    print(f"backend {jax.default_backend()}, {a.steps} steps, best of {a.repeats}")
    print("| loop | µs per step | µs per call over no call |\n|---|---|---|")
    base = None
    for name, call in calls.items():
        run = _loop(call, a.steps)
        run(jax.random.PRNGKey(0)).block_until_ready()
        times = []
        for r in range(a.repeats):
            start = time.perf_counter()
            run(jax.random.PRNGKey(r + 1)).block_until_ready()
            times.append((time.perf_counter() - start) / a.steps * 1e6)
        best = min(times)
        base = best if base is None else base
        print(f"| {name} | {best:.1f} | {best - base:.1f} |", flush=True)


if __name__ == "__main__":
    main()
