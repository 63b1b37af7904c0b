"""Where a cold ``SGGibbs(SGLD)`` run on German credit's sparse regression spends its time,
beside NUTS's: the race of ``benchmarks/accuracy/gibbs_sparse_logistic.py`` (SGGibbs 4
vectorised chains of 1,000 + 8,000 steps, NUTS 4 sequential chains of 1,000 + 500 on the full
data, non-centred), each in a fresh Python process, with every XLA compilation timed (JAX's
``backend_compile_and_load``, wrapped).

For each run: the wall time of ``MCMC.run``; the kernel's set-up (``SGGibbs.init``) and the
compilation inside it (its count of programs, the time of those under 0.1 s each, mostly eager
code's single operations, and the largest; NUTS's: everything before its first loop's
compilation); the sampling loop's compilation (NUTS compiles one per sequential chain) and,
for SGGibbs, the time between its set-up and that compilation, which traces the loop; and the
rest, running the loops. Prints a table::

    python benchmarks/record.py docs/results/gibbs_fixed_cost.json -- \\
        python benchmarks/speed/gibbs_fixed_cost.py
"""

import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def measured(which):
    """``which`` ("sg" or "nuts") in this process: a dict of the times."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy"))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import jax.numpy as jnp
    from jax._src import compiler

    events = []  # (start since t0, seconds, program name)
    original = compiler.backend_compile_and_load
    t0 = [time.perf_counter()]

    def timed(backend, module, *args, **kwargs):
        start = time.perf_counter()
        out = original(backend, module, *args, **kwargs)
        events.append((start - t0[0], time.perf_counter() - start,
                       str(module.operation.attributes["sym_name"]).strip('"')))
        return out

    compiler.backend_compile_and_load = timed
    import gibbs_sparse_logistic as g
    from numpyro_sgrld.models import logistic_regression as lr

    from numpyro_sgrld.sampler import gibbs

    X, y = lr.load_german_credit()
    X, y = jnp.asarray(X), jnp.asarray(y)
    set_up = []
    init = gibbs.SGGibbs.init

    def timed_init(self, *args, **kwargs):
        start = time.perf_counter()
        out = init(self, *args, **kwargs)
        set_up.append((start - t0[0], time.perf_counter() - t0[0]))
        return out

    gibbs.SGGibbs.init = timed_init
    events.clear()
    t0[0] = time.perf_counter()
    if which == "sg":
        _, seconds, _, _ = g.sg_gibbs("SGLD", X, y, 1000, 8000, seed=2,
                                      chain_method="vectorized")
    else:
        _, seconds = g.nuts(X, y, 500, 2)
    loops = [e for e in events if e[2] == "jit__fori_collect_loop"]
    first_loop = loops[0][0] if loops else seconds
    # NUTS's set-up: everything before its first loop's compilation (its tracing included)
    begin, end = set_up[0] if set_up else (0.0, first_loop)
    inside = [e for e in events if begin <= e[0] < end]
    return {"total": seconds, "set_up": end - begin,
            "set_up_compiles": len(inside), "set_up_compile": sum(e[1] for e in inside),
            "one_op_compile": sum(e[1] for e in inside if e[1] < 0.1),
            "largest": sorted(((e[1], e[2]) for e in inside), reverse=True)[:4],
            "trace": first_loop - end, "loops": len(loops),
            "loop_compile": sum(e[1] for e in loops),
            "compile": sum(e[1] for e in events)}


def fresh(which):
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measured, which).result()


def main():
    rows = {"SGGibbs(SGLD), 4 vectorised, 1,000 + 8,000": fresh("sg"),
            "NUTS, 4 sequential, 1,000 + 500": fresh("nuts")}
    print("| run | MCMC.run (s) | set-up (s) | its compilation (s; programs; one-op "
          "programs' s) | the loop's tracing (s) | the loop's compilation (s; loops) | "
          "all compilation (s) | the rest: running (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r in rows.items():
        rest = r["total"] - r["set_up"] - max(r["trace"], 0.0) - r["loop_compile"]
        print(f"| {label} | {r['total']:.1f} | {r['set_up']:.1f} | {r['set_up_compile']:.1f};"
              f" {r['set_up_compiles']}; {r['one_op_compile']:.1f} | {max(r['trace'], 0):.1f} "
              f"| {r['loop_compile']:.1f}; {r['loops']} | {r['compile']:.1f} | {rest:.1f} |")
    for label, r in rows.items():
        if r["largest"]:
            print(f"{label}: the set-up's largest programs "
                  + ", ".join(f"{name} {s:.2f} s" for s, name in r["largest"]))


if __name__ == "__main__":
    main()
