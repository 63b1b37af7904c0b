"""Checkpoints: save a run's state and draws to disk, resume it later, in another process.

A long run is a sequence of segments: ``MCMC.run`` for ``num_samples`` steps, then
:func:`save_checkpoint`; later (another process, after a crash or a time limit)
:func:`load_checkpoint` and :func:`resume`, which continues from the saved state exactly as
``mcmc.post_warmup_state = mcmc.last_state; mcmc.run(mcmc.last_state.rng_key, ...)`` would in
the same process. The draws of all segments together equal one uninterrupted run of the same
total length (``tests/test_checkpoint.py`` checks it bit for bit)::

    mcmc = MCMC(SGLD(model), num_warmup=1000, num_samples=5000)
    mcmc.run(key, X, y)
    save_checkpoint(mcmc, "run.ckpt")                  # state + this segment's draws

    checkpoint = load_checkpoint("run.ckpt")           # later, anywhere
    mcmc = MCMC(SGLD(model), num_warmup=1000, num_samples=5000)
    resume(mcmc, checkpoint, X, y)                     # the next 5000 steps
    save_checkpoint(mcmc, "run.ckpt", previous=checkpoint)   # all draws so far
    draws = load_checkpoint("run.ckpt").samples        # (chains, 10000 draws, ...)

With ``keep_draws=False`` a checkpoint holds the state and the segment lengths only, for runs
whose draws are kept elsewhere (:func:`numpyro_sgrld.analysis.streaming.run_streaming` appends them
to a NetCDF file and keeps such a checkpoint beside it).

The file is a pickle of NumPy arrays and the state's ``NamedTuple`` classes (load only files
you wrote: unpickling runs code named in the file). The kernel itself is not saved: build the
same kernel (same model, options and step size or ``step_size=None``) to resume; an adapted
step size travels in the state.
"""

import pickle
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["Checkpoint", "save_checkpoint", "load_checkpoint", "resume"]

#: The file format: 2 since the kernel's state became one tree (``SGState.chain``); files of
#: format 1 hold the earlier flat state, which this version cannot resume.
_FORMAT = 3


class Checkpoint(NamedTuple):
    """A saved run: the kernel's ``state`` to continue from (``mcmc.last_state``), the draws of
    every segment so far (``samples``, ``{site: (chains, draws, ...)}``), the extra fields
    collected with them (``extra_fields``, same layout), and ``num_draws`` per segment."""

    state: Any
    samples: dict
    extra_fields: dict
    num_draws: tuple


def _to_numpy(tree):
    return jax.tree.map(lambda x: np.asarray(x) if isinstance(x, jax.Array) else x, tree)


def _joined(previous, new):
    if previous is None:
        return new
    if set(previous) != set(new):
        raise ValueError(
            f"The run's sites {sorted(new)} differ from the checkpoint's {sorted(previous)}: "
            "`previous=` must be the checkpoint of the same model's run."
        )
    return {k: np.concatenate([previous[k], new[k]], axis=1) for k in new}


def _segment_draws(mcmc):
    """The number of draws per chain of ``mcmc``'s last run (its shape only: nothing is copied
    to the host)."""
    leaves = jax.tree.leaves(mcmc.get_samples(group_by_chain=True))
    return int(np.shape(leaves[0])[1]) if leaves else 0


def checkpoint_of(mcmc, previous=None, keep_draws=True):
    """The :class:`Checkpoint` :func:`save_checkpoint` writes, without writing it."""
    if mcmc.last_state is None:
        raise ValueError("`mcmc` has not run: there is no state to save. Call mcmc.run first.")
    if keep_draws and previous is not None and sum(previous.num_draws) and not previous.samples:
        raise ValueError(
            "`previous` holds no draws (it was saved with keep_draws=False), so the draws of "
            "all segments cannot be joined: save with keep_draws=False too, or pass "
            "previous=None to save this segment's draws alone."
        )
    if keep_draws:
        samples = _to_numpy(mcmc.get_samples(group_by_chain=True))
        extra = _to_numpy(mcmc.get_extra_fields(group_by_chain=True))
        samples = _joined(None if previous is None else previous.samples, samples)
        extra = _joined(None if previous is None else previous.extra_fields, extra)
    else:
        samples, extra = {}, {}
    return Checkpoint(
        state=_to_numpy(mcmc.last_state),
        samples=samples,
        extra_fields=extra,
        num_draws=(() if previous is None else tuple(previous.num_draws))
        + (_segment_draws(mcmc),),
    )


