r"""Time to a stated accuracy on a large data set: the SG kernels on minibatches against NUTS,
MALA and HMCECS, the exact and the subsampling methods NumPyro users know
(``sgrld``'s second problem).

**The problem.** Bayesian logistic regression
(:func:`numpyro_sgrld.models.logistic_regression.model`, :math:`w \sim \mathcal N(0, I)`) on
synthetic data: :math:`x_i \sim \mathcal N(0, I_d)`, a true :math:`w^\star \sim
\mathcal N(0, I/d)`, :math:`y_i \sim \mathrm{Bernoulli}(\sigma(x_i^\top w^\star))`
(:func:`logistic_data`, a million rows by default).

**The accuracy.** A method has reached the target when, over all its draws so far, every
coordinate's mean is within ``MEAN_TOL`` = 0.1 reference sd of the reference mean and every
sd ratio is in ``SD_BAND`` = [0.9, 1.1] (:func:`accuracy`).

**The reference** (:func:`laplace_reference`): importance sampling from the Laplace
approximation. Newton's method finds the mode :math:`\hat w` and the Hessian :math:`H` of the
full-data potential; :math:`S` draws :math:`w_s \sim \mathcal N(\hat w, H^{-1})` are weighted
by :math:`p(w_s\mid y)/q(w_s)`. Self-normalised importance sampling is consistent for any
proposal whose tails cover the target's; its reliability is read off the Pareto shape
:math:`\hat k` of the largest weights (Vehtari, Simpson, Gelman, Yao & Gabry 2024, "Pareto
smoothed importance sampling": reliable for :math:`\hat k < 0.7`) and its precision off the
weights' effective sample size. The moments' standard errors are the delta-method ones of the
ratio estimator. The result is cached on disk (:func:`numpyro_sgrld.core.cache.cache_dir`).

**The measurement** (:func:`race`). Each method runs in chunks on one ``MCMC`` object (the
first chunk includes warm-up), continuing from its last state; after each chunk the accuracy of
all its draws so far is checked, off the clock. The time to the target is the wall time of the
chunks up to the first one after which the target holds: tracing, compilation, the
initialisation (for HMCECS its MAP search and Taylor proxy), warm-up and sampling all count.
A method that has not reached the target when its time cap runs out is reported with the time
it ran and ``reached = False``.
"""

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_sgrld.app import _race_cache
from numpyro_sgrld.app._laplace import (
    Reference,
    laplace_reference,
    pareto_khat,
    reference_path,
)
from numpyro_sgrld.app._parallel import ticking

__all__ = ["LargeRace", "Setting", "MEAN_TOL", "SD_BAND", "Reference", "RaceResult",
           "logistic_data", "laplace_reference", "pareto_khat", "accuracy", "race", "write_csv"]

#: The stated accuracy: every mean within this many reference sds of the reference mean ...
MEAN_TOL = 0.1
#: ... and every sd ratio (draws' sd over the reference's) inside this band.
SD_BAND = (0.9, 1.1)


class RaceResult(NamedTuple):
    """One method's race: the time to the target (the time it ran, if not reached)."""

    method: str
    seconds_to_target: float
    reached: bool
    seconds_run: float
    draws: int
    max_mean_error: float  # over all draws at the end, in reference sds
    worst_sd_ratio: float  # the sd ratio farthest from 1 at the end
    note: str = ""


def logistic_data(num_data=1_000_000, num_features=20, seed=0):
    r"""Synthetic logistic-regression data ``(X, y)``: ``X`` (N, d) float32 with standard
    normal entries, ``y`` (N,) int32 Bernoulli with logits :math:`X w^\star`, :math:`w^\star
    \sim \mathcal N(0, I/d)` (NumPy's ``default_rng(seed)``)."""
    if not (isinstance(num_data, int) and num_data >= 2):
        raise ValueError(f"`num_data` must be an integer >= 2, got {num_data!r}.")
    if not (isinstance(num_features, int) and num_features >= 1):
        raise ValueError(f"`num_features` must be a positive integer, got {num_features!r}.")
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_data, num_features), dtype=np.float32)
    w = rng.standard_normal(num_features) / np.sqrt(num_features)
    logits = X @ w.astype(np.float32)
    y = (rng.random(num_data) < 1.0 / (1.0 + np.exp(-logits))).astype(np.int32)
    return jnp.asarray(X), jnp.asarray(y)


