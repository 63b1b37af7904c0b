r"""Data larger than memory: :class:`HostRows`, rows that stay on the host (a memory-mapped
NumPy file, ``numpy.load(path, mmap_mode="r")``) and reach the device a minibatch at a time.

The model is unchanged: it indexes the rows with its plate's indices, ``X[idx]``. Each step
gathers its ``n`` rows of every :class:`HostRows` array on the host in one call at its start
(:func:`reading_ahead`, :func:`host_call`) and the model's ``X[idx]`` at the step's indices
are those rows, however many times the step evaluates its minibatch (the gradient at the state
and at the control variates' centre). Any other gather (a chunk of a full-data pass, a warm-up
check's own minibatch) is a call of its own.

**Reading rows.** A file larger than :data:`MAPPED_BUDGET` is read, not mapped, so the
process's resident memory holds minibatches, never the file's pages. (Fancy-indexing the
mapping instead maps the page cache's whole folio around each row: 1,000 scattered rows of an
8 GB file in the page cache mapped 1.3 GB into the process.) A minibatch's scattered rows are
read by a process of the file's own (:mod:`~numpyro_sgrld.data.row_reader`, started on the
first gather), one ``os.pread`` per row shared among its :data:`READERS` threads, and sent back
through a pipe: a thread of the sampling process looping over a thousand short reads a step
would take its interpreter's lock back after each one, and make the compiled step's host
call wait for the lock. Rows that form at most :data:`RUN_READS` runs of consecutive rows (a
chunk; a minibatch of ``batching="contiguous"``, :class:`~numpyro_sgrld.data.subsample.Contiguous`)
are one read per run in the process itself. A smaller file is indexed through its mapping,
whose pages are bounded by its size.

**Reading ahead.** While a step runs, the scattered rows of the next one are read: the
transition knows the next step's indices (its key is this step's), and the step's call asks
the reader for them before it waits for this step's rows, asked for during the previous step.
The rows read are kept by their indices for a few steps. The rows returned are always those of
the indices asked for: a read ahead that is not used is only time spent.

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
chunks of at most :data:`CHUNK_ROWS` rows; a chunk is one contiguous read. The data checks made
at set-up, which read every row, are left out for such data.

Why memory-mapped NumPy: it needs no library beyond NumPy, a row is at a known offset of the
file, so a gather of scattered rows reads those rows and nothing else (Zarr and Parquet read
whole chunks or row groups per row, which for uniform minibatches of a large file reads far
more than the rows), and ``np.save`` writes it from any array or chunk by chunk
(``np.lib.format.open_memmap``).
"""

import mmap
import os
import subprocess
import sys
import threading
import weakref
from collections import OrderedDict, deque
from contextlib import contextmanager, suppress

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.primitives import Messenger

__all__ = ["CHUNK_ROWS", "GATHER_BLOCK", "KEPT_READS", "MAPPED_BUDGET", "PIPE_ROOM", "READERS",
           "RUN_READS", "HostRows", "chunked_full_potential", "host_call", "host_leaves",
           "num_chunks", "one_plate", "reading_ahead", "runs"]

#: Rows per chunk of a full-data pass, at most.
CHUNK_ROWS = 1 << 18

#: A file of at most this many bytes is indexed through its mapping (its pages are bounded by
#: its size); a larger one is read row by row with ``os.pread``.
MAPPED_BUDGET = 1 << 29

#: Threads of the reader process that read one gather's rows, each its share of them.
READERS = 4

#: Bytes of each pipe to and from the reader process (requests in flight are kept within half).
PIPE_ROOM = 1 << 20

#: Reads kept by their indices: this step's, the next one's and a few before.
KEPT_READS = 4

#: A gather whose rows form at most this many runs of consecutive rows (a chunk, a
#: minibatch of ``batching="contiguous"``) reads each run in one read, in the process itself.
RUN_READS = 8

#: Scattered rows fancy-indexed between two releases of the mapping, for a large file whose
#: rows are not contiguous in it (a Fortran-ordered ``.npy``), which cannot be read row by row.
GATHER_BLOCK = 128

_AHEAD = threading.local()  # (this step's indices, its rows by source) while a step is traced

try:  # a callback that writes its results into XLA's buffers, on CPU
    from jax.experimental.buffer_callback import buffer_callback as _buffer_callback
except ImportError:  # pragma: no cover - a JAX without it
    _buffer_callback = None


