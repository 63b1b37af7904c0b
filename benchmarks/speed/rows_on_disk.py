"""Steps per second and peak resident memory of SGLD with the rows on disk
(``numpyro_sgrld.data.sharding.HostRows`` over a memory-mapped ``.npy`` file) against the same rows
in memory, on a synthetic logistic regression with ``--rows`` N rows and 20 features.

    python benchmarks/speed/rows_on_disk.py --rows 2000000 --folder /tmp/rows   # ~2 min

The data are written once to ``--folder`` (float32, chunk by chunk, in a process of their own,
by ``hundred_million_rows.write``).
Each configuration then runs in its own process, so that its peak resident memory
(``ru_maxrss``) is its own: SGLD at a fixed step (1e-6), minibatches of 1,000, ``--steps``
steps timed on the second ``MCMC.run`` (the first compiles) on the kernels' own loop
(``numpyro_sgrld.enable_fast_sampling_loop``: NumPyro's would compile again in the run timed),
the model's arguments passed to the compiled loop (``jit_model_args=True``, as the
time-to-accuracy race does: as constants of the program the rows in memory would be copied
into it). The rows in memory are ``numpy.load`` of the same file. The file is in the operating
system's page cache after it is written, so "disk" here is the page cache: the cost measured is
the gather through the host callback, not a disk's seek.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from hundred_million_rows import D, write  # the same synthetic data, written chunk by chunk

BATCH, STEP = 1000, 1e-6


def run(folder, where, steps):
    """One configuration: ``{"where", "steps_per_second", "peak_rss_mb"}``."""
    import warnings

    import jax
    import numpy as np
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import MCMC

    from numpyro_sgrld import SGLD, enable_fast_sampling_loop
    from numpyro_sgrld.data.sharding import HostRows

    warnings.simplefilter("ignore")
    enable_fast_sampling_loop()  # NumPyro's loop would compile again in the run timed

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
        with numpyro.plate("data", X.shape[0], subsample_size=BATCH) as idx:
            numpyro.sample("obs", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])

    if where == "disk":
        args = tuple(HostRows(np.load(f"{folder}/{n}.npy", mmap_mode="r")) for n in "Xy")
    else:
        args = tuple(np.load(f"{folder}/{n}.npy") for n in "Xy")
    mcmc = MCMC(SGLD(model, STEP), num_warmup=0, num_samples=steps, progress_bar=False,
                jit_model_args=True)
    mcmc.run(jax.random.PRNGKey(0), *args)
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(1), *args)
    np.asarray(mcmc.get_samples()["w"])
    seconds = time.perf_counter() - start
    return {"where": where, "steps_per_second": steps / seconds,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--folder", required=True)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--child", choices=["write", "disk", "memory"])
    a = parser.parse_args()
    if a.child == "write":
        write(a.folder, a.rows)
        return
    if a.child:
        print(json.dumps(run(a.folder, a.child, a.steps)), flush=True)
        return
    me = [sys.executable, __file__, "--rows", str(a.rows), "--folder", a.folder,
          "--steps", str(a.steps)]
    subprocess.run(me + ["--child", "write"], check=True)
    size = sum(os.path.getsize(f"{a.folder}/{n}.npy") for n in "Xy") / 2**20
    rows = []
    for where in ("disk", "memory"):
        out = subprocess.run(me + ["--child", where], check=True, capture_output=True,
                             text=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    print(f"N = {a.rows:,} rows x {D} features, files {size:,.0f} MiB, minibatch {BATCH}, "
          f"{a.steps} steps")
    print("| rows | steps per second | peak resident memory (MiB) |\n|---|---|---|")
    for r in rows:
        print(f"| {'on disk (HostRows)' if r['where'] == 'disk' else 'in memory'} | "
              f"{r['steps_per_second']:,.0f} | {r['peak_rss_mb']:,.0f} |")
    ratio = rows[0]["steps_per_second"] / rows[1]["steps_per_second"]
    print(f"\nsteps per second on disk / in memory: {ratio:.2f}")


if __name__ == "__main__":
    main()