def accuracy(draws, reference):
    """``(max |mean error| / sd, worst sd ratio, reached)`` of draws ``(n, d)`` against the
    reference: the worst standardised mean error, the sd ratio farthest from 1, and whether
    both are within the stated accuracy."""
    x = np.asarray(draws, np.float64)
    if x.shape[0] < 2:
        return float("inf"), float("nan"), False
    err = np.abs(x.mean(0) - reference.mean) / reference.sd
    ratio = x.std(0, ddof=1) / reference.sd
    worst = ratio[np.argmax(np.abs(ratio - 1))]
    ok = bool(np.all(np.isfinite(err)) and err.max() <= MEAN_TOL
              and SD_BAND[0] <= ratio.min() and ratio.max() <= SD_BAND[1])
    return float(err.max()), float(worst), ok


class Runner(NamedTuple):
    """How to run a method in chunks: ``first(key)`` runs warm-up and the first chunk,
    ``more()`` one more chunk; each returns its new draws ``(n, d)`` (host arrays, ready)."""

    first: Callable[[Any], np.ndarray]
    more: Callable[[], np.ndarray]


def race(name, runner, reference, cap, key, log=print, log_every=10.0, note=""):
    """Run ``runner`` chunk by chunk until the draws meet the stated accuracy or ``cap``
    seconds of running are spent; returns a :class:`RaceResult`. A line goes to ``log`` at
    least every ``log_every`` seconds of running (a chunk longer than that logs once)."""
    draws, clock, last_log = [], 0.0, 0.0
    err, worst, ok = float("inf"), float("nan"), False
    while True:
        start = time.perf_counter()
        new = runner.first(key) if not draws else runner.more()
        clock += time.perf_counter() - start
        draws.append(np.asarray(new, np.float64).reshape(len(new), -1))
        allx = np.concatenate(draws)
        err, worst, ok = accuracy(allx, reference)
        if ok or clock >= cap or clock - last_log >= log_every:
            status = "target reached" if ok else ("time cap" if clock >= cap else "running")
            log(f"  {name}: {clock:6.1f} s, {len(allx):>7,} draws, max |mean error| "
                f"{err:.3f} sd, worst sd ratio {worst:.3f} ({status})")
            last_log = clock
        if ok or clock >= cap:
            break
    return RaceResult(name, clock, ok, clock, len(allx), err, worst, note)


def mcmc_runner(kernel, model_args, num_warmup, chunk, thinning=1, num_chains=1, site="w"):
    """A :class:`Runner` over one ``MCMC`` object: warm-up and ``chunk`` steps (every
    ``thinning``-th kept), then ``chunk`` more per call, continuing from the last state.
    The data are passed to the compiled programs as arguments (``jit_model_args=True``), as
    for every method raced here: as constants of the program they would be copied into it at
    compile time, which costs seconds at a million rows."""
    from numpyro.infer import MCMC

    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=chunk, thinning=thinning,
                num_chains=num_chains, chain_method="vectorized", progress_bar=False,
                jit_model_args=True)

    def draws():
        return np.asarray(jax.block_until_ready(mcmc.get_samples()[site]))

    def first(key):
        mcmc.run(key, *model_args)
        return draws()

    def more():
        mcmc.post_warmup_state = mcmc.last_state
        mcmc.run(mcmc.post_warmup_state.rng_key, *model_args)
        return draws()

    return Runner(first, more)


def hmcecs_runner(model, model_args, num_warmup=500, chunk=100, num_blocks=100,
                  map_steps=5000, seed=0, num_chains=1):
    """NumPyro's HMCECS (Dang et al. 2019) as its example uses it: NUTS within Gibbs over the
    subsample indices (``num_blocks`` blocks), the log-likelihood estimated with the
    second-order Taylor proxy around the MAP, which SVI with an ``AutoDelta`` guide finds
    first (:func:`numpyro_sgrld.analysis.baselines.find_map`, ``map_steps`` minibatch steps): that
    search is part of its time."""
    from numpyro.infer import HMCECS, NUTS

    from numpyro_sgrld.analysis.baselines import find_map

    inner = {}

    def first(key):
        mode = find_map(model, model_args, num_steps=map_steps, seed=seed)
        kernel = HMCECS(NUTS(model), num_blocks=num_blocks,
                        proxy=HMCECS.taylor_proxy({k: jnp.asarray(v) for k, v in mode.items()}))
        inner["runner"] = mcmc_runner(kernel, model_args, num_warmup, chunk,
                                      num_chains=num_chains)
        return inner["runner"].first(key)

    return Runner(first, lambda: inner["runner"].more())


#: The SG kernels raced by default (the constant-preconditioner ones, exact up to the step's
#: bias); any of ``kernels.KERNELS`` may be given.
SG_DEFAULT = ("SGLD", "SGHMC")
#: The exact and subsampling baselines.
BASELINE_METHODS = ("NUTS", "HMCECS", "MALA")


