"""The warm-up's pieces: the schedule, the learnt preconditioner, control variates switched on
where they pay, and the verdict at the end of a run."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, init_to_value

import numpyro_sgrld as ns
from numpyro_sgrld.core.equipartition import Temperatures
from numpyro_sgrld.core.gradients import Target, activate_control_variates, warmup_control_variates
from numpyro_sgrld.core.metrics.constant import DENSE_MAX_DIM
from numpyro_sgrld.verdict.judge import (
    MAX_RHAT,
    MAX_STEP_SPREAD,
    MIN_ESS,
    RUNAWAY_READING,
    verdict,
)
from numpyro_sgrld.warmup import (
    final_window_start,
    first_window_start,
    init_preconditioner,
    preconditioner_scale,
    update_preconditioner,
    window_ends,
)
from numpyro_sgrld.warmup.preconditioner import SHRINK_DRAWS, laplace_root


def test_the_windows_double_and_end_where_the_final_window_begins():
    for w in (200, 1000, 2000, 2001):
        ends = np.asarray(window_ends(w))
        start, stop = first_window_start(w), final_window_start(w)
        lengths = np.diff(np.concatenate([[start], ends]))
        base = (stop - start) // 15
        assert list(lengths[:3]) == [base, 2 * base, 4 * base]
        assert ends[-1] == stop == w - w // 5 and start == w // 5


def test_the_preconditioner_is_the_windows_shrunk_variance_or_the_curvature_floor():
    rng = np.random.default_rng(0)
    draws = rng.normal(size=(50, 3)) * np.array([1.0, 2.0, 3.0])
    curvature = np.array([0.5, 100.0, -1.0]) + 0.01 * rng.normal(size=(50, 3))
    state = init_preconditioner({"x": jnp.zeros(3)}, 1000)
    for x, c in zip(draws, curvature):
        state = update_preconditioner(state, {"x": jnp.asarray(x)}, {"x": jnp.asarray(c)})
    current = np.array([1.0, 1.0, 1.0])
    scale = np.asarray(preconditioner_scale(state, {"x": jnp.asarray(current)})["x"])
    n = len(draws)
    shrunk = (n * draws.var(axis=0, ddof=1) + SHRINK_DRAWS * current) / (n + SHRINK_DRAWS)
    # coordinate 0: floor 1/0.5 = 2 above the shrunk variance ~1; 1: the variance wins over
    # 1/100; 2: curvature not positive, no floor
    expected = np.array([1.0 / curvature[:, 0].mean(), shrunk[1], shrunk[2]])
    np.testing.assert_allclose(scale, expected, rtol=1e-5)


def _scaled_gaussian():
    sds = jnp.array([0.01, 0.3, 10.0])

    def model():
        numpyro.sample("x", dist.Normal(0.0, sds).to_event(1))

    return model, sds


def test_sgld_learns_a_preconditioner_at_least_the_conditional_variances():
    """On an independent Gaussian the Hutchinson estimate of the diagonal is exact, so the
    learnt scale is at least each coordinate's variance (the floor), and the adapted chain
    samples all three scales."""
    model, sds = _scaled_gaussian()
    mcmc = MCMC(ns.SGLD(model), num_warmup=1000, num_samples=4000, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0))
    scale = np.asarray(mcmc.last_state.sampler_state.metric.scale["x"])
    assert np.all(scale >= (np.asarray(sds) ** 2) * (1 - 1e-5))
    x = np.asarray(mcmc.get_samples()["x"])
    # the bias target (10 % variance at most) and the MCSE of the sd from the ESS
    ess = np.asarray(numpyro.diagnostics.effective_sample_size(
        np.asarray(mcmc.get_samples(group_by_chain=True)["x"])))
    ratio = x.std(0) / np.asarray(sds)
    z = (ratio - 1.0) / (1.0 / np.sqrt(2 * ess))
    assert np.all(ratio <= np.sqrt(1.1) + 4.0 / np.sqrt(2 * ess)), (ratio, ess)
    assert np.all(z > -4.0), (ratio, ess)


def test_laplace_root_is_the_inverse_hessian_or_the_absolute_value_of_the_scaled_one():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(4, 4))
    spd = a @ a.T + 0.1 * np.eye(4)
    fallback = np.zeros((4, 4))
    root = np.asarray(laplace_root(jnp.asarray(spd), fallback), np.float64)
    np.testing.assert_allclose(root @ root.T, np.linalg.inv(spd), rtol=1e-3, atol=1e-4)
    lam, vec = np.linalg.eigh(spd)
    indefinite = vec @ np.diag(lam * np.array([-1, 1, 1, 1])) @ vec.T
    root = np.asarray(laplace_root(jnp.asarray(indefinite), fallback), np.float64)
    scale = np.diag(1 / np.sqrt(np.abs(np.diag(indefinite))))
    lam, vec = np.linalg.eigh(scale @ indefinite @ scale)
    expected = scale @ vec @ np.diag(1 / np.abs(lam)) @ vec.T @ scale
    np.testing.assert_allclose(root @ root.T, expected, rtol=1e-3, atol=1e-4)
    nan = np.full((4, 4), np.nan)
    np.testing.assert_array_equal(laplace_root(jnp.asarray(nan), fallback), fallback)


def test_a_small_model_learns_the_dense_inverse_hessian_and_a_large_one_a_diagonal():
    """On a correlated Gaussian (correlation 0.95: a diagonal metric leaves a condition
    number of 39) the Hessian is constant, so the learnt metric is the covariance itself."""
    cov = np.array([[1.0, 0.95 * 3.0], [0.95 * 3.0, 9.0]])

    def model():
        numpyro.sample("x", dist.MultivariateNormal(jnp.zeros(2), jnp.asarray(cov)))

    mcmc = MCMC(ns.SGLD(model), num_warmup=500, num_samples=200, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0))
    factor = np.asarray(mcmc.last_state.sampler_state.metric.factor, np.float64)
    np.testing.assert_allclose(factor @ factor.T, cov, rtol=1e-3)
    big = ns.metrics.learnt().init({"x": jnp.zeros(DENSE_MAX_DIM + 1)})
    small = ns.metrics.learnt().init({"x": jnp.zeros(DENSE_MAX_DIM)})
    assert big.factor is None and small.factor.shape == (DENSE_MAX_DIM, DENSE_MAX_DIM)


def _logistic(num_data, subsample):
    X = jax.random.normal(jax.random.PRNGKey(1), (num_data, 3))
    y = (X @ jnp.array([1.0, -1.0, 0.5]) > 0).astype(jnp.float32)

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("data", X.shape[0], subsample_size=subsample) as idx:
            numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])

    return model, X, y


@pytest.fixture(scope="module")
def default_run():
    """``SGLD(model)`` as a user writes it, 2 vectorised chains, on a minibatch of 20 of 2000."""
    model, X, y = _logistic(2000, 20)
    mcmc = MCMC(ns.SGLD(model), num_warmup=400, num_samples=200, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), X, y)
    return mcmc, X, y


def test_control_variates_switch_on_where_they_cut_the_noise_and_not_on_full_batches(
        default_run):
    mcmc, _, _ = default_run
    assert mcmc.sampler.gradient.name == "warmup_control_variates"
    assert np.all(np.asarray(mcmc.last_state.gradient_state.active))
    model, X, y = _logistic(2000, None)
    mcmc = MCMC(ns.SGLD(model), num_warmup=400, num_samples=10, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, y)
    assert not bool(mcmc.last_state.gradient_state.active)


def test_the_switch_compares_the_noise_with_and_without_the_centre():
    """At the centre itself the centred gradient has no noise: it is switched on; far from
    it (where the centred noise exceeds a quarter of the plain one) it is not."""
    model, X, y = _logistic(2000, 20)
    kernel = ns.SGLD(model)
    kernel.init(jax.random.PRNGKey(0), 400, None, (X, y), {})
    from numpyro_sgrld.sampler import parts

    target = parts.target(kernel.setup, kernel.model, kernel._potential_fn, None, (X, y),
                                {}, kernel._draw, num_data=kernel.num_data)
    state = warmup_control_variates().init({"w": jnp.zeros(3)}, None, target)

    def draw(key):
        return target.draw(key, None)[0]

    near = activate_control_variates(state, {"w": jnp.ones(3)}, {"w": jnp.ones(3)}, target,
                                     draw, lambda t: t, jax.random.PRNGKey(2))
    far = activate_control_variates(state, {"w": -30 * jnp.ones(3)}, {"w": jnp.ones(3)},
                                    target, draw, lambda t: t, jax.random.PRNGKey(2))
    assert bool(near.active) and not bool(far.active)
    assert isinstance(target, Target)


def test_the_verdict_trusts_independent_chains_and_not_separated_ones():
    rng = np.random.default_rng(0)
    good = verdict({"x": rng.normal(size=(4, 1000, 2))})
    assert good.trusted and good.max_rhat <= MAX_RHAT and good.min_ess >= MIN_ESS
    apart = rng.normal(size=(4, 1000)) + np.arange(4)[:, None]
    bad = verdict({"x": apart}, num_steps=1000)
    assert not bad.trusted and bad.max_rhat > 1.5 and bad.more_steps > 10
    assert "num_samples of at least" in bad.problems[0]


def test_the_verdict_refuses_chains_whose_adapted_steps_are_far_apart():
    model, X, y = _logistic(2000, 20)
    draws = {"x": np.random.default_rng(0).normal(size=(4, 1000))}
    kernel = ns.SGLD(model)
    apart = verdict(draws, kernel=kernel, step_size=[1.0, 1.0, 1.0, 1.01 * MAX_STEP_SPREAD])
    assert not apart.trusted and "adapted steps" in apart.problems[0]
    assert verdict(draws, kernel=kernel, step_size=[1.0, MAX_STEP_SPREAD]).trusted
    fixed = ns.SGLD(model, step_size=1e-3)  # a given step is the user's: no spread to judge
    assert verdict(draws, kernel=fixed, step_size=[1.0, 100.0]).trusted
    # measured instead: each chain's readings in the band make the spread a note; one chain
    # outside it (its larger step inflated its law) is a problem, named by chain
    steps = [1.0, 1.0, 1.0, 1.01 * MAX_STEP_SPREAD]
    right = _readings(1.05)._replace(chains=(_readings(1.05),) * 4)
    v = verdict(draws, kernel=kernel, step_size=steps, temperatures=right)
    assert v.trusted and any("apart" in n for n in v.notes)
    hot = right._replace(chains=(_readings(1.0),) * 3 + (_readings(1.5),))
    v = verdict(draws, kernel=kernel, step_size=steps, temperatures=hot)
    assert not v.trusted and any("(chain 3)" in p for p in v.problems)


def _readings(value, se=0.01):
    return Temperatures(("x",), np.array([value]), np.array([se]), value, se, 10_000)


def test_the_verdict_judges_what_the_run_measured_not_the_kernels_name():
    """No kernel warns for what it is: an adaptive preset whose readings are in the band is
    trusted, and one outside it is told what fits that kernel."""
    model, X, y = _logistic(2000, 20)
    rng = np.random.default_rng(0)
    kernels = (ns.PSGLD(model), ns.MongeSGLD(model), ns.AdamSGLD(model), ns.WenzelSGLD(model),
               ns.SGLD(model), ns.SGLD(model, step_size=1e-3))
    for kernel in kernels:
        v = verdict({"x": rng.normal(size=(4, 500))}, kernel=kernel, step_size=[1e-3],
                    temperatures=_readings(1.12))
        assert v.trusted and not v.problems, kernel
        assert not any("Γ" in n or "bias" in n.split("(")[0] for n in v.notes[:-1]), kernel
    advice = {}
    for kernel in kernels:
        v = verdict({"x": rng.normal(size=(4, 500))}, kernel=kernel, step_size=[1e-3],
                    temperatures=_readings(1.6))
        assert not v.trusted and "equipartition" in v.problems[0], kernel
        advice[kernel] = v.problems[0]
    assert "correction='exact'" in advice[kernels[0]] and "correction='exact'" in advice[kernels[1]]
    assert "correction='exact'" not in advice[kernels[4]] and "target_bias" in advice[kernels[4]]
    assert "smaller step_size" in advice[kernels[5]]
    assert "SGLD or SGHMC" in advice[kernels[2]] and "SGLD or SGHMC" in advice[kernels[3]]
    # a thermostat that had too little time to settle is told so, with the time it needs: its
    # relaxation time xi/T from the chains' last thermostat value
    sgnht = verdict({"x": rng.normal(size=(4, 500))}, num_steps=20_000,
                    kernel=ns.SGNHT(model, step_size=1e-3), step_size=[1e-3] * 4,
                    temperatures=_readings(1.5), thermostat=[150.0, 190.0, 120.0, 170.0])
    assert "thermostat ends at ξ = 190" in sgnht.problems[0]
    assert "sampled for 20" in sgnht.problems[0] and "48x as many" in sgnht.problems[0]
    for steps, xi in ((200_000, [19.0] * 4), (20_000, None)):
        settled = verdict({"x": rng.normal(size=(4, 500))}, num_steps=steps,
                          kernel=ns.SGNHT(model, step_size=1e-3), step_size=[1e-3] * 4,
                          temperatures=_readings(1.5), thermostat=xi)
        assert "thermostat" not in settled.problems[0]
        assert "smaller step_size" in settled.problems[0]
    cold = verdict({"x": rng.normal(size=(4, 500))}, kernel=kernels[0], step_size=[1e-3],
                   temperatures=_readings(0.5))
    assert not cold.trusted and "equilibrium" in cold.problems[0]
    # outside the band but within the noise: not flagged
    noisy = verdict({"x": rng.normal(size=(4, 500))}, kernel=kernels[0], step_size=[1e-3],
                    temperatures=_readings(1.4, se=0.2))
    assert noisy.trusted


def test_the_fast_loop_warns_at_the_end_of_a_run_that_has_not_mixed():
    model, X, y = _logistic(2000, 20)
    with ns.fast_sampling_loop():
        mcmc = MCMC(ns.SGLD(model, step_size=1e-7), num_warmup=0, num_samples=400,
                    num_chains=2, chain_method="vectorized", progress_bar=False)
        with pytest.warns(UserWarning, match="cannot be trusted"):
            mcmc.run(jax.random.PRNGKey(0), X, y)
    assert not ns.check(mcmc, warn=False).trusted


@pytest.mark.parametrize("num_samples", [10, 100])
def test_numpyros_own_loop_judges_a_short_run_too(num_samples):
    """A run with fewer steps than the moments' batches (64) is judged on the batches it
    filled: a chain of 10 or 100 steps cannot show an ESS of 100, and says so."""
    model, X, y = _logistic(2000, 20)
    mcmc = MCMC(ns.SGLD(model, step_size=1e-3), num_warmup=0, num_samples=num_samples,
                num_chains=2, chain_method="vectorized", progress_bar=False)
    with pytest.warns(UserWarning, match="cannot be trusted"):
        mcmc.run(jax.random.PRNGKey(0), X, y)


@pytest.mark.parametrize("chain_method", ["vectorized", "sequential"])
def test_numpyros_own_loop_warns_at_the_end_with_the_verdict_of_the_draws(chain_method):
    """The streaming moments' split R-hat is the draws' exactly (every step kept), and the
    batch-means ESS agrees with the draws' to its own precision."""
    from numpyro_sgrld.sampler.compat import fast_sampling_loop_enabled

    assert not fast_sampling_loop_enabled()
    model, X, y = _logistic(2000, 20)
    mcmc = MCMC(ns.SGLD(model, step_size=1e-3), num_warmup=50, num_samples=256,
                num_chains=2, chain_method=chain_method, progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(0), X, y)
        jax.effects_barrier()
    said = [str(w.message) for w in caught if "cannot be trusted" in str(w.message)]
    assert len(said) == 1
    v = ns.check(mcmc, warn=False)
    assert f"max split R-hat {v.max_rhat:.3f}" in said[0]
    ess = float(said[0].split("min bulk ESS ")[1].split(" ")[0])
    assert abs(np.log(ess / v.min_ess)) < 0.5