def host_call(fn, shapes, *args):
    """``fn(*args)`` (NumPy arrays in, a tuple of NumPy arrays of ``shapes`` out) called from
    the compiled step, batched over vectorised chains by a leading axis. On CPU it is a
    :func:`~jax.experimental.buffer_callback.buffer_callback` that writes the results into
    XLA's output buffers (a fraction of :func:`jax.pure_callback`'s fixed cost per call, the
    larger part of a host gather's time: ``docs/benchmarks.md``); elsewhere a
    :func:`jax.pure_callback`."""
    if _buffer_callback is None or jax.default_backend() != "cpu":
        return jax.pure_callback(fn, shapes, *args, vmap_method="expand_dims")

    def fill(ctx, out, *buffers):
        for buffer, rows in zip(out, fn(*(np.asarray(b) for b in buffers)), strict=True):
            np.asarray(buffer)[...] = rows

    return _buffer_callback(fill, shapes, vmap_method="expand_dims")(*args)


@contextmanager
def reading_ahead(leaves, idx, next_idx):
    """While the body is traced, the :class:`HostRows` ``leaves`` indexed at this step's
    indices ``idx`` (the traced array the transition drew) are the rows of one host call at
    its start, which also starts the reads of the next step's rows ``next_idx``: however many
    arrays and however many evaluations of the minibatch's potential the step has (the state's
    and the control variates' centre's), one call per step."""
    sources = list({id(leaf.source): leaf.source for leaf in leaves}.values())
    shapes = tuple(jax.ShapeDtypeStruct(jnp.shape(idx) + s.array.shape[1:], s.array.dtype)
                   for s in sources)
    rows = host_call(lambda i, ahead: _gather_all(sources, i, ahead), shapes, idx, next_idx)
    stack = _AHEAD.__dict__.setdefault("stack", [])
    stack.append((idx, {id(s): r for s, r in zip(sources, rows, strict=True)}))
    try:
        yield
    finally:
        stack.pop()


def _gather_all(sources, idx, ahead):
    """Every source's rows ``idx``, once the reads of the rows ``ahead`` are asked for."""
    for source in sources:
        source.read_ahead(ahead)
    return tuple(source.gather(idx) for source in sources)


class _RowFile:
    """The file behind a memory-mapped array whose rows are each contiguous: row ``i`` is the
    ``row_bytes`` bytes at ``start + i * stride``."""

    def __init__(self, array, root):
        address = array.__array_interface__["data"][0]
        root_address = root.__array_interface__["data"][0]
        self.path = os.fspath(root.filename)
        self.start = root.offset + address - root_address
        self.stride, self.dtype = array.strides[0], array.dtype
        self.row_shape = array.shape[1:]
        self.row_bytes = array.dtype.itemsize * int(np.prod(self.row_shape, dtype=np.int64))
        self.fd = os.open(self.path, os.O_RDONLY)
        self._reader = None

    @classmethod
    def of(cls, array):
        """The rows' file, or ``None`` where the array is not a mapped file with contiguous
        rows."""
        if not hasattr(os, "pread"):  # a platform without positioned reads
            return None
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        if not isinstance(root, np.memmap) or getattr(root, "filename", None) is None:
            return None
        inner = np.empty((1,) + array.shape[1:], array.dtype)  # C-ordered strides of a row
        if array.strides[1:] != inner.strides[1:] or array.strides[0] < 0:
            return None
        return cls(array, root)

    def rows(self, data, count):
        """``count`` rows from the bytes ``data``."""
        return np.frombuffer(data, self.dtype).reshape((count,) + self.row_shape)

    def read_run(self, first, count):
        """Rows ``first .. first + count - 1`` of a file whose rows follow one another
        (``stride == row_bytes``): one read, here."""
        out = np.empty(count * self.row_bytes, np.uint8)  # filled by the read
        view, done, at = memoryview(out), 0, self.start + first * self.stride
        while done < out.size:
            if hasattr(os, "preadv"):
                got = os.preadv(self.fd, [view[done:]], at + done)
            else:
                part = os.pread(self.fd, out.size - done, at + done)
                view[done:done + len(part)], got = part, len(part)
            if got <= 0:
                raise OSError(f"HostRows: {self.path} ended at byte {at + done}.")
            done += got
        return self.rows(out, count)

    def reader(self):
        """This file's reader process, started on first use."""
        if self._reader is None:
            self._reader = _Reader(self)
        return self._reader


def _stop(process):
    process.stdin.close()  # the reader ends at the end of its input
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()


