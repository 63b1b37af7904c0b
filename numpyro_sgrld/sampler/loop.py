"""The sampling loop behind ``MCMC.run`` for the stochastic-gradient kernels.

``numpyro.infer.MCMC`` runs a kernel through ``numpyro.util.fori_collect``, which on **every**
step evaluates the collection transform (the kernel's ``postprocess_fn``: constraining
transforms and, for models with ``numpyro.deterministic`` sites, a replay of
``full_batch(model)``) and writes the result into the sample buffer under a ``lax.cond``, even
when ``thinning`` keeps one step in many; with the progress bar on (the default) it calls the
compiled step from Python once per step; and it compiles its loop again on every ``MCMC.run``.
For a full-data kernel such as NUTS a step costs many gradients and none of this matters much;
for a stochastic-gradient step on a minibatch all of it does (a deterministic site becomes a
full-data pass per step, the per-step dispatch dominates a cheap step; measured in
docs/benchmarks.md, "Sampling loop").

:func:`collect` keeps ``fori_collect``'s contract and results (draw ``k`` is the state after
step ``start + (k + 1) * thinning - 1``, ``start = lower + (upper - lower) % thinning``; the
same collection size, zero-filled beyond the draws) but

- evaluates the transform and writes draws only where steps are kept (per kept draw, or per
  place a group sets aside, below), with no branch in its loop over steps (NumPyro's loop
  evaluates the transform on every step and writes on every step of a thinning window under
  a ``lax.cond``, the last write winning; on a GPU a ``conditional`` costs a host
  synchronisation per step), and
- with the progress bar on, runs ``progress_rate`` steps per compiled call (one dispatch per
  progress update instead of one per step).

Two loops do this, chosen by :data:`GROUP` (by default by the backend):

- on a CPU, :func:`_segment_loop`: an outer loop over kept draws around an inner loop of
  ``thinning`` steps, the transform once per kept draw;
- on an accelerator, :func:`_grouped_loop`: the steps in groups of 16, an inner loop whose
  trip count XLA knows (on a GPU a loop whose trip count is a traced value reads its
  condition on the host at every iteration, that is at every step of the inner loop over a
  thinning window), a kept step's state set aside and the transform evaluated after a group
  that kept any (``ceil(16 / thinning)`` evaluations per such group, as many as a group can
  keep; one ``conditional`` per group). Each compiled call computes up to 15 steps more than it
  runs and drops them (its last group's surplus). On a CPU it costs more per step than the
  segment loop (docs/scaling.md).

Both give the same draws. On an accelerator (:data:`SETTLED`) the steps after the step-size
adaptation's warm-up run in a second compiled loop, of the kernel's transitions compiled for
that phase (the kernel's ``after_warmup``: none of the warm-up's branches, the control
variates' switch resolved), the same transitions without the branches that no longer move.

The loop is compiled once per (step function, transform) pair (the
objects ``MCMC`` caches per instance), shapes and group size; the run length and ``thinning``
are traced arguments, so a run of another length with the same collection size does not
recompile. A loop traced inside a JAX transformation (``MCMC.run`` under ``jax.jit`` or
``pmap``) is not cached: its step function holds tracers. ``MCMC`` uses this loop only after
the opt-in :func:`numpyro_sgrld.enable_fast_sampling_loop` (:mod:`numpyro_sgrld.sampler.compat`),
and then only for :class:`~numpyro_sgrld.SGMCMC` instances; every other kernel keeps NumPyro's
loop.
"""

from collections import OrderedDict
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from numpyro_sgrld.core.cache import lru_get
from numpyro_sgrld.core.checks import field_names
from numpyro_sgrld.sampler import loop_report as report

__all__ = ["collect"]

# bounded like NumPyro's own cache of loop bodies: an entry keeps the step function (and through
# it the kernel and, without ``jit_model_args``, the data) alive
_MAX_LOOPS = 32
_loops = OrderedDict()


def _record(transform, collection, val, k, since):
    """``collection`` with draw ``k`` set to ``transform`` of ``val``; an index past the end
    (the segments that keep nothing) is dropped, so the write needs no branch."""
    if not all(buf.shape[0] for buf in jax.tree.leaves(collection)):
        return collection  # a collection of size 0: nothing is kept
    return jax.tree.map(lambda buf, x: buf.at[k].set(x, mode="drop"), collection,
                        transform(_window(val, since)))