def test_the_adapted_step_its_inflation_and_the_preconditioner_reach_inference_data(
        default_run):
    from numpyro_sgrld.analysis.inference_data import to_inference_data

    mcmc, X, y = default_run
    idata = to_inference_data(mcmc, X, y, log_likelihood=False)
    state = mcmc.last_state
    np.testing.assert_array_equal(idata.adaptation["step_size"].values,
                                  np.asarray(state.step_size, np.float64))
    np.testing.assert_array_equal(idata.adaptation["preconditioner_w"].values,
                                  state.sampler_state.metric.scale["w"])
    factor = np.asarray(state.sampler_state.metric.factor)  # dense: 3 coordinates
    np.testing.assert_allclose(np.einsum("cij,cij->ci", factor, factor),
                               state.sampler_state.metric.scale["w"], rtol=1e-5)
    inflation = idata.sample_stats["predicted_variance_inflation"].values
    assert inflation.shape == (2, 200)
    # h = target_bias / mean quotient unless the stability cap made h smaller
    assert np.all(inflation > 0) and np.all(inflation <= 0.1 * (1 + 1e-5))


def test_an_initial_position_where_the_density_is_zero_is_refused_with_the_site():
    def model():
        s = numpyro.sample("s", dist.Normal(0, 1))
        numpyro.factor("wall", jnp.where(s > 0, 0.0, -jnp.inf))

    mcmc = MCMC(ns.SGLD(model, 0.01), num_warmup=0, num_samples=10, progress_bar=False)
    with pytest.raises(ValueError, match=r"-inf at the initial position.*'wall'"):
        mcmc.run(jax.random.PRNGKey(0), init_params={"s": jnp.array(-1.0)})


