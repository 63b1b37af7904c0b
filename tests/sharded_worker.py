"""One process of the multi-process runs in ``test_sharded_data.py`` (run as a script, not
collected): ``python sharded_worker.py PART PROCESS_ID NUM_PROCESSES PORT OUT.json``, ``PART``
``law`` (SGLD at a fixed step) or ``default`` (SGLD at its defaults).

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
from numpyro_sgrld.sharding import data_mesh, shard_rows

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


def main(part, pid, nproc, port, out):
    # before any computation: the runtime joins the processes' devices into one mesh
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=nproc,
                               process_id=pid)
    share = N // nproc
    local = data()[pid * share:(pid + 1) * share].copy()  # the rest is dropped here
    y = shard_rows(local, data_mesh())
    result = {"law": law, "default": default}[part](y)
    result["rows_held"] = [int(s.data.shape[0]) for s in y.array.addressable_shards]
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
