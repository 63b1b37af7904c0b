r"""Subsample plates: finding them, drawing minibatch indices, and switching them off.

A model written with ``numpyro.plate(name, N, subsample_size=n)`` scales the log-likelihood of
the ``n`` selected points by ``N / n``, so the potential on a minibatch, :math:`\hat U`, is an
unbiased estimate of the full-data potential :math:`U`. The SG kernels draw fresh indices every
step and substitute them into the model (``handlers.substitute(model, data={name: idx})``);
:func:`full_batch` substitutes ``arange(N)`` instead and drops the scaling, which gives the exact
model for NUTS, ``Predictive`` and ``log_likelihood``.
"""

import math
from contextlib import nullcontext
from functools import partial, wraps
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from numpyro import handlers
from numpyro.infer.initialization import init_to_uniform
from numpyro.primitives import Messenger

__all__ = ["full_batch", "SubsamplePlate", "find_subsample_plates"]

BATCHING_CHOICES = ("replacement", "epoch", "contiguous")


class _FullBatch(Messenger):
    """Handler that turns every subsample plate into a plate over all its data. With
    ``opaque``, the indices ``arange(N)`` pass through ``lax.optimization_barrier``: where the
    data are constants of the compiled program (NumPyro's ``MCMC`` closes over the model's
    arguments), XLA would otherwise evaluate ``X[arange(N)]`` while compiling, which for a
    large data set costs seconds per copy of the model in the program."""

    def __init__(self, fn=None, opaque=False):
        self.opaque = opaque
        super().__init__(fn)

    def __call__(self, *args, **kwargs):
        # NumPy arrays cannot be indexed by the (traced, under jit) full index set: hand the
        # model JAX arrays instead.
        args, kwargs = jax.tree.map(as_jax_array, (args, kwargs))
        return super().__call__(*args, **kwargs)

    def process_message(self, msg):
        if msg["type"] == "plate" and msg.get("value") is None:
            size = msg["args"][0]
            msg["args"] = (size, None)
            idx = jnp.arange(size)
            msg["value"] = jax.lax.optimization_barrier(idx) if self.opaque else idx


class _CompiledSubsample(Messenger):
    """Handler that draws a subsample plate's indices by NumPyro's own rule
    (``numpyro.primitives._subsample_fn``) compiled once per ``(size, subsample_size)``: the same
    indices from the same key. Run eagerly, NumPyro's rule compiles a fresh ``lax.scan`` on
    every call (its loop body is a new closure each time), a fraction of a second per trace of
    the model; a kernel's set-up traces the model a dozen times and more. Plates whose indices
    are given, or that have no key, are left to NumPyro."""

    def process_message(self, msg):
        if (msg["type"] == "plate" and msg.get("value") is None
                and msg["kwargs"].get("rng_key") is not None):
            size, subsample_size = msg["args"]
            if subsample_size is not None and subsample_size < size:
                msg["value"] = _compiled_subsample_fn(size, subsample_size,
                                                      msg["kwargs"]["rng_key"])


@partial(jax.jit, static_argnums=(0, 1))
def _compiled_subsample_fn(size, subsample_size, rng_key):
    """NumPyro's subsample indices (``numpyro.primitives._subsample_fn``), compiled."""
    from numpyro.primitives import _subsample_fn

    return _subsample_fn(size, subsample_size, rng_key)


def compiled_subsampling(init):
    """``init`` (a kernel's set-up) run where the models' subsample plates draw their indices by
    NumPyro's rule compiled once (:class:`_CompiledSubsample`), for its eager traces of the
    model; as it is without NumPyro's private ``_subsample_fn`` (another version)."""
    import numpyro.primitives as primitives

    @wraps(init)
    def wrapped(*args, **kwargs):
        handler = _CompiledSubsample() if hasattr(primitives, "_subsample_fn") else nullcontext()
        with handler:
            return init(*args, **kwargs)

    return wrapped


def as_jax_array(x):
    """NumPy arrays become JAX arrays (so that traced indices can index them); others pass."""
    return jnp.asarray(x) if isinstance(x, np.ndarray) else x


