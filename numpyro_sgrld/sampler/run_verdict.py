"""The verdict at the end of a run that NumPyro's own loop drives (``MCMC`` without
:func:`~numpyro_sgrld.enable_fast_sampling_loop`; the kernels' own loop judges its kept draws in
:mod:`numpyro_sgrld.sampler.loop`): streaming moments of a few coordinates in the kernel state
(:mod:`numpyro_sgrld.verdict.monitor`), sent to the host on the run's last step, and a warning with
the
:func:`~numpyro_sgrld.verdict.judge.judgement` when the draws cannot be trusted (mixing, rejections,
the equipartition readings of :mod:`numpyro_sgrld.core.equipartition`). The kernel keeps the
run's :class:`_RunInfo` as ``kernel.run_info``.

A run of several chains drawn one after another (``chain_method="sequential"``, and NumPyro's
``"parallel"`` on fewer devices than chains, which falls back to it) is one run: its chains'
moments are judged together once the last chain has finished, as a vectorized run's are, so
that it gets one verdict (:func:`~numpyro_sgrld.sampler.loop_report.sequential_chain` tells
which chain is running; the kernels' own loop defers its verdict the same way)."""

import sys
import warnings
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.mcmc import MCMC

from numpyro_sgrld.core import equipartition
from numpyro_sgrld.sampler import setup as _setup
from numpyro_sgrld.sampler.compat import judged_on_own_loop
from numpyro_sgrld.sampler.loop_report import sequential_chain
from numpyro_sgrld.sampler.parts import first_chain_kwargs, kwargs_axes
from numpyro_sgrld.verdict import evaluation, monitor
from numpyro_sgrld.verdict.judge import judgement
from numpyro_sgrld.verdict.run import describe

__all__ = ["SORTED", "arm", "judged", "observe", "observed", "report", "up_to_relabelling"]

#: The suffix of the name under which a site is judged up to relabelling its elements
#: (:func:`up_to_relabelling`).
SORTED = " (sorted)"


class _RunInfo(NamedTuple):
    """What the verdict on ``MCMC``'s own loop needs of the run: its warm-up and sampling
    steps, its chains, the judged flat coordinates and their ``(site, index)``, the chains'
    reports received so far, the ``id`` of the ``MCMC``, and whether a network's evaluation
    batch log-likelihood is judged too (:mod:`numpyro_sgrld.verdict.evaluation`, after the
    coordinates)."""

    num_warmup: int
    num_samples: int
    num_chains: int
    index: Any
    names: list
    reports: list
    owner: int
    evaluation: bool = False


def _calling_mcmc(depth=8):
    """The ``numpyro.infer.MCMC`` whose method called (within ``depth`` frames), or None."""
    frame = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, MCMC):
            return owner
        frame = frame.f_back
    return None


def judged(kernel, z, model_args=(), model_kwargs=None):
    """The values the verdict judges: the position ``z``, or, where the kernel's
    ``judged_values`` is set (by :class:`~numpyro_sgrld.SGGibbs`: its Gibbs sites too, its
    decentred sites centred), ``judged_values(z, model_args, model_kwargs)``."""
    values = kernel.judged_values
    return z if values is None else values(z, model_args, model_kwargs or {})


def up_to_relabelling(values, sites):
    """``values`` (``{site: array}``) with each of ``sites`` replaced by its elements sorted,
    under the name ``site + SORTED``: the order statistics, which a permutation of the
    elements leaves alone. A network's per-unit sites (a unit-wise horseshoe's local scales)
    have a posterior that permuting the units maps to itself, so chains that hold the units
    in different orders draw from the same law; their R-hat unit by unit reads that as
    chains that have not mixed, while the sorted values' R-hat reads the law up to
    relabelling."""
    return {**{k: v for k, v in values.items() if k not in sites},
            **{k + SORTED: jnp.sort(jnp.ravel(values[k])) for k in sites if k in values}}