def _with_state(val, state):
    """``val`` (``(state, args, kwargs)``, ``(state,)`` or a state) with its state replaced."""
    return (state,) + tuple(val[1:]) if report.plain_tuple(val) else state


def _set_aside(state):
    """What of a kept step's state the grouped loop sets aside: all but the run's running
    sums (the equipartition check's), which a draw's record takes from the group's end."""
    if getattr(state, "equipartition", None) is None:
        return state
    return state._replace(equipartition=None)


def _put_back(state, end):
    """A set-aside state (:func:`_set_aside`) with the running sums of ``end``."""
    if getattr(end, "equipartition", None) is None:
        return state
    return state._replace(equipartition=end.equipartition)


def _window(val, since):
    """``val`` whose ``diverging`` says whether any step since the previous recorded draw (the
    count ``since``) was rejected, not only the recorded step: with ``thinning`` a rejected
    step between two records stays visible in the draws' ``diverging``."""
    if since is None:
        return val
    state = report.state_of(val)
    chain = state.chain._replace(diverging=state.num_rejected > since)
    return _with_state(val, state._replace(chain=chain))


#: Steps per iteration of the loop over steps: ``None`` chooses by the backend (16 on an
#: accelerator, 0 on a CPU); ``n > 0`` runs the steps in groups of ``n``, a constant, so that
#: XLA knows the inner loop's trip count (:func:`_grouped_loop`: on a GPU a loop whose trip
#: count is a traced value reads its condition on the host at every iteration); 0 runs an
#: outer loop over kept draws around an inner loop of ``thinning`` steps
#: (:func:`_segment_loop`, the cheaper one on a CPU, where a loop's condition is read where it
#: runs).
GROUP = None
#: Steps per group on an accelerator when :data:`GROUP` is ``None``.
ACCELERATOR_GROUP = 16
#: Copies of the step in one iteration of the grouped loop's inner loop (``lax.fori_loop``'s
#: ``unroll``; the loop's trip count becomes ``group // UNROLL``, the rest in a second loop):
#: fewer iterations for a larger program to compile.
UNROLL = 1
#: The most memory the states held back for recording in one group may take.
PENDING_BYTES = 256 * 2**20


#: Whether the steps after the step-size adaptation's warm-up run the kernel's transitions
#: compiled for that phase (``after_warmup``: none of the warm-up's branches, the control
#: variates' switch resolved): ``None`` chooses by the backend (on an accelerator, where a
#: ``conditional`` may cost a host synchronisation per step; on a CPU a branch costs less
#: than compiling a second program).
SETTLED = None


def _settles():
    """:data:`SETTLED`, or by the default backend when it is ``None``."""
    if SETTLED is not None:
        return bool(SETTLED)
    return jax.default_backend() != "cpu"


_settled_bodies = OrderedDict()


def _settled_body(body_fun, val):
    """``body_fun`` (``MCMC``'s ``partial`` with the kernel as its ``sampler``) with the
    kernel's transitions after warm-up for the state in ``val`` (``after_warmup``), or
    ``None`` where the kernel has none; the same object for the same pair, so that its
    compiled loop is found again."""
    keywords = getattr(body_fun, "keywords", None) or {}
    after = getattr(keywords.get("sampler"), "after_warmup", None)
    phase = None if after is None else after(report.state_of(val))
    if phase is None:
        return None
    return lru_get(_settled_bodies, (body_fun, phase),
                   lambda: partial(body_fun.func, *body_fun.args,
                                   **{**keywords, "sampler": phase}), _MAX_LOOPS)


def _phased(run, body_fun, transform, sizes, adaptive):
    """``run`` (a compiled loop, called ``(lo, hi, val, ...)``) for calls that start before
    step ``adaptive``, the end of the step-size adaptation's warm-up; from there on the loop
    of the kernel's transitions after warm-up (:func:`_settled_body`, found from the state
    there), or ``run`` where there are none. A call never spans ``adaptive``
    (:func:`collect` ends one there)."""
    after = []

    def phased(lo, hi, val, *rest):
        if lo < adaptive:
            return run(lo, hi, val, *rest)
        if not after:
            body = _settled_body(body_fun, val)
            after.append(run if body is None else _compiled(body, transform, *sizes))
        return after[0](lo, hi, val, *rest)

    return phased


