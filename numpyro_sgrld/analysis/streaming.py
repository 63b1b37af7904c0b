"""Streaming draws to disk: long runs whose draws do not fit in memory.

``MCMC.run`` keeps every draw in memory until the run ends: ``K`` draws of a network with ``P``
parameters take ``K x P x 4`` bytes (400 draws of a 2.4M-parameter MLP: 3.8 GB), and NumPyro
keeps them in the ``MCMC`` object. :func:`run_streaming` runs the same chain in segments of
``segment_draws`` kept draws, each continuing from the previous one's ``last_state`` exactly as
:func:`numpyro_sgrld.resume` does, appends each segment's draws and sample statistics to a
NetCDF file and lets them go before the next segment: memory holds one segment, whatever the
length of the run::

    mcmc = MCMC(SGLD(model, 1e-4), num_warmup=1000, num_samples=100_000, thinning=10,
                jit_model_args=True)
    run = run_streaming(mcmc, "run.nc", random.PRNGKey(0), X, y, segment_draws=500)
    idata = load_streamed("run.nc")            # the 10,000 draws, read lazily from the file

The draws equal those of ``mcmc.run(random.PRNGKey(0), X, y)``, bit for bit
(``tests/test_streaming.py``).

**Build the MCMC object with** ``jit_model_args=True`` (or run SG kernels on
:func:`numpyro_sgrld.enable_fast_sampling_loop`): without it NumPyro's loop compiles every
segment again with the model's arguments, the data, baked into the program as constants, and
the compiled programs it keeps grow memory by about the data's size per segment (measured:
0.3 GB per segment with a 157 MB training set; a 50-segment MNIST run was killed at 23 GB).
:func:`run_streaming` warns when a run of several segments would do that.

**The file.** One NetCDF-4 (HDF5) file in ArviZ's layout, written with the h5netcdf engine: the
groups ``posterior`` (every site of ``mcmc.get_samples``) and ``sample_stats`` (the extra
fields, named as :func:`numpyro_sgrld.to_inference_data` names them: ``diverging``,
``num_rejected``, ``step_size``, ...), with the same variable names, dimensions and
coordinates as ``to_inference_data`` gives for the run in memory. ``draw`` is an *unlimited*
dimension, resized at each append. (The alternative, one group per segment merged on reading,
needs a reader of its own; with an unlimited dimension the file *is* an ArviZ file, which
``arviz.from_netcdf`` reads as is, lazily, one variable at a time.) Site names with ``/`` are
stored as ``%2F``, as by :func:`numpyro_sgrld.save_netcdf`; :func:`load_streamed` (or
:func:`numpyro_sgrld.load_netcdf`) restores them. Non-finite draws are written as they are,
and ``diverging`` flags the steps that were rejected. The full-data ``log_likelihood`` and
``observed_data`` groups are not written (the first is draws x data points); compute what is
needed per segment with an accumulator instead.

**Resuming.** Beside the file, ``<path>.ckpt`` is a checkpoint
(:mod:`numpyro_sgrld.analysis.checkpoint`,
``keep_draws=False``: no draws) of the state after the last segment written, the segment
lengths, the run's settings and the accumulator's state. It is replaced, atomically, after each
segment's draws are in the file: it is the commit point. After an interruption, the same call
with ``resume=True`` (and a new ``MCMC`` object of the same kernel and settings) cuts the file
back to the draws its checkpoint counts (a segment appended but not committed is dropped) and
continues from the saved state: the file ends up equal to an uninterrupted run's.
``max_segments=`` stops a call after that many segments (a job under a time limit), to be
resumed the same way. ``load_checkpoint("<path>.ckpt")`` gives the state, to continue with
:func:`numpyro_sgrld.resume` by hand.

**Predictions on the fly.** ``accumulator=`` (an :class:`Accumulator`) sees each segment's
draws before they are let go and keeps running sums: :func:`classification_accumulator` the
log of the summed class probabilities of test points, :func:`regression_accumulator` the sums
of predictive means and second moments (and of densities of test targets).
:func:`classification_metrics_from` and :func:`regression_metrics_from` turn them into the
ensemble metrics of :func:`numpyro_sgrld.classification_metrics` and
:func:`numpyro_sgrld.regression_metrics` over all draws, with no draw kept.
"""

