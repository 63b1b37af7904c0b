"""Metrics and the Γ correction against hand computations and closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import random
from jax.flatten_util import ravel_pytree
from scipy.linalg import eigh

from numpyro_sgrld import metrics
from numpyro_sgrld.core.correction import (
    Lag,
    correction_drift,
    correction_terms,
    init_correction,
    lag_response,
    lagged_correction,
)
from numpyro_sgrld.core.metrics.monge import AUTO_STRENGTH
from numpyro_sgrld.core.traits import trait

jax.config.update("jax_enable_x64", False)


def _tree(key, shapes):
    keys = random.split(key, len(shapes))
    return {name: random.normal(k, shape) for k, (name, shape) in zip(keys, shapes.items())}


SHAPES = {"a": (3,), "b": (2, 2), "c": ()}


def _ctx(num_data):
    return metrics.StepContext(num_data=num_data)


def _flat(tree):
    return np.asarray(ravel_pytree(tree)[0], np.float64)


# ----------------------------------------------------------------------------- Monge
def _monge_at(V, alpha2):
    """The Monge preconditioner whose moving average is exactly V (decay 0, N = 1)."""
    metric = metrics.monge(alpha2=alpha2, decay=0.0)
    precond, state = metric.update(V, metric.init(V), V)
    return precond


@pytest.mark.parametrize("alpha2", [0.1, 1.0, 25.0])
def test_monge_sherman_morrison_identities(alpha2):
    V, v, w = (_tree(k, SHAPES) for k in random.split(random.PRNGKey(0), 3))
    precond = _monge_at(V, alpha2)
    Vf = _flat(V)
    G = np.eye(Vf.size) + alpha2 * np.outer(Vf, Vf)
    D = np.linalg.inv(G)
    # element-wise form == dense matrix form
    np.testing.assert_allclose(_flat(precond.drift(v)), D @ _flat(v), rtol=2e-5, atol=1e-6)
    # (D^{1/2})^2 = D
    np.testing.assert_allclose(
        _flat(precond.noise(precond.noise(w))), _flat(precond.drift(w)), rtol=2e-5, atol=1e-6
    )
    # D G = I
    Gw = jax.tree.map(lambda x, vv: x + alpha2 * float(Vf @ _flat(w)) * vv, w, V)
    np.testing.assert_allclose(_flat(precond.drift(Gw)), _flat(w), rtol=2e-5, atol=1e-5)


def test_monge_noise_coefficient_limit_at_zero():
    precond = _monge_at(jax.tree.map(jnp.zeros_like, _tree(random.PRNGKey(0), SHAPES)), 2.0)
    v = _tree(random.PRNGKey(1), SHAPES)
    np.testing.assert_allclose(_flat(precond.noise(v)), _flat(v), rtol=1e-6)


def test_monge_safeguard_uses_scaled_identity():
    # V = grad / N is tiny, so D is nearly I and |D grad| = |grad| = 50 exceeds the threshold
    metric = metrics.monge(alpha2=1.0, decay=0.0, max_drift_norm=1.0)
    grad = {"x": jnp.array([30.0, 40.0])}
    precond, _ = metric.update(grad, metric.init(grad), grad, _ctx(10**6))
    np.testing.assert_allclose(precond.drift(grad)["x"], np.array([30.0, 40.0]) / 50, rtol=1e-6)
    np.testing.assert_allclose(
        precond.noise(grad)["x"], np.array([30.0, 40.0]) / np.sqrt(50), rtol=1e-6
    )
    loose = metrics.monge(alpha2=1.0, decay=0.0, max_drift_norm=100.0)
    precond, _ = loose.update(grad, loose.init(grad), grad, _ctx(10**6))
    np.testing.assert_allclose(precond.drift(grad)["x"], [30.0, 40.0], rtol=1e-4)


def _auto_run(grads, num_data=7):
    metric = metrics.monge(alpha2="auto", decay=0.9)
    state = metric.init(grads[0])
    for g in grads:
        precond, state = metric.update(g, state, g, _ctx(num_data))
    return precond, state


def test_monge_auto_alpha2_is_one_over_the_average_squared_norm_and_scale_free():
    keys = random.split(random.PRNGKey(0), 30)
    grads = [_tree(k, SHAPES) for k in keys]
    precond, state = _auto_run(grads)
    assert isinstance(state, metrics.MongeAutoState) and int(state.count) == 30
    # by hand: V_t, alpha2 = AUTO_STRENGTH / debiased mean of |V_t|^2, D = (I + alpha2 V V^T)^-1
    V, m = np.zeros(_flat(grads[0]).size), 0.0
    for g in grads:
        V = 0.9 * V + 0.1 * _flat(g) / 7
        m = 0.99 * m + 0.01 * V @ V
    alpha2 = AUTO_STRENGTH / (m / (1 - 0.99**30))
    D = np.linalg.inv(np.eye(V.size) + alpha2 * np.outer(V, V))
    v = _tree(random.PRNGKey(1), SHAPES)
    np.testing.assert_allclose(_flat(precond.drift(v)), D @ _flat(v), rtol=1e-4, atol=1e-6)
    # the same metric whatever the gradient's scale (a fixed alpha2 is not)
    scaled, _ = _auto_run([jax.tree.map(lambda x: 1e3 * x, g) for g in grads])
    np.testing.assert_allclose(_flat(scaled.drift(v)), _flat(precond.drift(v)), rtol=1e-4,
                               atol=1e-6)
    # a constant gradient: alpha2 |V|^2 -> AUTO_STRENGTH, the step along V shrinks by 1 + that
    const = [grads[0]] * 2000
    precond, state = _auto_run(const)
    V = _flat(state.avg)
    np.testing.assert_allclose(_flat(precond.drift(state.avg)), V / (1 + AUTO_STRENGTH),
                               rtol=1e-3)


def test_monge_alpha2_must_be_a_number_or_auto():
    with pytest.raises(ValueError, match="`alpha2` must be a number >= 0 or 'auto', got 'Auto'"):
        metrics.monge(alpha2="Auto")
    with pytest.raises(ValueError, match="alpha2"):
        metrics.monge(alpha2=-1.0)


def test_monge_auto_alpha2_freezes_after_k_updates_and_gamma_needs_it():
    """``freeze_after=K``: the average of |V|^2 (so alpha2) stops after K updates while V
    goes on; without it a Γ correction is refused (the lagged Γ does not differentiate an
    alpha2 that follows the chain), and MongeSGLD(correction=...) freezes at AUTO_FREEZE."""
    from numpyro_sgrld.models.gaussian import standard_normal

    from numpyro_sgrld import SGMCMC, MongeSGLD
    from numpyro_sgrld.core.metrics.monge import AUTO_FREEZE

    keys = random.split(random.PRNGKey(0), 12)
    grads = [_tree(k, SHAPES) for k in keys]
    metric = metrics.monge(alpha2="auto", decay=0.9, freeze_after=5)
    free = metrics.monge(alpha2="auto", decay=0.9)
    state, free_state = metric.init(grads[0]), free.init(grads[0])
    for i, g in enumerate(grads):
        _, state = metric.update(g, state, g, _ctx(7))
        _, free_state = free.update(g, free_state, g, _ctx(7))
        if i == 4:
            at_five = state
    assert int(state.count) == 5 and float(state.sq_norm) == float(at_five.sq_norm)
    np.testing.assert_allclose(_flat(state.avg), _flat(free_state.avg), rtol=1e-6)  # V goes on
    assert float(free_state.sq_norm) != float(state.sq_norm)
    assert trait(metric, Lag).decay == 0.9 and trait(free, Lag) is None
    with pytest.raises(ValueError, match="freeze_after=K"):
        SGMCMC(standard_normal, 1e-3, metric=free, correction="exact")
    with pytest.raises(ValueError, match="drop freeze_after"):
        metrics.monge(alpha2=1.0, freeze_after=5)
    with pytest.raises(ValueError, match="freeze_after"):
        metrics.monge(alpha2="auto", freeze_after=0)
    kernel = MongeSGLD(standard_normal, step_size=1e-3, correction="exact")
    with pytest.warns(UserWarning, match=f"num_warmup >= {AUTO_FREEZE}"):
        kernel.init(random.PRNGKey(0), 10, model_args=(), model_kwargs={})


# ----------------------------------------------------------------------------- RMSprop
def test_rmsprop_against_hand_computation():
    metric = metrics.rmsprop(decay=0.9, eps=1e-3)
    g1, g2 = {"x": jnp.array([1.0, -20.0])}, {"x": jnp.array([3.0, 5.0])}
    state = metric.init(g1)
    _, state = metric.update(g1, state, g1, _ctx(10))
    precond, state = metric.update(g2, state, g1, _ctx(10))
    V = 0.9 * 0.1 * (np.array([1.0, -20.0]) / 10) ** 2 + 0.1 * (np.array([3.0, 5.0]) / 10) ** 2
    D = 1 / (1e-3 + np.sqrt(V / (1 - 0.9**2)))
    v = {"x": jnp.array([2.0, 7.0])}
    np.testing.assert_allclose(precond.drift(v)["x"], D * np.array([2.0, 7.0]), rtol=1e-5)
    np.testing.assert_allclose(precond.noise(v)["x"], np.sqrt(D) * np.array([2.0, 7.0]), rtol=1e-5)
    no_bc = metrics.rmsprop(decay=0.9, eps=1e-3, bias_correction=False)
    precond, _ = no_bc.update(g1, no_bc.init(g1), g1, _ctx(10))
    expected = 1 / (1e-3 + np.sqrt(0.1 * (np.array([1.0, -20.0]) / 10) ** 2))
    np.testing.assert_allclose(precond.drift({"x": jnp.ones(2)})["x"], expected, rtol=1e-5)


# ----------------------------------------------------------------------------- Wenzel
def test_wenzel_against_hand_computation():
    metric = metrics.wenzel(decay=0.5, eps=0.0, update_interval=2)
    grad = {"w": jnp.array([[2.0, 4.0], [0.0, 2.0]]), "b": jnp.array([1.0, 1.0])}
    state = metric.init(grad)
    precond, state = metric.update(grad, state, grad, _ctx(2))
    ones = jax.tree.map(jnp.ones_like, grad)
    for leaf in jax.tree.leaves(precond.drift(ones)):  # before the first refresh: identity
        np.testing.assert_allclose(leaf, 1.0)
    precond, state = metric.update(grad, state, grad, _ctx(2))
    s_w = 0.25 * 1 + 0.75 * np.mean((np.array([2.0, 4.0, 0.0, 2.0]) / 2) ** 2)
    s_b = 0.25 * 1 + 0.75 * np.mean((np.array([1.0, 1.0]) / 2) ** 2)
    smallest = min(s_w, s_b)
    out = precond.drift(ones)
    np.testing.assert_allclose(out["w"], (s_w / smallest) ** -0.5, rtol=1e-6)
    np.testing.assert_allclose(out["b"], (s_b / smallest) ** -0.5, rtol=1e-6)
    np.testing.assert_allclose(precond.noise(ones)["w"], (s_w / smallest) ** -0.25, rtol=1e-6)


# ----------------------------------------------------------------------------- Shampoo
def _inv_root(L, eps, power):
    w, q = eigh(np.asarray(L, np.float64))
    w = np.maximum(w, 0)
    return (q * (w + eps * w.max()) ** (-1.0 / power)) @ q.T


def test_shampoo_block_shapes():
    assert metrics.shampoo_block_shapes((2, 1, 3, 5)) == ((30,), (30,), (1,))
    assert metrics.shampoo_block_shapes((784, 400)) == ((784, 400), (112, 100), (7, 4))
    # equal blocks; padding only when the block count does not divide the size
    assert metrics.shampoo_block_shapes((401,), 128) == ((401,), (101,), (4,))
    assert metrics.shampoo_block_shapes((300, 10), 128) == ((300, 10), (100, 10), (3, 1))
    assert metrics.shampoo_block_shapes((3, 3, 64, 128)) == ((9, 64, 128), (9, 64, 128), (1, 1, 1))
    assert metrics.shampoo_block_shapes(()) == ((1,), (1,), (1,))


def test_shampoo_matrix_site_equals_explicit_kronecker_product():
    eps, decay = 1e-3, 0.5
    # block_size 5 keeps the 3 x 5 matrix a matrix (3 * 5 > 5: no merging, no splitting)
    metric = metrics.shampoo(decay=decay, eps=eps, update_interval=1, block_size=5)
    g = {"W": random.normal(random.PRNGKey(0), (3, 5)), "v": random.normal(random.PRNGKey(1), (4,))}
    precond, _ = metric.update(g, metric.init(g), g, _ctx(4))
    G = np.asarray(g["W"], np.float64) / 4
    L = decay * eps * np.eye(3) + (1 - decay) * G @ G.T
    R = decay * eps * np.eye(5) + (1 - decay) * G.T @ G
    PL, PR = (
        _inv_root(L, eps, 8) @ _inv_root(L, eps, 8),
        _inv_root(R, eps, 8) @ _inv_root(R, eps, 8),
    )
    D = np.kron(PL, PR)  # acts on the row-major vec of a 3x5 matrix
    x = {"W": random.normal(random.PRNGKey(2), (3, 5)), "v": jnp.ones(4)}
    got = np.asarray(precond.drift(x)["W"], np.float64).ravel()
    np.testing.assert_allclose(got, D @ np.asarray(x["W"]).ravel(), rtol=1e-3, atol=1e-4)
    noise = np.asarray(precond.noise(x)["W"], np.float64)
    NL, NR = _inv_root(L, eps, 8), _inv_root(R, eps, 8)
    np.testing.assert_allclose(noise, NL @ np.asarray(x["W"]) @ NR, rtol=1e-3, atol=1e-4)
    # a vector gets the full-matrix inverse square root
    gv = np.asarray(g["v"], np.float64) / 4
    Lv = decay * eps * np.eye(4) + (1 - decay) * np.outer(gv, gv)
    np.testing.assert_allclose(
        precond.drift(x)["v"], _inv_root(Lv, eps, 2) @ np.ones(4), rtol=1e-3, atol=1e-3
    )


def test_shampoo_blocks_are_independent_tensors():
    eps = 1e-2
    metric = metrics.shampoo(decay=0.0, eps=eps, update_interval=1, block_size=4)
    g = {"v": random.normal(random.PRNGKey(0), (10,))}
    precond, _ = metric.update(g, metric.init(g), g)
    x = {"v": random.normal(random.PRNGKey(1), (10,))}
    got = np.asarray(precond.drift(x)["v"])
    gv, xv = np.asarray(g["v"], np.float64), np.asarray(x["v"], np.float64)
    for lo, hi in ((0, 4), (4, 8), (8, 10)):
        P = _inv_root(np.outer(gv[lo:hi], gv[lo:hi]), eps, 2)
        np.testing.assert_allclose(got[lo:hi], P @ xv[lo:hi], rtol=2e-3, atol=2e-3)


def test_shampoo_is_identity_until_the_first_root_update():
    metric = metrics.shampoo(decay=0.9, eps=1e-4, update_interval=3)
    g = {"W": random.normal(random.PRNGKey(0), (3, 2))}
    state = metric.init(g)
    for step in range(1, 4):
        precond, state = metric.update(g, state, g)
        out = precond.drift(g)["W"]
        if step < 3:
            np.testing.assert_allclose(out, g["W"])
        else:
            assert not np.allclose(out, g["W"])


def test_shampoo_warm_start_is_the_curvatures_statistic_with_roots_at_once():
    """Warm-started from a curvature c (what the squared per-datum gradient times N^2
    averages to): a matrix site's L and R are diag(row sums of |c|) / N^2 and diag(column
    sums) / N^2, a vector's diag(|c|) / N^2, and the preconditioner is their roots before any
    recomputation (every 3 steps here); a step then decays the warm start by the decay."""
    eps, decay, n = 1e-6, 0.9, 4
    metric = metrics.shampoo(decay=decay, eps=eps, update_interval=3, block_size=5)
    warm = trait(metric, metrics.WarmStart)
    c = {"W": jnp.array([[1.0, 2.0, 0.5], [3.0, -1.0, 4.0]]), "v": jnp.array([2.0, 8.0])}
    state = warm.fn(metric.init(c), c, _ctx(n))
    cw = np.abs(np.asarray(c["W"], np.float64)) / n**2
    L, R = np.diag(cw.sum(1)) + eps * np.eye(2), np.diag(cw.sum(0)) + eps * np.eye(3)
    Lv = np.diag(np.asarray(c["v"], np.float64) / n**2) + eps * np.eye(2)
    zero = jax.tree.map(jnp.zeros_like, c)
    precond, later = metric.update(zero, state, zero, _ctx(n))  # no recomputation at step 1
    x = {"W": random.normal(random.PRNGKey(2), (2, 3)), "v": jnp.ones(2)}
    PL, PR = (_inv_root(M, eps, 8) @ _inv_root(M, eps, 8) for M in (L, R))
    np.testing.assert_allclose(precond.drift(x)["W"], PL @ np.asarray(x["W"]) @ PR, rtol=1e-4)
    np.testing.assert_allclose(precond.drift(x)["v"], _inv_root(Lv, eps, 2) @ np.ones(2),
                               rtol=1e-4)
    np.testing.assert_allclose(later.stats["W"][0][0], decay * np.diag(cw.sum(1)), rtol=1e-6)


# ----------------------------------------------------------------------------- Γ
def _quadratic(seed, d=5, num_data=7):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(d, d))
    A = jnp.asarray(A @ A.T / d + np.eye(d), jnp.float32)
    b = jnp.asarray(rng.normal(size=d), jnp.float32)

    def unravel(x):
        return {"p": x[:2], "q": x[2:]}

    def grad_fn(theta):  # gradient of N * (x'Ax/2 + b'x): per-datum gradient A x + b, H = A
        x = ravel_pytree(theta)[0]
        return unravel(num_data * (A @ x + b))

    theta = unravel(jnp.asarray(rng.normal(size=d), jnp.float32))
    prev = unravel(jnp.asarray(rng.normal(size=d) ** 2, jnp.float32))
    return np.asarray(A, np.float64), grad_fn, theta, prev, num_data


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_correction_matches_psgld_closed_form(seed):
    A, grad_fn, theta, prev, N = _quadratic(seed)
    metric = metrics.rmsprop(decay=0.7, eps=0.1, bias_correction=False)
    state = metrics.RMSpropState(prev, jnp.zeros((), jnp.int32))
    gamma = _flat(correction_drift("exact", None, theta, grad_fn, metric, state, _ctx(N)))
    g = _flat(grad_fn(theta)) / N
    V = 0.7 * _flat(prev) + 0.3 * g**2
    D = 1 / (0.1 + np.sqrt(V))
    expected = -(D**2) * g * np.diag(A) / np.sqrt(V)
    np.testing.assert_allclose(gamma, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_exact_correction_matches_monge_closed_form(seed):
    A, grad_fn, theta, prev, N = _quadratic(seed)
    alpha2, decay = 0.8, 0.6
    metric = metrics.monge(alpha2=alpha2, decay=decay)
    state = metrics.MongeState(prev)
    gamma = _flat(correction_drift("exact", None, theta, grad_fn, metric, state, _ctx(N)))
    V = decay * _flat(prev) + (1 - decay) * _flat(grad_fn(theta)) / N
    c = alpha2 / (1 + alpha2 * V @ V)
    expected = -c * (A @ V + np.trace(A) * V - 2 * c * (V @ A @ V) * V)
    np.testing.assert_allclose(gamma, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "name",
    [
        "monge",
        pytest.param("rmsprop", marks=pytest.mark.slow),
        pytest.param("shampoo", marks=pytest.mark.slow),
    ],
)
def test_hutchinson_is_unbiased_for_exact(name):
    A, grad_fn, theta, prev, N = _quadratic(3)
    if name == "rmsprop":
        metric = metrics.rmsprop(decay=0.7, eps=0.1)
        state = metrics.RMSpropState(prev, jnp.array(3, jnp.int32))
    elif name == "monge":
        metric = metrics.monge(alpha2=0.8, decay=0.6)
        state = metrics.MongeState(prev)
    else:
        metric = metrics.shampoo(decay=0.5, eps=0.1, update_interval=1)
        state = metric.init(theta)
    exact = _flat(correction_drift("exact", None, theta, grad_fn, metric, state, _ctx(N)))
    draws = jax.vmap(
        lambda k: ravel_pytree(
            correction_drift("hutchinson", k, theta, grad_fn, metric, state, _ctx(N))
        )[0]
    )(random.split(random.PRNGKey(0), 20000))
    draws = np.asarray(draws, np.float64)
    se = draws.std(0) / np.sqrt(draws.shape[0])
    assert np.all(np.abs(draws.mean(0) - exact) <= 4 * se + 1e-6), (draws.mean(0), exact, se)
    assert np.any(draws.std(0) > 0)  # the estimator is random (otherwise the test is vacuous)


def test_correction_terms_give_the_preconditioned_curvature_and_metric_diagonal():
    """Exact form on RMSprop: diag(D H) = D_ii A_ii and diag(D) = D_ii; Hutchinson's z-weighted
    estimates of both are unbiased."""
    A, grad_fn, theta, prev, N = _quadratic(4)
    metric = metrics.rmsprop(decay=0.7, eps=0.1, bias_correction=False)
    state = metrics.RMSpropState(prev, jnp.zeros((), jnp.int32))
    terms = correction_terms("exact", None, theta, grad_fn, metric, state, _ctx(N))
    g = _flat(grad_fn(theta)) / N
    D = 1 / (0.1 + np.sqrt(0.7 * _flat(prev) + 0.3 * g**2))
    np.testing.assert_allclose(terms.metric_diag, D, rtol=1e-5)
    np.testing.assert_allclose(terms.curvature, D * N * np.diag(A), rtol=1e-4)
    draws = jax.vmap(
        lambda k: correction_terms("hutchinson", k, theta, grad_fn, metric, state, _ctx(N))
    )(random.split(random.PRNGKey(0), 20000))
    curvature = np.asarray(draws.curvature, np.float64)
    se = curvature.std(0) / np.sqrt(len(curvature))
    assert np.all(np.abs(curvature.mean(0) - D * N * np.diag(A)) <= 4 * se + 1e-6)
    np.testing.assert_allclose(np.asarray(draws.metric_diag)[0], D, rtol=1e-5)  # diagonal D


def test_lag_response_limits_and_series():
    for decay in (0.0, 0.5, 0.9, 0.99):
        for order in (1, 2):
            assert float(lag_response(0.0, decay, order)) == pytest.approx(1.0)
            assert float(lag_response(1e3, decay, order)) == pytest.approx(1 - decay)
            r = 0.03
            series = sum((1 - decay) * decay**m * np.exp(-order * r * m) for m in range(20000))
            assert float(lag_response(r, decay, order)) == pytest.approx(series, rel=1e-5)


@pytest.mark.parametrize("order", [1, 2])
def test_lag_response_is_the_moving_average_regression_on_an_ou_process(order):
    """A stationary AR(1) x relaxing by e^{-r} per step, and the moving average S of x^k: over
    independent chains, the least-squares slope of S on the current x^k is kappa (the lagged
    correction's premise). Tolerance: 4 of the slope's standard errors (chains independent)."""
    rng = np.random.default_rng(0)
    decay, r, chains = 0.9, 0.05, 40000
    a = np.exp(-r)
    x = rng.normal(size=chains)
    s = x**order
    for _ in range(400):  # about 20 relaxation times of x and 40 memories of S
        x = a * x + np.sqrt(1 - a * a) * rng.normal(size=chains)
        s = decay * s + (1 - decay) * x**order
    u = x**order
    design = np.stack([np.ones(chains), u], axis=1)
    coef, *_ = np.linalg.lstsq(design, s, rcond=None)
    resid = s - design @ coef
    cov = resid.var() * np.linalg.inv(design.T @ design)
    slope, se = coef[1], np.sqrt(cov[1, 1])
    kappa = float(lag_response(r, decay, order))
    assert abs(slope - kappa) <= 4 * se, (slope, kappa, se)
    assert abs(slope - 1.0) > 10 * se  # the full (instant) response is ruled out


def test_lagged_correction_forms():
    """``instant`` is Rensmeyer & Niggemann's Γ; ``lagged`` tends to it as h -> 0 and is
    kappa * Γ (tamed) otherwise, never larger in size."""
    A, grad_fn, theta, prev, N = _quadratic(5)
    metric = metrics.rmsprop(decay=0.9, eps=0.1, bias_correction=False)
    state = metrics.RMSpropState(prev, jnp.zeros((), jnp.int32))
    full = _flat(correction_drift("exact", None, theta, grad_fn, metric, state, _ctx(N)))
    start = init_correction(theta)
    instant, _ = lagged_correction(
        "exact",
        None,
        theta,
        grad_fn,
        metric,
        state,
        start,
        0.1,
        1.0,
        form="instant",
        context=_ctx(N),
    )
    np.testing.assert_allclose(_flat(instant), full, rtol=1e-6)
    tiny, _ = lagged_correction(
        "exact", None, theta, grad_fn, metric, state, start, 1e-9, 1.0, context=_ctx(N)
    )
    np.testing.assert_allclose(_flat(tiny), full, rtol=1e-3)
    lagged, new = lagged_correction(
        "exact", None, theta, grad_fn, metric, state, start, 0.1, 1.0, context=_ctx(N)
    )
    terms = correction_terms("exact", None, theta, grad_fn, metric, state, _ctx(N))
    kappa = lag_response(0.1 * np.abs(np.asarray(terms.curvature)), 0.9, 2)
    assert np.all(np.abs(_flat(lagged)) <= np.abs(kappa * full) * (1 + 1e-6))
    assert np.all(np.abs(_flat(lagged)) < np.abs(full))
    assert int(new.count) == 1


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "factory",
    [
        lambda: metrics.rmsprop(decay=1.0),
        lambda: metrics.rmsprop(decay=-0.1),
        lambda: metrics.monge(decay=1.5),
        lambda: metrics.shampoo(decay=1.0),
        lambda: metrics.wenzel(decay=2.0),
    ],
)
def test_decay_outside_unit_interval(factory):
    with pytest.raises(ValueError, match=r"`decay` must be a finite number in \[0, 1\)"):
        factory()


def test_other_bad_metric_parameters():
    with pytest.raises(ValueError, match="eps"):
        metrics.rmsprop(eps=-1.0)
    with pytest.raises(ValueError, match="alpha2"):
        metrics.monge(alpha2=-1.0)
    with pytest.raises(ValueError, match="max_drift_norm"):
        metrics.monge(max_drift_norm=0.0)
    with pytest.raises(ValueError, match="update_interval"):
        metrics.shampoo(update_interval=0)
    with pytest.raises(ValueError, match="block_size"):
        metrics.shampoo(block_size=0)


_CONCURRENT_ROOTS = """
import jax, jax.numpy as jnp
from jax import lax, random
from numpyro_sgrld import metrics
m = metrics.shampoo(update_interval=2, block_size=128)
pos = {k: jnp.zeros((256, 256)) for k in "abcdefgh"}
def body(state, key):
    keys = dict(zip(pos, random.split(key, len(pos))))
    g = jax.tree.map(lambda x, k: random.normal(k, x.shape), pos, keys)
    _, state = m.update(g, state, pos)
    return state, None
state, _ = jax.jit(lambda s: lax.scan(body, s, random.split(random.PRNGKey(0), 100)))(m.init(pos))
print(float(jnp.sum(state.roots["a"][0])))
"""


@pytest.mark.slow  # a 100-step Shampoo run on 8 sites of 256 x 256
def test_shampoo_roots_of_many_sites_do_not_deadlock():
    """Several batched ``eigh`` at once can wedge XLA:CPU's thread pool; the roots are chained."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _CONCURRENT_ROOTS], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert np.isfinite(float(out.stdout.strip().splitlines()[-1]))


# --------------------------------------------------------------------------- whitened
def _whitened_setup(factor):
    position = {"a": jnp.array([0.3, -1.2]), "b": jnp.array(0.7)}
    grad = {"a": jnp.array([2.0, -0.5]), "b": jnp.array(1.5)}
    metric = metrics.whitened(metrics.rmsprop(decay=0.5, eps=1e-3))
    state = metric.init(position)
    return metric, state._replace(factor=factor), position, grad


def _matrix(linear, unravel, d):
    return np.stack([np.asarray(ravel_pytree(linear(unravel(e)))[0]) for e in np.eye(d)], 1)


def test_whitened_is_the_adaptive_metric_in_the_learnt_coordinates():
    """D = L D_z(L^T g) L^T and R = L R_z, computed by hand for RMSprop in the coordinates
    L^{-1} theta; R R^T = D and noise_transpose is R^T."""
    L = jnp.array([[1.0, 0.0, 0.0], [0.5, 2.0, 0.0], [-0.3, 0.2, 0.5]]) @ jnp.array(
        [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # a root, not triangular
    metric, state, position, grad = _whitened_setup(L)
    precond, new = metric.update(grad, state, position)
    flat_g, unravel = ravel_pytree(grad)
    g_z = np.asarray(L).T @ np.asarray(flat_g)
    v = 0.5 * g_z**2 / 0.5  # one update of the average, divided by 1 - decay^1
    d_z = 1.0 / (1e-3 + np.sqrt(v))
    expected = np.asarray(L) @ np.diag(d_z) @ np.asarray(L).T
    D = _matrix(precond.drift, unravel, 3)
    R = _matrix(precond.noise, unravel, 3)
    Rt = _matrix(precond.noise_transpose, unravel, 3)
    np.testing.assert_allclose(D, expected, rtol=1e-5)
    np.testing.assert_allclose(R @ R.T, expected, rtol=1e-5)
    np.testing.assert_allclose(Rt, R.T, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ravel_pytree(new.inner.square_avg)[0]), 0.5 * g_z**2,
                               rtol=1e-6)


def test_whitened_with_the_identity_or_no_factor_is_the_adaptive_metric():
    inner = metrics.rmsprop(decay=0.5, eps=1e-3)
    for factor in (jnp.eye(3), None):
        metric, state, position, grad = _whitened_setup(factor)
        precond, _ = metric.update(grad, state, position)
        plain, _ = inner.update(grad, inner.init(position), position)
        unravel = ravel_pytree(grad)[1]
        np.testing.assert_allclose(_matrix(precond.drift, unravel, 3),
                                   _matrix(plain.drift, unravel, 3), rtol=1e-6)
    big = metrics.whitened(inner, dense_max_dim=2).init({"a": jnp.zeros(3)})
    assert big.factor is None


def test_whitened_restarts_its_statistics_and_refuses_a_metric_reading_aux():
    metric, state, position, grad = _whitened_setup(jnp.eye(3))
    _, state = metric.update(grad, state, position)
    assert int(state.inner.count) == 1
    fresh = trait(metric, metrics.Restart).fn(state, position)
    assert int(fresh.inner.count) == 0
    np.testing.assert_allclose(np.asarray(ravel_pytree(fresh.inner.floor)[0]), 1.0)
    assert metrics.whitened(metrics.monge()).name == "monge"
    with pytest.raises(ValueError, match="'bnp' reads the model's auxiliary values"):
        metrics.whitened(metrics.bnp())
