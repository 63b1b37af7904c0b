"""SGLD at its defaults, and with contiguous minibatches, on a logistic regression of ``--rows``
rows (default 10^8) and 20 features kept on disk (``numpyro_sgrld.data.sharding.HostRows`` over
memory-mapped ``.npy`` files, about 8 GB at 10^8 rows): the time to the stated accuracy
(every mean within 0.1 sd, every sd within 10 % of the reference), the process's peak
resident memory, and the per-gradient cost of a full-data method, measured on a slice and
extrapolated.

    python benchmarks/speed/hundred_million_rows.py --folder /tmp/rows8 --out result.jsonl

Each stage runs in a process of its own (its peak resident memory is its own) and appends a
JSON line to ``--out``; a stage whose line is there is not run again (``--rows`` and the
folder must be the same):

1. ``write``: ``X`` (float32, N x 20) and ``y`` (float32 labels of ``w* ~ N(0, I/20)``),
   chunk by chunk.
2. ``reference``: the posterior's mean and sd from the Laplace approximation (Newton's method
   on the full data, read chunk by chunk, float64 sums; prior N(0, I)). At N = 10^8 the
   posterior's departure from its Laplace approximation is of order N^(-1/2) of its sd
   (Bernstein-von Mises), far below the 0.1 sd of the target: the approximation is the
   reference, said as such.
3. ``sgld``: ``SGLD(model)`` at its defaults, minibatches of 1,000, one chain, warm-up
   ``--warmup`` steps, then chunks of ``--chunk`` draws until the target or ``--cap``
   seconds (the race of ``numpyro_sgrld.app.time_to_accuracy``); the wall time includes
   compilation and warm-up. Peak resident memory at its end. This stage and the next run on
   the kernels' own loop (``numpyro_sgrld.enable_fast_sampling_loop``): NumPyro's compiles
   the loop again on every ``MCMC.run`` of a chunk (4.4 s each here), and a run on it
   stopped after 73 chunks with XLA's "LLVM compilation error: Cannot allocate memory"
   (with 17 GB of the machine's memory free).
   ``sgld-contiguous``: the same with ``batching="contiguous"`` (each minibatch a run of
   consecutive rows from a uniform first row: one read a step; the rows were written in
   random order, as :func:`numpyro_sgrld.data.sharding.shuffled_rows` writes them).
4. ``speed-disk``, ``speed-disk-slice``, ``speed-memory``: steps per second of the same
   kernel after its warm-up (the median of three runs of ``--steps`` steps, each continuing
   the last), with the rows on disk (all N, then the first ``--memory-rows``) and with the
   first ``--memory-rows`` rows in memory. The kernel's in-memory path needs several times
   the data's size at its set-up (the data checks and the full-data passes hold copies), more
   than a 24 GB machine has at N = 10^8, so memory is measured on the slice: a step's cost
   depends on N only through the gather of its n rows, and ``speed-disk-slice`` gives the
   ratio at equal N. ``speed-disk-contiguous``, ``speed-disk-slice-contiguous``,
   ``speed-memory-contiguous``: the same with ``batching="contiguous"``.
5. ``shuffle``: the seconds and peak resident memory of ``shuffled_rows`` writing both files
   in a random order (into ``FOLDER/shuffled``, removed after).
6. ``gradient``: one full-data gradient of the same model in memory on a slice of
   ``--slice`` rows (the median of 5, after compiling), times N / slice: what each of NUTS's
   leapfrog steps would cost at N rows.
7. ``hmcecs``: NumPyro's HMCECS (``numpyro_sgrld.app.time_to_accuracy.hmcecs_runner``: the MAP
   by SVI, then NUTS within Gibbs over 100 blocks of the subsample, the Taylor proxy around
   the MAP) on the same slice in memory: the seconds of its set-up and warm-up (its proxy
   takes the full data's gradient and Hessian at the MAP: a pass over all N rows, which at
   10^8 rows scales as ``gradient``'s) and the seconds per draw after it, whose minibatches
   do not grow with N.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

D, BATCH = 20, 1000
STAGES = ("write", "reference", "sgld", "sgld-contiguous", "speed-disk", "speed-disk-slice",
          "speed-memory", "speed-disk-contiguous", "speed-disk-slice-contiguous",
          "speed-memory-contiguous", "shuffle", "gradient", "hmcecs")


def _done(out):
    if not Path(out).exists():
        return {}
    return {r["stage"]: r for r in map(json.loads, Path(out).read_text().splitlines())}


def write(folder, rows, seed=0):
    import numpy as np

    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    X = np.lib.format.open_memmap(f"{folder}/X.npy", "w+", np.float32, (rows, D))
    y = np.lib.format.open_memmap(f"{folder}/y.npy", "w+", np.float32, (rows,))
    w0 = rng.normal(size=D) / np.sqrt(D)
    for start in range(0, rows, 1_000_000):
        end = min(rows, start + 1_000_000)
        chunk = rng.standard_normal((end - start, D), dtype=np.float32)
        X[start:end] = chunk
        y[start:end] = rng.random(end - start) < 1 / (1 + np.exp(-chunk @ w0))
        if (start // 1_000_000) % 64 == 63:  # the written pages leave the mapping
            X.flush()
            y.flush()
            from numpyro_sgrld.data.host_data import release

            release(X)
            release(y)
    X.flush()
    y.flush()
    return {"w_true": w0.tolist()}


def reference(folder, iterations=8, chunk=1_000_000):
    import numpy as np

    from numpyro_sgrld.data.host_data import release

    X = np.load(f"{folder}/X.npy", mmap_mode="r")
    y = np.load(f"{folder}/y.npy", mmap_mode="r")
    w = np.zeros(D)
    for it in range(iterations):
        grad, hess = w.copy(), np.eye(D)
        for start in range(0, X.shape[0], chunk):
            xc = np.asarray(X[start:start + chunk], np.float64)
            yc = np.asarray(y[start:start + chunk], np.float64)
            p = 1 / (1 + np.exp(-xc @ w))
            grad += xc.T @ (p - yc)
            hess += (xc * (p * (1 - p))[:, None]).T @ xc
            if (start // chunk) % 64 == 63:
                release(X)
                release(y)
        step = np.linalg.solve(hess, grad)
        w = w - step
        print(f"  Newton {it + 1}: |step| {np.abs(step).max():.3e}", flush=True)
        if np.abs(step).max() < 1e-10:
            break
    cov = np.linalg.inv(hess)
    return {"mean": w.tolist(), "sd": np.sqrt(np.diag(cov)).tolist()}


def _model(X, y):
    import numpyro
    import numpyro.distributions as dist

    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("obs", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def sgld(folder, ref, warmup, chunk, cap, batching="replacement"):
    import warnings
    from typing import NamedTuple

    import jax
    import numpy as np

    from numpyro_sgrld import SGLD, enable_fast_sampling_loop
    from numpyro_sgrld.app.time_to_accuracy import mcmc_runner, race
    from numpyro_sgrld.data.sharding import HostRows

    warnings.simplefilter("ignore")
    enable_fast_sampling_loop()  # NumPyro's loop compiles again on every run of a chunk

    class Ref(NamedTuple):
        mean: np.ndarray
        sd: np.ndarray

    args = tuple(HostRows(np.load(f"{folder}/{n}.npy", mmap_mode="r")) for n in "Xy")
    start = time.perf_counter()
    runner = mcmc_runner(SGLD(_model, batching=batching), args, warmup, chunk)
    result = race(f"SGLD ({_batching_words(batching)}, rows on disk)", runner,
                  Ref(np.asarray(ref["mean"]), np.asarray(ref["sd"])), cap,
                  jax.random.PRNGKey(0))
    return {"seconds_to_target": result.seconds_to_target, "reached": result.reached,
            "draws": result.draws, "max_mean_error_sd": result.max_mean_error,
            "worst_sd_ratio": result.worst_sd_ratio,
            "wall_seconds": time.perf_counter() - start,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _batching_words(batching):
    return "defaults" if batching == "replacement" else f"defaults but batching={batching!r}"


def speed(folder, rows, where, warmup, steps, batching="replacement"):
    """Steps per second of ``SGLD(_model, batching=batching)`` after warm-up: the median of
    three runs."""
    import warnings

    import jax
    import numpy as np
    from numpyro.infer import MCMC

    from numpyro_sgrld import SGLD, enable_fast_sampling_loop
    from numpyro_sgrld.data.sharding import HostRows

    warnings.simplefilter("ignore")
    enable_fast_sampling_loop()  # no compilation in the runs timed
    if where == "disk":
        args = tuple(HostRows(np.load(f"{folder}/{n}.npy", mmap_mode="r")[:rows]) for n in "Xy")
    else:
        args = tuple(jax.device_put(np.load(f"{folder}/{n}.npy", mmap_mode="r")[:rows].copy())
                     for n in "Xy")
    mcmc = MCMC(SGLD(_model, batching=batching), num_warmup=warmup, num_samples=steps,
                progress_bar=False, jit_model_args=True)
    mcmc.run(jax.random.PRNGKey(0), *args)
    rates = []
    for _ in range(3):
        mcmc.post_warmup_state = mcmc.last_state
        start = time.perf_counter()
        mcmc.run(mcmc.post_warmup_state.rng_key, *args)
        np.asarray(mcmc.get_samples()["w"])
        rates.append(steps / (time.perf_counter() - start))
    return {"steps_per_second": float(np.median(rates)), "runs": rates, "speed_rows": rows}


def shuffle(folder):
    """The seconds of ``shuffled_rows`` writing the files in a random order (into a folder of
    their own, removed after), and its peak resident memory."""
    import shutil

    import numpy as np

    from numpyro_sgrld.data.sharding import shuffled_rows

    target = f"{folder}/shuffled"
    start = time.perf_counter()
    out = shuffled_rows({n: np.load(f"{folder}/{n}.npy", mmap_mode="r") for n in "Xy"}, target)
    seconds = time.perf_counter() - start
    del out
    shutil.rmtree(target)
    return {"seconds": seconds}


def hmcecs(folder, rows, slice_rows):
    import jax
    import jax.numpy as jnp
    import numpy as np

    from numpyro_sgrld.app.time_to_accuracy import hmcecs_runner

    args = tuple(jnp.asarray(np.load(f"{folder}/{n}.npy", mmap_mode="r")[:slice_rows])
                 for n in "Xy")
    runner = hmcecs_runner(_model, args, num_warmup=500, chunk=100)
    start = time.perf_counter()
    runner.first(jax.random.PRNGKey(0))
    first = time.perf_counter() - start
    start = time.perf_counter()
    draws = len(runner.more())
    return {"slice_rows": slice_rows, "setup_and_warmup_seconds_on_slice": first,
            "seconds_per_draw": (time.perf_counter() - start) / draws}


def gradient(folder, rows, slice_rows):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from numpyro.infer.util import potential_energy

    from numpyro_sgrld.data.subsample import full_batch

    X = jnp.asarray(np.load(f"{folder}/X.npy", mmap_mode="r")[:slice_rows])
    y = jnp.asarray(np.load(f"{folder}/y.npy", mmap_mode="r")[:slice_rows])
    grad = jax.jit(jax.grad(lambda z, X, y: potential_energy(full_batch(_model), (X, y), {}, z)))
    z = {"w": jnp.zeros(D)}
    jax.block_until_ready(grad(z, X, y))
    times = []
    for _ in range(5):
        start = time.perf_counter()
        jax.block_until_ready(grad(z, X, y))
        times.append(time.perf_counter() - start)
    per = float(np.median(times))
    return {"slice_rows": slice_rows, "seconds_per_gradient_on_slice": per,
            "seconds_per_gradient_extrapolated": per * rows / slice_rows}


def _batching(stage):
    return "contiguous" if stage.endswith("-contiguous") else "replacement"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=100_000_000)
    p.add_argument("--folder", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--chunk", type=int, default=2000)
    p.add_argument("--cap", type=float, default=1800.0)
    p.add_argument("--slice", type=int, default=1_000_000)
    p.add_argument("--memory-rows", type=int, default=10_000_000)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--stage")
    a = p.parse_args()
    done = _done(a.out)
    if a.stage:
        if a.stage == "write":
            result = write(a.folder, a.rows)
        elif a.stage == "reference":
            result = reference(a.folder)
        elif a.stage.startswith("sgld"):
            result = sgld(a.folder, done["reference"], a.warmup, a.chunk, a.cap,
                          _batching(a.stage))
        elif a.stage.startswith("speed"):
            all_rows = a.stage in ("speed-disk", "speed-disk-contiguous")
            result = speed(a.folder, a.rows if all_rows else a.memory_rows,
                           a.stage.split("-")[1], a.warmup, a.steps, _batching(a.stage))
        elif a.stage == "shuffle":
            result = shuffle(a.folder)
        elif a.stage == "hmcecs":
            result = hmcecs(a.folder, a.rows, a.slice)
        else:
            result = gradient(a.folder, a.rows, a.slice)
        result.update(stage=a.stage, rows=a.rows,
                      peak_rss_mib=result.get("peak_rss_mib", resource.getrusage(
                          resource.RUSAGE_SELF).ru_maxrss / 1024))
        with open(a.out, "a") as f:
            f.write(json.dumps(result) + "\n")
        return
    for stage in STAGES:
        if stage in done and done[stage]["rows"] == a.rows:
            continue
        start = time.perf_counter()
        subprocess.run([sys.executable, __file__, *sys.argv[1:], "--stage", stage], check=True)
        print(f"{stage}: {time.perf_counter() - start:.0f} s", flush=True)
    done = _done(a.out)
    size = sum(os.path.getsize(f"{a.folder}/{n}.npy") for n in "Xy") / 2**30
    g, h = done["gradient"], done["hmcecs"]
    print(f"\nN = {a.rows:,} rows x {D} features, files {size:.1f} GiB, minibatch {BATCH}")
    print("| measure | value |\n|---|---|")
    for batching in ("replacement", "contiguous"):
        tail = "" if batching == "replacement" else "-contiguous"
        s = done["sgld" + tail]
        disk, sliced, memory = (done[k + tail] for k in
                                ("speed-disk", "speed-disk-slice", "speed-memory"))
        words = _batching_words(batching)
        print(f"| SGLD ({words}, rows on disk): time to the target | "
              f"{s['seconds_to_target']:.0f} s ({'reached' if s['reached'] else 'not reached'}, "
              f"{s['draws']:,} draws, max mean error {s['max_mean_error_sd']:.3f} sd, "
              f"worst sd ratio {s['worst_sd_ratio']:.3f}); peak resident memory "
              f"{s['peak_rss_mib']:,.0f} MiB |")
        print(f"| the same after warm-up, steps per second: rows on disk, N = {a.rows:,} | "
              f"{disk['steps_per_second']:.0f} (peak resident memory "
              f"{disk['peak_rss_mib']:,.0f} MiB) |")
        print(f"| the same, rows on disk, N = {a.memory_rows:,} | "
              f"{sliced['steps_per_second']:.0f} |")
        print(f"| the same, rows in memory, N = {a.memory_rows:,} | "
              f"{memory['steps_per_second']:.0f} (peak resident memory "
              f"{memory['peak_rss_mib']:,.0f} MiB) |")
        print(f"| steps per second, disk / memory ({words}) | "
              f"{disk['steps_per_second'] / memory['steps_per_second']:.2f} at N = "
              f"{a.rows:,} on disk; {sliced['steps_per_second'] / memory['steps_per_second']:.2f}"
              f" at equal N |")
    base = done["speed-memory"]["steps_per_second"]
    print(f"| steps per second, contiguous on disk / defaults in memory | "
          f"{done['speed-disk-contiguous']['steps_per_second'] / base:.2f} at N = {a.rows:,} "
          f"on disk; {done['speed-disk-slice-contiguous']['steps_per_second'] / base:.2f} at "
          f"equal N |")
    sh = done["shuffle"]
    print(f"| shuffled_rows: the files written in a random order | {sh['seconds']:.0f} s "
          f"(peak resident memory {sh['peak_rss_mib']:,.0f} MiB) |")
    print(f"| NUTS: one full-data gradient, extrapolated from {g['slice_rows']:,} rows in "
          f"memory | {g['seconds_per_gradient_extrapolated']:.1f} s |")
    print(f"| HMCECS on {h['slice_rows']:,} rows in memory: set-up and warm-up; then per draw | "
          f"{h['setup_and_warmup_seconds_on_slice']:.0f} s; {h['seconds_per_draw']:.3f} s |")


if __name__ == "__main__":
    main()
