r"""Data larger than memory: :class:`HostRows`, rows that stay on the host (a memory-mapped
NumPy file, ``numpy.load(path, mmap_mode="r")``) and reach the device a minibatch at a time.

The model is unchanged: it indexes the rows with its plate's indices, ``X[idx]``, and each
step gathers those ``n`` rows on the host (:func:`jax.pure_callback`) and hands them to the
compiled step. The process's resident memory holds the minibatch, not the file: for a file
larger than :data:`MAPPED_BUDGET`, the pages a gather maps are dropped from the process's
mapping every :data:`GATHER_BLOCK` scattered rows and after each chunk
(``madvise(MADV_DONTNEED)``; the operating system's page cache keeps them for the next read).

**Full-data passes stream in chunks.** A plate's full data would not fit, so wherever the
kernels evaluate the full-data potential (the control variates' centre, the dense metric's
Hessian at a window's end) they sum it over ``C`` chunks of ``N/C`` rows, each the plate's
minibatch potential on one chunk,

.. math::
    U(\theta) = \frac{1}{C}\sum_{c=1}^{C}\hat U_c(\theta), \qquad
    \hat U_c(\theta) = -\log p(\theta) - \frac{N}{N/C}\sum_{i \in \text{chunk } c}
    \log p(y_i\mid\theta),

one chunk in memory at a time (:func:`chunked_full_potential`; the chunk's rows are gathered
again for the gradient rather than kept). ``C`` is the smallest divisor of ``N`` that gives
chunks of at most :data:`CHUNK_ROWS` rows. The data checks made at set-up, which read every
row, are left out for such data.

Why memory-mapped NumPy: it needs no library beyond NumPy, a gather of scattered rows is one
vectorised fancy-index (Zarr and Parquet read whole chunks or row groups per row, which for
uniform minibatches of a large file reads far more than the rows), and ``np.save`` writes it
from any array or chunk by chunk (``np.lib.format.open_memmap``).
"""

import mmap

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.primitives import Messenger

__all__ = ["CHUNK_ROWS", "GATHER_BLOCK", "MAPPED_BUDGET", "HostRows", "chunked_full_potential",
           "host_leaves", "num_chunks", "one_plate"]

#: Rows per chunk of a full-data pass, at most.
CHUNK_ROWS = 1 << 18

#: Scattered rows gathered between two releases of the file's pages: a page fault on a file
#: mapping maps the whole folio of the page cache around its page (measured: 1,000 scattered
#: rows of a file in the page cache mapped 1.3 GB), so the mapping is released every
#: ``GATHER_BLOCK`` rows.
GATHER_BLOCK = 128

#: A file of at most this many bytes stays mapped as it is (its pages are bounded by its
#: size); a larger one is read in blocks of :data:`GATHER_BLOCK` rows with releases between.
MAPPED_BUDGET = 1 << 29


class _Source:
    """The host array, compared by identity (it is the static part of :class:`HostRows`)."""

    def __init__(self, array):
        self.array = array
        advise(array, "MADV_RANDOM")  # rows are read scattered: no read-ahead

    def gather(self, idx):
        idx = np.asarray(idx)
        flat = idx.reshape(-1)
        if not _mapped(self.array) or self.array.nbytes <= MAPPED_BUDGET:
            return np.asarray(self.array[idx])  # the whole mapping fits the budget
        if flat.size and flat[-1] - flat[0] == flat.size - 1 and np.all(np.diff(flat) == 1):
            rows = np.array(self.array[flat[0]:flat[-1] + 1])  # a chunk: one read
            release(self.array)
        else:  # scattered rows: a page fault maps a whole folio around each of them
            rows = np.empty((flat.size,) + self.array.shape[1:], self.array.dtype)
            for start in range(0, flat.size, GATHER_BLOCK):
                rows[start:start + GATHER_BLOCK] = self.array[flat[start:start + GATHER_BLOCK]]
                release(self.array)
        return rows.reshape(idx.shape + self.array.shape[1:])


def _mapping(array):
    base = array
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    return base


def _mapped(array):
    return _mapping(array) is not None


