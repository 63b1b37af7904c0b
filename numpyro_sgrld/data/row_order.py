r"""Rows written in random order, for minibatches of consecutive rows
(``batching="contiguous"``, :class:`~numpyro_sgrld.data.subsample.Contiguous`).

A run of :math:`n` consecutive rows of a file whose rows are in uniformly random order is, over
the order, a uniform minibatch drawn without replacement; on a file sorted by time, label or
group it is a slice of one part of the data, whose gradient noise is larger. :func:`shuffled_rows`
writes a copy of row-aligned arrays (a design matrix and its labels) in one uniformly random
order with a bounded amount of rows in memory, by the two-pass external shuffle: each row goes
to one of :math:`B` buckets drawn uniformly and independently (a pass over the data, chunk by
chunk, appending to the buckets' files), then each bucket is read, permuted uniformly in memory,
and appended to the output. The result is a uniformly random permutation: the bucket sizes are
multinomial and, given them, each bucket holds a uniformly random subset in a uniformly random
order, which is the law of consecutive blocks of a uniform permutation (Sanders, "Random
permutations on distributed, external and hierarchical memory", IPL 67, 1998).
"""

import os
import tempfile

import numpy as np

from numpyro_sgrld.data.host_data import release

__all__ = ["shuffled_rows"]


def _rows(arrays):
    if not isinstance(arrays, dict) or not arrays:
        raise TypeError("shuffled_rows takes a dict of arrays by name, e.g. "
                        f"{{'X': X, 'y': y}}; got {type(arrays).__name__}.")
    sizes = {name: np.shape(a)[0] if np.ndim(a) else None for name, a in arrays.items()}
    if len(set(sizes.values())) != 1 or None in sizes.values():
        raise ValueError(f"shuffled_rows: the arrays must have the same number of rows (their "
                         f"first axis); got {sizes}.")
    return next(iter(sizes.values()))


def _row_bytes(array):
    return np.dtype(array.dtype).itemsize * int(np.prod(np.shape(array)[1:], dtype=np.int64))


def shuffled_rows(arrays, folder, seed=0, memory=1 << 28):
    """Write the rows of ``arrays`` (a dict of arrays by name with the same number of rows,
    typically memory-mapped ``.npy`` files) to ``folder/<name>.npy`` in one uniformly random
    order, shared by all of them, holding at most about ``memory`` bytes of rows at a time
    (module docstring). Returns the written arrays, memory-mapped read-only
    (``numpy.load(path, mmap_mode="r")``), ready for
    :class:`~numpyro_sgrld.data.sharding.HostRows`. The order is drawn from ``numpy``'s generator
    seeded with ``seed``."""
    size = _rows(arrays)
    row_bytes = sum(_row_bytes(a) for a in arrays.values())
    if int(memory) < 2 * max(row_bytes, 1):
        raise ValueError(f"shuffled_rows: memory={memory} bytes is less than two rows "
                         f"({row_bytes} bytes each); give more.")
    os.makedirs(folder, exist_ok=True)
    paths = {name: os.path.join(folder, f"{name}.npy") for name in arrays}
    for name, array in arrays.items():
        source = getattr(array, "filename", None)
        if source is not None and os.path.exists(paths[name]) and os.path.samefile(
                source, paths[name]):
            raise ValueError(f"shuffled_rows would overwrite {paths[name]}, the file of "
                             f"arrays[{name!r}] being read; write to another folder.")
    chunk = max(1, int(memory) // 2 // max(row_bytes, 1))  # rows per chunk, and per bucket
    buckets = max(1, -(-size // chunk))
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        files = {(name, b): open(os.path.join(scratch, f"{name}.{b}"), "wb")
                 for name in arrays for b in range(buckets)}
        counts = np.zeros(buckets, np.int64)
        for start in range(0, size, chunk):
            end = min(size, start + chunk)
            bucket = rng.integers(0, buckets, end - start)
            order = np.argsort(bucket, kind="stable")
            here = np.bincount(bucket, minlength=buckets)
            bounds = np.concatenate([[0], np.cumsum(here)])
            for name, array in arrays.items():
                rows = np.ascontiguousarray(np.asarray(array[start:end])[order])
                for b in range(buckets):
                    files[name, b].write(rows[bounds[b]:bounds[b + 1]].tobytes())
                release(array)
            counts += here
        for f in files.values():
            f.close()
        out = {name: np.lib.format.open_memmap(paths[name], "w+", array.dtype,
                                               (size,) + np.shape(array)[1:])
               for name, array in arrays.items()}
        at = 0
        for b in range(buckets):
            permutation = rng.permutation(counts[b])
            for name, array in arrays.items():
                path = os.path.join(scratch, f"{name}.{b}")
                rows = np.fromfile(path, array.dtype).reshape((counts[b],) + np.shape(array)[1:])
                out[name][at:at + counts[b]] = rows[permutation]
                out[name].flush()
                release(out[name])
                os.remove(path)
            at += counts[b]
        del out
    return {name: np.load(path, mmap_mode="r") for name, path in paths.items()}
