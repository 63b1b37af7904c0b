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

``--plain`` adds, on the same centred model and data, runs of the same length whose cost
shows how much of SGGibbs's is its SG kernel's: plain ``SGLD`` at its defaults (no Gibbs
sweep; it does not mix this posterior, so only its cost is read), ``SGLD`` at a given step
``STEP`` (warm-up learns no step), and ``SGGibbs`` of that ``SGLD``.
"""

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEP = 1e-4  # the given step of --plain's runs (their cost is read, not their accuracy)


def measured(which):
    """``which`` ("nuts", or one of :func:`plain_or_gibbs`) in this process: a dict of the
    times."""
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

    from numpyro_sgrld.sampler import gibbs, kernel

    X, y = lr.load_german_credit()
    X, y = jnp.asarray(X), jnp.asarray(y)
    set_up = []
    owner = kernel.SGMCMC if which.startswith("sgld") else gibbs.SGGibbs
    init = owner.init

    def timed_init(self, *args, **kwargs):
        start = time.perf_counter()
        out = init(self, *args, **kwargs)
        set_up.append((start - t0[0], time.perf_counter() - t0[0]))
        return out

    owner.init = timed_init
    events.clear()
    t0[0] = time.perf_counter()
    if which == "nuts":
        _, seconds = g.nuts(X, y, 500, 2)
    else:
        seconds = plain_or_gibbs(which, X, y)
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


def plain_or_gibbs(which, X, y):
    """The seconds of ``MCMC.run`` of ``which``: "sg" (the race's default SGGibbs run),
    "sg_step" (SGGibbs of SGLD at ``STEP``), "sgld" or "sgld_step" (plain SGLD at its
    defaults or at ``STEP``), 4 vectorised chains of 1,000 + 8,000 steps."""
    import warnings
    from functools import partial

    import gibbs_sparse_logistic as g
    import jax
    from numpyro.infer import MCMC

    import numpyro_sgrld as ns

    if which == "sg":
        return g.sg_gibbs("SGLD", X, y, 1000, 8000, seed=2, chain_method="vectorized")[1]
    step = {"step_size": STEP} if which.endswith("_step") else {}
    sgld = ns.SGLD(partial(g.centred, subsample_size=100), **step)
    mcmc = MCMC(sgld if which.startswith("sgld") else ns.SGGibbs(sgld), num_warmup=1000,
                num_samples=8000, num_chains=4, chain_method="vectorized", progress_bar=False)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(2), X, y)
    return time.perf_counter() - start


def fresh(which):
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(measured, which).result()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plain", action="store_true",
                        help="add plain SGLD (defaults, given step) and SGGibbs at a given step")
    args = parser.parse_args()
    rows = {"SGGibbs(SGLD), 4 vectorised, 1,000 + 8,000": fresh("sg"),
            "NUTS, 4 sequential, 1,000 + 500": fresh("nuts")}
    if args.plain:
        rows.update({
            "SGLD alone at its defaults, 4 vectorised, 1,000 + 8,000": fresh("sgld"),
            f"SGLD alone at step {STEP:g}, the same": fresh("sgld_step"),
            f"SGGibbs(SGLD at step {STEP:g}), the same": fresh("sg_step")})
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