def advise(array, advice):
    """``madvise`` the mapping of a memory-mapped ``array`` (``advice`` a name in
    :mod:`mmap`, where the platform has it); nothing for an array in memory."""
    base = _mapping(array)
    if base is not None and hasattr(mmap, advice) and hasattr(base, "madvise"):
        base.madvise(getattr(mmap, advice))


def release(array):
    """Drop the pages of a memory-mapped ``array`` from the process's mapping (they stay in
    the page cache); nothing for an array in memory."""
    advise(array, "MADV_DONTNEED")


@jax.tree_util.register_pytree_node_class
class HostRows:
    """Rows kept on the host (a NumPy array, typically memory-mapped), indexed by a vector of
    row indices inside the compiled step: ``rows[idx]`` gathers them on the host. ``shape``,
    ``dtype``, ``ndim`` and ``len`` are the array's."""

    def __init__(self, array):
        source = array if isinstance(array, _Source) else _Source(array)
        if not isinstance(source.array, np.ndarray) or source.array.ndim == 0:
            raise TypeError(
                "HostRows takes a NumPy array of rows (e.g. numpy.load(path, mmap_mode='r')), "
                f"got {type(source.array).__name__}.")
        self.source = source

    @property
    def shape(self):
        return self.source.array.shape

    @property
    def dtype(self):
        return self.source.array.dtype

    @property
    def ndim(self):
        return self.source.array.ndim

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, idx):
        if isinstance(idx, tuple) or jnp.ndim(idx) != 1:
            raise TypeError(
                "HostRows is indexed by one vector of row indices, rows[idx] (the plate's "
                f"indices); got {idx!r}. Index the gathered rows further: rows[idx][:, j].")
        idx = jnp.asarray(idx)
        out = jax.ShapeDtypeStruct(idx.shape + self.shape[1:], self.dtype)
        return jax.pure_callback(self.source.gather, out, idx, vmap_method="expand_dims")

    def tree_flatten(self):
        return (), self.source

    @classmethod
    def tree_unflatten(cls, source, children):
        return cls(source)

    def __repr__(self):
        return f"HostRows(shape={self.shape}, dtype={self.dtype})"


def host_leaves(tree):
    """The :class:`HostRows` in ``tree`` (model arguments)."""
    found = []
    jax.tree.map(lambda x: found.append(x) if isinstance(x, HostRows) else None, tree,
                 is_leaf=lambda x: isinstance(x, HostRows))
    return found


def one_plate(plates):
    """The one subsample plate whose rows :class:`HostRows` holds (refusing more or none)."""
    if len(plates) != 1:
        raise ValueError(
            "HostRows streams the rows of one subsample plate; the model has "
            f"{len(plates)} ({[p.name for p in plates]}). Keep the rows that do not fit in "
            "memory under one numpyro.plate(..., subsample_size=n).")
    return plates[0]


def num_chunks(size, chunk_rows=None):
    """``C``: the smallest divisor of ``size`` with chunks of at most ``chunk_rows`` rows."""
    chunk_rows = CHUNK_ROWS if chunk_rows is None else chunk_rows
    c = -(-size // chunk_rows)
    while size % c:
        c += 1
    return c


class _Chunk(Messenger):
    """The subsample plate ``name`` over the rows ``idx`` (its scaling ``N / len(idx)``)."""

    def __init__(self, fn, name, idx):
        self.name, self.idx = name, idx
        super().__init__(fn)

    def process_message(self, msg):
        if msg["type"] == "plate" and msg["name"] == self.name:
            msg["args"] = (msg["args"][0], self.idx.shape[0])
            msg["value"] = self.idx


def chunked_full_potential(model, model_args, model_kwargs, plate, chunk_rows=None):
    """``z -> U(z)``: the full-data potential of ``model`` at its arguments, summed over the
    chunks of the subsample plate ``plate`` (module docstring)."""
    from numpyro.infer.util import potential_energy

    chunks = num_chunks(plate.size, chunk_rows)
    rows = plate.size // chunks

    @jax.checkpoint
    def one(z, c):
        idx = c * rows + jnp.arange(rows)
        return potential_energy(_Chunk(model, plate.name, idx), model_args, model_kwargs, z)

    def full(z):
        total, _ = jax.lax.scan(lambda t, c: (t + one(z, c), None), 0.0,
                                jnp.arange(chunks))
        return total / chunks

    return full
