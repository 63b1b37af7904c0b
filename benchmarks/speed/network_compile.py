"""Where a default run's time goes on a small network: XLA's compilations against the rest.

SGLD at its defaults (4 vectorised chains, ``--warmup`` + ``--samples`` steps) on a reference
problem of ``benchmarks/references/problems.py`` (``cancer`` by default: the 30-16-2 tanh MLP
on 400 rows), on one core (XLA limited to one thread), with JAX's compile log on: the run's
wall time, the time XLA spent compiling, and the largest compilations (the sampling loop, the
chains' start). On these networks a preset's run is mostly compilation, which is why its
time hardly depends on the number of steps (docs/benchmarks.md, "Where SG-MCMC beats NUTS on
a network")::

    taskset -c 0 python benchmarks/speed/network_compile.py
    taskset -c 0 python benchmarks/speed/network_compile.py --warmup 2000 --samples 20000
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "references"))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import argparse  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402

import jax  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402

COMPILED = re.compile(r"Finished XLA compilation of (.*) in ([\d.e+-]+) sec")


class _Compiles(logging.Handler):
    """Collects ``(seconds, name)`` of every XLA compilation JAX logs."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def emit(self, record):
        found = COMPILED.search(record.getMessage())
        if found:
            self.rows.append((float(found.group(2)), found.group(1)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problem", default="cancer")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--samples", type=int, default=200)
    a = parser.parse_args()
    warnings.simplefilter("ignore")
    problem = P.PROBLEMS[a.problem]()
    jax.config.update("jax_log_compiles", True)
    compiles = _Compiles()
    logger = logging.getLogger("jax")
    logger.addHandler(compiles)
    logger.setLevel(logging.DEBUG)
    start = time.perf_counter()
    mcmc = MCMC(ns.SGLD(problem["model"]), num_warmup=a.warmup, num_samples=a.samples,
                num_chains=4, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *problem["train"])
    jax.block_until_ready(mcmc.get_samples())
    seconds = time.perf_counter() - start
    total = sum(s for s, _ in compiles.rows)
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}; {a.problem}, SGLD, 4 chains, "
          f"{a.warmup:,} + {a.samples:,} steps")
    print(f"run {seconds:.1f} s, of which XLA compiling {total:.1f} s "
          f"({len(compiles.rows)} compilations)")
    for s, name in sorted(compiles.rows, reverse=True)[:5]:
        print(f"  {s:6.1f} s  {name}")


if __name__ == "__main__":
    main()
