"""Integrators and metrics against hand computations; jit/vmap/pytree invariants."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC

from numpyro_sgrld import (
    PSGLD,
    SGHMC,
    SGLD,
    AdamSGLD,
    LangevinKernel,
    MongeSGLD,
    ShampooSGLD,
    WenzelSGLD,
    integrators,
    metrics,
)
from numpyro_sgrld.core.tree import tree_normal

TREE = {"a": jnp.arange(3.0), "b": {"c": jnp.ones((2, 2)), "d": jnp.array(0.5)}}
GRAD = jax.tree.map(lambda x: 0.1 * x + 1.0, TREE)


def test_noise_is_drawn_in_each_leaf_dtype_and_refuses_integer_leaves():
    mixed = {"f32": jnp.zeros(3, jnp.float32), "f16": jnp.zeros((2, 2), jnp.float16)}
    noise = tree_normal(random.PRNGKey(0), mixed)
    assert {k: v.dtype for k, v in noise.items()} == {"f32": jnp.float32, "f16": jnp.float16}
    assert all(bool(jnp.all(jnp.isfinite(v))) and float(jnp.std(v)) > 0 for v in noise.values())
    with pytest.raises(TypeError, match="float dtype"):
        tree_normal(random.PRNGKey(0), {"w": jnp.zeros(3), "count": jnp.arange(3)})
    with pytest.raises(TypeError, match="float dtype"):
        integrators.langevin_step(random.PRNGKey(0), jnp.arange(3), jnp.ones(3), None, 0.1, 1.0)


def test_langevin_identity_is_sgld_formula():
    key = random.PRNGKey(0)
    precond, _ = metrics.identity().update(GRAD, metrics.identity().init(TREE), TREE)
    got = integrators.langevin_step(key, TREE, GRAD, precond, 0.01, 1.5)
    xi = tree_normal(key, TREE)
    expected = jax.tree.map(
        lambda x, g, n: x - 0.01 * g + jnp.sqrt(2 * 0.01 * 1.5) * n, TREE, GRAD, xi
    )
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(a, b)


def test_langevin_applies_drift_noise_and_correction():
    key = random.PRNGKey(1)
    precond = metrics.Preconditioner(
        drift=lambda v: jax.tree.map(lambda x: 2.0 * x, v),
        noise=lambda v: jax.tree.map(lambda x: 3.0 * x, v),
        correction=jax.tree.map(jnp.ones_like, TREE),
    )
    got = integrators.langevin_step(key, TREE, GRAD, precond, 0.01, 1.0)
    xi = tree_normal(key, TREE)
    expected = jax.tree.map(
        lambda x, g, n: x - 0.01 * 2 * g + jnp.sqrt(0.02) * 3 * n + 0.01, TREE, GRAD, xi
    )
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_langevin_scales_the_correction_with_the_temperature():
    """The drift that keeps exp(-U/T) stationary under sqrt(2TD) dW is -D grad U + T div D."""
    key = random.PRNGKey(1)
    precond = metrics.Preconditioner(
        drift=lambda v: v, noise=lambda v: v, correction=jax.tree.map(jnp.ones_like, TREE)
    )
    got = integrators.langevin_step(key, TREE, GRAD, precond, 0.01, 0.25)
    xi = tree_normal(key, TREE)
    expected = jax.tree.map(
        lambda x, g, n: x - 0.01 * g + jnp.sqrt(0.005) * n + 0.01 * 0.25, TREE, GRAD, xi
    )
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    cold = integrators.langevin_step(key, TREE, GRAD, precond, 0.01, 0.0)
    for a, x, g in zip(jax.tree.leaves(cold), jax.tree.leaves(TREE), jax.tree.leaves(GRAD),
                       strict=True):
        np.testing.assert_allclose(a, x - 0.01 * g, rtol=1e-6)  # T = 0: gradient descent


def test_sghmc_formula():
    key = random.PRNGKey(2)
    momentum = jax.tree.map(lambda x: 0.3 * x, TREE)
    precond, _ = metrics.identity().update(GRAD, (), TREE)
    pos, mom = integrators.sghmc_step(key, TREE, momentum, GRAD, precond, 0.01, 0.2, 0.05, 2.0)
    xi = tree_normal(key, TREE)
    exp_mom = jax.tree.map(
        lambda v, g, n: 0.8 * v - 0.01 * g + jnp.sqrt(2 * 0.15 * 0.01 * 2.0) * n,
        momentum,
        GRAD,
        xi,
    )
    exp_pos = jax.tree.map(lambda x, v: x + v, TREE, exp_mom)
    for a, b in zip(jax.tree.leaves((pos, mom)), jax.tree.leaves((exp_pos, exp_mom)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_integrators_jit_and_vmap():
    precond, _ = metrics.identity().update(GRAD, (), TREE)
    keys = random.split(random.PRNGKey(0), 4)
    batched = jax.tree.map(lambda x: jnp.stack([x] * 4), TREE)
    out = jax.jit(jax.vmap(lambda k, t: integrators.langevin_step(k, t, GRAD, precond, 0.1, 1.0)))(
        keys, batched
    )
    assert jax.tree.map(jnp.shape, out) == jax.tree.map(jnp.shape, batched)
    single = integrators.langevin_step(keys[2], TREE, GRAD, precond, 0.1, 1.0)
    for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(single), strict=True):
        np.testing.assert_allclose(a[2], b, rtol=1e-6)


def _pytree_model():
    numpyro.sample("scalar", dist.Normal())
    numpyro.sample("vector", dist.Normal().expand([3]).to_event(1))
    numpyro.sample("matrix", dist.Normal().expand([2, 4]).to_event(2))
    numpyro.sample("positive", dist.Gamma(2.0, 1.0))
    numpyro.sample("tensor", dist.Normal().expand([2, 3, 2]).to_event(3))


def test_sgld_is_the_euler_maruyama_step():
    """SGLD through ``MCMC`` on U = sum(a x^2)/2: at T = 0 it is gradient descent,
    x_k = (1 - h a)^k x_0 exactly; at T = 1 each step's residual x_{t+1} - (1 - h a) x_t is
    N(0, 2h) (sample mean and variance over 5000 coordinates and 5 steps, 4 standard errors).
    The draws are one step behind the kernel's proposal (it is checked by the next step):
    the k-th draw of a run without warm-up is x_{k-1}, the first the initial position."""
    d, h = 5000, 0.01
    a = jnp.linspace(0.5, 2.0, d)
    x0 = jnp.linspace(-1.0, 1.0, d)

    def potential(z):
        return 0.5 * jnp.sum(a * z["x"] ** 2)

    def run(temperature):
        kernel = SGLD(potential_fn=potential, step_size=h, temperature=temperature)
        mcmc = MCMC(kernel, num_warmup=0, num_samples=6, progress_bar=False)
        mcmc.run(random.PRNGKey(4), init_params={"x": x0})
        return np.asarray(mcmc.get_samples()["x"], np.float64)

    cold = run(0.0)
    decay = 1.0 - h * np.asarray(a, np.float64)
    expected = np.stack([decay ** k * np.asarray(x0, np.float64) for k in range(6)])
    np.testing.assert_allclose(cold, expected, rtol=1e-5, atol=1e-7)
    warm = run(1.0)
    np.testing.assert_array_equal(warm[0], x0)
    residual = (warm[1:] - decay * warm[:-1]).ravel()
    n = residual.size
    assert abs(residual.mean()) < 4 * np.sqrt(2 * h / n)
    assert abs(residual.var() - 2 * h) < 4 * 2 * h * np.sqrt(2 / n)


def test_sghmc_momentum_resampling_happens_on_schedule():
    """A flat potential and little friction: between resamplings the momentum changes by
    (1 - a) v + N(0, 2ah), a step of variance 2ah (4e-4 of h here); a resampling replaces it
    by N(0, h) first. Over 2000 independent coordinates the variance of v_{t+1} - (1 - a) v_t
    is therefore either ~2ah or ~h: the large ones must come exactly every 3 steps."""
    h, a, every, steps = 0.01, 2e-4, 3, 15

    def flat(z):
        return 0.0 * jnp.sum(z["x"])

    kernel = SGHMC(potential_fn=flat, step_size=h, friction=a, resample_momentum_every=every)
    mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, progress_bar=False)
    mcmc.run(random.PRNGKey(0), init_params={"x": jnp.zeros(2000)},
             extra_fields=("sampler_state.integrator.momentum",))
    mom = np.asarray(
        mcmc.get_extra_fields()["sampler_state.integrator.momentum"]["x"], np.float64
    )
    var = np.var(mom[1:] - (1 - a) * mom[:-1], axis=1)
    # 2000 coordinates: each variance within ~3 % of its value; the two levels are 2500x apart
    fresh = np.flatnonzero(var > np.sqrt(2 * a * h * h))
    assert np.all(var[fresh] > 0.5 * h) and np.all(np.delete(var, fresh) < 4 * a * h), var
    assert len(fresh) >= steps // every - 1 and np.all(np.diff(fresh) == every), fresh


ALL_KERNELS = {
    "sgld": lambda m: SGLD(m, step_size=1e-3),
    "sghmc": lambda m: SGHMC(
        m, step_size=1e-4, resample_momentum_every=5, initial_momentum="random"
    ),
    "psgld": lambda m: PSGLD(m, step_size=1e-3),
    "psgld-exact": lambda m: PSGLD(m, step_size=1e-3, eps=0.1, correction="exact"),
    "psgld-hutchinson": lambda m: PSGLD(m, step_size=1e-3, eps=0.1, correction="hutchinson"),
    "monge": lambda m: MongeSGLD(m, step_size=1e-3, max_drift_norm=100.0),
    "monge-hutchinson": lambda m: MongeSGLD(m, step_size=1e-3, correction="hutchinson"),
    "shampoo": lambda m: ShampooSGLD(m, step_size=1e-3, update_interval=3, block_size=3),
    "shampoo-exact": lambda m: ShampooSGLD(
        m, step_size=1e-3, eps=0.1, update_interval=1, correction="exact"
    ),
    "wenzel": lambda m: WenzelSGLD(m, step_size=1e-3),
    "adam": lambda m: AdamSGLD(m, step_size=1e-3),
}


# In the default run: SGLD (the adapter's shapes and chain methods); the other kernels' steps
# on these shapes are in the slow set (their metrics are checked on pytrees in
# tests/test_metrics.py and tests/test_composition.py, Shampoo's blocks and reshaping below
# and in tests/test_reference_updates.py).


@pytest.mark.parametrize(
    "name",
    [n if n == "sgld" else pytest.param(n, marks=pytest.mark.slow)
     for n in sorted(ALL_KERNELS)],
)
def test_every_kernel_on_several_shapes_and_chain_methods(name):
    """Finite draws for scalar, vector, matrix, rank-3 and constrained sites; a vectorized chain
    equals the single chain run with the same key (what sequential chains do)."""
    key = random.PRNGKey(1)
    vectorized = MCMC(
        ALL_KERNELS[name](_pytree_model),
        num_warmup=5,
        num_samples=15,
        num_chains=2,
        chain_method="vectorized",
        progress_bar=False,
    )
    vectorized.run(key)
    batch = vectorized.get_samples(group_by_chain=True)
    single = MCMC(
        ALL_KERNELS[name](_pytree_model), num_warmup=5, num_samples=15, progress_bar=False
    )
    single.run(random.split(key, 2)[1])
    assert batch["matrix"].shape == (2, 15, 2, 4) and batch["tensor"].shape == (2, 15, 2, 3, 2)
    assert np.all(batch["positive"] > 0)
    for site, value in single.get_samples().items():
        assert np.all(np.isfinite(batch[site]))
        np.testing.assert_allclose(batch[site][1], value, rtol=2e-4, atol=2e-5)


def test_shampoo_on_a_site_larger_than_a_block():
    def model():
        numpyro.sample("W", dist.Normal().expand([9, 7]).to_event(2))
        numpyro.sample("b", dist.Normal().expand([11]).to_event(1))

    mcmc = MCMC(
        ShampooSGLD(model, step_size=1e-2, update_interval=2, block_size=4),
        num_warmup=10,
        num_samples=10,
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), extra_fields=("sampler_state",))
    state = mcmc.last_state.sampler_state.metric
    # 9 x 7 in 3 x 2 equal blocks of 3 x 4 (the second dimension padded to 8)
    assert [s.shape for s in state.stats["W"]] == [(6, 3, 3), (6, 4, 4)]
    assert [s.shape for s in state.stats["b"]] == [(3, 4, 4)]
    assert np.all(np.isfinite(mcmc.get_samples()["W"]))


def test_correction_errors():
    with pytest.raises(ValueError, match="update_interval=100.*set update_interval=1"):
        ShampooSGLD(_pytree_model, step_size=0.1, correction="exact")
    with pytest.raises(ValueError, match="Unknown correction='fast'"):
        PSGLD(_pytree_model, step_size=0.1, correction="fast")
    with pytest.raises(ValueError, match="metric 'wenzel' cannot carry correction"):
        LangevinKernel(
            _pytree_model, step_size=0.1, metric=metrics.wenzel(), correction="hutchinson"
        )
    with pytest.raises(ValueError, match=r"`decay` must be a finite number in \[0, 1\)"):
        MongeSGLD(_pytree_model, step_size=0.1, decay=1.0)
    with pytest.raises(ValueError, match=r"`beta2` must be a finite number in \[0, 1\)"):
        AdamSGLD(_pytree_model, step_size=0.1, beta2=1.0)


def test_wenzel_refreshes_once_per_epoch():
    """N = 100, minibatch 25: an epoch is 4 steps, so the layer-wise scales (two sites with
    different gradient sizes, hence scales other than 1) change after steps 4, 8 and 12 and
    at no other step."""
    def model(y):
        s = numpyro.sample("s", dist.Normal())
        t = numpyro.sample("t", dist.Normal())
        with numpyro.plate("data", 100, subsample_size=25) as idx:
            numpyro.sample("y", dist.Normal(s + 10.0 * t, 1), obs=y[idx])

    kernel = WenzelSGLD(model, step_size=1e-6)
    mcmc = MCMC(kernel, num_warmup=0, num_samples=13, progress_bar=False)
    mcmc.run(random.PRNGKey(0), np.ones(100), extra_fields=("sampler_state.metric.scale",))
    scale = np.stack([np.asarray(v) for v in
                      jax.tree.leaves(mcmc.get_extra_fields()["sampler_state.metric.scale"])],
                     axis=1)
    changed = np.flatnonzero(np.any(scale[1:] != scale[:-1], axis=1)) + 1  # draw index
    steps_done = changed + 1  # draw k is the state after k + 1 steps
    np.testing.assert_array_equal(steps_done, [4, 8, 12])