class _Reader:
    """A process that reads scattered rows of one file (:mod:`numpyro_sgrld.data.row_reader`), and
    the requests sent to it whose answers are still to be read, in order."""

    def __init__(self, file):
        script = os.path.join(os.path.dirname(__file__), "row_reader.py")
        self.process = subprocess.Popen(
            [sys.executable, script, file.path, str(file.start), str(file.stride),
             str(file.row_bytes), str(READERS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        for pipe in (self.process.stdin, self.process.stdout):  # room for a step's answers
            with suppress(ImportError, AttributeError, OSError):  # Linux's pipes only
                import fcntl

                fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, PIPE_ROOM)
        self.file, self.in_flight, self.queued = file, deque(), 0
        weakref.finalize(self, _stop, self.process)

    def request(self, key, flat):
        message = np.concatenate([[flat.size], flat]).astype("<i8").tobytes()
        self.process.stdin.write(message)
        self.in_flight.append((key, flat.size, len(message)))
        self.queued += len(message)

    def answer(self):
        """The oldest request's ``(key, rows)``."""
        key, count, sent = self.in_flight.popleft()
        self.queued -= sent
        size, data = count * self.file.row_bytes, bytearray()
        while len(data) < size:
            part = self.process.stdout.read(size - len(data))
            if not part:
                raise OSError(f"HostRows: the reader of {self.file.path} stopped: "
                              f"{self.process.stderr.read().decode(errors='replace')}")
            data += part
        return key, self.file.rows(data, count)


class _Source:
    """The host array, compared by identity (it is the static part of :class:`HostRows`)."""

    def __init__(self, array):
        self.array = array
        advise(array, "MADV_RANDOM")  # rows are read scattered: no read-ahead
        large = _mapped(array) and array.nbytes > MAPPED_BUDGET
        self.file = _RowFile.of(array) if large else None
        self.lock = threading.Lock()
        self.kept = OrderedDict()  # indices' bytes -> rows (None while their read runs)

    def _ask(self, reader, flat):
        key = flat.tobytes()
        if key not in self.kept:
            if reader.queued + 8 * (flat.size + 1) > PIPE_ROOM // 2:
                self._take(reader, None)  # the reader reads its input only between answers
            reader.request(key, flat)
            self.kept[key] = None
        return key

    def _take(self, reader, key):
        """Read answers until ``key``'s (``None``: all of them)."""
        while reader.in_flight and (key is None or self.kept.get(key) is None):
            got, rows = reader.answer()
            if got in self.kept:
                self.kept[got] = rows

    def _scattered(self, flat):
        with self.lock:
            reader = self.file.reader()
            key = self._ask(reader, flat)
            self._take(reader, key)
            rows = self.kept[key]
            self.kept.move_to_end(key)
            while len(self.kept) > KEPT_READS:
                self.kept.popitem(last=False)
            return rows

    def _flat(self, idx):
        flat = np.asarray(idx).reshape(-1).astype(np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= len(self.array)):
            raise IndexError(
                f"HostRows: row indices from {flat.min()} to {flat.max()} for "
                f"{len(self.array)} rows; index a plate's rows 0 .. N-1.")
        return flat

    def read_ahead(self, idx):
        """Start reading the rows ``idx`` (the next step's), where they are read scattered by
        the reader process; nothing otherwise."""
        if self.file is None or idx is None:
            return
        flat = self._flat(idx)
        if runs(flat, self.file) is None:
            with self.lock:
                self._ask(self.file.reader(), flat)

    def gather(self, idx):
        """The rows ``idx``."""
        idx = np.asarray(idx)
        shape = idx.shape + self.array.shape[1:]
        if self.file is not None:
            flat = self._flat(idx)
            found = runs(flat, self.file)
            if found is None:
                return self._scattered(flat).reshape(shape)
            parts = [self.file.read_run(int(first), int(count)) for first, count in zip(*found)]
            return (parts[0] if len(parts) == 1 else np.concatenate(parts)).reshape(shape)
        if not _mapped(self.array) or self.array.nbytes <= MAPPED_BUDGET:
            return np.asarray(self.array[idx])  # the whole mapping fits the budget
        flat = idx.reshape(-1)
        rows = np.empty((flat.size,) + self.array.shape[1:], self.array.dtype)
        for start in range(0, flat.size, GATHER_BLOCK):  # rows not contiguous in the file
            rows[start:start + GATHER_BLOCK] = self.array[flat[start:start + GATHER_BLOCK]]
            release(self.array)
        return rows.reshape(shape)


def runs(flat, file):
    """``(firsts, counts)`` of the runs of consecutive rows that make up the indices ``flat``,
    where they are at most :data:`RUN_READS` and ``file``'s rows follow one another: each run
    is then one read in the process itself; else ``None`` (rows read one by one)."""
    if not flat.size or file.stride != file.row_bytes:
        return None
    breaks = np.flatnonzero(np.diff(flat) != 1) + 1
    if breaks.size >= RUN_READS:
        return None
    bounds = np.concatenate([[0], breaks, [flat.size]])
    return flat[bounds[:-1]], np.diff(bounds)


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
        stack = getattr(_AHEAD, "stack", None)
        if stack and idx is stack[-1][0] and id(self.source) in stack[-1][1]:
            return stack[-1][1][id(self.source)]  # the step's minibatch, read at its start
        idx = jnp.asarray(idx)  # a chunk, or a check's own minibatch: a call of its own
        out = jax.ShapeDtypeStruct(idx.shape + self.shape[1:], self.dtype)
        return host_call(lambda i: (self.source.gather(i),), (out,), idx)[0]

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