def test_init_to_value_of_the_wrong_shape_names_the_site_and_both_shapes():
    model, X, y = _logistic(100, 20)
    kernel = ns.SGLD(model, 0.01, init_strategy=init_to_value(values={"w": jnp.zeros(2)}))
    with pytest.raises(ValueError, match=r"'w'.*\(2,\).*\(3,\)"):
        MCMC(kernel, num_warmup=0, num_samples=10, progress_bar=False).run(
            jax.random.PRNGKey(0), X, y)


def test_a_given_step_keeps_the_identity_metric_and_the_plain_gradient():
    model, X, y = _logistic(100, 20)
    kernel = ns.SGLD(model, 0.01)
    assert kernel.metric.name == "identity" and kernel.gradient.name == "minibatch"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ns.SGLD(model).metric.name == "learnt"


def test_the_advice_for_chains_that_have_not_mixed_fits_the_model():
    """A centred hierarchy is told which site to reparametrise, and of SGGibbs, which draws
    its parents exactly given their children; a model that is already
    non-centred (the inference gym's sparse logistic regression) is told that no
    reparametrisation will help and where to go instead, with what that costs."""
    from numpyro_sgrld.verdict.advice import mixing_advice as _mixing_advice

    X = jax.random.normal(jax.random.PRNGKey(0), (400, 3))
    y = (X[:, 0] > 0).astype(jnp.float32)

    def non_centred(X, y):
        tau = numpyro.sample("tau", dist.Gamma(0.5, 0.5))
        lam = numpyro.sample("lam", dist.Gamma(0.5, 0.5).expand([3]).to_event(1))
        beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        with numpyro.plate("data", 400, subsample_size=40) as idx:
            numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ (tau * lam * beta)), obs=y[idx])

    def centred(X, y):
        tau = numpyro.sample("tau", dist.HalfNormal(1.0))
        beta = numpyro.sample("beta", dist.Normal(0.0, tau).expand([3]).to_event(1))
        with numpyro.plate("data", 400, subsample_size=40) as idx:
            numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ beta), obs=y[idx])

    advice = {}
    for name, model in (("non_centred", non_centred), ("centred", centred)):
        kernel = ns.SGLD(model, step_size=1e-4)
        kernel.init(jax.random.PRNGKey(1), 0, None, (X, y), {})
        advice[name] = _mixing_advice(kernel)
    assert "already non-centred" in advice["non_centred"]
    assert "no reparametrisation" in advice["non_centred"]
    assert "LocScaleReparam" not in advice["non_centred"]
    assert "'beta'" in advice["centred"] and "'tau'" in advice["centred"]
    assert "LocScaleReparam" in advice["centred"]
    assert "numpyro_sgrld.SGGibbs(SGLD(model))" in advice["centred"]
    assert "SGGibbs" not in advice["non_centred"]
    for text in advice.values():
        assert "NUTS on full_batch(model)" in text and "about 10x" in text


