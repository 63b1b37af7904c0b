"""What the kernels' sampling loop (:mod:`numpyro_sgrld.sampler.loop`) tells the user: the progress
bar, a warning when steps after warm-up were rejected, and the verdict on the kept draws; and
the readers of ``MCMC``'s loop value they share with the loop.

The loop runs once per chain where ``MCMC`` draws its chains one after another
(``chain_method="sequential"``, or ``"parallel"`` on fewer devices than chains): there the
rejections and the draws of each chain are kept until the last chain has run, and that run gets
one warning of each kind, over all its chains, as a vectorized run does
(:func:`sequential_chain`)."""

import inspect
import os
import sys
import types
import warnings

import jax
import numpy as np
import numpyro

from numpyro_sgrld.verdict.run import describe
from numpyro_sgrld.verdict.step_rejections import step_rejection_problem

__all__ = ["plain_tuple", "state_of", "rejections", "adaptive_steps", "is_traced", "judge",
           "sequential_chain", "warn_if_rejected", "caller_level", "with_progress_bar"]


def plain_tuple(val):
    return isinstance(val, tuple) and not hasattr(val, "_fields")


def state_of(val):
    """The kernel state in ``MCMC``'s loop value (``(state, args, kwargs)`` or ``(state,)``)."""
    return val[0] if plain_tuple(val) else val


def rejections(val):
    """The kernel state's cumulative count of rejected steps (``None`` if it has none)."""
    state = state_of(val)
    return getattr(state, "num_rejected", None) if hasattr(state, "diverging") else None


def adaptive_steps(val, upper):
    """How many of this run's first steps are the step-size adaptation's warm-up (0 with a
    given step or after warm-up): there a step whose minibatch potential rises too steeply is
    rejected and the step shrinks, which is how the adaptation works, not a fault."""
    state = state_of(val)
    adaptation = getattr(state, "adaptation", None)
    if adaptation is None or not hasattr(state, "diverging") or is_traced((state.i, adaptation)):
        return 0
    left = int(np.max(np.asarray(adaptation.num_warmup) - np.asarray(state.i)))
    return min(max(left, 0), upper)


