"""Determinism, chain methods, continuation and jit_model_args through numpyro's MCMC."""

import os
import subprocess
import sys
import textwrap
from functools import partial

import jax
import numpy as np
import pytest
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld.models import linear_regression as lr

from numpyro_sgrld import SGHMC, SGLD

X, Y, _ = lr.make_data(seed=3, num_data=300, num_features=3)
MODEL = partial(lr.model, subsample_size=30)
KERNELS = {
    "sgld": lambda **kw: SGLD(MODEL, step_size=1e-5, **kw),
    "sghmc": lambda **kw: SGHMC(MODEL, step_size=1e-6, friction=0.2, **kw),
}


def _run(kernel, key=0, **mcmc_kwargs):
    mcmc_kwargs = {"num_warmup": 20, "num_samples": 50, "progress_bar": False, **mcmc_kwargs}
    mcmc = MCMC(kernel, **mcmc_kwargs)
    mcmc.run(random.PRNGKey(key), X, Y)
    return mcmc


@pytest.mark.parametrize(
    "name", [pytest.param("sgld", marks=pytest.mark.slow), "sghmc"]  # SGHMC has more state
)
def test_same_key_same_samples(name):
    a = _run(KERNELS[name]()).get_samples()["w"]
    b = _run(KERNELS[name]()).get_samples()["w"]
    np.testing.assert_array_equal(a, b)
    c = _run(KERNELS[name](), key=1).get_samples()["w"]
    assert not np.array_equal(a, c)


@pytest.mark.parametrize(
    "name, batching",
    [("sgld", "epoch"), pytest.param("sghmc", "replacement", marks=pytest.mark.slow)],
)
def test_vectorized_chains_equal_sequential_chains(name, batching):
    runs = {
        method: _run(KERNELS[name](batching=batching), num_chains=3, chain_method=method)
        for method in ("sequential", "vectorized")
    }
    seq, vec = (runs[m].get_samples(group_by_chain=True)["w"] for m in ("sequential", "vectorized"))
    assert seq.shape == (3, 50, 3)
    np.testing.assert_allclose(seq, vec, rtol=1e-5, atol=1e-6)
    assert not np.allclose(seq[0], seq[1])


@pytest.mark.parametrize("name", ["sgld", pytest.param("sghmc", marks=pytest.mark.slow)])
def test_continuing_from_last_state_equals_one_long_run(name):
    long = _run(KERNELS[name](), num_samples=100).get_samples()["w"]
    mcmc = _run(KERNELS[name](), num_samples=60)
    first = mcmc.get_samples()["w"]
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.num_samples = 40
    mcmc.run(mcmc.last_state.rng_key, X, Y)
    second = mcmc.get_samples()["w"]
    np.testing.assert_allclose(np.concatenate([first, second]), long, rtol=1e-6, atol=1e-7)
    assert int(mcmc.last_state.i) == 120


@pytest.mark.slow  # compile-heavy: in the slow set, to keep the default run under 5 minutes
def test_continuing_vectorized_chains():
    long = _run(KERNELS["sghmc"](), num_samples=100, num_chains=2, chain_method="vectorized")
    mcmc = _run(KERNELS["sghmc"](), num_samples=50, num_chains=2, chain_method="vectorized")
    first = mcmc.get_samples(group_by_chain=True)["w"]
    mcmc.post_warmup_state = mcmc.last_state
    mcmc.run(mcmc.last_state.rng_key, X, Y)
    both = np.concatenate([first, mcmc.get_samples(group_by_chain=True)["w"]], axis=1)
    np.testing.assert_allclose(
        both, long.get_samples(group_by_chain=True)["w"], rtol=1e-6, atol=1e-7
    )


def test_jit_model_args_gives_the_same_samples():
    a = _run(KERNELS["sgld"]()).get_samples()["w"]
    b = _run(KERNELS["sgld"](), jit_model_args=True).get_samples()["w"]
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.slow  # a subprocess with two host devices (as tests/test_performance.py's)
def test_parallel_chains_on_two_host_devices():
    """chain_method='parallel' (pmap) on two CPU devices equals sequential chains."""
    script = textwrap.dedent(
        """
        from functools import partial
        import numpy as np
        from jax import random
        from numpyro.infer import MCMC
        from numpyro_sgrld import SGHMC
        from numpyro_sgrld.models import linear_regression as lr
        X, Y, _ = lr.make_data(seed=3, num_data=300, num_features=3)
        out = []
        for method in ("parallel", "sequential"):
            kernel = SGHMC(partial(lr.model, subsample_size=30), step_size=1e-6, friction=0.2)
            mcmc = MCMC(kernel, num_warmup=20, num_samples=50, num_chains=2,
                        chain_method=method, progress_bar=False)
            mcmc.run(random.PRNGKey(0), X, Y)
            out.append(mcmc.get_samples(group_by_chain=True)["w"])
        np.testing.assert_allclose(out[0], out[1], rtol=1e-5, atol=1e-6)
        print("OK")
        """
    )
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_vectorized_state_shapes():
    mcmc = _run(KERNELS["sghmc"](), num_chains=4, chain_method="vectorized")
    state = mcmc.last_state
    assert state.z["w"].shape == (4, 3)
    assert state.sampler_state.integrator.momentum["w"].shape == (4, 3)
    assert state.rng_key.shape[0] == 4
    assert jax.tree.leaves(state.i)[0].shape == (4,)