def _quadratic(A, m):
    return lambda z: 0.5 * (z["w"] - m) @ A @ (z["w"] - m)


def test_a_far_centre_is_moved_to_the_mode_by_newton_steps_in_the_metric():
    """On a Gaussian posterior one Newton step in the inverse Hessian's metric lands on the
    mode (exact line search: rate 1); in the identity metric, steepest descent brings the
    centre nearer at every step; a centre within sqrt(d) sds is left where it is."""
    from numpyro_sgrld.core.gradients import control_variate, nearer_centre

    A = 1e4 * jnp.array([[4.0, 1.0, 0.0], [1.0, 2.0, 0.5], [0.0, 0.5, 1.0]])
    m = jnp.array([0.3, -0.2, 0.1])
    U = _quadratic(A, m)
    far = control_variate(U, {"w": m + 1.0})
    assert float(far.distance) > 100
    inverse = jnp.linalg.inv(A)
    newton = nearer_centre(far, U, lambda v: {"w": inverse @ v["w"]})
    assert float(newton.distance) < 0.01
    np.testing.assert_allclose(newton.centre["w"], m, atol=1e-4)  # sds are 0.005 to 0.01
    steepest = nearer_centre(far, U, lambda v: v)
    assert float(steepest.distance) < float(far.distance)
    assert float(steepest.value) < float(far.value)
    near = control_variate(U, {"w": m + 0.001})
    assert float(near.distance) < np.sqrt(3)
    kept = nearer_centre(near, U, lambda v: {"w": inverse @ v["w"]})
    np.testing.assert_array_equal(kept.centre["w"], near.centre["w"])