def sequential_chain(depth=12):
    """``(chain, num_chains, run)`` when this is called (within ``depth`` frames) inside one
    chain of an ``MCMC`` run whose chains are drawn one after another (NumPyro's loop over the
    chains, ``numpyro.infer.mcmc._laxmap``, with more than one chain): the chain's index, the
    number of chains and a token that is the same for every chain of that run; else
    ``None``."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            return None
        if (frame.f_code.co_name == "_laxmap"
                and frame.f_globals.get("__name__") == "numpyro.infer.mcmc"):
            chain, num_chains = frame.f_locals.get("i"), frame.f_locals.get("n")
            if isinstance(chain, int) and isinstance(num_chains, int) and num_chains > 1:
                return chain, num_chains, id(frame)
            return None
        frame = frame.f_back
    return None


#: What the earlier chains of a run whose chains are drawn one after another left for the
#: run's one warning, by kind: ``(run, [per chain])``.
_pending = {}


def _all_chains(kind, piece):
    """The pieces of every chain of the run, ``[piece]`` for a run of one loop (vectorized
    chains, or one chain); ``None`` while chains of a sequential run are still to come."""
    chain = sequential_chain()
    if chain is None:
        return [piece]
    index, num_chains, run = chain
    token, pieces = _pending.get(kind, (None, []))
    if index == 0 or token != run:
        pieces = []
    pieces.append(piece)
    if index < num_chains - 1:
        _pending[kind] = (run, pieces)
        return None
    _pending.pop(kind, None)
    return pieces


def is_traced(tree):
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


def judge(collection, kept, val, body_fun, num_steps):
    """The run's :func:`~numpyro_sgrld.verdict.judge.verdict` on its kept draws, warned when they
    cannot be trusted; nothing where the kernel kept the run's moments for its own verdict
    (``run_verdict.arm``: not one run judged twice)."""
    from numpyro_sgrld.verdict.judge import (
        leaves_by_chain,
        temperatures_of,
        thermostat_of,
        verdict,
        with_evaluation,
    )

    draws = collection[0] if isinstance(collection, (list, tuple)) else collection
    state = state_of(val)
    if (not isinstance(draws, dict) or kept < 4 or not hasattr(state, "diverging")
            or getattr(state, "monitor", None) is not None):
        return
    chain_axis = 1 if np.ndim(state.i) == 1 else None
    draws = leaves_by_chain({k: np.asarray(x)[:kept] for k, x in draws.items()}, chain_axis)
    kernel = describe(getattr(body_fun, "keywords", {}).get("sampler"))
    draws = with_evaluation(draws, kernel, constrained=False)
    acc = getattr(state, "equipartition", None)
    chains = _all_chains("verdict", (draws, np.atleast_1d(np.asarray(state.step_size)),
                                     None if acc is None else jax.device_get(acc),
                                     thermostat_of(state)))
    if chains is None:
        return
    if len(chains) == 1:
        v = verdict(draws, None, num_steps, kernel, np.asarray(state.step_size),
                    temperatures_of(state, kernel), thermostat_of(state), kernel.network_sites)
    else:
        v = _pooled_verdict(chains, num_steps, kernel)
    if not v.trusted:
        warnings.warn(str(v), UserWarning, stacklevel=caller_level())


def _pooled_verdict(chains, num_steps, kernel):
    """The verdict on the chains of one run drawn one after another, judged together as
    vectorized chains are: per chain its draws, step size, equipartition sums and thermostat
    (:func:`judge`)."""
    from numpyro_sgrld.verdict.judge import temperatures_of, verdict

    draws, steps, sums, thermostats = zip(*chains)
    draws = {k: np.concatenate([d[k] for d in draws]) for k in draws[0]}
    temperatures = None
    if all(x is not None for x in sums):  # the chains' running sums, stacked
        acc = jax.tree.map(lambda *x: np.stack(x), *sums)
        temperatures = temperatures_of(types.SimpleNamespace(equipartition=acc), kernel)
    thermostat = (None if any(x is None for x in thermostats)
                  else np.concatenate(thermostats))
    return verdict(draws, None, num_steps, kernel, np.concatenate(steps), temperatures,
                   thermostat, describe(kernel).network_sites)


def warn_if_rejected(before, after, num_steps, adaptive=0, kernel=None, step_size=None):
    """Warn when steps of this run were rejected (whatever the ``thinning``: a chain that
    keeps proposing where the gradient is not finite, and going back, never samples there).
    ``before``
    is the count after the run's first ``adaptive`` steps, the step-size adaptation's warm-up,
    whose rejections are not a fault (:func:`adaptive_steps`). Where most proposals were
    rejected at a step the user chose (the ``kernel``'s given step or learnt settings;
    ``step_size``, the chains' steps), the warning names that step
    (:func:`~numpyro_sgrld.verdict.step_rejections.step_rejection_problem`)."""
    if before is None or num_steps == 0 or is_traced((before, after)):
        return
    counts = _all_chains("rejections", np.atleast_1d(np.asarray(after) - np.asarray(before)))
    if counts is None:
        return
    rejected = np.concatenate(counts) if len(counts) > 1 else counts[0]
    if not np.any(rejected > 0):
        return
    frozen = step_rejection_problem(kernel, step_size, int(np.sum(rejected)), num_steps,
                                    rejected.size)
    if frozen is not None:
        warnings.warn(frozen, UserWarning, stacklevel=caller_level())
        return
    worst = int(np.max(rejected))
    chains = ""
    if rejected.size > 1:
        chains = f" in {int(np.sum(rejected > 0))} of {rejected.size} chains"
    after_warmup = (
        f" after the step-size adaptation's {adaptive} warm-up steps (whose rejections of "
        "too steep a rise shrink the step and are not counted)" if adaptive else ""
    )
    warnings.warn(
        f"{int(np.sum(rejected))} of {num_steps * rejected.size} steps were rejected{chains}"
        f"{after_warmup} "
        f"(up to {worst} in one chain): the potential, its gradient or the new state was not "
        "finite at a proposal, and the chain went back to where it was. A few rejections mean "
        "the step size is too large at times; many mean the chain keeps proposing where the "
        "potential or its gradient is not finite and never samples there (check the model "
        "there, e.g. jnp.where with a NaN branch, sqrt or log at 0). The state's "
        "`num_rejected` counts them; the draws' `diverging` marks the thinning windows that "
        "had one.",
        UserWarning,
        stacklevel=caller_level(),
    )


def caller_level():
    """``stacklevel`` of the first frame outside numpyro_sgrld, NumPyro and JAX (the user's
    ``MCMC.run``), counted from :func:`warn_if_rejected`'s caller."""
    skip = tuple(
        os.path.dirname(m.__file__) + os.sep
        for m in (jax, np, numpyro)
        if getattr(m, "__file__", None)
    ) + (os.path.dirname(__file__) + os.sep,)
    level = 2
    frame = inspect.currentframe().f_back.f_back
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame, level = frame.f_back, level + 1
    return level


def with_progress_bar(
    run, upper, val, collection, start, thin, since, progress_rate, progbar_opts, adaptive=0
):
    """Chunks of ``progress_rate`` steps (default ``upper / 20``), the bar updated after each
    with NumPyro's description and the kernel's diagnostics string; a chunk also ends after
    the first ``adaptive`` steps. Returns the last state, the collection and the rejection
    count after those steps (at the start if none)."""
    from tqdm import tqdm  # the bar NumPyro's one-chain loop shows

    rate = progress_rate or max(upper // 20, 1)
    describe = progbar_opts.get("progbar_desc", lambda i: "")
    diagnostics = progbar_opts.get("diagnostics_fn")
    bounds = sorted((set(range(0, upper, rate)) | {adaptive, upper}) - {0})
    counted = since
    with tqdm(total=upper) as bar:
        for lo, hi in zip([0] + bounds[:-1], bounds):
            val, collection, since = run(
                np.int32(lo), np.int32(hi), val, collection, start, thin, since
            )
            if hi == adaptive:
                counted = rejections(val)
            bar.set_description(describe(hi - 1), refresh=False)
            if diagnostics is not None:
                bar.set_postfix_str(diagnostics(val), refresh=False)
            bar.update(hi - lo)
    return val, collection, counted