def write_checkpoint(path, checkpoint, **attachments):
    """Write ``checkpoint`` (and picklable ``attachments``, which :func:`load_checkpoint`
    ignores and ``read_attachments`` returns) to ``path``: to a temporary name, then
    renamed, so an interruption while saving leaves the old file intact."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as f:
        pickle.dump({"format": _FORMAT, "checkpoint": checkpoint._asdict(), **attachments}, f)
    partial.replace(path)


def save_checkpoint(mcmc, path, previous=None, *, keep_draws=True):
    """Write ``mcmc``'s ``last_state`` and the draws (and extra fields) of its last run to
    ``path``; with ``previous`` (the :class:`Checkpoint` this run resumed), the draws of all
    segments so far. With ``keep_draws=False``, the state and the segment lengths
    (``num_draws``) only: no draws are copied or written. The file is written to a temporary
    name and renamed, so an interruption while saving leaves the old checkpoint intact.
    Returns the :class:`Checkpoint`."""
    checkpoint = checkpoint_of(mcmc, previous, keep_draws)
    write_checkpoint(path, checkpoint)
    return checkpoint


def _older(path, saved_format="1 or 2"):
    """The error for a checkpoint an earlier version wrote (format 1: a flat kernel state;
    format 2: the step size in the chain's state)."""
    return ValueError(
        f"{str(path)!r} is a checkpoint of an earlier numpyro_sgrld (format {saved_format}), "
        f"whose kernel state this version (format {_FORMAT}: the state is one tree, the step "
        "size beside the chain's state, docs/changelog.md) "
        "cannot resume: run the segment again from its start, or resume it with the version "
        "that wrote it.")


def _read(path):
    with open(path, "rb") as f:
        try:
            saved = pickle.load(f)  # noqa: S301 (documented: load only files you wrote)
        except TypeError as e:  # an earlier version's state class, with other fields
            raise _older(path) from e
    if isinstance(saved, dict) and saved.get("format") in (1, 2):
        raise _older(path, saved["format"])
    if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
        raise ValueError(f"{str(path)!r} is not a numpyro_sgrld checkpoint (format {_FORMAT}).")
    return saved


def read_attachments(path):
    """The ``attachments`` ``write_checkpoint`` saved beside the checkpoint at ``path``."""
    return {k: v for k, v in _read(path).items() if k not in ("format", "checkpoint")}


def load_checkpoint(path):
    """The :class:`Checkpoint` saved at ``path`` (its state as JAX arrays, ready to resume)."""
    checkpoint = Checkpoint(**_read(path)["checkpoint"])
    state = jax.tree.map(
        lambda x: jnp.asarray(x) if isinstance(x, np.ndarray | np.generic) else x,
        checkpoint.state,
    )
    return checkpoint._replace(state=state)


def resume(mcmc, checkpoint, *args, **kwargs):
    """Continue ``checkpoint``'s run with ``mcmc`` (a new ``MCMC`` of the same kernel, model
    and chains): ``num_samples`` more steps from the saved state, no warm-up, with the saved
    random key. ``args``/``kwargs`` are the model's arguments (and ``extra_fields=``, as for
    ``MCMC.run``). Returns ``mcmc``."""
    state = checkpoint.state
    chains = np.shape(state.i)[0] if np.ndim(state.i) else 1
    if chains != mcmc.num_chains:
        raise ValueError(
            f"The checkpoint holds {chains} chain(s), the MCMC object runs "
            f"num_chains={mcmc.num_chains}: build it with num_chains={chains}."
        )
    mcmc.post_warmup_state = state
    mcmc.run(state.rng_key, *args, **kwargs)
    return mcmc