import warnings
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from numpyro_sgrld.analysis import _streaming_file as file_
from numpyro_sgrld.analysis.accumulators import (
    Accumulator,
    ClassificationSums,
    RegressionSums,
    classification_accumulator,
    classification_metrics_from,
    regression_accumulator,
    regression_metrics_from,
)
from numpyro_sgrld.analysis.checkpoint import (
    checkpoint_of,
    load_checkpoint,
    read_attachments,
    write_checkpoint,
)
from numpyro_sgrld.analysis.inference_data import load_netcdf, sample_stats_of
from numpyro_sgrld.core.checks import integer
from numpyro_sgrld.sampler.compat import (
    fast_sampling_loop_enabled,
    judged_on_own_loop,
    parallel_chains,
)
from numpyro_sgrld.sampler.kernel import SGMCMC

__all__ = [
    "run_streaming",
    "load_streamed",
    "checkpoint_path",
    "StreamedRun",
    "Accumulator",
    "classification_accumulator",
    "classification_metrics_from",
    "ClassificationSums",
    "regression_accumulator",
    "regression_metrics_from",
    "RegressionSums",
]



class StreamedRun(NamedTuple):
    """What :func:`run_streaming` did: the NetCDF file ``path`` and its checkpoint
    ``checkpoint``, the draws per chain in the file (``num_draws``), whether the run is
    ``complete`` (all ``num_samples`` steps; ``False`` after ``max_segments``) and the
    accumulator's state (``accumulated``; ``None`` without one)."""

    path: Path
    checkpoint: Path
    num_draws: int
    complete: bool
    accumulated: Any


class _Plan(NamedTuple):
    """The settings a streamed run is resumed with: saved in the checkpoint and the file."""

    num_chains: int
    num_warmup: int
    num_samples: int
    thinning: int
    segment_draws: int
    extra_fields: tuple
    accumulator: bool

    @property
    def segment_steps(self):
        return self.segment_draws * self.thinning

    @property
    def num_segments(self):
        return self.num_samples // self.segment_steps


class _Progress(NamedTuple):
    """Where a streamed run stands: the checkpoint of its last committed segment (state,
    segment lengths; no draws) and the accumulator's state."""

    checkpoint: Any
    accumulated: Any

    @property
    def num_draws(self):
        return int(sum(self.checkpoint.num_draws))


def checkpoint_path(path):
    """The checkpoint beside the streamed file ``path``: ``<path>.ckpt``."""
    path = Path(path)
    return path.with_name(path.name + ".ckpt")


# --------------------------------------------------------------------------- validation


