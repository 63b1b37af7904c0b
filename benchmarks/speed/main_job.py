"""The main job as a user runs it: ``sgrld`` (its defaults) in a process of its own, every line
of its output timestamped as it arrives, and one JSON record of the run.

    python benchmarks/speed/main_job.py --cache "$(mktemp -d)" --out docs/results/main_job_cold.json
    python benchmarks/speed/main_job.py --cache SAME_FOLDER --out docs/results/main_job_warm.json

The first (an empty cache) computes German credit's NUTS reference and the large problem's
Laplace reference and runs NUTS and HMCECS on the large problem to the target once, caching
their times; the second reads them. The record holds the wall time, the longest gap between two
lines, the output with each line's time, the report's two CSV tables, and the commit, the
versions and the machine's CPU count.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _versions():
    import arviz
    import jax
    import numpyro

    return {"python": sys.version.split()[0], "jax": jax.__version__,
            "numpyro": numpyro.__version__, "arviz": arviz.__version__}


def _commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache", required=True, help="NUMPYRO_SGRLD_CACHE for the run")
    parser.add_argument("--out", type=Path, required=True)
    a = parser.parse_args()
    report = Path(tempfile.mkdtemp(prefix="sgrld-report-"))
    env = {**os.environ, "NUMPYRO_SGRLD_CACHE": a.cache, "PYTHONUNBUFFERED": "1"}
    cached = any(Path(a.cache).rglob("*")) if Path(a.cache).exists() else False
    start = time.perf_counter()
    proc = subprocess.Popen(["sgrld", "compare", "--out", str(report)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append((round(time.perf_counter() - start, 2), line.rstrip("\n")))
        print(f"{lines[-1][0]:8.2f} {lines[-1][1]}", flush=True)
    rc = proc.wait()
    seconds = time.perf_counter() - start
    times = [0.0] + [t for t, _ in lines] + [seconds]

    def table(name):
        path = report / name
        return list(csv.DictReader(path.open())) if path.exists() else None

    record = {"command": "sgrld compare (the defaults)", "cache_had_files": cached,
              "returncode": rc, "seconds": round(seconds, 2),
              "longest_gap_seconds": round(max(b - t for t, b in zip(times, times[1:])), 2),
              "commit": _commit(), "cpus": os.cpu_count(), **_versions(),
              "date": time.strftime("%Y-%m-%d"), "comparison": table("comparison.csv"),
              "time_to_accuracy": table("time_to_accuracy.csv"),
              "verdict": next((line for _, line in lines if "Verdict" in line), None),
              "output": lines}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=1))
    print(f"{seconds:.1f} s, exit code {rc}; record: {a.out}; report: {report}")


if __name__ == "__main__":
    main()
