"""Minibatches of consecutive rows (``batching="contiguous"``): a run from a uniform first row,
wrapping around; SGLD on them against the exact law of the discretised chain, on rows in
random and in sorted order; rows on disk read in one read per step and one host call; and
``shuffled_rows``, a uniformly random order written with bounded memory."""

import itertools
import warnings
from math import factorial

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC

from numpyro_sgrld import SGLD
from numpyro_sgrld.data import host_data
from numpyro_sgrld.data.sharding import HostRows, shuffled_rows
from numpyro_sgrld.data.subsample import (
    Contiguous,
    SubsamplePlate,
    check_batching,
    draw_indices,
)


def test_a_contiguous_minibatch_is_a_run_from_a_uniform_first_row():
    size, n, draws = 50, 7, 20_000
    plate = SubsamplePlate("data", size, n)
    keys = random.split(random.PRNGKey(0), draws)
    idx = np.asarray(jax.vmap(lambda k: draw_indices(k, [plate], (Contiguous(),))[0]["data"])(
        keys))
    first = idx[:, 0]
    np.testing.assert_array_equal(idx, (first[:, None] + np.arange(n)) % size)
    counts = np.bincount(first, minlength=size)
    # chi-square against uniform: 49 degrees of freedom, P(> 85.35) = 0.001
    assert np.sum((counts - draws / size) ** 2 / (draws / size)) < 85.35
    with pytest.raises(ValueError, match="'contiguous'"):
        check_batching("runs")


N, n, STEP, PRIOR_SD = 4000, 400, 4e-5, 10.0


def mean_model(y):
    theta = numpyro.sample("theta", dist.Normal(0.0, PRIOR_SD))
    with numpyro.plate("data", y.shape[0], subsample_size=n) as idx:
        numpyro.sample("obs", dist.Normal(theta, 1.0), obs=y[idx])


def _exact_law(y):
    """Mean, variance and lag-one autocorrelation of the stationary law of SGLD at ``STEP`` on
    the Gaussian mean model with contiguous minibatches: θ' = (1 - hA)θ + hG + sqrt(2h)ξ with
    A = 1/σ0² + N and G = (N/n) S_s, S_s the sum of the run of n rows from the uniform first
    row s (wrapping around): E G = Σ y (each row is in n of the N runs) and Var G the variance
    of (N/n) S_s over the N runs."""
    y = y.astype(np.float64)
    a = 1 / PRIOR_SD**2 + N
    wrapped = np.concatenate([[0.0], np.cumsum(np.concatenate([y, y[:n]]))])
    runs = wrapped[n:n + N] - wrapped[:N]  # S_s for s = 0 .. N-1
    var_g = (N / n) ** 2 * runs.var()
    rho = 1 - STEP * a
    return y.sum() / a, (2 * STEP + STEP**2 * var_g) / (1 - rho**2), rho