def arm(kernel, state, num_warmup, vectorized, model_args=(), model_kwargs=None):
    """With ``MCMC``'s own loop driving the kernel: moments in the state for the verdict
    at the run's end (:mod:`numpyro_sgrld.verdict.monitor`). ``MCMC`` passes the run's length to
    no kernel, so it is read from the ``MCMC`` that called the kernel's ``init``; without one,
    where the kernels' own loop judges the kept draws
    (:func:`~numpyro_sgrld.sampler.compat.judged_on_own_loop`; not for ``SGGibbs``, which
    runs on NumPyro's loop, nor for parallel chains), inside a trace other than parallel
    chains' ``pmap``, or for a run of fewer than 4 steps, nothing is kept. Each parallel
    chain reports its moments from its device and the verdict comes once every chain has.
    The judged values are :func:`judged`'s."""
    previous, kernel.run_info = kernel.run_info, None
    mcmc = _calling_mcmc()
    if mcmc is None or judged_on_own_loop(mcmc) or mcmc.num_samples < 4:
        return state
    if not _setup.concrete(state.i) and mcmc.chain_method != "parallel":
        return state
    first = jax.tree.map(lambda x: x[0], state.z) if vectorized else state.z
    first = judged(kernel, first, model_args,
                   first_chain_kwargs(model_kwargs or {}, kernel.chain_kwargs)
                   if vectorized else model_kwargs)
    flat, _ = ravel_pytree(first)
    index = monitor.coordinates(flat.size)
    names = [(name, j) for name, x in sorted(first.items())
             for j in range(int(np.size(x)))] if isinstance(first, dict) else [
                 ("z", j) for j in range(flat.size)]
    # MCMC's sequential chains each call init: their reports join the earlier chains' (the
    # first chain of a run starts afresh, whatever an interrupted run left)
    chain = sequential_chain()
    joined = previous is not None and previous.owner == id(mcmc)
    reports = previous.reports if joined and (chain is None or chain[0] > 0) else []
    names = [names[k] for k in index]
    judges_batch = kernel.setup.evaluation is not None
    if judges_batch:  # a network's chains are judged in function space
        names.append((evaluation.NAME, 0))
    kernel.run_info = _RunInfo(int(num_warmup), int(mcmc.num_samples), int(mcmc.num_chains),
                               index, names, reports, id(mcmc), judges_batch)
    fresh = monitor.init_monitor(len(names), flat.dtype, held=int(judges_batch))
    if vectorized:
        fresh = jax.tree.map(lambda x: jnp.broadcast_to(x, (state.i.shape[0], *x.shape)),
                             fresh)
    return state._replace(monitor=fresh)


def observed(kernel, state, new, model_args, model_kwargs):
    """``new`` with the run's moments updated (:func:`observe`) when ``MCMC``'s own loop
    drives the kernel and :func:`arm` kept moments; else ``new``."""
    if state.monitor is not None and kernel.run_info is not None:
        new = observe(kernel, state, new, model_args, model_kwargs)
    return new


