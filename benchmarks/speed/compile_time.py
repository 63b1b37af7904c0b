"""XLA compile time of the fast sampling loop for SGLD on German credit, by configuration.

    python benchmarks/speed/compile_time.py

One chain, 40 steps, every 5th kept; the loop is lowered and compiled with
``jax.jit(...).lower(...).compile()`` and timed, and its optimized HLO's lines counted. The
last configuration is the default without the warm-up's preconditioner piece
(``warmup.pieces.preconditioner_init`` giving no statistics: the learnt preconditioner's
updates and window ends):
the share of the compile time that the rarely taken warm-up work costs.
Results: docs/benchmarks.md ("The main job").
"""

import time
from functools import partial

import jax
import numpy as np
from jax import random

from numpyro_sgrld import SGLD, gradients, metrics
from numpyro_sgrld.app import compare
from numpyro_sgrld.sampler import loop as _loop
from numpyro_sgrld.warmup import steps

CONFIGS = {
    "fixed step, identity metric": dict(step_size=1e-3),
    "adapted step, identity metric": dict(metric=metrics.identity(),
                                          gradient=gradients.minibatch()),
    "adapted step, identity metric, control variates": dict(metric=metrics.identity()),
    "adapted step, learnt diagonal metric": dict(metric=metrics.learnt_diagonal(),
                                                 gradient=gradients.minibatch()),
    "adapted step, learnt dense metric": dict(gradient=gradients.minibatch()),
    "the default: adapted step, learnt metric, control variates": {},
}


def compile_seconds(kernel, args, alone=False):
    state = kernel.init(random.PRNGKey(0), 2000, None, args, {})
    if alone:  # one step, outside any loop
        compiled = _timed(jax.jit(lambda s: kernel.sample(s, args, {})).lower(state))
        return compiled

    def body(s):
        return kernel.sample(s, args, {})

    def transform(s):
        return kernel.postprocess_fn(args, {})(s.z)

    collection = _loop._empty_collection(transform, state, 8)
    loop_args = (np.int32(0), np.int32(40), state, collection, np.int32(0), np.int32(5),
                 state.num_rejected)
    return _timed(jax.jit(partial(_loop._segment_loop, body, transform)).lower(*loop_args))


def _timed(lowered):
    start = time.perf_counter()
    compiled = lowered.compile()
    return time.perf_counter() - start, compiled.as_text().count("\n")


def _window_end_as(mode):
    """``jax.lax.cond`` with the learnt metric's window end (``true_fun``
    ``warmup.steps.window_end``) never taken (``"skipped"``) or always taken (``"taken"``)."""
    cond = jax.lax.cond

    def patched(pred, true_fun, false_fun, *operands):
        if getattr(getattr(true_fun, "func", true_fun), "__name__", "") == "window_end":
            return (false_fun if mode == "skipped" else true_fun)(*operands)
        return cond(pred, true_fun, false_fun, *operands)

    return cond, patched


def main():
    problem = compare.PROBLEMS["german_credit"]()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}")
    print("| SGLD configuration | compile (s) | optimized HLO lines |\n|---|---|---|")
    for label, kwargs in CONFIGS.items():
        seconds, lines = compile_seconds(SGLD(problem.model, **kwargs), problem.args)
        print(f"| {label} | {seconds:.1f} | {lines:,} |", flush=True)
    learn = steps.pieces.preconditioner_init
    try:  # no window statistics: no updates of them, no window ends
        steps.pieces.preconditioner_init = lambda setting, begin: None
        seconds, lines = compile_seconds(SGLD(problem.model), problem.args)
    finally:
        steps.pieces.preconditioner_init = learn
    print(f"| the default without the learnt metric's warm-up updates and window ends | "
          f"{seconds:.1f} | {lines:,} |")
    for mode, label, alone in (("skipped", "the default, window end never taken", False),
                               ("taken", "one step alone, window end always taken", True)):
        cond, patched = _window_end_as(mode)
        jax.lax.cond = patched
        try:
            seconds, lines = compile_seconds(SGLD(problem.model), problem.args, alone=alone)
        finally:
            jax.lax.cond = cond
        print(f"| {label} | {seconds:.1f} | {lines:,} |")


if __name__ == "__main__":
    main()