def full_batch(model):
    """The same model with subsampling switched off: every plate uses all ``N`` data points.

    ``numpyro.plate(name, N, subsample_size=n)`` becomes ``numpyro.plate(name, N)``: the plate
    yields ``arange(N)``, ``numpyro.subsample`` returns the whole data, and no ``N / n`` scaling
    is applied. Use it for the exact baseline and for full-data evaluation::

        MCMC(NUTS(full_batch(model)), num_warmup=500, num_samples=2000).run(key, X, y)
        Predictive(full_batch(model), samples)(key, X)
        numpyro.infer.log_likelihood(full_batch(model), samples, X, y)

    Plates whose indices are already substituted by an outer handler are left alone. NumPy
    arrays among the model's arguments are passed to it as JAX arrays.
    """
    return _FullBatch(model)


def full_batch_opaque(model):
    """:func:`full_batch` for the kernels' own full-data evaluations (rare, inside a compiled
    step): the indices are opaque to XLA's constant folding (see ``_FullBatch``)."""
    return _FullBatch(model, opaque=True)


class SubsamplePlate(NamedTuple):
    """A plate with ``subsample_size < size`` found in the model."""

    name: str
    size: int
    subsample_size: int


class _PlateRecorder(Messenger):
    """Records plates and gives each subsample plate a placeholder index set.

    The placeholder keeps NumPyro from drawing indices (which needs a random key, and would
    fail obscurely for a subsample larger than the plate) while the model is traced.
    """

    def __init__(self, fn=None, spread=False):
        self.plates = {}
        self.declared = {}
        self.spread = spread
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] != "plate":
            return
        size, subsample_size = msg["args"]
        if subsample_size is not None and msg.get("value") is not None:
            # subsample_size == size: no subsampling, but the plate still says how many data
            # points there are (num_data must not jump when n reaches N)
            self.declared[msg["name"]] = int(size)
        if msg.get("value") is not None:
            return
        _check_subsample_size(msg["name"], size, subsample_size)
        self.plates[msg["name"]] = (size, subsample_size)
        self.declared[msg["name"]] = int(size)
        msg["value"] = (spread_indices(size, subsample_size) if self.spread
                        else jnp.arange(subsample_size))


