"""One process of the multi-process run in ``test_sharded_data.py`` (run as a script, not
collected): ``python sharded_worker.py PROCESS_ID NUM_PROCESSES PORT OUT.json``.

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

N, n, STEP, PRIOR_SD = 4000, 400, 2e-5, 10.0


def data():
    """The whole data set; each process keeps only its share of it."""
    return np.random.default_rng(0).normal(1.5, 1.0, N).astype(np.float32)


def model(y):
    theta = numpyro.sample("theta", dist.Normal(0.0, PRIOR_SD))
    with numpyro.plate("data", y.shape[0], subsample_size=n) as idx:
        numpyro.sample("obs", dist.Normal(theta, 1.0), obs=y[idx])


def main(pid, nproc, port, out):
    # before any computation: the runtime joins the processes' devices into one mesh
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=f"localhost:{port}", num_processes=nproc,
                               process_id=pid)
    share = N // nproc
    local = data()[pid * share:(pid + 1) * share].copy()  # the rest is dropped here
    y = shard_rows(local, data_mesh())
    kernel = SGLD(model, STEP)
    mcmc = MCMC(kernel, num_warmup=300, num_samples=8_000, progress_bar=False,
                jit_model_args=True)
    mcmc.run(jax.random.PRNGKey(0), y)
    theta = np.asarray(mcmc.get_samples()["theta"], np.float64)
    state = mcmc.last_state
    hlo = jax.jit(kernel.sample).lower(state, (y,), {}).compile().as_text()
    refused = ""
    try:
        SGLD(model, STEP, batching="epoch").init(jax.random.PRNGKey(1), 0, None, (y,), {})
    except ValueError as err:
        refused = str(err)
    with open(out, "w") as f:
        json.dump({"theta": theta.tolist(),
                   "rows_held": [int(s.data.shape[0]) for s in y.array.addressable_shards],
                   "all_gathers": hlo.count("all-gather"),
                   "all_reduces": hlo.count("all-reduce"),
                   "refused": refused}, f)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4])
