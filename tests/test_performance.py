"""What keeps the per-run and per-step cost down: compiled loops reused across ``MCMC.run``
calls (with ``enable_fast_sampling_loop()``; NumPyro's own loop recompiles), no permutation drawn
at initialisation."""

import contextlib
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


OUR_LOOP, NUMPYRO_LOOP = "jit(_segment_loop)", "jit(_fori_collect_loop)"  # a CPU's loop


@pytest.fixture
def fast_loop():
    with numpyro_sgrld.fast_sampling_loop():
        yield


@pytest.mark.parametrize("opt_in", [True, False], ids=["fast-loop", "numpyro-loop"])
@pytest.mark.parametrize("jit_model_args", [True, False])
def test_second_run_reuses_the_compiled_loop_only_with_the_opt_in(jit_model_args, opt_in):
    X, y = _data()
    mcmc = _mcmc(jit_model_args=jit_model_args)
    name = OUR_LOOP if opt_in else NUMPYRO_LOOP
    with numpyro_sgrld.fast_sampling_loop() if opt_in else contextlib.nullcontext():
        first = _compiled_during(lambda: mcmc.run(random.PRNGKey(0), X, y))
        assert name in first, first
        again = _compiled_during(lambda: mcmc.run(random.PRNGKey(1), X, y))
    if opt_in:
        assert name not in again, again
    else:  # what docs/scaling.md says the opt-in saves; if NumPyro stops it, update the docs
        assert name in again, again
    # no permutation of the data set drawn (and compiled) to initialise the subsample plate
    assert "jit(scan)" not in again, again


def test_reused_loop_gives_the_samples_of_a_fresh_one():
    X, y = _data()
    mcmc = _mcmc(PSGLD, jit_model_args=True)
    with numpyro_sgrld.fast_sampling_loop():
        mcmc.run(random.PRNGKey(0), X, y)
        mcmc.run(random.PRNGKey(1), X, y)
    reused = mcmc.get_samples()["w"]
    fresh = _mcmc(PSGLD, jit_model_args=True)
    fresh.run(random.PRNGKey(1), X, y)  # NumPyro's loop
    np.testing.assert_array_equal(reused, fresh.get_samples()["w"])
    # new data of the same shape (jit_model_args=True) is used, not the old data baked in
    with numpyro_sgrld.fast_sampling_loop():
        mcmc.run(random.PRNGKey(1), X, 1 - y)
    assert not np.allclose(mcmc.get_samples()["w"], reused)


def test_other_run_lengths_and_kernels_compile_their_own_loop(fast_loop):
    X, y = _data()
    a, b = _mcmc(SGLD, jit_model_args=True), _mcmc(PSGLD, jit_model_args=True)
    a.run(random.PRNGKey(0), X, y)
    assert OUR_LOOP in _compiled_during(lambda: b.run(random.PRNGKey(0), X, y))
    a.num_samples = 300
    a._set_collection_params()
    assert OUR_LOOP in _compiled_during(lambda: a.run(random.PRNGKey(0), X, y))
    assert a.get_samples()["w"].shape == (300, 3)
    # the run length is not compiled in: 601 steps thinned by 2 keep 300 draws, like 600
    a.num_samples, a.thinning = 600, 2
    a._set_collection_params()
    a.run(random.PRNGKey(0), X, y)
    a.num_samples = 601
    a._set_collection_params()
    assert OUR_LOOP not in _compiled_during(lambda: a.run(random.PRNGKey(0), X, y))
    assert a.get_samples()["w"].shape == (300, 3)


def test_float32_by_default():
    X, y = _data()
    mcmc = _mcmc(jit_model_args=True)
    mcmc.run(random.PRNGKey(0), X, y, extra_fields=("step_size", "potential_energy"))
    assert mcmc.get_samples()["w"].dtype == jnp.float32
    assert all(v.dtype != jnp.float64 for v in mcmc.get_extra_fields().values())