class Setting(NamedTuple):
    """The large problem and the methods' settings (all picklable: they cross processes)."""

    num_data: int = 1_000_000
    num_features: int = 20
    seed: int = 0
    batch: int = 100  # the SG kernels' minibatch
    sg_warmup: int = 2000
    sg_chunk: int = 5000  # steps per chunk (every 10th kept)
    chains: int = 1  # every method's chains (NumPyro's default for MCMC: one)
    exact_warmup: int = 500  # NUTS's, MALA's and HMCECS's warm-up
    hmcecs_subsample: int = 1000


def _runner(method, setting, X, y):
    from functools import partial

    from numpyro.infer import NUTS

    from numpyro_sgrld.analysis.baselines import mala_kernel
    from numpyro_sgrld.data.subsample import full_batch
    from numpyro_sgrld.models import logistic_regression as lr
    from numpyro_sgrld.presets.table import KERNELS

    args = (X, y)
    exact = {  # the references, each with its own runner
        "NUTS": lambda: mcmc_runner(NUTS(full_batch(lr.model)), args, setting.exact_warmup, 50,
                                    num_chains=setting.chains),
        "MALA": lambda: mcmc_runner(mala_kernel(lr.model), args, setting.exact_warmup, 500,
                                    num_chains=setting.chains),
        "HMCECS": lambda: hmcecs_runner(
            partial(lr.model, subsample_size=setting.hmcecs_subsample), args,
            num_warmup=setting.exact_warmup, seed=setting.seed, num_chains=setting.chains),
    }
    if method in exact:
        return exact[method]()
    kernel = KERNELS[method](partial(lr.model, subsample_size=setting.batch))
    return mcmc_runner(kernel, args, setting.sg_warmup, setting.sg_chunk, thinning=10,
                       num_chains=setting.chains)


def _child(method, setting, queue, ready, go):
    """A method's run in a process of its own: the imports, the data and the runner first,
    then ``ready`` is set; when ``go`` is set, ``("start",)`` and chunk after chunk until it is
    stopped, ``("chunk", seconds so far, draws)`` after each (the clock runs only inside the
    runner's calls); or ``("error", message)``."""
    import warnings

    warnings.simplefilter("ignore")  # the verdict's warnings: the parent judges the draws
    try:
        from numpyro_sgrld import enable_fast_sampling_loop

        enable_fast_sampling_loop()
        X, y = logistic_data(setting.num_data, setting.num_features, setting.seed)
        runner = _runner(method, setting, X, y)
        key = jax.random.PRNGKey(setting.seed + 1)
        ready.set()
        go.wait()
        queue.put(("start",))
        clock = 0.0
        call = lambda: runner.first(key)  # noqa: E731
        while True:
            start = time.perf_counter()
            draws = call()
            clock += time.perf_counter() - start
            queue.put(("chunk", clock, np.asarray(draws, np.float32)))
            call = runner.more
    except Exception as e:  # noqa: BLE001 — reported to the parent, which goes on
        queue.put(("error", f"{type(e).__name__}: {e}"))


class Contender(NamedTuple):
    """A method's process (:func:`_child`), started ahead of its turn: it imports and builds
    its data while it waits, so that its race starts at once when ``go`` is set."""

    method: str
    process: Any
    queue: Any
    ready: Any
    go: Any


