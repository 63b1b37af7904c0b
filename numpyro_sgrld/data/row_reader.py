r"""The reader process of :class:`~numpyro_sgrld.data.sharding.HostRows`: it reads scattered rows of
one file with ``os.pread`` and writes them to its standard output, a request at a time.

It runs as a script of its own (``python row_reader.py PATH START STRIDE ROW_BYTES THREADS``),
importing nothing but the standard library, so that its reads hold its own interpreter's lock,
not that of the process that samples: there, a thread looping over thousands of short reads a
step takes the lock back after each read, and the compiled step's host callbacks wait for it.

Protocol, little-endian: a request is ``n`` (8 bytes) and ``n`` row indices (8 bytes each); the
answer is the ``n`` rows, ``ROW_BYTES`` each, in the order asked, row ``i`` being the bytes at
``START + i * STRIDE`` of the file. End of input ends the process; an error is written to its
standard error and ends it.
"""

import os
import struct
import sys
from concurrent.futures import ThreadPoolExecutor


def read_exactly(stream, size):
    """``size`` bytes of ``stream``, or ``b""`` at its end."""
    data = bytearray()
    while len(data) < size:
        part = stream.read(size - len(data))
        if not part:
            if data:
                raise EOFError(f"the request ended after {len(data)} of {size} bytes")
            return b""
        data += part
    return bytes(data)


def read_rows(fd, rows, view, first, start, stride, size):
    """Rows ``rows`` of the file into ``view`` from row ``first`` of it on."""
    if hasattr(os, "preadv"):  # into the buffer
        for j, i in enumerate(rows, first):
            os.preadv(fd, [view[j * size:(j + 1) * size]], start + i * stride)
    else:
        for j, i in enumerate(rows, first):
            view[j * size:(j + 1) * size] = os.pread(fd, size, start + i * stride)


def serve(path, start, stride, size, threads, requests, answers):
    """Answer ``requests`` on ``answers`` until ``requests`` ends."""
    fd = os.open(path, os.O_RDONLY)
    pool = ThreadPoolExecutor(threads) if threads > 1 else None
    while True:
        head = read_exactly(requests, 8)
        if not head:
            return
        (n,) = struct.unpack("<q", head)
        rows = struct.unpack(f"<{n}q", read_exactly(requests, 8 * n))
        out = bytearray(n * size)
        view = memoryview(out)
        if pool is None or n < 2 * threads:
            read_rows(fd, rows, view, 0, start, stride, size)
        else:
            bounds = [n * k // threads for k in range(threads + 1)]
            for part in [pool.submit(read_rows, fd, rows[a:b], view, a, start, stride, size)
                         for a, b in zip(bounds[:-1], bounds[1:])]:
                part.result()
        answers.write(out)
        answers.flush()


if __name__ == "__main__":
    path, *numbers = sys.argv[1:]
    serve(path, *map(int, numbers), sys.stdin.buffer, sys.stdout.buffer)
