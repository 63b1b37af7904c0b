"""Peak memory of a run that keeps its draws in memory against the same run streamed to disk.

    python benchmarks/speed/streaming_memory.py --out streaming_memory.jsonl   # ~6 min on 2 cores

The horseshoe MLP 784-1200-1200-10 (Yu et al.'s W = 1200; 2,395,216 parameters with the six
layer scales), ``mlp_classifier(hidden=(1200, 1200), prior=priors.horseshoe("layer"),
subsample_size=100)``, SGLD with h = 0.25 / 50,000 from ``priors.init_to_unit_scales``, one
chain, on MNIST's 50,000 training images (``load_mnist(validation="drop")``; synthetic 784-d
inputs with ``--data synthetic`` or when MNIST is not cached). ``--draws`` K draws are kept,
one every ``--thinning`` steps, after ``--warmup`` steps; both runs use
``numpyro_sgrld.enable_fast_sampling_loop()``.

Each run is its own subprocess, so that its peak resident memory is its own:

- ``in-memory``: ``mcmc.run`` keeping the K draws, then ``mcmc.get_samples(group_by_chain=True)``;
- ``streamed``: :func:`numpyro_sgrld.analysis.streaming.run_streaming` with ``--segment-draws``
draws per
  segment, into a NetCDF file in ``--workdir`` (removed at the end unless ``--keep``).

Reported per run: the peak resident set (``VmHWM``, equal to ``ru_maxrss``) at the end, the
peak before sampling (data loaded, nothing compiled), the resident set at the end, the wall
time, and for the streamed run the file size. The predicted in-memory size of the draws is
K x parameters x 4 bytes. Both runs record a SHA-256 of the first, middle and last draw of
every site: equal digests say the streamed chain is the in-memory one. With
``--test-points n`` both runs also score the ensemble on the first n MNIST test images
(``classification_metrics`` on the kept draws against the on-the-fly
``classification_accumulator``), which adds the predictive's own memory to both.
Results are appended to ``--out`` (JSON lines) as each run ends, and a Markdown table is printed.
"""

import argparse
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

NUM_TRAIN = 50_000
STEP_SIZE = 0.25 / NUM_TRAIN


