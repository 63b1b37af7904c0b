"""Data sharded across processes (``numpyro_sgrld.sharding.ShardedRows``): the stratified
minibatch, and a chain run by two processes with JAX's multi-controller runtime on CPU
collectives, each holding half the rows, against the exact law of the discretised chain."""

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

from numpyro_sgrld.host.sharded_data import stratified_indices

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
    from numpyro_sgrld.sharding import data_mesh, shard_rows

    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    rows = shard_rows(x, data_mesh(jax.devices()[:1]))
    idx = jnp.array([5, 0, 3])
    np.testing.assert_array_equal(jax.jit(lambda r, i: r[i])(rows, idx), x[[5, 0, 3]])
    with pytest.raises(TypeError, match="indexed by one vector of row indices"):
        rows[0, 1]


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


def _two_processes(part, tmp_path):
    """The worker's ``part`` run by two processes: their results."""
    port, procs = str(_free_port()), []
    outs = [tmp_path / f"{part}{i}.json" for i in range(2)]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    for i in range(2):
        procs.append(subprocess.Popen(
            [sys.executable, str(HERE / "sharded_worker.py"), part, str(i), "2", port,
             str(outs[i])], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=env))
    logs = [p.communicate(timeout=600)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), "\n".join(x[-3000:] for x in logs)
    runs = [json.loads(o.read_text()) for o in outs]
    # SPMD: both processes hold the same chain; each held its half of the rows only
    assert runs[0]["theta"] == runs[1]["theta"]
    assert [r["rows_held"] for r in runs] == [[w.N // 2], [w.N // 2]]
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
