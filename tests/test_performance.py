"""What keeps the per-run and per-step cost down: compiled loops reused across ``MCMC.run``
calls, no permutation drawn at initialisation."""

import logging

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC

import numpyro_sgrld
from numpyro_sgrld import PSGLD, SGLD


def logistic(X, y, subsample_size=20):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def _data(n=5_000, d=3):
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
    y = jnp.asarray(rng.random(n) < 0.5, jnp.int32)
    return X, y


class _CompileLog(logging.Handler):
    def __init__(self):
        super().__init__()
        self.compiled = []

    def emit(self, record):
        msg = record.getMessage()
        if msg.startswith("Compiling "):
            self.compiled.append(msg.split(" ")[1])


def _compiled_during(fn):
    log = _CompileLog()
    logger = logging.getLogger("jax")
    logger.addHandler(log)
    try:
        with jax.log_compiles(True):
            fn()
    finally:
        logger.removeHandler(log)
    return log.compiled


def _mcmc(kernel_cls=SGLD, **kw):
    kernel = kernel_cls(logistic, step_size=1e-4)
    return MCMC(kernel, num_warmup=0, num_samples=200, progress_bar=False, **kw)


@pytest.mark.parametrize("jit_model_args", [True, False])
def test_second_run_reuses_the_compiled_loop(jit_model_args):
    X, y = _data()
    mcmc = _mcmc(jit_model_args=jit_model_args)
    first = _compiled_during(lambda: mcmc.run(random.PRNGKey(0), X, y))
    assert "jit(_fori_collect_loop)" in first
    again = _compiled_during(lambda: mcmc.run(random.PRNGKey(1), X, y))
    assert "jit(_fori_collect_loop)" not in again, again
    # no permutation of the data set drawn (and compiled) to initialise the subsample plate
    assert "jit(scan)" not in again, again


def test_reused_loop_gives_the_samples_of_a_fresh_one():
    X, y = _data()
    mcmc = _mcmc(PSGLD, jit_model_args=True)
    mcmc.run(random.PRNGKey(0), X, y)
    mcmc.run(random.PRNGKey(1), X, y)
    reused = mcmc.get_samples()["w"]
    fresh = _mcmc(PSGLD, jit_model_args=True)
    numpyro_sgrld.restore_numpyro_jit()
    try:
        fresh.run(random.PRNGKey(1), X, y)
    finally:
        numpyro_sgrld.reuse_compiled_loops()
    np.testing.assert_array_equal(reused, fresh.get_samples()["w"])
    # new data of the same shape (jit_model_args=True) is used, not the old data baked in
    mcmc.run(random.PRNGKey(1), X, 1 - y)
    assert not np.allclose(mcmc.get_samples()["w"], reused)


def test_other_run_lengths_and_kernels_compile_their_own_loop():
    X, y = _data()
    a, b = _mcmc(SGLD, jit_model_args=True), _mcmc(PSGLD, jit_model_args=True)
    a.run(random.PRNGKey(0), X, y)
    assert "jit(_fori_collect_loop)" in _compiled_during(lambda: b.run(random.PRNGKey(0), X, y))
    a.num_samples = 300
    a._set_collection_params()
    assert "jit(_fori_collect_loop)" in _compiled_during(lambda: a.run(random.PRNGKey(0), X, y))
    assert a.get_samples()["w"].shape == (300, 3)


def test_restore_numpyro_jit_is_reversible():
    import numpyro.util

    numpyro_sgrld.restore_numpyro_jit()
    try:
        assert numpyro.util.maybe_jit is numpyro_sgrld._compat._ORIGINAL_MAYBE_JIT
    finally:
        numpyro_sgrld.reuse_compiled_loops()
    assert numpyro.util.maybe_jit is numpyro_sgrld._compat._memoized_maybe_jit


def test_float32_by_default():
    X, y = _data()
    mcmc = _mcmc(jit_model_args=True)
    mcmc.run(random.PRNGKey(0), X, y, extra_fields=("step_size", "potential_energy"))
    assert mcmc.get_samples()["w"].dtype == jnp.float32
    assert all(v.dtype != jnp.float64 for v in mcmc.get_extra_fields().values())


