"""Data sharded across processes (``numpyro_sgrld.data.sharding.ShardedRows``): the stratified
minibatch, the rows the kernel's own passes read, and chains run by two processes with JAX's
multi-controller runtime on CPU collectives, each holding half the rows: against the exact law
of the discretised chain, and at SGLD's defaults on a regression whose likelihood validates its
arguments against the exact posterior."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random
from numpyro.diagnostics import effective_sample_size
from scipy.stats import norm

from numpyro_sgrld.data.sharded_data import stratified_indices
from numpyro_sgrld.data.subsample import SubsamplePlate
from numpyro_sgrld.verdict.evaluation import evaluation_indices

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sharded_worker as w  # noqa: E402


def test_each_block_of_a_stratified_minibatch_is_uniform_in_its_share():
    k, n, size = 4, 4000, 100
    idx = np.asarray(stratified_indices(random.PRNGKey(0), k, n, size)).reshape(k, n // k)
    rows = size // k
    for j, block in enumerate(idx):
        assert block.min() >= j * rows and block.max() < (j + 1) * rows
        counts = np.bincount(block - j * rows, minlength=rows)
        # chi-square against uniform: 24 degrees of freedom, P(> 51.2) = 0.001
        assert np.sum((counts - n / k / rows) ** 2 / (n / k / rows)) < 51.2


def test_one_device_is_one_share():
    from numpyro_sgrld.data.sharding import data_mesh, shard_rows

    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    rows = shard_rows(x, data_mesh(jax.devices()[:1]))
    idx = jnp.array([5, 0, 3])
    np.testing.assert_array_equal(jax.jit(lambda r, i: r[i])(rows, idx), x[[5, 0, 3]])
    with pytest.raises(TypeError, match="indexed by one vector of row indices"):
        rows[0, 1]


def test_the_kernels_own_indices_lie_in_the_shares_of_sharded_rows():
    """The placeholder minibatch of the set-up passes (:func:`spread_indices`) and the
    evaluation batch (:func:`evaluation_indices`): for shares and subsample sizes that split,
    the k-th block of n/K indices lies in the k-th share of N/K rows, so no device reads
    another's rows; computed without overflow where i*N passes 2^31."""
    from numpyro_sgrld.data.subsample import spread_indices

    for k, big_n, n in [(2, 4000, 400), (2, 10, 10), (2, 10, 2), (3, 9, 3), (4, 4000, 8),
                        (4, 100, 96), (8, 8 * 7919, 8 * 13), (2, 10**8, 1000)]:
        plates = (SubsamplePlate("data", big_n, n),)
        for idx in (spread_indices(big_n, n), evaluation_indices(plates)["data"]):
            blocks = np.asarray(idx, np.int64).reshape(k, n // k)
            share = np.arange(k)[:, None] * (big_n // k)
            assert np.all((blocks >= share) & (blocks < share + big_n // k)), (k, big_n, n)
            assert np.all(np.diff(blocks.ravel()) > 0)


def _blocks_in_shares(rows, k=2):
    blocks = np.asarray(rows).reshape(k, -1)
    share = np.arange(k)[:, None] * (w.N // k)
    return bool(np.all((blocks >= share) & (blocks < share + w.N // k)))


def _check_regression(run):
    """A run of the worker's ``regression``: the draws' mean against the exact posterior's
    (Gaussian prior, known noise sd: conjugate), within the Monte Carlo error of each
    coordinate (its ESS-based standard error; z at a family-wise two-sided level of 1e-3);
    the rows a mode search and the evaluation batch read, block k in share k; the evaluation
    batch's log-likelihood, the same as on the rows in memory."""
    X, y = (a.astype(np.float64) for a in w.regression_data())
    precision = np.eye(w.D) / w.W_PRIOR_SD**2 + X.T @ X / w.SIGMA**2
    posterior_mean = np.linalg.solve(precision, X.T @ y / w.SIGMA**2)
    draws = np.asarray(run["w"])
    ess = np.asarray(effective_sample_size(draws[None]))
    z = (draws.mean(0) - posterior_mean) / (draws.std(0) / np.sqrt(ess))
    assert np.all(np.abs(z) < norm.isf(1e-3 / (2 * w.D))), (z, ess)
    assert _blocks_in_shares(run["search_rows"]) and _blocks_in_shares(run["evaluation_rows"])
    rows = np.asarray(run["evaluation_rows"])
    expected = norm.logpdf(y[rows], X[rows] @ np.asarray(w.W_TRUE), w.SIGMA).sum()
    np.testing.assert_allclose(run["loglik"], expected, rtol=1e-5)


@pytest.mark.slow
def test_two_processes_run_sgld_defaults_on_a_regression_that_validates_its_arguments(
        tmp_path):
    """A likelihood whose distribution validates its arguments (``Normal(X[idx] @ w, sd)``,
    NumPyro's validation on) on rows sharded across two processes: every pass the kernel
    makes over the model reads each row on the device that holds it (a row read elsewhere is
    NaN, and the validation raises)."""
    _check_regression(_two_processes("regression", tmp_path, draws="w", arrays=2))


@pytest.mark.slow
def test_one_process_with_two_devices_runs_the_regression_and_the_mode_search(tmp_path):
    """The same run in one process whose two (simulated) devices hold half the rows each,
    and a kernel with ``control_variate="mode"``: its centre, found on minibatches drawn share
    by share, is finite."""
    out = tmp_path / "devices.json"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(
        [os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=2"])}
    proc = subprocess.run([sys.executable, str(HERE / "sharded_worker.py"), "devices",
                           str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = json.loads(out.read_text())
    assert run["rows_held"] == [w.N // 2] * 2
    _check_regression(run)
    assert np.all(np.isfinite(run["centre"]))


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _exact_law(y, n, k, step, prior_sd):
    """Mean and variance of the stationary law of SGLD on the Gaussian mean model with the
    stratified minibatch: θ' = (1 - hA)θ + hG + sqrt(2h)ξ with A = 1/σ0² + N and
    G = (N/n) Σ_B y, E G = Σ y, Var G = (N/n)² Σ_k (n/K) Var(share k)."""
    big_n = y.size
    a = 1 / prior_sd**2 + big_n
    shares = y.reshape(k, -1).astype(np.float64)
    var_g = (big_n / n) ** 2 * (n / k) * shares.var(axis=1).sum()
    rho = 1 - step * a
    return y.astype(np.float64).sum() / a, (2 * step + step**2 * var_g) / (1 - rho**2), rho


def _two_processes(part, tmp_path, draws="theta", arrays=1):
    """The worker's ``part`` run by two processes: their results (the first's), after
    checking that both drew the same ``draws`` and that each held half the rows of each of
    its ``arrays`` sharded arrays."""
    port, procs = str(_free_port()), []
    outs = [tmp_path / f"{part}{i}.json" for i in range(2)]
    # XLA at optimisation level 0, as in this suite (conftest.py): compiling is most of a run
    env = {**os.environ, "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_backend_optimization_level=0"}
    for i in range(2):
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "sharded_worker.py"), part, str(i), "2", port,
             str(outs[i])], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env))
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(x[-3000:] for x in logs)
    runs = [json.loads(o.read_text()) for o in outs]
    # SPMD: both processes hold the same chain; each held its half of the rows only
    assert runs[0][draws] == runs[1][draws]
    assert [r["rows_held"] for r in runs] == [[w.N // 2] * arrays] * 2
    return runs[0]


def test_two_processes_each_holding_half_the_rows_sample_the_discretised_law(tmp_path):
    run = _two_processes("law", tmp_path)
    # the compiled step sums the minibatch across the processes and gathers no rows
    assert run["all_gathers"] == 0 and run["all_reduces"] >= 1
    assert "batching='epoch' is not available with ShardedRows" in run["refused"]
    theta = np.asarray(run["theta"])
    mean, var, rho = _exact_law(w.data(), w.n, 2, w.STEP, w.PRIOR_SD)
    m = theta.size
    # AR(1) draws: the sample mean's and the sample variance's standard errors
    se_mean = np.sqrt(var / m * (1 + rho) / (1 - rho))
    se_var = var * np.sqrt(2 / m * (1 + rho**2) / (1 - rho**2))
    assert abs(theta.mean() - mean) < 4 * se_mean, (theta.mean(), mean, se_mean)
    assert abs(theta.var() - var) < 4 * se_var, (theta.var(), var, se_var)


@pytest.mark.slow
def test_two_processes_run_the_default_kernel_with_full_data_passes_shard_by_shard(tmp_path):
    """SGLD at its defaults: control variates switched on in warm-up (their centre's
    full-data gradient, and the window ends' full-data Hessian, computed shard by shard, no
    row gathered); the draws' mean within four of its errors of the posterior's."""
    run = _two_processes("default", tmp_path)
    assert run["control_variates_on"] and run["all_gathers"] == 0
    draws = np.asarray(run["theta"])
    posterior_mean = w.data().astype(np.float64).sum() / (1 / w.PRIOR_SD**2 + w.N)
    ess = float(effective_sample_size(draws[None]))
    assert abs(draws.mean() - posterior_mean) < 4 * draws.std() / np.sqrt(ess)