@pytest.mark.parametrize("order", ["random", "sorted"])
def test_sgld_on_contiguous_minibatches_samples_the_discretised_law(order):
    """Skewed data (exponential): on rows in random order the runs' noise is a uniform
    minibatch's; on sorted rows its variance is 378 times larger, and the chain's variance 213
    times. The law's mean needs the runs to wrap around: from a first row uniform on
    0 .. N - n instead, the first and last rows would be under-weighted and the mean off by
    7.1 of its standard errors on the sorted rows, 4.5 on these rows in random order."""
    y = np.random.default_rng(0).exponential(1.5, N).astype(np.float32)
    y = np.sort(y) if order == "sorted" else y
    mcmc = MCMC(SGLD(mean_model, STEP, batching="contiguous"), num_warmup=100,
                num_samples=3_000, progress_bar=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The draws cannot be trusted")
        mcmc.run(random.PRNGKey(0), y)
    theta = np.asarray(mcmc.get_samples()["theta"], np.float64)
    mean, var, rho = _exact_law(y)
    m = theta.size
    # AR(1) draws: the sample mean's and the sample variance's standard errors
    se_mean = np.sqrt(var / m * (1 + rho) / (1 - rho))
    se_var = var * np.sqrt(2 / m * (1 + rho**2) / (1 - rho**2))
    assert abs(theta.mean() - mean) < 4 * se_mean, (theta.mean(), mean, se_mean)
    assert abs(theta.var() - var) < 4 * se_var, (theta.var(), var, se_var)


D, ROWS, BATCH = 3, 3000, 100


def logistic(X, y):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([D]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("obs", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def test_rows_on_disk_are_one_read_a_step_and_the_control_variates_centre_no_call(
        tmp_path, monkeypatch):
    """A file read, not mapped, with contiguous minibatches: no reader process is started
    (each step's run is read in the process, one read, or two where it wraps around), each
    step is one host call for both arrays (the minibatch potential at the state and at the
    control variates' centre read it once: every other call, the full-data passes of the
    set-up, comes before the first step's), and the draws are those of the rows in memory,
    bit for bit."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(ROWS, D)).astype(np.float32)
    y = (rng.random(ROWS) < 1 / (1 + np.exp(-X @ rng.normal(size=D)))).astype(np.float32)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    monkeypatch.setattr(host_data, "MAPPED_BUDGET", 0)
    calls = {"step": 0, "other": 0, "other before the steps": None}
    gather, gather_all = host_data._Source.gather, host_data._gather_all

    def counted_gather(self, idx):
        calls["other"] += 1
        return gather(self, idx)

    def counted_gather_all(sources, idx, ahead):
        if calls["step"] == 0:
            calls["other before the steps"] = calls["other"]
        calls["step"] += 1
        calls["other"] -= len(sources)  # its own gathers
        return gather_all(sources, idx, ahead)

    monkeypatch.setattr(host_data._Source, "gather", counted_gather)
    monkeypatch.setattr(host_data, "_gather_all", counted_gather_all)

    def run(args):
        kernel = SGLD(logistic, 1e-3, batching="contiguous", control_variate="mode")
        mcmc = MCMC(kernel, num_warmup=0, num_samples=60, progress_bar=False)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The draws cannot be trusted")
            mcmc.run(random.PRNGKey(0), *args)
        return np.asarray(mcmc.get_samples()["w"])

    files = [HostRows(np.load(tmp_path / f"{k}.npy", mmap_mode="r")) for k in "Xy"]
    on_disk = run(files)
    assert all(f.source.file is not None and f.source.file._reader is None for f in files)
    assert calls["step"] == 60 and calls["other"] == calls["other before the steps"] > 0
    np.testing.assert_array_equal(on_disk, run((X, y)))


def test_shuffled_rows_is_a_uniform_permutation_written_bucket_by_bucket(tmp_path):
    """Four rows in two buckets (the memory of two rows): the 24 orders equally often over
    seeds, the arrays' rows kept together, and the input's own file refused as the output."""
    X = np.arange(8, dtype=np.float32).reshape(4, 2)
    y = np.arange(4, dtype=np.int64)
    seeds, seen = 1_200, {}
    for seed in range(seeds):
        out = shuffled_rows({"X": X, "y": y}, tmp_path / "out", seed=seed,
                            memory=2 * (X.itemsize * 2 + y.itemsize))
        order = tuple(int(i) for i in out["y"])
        np.testing.assert_array_equal(out["X"], X[list(order)])
        seen[order] = seen.get(order, 0) + 1
        del out
    assert set(seen) == set(itertools.permutations(range(4)))
    expected = seeds / factorial(4)
    # chi-square against uniform: 23 degrees of freedom, P(> 49.73) = 0.001
    assert sum((c - expected) ** 2 / expected for c in seen.values()) < 49.73
    np.save(tmp_path / "X.npy", X)
    with pytest.raises(ValueError, match="would overwrite"):
        shuffled_rows({"X": np.load(tmp_path / "X.npy", mmap_mode="r")}, tmp_path)
    with pytest.raises(ValueError, match="same number of rows"):
        shuffled_rows({"X": X, "y": y[:3]}, tmp_path / "bad")


@pytest.mark.slow
def test_defaults_on_rows_sorted_by_a_covariate_agree_with_nuts_or_warn():
    """SGLD at its defaults with contiguous minibatches on a logistic regression whose rows are
    sorted by a covariate (a run is a slice of one range of it: noisier minibatches): the
    adapted step is smaller than on the same rows in random order, and the means agree with a
    long NUTS run on the full data within four of their combined standard errors (the draws'
    ESS-based ones and NUTS's), unless the run says it cannot be trusted."""
    from numpyro.diagnostics import effective_sample_size
    from numpyro.infer import NUTS

    from numpyro_sgrld import full_batch

    rows, d, batch = 20_000, 5, 100
    rng = np.random.default_rng(0)
    X = rng.normal(size=(rows, d)).astype(np.float32)
    y = (rng.random(rows) < 1 / (1 + np.exp(-X @ rng.normal(size=d)))).astype(np.float32)

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([d]).to_event(1))
        with numpyro.plate("data", X.shape[0], subsample_size=batch) as idx:
            numpyro.sample("obs", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])

    nuts = MCMC(NUTS(full_batch(model)), num_warmup=500, num_samples=2_000,
                progress_bar=False)
    nuts.run(random.PRNGKey(1), X, y)
    exact = np.asarray(nuts.get_samples()["w"], np.float64)

    def sgld(order):
        mcmc = MCMC(SGLD(model, batching="contiguous"), num_warmup=1_000, num_samples=5_000,
                    progress_bar=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc.run(random.PRNGKey(0), X[order], y[order])
        warned = any("cannot be trusted" in str(w.message) for w in caught)
        return (np.asarray(mcmc.get_samples()["w"], np.float64),
                float(mcmc.last_state.step_size), warned)

    _, step_random, _ = sgld(np.arange(rows))
    draws, step_sorted, warned = sgld(np.argsort(X[:, 0]))
    assert step_sorted < step_random
    if not warned:
        se = np.sqrt(draws.var(0) / effective_sample_size(draws[None])
                     + exact.var(0) / effective_sample_size(exact[None]))
        z = (draws.mean(0) - exact.mean(0)) / se
        assert np.all(np.abs(z) < 4), z


def test_a_set_up_draws_numpyros_subsample_indices_with_one_compilation():
    """Within a kernel's set-up (``compiled_subsampling``) a subsample plate gets the very
    indices NumPyro's own rule draws from the same key, from one compilation per plate size
    (NumPyro's eager rule compiles a new loop on every trace), and an error leaves no handler
    behind."""
    from numpyro import handlers
    from numpyro.primitives import _PYRO_STACK

    from numpyro_sgrld.data import subsample

    def model():
        with numpyro.plate("rows", 1000, subsample_size=100):
            pass

    def indices(keys):
        return [handlers.trace(handlers.seed(model, k)).get_trace()["rows"]["value"]
                for k in keys]

    keys = random.split(random.PRNGKey(0), 3)
    numpyros = indices(keys)
    subsample._compiled_subsample_fn.clear_cache()  # other tests' plate sizes
    ours = subsample.compiled_subsampling(indices)(keys)
    assert all(np.array_equal(a, b) for a, b in zip(numpyros, ours))
    assert len({tuple(np.asarray(i)) for i in ours}) == 3
    assert subsample._compiled_subsample_fn._cache_size() == 1

    def fails():
        indices(keys[:1])
        raise ValueError("in the set-up")

    with pytest.raises(ValueError, match="in the set-up"):
        subsample.compiled_subsampling(fails)()
    assert not _PYRO_STACK
