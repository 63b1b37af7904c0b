"""XLA's count of one compiled step of the main presets on German credit: floating-point
operations, bytes accessed, optimized HLO lines and ``conditional`` instructions, at a fixed
step, with the default warm-up (``step_size=None``) and, for the defaults, the step after
warm-up as an accelerator's loop runs it (``SGMCMC.after_warmup``: no warm-up branches, the
control variates on or off), one chain. Deterministic: the measure for changes too small to
time on a busy machine.

    python benchmarks/speed/step_xla_count.py

Results: docs/benchmarks.md ("The main job", "The step after warm-up").
"""

import warnings

import jax
import jax.numpy as jnp
from jax import random

from numpyro_sgrld.kernels import KERNELS
from numpyro_sgrld.problems import PROBLEMS

NAMES = ("SGLD", "SGHMC", "PSGLD", "MongeSGLD", "ShampooSGLD")


def count(sample, state, args):
    """``(flops, bytes accessed, optimized HLO lines, conditionals)`` of one compiled
    ``sample(state, args, {})``."""
    compiled = jax.jit(lambda s, a: sample(s, a, {})).lower(state, args).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    hlo = compiled.as_text()
    return cost["flops"], cost["bytes accessed"], hlo.count("\n"), hlo.count(" conditional(")


def step_count(kernel, args):
    """:func:`count` of one compiled ``kernel.sample``."""
    state = kernel.init(random.PRNGKey(0), 2000, None, args, {})
    return count(kernel.sample, state, args)


def after_warmup_counts(kernel, args):
    """``{label: count}`` of the kernel's step after warm-up, control variates off and on."""
    state = kernel.init(random.PRNGKey(0), 2000, None, args, {})
    out = {}
    for active in (False, True):
        s = state._replace(gradient_state=state.gradient_state._replace(
            active=jnp.asarray(active)))
        phase = kernel.after_warmup(s)
        out[f"after warm-up, control variates {'on' if active else 'off'}"] = count(
            phase.sample, s, args)
    return out


def main():
    warnings.simplefilter("ignore")
    problem = PROBLEMS["german_credit"]()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    print("| kernel | step | flops | bytes accessed | optimized HLO lines | conditionals |\n"
          "|---|---|---|---|---|---|")
    for name in NAMES:
        rows = {"fixed (1e-4)": step_count(KERNELS[name](problem.model, step_size=1e-4),
                                           problem.args),
                "adapted (default)": step_count(KERNELS[name](problem.model), problem.args)}
        rows.update(after_warmup_counts(KERNELS[name](problem.model), problem.args))
        for label, (flops, nbytes, lines, conds) in rows.items():
            print(f"| {name} | {label} | {flops:,.0f} | {nbytes:,.0f} | {lines:,} | {conds} |",
                  flush=True)


if __name__ == "__main__":
    main()