def start_contender(method, setting):
    """Start ``method``'s process (:class:`Contender`); it waits for its turn."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q, ready, go = ctx.Queue(), ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_child, args=(method, setting, q, ready, go), daemon=True)
    proc.start()
    return Contender(method, proc, q, ready, go)


def wait_until_ready(contenders):
    """Wait until every contender has its data built (or its process has ended), so that no
    start-up runs beside a race."""
    for c in contenders:
        while not c.ready.wait(1.0) and c.process.is_alive():
            pass


def race_in_process(contender, reference, cap, log=print, log_every=10.0):
    """:func:`race` for one method run in its own process (a :class:`Contender`, from
    :func:`start_contender`), stopped when its draws meet the stated accuracy or when ``cap``
    seconds have passed since it started (a chunk cannot be interrupted inside one process;
    a process can). A line goes to ``log`` at least every ``log_every`` seconds."""
    import queue as queues

    method, proc, q = contender.method, contender.process, contender.queue
    contender.go.set()
    draws, started, clock, last = [], None, 0.0, time.perf_counter()
    err, worst, ok, note = float("inf"), float("nan"), False, ""
    try:
        while True:
            try:
                msg = q.get(timeout=1.0)
            except queues.Empty:
                msg = None
                if not proc.is_alive():
                    note = f"the process ended (exit code {proc.exitcode})"
                    break
            now = time.perf_counter()
            if msg is not None and msg[0] == "start":
                started = now
            elif msg is not None and msg[0] == "error":
                note = msg[1]
                log(f"  {method}: failed: {note}")
                break
            elif msg is not None:
                clock = msg[1]
                draws.append(np.asarray(msg[2], np.float64).reshape(len(msg[2]), -1))
                allx = np.concatenate(draws)
                err, worst, ok = accuracy(allx, reference)
            elapsed = clock if started is None else max(clock, now - started)
            if ok or (started is not None and now - started >= cap) or now - last >= log_every:
                n = sum(len(d) for d in draws)
                state = ("target reached" if ok else "time cap" if started is not None
                         and now - started >= cap else "compiling / warming up" if not n
                         else "running")
                tail = (f"{n:>7,} draws, max |mean error| {err:.3f} sd, worst sd ratio "
                        f"{worst:.3f}" if n else "no draws yet")
                log(f"  {method}: {elapsed:6.1f} s, {tail} ({state})")
                last = now
            if ok:
                break
            if started is not None and now - started >= cap:
                clock = now - started
                note = note or f"stopped at the time cap of {cap:.0f} s"
                break
    finally:
        proc.terminate()
        proc.join(5)
    n = sum(len(d) for d in draws)
    return RaceResult(method, clock, ok, clock, n, err, worst, note)


class LargeRace(NamedTuple):
    """The large problem's outcome: its setting, the reference, the results and the caps."""

    setting: Setting
    reference: Reference
    results: list
    sg_cap: float
    exact_cap: float
    mala_cap: float
    speedup: float
    #: ``{method: (RaceResult, date)}``: the exact methods' own times to the target, run
    #: uncapped once and cached (:mod:`numpyro_sgrld.app._race_cache`)
    measured: Any = None


def run_large(setting=None, out=None, kernels=SG_DEFAULT, log=print, sg_cap=90.0, speedup=5.0,
              mala_share=1.0):
    """The race on the large problem (module docstring): the SG ``kernels`` first, each for
    at most ``sg_cap`` seconds; then NUTS and HMCECS, each until it reaches the target or
    ``speedup`` times the fastest SG kernel's time has passed (what it takes to tell whether
    that kernel is ``speedup`` times faster), and MALA for at most ``mala_share`` times it
    (at 1, whether it beats the fastest SG kernel at all).
    Writes ``time_to_accuracy.csv`` (columns ``method``, ``seconds_to_target``,
    ``reached``, ...; :func:`write_csv`), its data dictionary ``time_to_accuracy.columns.csv``
    and ``time_to_accuracy.png`` into ``out``; returns a
    :class:`LargeRace`."""
    setting = Setting() if setting is None else setting
    log(f"Data: {setting.num_data:,} rows x {setting.num_features} features (synthetic)")
    # every method's process starts now and waits for its turn with its data built
    contenders = {name: start_contender(name, setting)
                  for name in (*kernels, "NUTS", "HMCECS", "MALA")}
    try:
        ref = _large_reference(setting, log)
        wait_until_ready(contenders.values())
        results = _race_all(contenders, kernels, setting, ref, sg_cap, speedup, mala_share, log)
    finally:
        for c in contenders.values():  # those not raced (after an error)
            c.process.terminate()
    results, exact_cap, mala_cap, measured = results
    race_result = LargeRace(setting, ref, results, sg_cap, exact_cap, mala_cap, speedup,
                            measured)
    if out is not None:
        write_csv(results, Path(out) / "time_to_accuracy.csv")
        from numpyro_sgrld.analysis.plots import plot_time_to_accuracy

        plot_time_to_accuracy(results, path=Path(out) / "time_to_accuracy.png")
    return race_result


def _large_reference(setting, log):
    """The large problem's reference (:func:`laplace_reference`, cached), with its lines."""
    X, y = logistic_data(setting.num_data, setting.num_features, setting.seed)
    cached = reference_path(X, y, 4000, setting.seed, None).exists()
    log("Reference: importance sampling from the Laplace approximation "
        + ("(cached: read from disk)" if cached else "(computing; cached for later runs)"))
    with ticking(log, "the reference"):
        ref = laplace_reference(X, y, seed=setting.seed)
    log(f"Reference ready: {ref.num_draws} draws, Pareto k {ref.khat:.2f}, importance ESS "
        f"{ref.ess:.0f}; it took {ref.seconds:.1f} s" + (" when computed" if cached else ""))
    return ref


