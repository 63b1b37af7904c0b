"""XLA's flop and byte counts of one compiled step with the equipartition check and without it
(``state.equipartition=None``), as docs/benchmarks.md, "The equipartition check's cost",
reports it, written to a JSON record:

    python benchmarks/speed/equipartition_cost.py --out docs/results/equipartition_cost.json

Rows: SGLD at its defaults after warm-up on German credit (25 weights, minibatch 100, checked
coordinate by coordinate), 4 vectorised chains; SGLD at a given step on the MLP whose density is
the hand-written loop's formula (``speed._mlp(formula=True)``: 50 inputs, 64 hidden units, 10
classes, 3,914 weights, checked per layer), one chain; SGLD at a given step on Yu et al.'s
784-400-400-10 MLP (``speed._mlp()``, 478,410 weights, per layer), one chain.
"""

import argparse
import importlib.util
import json
import time
from functools import partial
from pathlib import Path

import jax
from jax import random

import numpyro_sgrld as ns
from numpyro_sgrld.app.problems import PROBLEMS


def _cost(fn, *args):
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return cost["flops"], cost["bytes accessed"]


def _speed():
    path = Path(__file__).with_name("speed.py")
    spec = importlib.util.spec_from_file_location("speed_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(name, kernel, state, args):
    host = kernel.after_warmup(state) or kernel
    step = partial(host.sample, model_args=args, model_kwargs={})
    with_check, with_bytes = _cost(step, state)
    without, without_bytes = _cost(step, state._replace(equipartition=None))
    return {"step": name, "without": without, "with": with_check, "ratio": with_check / without,
            "bytes_without": without_bytes, "bytes_with": with_bytes,
            "bytes_ratio": with_bytes / without_bytes}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    a = parser.parse_args()
    rows = []
    problem = PROBLEMS["german_credit"]()
    kernel = ns.SGLD(problem.model)
    state = kernel.init(random.split(random.PRNGKey(0), 4), 200, None, problem.args, {})
    rows.append(_row("SGLD after warm-up, German credit, 4 chains", kernel, state,
                     problem.args))
    speed = _speed()
    p = speed._mlp(batch=100, width=64, n_data=2_000, inputs=50, formula=True)
    args = (p["X"], p["y"])
    kernel = speed._kernel(speed.KERNELS["SGLD"], p)
    state = kernel.init(random.PRNGKey(0), 0, None, args, {})
    rows.append(_row("SGLD at a given step, the MLP by formula, 1 chain", kernel, state, args))
    p = speed._mlp()
    args = (p["X"], p["y"])
    kernel = speed._kernel(speed.KERNELS["SGLD"], p)
    state = kernel.init(random.PRNGKey(0), 0, None, args, {})
    rows.append(_row("SGLD at a given step, the 784-400-400-10 MLP, 1 chain", kernel, state,
                     args))
    for r in rows:
        print(f"| {r['step']} | {r['without']:,.0f} | {r['with']:,.0f} | {r['ratio']:.3f} "
              f"| {r['bytes_without']:,.0f} | {r['bytes_with']:,.0f} | {r['bytes_ratio']:.3f} |")
    a.out.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "jax": jax.__version__,
                                 "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