# --------------------------------------------------------------------------- several devices
_TWO_DEVICES = r"""
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
import jax, jax.numpy as jnp, numpy as np, numpyro, numpyro.distributions as dist
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld import PSGLD, SGLD

def logistic(X, y, subsample_size=100):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])

assert len(jax.devices()) == 2
rng = np.random.default_rng(0)
X = jnp.asarray(rng.normal(size=(5000, 5)), jnp.float32)
y = jnp.asarray(rng.random(5000) < 0.5, jnp.int32)

def run(kernel, **kw):
    m = MCMC(kernel, num_warmup=0, num_samples=500, progress_bar=False, **kw)
    m.run(random.PRNGKey(0), X, y)
    return np.asarray(m.get_samples(group_by_chain=True)["w"])

# data parallel: the same chain as on one device, up to summation order
one = run(PSGLD(logistic, step_size=1e-4))
two = run(PSGLD(logistic, step_size=1e-4, data_parallel=True))
assert np.abs(one).max() > 0.1
np.testing.assert_allclose(two, one, atol=1e-4)
# ... and the work really is split: each device gathers 50 of the 100 rows, then all-reduce
k = PSGLD(logistic, step_size=1e-4, data_parallel=True)
hlo = jax.jit(k.sample).lower(k.init(random.PRNGKey(0), 0, None, (X, y), {}), (X, y), {})
hlo = hlo.compile().as_text()
assert "f32[50,5]" in hlo and "all-reduce" in hlo
# chains across devices: the same chains as one after the other
seq = run(SGLD(logistic, step_size=1e-4), num_chains=2, chain_method="sequential")
par = run(SGLD(logistic, step_size=1e-4), num_chains=2, chain_method="parallel")
vec = run(SGLD(logistic, step_size=1e-4, data_parallel=True), num_chains=2,
          chain_method="vectorized")
np.testing.assert_allclose(par, seq, atol=1e-5)
np.testing.assert_allclose(vec, seq, atol=1e-4)
# a minibatch that does not split evenly is refused with the fix
try:
    MCMC(SGLD(lambda X, y: logistic(X, y, 101), step_size=1e-4, data_parallel=True),
         num_warmup=0, num_samples=5, progress_bar=False).run(random.PRNGKey(0), X, y)
    raise SystemExit("no error for subsample_size=101 on 2 devices")
except ValueError as e:
    assert "multiple of 2" in str(e), e
print("OK")
"""


@pytest.mark.slow  # a subprocess with two host devices compiling every chain method
def test_two_devices_data_parallel_and_parallel_chains(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "two_devices.py"
    script.write_text(_TWO_DEVICES)
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0 and "OK" in out.stdout, out.stderr[-3000:]


def test_data_parallel_argument_errors():
    from jax.sharding import Mesh

    with pytest.raises(TypeError, match="data_parallel"):
        SGLD(logistic, step_size=1e-3, data_parallel="gpu")
    mesh = Mesh(np.asarray(jax.devices()[:1]).reshape(1, 1), ("a", "b"))
    with pytest.raises(ValueError, match="one-axis Mesh"):
        SGLD(logistic, step_size=1e-3, data_parallel=mesh)
    with pytest.raises(ValueError, match="empty"):
        SGLD(logistic, step_size=1e-3, data_parallel=[])
    # one device: nothing to split, the option is a no-op
    X, y = _data(200)
    mcmc = MCMC(SGLD(logistic, step_size=1e-3, data_parallel=True), num_warmup=0,
                num_samples=10, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y)
    assert mcmc.get_samples()["w"].shape == (10, 3)


def test_numpyros_debugging_mode_is_detected_without_compiling():
    """Inside ``numpyro.util.control_flow_prims_disabled()`` NumPyro runs its loops in Python
    and the kernels' own loop must stand aside; asking costs no compilation."""
    import numpyro.util

    from numpyro_sgrld.sampler.compat import _control_flow_disabled

    assert _compiled_during(lambda: _control_flow_disabled()) == []
    assert not _control_flow_disabled()
    with numpyro.util.control_flow_prims_disabled():
        assert _control_flow_disabled()


def test_once_run_programs_take_xla_options_only_where_compiled_on_their_own():
    """The programs a run executes once (``_model_host.jit_once`` with ``ONCE``: compiled
    without XLA's backend optimisation) are compiled with the options at top level, and
    without them inside a transformation (parallel chains run ``init`` inside ``pmap``; JAX
    refuses options on a nested ``jit``), each cached apart."""
    from numpyro_sgrld.sampler.model import ONCE, Once, jit_once

    kernel = Once()
    x = jnp.arange(3.0)

    def once(y):
        return jit_once(kernel, "f", lambda a: a * 2.0, (y,), {}, ONCE)(y)

    np.testing.assert_array_equal(once(x), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(jax.jit(once)(x), [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(jax.vmap(once)(x[:, None])[:, 0], [0.0, 2.0, 4.0])
    assert set(kernel.jitted) == {("f", True), ("f", False)}