def observe(kernel, state, new, model_args=(), model_kwargs=None):
    """The new state with the run's moments updated; on the run's last step, the moments
    go to the host for the verdict (:func:`report`). A network's evaluation batch
    log-likelihood is evaluated every :data:`~numpyro_sgrld.verdict.evaluation.EVERY` post-warm-up
    steps (at the model's arguments) and held in between."""
    run = kernel.run_info
    vectorized = jnp.ndim(new.i) == 1
    # the transition's index (not the step counter i: a cyclical preset's exploration
    # runs several steps in one transition)
    t = state.monitor.transitions[0] if vectorized else state.monitor.transitions
    offset = t - run.num_warmup
    offset = jnp.where(offset >= 0, offset % run.num_samples, -1)
    index = jnp.asarray(run.index)

    # the same offset for every chain: a branch, not a select, under vmap
    evaluate = (offset >= 0) & (offset % evaluation.EVERY == 0)

    def update(m, z, rejected, diverging, model_kwargs):
        x = ravel_pytree(judged(kernel, z, model_args, model_kwargs))[0][index]
        if run.evaluation:
            held = jax.lax.cond(
                evaluate,
                lambda: jnp.atleast_1d(kernel.setup.evaluation(
                    z, model_args, model_kwargs or {}, constrained=False)).astype(x.dtype),
                lambda: m.held)
            x = jnp.concatenate([x, held])
            m = m._replace(held=held)
        return monitor.update_monitor(m, x, offset, run.num_samples,
                                      rejected - diverging.astype(jnp.int32))

    model_kwargs = {} if model_kwargs is None else model_kwargs
    if vectorized:
        update = jax.vmap(update, in_axes=(0, 0, 0, 0, kwargs_axes(model_kwargs,
                                                                   kernel.chain_kwargs)))
    moments = update(state.monitor, new.z, new.num_rejected, new.diverging, model_kwargs)
    jax.lax.cond(
        offset == run.num_samples - 1,
        lambda: jax.debug.callback(partial(report, kernel), moments.sums, moments.squares,
                                   moments.origin, new.num_rejected - moments.rejected,
                                   new.step_size, new.equipartition, _thermostat(new),
                                   moments.composed),
        lambda: None,
    )
    return new._replace(monitor=moments)


def _thermostat(state):
    r"""The state's thermostat :math:`\xi` (SGNHT's, BADODAB's), ``None`` for any other."""
    return getattr(getattr(state.sampler_state, "integrator", None), "thermostat", None)


def report(kernel, sums, squares, origin, rejected, step_size, equipartition_sums=None,
           thermostat=None, composed=None):
    """Host side: collect the chains' moments, equipartition sums and what a composing kernel
    kept (``composed``); once every chain of the run has reported, warn with the
    :func:`~numpyro_sgrld.verdict.judge.judgement` when the draws cannot be trusted."""
    run = kernel.run_info
    if run is None:
        return
    sums, squares, origin = (np.asarray(x) for x in (sums, squares, origin))
    one = sums.ndim == 2
    if one:
        sums, squares, origin = sums[None], squares[None], origin[None]
    if equipartition_sums is not None:
        equipartition_sums = jax.tree.map(
            lambda x: np.asarray(x)[None] if one else np.asarray(x), equipartition_sums)
    if composed is not None:
        composed = jax.tree.map(lambda x: np.asarray(x)[None] if one else np.asarray(x),
                                composed)
    run.reports.append((sums, squares, origin, np.atleast_1d(rejected),
                        np.atleast_1d(step_size),
                        None if thermostat is None else np.atleast_1d(thermostat),
                        equipartition_sums, composed))
    if sum(r[0].shape[0] for r in run.reports) < run.num_chains:
        return
    *moments, thermostats, readings, kept = zip(*run.reports)
    sums, squares, origin, rejected, step = (np.concatenate(x) for x in moments)
    thermostat = (None if any(x is None for x in thermostats)
                  else np.concatenate(thermostats))
    run.reports.clear()
    temperatures = None
    if all(r is not None for r in readings):
        pooled = jax.tree.map(lambda *x: np.concatenate(x), *readings)
        temperatures = equipartition.summarize(pooled, describe(kernel).temperature)
    composed = (None if any(x is None for x in kept)
                else jax.tree.map(lambda *x: np.concatenate(x), *kept))
    rhat, ess = monitor.judge(sums, squares, origin, run.num_samples)
    v = judgement(rhat, ess, run.names, int(rejected.sum()), run.num_samples, kernel, step,
                  temperatures, sums.shape[0], thermostat, describe(kernel).network_sites,
                  monitor.centring(sums, squares, origin, run.num_samples), composed)
    if not v.trusted:
        # sent from XLA's host callback: no user frame to point at
        warnings.warn_explicit(str(v), UserWarning, "numpyro_sgrld verdict", 0)
