"""The verdict's sentence when the step is why the chains did not move: most proposals after
warm-up rejected with a step the user chose (``step_size=`` or learnt settings), read by
:func:`~numpyro_sgrld.verdict.judge.judgement` and by the kernels' own loop
(:mod:`numpyro_sgrld.sampler.loop_report`)."""

import numpy as np

from numpyro_sgrld.verdict.run import describe

__all__ = ["MOSTLY_REJECTED", "median_step", "rejected_share", "step_rejection_problem"]

#: The share of the proposals after warm-up, rejected, from which a chosen step is named as
#: the cause: a step too large at times rejects a few, a step unstable in a direction the
#: chain always has rejects nearly all, and the chain stays where it started.
MOSTLY_REJECTED = 0.5


def median_step(step_size):
    """The median of the chains' finite steps ``step_size`` (``None``: none known)."""
    h = np.asarray(step_size if step_size is not None else np.nan, np.float64).ravel()
    h = h[np.isfinite(h)]
    return float(np.median(h)) if h.size else None


def rejected_share(rejected, num_steps, kernel=None):
    """The share of the proposals rejected, from ``rejected`` of ``num_steps`` steps (all
    chains together). Where the next step checks a proposal (``check_proposal``, the default,
    outside the cyclical presets), a rejected proposal takes two steps, the one that made it
    and the one that found it not finite and made none: ``r`` of ``n`` steps then reject
    ``r`` of ``n - r`` proposals."""
    run = describe(kernel)
    deferred = getattr(run.algorithm, "check_proposal", False) and run.cycles is None
    proposals = num_steps - rejected if deferred else num_steps
    return float(min(rejected / max(proposals, 1), 1.0))


def step_rejection_problem(kernel, step_size, rejected, num_steps, num_chains=1):
    """The problem to lead the verdict with where at least :data:`MOSTLY_REJECTED` of the
    proposals after warm-up were rejected (``rejected`` of ``num_steps`` steps per chain, over
    ``num_chains`` chains) at a step the user chose: a ``step_size`` given to the kernel, or
    the step of its learnt settings (``step_size``, the chains' steps). ``None`` for an
    adapted step or fewer rejections."""
    run = describe(kernel)
    # a kernel whose step is not known to be given (NUTS, none) is told nothing here
    if run.adapts_step_size is not False or not rejected or not num_steps:
        return None
    steps = int(num_steps) * max(int(num_chains or 1), 1)
    share = rejected_share(int(rejected), steps, run)
    if share < MOSTLY_REJECTED:
        return None
    h = median_step(step_size)
    value = "step_size" if h is None else f"step_size={h:.3g}"
    name = run.name
    lead = (f"{share:.0%} of the proposals after warm-up were rejected ({int(rejected)} of "
            f"{steps} steps): the chains stayed where they were, and their draws say nothing "
            "of the posterior.")
    if run.settings is not None:
        return (f"{lead} The learnt settings' {value} is too large for this chain (settings "
                "learnt on another model or data?): give settings._replace(step_size=...) a "
                f"smaller one, or learn them again on this model with {name}(model) at "
                "step_size=None.")
    metric = getattr(run.metric, "name", None)
    composed = "the metric as composed" + ("" if metric is None else f", {metric!r},")
    return (f"{lead} The given {value} is too large for this chain: a given step_size runs "
            f"{composed} in the model's own coordinates, with none of the preconditioning "
            "that warm-up learns with step_size=None, while a step adapted in warm-up "
            "(mcmc.last_state.step_size) is in the units of the preconditioner learnt with "
            "it: not a step to give back on its own. Give a smaller step_size; or reuse what "
            "a default run learnt, step and preconditioner together: "
            f"{name}(model, settings=numpyro_sgrld.learnt_settings(mcmc)) with num_warmup=0; "
            "or leave step_size=None (the step is chosen in warm-up).")