def _divisors_near(n, k):
    """The divisors of ``n`` nearest ``k`` from below and above (one or two numbers)."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    below = [d for d in divisors if d < k]
    above = [d for d in divisors if d > k]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])


def _default_extra_fields(mcmc):
    """The step size, for the stochastic-gradient kernels (``diverging`` is always there)."""
    return ("step_size",) if isinstance(mcmc.sampler, SGMCMC) else ()


def _plan(mcmc, segment_draws, extra_fields, accumulator):
    """The run's settings, checked: ``segment_draws`` kept draws per segment must divide the
    run's ``num_samples // thinning`` draws, and ``num_samples`` be a multiple of ``thinning``
    (so that the segments are whole thinning windows, as in one run)."""
    segment_draws = integer(
        segment_draws, "segment_draws", hint="It is the number of kept draws per chain that "
        "each segment holds in memory before they are appended to the file."
    )
    steps, thinning = int(mcmc.num_samples), int(mcmc.thinning)
    if steps % thinning:
        raise ValueError(
            f"The MCMC object's num_samples={steps} is not a multiple of its thinning="
            f"{thinning}, so the run's thinning windows do not split into segments: build it "
            f"with num_samples={steps - steps % thinning} or {steps - steps % thinning + thinning}."
        )
    draws = steps // thinning
    if draws % segment_draws:
        near = " or ".join(str(d) for d in _divisors_near(draws, segment_draws))
        raise ValueError(
            f"`segment_draws`={segment_draws} does not divide the run's {draws} kept draws per "
            f"chain (num_samples={steps} / thinning={thinning}): pass a divisor of {draws} "
            f"(e.g. {near}), or build the MCMC object with num_samples a multiple of "
            f"segment_draws * thinning = {segment_draws * thinning}."
        )
    if extra_fields is None:
        extra_fields = _default_extra_fields(mcmc)
    if not (isinstance(extra_fields, (tuple, list)) and all(
            isinstance(f, str) for f in extra_fields)):
        raise TypeError(
            f"`extra_fields` must be a tuple of field names, as for MCMC.run, got {extra_fields!r}."
        )
    if accumulator is not None and not (
        isinstance(accumulator, Accumulator)
        and callable(accumulator.init)
        and callable(accumulator.update)
    ):
        raise TypeError(
            "`accumulator` must be an Accumulator(init, update), e.g. "
            f"classification_accumulator(model, X_test); got {type(accumulator).__name__}."
        )
    return _Plan(
        num_chains=int(mcmc.num_chains),
        num_warmup=int(mcmc.num_warmup),
        num_samples=steps,
        thinning=thinning,
        segment_draws=segment_draws,
        extra_fields=tuple(extra_fields),
        accumulator=accumulator is not None,
    )


def _check_same_plan(saved, plan, sidecar):
    saved = _Plan(**{**saved, "extra_fields": tuple(saved["extra_fields"])})
    differ = [name for name in plan._fields if getattr(saved, name) != getattr(plan, name)]
    if differ:
        was = ", ".join(f"{n}={getattr(saved, n)!r}" for n in differ)
        now = ", ".join(f"{n}={getattr(plan, n)!r}" for n in differ)
        raise ValueError(
            f"The run saved in {str(sidecar)!r} has {was}; this call has {now}. Resume it with "
            "the settings it was started with (MCMC's num_chains, num_warmup, num_samples and "
            "thinning; run_streaming's segment_draws, extra_fields and accumulator)."
        )


# --------------------------------------------------------------------------- the file


def load_streamed(path, *, lazy=True):
    """The :class:`arviz.InferenceData` (a ``DataTree`` on ArviZ 1.x) of the streamed file
    ``path`` (``posterior``, ``sample_stats``), site names restored
    (:func:`numpyro_sgrld.load_netcdf`). ``lazy=True`` reads values when they are used
    (ArviZ's default; the file stays open: read it when no run is appending to it);
    ``lazy=False`` reads everything now and closes the file."""
    return load_netcdf(path, lazy=lazy)


# --------------------------------------------------------------------------- the run


def _start(path, sidecar, plan, resume):
    """The saved progress to resume from, or ``None`` for a new run (after the checks)."""
    if not resume:
        existing = [str(p) for p in (path, sidecar) if p.exists()]
        if existing:
            raise FileExistsError(
                f"{' and '.join(existing)} exist(s) and resume=False: pass resume=True to "
                "continue the run saved there, or remove the file(s) (or choose another path) "
                "to start a new run."
            )
        return None
    if not sidecar.exists():
        if path.exists():
            why = (
                "the run stopped before its first segment was committed"
                if file_.file_plan(path) is not None
                else "the file is not a streamed run"
            )
            raise FileExistsError(
                f"{str(path)!r} exists but its checkpoint {str(sidecar)!r} does not, so there "
                f"is no state to resume from ({why}): remove the file to start over, or "
                "choose another path."
            )
        return None  # resume=True with nothing saved yet: start, so that a job can be rerun
    if not path.exists():
        raise FileNotFoundError(
            f"The checkpoint {str(sidecar)!r} is there but the draws file {str(path)!r} is not: "
            "restore the file, or remove the checkpoint to start over."
        )
    saved = read_attachments(sidecar).get("streaming")
    if saved is None:
        raise ValueError(
            f"{str(sidecar)!r} is a checkpoint but not one of a streamed run: remove it, or "
            "choose another path."
        )
    _check_same_plan(saved["plan"], plan, sidecar)
    progress = _Progress(load_checkpoint(sidecar), saved["accumulated"])
    in_file = file_.file_draws(path)
    if in_file < progress.num_draws:
        raise ValueError(
            f"{str(path)!r} holds {in_file} draws per chain, fewer than the {progress.num_draws} "
            f"its checkpoint {str(sidecar)!r} counts: the file was replaced or cut. Restore it, "
            "or remove both files to start over."
        )
    if in_file > progress.num_draws:  # a segment appended but not committed
        file_.truncate(path, progress.num_draws)
    return progress


def _release(mcmc):
    """Let go of the draws the ``MCMC`` object holds from its previous run before the next one
    (NumPyro 0.22 keeps them in ``_states`` until the next run replaces them, so two
    segments would be in memory at once)."""
    for name in ("_states", "_states_flat"):
        if hasattr(mcmc, name):
            setattr(mcmc, name, None)


def _set_num_samples(mcmc, num_samples):
    """``mcmc.num_samples = num_samples``, and the step range of its next run with it. (NumPyro
    0.22 sets the range of a run without ``post_warmup_state`` from ``num_samples`` when the
    object is built and at the end of each run, in ``_set_collection_params``.)"""
    mcmc.num_samples = num_samples
    mcmc._set_collection_params()


def _warn_if_recompiling(mcmc, num_segments):
    """Warn when each of ``num_segments > 1`` segments would compile its loop anew with the
    data as constants (``jit_model_args=False`` and not the SG kernels' own loop outside
    ``pmap``, which keeps one program: NumPyro's loop, and the own loop traced for parallel
    chains, compile again), with the opt-in as a fix only where it would be one."""
    if (num_segments > 1 and not getattr(mcmc, "_jit_model_args", True)
            and not judged_on_own_loop(mcmc)):
        helps = (isinstance(mcmc.sampler, SGMCMC) and not parallel_chains(mcmc)
                 and not fast_sampling_loop_enabled())
        warnings.warn(
            "run_streaming: `mcmc` was built with jit_model_args=False, so NumPyro compiles "
            "each segment again with the model's arguments (the data) baked into the program "
            "as constants, and the programs it keeps grow memory by about the data's size per "
            "segment. Build it with MCMC(..., jit_model_args=True)"
            + (", or call numpyro_sgrld.enable_fast_sampling_loop() first." if helps
               else "."),
            UserWarning,
            stacklevel=3,
        )


def _segment(mcmc, path, sidecar, plan, progress, rng_key, args, kwargs, init_params,
             accumulator):
    """Run one segment, append its draws to the file, update the accumulator, commit the
    checkpoint. Returns the new :class:`_Progress`; the segment's draws die with this frame."""
    _release(mcmc)
    if progress is None:  # the first segment: warm-up (or a preset post_warmup_state) and run
        accumulated = accumulator.init() if accumulator is not None else None
        mcmc.run(rng_key, *args, extra_fields=plan.extra_fields, init_params=init_params,
                 **kwargs)
    else:  # the next: from the last state, as resume() does
        accumulated = progress.accumulated
        mcmc.post_warmup_state = progress.checkpoint.state
        mcmc.run(progress.checkpoint.state.rng_key, *args, extra_fields=plan.extra_fields,
                 **kwargs)
    posterior = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    datasets = file_.segment_datasets(posterior, sample_stats_of(mcmc))
    if progress is None:
        file_.create(path, datasets, plan)
    else:
        file_.append(path, datasets)
    del datasets
    if accumulator is not None:
        accumulated = accumulator.update(accumulated, posterior)
    checkpoint = checkpoint_of(
        mcmc, None if progress is None else progress.checkpoint, keep_draws=False
    )
    write_checkpoint(sidecar, checkpoint,
                     streaming={"plan": plan._asdict(), "accumulated": accumulated})
    # the next segment continues from the state itself (JAX arrays), not its NumPy copy
    return _Progress(checkpoint._replace(state=mcmc.last_state), accumulated)


def run_streaming(
    mcmc,
    path,
    rng_key,
    *args,
    segment_draws,
    extra_fields=None,
    init_params=None,
    accumulator=None,
    resume=False,
    max_segments=None,
    **kwargs,
):
    """Run ``mcmc`` (its ``num_warmup`` warm-up steps, then ``num_samples`` steps, keeping every
    ``thinning``-th draw) in segments of ``segment_draws`` kept draws per chain, appending each
    segment's draws and sample statistics to the NetCDF file ``path`` (see the module
    docstring) and its state to the checkpoint ``<path>.ckpt``. Memory holds one segment.

    :param mcmc: a ``numpyro.infer.MCMC``; its ``num_samples`` must be a multiple of
        ``segment_draws * thinning``. It is left as given (``num_samples``,
        ``post_warmup_state``), except that ``last_state`` and ``get_samples()`` are those of
        the last segment run. A preset ``post_warmup_state`` is used as by ``MCMC.run``.
    :param path: the NetCDF file to create (or, with ``resume=True``, to continue).
    :param rng_key, args, kwargs, init_params: as for ``MCMC.run`` (the model's arguments).
    :param segment_draws: kept draws per chain per segment (a divisor of
        ``num_samples // thinning``).
    :param extra_fields: as for ``MCMC.run``, recorded in ``sample_stats``; default: the step
        size for the stochastic-gradient kernels (``("step_size",)``), nothing more for others.
        ``diverging`` (and ``num_rejected`` for the SG kernels) are always recorded.
    :param accumulator: an :class:`Accumulator` to update with each segment's draws, e.g.
        :func:`classification_accumulator`; its state is ``StreamedRun.accumulated``.
    :param resume: ``True`` continues the run saved at ``path`` (with an ``MCMC`` object of the
        same kernel and settings; ``rng_key`` and ``init_params`` are then not used), or starts
        it when nothing is saved there yet; ``False`` (default) refuses an existing file.
    :param max_segments: run at most this many segments in this call (then resume).
    :returns: a :class:`StreamedRun`.
    """
    plan = _plan(mcmc, segment_draws, extra_fields, accumulator)
    if max_segments is not None:
        max_segments = integer(max_segments, "max_segments", hint="Or None: run to the end.")
    path = Path(path)
    sidecar = checkpoint_path(path)
    progress = _start(path, sidecar, plan, bool(resume))
    done = 0 if progress is None else len(progress.checkpoint.num_draws)
    stop = plan.num_segments if max_segments is None else min(plan.num_segments,
                                                              done + max_segments)
    _warn_if_recompiling(mcmc, stop - done)
    num_samples, warmup_state = mcmc.num_samples, mcmc.post_warmup_state
    _set_num_samples(mcmc, plan.segment_steps)
    try:
        for _ in range(done, stop):
            progress = _segment(mcmc, path, sidecar, plan, progress, rng_key, args, kwargs,
                                init_params, accumulator)
    finally:
        _set_num_samples(mcmc, num_samples)
        mcmc.post_warmup_state = warmup_state
    return StreamedRun(
        path=path,
        checkpoint=sidecar,
        num_draws=0 if progress is None else progress.num_draws,
        complete=stop == plan.num_segments,
        accumulated=None if progress is None else progress.accumulated,
    )
