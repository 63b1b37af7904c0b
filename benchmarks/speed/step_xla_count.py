"""XLA's count of one compiled step of the main presets on German credit: floating-point
operations, bytes accessed and optimized HLO lines, at a fixed step and with the default
warm-up (``step_size=None``), one chain. Deterministic: the measure for changes too small to
time on a busy machine.

    python benchmarks/speed/step_xla_count.py

Results: docs/benchmarks.md ("The main job").
"""

import warnings

import jax
from jax import random

from numpyro_sgrld.kernels import KERNELS
from numpyro_sgrld.problems import PROBLEMS

NAMES = ("SGLD", "SGHMC", "PSGLD", "MongeSGLD", "ShampooSGLD")


def step_count(kernel, args):
    """``(flops, bytes accessed, optimized HLO lines)`` of one compiled ``kernel.sample``."""
    state = kernel.init(random.PRNGKey(0), 2000, None, args, {})
    compiled = jax.jit(lambda s, a: kernel.sample(s, a, {})).lower(state, args).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return cost["flops"], cost["bytes accessed"], compiled.as_text().count("\n")


def main():
    warnings.simplefilter("ignore")
    problem = PROBLEMS["german_credit"]()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    print("| kernel | step | flops | bytes accessed | optimized HLO lines |\n|---|---|---|---|---|")
    for name in NAMES:
        for label, kwargs in (("fixed (1e-4)", {"step_size": 1e-4}), ("adapted (default)", {})):
            flops, nbytes, lines = step_count(KERNELS[name](problem.model, **kwargs),
                                              problem.args)
            print(f"| {name} | {label} | {flops:,.0f} | {nbytes:,.0f} | {lines:,} |", flush=True)


if __name__ == "__main__":
    main()