def spread_indices(size, n):
    r"""``n`` indices evenly spread over ``0..size-1``, :math:`\lfloor iN/n\rfloor` for
    :math:`i = 0..n-1` (computed in 64 bits: :math:`iN` passes :math:`2^{31}` for large data).
    For any :math:`K` that divides both :math:`n` and :math:`N`, the :math:`k`-th block of
    :math:`n/K` of them lies in the :math:`k`-th share of :math:`N/K` rows: for
    :math:`kn/K \le i < (k+1)n/K`, :math:`kN/K \le iN/n < (k+1)N/K`. So rows sharded across
    devices (:class:`~numpyro_sgrld.data.sharding.ShardedRows`) are read each on its own device."""
    return jnp.asarray(np.arange(n, dtype=np.int64) * size // n, jnp.int32)


def _check_subsample_size(name, size, subsample_size):
    from numpyro_sgrld.core.checks import ModelSetupError

    integral = isinstance(subsample_size, (int, np.integer)) and not isinstance(
        subsample_size, (bool, np.bool_)
    )
    if not integral or subsample_size < 1:
        raise ModelSetupError(
            f"Plate '{name}' has subsample_size={subsample_size!r}: it must be an integer "
            f"between 1 and the plate's size {size} (a subsample of size 0 would drop the "
            "likelihood and sample the prior). Omit subsample_size to use all the data."
        )
    if subsample_size > size:
        raise ModelSetupError(
            f"Plate '{name}' has subsample_size={subsample_size} larger than its "
            f"size {size}. Use a subsample_size of at most {size} (or omit it to use all "
            "the data)."
        )


def placeholder_plates(model, spread=False):
    """``model`` with every subsample plate given the placeholder indices ``arange(n)``
    (for tracing the model's structure, not for inference); ``spread``: ``n`` indices evenly
    spread over the plate (:func:`spread_indices`), one block in each share of rows sharded
    across devices (:class:`~numpyro_sgrld.data.sharding.ShardedRows`)."""
    return _PlateRecorder(model, spread)


def trace_with_plates(model, model_args=(), model_kwargs=None, spread=False):
    """Trace ``model`` once (seeded, subsample plates given placeholder indices; ``spread``
    as in :func:`placeholder_plates`).

    Returns ``(trace, plates)``, ``plates`` a tuple of :class:`SubsamplePlate` for the plates
    with ``subsample_size < size``. Raises ``ValueError`` for a plate whose
    ``subsample_size`` exceeds its size.
    """
    model_trace, plates, _ = trace_model(model, model_args, model_kwargs, spread)
    return model_trace, plates


def _structure_value(site):
    """A continuous latent site's value in a structural trace: NumPyro's ``init_to_uniform``
    (uniform on :math:`(-2, 2)` unconstrained, constrained), the only value a flat
    ``ImproperUniform`` site can take and, for the others, a draw far cheaper to compile
    than many priors' samplers (a Gamma's rejection loop); ``None`` for discrete sites,
    which the seeded trace draws."""
    if (site["type"] == "sample" and not site["is_observed"] and site.get("value") is None
            and not site["fn"].support.is_discrete):
        return init_to_uniform(site)
    return None


def seeded(model, rng_seed=0):
    """``model`` seeded for a structural trace (its sites, shapes, plates and dependencies,
    not its prior's law): continuous latent sites take NumPyro's ``init_to_uniform`` values,
    discrete ones are drawn from their distributions."""
    return handlers.substitute(handlers.seed(model, rng_seed=rng_seed),
                               substitute_fn=_structure_value)


def structural(model, rng_seed=0):
    """``model`` for a structural trace that needs no minibatch either: :func:`seeded`, its
    subsample plates given the placeholder indices ``arange(n)``
    (:func:`placeholder_plates`), so that no indices are drawn."""
    return placeholder_plates(seeded(model, rng_seed))


def trace_model(model, model_args=(), model_kwargs=None, spread=False):
    """:func:`trace_with_plates`, plus ``declared``: ``{name: size}`` of every plate given a
    ``subsample_size`` (including ``subsample_size == size``)."""
    model_kwargs = {} if model_kwargs is None else model_kwargs
    recorder = _PlateRecorder(seeded(model), spread)
    with handlers.block():
        model_trace = handlers.trace(recorder).get_trace(*model_args, **model_kwargs)
    plates = tuple(
        SubsamplePlate(name, int(size), int(subsample_size))
        for name, (size, subsample_size) in recorder.plates.items()
    )
    return model_trace, plates, recorder.declared


def find_subsample_plates(model, model_args=(), model_kwargs=None):
    """The subsample plates of ``model`` (several, nested or not), as :class:`SubsamplePlate`."""
    return trace_with_plates(model, model_args, model_kwargs)[1]


class EpochState(NamedTuple):
    """Without-replacement batching: a permutation of ``arange(N)`` and a read position."""

    permutation: jnp.ndarray
    position: jnp.ndarray


class Contiguous(NamedTuple):
    r"""Contiguous batching (no state): each minibatch is the run of :math:`n` consecutive rows
    from a uniform first row :math:`s`, wrapping around,

    .. math::
        \mathcal B = \{s, s+1, \dots, s+n-1\} \bmod N, \qquad s \sim \mathcal U\{0, \dots, N-1\}.

    Each row is in exactly :math:`n` of the :math:`N` runs, so it is in the minibatch with
    probability :math:`n/N` and the scaled potential :math:`\hat U` is unbiased whatever the
    rows' order. Its noise is that of a uniform minibatch only where the rows are in random
    order (:func:`numpyro_sgrld.data.sharding.shuffled_rows`): on rows sorted by a covariate (time,
    label, a group) a run is a slice of one part of the data and the noise is larger. Rows on
    disk (:class:`~numpyro_sgrld.data.sharding.HostRows`) are then read in one read per minibatch,
    not one per row."""


def contiguous_indices(key, n, size):
    """The rows of a run of ``n`` from a uniform first row, modulo ``size``
    (:class:`Contiguous`)."""
    first = uniform_indices(key, (), size)
    offset = first + jnp.arange(n, dtype=jnp.int32)
    return jnp.where(offset >= size, offset - size, offset)


def init_batching(key, plates, batching):
    """Initial batching state: ``None`` for sampling with replacement, else one state per
    plate: :class:`EpochState` or :class:`Contiguous`."""
    if batching == "replacement":
        return None
    if batching == "contiguous":
        return tuple(Contiguous() for _ in plates)
    keys = random.split(key, max(len(plates), 1))
    return tuple(
        EpochState(random.permutation(k, plate.size), jnp.zeros((), jnp.int32))
        for k, plate in zip(keys, plates)
    )


def check_draws(plates, batching):
    """The batching state from which a check's own minibatch is drawn (the warm-up's noise and
    proposal checks, the control variates' mode search): the chain's law where it has no state
    (``"contiguous"``: the noise measured is that of the chain's minibatches, and rows on disk
    are read as runs), else independent uniform indices (``None``)."""
    return init_batching(None, plates, batching) if batching == "contiguous" else None


def _next_epoch_batch(key, plate, state):
    n, size = plate.subsample_size, plate.size
    # The last incomplete batch of an epoch is dropped; the next epoch reshuffles, so every
    # point is used equally often in the long run.
    permutation, position = lax.cond(
        state.position + n > size,
        lambda: (random.permutation(key, size), jnp.zeros((), jnp.int32)),
        lambda: (state.permutation, state.position),
    )
    idx = lax.dynamic_slice_in_dim(permutation, position, n)
    return idx, EpochState(permutation, position + n)


def uniform_indices(key, shape, size):
    r"""Independent uniform draws from ``0..size-1``, with :func:`jax.random.randint`'s
    arithmetic: two 32-bit words :math:`h, l` per index give
    :math:`\big((h \bmod N)\,(2^{32} \bmod N) + l \bmod N\big) \bmod N`, uniform up to a
    relative error of order :math:`N / 2^{32}`. Both words come from one call of the bit
    generator (``randint`` makes three: a split and one per word), which keeps the compiled
    step small: every call of the generator is a separate, unrolled threefry hash in it."""
    count = math.prod(shape)
    bits = random.bits(key, (2 * count,), jnp.uint32)  # flat: less index arithmetic than (2, n)
    high, low = bits[:count].reshape(shape), bits[count:].reshape(shape)
    span = jnp.uint32(size)
    multiplier = lax.rem(jnp.uint32(2**16) % span * (jnp.uint32(2**16) % span), span)
    offset = lax.rem(lax.rem(high, span) * multiplier + lax.rem(low, span), span)
    return offset.astype(jnp.int32)


def draw_indices(key, plates, batching_state):
    """Fresh minibatch indices ``{plate_name: idx}`` and the new batching state.

    With replacement (``batching_state is None``) each index is an independent uniform draw
    from ``0..N-1`` (:func:`uniform_indices`: O(n) work, not a permutation of all N); with
    :class:`Contiguous`, a run from a uniform first row.
    """
    keys = random.split(key, len(plates)) if len(plates) > 1 else [key]
    if batching_state is None:
        idx = {
            plate.name: uniform_indices(k, (plate.subsample_size,), plate.size)
            for k, plate in zip(keys, plates)
        }
        return idx, None
    idx, new_state = {}, []
    for k, plate, state in zip(keys, plates, batching_state):
        if isinstance(state, Contiguous):
            idx[plate.name], s = contiguous_indices(k, plate.subsample_size, plate.size), state
        else:
            idx[plate.name], s = _next_epoch_batch(k, plate, state)
        new_state.append(s)
    return idx, tuple(new_state)


def check_batching(batching):
    if batching not in BATCHING_CHOICES:
        raise ValueError(
            f"Unknown batching={batching!r}; use 'replacement' (independent uniform indices "
            "every step, the default), 'epoch' (shuffle and sweep without replacement) or "
            "'contiguous' (a run of consecutive rows from a uniform first row, for rows in "
            "random order on disk)."
        )
    return batching
