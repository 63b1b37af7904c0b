"""XLA's count of one compiled step of the main presets on German credit: floating-point
operations, bytes accessed, optimized HLO lines and ``conditional`` instructions, at a fixed
step, with the default warm-up (``step_size=None``) and, for the defaults, the step after
warm-up as an accelerator's loop runs it (``SGMCMC.after_warmup``: no warm-up branches, the
control variates on or off), one chain. Deterministic: the measure for changes too small to
time on a busy machine.

    python benchmarks/speed/step_xla_count.py
    python benchmarks/speed/step_xla_count.py --all --save before.json  # every preset
    python benchmarks/speed/step_xla_count.py --all --check before.json  # after a change
    python benchmarks/speed/step_xla_count.py --gibbs  # and SGGibbs(SGLD), 4 vectorised chains

``--all`` counts every preset but the networks'; ``--gibbs`` adds ``SGGibbs(SGLD)`` on the
centred sparse logistic regression (``benchmarks/accuracy/gibbs_sparse_logistic.py``), one
transition of 4 vectorised chains, at a fixed step (1e-3) and adapted; ``--save`` writes the
counts to a JSON file, ``--check`` compares them with a saved file and exits with status 1
where a step's flops or bytes accessed grew.

Results: docs/benchmarks.md ("The main job", "The step after warm-up").
"""

import argparse
import json
import sys
import warnings

import jax
import jax.numpy as jnp
from jax import random

from numpyro_sgrld.app.problems import NETWORK_KERNELS, PROBLEMS
from numpyro_sgrld.presets.table import KERNELS

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
    """``{label: count}`` of the kernel's step after warm-up, control variates off and on
    (only the first where the kernel has none)."""
    state = kernel.init(random.PRNGKey(0), 2000, None, args, {})
    out = {}
    if getattr(state.gradient_state, "active", None) is None:
        out["after warm-up"] = count(kernel.after_warmup(state).sample, state, args)
        return out
    for active in (False, True):
        s = state._replace(chain=state.chain._replace(
            gradient_state=state.gradient_state._replace(active=jnp.asarray(active))))
        phase = kernel.after_warmup(s)
        out[f"after warm-up, control variates {'on' if active else 'off'}"] = count(
            phase.sample, s, args)
    return out


def counts(names):
    """``{kernel: {step: count}}`` on German credit."""
    problem = PROBLEMS["german_credit"]()
    out = {}
    for name in names:
        rows = {"fixed (1e-4)": step_count(KERNELS[name](problem.model, step_size=1e-4),
                                           problem.args),
                "adapted (default)": step_count(KERNELS[name](problem.model), problem.args)}
        rows.update(after_warmup_counts(KERNELS[name](problem.model), problem.args))
        out[name] = rows
        for label, (flops, nbytes, lines, conds) in rows.items():
            print(f"| {name} | {label} | {flops:,.0f} | {nbytes:,.0f} | {lines:,} | {conds} |",
                  flush=True)
    return out


def gibbs_counts():
    """``{"SGGibbs(SGLD)": {step: count}}``: one transition of 4 vectorised chains of
    ``SGGibbs(SGLD)`` on the centred sparse logistic regression."""
    from functools import partial
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "accuracy"))
    from gibbs_sparse_logistic import centred
    from numpyro_sgrld.models import logistic_regression

    import numpyro_sgrld as ns

    X, y = logistic_regression.load_german_credit()
    args = (jnp.asarray(X), jnp.asarray(y))
    model = partial(centred, subsample_size=100)
    rows = {}
    for label, options in (("fixed (1e-3)", {"step_size": 1e-3}), ("adapted (default)", {})):
        kernel = ns.SGGibbs(ns.SGLD(model, **options))
        state = kernel.init(random.split(random.PRNGKey(2), 4), 4000, None, args, {})
        rows[label] = count(kernel.sample, state, args)
        flops, nbytes, lines, conds = rows[label]
        print(f"| SGGibbs(SGLD) | {label} | {flops:,.0f} | {nbytes:,.0f} | {lines:,} | {conds} |",
              flush=True)
    return {"SGGibbs(SGLD)": rows}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--all", action="store_true", help="every preset but the networks'")
    parser.add_argument("--gibbs", action="store_true",
                        help="also SGGibbs(SGLD) on the centred sparse logistic regression")
    parser.add_argument("--save", help="write the counts to this JSON file")
    parser.add_argument("--check", help="compare the counts with this JSON file")
    a = parser.parse_args()
    warnings.simplefilter("ignore")
    names = [k for k in KERNELS if k not in NETWORK_KERNELS] if a.all else NAMES
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    print("| kernel | step | flops | bytes accessed | optimized HLO lines | conditionals |\n"
          "|---|---|---|---|---|---|")
    out = counts(names)
    if a.gibbs:
        out.update(gibbs_counts())
    if a.save:
        with open(a.save, "w") as f:
            json.dump(out, f, indent=1)
    if a.check:
        before, grew = json.load(open(a.check)), []
        for name, rows in out.items():
            for label, (flops, nbytes, *_) in rows.items():
                old = before.get(name, {}).get(label)
                if old is not None and (flops > old[0] or nbytes > old[1]):
                    grew.append(f"{name} {label}: flops {old[0]:,.0f} -> {flops:,.0f}, "
                                f"bytes {old[1]:,.0f} -> {nbytes:,.0f}")
        print("\n".join(grew) or "no step grew")
        sys.exit(1 if grew else 0)


if __name__ == "__main__":
    main()
