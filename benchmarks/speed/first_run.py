"""Where the first ``MCMC.run``'s time goes: every XLA compilation of one SGLD run at a fixed
step on Yu et al.'s MLP (784-400-400-10, N = 60,000, minibatch 100), in a fresh process, from
JAX's compile log, against the hand-written ``lax.scan`` loop's first call.

    python benchmarks/speed/first_run.py            # the MLP
    python benchmarks/speed/first_run.py --quick    # MLP 784-32-32-10, N = 2,000

Programs are grouped by name: the large ones (the kernels' sampling loop, NumPyro's search for
valid initial values, the kernel's initialisation) each on their own line, and the
single-operation programs JAX compiles when an operation runs outside ``jit`` (tracing the
model once to find its sites, building the collection, reading the draws) counted together.
Each count is the first run's; a second run with the same shapes compiles nothing
(``tests/test_performance.py``). Results: docs/benchmarks.md ("The first run's compilations").
"""

import argparse
import logging
import re
import sys
import time
from pathlib import Path

import jax
from jax import random

sys.path.insert(0, str(Path(__file__).resolve().parent))
import speed  # noqa: E402

from numpyro_sgrld.presets.table import KERNELS  # noqa: E402

_FINISHED = re.compile(r"Finished XLA compilation of jit\((.*)\) in ([0-9.e-]+) sec")


class _Compilations(logging.Handler):
    """``(name, seconds)`` of every XLA compilation JAX logs."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen = []

    def emit(self, record):
        m = _FINISHED.search(record.getMessage())
        if m:
            self.seen.append((m.group(1), float(m.group(2))))


def _first_and_second(run):
    times = []
    for seed in (0, 1):
        start = time.perf_counter()
        jax.block_until_ready(run(100, random.PRNGKey(seed)))
        times.append(time.perf_counter() - start)
    return times


def breakdown(p, large=0.1):
    """``{"hand": (first, second), "ours": (first, second), "programs": [(name, count,
    seconds)]}`` for hand SGLD and ``SGLD`` at ``p``'s fixed step, 100 steps per run; the
    programs are our run's compilations, those under ``large`` seconds summed as one line."""
    hand = _first_and_second(speed.hand_written("sgld", p))
    handler = _Compilations()
    logger = logging.getLogger("jax")
    logger.addHandler(handler)
    previous = jax.config.jax_log_compiles
    jax.config.update("jax_log_compiles", True)
    try:
        ours = _first_and_second(speed.ours(KERNELS["SGLD"], p))
    finally:
        jax.config.update("jax_log_compiles", previous)
        logger.removeHandler(handler)
    programs, small = [], [0, 0.0]
    for name, seconds in handler.seen:
        if seconds >= large:
            programs.append((name, 1, seconds))
        else:
            small[0] += 1
            small[1] += seconds
    programs.append(("single operations and other programs under "
                     f"{large} s", small[0], small[1]))
    return {"hand": hand, "ours": ours, "programs": programs}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="MLP 784-32-32-10, N = 2,000")
    args = ap.parse_args(argv)
    p = speed._mlp(batch=100, **(dict(width=32, n_data=2000) if args.quick else {}))
    device = jax.devices()[0]
    out = breakdown(p)
    print(f"{p['title']}; {device.platform} {device.device_kind}; jax {jax.__version__}\n")
    (h1, h2), (o1, o2) = out["hand"], out["ours"]
    print(f"hand SGLD: first call {h1:.2f} s, second {h2:.2f} s (compile ~ {h1 - h2:.2f} s)")
    print(f"SGLD (fixed step): first run {o1:.2f} s, second {o2:.2f} s "
          f"(compile ~ {o1 - o2:.2f} s, {(o1 - o2) / (h1 - h2):.2f}x the hand loop's)\n")
    print("| program | compilations | seconds |\n|---|---|---|")
    for name, count, seconds in out["programs"]:
        print(f"| {name} | {count} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