def test_a_newton_step_that_overshoots_is_shortened_until_the_potential_falls():
    """Far out on a logistic likelihood the curvature vanishes and the full Newton step
    overshoots; the kept centre's full-data potential is lower than the first's."""
    from numpyro_sgrld.core.gradients import control_variate, nearer_centre

    X = jax.random.normal(jax.random.PRNGKey(1), (500, 3))
    y = (X @ jnp.array([1.0, -1.0, 0.5]) > 0).astype(jnp.float32)

    def U(z):
        logits = X @ z["w"]
        return jnp.sum(jax.nn.softplus(logits) - y * logits) + 0.5 * z["w"] @ z["w"]

    far = control_variate(U, {"w": jnp.array([20.0, 20.0, -20.0])})
    curvature = jax.hessian(lambda w: U({"w": w}))(far.centre["w"])
    inverse = jnp.linalg.inv(curvature)
    moved = nearer_centre(far, U, lambda v: {"w": inverse @ v["w"]})
    assert np.all(np.isfinite(moved.centre["w"]))
    assert float(moved.value) < float(far.value)


def test_a_warmup_step_is_rejected_for_its_curvature_not_its_minibatch_slope():
    """The check compares the minibatch potential at the proposal with its first-order
    prediction: a steep but straight minibatch potential (slope noise, which grows as
    sqrt(N/n)) lets the step land; a step past the curvature's stability limit does not."""
    from types import SimpleNamespace

    from numpyro_sgrld.core.algorithm import _lands
    from numpyro_sgrld.core.estimators import Estimate
    from numpyro_sgrld.warmup.adaptation import MAX_RISE, too_steep

    def reject(a, b):
        return too_steep(a, b, 1.0)

    def lands(potential, position, z):
        target = SimpleNamespace(potential=lambda x, idx: (potential(x), {}))
        value, grad = jax.value_and_grad(potential)(position)
        est = Estimate(value, grad, {}, None, None)
        return bool(_lands(target, None, est, reject, z, position))

    straight = lambda x: 1e6 * x  # noqa: E731
    assert straight(0.01) - straight(0.0) > MAX_RISE
    assert lands(straight, 0.0, 0.01)
    curved = lambda x: 0.5e6 * x**2  # noqa: E731
    assert lands(curved, 0.1, 0.1 - 0.5e-6 * 1e5)  # half the stability limit
    assert not lands(curved, 0.1, 0.1 - 3e-6 * 1e5)  # past it: overshoots to -0.2


def test_a_run_away_is_named_before_the_mixing_it_spoils():
    """Chains that have not mixed and read far above 1 (a law 3x too wide or more) are told
    about their law first: more steps do not mix a chain that ran away. A reading just
    outside the band comes after the mixing problem, whose steps may settle it."""
    model, X, y = _logistic(2000, 20)
    apart = np.random.default_rng(0).normal(size=(4, 1000)) + np.arange(4)[:, None]
    for value, first in ((RUNAWAY_READING * 1.01, "equipartition"),
                         (1.6, "num_samples of at least")):
        v = verdict({"x": apart}, num_steps=1000, kernel=ns.SGLD(model), step_size=[1e-3] * 4,
                    temperatures=_readings(value))
        assert not v.trusted and len(v.problems) == 2 and first in v.problems[0], v.problems