def _race_all(contenders, kernels, setting, ref, sg_cap, speedup, mala_share, log):
    """:func:`run_large`'s races, one after another: ``(results, exact cap, MALA cap,
    measured)``. NUTS and HMCECS run to the target once per machine (at most
    :data:`~numpyro_sgrld.app._race_cache.LIMIT`), cached; later runs race them capped."""

    results = []
    for name in kernels:
        log(f"{name} (minibatch {setting.batch}, {setting.chains} chain(s)), at most "
            f"{sg_cap:.0f} s")
        results.append(race_in_process(contenders.pop(name), ref, sg_cap, log=log))
    reached = [r.seconds_to_target for r in results if r.reached]
    fastest = min(reached) if reached else sg_cap
    exact_cap, mala_cap = speedup * fastest, mala_share * fastest
    measured = {}
    for name, cap, data in (("NUTS", exact_cap, "full data"),
                            ("HMCECS", exact_cap, f"subsample {setting.hmcecs_subsample}"),
                            ("MALA", mala_cap, "full data")):
        cached = _measured(setting, name) if name in _race_cache.MEASURED else None
        first = name in _race_cache.MEASURED and cached is None
        if first:
            cap = _race_cache.LIMIT
            log(f"{name} ({data}, {setting.chains} chain(s)): its own time to the target, "
                f"measured once on this machine and cached (at most {cap:.0f} s)")
        else:
            log(f"{name} ({data}, {setting.chains} chain(s)), until the target or {cap:.0f} s"
                + (f" (its own time, {cached[0].seconds_to_target:.0f} s, measured "
                   f"{cached[1]})" if cached else ""))
        results.append(race_in_process(contenders.pop(name), ref, cap, log=log))
        done = results[-1]
        if first and (done.reached or done.note.startswith("stopped at the time cap")):
            _race_cache.save(setting, name, results[-1])
            cached = _measured(setting, name)
        if cached is not None:
            measured[name] = cached
    return results, exact_cap, mala_cap, measured


def _measured(setting, method):
    """``(RaceResult, date)`` of ``method``'s cached run to the target, or ``None``."""
    found = _race_cache.load(setting, method)
    return None if found is None else (RaceResult(**found[0]), found[1])


#: The columns of ``time_to_accuracy.csv``: its data dictionary, ``time_to_accuracy.columns.csv``.
COLUMNS = {
    "method": "The method raced: an SG kernel on minibatches, NUTS, HMCECS or MALA.",
    "seconds_to_target": "Wall seconds until its draws first met the stated accuracy (every "
    f"mean within {MEAN_TOL} reference sd, every sd ratio in [{SD_BAND[0]}, {SD_BAND[1]}]), "
    "tracing, compilation, initialisation, warm-up and sampling included. Empty where it did "
    "not reach it (reached False; seconds_run is how long it ran).",
    "reached": "True where it reached the stated accuracy, False where it was stopped first "
    "(at its time cap, or by an error: see note).",
    "seconds_run": "How long it ran, in seconds (seconds_to_target where it reached the target).",
    "draws": "The draws it had kept when it stopped.",
    "max_mean_error": "Over all its draws at the end, the largest |mean − reference mean| / "
    "reference sd. Empty with fewer than 2 draws (nothing to measure).",
    "worst_sd_ratio": "Over all its draws at the end, the sd ratio (its sd over the "
    "reference's) farthest from 1. Empty with fewer than 2 draws.",
    "note": "Why it stopped without reaching the target (its time cap, an error), or empty.",
}


def write_csv(results, path):
    """The results as CSV (``method, seconds_to_target, reached, seconds_run, draws,
    max_mean_error, worst_sd_ratio, note``) and its data dictionary beside it
    (:data:`COLUMNS`): ``seconds_to_target`` empty where the target was not reached, the errors
    empty where there were fewer than 2 draws to measure; never ``inf`` or ``nan``."""
    import csv

    from numpyro_sgrld.app._columns import write_columns

    def cell(value, spec, known=True):
        return format(value, spec) if known and np.isfinite(value) else ""

    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(RaceResult._fields)
        for r in results:
            writer.writerow([r.method, cell(r.seconds_to_target, ".2f", r.reached), r.reached,
                             cell(r.seconds_run, ".2f"), r.draws,
                             cell(r.max_mean_error, ".4f", r.draws >= 2),
                             cell(r.worst_sd_ratio, ".4f", r.draws >= 2), r.note])
    write_columns(path, RaceResult._fields, COLUMNS)