def _status_kib(field):
    """A ``kB`` field of ``/proc/self/status`` (``VmHWM``, ``VmRSS``), in KiB; ``ru_maxrss``
    where there is no ``/proc``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _gib(kib):
    return kib / 2**20


def _data(kind, test_points):
    import numpy as np

    if kind == "mnist":
        from numpyro_sgrld.models.mnist import load_mnist

        X, y, X_test, y_test = load_mnist(validation="drop")
    else:
        rng = np.random.default_rng(0)
        X = rng.uniform(size=(NUM_TRAIN, 784)).astype(np.float32)
        y = rng.integers(0, 10, NUM_TRAIN).astype(np.int32)
        X_test, y_test = X[:10_000], y[:10_000]
    return X, y, X_test[:test_points], y_test[:test_points]


def _digests(samples, draws):
    """SHA-256 (first 16 hex digits) of draws ``draws`` of every site, keyed by site."""
    import numpy as np

    out = {}
    for name in sorted(samples):
        h = hashlib.sha256()
        for k in draws:
            h.update(np.ascontiguousarray(samples[name][:, k]).tobytes())
        out[name] = h.hexdigest()[:16]
    return out


def child(args):
    """One run, in this process; prints one JSON line."""
    import numpy as np
    from jax import random
    from numpyro.infer import MCMC
    from numpyro_sgrld.models.bnn import mlp_classifier

    import numpyro_sgrld
    from numpyro_sgrld import SGLD, classification_metrics, priors
    from numpyro_sgrld.analysis.streaming import (
        classification_accumulator,
        classification_metrics_from,
        load_streamed,
        run_streaming,
    )

    numpyro_sgrld.enable_fast_sampling_loop()
    X, y, X_test, y_test = _data(args.data, args.test_points)
    net = partial(mlp_classifier, hidden=(args.width, args.width), prior=priors.horseshoe("layer"))
    kernel = SGLD(partial(net, subsample_size=100), STEP_SIZE,
                  init_strategy=priors.init_to_unit_scales)
    mcmc = MCMC(kernel, num_warmup=args.warmup, num_samples=args.draws * args.thinning,
                thinning=args.thinning, progress_bar=False)
    before = _status_kib("VmHWM")
    key = random.PRNGKey(args.seed)
    middle = [0, args.draws // 2, args.draws - 1]
    out = {"run": args.child, "data": args.data, "draws": args.draws, "thinning": args.thinning,
           "warmup": args.warmup, "width": args.width}
    t0 = time.perf_counter()
    if args.child == "in-memory":
        mcmc.run(key, X, y)
        samples = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
        out["seconds"] = time.perf_counter() - t0
        diverging = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["diverging"])
        if args.test_points:
            flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in samples.items()}
            scores = classification_metrics(net, flat, X_test, y_test, batch_size=250)
    else:
        path = Path(args.workdir) / "draws.nc"
        accumulator = (classification_accumulator(net, X_test, batch_size=250)
                       if args.test_points else None)
        run = run_streaming(mcmc, path, key, X, y, segment_draws=args.segment_draws,
                            accumulator=accumulator)
        out["seconds"] = time.perf_counter() - t0
        out["file_bytes"] = path.stat().st_size
        out["segment_draws"] = args.segment_draws
        if args.test_points:
            scores = classification_metrics_from(run.accumulated, y_test)
        peak = _status_kib("VmHWM")  # before reading anything back
        idata = load_streamed(path)  # lazily: reads only the draws hashed below
        samples = {k: v.isel(draw=middle).values for k, v in idata.posterior.items()}
        middle = [0, 1, 2]
        diverging = idata.sample_stats["diverging"].values
    out["peak_gib"] = _gib(peak if args.child == "streamed" else _status_kib("VmHWM"))
    out["peak_before_sampling_gib"] = _gib(before)
    out["rss_end_gib"] = _gib(_status_kib("VmRSS"))
    out["parameters"] = int(sum(np.prod(v.shape[2:], dtype=np.int64) for v in samples.values()))
    out["diverging_fraction"] = float(np.mean(diverging))
    out["digests"] = _digests(samples, middle)
    if args.test_points:
        out["test_points"] = args.test_points
        out["scores"] = {k: scores[k] for k in ("log_prob", "accuracy", "ece")}
    print("RESULT " + json.dumps(out), flush=True)


def table(results):
    lines = [
        "| run | peak RSS (GiB) | peak before sampling (GiB) | RSS at end (GiB) | file (GiB) | "
        "time (s) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        file = f"{r['file_bytes'] / 2**30:.2f}" if "file_bytes" in r else "–"
        name = r["run"] + (f" ({r['segment_draws']} draws/segment)" if "segment_draws" in r
                           else "")
        lines.append(
            f"| {name} | {r['peak_gib']:.2f} | {r['peak_before_sampling_gib']:.2f} | "
            f"{r['rss_end_gib']:.2f} | {file} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=250, help="kept draws K (default 250)")
    parser.add_argument("--thinning", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--segment-draws", type=int, default=25)
    parser.add_argument("--width", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-points", type=int, default=0,
                        help="score the ensemble on this many test images (default 0: no)")
    parser.add_argument("--data", choices=("mnist", "synthetic"), default=None,
                        help="default: MNIST when cached, else synthetic")
    parser.add_argument("--workdir", default=None, help="where the NetCDF file goes")
    parser.add_argument("--keep", action="store_true", help="keep the NetCDF file")
    parser.add_argument("--out", default=None, help="append the results here (JSON lines)")
    parser.add_argument("--child", choices=("in-memory", "streamed"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child(args)

    if args.data is None:
        from numpyro_sgrld.models._data import DataNotFoundError
        from numpyro_sgrld.models.mnist import load_mnist

        try:
            load_mnist(validation="drop")
            args.data = "mnist"
        except DataNotFoundError:
            args.data = "synthetic"
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="streaming-memory-"))
    workdir.mkdir(parents=True, exist_ok=True)
    forwarded = [
        "--draws", str(args.draws), "--thinning", str(args.thinning), "--warmup",
        str(args.warmup), "--segment-draws", str(args.segment_draws), "--width",
        str(args.width), "--seed", str(args.seed), "--test-points", str(args.test_points),
        "--data", args.data, "--workdir", str(workdir),
    ]
    results = []
    try:
        for run in ("in-memory", "streamed"):
            proc = subprocess.run(
                [sys.executable, __file__, *forwarded, "--child", run],
                capture_output=True, text=True, check=False,
            )
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
            if proc.returncode or not lines:
                sys.stderr.write(proc.stderr[-4000:])
                raise SystemExit(f"the {run} run failed (exit code {proc.returncode})")
            result = json.loads(lines[-1][len("RESULT "):])
            results.append(result)
            print(json.dumps(result), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(result) + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    memory, streamed = results
    predicted = args.draws * memory["parameters"] * 4
    print()
    print(table(results))
    print()
    print(f"Predicted in-memory draws: {args.draws} x {memory['parameters']:,} x 4 B = "
          f"{predicted / 2**30:.2f} GiB; data: {args.data}; {os.cpu_count()} CPU cores.")
    same = memory["digests"] == streamed["digests"]
    print(f"Same draws (SHA-256 of draws 0, K/2, K-1 of every site): {same}; diverging "
          f"fraction {memory['diverging_fraction']:.3f} / {streamed['diverging_fraction']:.3f}.")
    if args.test_points:
        print(f"Scores, in memory: {memory['scores']}; streamed: {streamed['scores']}.")
    summary = {"run": "summary", "predicted_draws_bytes": predicted, "same_draws": same,
               "cpu_cores": os.cpu_count(), "data": args.data}
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(summary) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
