"""One process of the multi-process runs in ``test_sharded_data.py`` (run as a script, not
collected): ``python sharded_worker.py PART PROCESS_ID NUM_PROCESSES PORT OUT.json``, ``PART``
``law`` (SGLD at a fixed step), ``default`` (SGLD at its defaults) or ``regression`` (SGLD at
its defaults on a linear regression whose likelihood validates its arguments); or
``python sharded_worker.py devices OUT.json``, one process with two devices (:func:`devices`).

JAX's multi-controller runtime over CPU collectives (gloo): every process holds only its share
of the rows of ``y``, the kernel draws each minibatch share by share, and the processes write
their draws, the rows they held and the collectives in the compiled step."""

import json
import sys

import jax
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

from numpyro_sgrld import SGLD
from numpyro_sgrld.data.sharding import data_mesh, shard_rows

N, n, STEP, PRIOR_SD = 4000, 400, 4e-5, 10.0


def data():
    """The whole data set; each process keeps only its share of it."""
    return np.random.default_rng(0).normal(1.5, 1.0, N).astype(np.float32)


def model(y):
    theta = numpyro.sample("theta", dist.Normal(0.0, PRIOR_SD))
    with numpyro.plate("data", y.shape[0], subsample_size=n) as idx:
        numpyro.sample("obs", dist.Normal(theta, 1.0), obs=y[idx])


def law(y):
    """SGLD at a fixed step: the draws, the collectives of its compiled step, and the refusal
    of a batching that cannot be stratified."""
    kernel = SGLD(model, STEP)
    mcmc = MCMC(kernel, num_warmup=100, num_samples=1_500, progress_bar=False,
                jit_model_args=True)
    mcmc.run(jax.random.PRNGKey(0), y)
    hlo = jax.jit(kernel.sample).lower(mcmc.last_state, (y,), {}).compile().as_text()
    refused = ""
    try:
        SGLD(model, STEP, batching="epoch").init(jax.random.PRNGKey(1), 0, None, (y,), {})
    except ValueError as err:
        refused = str(err)
    return {"theta": np.asarray(mcmc.get_samples()["theta"], np.float64).tolist(),
            "all_gathers": hlo.count("all-gather"), "all_reduces": hlo.count("all-reduce"),
            "refused": refused}


def default(y):
    """SGLD at its defaults: the step adapted, the metric learnt and the control variates
    switched on in warm-up, their full-data passes shard by shard."""
    kernel = SGLD(model)
    mcmc = MCMC(kernel, num_warmup=300, num_samples=2_000, progress_bar=False,
                jit_model_args=True)
    mcmc.run(jax.random.PRNGKey(2), y)
    hlo = jax.jit(kernel.sample).lower(mcmc.last_state, (y,), {}).compile().as_text()
    return {"theta": np.asarray(mcmc.get_samples()["theta"], np.float64).tolist(),
            "all_gathers": hlo.count("all-gather"),
            "control_variates_on": bool(mcmc.last_state.gradient_state.active)}


D, SIGMA, W_PRIOR_SD, W_TRUE = 2, 1.0, 1.0, (0.8, -0.5)


def regression_data():
    """Rows ``(X, y)`` of a linear regression with known noise sd ``SIGMA``."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, D)).astype(np.float32)
    y = X @ np.asarray(W_TRUE, np.float32) + SIGMA * rng.normal(size=N).astype(np.float32)
    return X, y.astype(np.float32)


def regression_model(X, y):
    w = numpyro.sample("w", dist.Normal(0.0, W_PRIOR_SD).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=n) as idx:
        # Normal validates its loc: a row read outside its share (NaN) would raise here
        numpyro.sample("y", dist.Normal(X[idx] @ w, SIGMA), obs=y[idx])


def regression(X, y, search=False):
    """SGLD at its defaults on the regression, NumPyro's argument validation on: every pass
    the kernel makes over the model (the set-up trace, the search for initial values, the data
    checks, the warm-up's checks, the control variates' centre) must read each row on its own
    device. Also the minibatch a mode search draws (``Target.draw``), the evaluation
    batch's rows and its log-likelihood (the verdict's reading of a network) at
    ``w = W_TRUE``; with ``search``, the centre a kernel with ``control_variate="mode"``
    finds on such minibatches."""
    from jax.experimental import multihost_utils

    from numpyro_sgrld.sampler.parts import target
    from numpyro_sgrld.verdict.evaluation import evaluation_indices, loglik_fn

    numpyro.enable_validation(True)
    kernel = SGLD(regression_model)
    mcmc = MCMC(kernel, num_warmup=200, num_samples=2_000, progress_bar=False,
                jit_model_args=True)
    mcmc.run(jax.random.PRNGKey(3), X, y)
    setup, plates = kernel.setup, kernel.subsample_plates
    drawn = jax.jit(lambda key, X, y: target(setup, kernel.model, None, None, (X, y), {},
                                             kernel._draw).draw(key, None)[0]["data"])(
        jax.random.PRNGKey(4), X, y)
    # the run's one draw shards a minibatch's indices across the processes' devices
    drawn = multihost_utils.process_allgather(drawn, tiled=True)
    loglik = jax.jit(loglik_fn(setup.prepared, plates))(
        {"w": np.asarray(W_TRUE, np.float32)}, (X, y), {})
    result = {"w": np.asarray(mcmc.get_samples()["w"], np.float64).tolist(),
              "search_rows": np.asarray(drawn).tolist(),
              "evaluation_rows": np.asarray(evaluation_indices(plates)["data"]).tolist(),
              "loglik": float(loglik)}
    if search:
        state = SGLD(regression_model, control_variate="mode").init(
            jax.random.PRNGKey(5), 200, None, (X, y), {})
        result["centre"] = np.asarray(state.gradient_state.centre["w"], np.float64).tolist()
    return result


def devices(out):
    """:func:`regression` (with the mode search) in one process whose two devices
    (``XLA_FLAGS=--xla_force_host_platform_device_count=2``) hold half the rows each."""
    mesh = data_mesh()
    X, y = (shard_rows(a, mesh) for a in regression_data())
    result = regression(X, y, search=True)
    result["rows_held"] = [int(s.data.shape[0]) for s in X.array.addressable_shards]
    with open(out, "w") as f:
        json.dump(result, f)


def main(part, pid, nproc, port, out):
    # before any computation: the runtime joins the processes' devices into one mesh
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=nproc,
                               process_id=pid)
    share, mesh = N // nproc, data_mesh()
    if part == "regression":  # each process keeps its rows of X and y, drops the rest
        X, y = (shard_rows(a[pid * share:(pid + 1) * share].copy(), mesh)
                for a in regression_data())
        result = regression(X, y)
        held = X.array.addressable_shards + y.array.addressable_shards
    else:
        local = data()[pid * share:(pid + 1) * share].copy()  # the rest is dropped here
        y = shard_rows(local, mesh)
        result = {"law": law, "default": default}[part](y)
        held = y.array.addressable_shards
    result["rows_held"] = [int(s.data.shape[0]) for s in held]
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    if sys.argv[1] == "devices":
        devices(sys.argv[2])
    else:
        main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
