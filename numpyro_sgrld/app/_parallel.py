"""Independent runs in worker processes, with a line of progress while they run.

``sgrld``'s runs on its first problem (the reference and each kernel) are independent and
each one mostly compiles: XLA compiles one program largely on one core, so on a machine with
two cores two runs side by side take little more wall time than one. :func:`run_all` runs
them ``workers`` at a time, in processes started with ``spawn`` (a fresh interpreter: no
JAX state is forked), and with ``workers=1`` one after another in this process.
"""

import contextlib
import queue as queues
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

__all__ = ["run_all", "ticking"]


@contextlib.contextmanager
def ticking(log, label, every=10.0):
    """A line ``label: still running (t s)`` every ``every`` seconds while the block runs
    (compilation gives no other sign of life)."""
    done = threading.Event()
    start = time.perf_counter()

    def tick():
        while not done.wait(every):
            log(f"    {label}: still running ({time.perf_counter() - start:.0f} s)")

    thread = threading.Thread(target=tick, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


_started = None  # in a worker: the queue on which it says which task it starts


def _init_worker(queue):
    global _started
    _started = queue


def _call(fast_loop, label, fn, args):
    """``fn(*args)`` in a worker, with the fast sampling loop on when the parent had it."""
    _started.put(label)
    if fast_loop:
        from numpyro_sgrld import enable_fast_sampling_loop

        enable_fast_sampling_loop()
    return fn(*args)


def run_all(tasks, workers=1, log=print, every=10.0, on_start=None):
    """Run ``tasks`` (``{label: (fn, args)}``, ``fn`` a module-level function) and yield
    ``(label, result)`` as each finishes. ``workers > 1`` runs that many at once in worker
    processes; ``on_start(label)`` is called when a task starts, and a line naming the
    running tasks goes to ``log`` every ``every`` seconds. An exception in a task is raised
    here."""
    if workers < 1:
        raise ValueError(f"`workers` must be a positive integer, got {workers!r}.")
    if workers == 1:
        for label, (fn, args) in tasks.items():
            if on_start is not None:
                on_start(label)
            with ticking(log, label, every):
                result = fn(*args)
            yield label, result
        return
    import multiprocessing

    from numpyro_sgrld.sampler.compat import fast_sampling_loop_enabled

    fast_loop = fast_sampling_loop_enabled()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    with ProcessPoolExecutor(max_workers=workers, mp_context=context,
                             initializer=_init_worker, initargs=(queue,)) as pool:
        futures = {pool.submit(_call, fast_loop, label, fn, args): label
                   for label, (fn, args) in tasks.items()}
        started, pending, last = {}, set(futures), time.perf_counter()
        while pending:
            done, pending = wait(pending, timeout=1.0, return_when=FIRST_COMPLETED)
            now = time.perf_counter()
            while True:
                try:
                    label = queue.get_nowait()
                except queues.Empty:
                    break
                started[label] = now
                if on_start is not None:
                    on_start(label)
            for future in done:
                yield futures[future], future.result()
            running = [futures[f] for f in pending if futures[f] in started]
            if running and now - last >= every:
                log("    still running: " + ", ".join(
                    f"{label} ({now - started[label]:.0f} s)" for label in running))
                last = now