def _steps_per_group():
    """:data:`GROUP`, or by the default backend when it is ``None``."""
    if GROUP is not None:
        return int(GROUP)
    return 0 if jax.default_backend() == "cpu" else ACCELERATOR_GROUP


def _group_sizes(state, thinning, group):
    """``(group, slots)``: steps per group (at most ``group``) and how many of them can be
    kept (at most ``ceil(group / thinning)``), so that ``slots`` states fit in
    :data:`PENDING_BYTES`; ``(0, 0)`` for ``group = 0`` (:func:`_segment_loop`)."""
    if group == 0:
        return 0, 0
    nbytes = sum(np.size(x) * jnp.result_type(x).itemsize for x in jax.tree.leaves(state))
    fit = max(1, PENDING_BYTES // max(int(nbytes), 1))
    group = int(min(group, fit * int(thinning)))
    return group, int(min(group, -(-group // int(thinning))))


def _loop_step(body_fun, hi, start, thinning, slots, j, carry):
    """Step ``j`` of a group (:func:`_grouped_loop`): ``carry`` is ``(first step's index, val,
    since, pending states, their draw indices, how many are pending)``. The step's result is
    taken where its index is below ``hi``; a kept step's state (its ``diverging`` covering its
    thinning window) is set aside in the next free place."""
    base, val, since, pending, index, count = carry
    i = base + j
    valid = i < hi
    new = body_fun(val)
    val = _with_state(new, jax.tree.map(partial(jnp.where, valid), report.state_of(new),
                                        report.state_of(val)))
    n = i - start + 1
    kept = valid & (n > 0) & (n % thinning == 0)
    windowed = _set_aside(report.state_of(_window(val, since)))
    if since is not None:
        since = jnp.where(valid & (kept | (i == start - 1)), report.rejections(val), since)
    slot = jnp.where(kept, count, slots)
    pending = jax.tree.map(lambda buf, x: buf.at[slot].set(x, mode="drop"), pending, windowed)
    index = index.at[slot].set(n // thinning - 1, mode="drop")
    return base, val, since, pending, index, count + kept.astype(jnp.int32)


def _grouped_loop(body_fun, transform, group, slots, unroll, lo, hi, val, collection, start,
                  thinning, since):
    """Steps ``lo .. hi - 1`` of ``body_fun``; the kept ones transformed into ``collection``.
    Step ``i`` (the state after it) is kept as draw ``k`` when ``i - start + 1 = (k + 1)
    thinning``. ``since`` is the rejection count at the previous record, or at ``start``
    (``None`` for states without one).

    The steps run in groups of ``group`` (a constant): an outer loop over the groups, an inner
    loop of ``group`` steps whose trip count XLA knows, each step's result taken only where
    ``i < hi`` (the last group's surplus steps are computed and dropped). A kept step's state is
    set aside in one of ``slots`` places; after the group, if any was kept, each place is
    transformed and written at its draw index (an unused place at an index past the end, which
    drops the write). So ``body_fun`` and ``transform`` are traced once, the transform runs only
    after a group that kept a step (on its ``slots`` places), and the loop over steps has no
    ``conditional`` (on a GPU one costs a device-to-host synchronisation per step). ``unroll``
    steps run in each iteration of the inner loop (``lax.fori_loop``'s ``unroll``).
    """
    leaves = jax.tree.leaves(collection)
    size = leaves[0].shape[0] if leaves else 0
    state = report.state_of(val)
    pending0 = jax.tree.map(lambda x: jnp.zeros((slots,) + jnp.shape(x), jnp.result_type(x)),
                            _set_aside(state))
    index0 = jnp.full(slots, size, jnp.int32)
    step = partial(_loop_step, body_fun, hi, start, thinning, slots)

    def record(args):
        val, pending, index, collection = args

        def one(q, collection):
            s = _put_back(jax.tree.map(lambda buf: buf[q], pending), report.state_of(val))
            return _record(transform, collection, _with_state(val, s), index[q], None)

        return lax.fori_loop(0, slots, one, collection)

    def run_group(g, carry):
        val, collection, since = carry
        carry = (lo + g * group, val, since, pending0, index0, jnp.int32(0))
        _, val, since, pending, index, count = lax.fori_loop(0, group, step, carry,
                                                             unroll=unroll)
        collection = lax.cond(count > 0, record, lambda args: args[-1],
                              (val, pending, index, collection))
        return val, collection, since

    return lax.fori_loop(0, (hi - lo + group - 1) // group, run_group, (val, collection, since))


def _segment_loop(body_fun, transform, lo, hi, val, collection, start, thinning, since):
    """Steps ``lo .. hi - 1`` of ``body_fun``; the kept ones transformed into ``collection``.
    ``since`` is the rejection count at the previous record (or ``None`` for states without
    one).

    The steps fall into segments whose bounds are arithmetic on the (traced) arguments:

    1. the steps before ``start`` (nothing kept);
    2. the head, up to the end of the thinning window the chunk starts in (kept at its last
       step if that is in the chunk);
    3. whole windows of ``thinning`` steps, each kept at its last step;
    4. the tail, the steps of a window the chunk ends inside (nothing kept).

    One loop over the segments runs an inner loop over each segment's steps and then writes
    the segment's last state at its draw index; a segment that keeps nothing writes past the
    end of the buffers, which drops the write. So ``body_fun`` is traced once, and the loop
    over steps has ``body_fun`` alone as its body: no ``conditional`` there (on a GPU one
    costs a device-to-host synchronisation per step).
    """
    counts = since is not None
    size = jax.tree.leaves(collection)[0].shape[0] if jax.tree.leaves(collection) else 0
    p0 = jnp.clip(start, lo, hi)
    b = start + (p0 - start + thinning - 1) // thinning * thinning  # first boundary >= p0
    head_kept = (b > p0) & (b <= hi)
    windows = jnp.maximum(hi - b, 0) // thinning
    first = (b - start) // thinning  # the first whole window's draw index
    tail = b + windows * thinning
    last = windows + 2  # segment index of the tail

    def segment(s, carry):
        val, collection, since = carry
        pre, head, end = s == 0, s == 1, s == last
        a = jnp.where(pre, lo, jnp.where(head, p0, jnp.where(end, tail, b + (s - 2) * thinning)))
        e = jnp.where(pre, p0, jnp.where(head, jnp.minimum(b, hi),
                                         jnp.where(end, hi, b + (s - 1) * thinning)))
        keep = jnp.where(pre | end, False, jnp.where(head, head_kept, True))
        k = jnp.where(keep, jnp.where(head, first - 1, first + s - 2), size)
        val = lax.fori_loop(a, e, lambda i, v: body_fun(v), val)
        collection = _record(transform, collection, val, k, since)
        if counts:
            since = jnp.where(keep | (pre & (p0 > lo)), report.rejections(val), since)
        return val, collection, since

    # empty segments are left out: each segment runs the transform once
    s_lo = jnp.where(p0 > lo, 0, jnp.where(p0 < jnp.minimum(b, hi), 1, 2))
    s_hi = jnp.where(tail < hi, last + 1, last)
    return lax.fori_loop(s_lo, s_hi, segment, (val, collection, since))


def _compiled(body_fun, transform, group, slots, traced=False):
    """The jitted loop of ``(body_fun, transform)``: :func:`_grouped_loop` in groups of
    ``group`` steps (:data:`UNROLL` of them per iteration of its inner loop), or
    :func:`_segment_loop` for ``group = 0``; cached unless ``traced`` (the functions then
    close over tracers, which a cache would keep alive after the trace ends)."""
    unroll = _unroll(group)
    loop = (partial(_grouped_loop, body_fun, transform, group, slots, unroll) if group
            else partial(_segment_loop, body_fun, transform))
    make = partial(jax.jit, loop, donate_argnums=(3,))
    if traced:
        return make()
    return lru_get(_loops, (body_fun, transform, group, slots, unroll), make, _MAX_LOOPS)


def _unroll(group):
    """:data:`UNROLL` for groups of ``group`` steps (1 for the segment loop), checked."""
    if not group:
        return 1
    unroll = UNROLL
    if not (isinstance(unroll, (int, np.integer)) and unroll >= 1):
        raise ValueError(f"numpyro_sgrld.sampler.loop.UNROLL={unroll!r} must be a positive integer "
                         "(copies of the step per iteration of a group's loop; 1 for none)")
    return int(min(unroll, group))


def _empty_collection(transform, init_val, size):
    """Zero buffers of ``size`` draws shaped like ``transform(init_val)``, which is not run."""
    try:
        shapes = jax.eval_shape(transform, init_val)
    except (AttributeError, TypeError, KeyError) as e:
        state = report.state_of(init_val)
        if not hasattr(state, "_fields"):
            raise
        fields = field_names(state)
        raise ValueError(
            f"Cannot collect the requested fields from the kernel's state ({type(e).__name__}: "
            f"{e}). A stochastic-gradient kernel's state has the fields {list(fields)}; "
            "`extra_fields` must name some of them (NUTS fields such as accept_prob, "
            "num_steps or adapt_state do not exist here)."
        ) from e
    return jax.tree.map(lambda s: jnp.zeros((size,) + s.shape, s.dtype), shapes)


def _trace_state():
    """JAX's current trace, opaque (``jax.extend.core.get_opaque_trace_state``, public since
    JAX 0.4.36); ``None`` where a JAX release lacks it."""
    try:
        from jax.extend.core import get_opaque_trace_state
    except ImportError:
        return None
    return get_opaque_trace_state(convention="nnx")


# The trace outside every transformation (this module is imported there).
_TOP_LEVEL_TRACE = _trace_state()


def under_transform(tree):
    """Whether this runs inside a JAX transformation (``jit``, ``vmap``, ``pmap``, ``grad``)
    or ``tree`` holds tracers: NumPyro's own caches (``numpyro.util.cached_by``) ask the same,
    with JAX's private ``trace_state_clean``. Here: whether JAX's current trace is the one
    outside every transformation. Where a JAX release lacks the public function, the values
    alone tell."""
    if _TOP_LEVEL_TRACE is None:
        return report.is_traced(tree)
    return _trace_state() != _TOP_LEVEL_TRACE or report.is_traced(tree)


def collect(
    lower,
    upper,
    body_fun,
    init_val,
    transform=lambda x: x,
    progbar=True,
    progress_rate=None,
    return_last_val=False,
    collection_size=None,
    thinning=1,
    **progbar_opts,
):
    """Run ``body_fun`` ``upper`` times from ``init_val`` and collect ``transform`` of the
    states after steps ``lower .. upper - 1``, thinned: the signature and results of
    ``numpyro.util.fori_collect`` (see the module docstring for what differs in cost).

    :return: the collection (leading axis: draws), and the last state if ``return_last_val``.
    """
    if not (0 <= lower <= upper):
        raise ValueError(f"need 0 <= lower <= upper, got lower={lower}, upper={upper}")
    if not (isinstance(thinning, (int, np.integer)) and thinning >= 1):
        raise ValueError(f"`thinning` must be a positive integer, got {thinning!r}")
    kept = (upper - lower) // thinning
    collection_size = kept if collection_size is None else collection_size
    if collection_size < kept:
        raise ValueError(f"collection_size={collection_size} is smaller than the {kept} draws")
    start = lower + (upper - lower) % thinning
    collection = _empty_collection(transform, init_val, collection_size)
    traced = under_transform((init_val, collection))
    sizes = _group_sizes(report.state_of(init_val), thinning, _steps_per_group())
    run = _compiled(body_fun, transform, *sizes, traced)
    start, thin = np.int32(start), np.int32(thinning)
    since = report.rejections(init_val)
    # the run in two parts where the step-size adaptation's warm-up ends, to count the
    # rejections after it (the same draws: the loop's bounds are arguments)
    adaptive = 0 if traced else report.adaptive_steps(init_val, upper)
    if not traced and _settles():
        run = _phased(run, body_fun, transform, sizes, adaptive)
    counted = since
    if not progbar or upper == 0 or traced:
        val = init_val
        parts = ((0, adaptive), (adaptive, upper)) if 0 < adaptive < upper else ((0, upper),)
        for lo, hi in parts:
            val, collection, since = run(
                np.int32(lo), np.int32(hi), val, collection, start, thin, since
            )
            if hi == adaptive:
                counted = report.rejections(val)
    else:
        val, collection, counted = report.with_progress_bar(
            run, upper, init_val, collection, start, thin, since, progress_rate, progbar_opts,
            adaptive,
        )
    report.warn_if_rejected(counted, report.rejections(val), upper - adaptive, adaptive,
                            getattr(body_fun, "keywords", {}).get("sampler"),
                            getattr(report.state_of(val), "step_size", None))
    if not traced and adaptive < upper:
        report.judge(collection, kept, val, body_fun, upper - lower)
    return (collection, val) if return_last_val else collection


