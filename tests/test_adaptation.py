"""Step-size adaptation (``step_size=None``): the estimator against its exact value, the law it
is built on, the state it leaves, and the inputs it refuses."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import bonferroni_z
from jax import random
from numpyro.infer import MCMC

from numpyro_sgrld import (
    PSGLD,
    SGHMC,
    SGLD,
    SGMCMC,
    AdamSGLD,
    MongeSGLD,
    ShampooSGLD,
    WenzelSGLD,
    integrators,
    metrics,
    to_inference_data,
)
from numpyro_sgrld.adaptation import MIN_WARMUP
from numpyro_sgrld.warmup import final_window_start, first_window_start

# A Gaussian with Hessian diag(1, 100) and gradient noise of covariance diag(S1, 0): the noise
# comes from a subsample plate of size 1 whose factor adds <z_m, x> with centred z_m = (s xi, 0)
# (as models/funnel.py does), so Sigma is the population covariance of z, known exactly.
M = 4000
S_NOISE = 12.0
_z = np.random.default_rng(0).normal(size=M) * S_NOISE
_z -= _z.mean()
NOISE = jnp.asarray(np.stack([_z, np.zeros(M)], 1) / M, jnp.float32)
SIGMA1 = float(np.mean(_z.astype(np.float32) ** 2))
HESSIAN = np.array([1.0, 100.0])


def noisy_gaussian(noise):
    x = numpyro.sample("x", dist.Normal(0.0, jnp.array([1.0, 0.1])).to_event(1))
    with numpyro.plate("noise", noise.shape[0], subsample_size=1) as idx:
        numpyro.factor("n", -(noise[idx] @ x))


def _mu(weights, scale):
    """lambda_max(c_curv D^1/2 H D^1/2 + c_noise D^1/2 Sigma D^1/2), all diagonal here."""
    c_curv, c_noise = weights
    return float(np.max(scale * (c_curv * HESSIAN + c_noise * np.array([SIGMA1, 0.0]))))


CASES = {
    "sgld": (lambda: SGLD(noisy_gaussian, metric=metrics.identity()), (0.5, 0.5), np.ones(2)),
    "sghmc": (lambda: SGHMC(noisy_gaussian, friction=0.1, metric=metrics.identity()),
              (1 / (2 * 1.9), 1 / (2 * 0.1)), np.ones(2)),
    # a fixed preconditioner turns the stiff direction into the worst one (curvature term)
    "diagonal": (
        lambda: SGMCMC(noisy_gaussian, metric=metrics.diagonal({"x": jnp.array([0.01, 4.0])})),
        (0.5, 0.5), np.array([0.01, 4.0]),
    ),
}


@pytest.mark.parametrize(
    "name", [n if n == "sgld" else pytest.param(n, marks=pytest.mark.slow) for n in sorted(CASES)]
)
def test_adapted_step_is_target_bias_over_the_worst_directions_inflation(name):
    """target_bias / h is the mean Rayleigh quotient of the warm-up's last quarter, an unbiased
    estimate of mu = lambda_max(c_curv A + c_noise S) once the power iteration has found the
    top direction: its mean over independent chains is compared with mu, computed from the
    Hessian and the exact noise covariance, with the chains' spread as standard error."""
    make, weights, scale = CASES[name]
    num_chains = 32
    # 1000 warm-up steps: 250 of the noisy phase before the window, for the iteration to turn
    # from the curvature's top direction to the noise's (log-growth 0.036 per step here); at
    # 400 the Rayleigh quotient still underestimates SGLD's mu by about 5 % (a lower bound)
    mcmc = MCMC(make(), num_warmup=1000, num_samples=1, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(random.PRNGKey(0), NOISE)
    rho = 0.1 / np.asarray(mcmc.last_state.step_size, np.float64)
    mu = _mu(weights, scale)
    # the chains' spread, and float32 round-off where the worst direction has no noise
    se = np.sqrt(rho.var(ddof=1) / num_chains + (np.finfo(np.float32).eps * 8 * mu) ** 2)
    z = (rho.mean() - mu) / se
    assert abs(z) < bonferroni_z(len(CASES)), (rho.mean(), mu, z)
    # the test can fail: with the noise counted twice (or, preconditioned, with D for D^1/2)
    wrong = (_mu((weights[0], 2 * weights[1]), scale) if name != "diagonal"
             else _mu(weights, np.sqrt(scale)))
    assert abs((rho.mean() - wrong) / se) > 10


def _lyapunov_variance(h, lam, s2, friction):
    """Stationary variance of x for SGHMC's linear recursion, solved numerically."""
    from scipy.linalg import solve_discrete_lyapunov

    a = np.array([[1 - h * lam, 1 - friction], [-h * lam, 1 - friction]])
    q = 2 * friction * h + h**2 * s2
    return solve_discrete_lyapunov(a, q * np.ones((2, 2)))[0, 0]


@pytest.mark.parametrize("friction", [0.05, 0.3, 1.0])
def test_sghmc_bias_weights_are_the_first_order_law(friction):
    """The weights SGHMC gives the adaptation: the exact stationary variance of its recursion
    on a Gaussian is (1/lam)(1 + h s2/(2 friction))/(1 - h lam/(2(2 - friction))), first
    order h(c_curv lam + c_noise s2) with (c_curv, c_noise) = bias_weights."""
    c_curv, c_noise = integrators.sghmc(friction=friction).bias_weights
    lam, s2 = 3.0, 40.0
    for h in (1e-3, 1e-2, 5e-2):
        exact = _lyapunov_variance(h, lam, s2, friction) * lam
        closed = (1 + h * s2 / (2 * friction)) / (1 - h * lam / (2 * (2 - friction)))
        np.testing.assert_allclose(exact, closed, rtol=1e-9)
    h = 1e-6
    np.testing.assert_allclose((closed_first := _lyapunov_variance(h, lam, s2, friction) * lam - 1)
                               / h, c_curv * lam + c_noise * s2, rtol=1e-4)
    assert closed_first > 0
    assert integrators.langevin().bias_weights == (0.5, 0.5)


def _data(n=400, d=3):
    X = random.normal(random.PRNGKey(0), (n, d))
    y = X @ jnp.arange(1.0, d + 1) + random.normal(random.PRNGKey(1), (n,))
    return X, y


def regression(X, y, subsample_size=40):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as i:
        numpyro.sample("y", dist.Normal(X[i] @ w, 1.0), obs=y[i])


def test_the_step_freezes_after_warmup_and_travels_with_the_state():
    X, y = _data()
    mcmc = MCMC(SGLD(regression), num_warmup=MIN_WARMUP, num_samples=20, num_chains=1,
                progress_bar=False)
    mcmc.warmup(random.PRNGKey(0), X, y, collect_warmup=True, extra_fields=("step_size",))
    during = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["step_size"])
    adapted = np.asarray(mcmc.post_warmup_state.step_size)
    assert during.shape == (1, MIN_WARMUP) and np.ptp(during[0]) > 0  # it moved in warm-up
    np.testing.assert_array_equal(during[0, -1], adapted)  # and ends at the frozen step
    mcmc.run(random.PRNGKey(1), X, y, extra_fields=("step_size",))
    after = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["step_size"])
    np.testing.assert_array_equal(after, np.broadcast_to(adapted, after.shape))
    idata = to_inference_data(mcmc, X, y)
    np.testing.assert_array_equal(idata.sample_stats["step_size"].values, after)
    assert f"h={float(adapted):.2e}" in mcmc.sampler.get_diagnostics_str(mcmc.last_state)


def test_a_given_step_is_used_as_is():
    X, y = _data()
    kernel = SGLD(regression, step_size=1e-4)
    assert not kernel.adapts_step_size and SGLD(regression).adapts_step_size
    mcmc = MCMC(kernel, num_warmup=0, num_samples=5, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y, extra_fields=("step_size",))
    assert mcmc.last_state.adaptation is None
    np.testing.assert_allclose(mcmc.get_extra_fields()["step_size"], 1e-4)


def test_bad_input_for_adaptation():
    X, y = _data()
    with pytest.raises(ValueError, match="num_warmup=0.*num_warmup=N.*step_size="):
        MCMC(SGLD(regression), num_warmup=0, num_samples=5, progress_bar=False).run(
            random.PRNGKey(0), X, y)
    with pytest.raises(ValueError, match=f"at least {MIN_WARMUP} warm-up steps.*num_warmup=50"):
        MCMC(SGLD(regression), num_warmup=50, num_samples=5, progress_bar=False).run(
            random.PRNGKey(0), X, y)
    with pytest.raises(ValueError, match="temperature=0.0"):
        SGLD(regression, temperature=0.0)
    with pytest.raises(ValueError, match="target_bias"):
        SGLD(regression, target_bias=0.0)
    plain = integrators.langevin()._replace(bias_weights=None, name="mine")
    with pytest.raises(ValueError, match="'mine' has no `bias_weights`.*step_size="):
        SGMCMC(regression, integrator=plain)
    with pytest.raises(ValueError, match="sampling_steps=1000.*step_size=0.001.*drop one"):
        SGLD(regression, step_size=1e-3, sampling_steps=1000)
    for bad in (0, 10.0, "many"):
        with pytest.raises(ValueError, match="`sampling_steps` must be an integer >= 1.*thinning"):
            SGLD(regression, sampling_steps=bad)
    slowless = integrators.langevin()._replace(relaxation_weight=None, name="mine")
    with pytest.raises(ValueError, match="'mine' has no `relaxation_weight`.*leave it out"):
        SGMCMC(regression, integrator=slowless, sampling_steps=1000)


def stiff_gaussian():
    """Hessian diag(1, 100), exact gradients: no gradient noise."""
    numpyro.sample("x", dist.Normal(0.0, jnp.array([1.0, 0.1])).to_event(1))


# (kernel, c_curv, relaxation weight g, sampling_steps): the budget rule's three regimes
BUDGET = {
    "bias target binds": (SGLD, 0.5, 1.0, 1_000_000),
    "mixing binds": (SGLD, 0.5, 1.0, 100_000),
    "stability caps": (SGLD, 0.5, 1.0, 10_000),
    "sghmc mixing binds": (lambda m, **kw: SGHMC(m, friction=0.1, **kw), 1 / 3.8, 10.0, 10_000),
}


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.slow) if c in ("stability caps", "sghmc mixing binds")
    else c for c in sorted(BUDGET)
])
def test_the_budget_rule_raises_the_step_until_the_slowest_direction_mixes(case):
    """With ``sampling_steps`` the frozen step is max(h_bias, min(h_mix, h_cap, h_inf)): h_bias =
    target_bias / (c_curv lam_max), h_mix = 2 ESS / (g lam_min N), h_cap = 1/2 / (c_curv
    lam_max), h_inf = 3 / (c_curv lam_max) (never binding here: it is 6x h_cap). Exact gradients
    of a fixed Hessian make every power-iteration product exact, so
    the estimates of lam_min = 1 and lam_max = 100 and hence the step are exact."""
    from numpyro_sgrld.adaptation import MIXING_ESS

    make, c_curv, g, steps = BUDGET[case]
    mcmc = MCMC(make(stiff_gaussian, sampling_steps=steps, metric=metrics.identity()),
                num_warmup=400, num_samples=1,
                progress_bar=False)
    mcmc.warmup(random.PRNGKey(0))
    state = mcmc.post_warmup_state.adaptation
    np.testing.assert_allclose(state.slow_total / state.count, 1.0, rtol=1e-3)  # lam_min
    h_bias, h_cap = 0.1 / (c_curv * 100.0), 0.5 / (c_curv * 100.0)
    h_mix = 2 * MIXING_ESS / (g * 1.0 * steps)
    expected = max(h_bias, min(h_mix, h_cap))
    assert expected == {"bias target binds": h_bias, "stability caps": h_cap}.get(case, h_mix)
    np.testing.assert_allclose(mcmc.post_warmup_state.step_size, expected, rtol=1e-3)
    # without the hint: the bias target alone, and no slow direction in the state
    plain = MCMC(make(stiff_gaussian, metric=metrics.identity()), num_warmup=400,
                 num_samples=1, progress_bar=False)
    plain.warmup(random.PRNGKey(0))
    assert plain.post_warmup_state.adaptation.slow_direction is None
    np.testing.assert_allclose(plain.post_warmup_state.step_size, h_bias, rtol=1e-3)


PRESETS = {
    "SGLD": SGLD,
    "SGHMC": SGHMC,
    "PSGLD": PSGLD,
    "PSGLD+Γ": lambda m: PSGLD(m, correction="exact"),
    "MongeSGLD": MongeSGLD,
    "ShampooSGLD": lambda m: ShampooSGLD(m, update_interval=20),
    "WenzelSGLD": WenzelSGLD,
    "AdamSGLD": AdamSGLD,
}
_FAST = ("PSGLD",)  # SGLD adapts in the README example (tests/test_docs.py)


@pytest.mark.parametrize(
    "name", [n if n in _FAST else pytest.param(n, marks=pytest.mark.slow) for n in PRESETS]
)
def test_every_preset_adapts_its_step(name):
    """Every preset runs as MCMC(Kernel(model), ...): finite draws, no rejected step while
    sampling, one frozen step per chain, and sds of the conjugate posterior within the
    factor the rule allows (1 + target_bias in variance, to first order) plus Monte Carlo
    error."""
    from conftest import mcse

    X, y = _data(n=400, d=3)
    mcmc = MCMC(PRESETS[name](regression), num_warmup=1000, num_samples=4000, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    mcmc.warmup(random.PRNGKey(0), X, y)
    rejected_in_warmup = np.asarray(mcmc.post_warmup_state.num_rejected)
    mcmc.run(random.PRNGKey(1), X, y, extra_fields=("step_size",))
    w = np.asarray(mcmc.get_samples(group_by_chain=True)["w"])
    assert np.all(np.isfinite(w))
    np.testing.assert_array_equal(np.asarray(mcmc.last_state.num_rejected), rejected_in_warmup)
    h = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["step_size"])
    assert np.all(h > 0) and np.all(h == h[:, :1])
    precision = np.eye(3) + np.asarray(X).T @ np.asarray(X)
    sd = np.sqrt(np.diag(np.linalg.inv(precision)))
    sd_hat = w.reshape(-1, 3).std(0)
    se = mcse(w)[1]
    # one-sided: with h (c_curv lam + c_noise s2) = target_bias in the worst direction, the
    # discretised chain's variance is at most 1/(1 - target_bias) times the posterior's
    # (the curvature-only end of the exact law; the noise-only end gives 1 + target_bias)
    z = (sd_hat - sd / np.sqrt(1.0 - 0.1)) / se
    assert np.all(z < bonferroni_z(3 * len(PRESETS))), (name, sd_hat / sd, z)


def test_sghmc_momentum_follows_the_step():
    state = integrators.SGHMCState({"x": jnp.array([2.0, -4.0])})
    out = integrators.sghmc().rescale(state, 0.25)
    np.testing.assert_allclose(out.momentum["x"], [1.0, -2.0])


def _run_updates(rhos, stiffnesses, accepted=None, num_warmup=MIN_WARMUP, target_bias=0.1):
    """update_step_size over a warm-up of scalar 'positions', from a state whose estimate is
    rhos[0]; returns the states after every step."""
    from numpyro_sgrld.adaptation import StepSizeState, update_step_size

    state = StepSizeState(
        step_size=jnp.asarray(0.5 / rhos[0]), direction={"x": jnp.ones(1)},
        estimate=jnp.asarray(rhos[0]), total=jnp.zeros(()), count=jnp.zeros((), jnp.int32),
        num_warmup=jnp.asarray(num_warmup, jnp.int32), stiffness=jnp.zeros(()),
        recent_stiffness=jnp.zeros(()),
    )
    accepted = np.ones(len(rhos), bool) if accepted is None else accepted

    def step(state, inputs):
        i, rho, stiff, ok = inputs
        state = update_step_size(state, i, rho, {"x": jnp.ones(1)}, stiff, ok, target_bias,
                                 random.PRNGKey(0))
        return state, state

    inputs = (jnp.arange(len(rhos)), jnp.asarray(rhos, jnp.float32),
              jnp.asarray(stiffnesses, jnp.float32), jnp.asarray(accepted))
    _, states = jax.lax.scan(step, state, inputs)
    return [jax.tree.map(lambda v, i=i: v[i], states) for i in range(len(rhos))]


def test_the_frozen_step_is_the_window_mean_capped_by_the_stiffest_curvature():
    from numpyro_sgrld.adaptation import FAST_TARGET

    w = MIN_WARMUP
    rhos = np.full(w, 10.0)
    start = final_window_start(w)
    rhos[start:] = np.linspace(5.0, 15.0, w - start)  # window mean 10
    final = _run_updates(rhos, np.full(w, 1.0))[-1]
    np.testing.assert_allclose(final.step_size, 0.1 / rhos[start:].mean(), rtol=1e-5)
    # one stiff point after the approach: the step is at most FAST_TARGET / its curvature
    stiff = np.full(w, 1.0)
    stiff[first_window_start(w) + 3] = 400.0
    final = _run_updates(rhos, stiff)[-1]
    np.testing.assert_allclose(final.step_size, FAST_TARGET / 400.0, rtol=1e-5)


def test_a_rejected_warmup_step_shrinks_the_step_fourfold():
    from numpyro_sgrld.adaptation import SHRINK, too_steep

    rhos = np.full(10, 4.0)
    ok = np.ones(10, bool)
    ok[5] = False
    states = _run_updates(rhos, np.zeros(10), ok)
    np.testing.assert_allclose(states[5].step_size, states[4].step_size / SHRINK, rtol=1e-5)
    # a rise of the minibatch potential beyond NumPyro's max_delta_energy, over T, is too steep
    assert bool(too_steep(10.0, 1011.0, 1.0)) and not bool(too_steep(10.0, 1009.0, 1.0))
    assert not bool(too_steep(10.0, 1011.0, 2.0))


def test_the_score_product_estimates_the_posterior_averaged_curvature():
    """E[(w.R^T g1)(w.R^T g2)] / T = E_pi[w^T A w] for independent noisy gradients g1, g2 at
    a draw of pi ∝ exp(-U/T) (integration by parts; the gradient noise cancels). On U =
    sum_i lam_i x_i^2 / 2 with D = diag(d): w^T A w = sum_i w_i^2 d_i lam_i. The mean of
    20,000 i.i.d. products is compared with it by a z-score from their standard error."""
    from numpyro_sgrld.adaptation import slow_rayleigh
    from numpyro_sgrld.metrics._base import Preconditioner

    lam, d, temperature = jnp.array([4.0, 0.5, 2.0]), jnp.array([0.3, 2.0, 1.0]), 1.5
    w = {"x": jnp.array([0.6, 0.0, 0.8])}
    root = Preconditioner(drift=lambda v: jax.tree.map(lambda a: d * a, v),
                          noise=lambda v: jax.tree.map(lambda a: jnp.sqrt(d) * a, v))
    hvp = lambda z, v: jax.tree.map(lambda a: lam * a, v)  # noqa: E731

    def one(key):
        kx, k1, k2 = random.split(key, 3)
        x = random.normal(kx, (3,)) * jnp.sqrt(temperature / lam)
        g1 = {"x": lam * x + 3.0 * random.normal(k1, (3,))}  # noise far above the signal
        g2 = {"x": lam * x + 3.0 * random.normal(k2, (3,))}
        r, _, f = slow_rayleigh(w, {"x": x}, root, hvp, 10.0, g1, g2, temperature)
        return r, f

    r, f = jax.vmap(one)(random.split(random.PRNGKey(0), 20_000))
    exact = float(jnp.sum(w["x"] ** 2 * d * lam))
    np.testing.assert_allclose(r, exact, rtol=1e-5)  # the local curvature, constant here
    z = (float(f.mean()) - exact) / (float(f.std()) / np.sqrt(f.size))
    assert abs(z) < bonferroni_z(1), (float(f.mean()), exact, z)


def _frozen_budget_step(slow, steps, rho=10.0, stiffness=1e-3):
    """The frozen step of a warm-up of MIN_WARMUP steps whose every step has Rayleigh quotient
    ``rho``, curvature term ``stiffness`` and slow-direction terms ``slow`` (``(r,)`` or
    ``(r, score)``), with ``sampling_steps=steps`` and ``target_bias=0.1``."""
    from numpyro_sgrld.adaptation import StepSizeState, update_step_size

    one = {"x": jnp.ones(1)}
    state = StepSizeState(
        step_size=jnp.asarray(0.1), direction=one, estimate=jnp.asarray(1.0),
        total=jnp.zeros(()), count=jnp.zeros((), jnp.int32),
        num_warmup=jnp.asarray(MIN_WARMUP, jnp.int32), stiffness=jnp.zeros(()),
        recent_stiffness=jnp.zeros(()), slow_direction=one,
        slow_total=jnp.zeros(()), slow_score_total=jnp.zeros(()),
    )
    terms = (jnp.asarray(slow[0]), one, *map(jnp.asarray, slow[1:]))

    def body(i, state):
        return update_step_size(state, i, jnp.asarray(rho), one, jnp.asarray(stiffness), True,
                                0.1, random.PRNGKey(0), slow=terms, mixing=(steps, 1.0))

    return float(jax.lax.fori_loop(0, MIN_WARMUP, body, state).step_size)


def test_the_budget_rule_falls_back_to_the_score_where_the_curvature_is_not_positive():
    """Where the mean curvature along the slow direction is not positive (a funnel's neck),
    the mixing step comes from the mean score product; where it is positive, from it."""
    from numpyro_sgrld.adaptation import mixing_step

    steps = 100_000
    # mixing steps of 0.12, below the inflation cap 3 / 10 = 0.3
    np.testing.assert_allclose(_frozen_budget_step((-0.05, 0.05), steps),
                               mixing_step(0.05, steps, 1.0), rtol=1e-5)
    np.testing.assert_allclose(_frozen_budget_step((0.05, 5.0), steps),
                               mixing_step(0.05, steps, 1.0), rtol=1e-5)
    # neither positive: the bias target's step
    np.testing.assert_allclose(_frozen_budget_step((-0.05, -0.01), steps), 0.1 / 10.0,
                               rtol=1e-5)


def test_the_budget_rule_stops_at_the_largest_predicted_variance_inflation():
    """The raised step is at most MAX_INFLATION over the window's mean quotient (a predicted
    sd of twice the posterior's); below that the mixing step is taken as it is."""
    from numpyro_sgrld.adaptation import MAX_INFLATION, mixing_step

    steps, rho = 100_000, 10.0
    cap = MAX_INFLATION / rho
    assert mixing_step(0.002, steps, 1.0) > cap > mixing_step(0.05, steps, 1.0) > 0.1 / rho
    np.testing.assert_allclose(_frozen_budget_step((0.002,), steps, rho), cap, rtol=1e-5)
    np.testing.assert_allclose(_frozen_budget_step((0.05,), steps, rho),
                               mixing_step(0.05, steps, 1.0), rtol=1e-5)


def test_lyapunov_step_is_the_euler_limit_for_a_constant_curvature():
    """With one curvature term the mean log-growth ``log|1 - h s / FAST_TARGET|`` is not
    positive up to twice the cap (Euler's limit ``h lambda = 2`` for Langevin); with the
    stiffest term a rare one the step may be above that, the largest step of the search up to
    which the mean log-growth over the recorded terms is not positive."""
    from numpyro_sgrld.adaptation import (
        FAST_TARGET,
        LYAPUNOV_SPAN,
        STIFFNESS_BIN,
        STIFFNESS_RANGE,
        count_stiffness,
        lyapunov_step,
    )

    # terms at bin edges, so that the histogram holds them exactly
    def edge(k):
        return 10.0 ** (STIFFNESS_RANGE[0] + STIFFNESS_BIN * (k + 1))

    def histogram(terms):
        counts = jnp.zeros(int(round((STIFFNESS_RANGE[1] - STIFFNESS_RANGE[0]) / STIFFNESS_BIN)))
        for t in terms:  # count_stiffness bins by floor: an edge lands in the bin above it
            counts = count_stiffness(counts, jnp.asarray(t * 0.999, jnp.float32))
        return counts

    stiff = edge(240)
    cap = FAST_TARGET / stiff
    multiples = np.geomspace(1.0, LYAPUNOV_SPAN, 241)
    step = float(lyapunov_step(histogram([stiff] * 10), jnp.asarray(stiff)))
    np.testing.assert_allclose(step, cap * multiples[multiples <= 2.0].max(), rtol=1e-4)

    terms = [stiff] + [edge(240 - 24)] * 99  # one term at the cap, 99 at a thousandth of it
    step = float(lyapunov_step(histogram(terms), jnp.asarray(stiff)))

    def growth(h):
        x = h * np.asarray(terms) / FAST_TARGET
        return float(np.mean(np.log(np.abs(1.0 - x) + 1e-30)))

    expected = cap * multiples[np.cumprod([growth(cap * m) <= 0 for m in multiples]) > 0].max()
    assert expected > 2.1 * cap  # beyond the constant curvature's limit
    np.testing.assert_allclose(step, expected, rtol=1e-4)


def _pooled_warmup(rho, spikes, slow, rejected_at=(-1, -1), steps=100_000, pooled=True,
                   trial_factor=1.0):
    """Two vectorised chains' adaptation states after MIN_WARMUP steps of ``update_step_size``
    under ``vmap`` with the chains' axis (``pooled=False``: without it, each chain its own
    rule). Chain ``c`` has Rayleigh quotient ``rho[c]``; curvature terms ``scale`` every
    ``every`` steps and a thousandth of it otherwise (``spikes[c] = (scale, every)``);
    slow-direction terms alternating ``±size`` (a mean of zero) or constant ``size`` where
    ``alternate`` is False, with score products ``score`` (``slow[c] = (size, alternate,
    score)``); and rejects step ``rejected_at[c]``. During the last eighth (the pooled
    step's trial) the quotients are ``trial_factor`` times larger. Positions count the
    steps."""
    from numpyro_sgrld.adaptation import (
        CHAIN_AXIS,
        StepSizeState,
        trial_start,
        update_step_size,
    )

    one = {"x": jnp.ones(1)}

    def init(_):
        return StepSizeState(
            step_size=jnp.asarray(0.1), direction=one, estimate=jnp.asarray(1.0),
            total=jnp.zeros(()), count=jnp.zeros((), jnp.int32),
            num_warmup=jnp.asarray(MIN_WARMUP, jnp.int32), stiffness=jnp.zeros(()),
            recent_stiffness=jnp.zeros(()), slow_direction=one,
            slow_total=jnp.zeros(()), slow_score_total=jnp.zeros(()),
            stiffness_counts=jnp.zeros(480) if pooled else None, trial_step=jnp.zeros(()),
            trial_rejected=jnp.zeros((), jnp.int32),
            trial_position={"x": jnp.zeros(1)} if pooled else None,
            trial_failed=jnp.zeros((), bool), slow_square_total=jnp.zeros(()),
        )

    arrays = [jnp.asarray(np.asarray(a, np.float32)) for a in
              (rho, *zip(*spikes), *zip(*slow), rejected_at)]

    def chain(state, rho, scale, every, size, alternate, score, rejected, i):
        stiffness = jnp.where(i % every == 0, scale, scale / 1000.0)
        r = jnp.where((alternate > 0) & (i % 2 == 1), -size, size)
        rho = rho * jnp.where(i >= trial_start(MIN_WARMUP), trial_factor, 1.0)
        return update_step_size(
            state, i, rho, one, stiffness, i != rejected, 0.1, random.PRNGKey(0),
            slow=(r, one, score), mixing=(steps, 1.0), axis_name=CHAIN_AXIS if pooled else None,
            position={"x": jnp.full(1, i * 1.0)},
        )

    def body(i, states):
        return jax.vmap(lambda s, *a: chain(s, *a, i), axis_name=CHAIN_AXIS)(states, *arrays)

    return jax.jit(lambda: jax.lax.fori_loop(0, MIN_WARMUP, body,
                                             jax.vmap(init)(jnp.arange(2))))()


RHO = (20.0, 5.0)
SPIKES = ((20.0, 50), (5.0, 25))
INDEFINITE = ((1.0, True, 0.05), (0.5, True, 0.05))


def test_vectorised_chains_pool_their_step_where_the_curvature_is_indefinite():
    """Where the slow direction's curvature terms average to about zero (a funnel), the
    chains' frozen step is one, the pooled rule's (``pooled_step``): the larger of the
    pooled bias target and the Lyapunov step of the pooled histogram, at most MAX_INFLATION
    over the pooled mean quotient; it was on trial over the last eighth and no chain rejected
    a step there."""
    from numpyro_sgrld.adaptation import (
        FAST_TARGET,
        MAX_INFLATION,
        TRIAL_FRACTION,
        count_stiffness,
        lyapunov_step,
    )

    states = _pooled_warmup(RHO, SPIKES, INDEFINITE)
    steps = np.asarray(states.step_size)
    assert steps[0] == steps[1]
    # the pooled rule from its parts: the terms after the approach of both chains
    half = first_window_start(MIN_WARMUP)
    counts = jnp.zeros(480)
    for scale, every in SPIKES:
        for i in range(half, MIN_WARMUP - MIN_WARMUP // TRIAL_FRACTION):  # to the trial
            term = scale if i % every == 0 else scale / 1000.0
            counts = count_stiffness(counts, jnp.asarray(term, jnp.float32))
    mean = np.mean(RHO)
    expected = max(0.1 / max(mean, 20.0 * 0.1 / FAST_TARGET),
                   min(float(lyapunov_step(counts, jnp.asarray(20.0))), MAX_INFLATION / mean))
    np.testing.assert_allclose(steps[0], expected, rtol=1e-5)
    assert expected > FAST_TARGET / 20.0  # above the stiffest point's cap
    assert not np.any(states.trial_failed)
    # each chain's position when the trial began
    np.testing.assert_array_equal(states.trial_position["x"][:, 0],
                                  MIN_WARMUP - MIN_WARMUP // TRIAL_FRACTION)


def test_a_rejection_on_trial_keeps_every_chains_own_step_and_restarts_it():
    """One chain rejecting one step of the trial: every chain freezes at the step its own rule
    had chosen from the warm-up before the trial (here each chain's inflation cap: the
    quotients quadruple during the trial, which must not count) and goes back to where it was
    when the trial began."""
    from numpyro_sgrld.adaptation import (
        FAST_TARGET,
        MAX_INFLATION,
        TRIAL_FRACTION,
        mixing_step,
        trial_restart,
    )

    start = MIN_WARMUP - MIN_WARMUP // TRIAL_FRACTION
    steps = 100_000
    rhos = (200.0, 50.0)  # inflation caps 0.015 and 0.06, below the stability caps
    failed = _pooled_warmup(rhos, SPIKES, INDEFINITE, rejected_at=(-1, start + 3), steps=steps,
                            trial_factor=4.0)
    assert np.all(failed.trial_failed)
    assert np.all(trial_restart(failed, MIN_WARMUP - 1))
    assert not np.any(trial_restart(failed, MIN_WARMUP - 2))
    np.testing.assert_array_equal(failed.trial_position["x"][:, 0], start)
    # the own rule before the trial: the window's first (start - 150) alternating terms
    window = start - final_window_start(MIN_WARMUP)
    expected = []
    for rho, (stiff, _), (size, _, _) in zip(rhos, SPIKES, INDEFINITE):
        slow_mean = size * (window % 2) / window  # one more +size than -size
        raised = min(mixing_step(slow_mean, steps, 1.0), FAST_TARGET / stiff, MAX_INFLATION / rho)
        expected.append(max(0.1 / max(rho, stiff * 0.1 / FAST_TARGET), raised))
    assert expected[0] != expected[1]
    np.testing.assert_allclose(np.asarray(failed.step_size), expected, rtol=1e-5)


def test_the_budget_rule_stays_stable_where_the_noise_points_elsewhere():
    """The gradient noise only along the flat coordinate (variance 1), the curvature 100 along
    the other: the second half's power iteration follows curvature plus noise, whose top is
    the flat coordinate, and its curvature terms there (about 1) missed the stiff one. With a
    short run (``sampling_steps=100``) the budget rule raises the step to its stability cap,
    which must then come from the first half's curvature alone: every chain's frozen step is
    below Euler's limit 2 / 100 (it was 0.039 in one chain, which rejected a fifth of its
    proposals), and no sampling step is rejected."""
    mcmc = MCMC(SGLD(noisy_gaussian, sampling_steps=100, metric=metrics.identity()),
                    num_warmup=MIN_WARMUP,
                num_samples=100, num_chains=4, chain_method="vectorized", progress_bar=False)
    mcmc.run(random.PRNGKey(1), NOISE, extra_fields=("diverging",))
    assert np.all(np.asarray(mcmc.last_state.step_size) < 2.0 / HESSIAN.max())
    assert not np.any(np.asarray(mcmc.get_extra_fields()["diverging"]))


def test_a_failed_trial_puts_each_chain_back_through_the_kernel(monkeypatch):
    """The same through a kernel's vectorised chains: a pooled step no chain can take (forced
    to 10^6) fails its trial, and each chain ends its warm-up where it was when the trial
    began, at the step its own rule had chosen before it."""
    import numpyro_sgrld.adaptation as adaptation

    monkeypatch.setattr(adaptation, "pooled_step",
                        lambda *args: (jnp.asarray(1e6), jnp.asarray(True)))
    mcmc = MCMC(SGLD(noisy_gaussian, sampling_steps=100, metric=metrics.identity()),
                    num_warmup=MIN_WARMUP,
                num_samples=1, num_chains=2, chain_method="vectorized", progress_bar=False)
    mcmc.warmup(random.PRNGKey(1), NOISE)
    state = mcmc.post_warmup_state
    assert np.all(np.asarray(state.adaptation.trial_failed))
    assert np.all(np.asarray(state.adaptation.trial_rejected) > 0)
    np.testing.assert_array_equal(np.asarray(state.z["x"]),
                                  np.asarray(state.adaptation.trial_position["x"]))
    np.testing.assert_array_equal(np.asarray(state.step_size),
                                  np.asarray(state.adaptation.own_step))
    assert np.all(np.asarray(state.step_size) < 1.0)


def test_nothing_is_pooled_where_the_slow_curvature_is_clearly_positive():
    """With the slow direction's curvature terms constant and positive the pooled rule does
    not apply: each chain's frozen step is, bit for bit, what it is without the chains' axis;
    and a kernel's vectorised chains (its named vmap, the trial's state and branches) give
    the sequential chains' steps and draws."""
    positive = ((1.0, False, 0.05), (0.5, False, 0.05))
    pooled = _pooled_warmup(RHO, SPIKES, positive)
    assert not np.any(np.asarray(pooled.trial_step) > 0)
    np.testing.assert_array_equal(np.asarray(pooled.step_size),
                                  np.asarray(_pooled_warmup(RHO, SPIKES, positive,
                                                            pooled=False).step_size))
    runs = {}
    for method in ("vectorized", "sequential"):
        mcmc = MCMC(SGLD(noisy_gaussian, sampling_steps=100, metric=metrics.identity()),
                    num_warmup=MIN_WARMUP,
                    num_samples=100, num_chains=2, chain_method=method, progress_bar=False)
        mcmc.run(random.PRNGKey(1), NOISE)
        runs[method] = (np.asarray(mcmc.last_state.step_size),
                        np.asarray(mcmc.get_samples(group_by_chain=True)["x"]))
        if method == "vectorized":
            assert mcmc.last_state.adaptation.trial_position is not None
            assert not np.any(np.asarray(mcmc.last_state.adaptation.trial_step) > 0)
    for a, b in zip(runs["vectorized"], runs["sequential"]):
        np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.slow
def test_vectorised_chains_on_the_funnel_share_a_step_and_converge():
    """Yu et al.'s funnel (noisy gradients) with PSGLD, four vectorised chains, 10,000 warm-up
    and 200,000 sampling steps, ``sampling_steps`` given (the benchmark's cell): the pooled
    step is one for all chains and passed its trial, and the chains converge (split R-hat at
    most 1.01 and bulk ESS at least 100 for ``v`` and ``x``, the benchmark's health check),
    where each chain's own rule left them unconverged (R-hat 1.04, ESS 54)."""
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin
    from numpyro_sgrld.models import funnel

    steps = 200_000
    mcmc = MCMC(PSGLD(funnel.model, num_data=1, sampling_steps=steps), num_warmup=10_000,
                num_samples=steps, thinning=100, num_chains=4, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(random.PRNGKey(0), funnel.make_gradient_noise())
    adaptation = mcmc.last_state.adaptation
    step = np.asarray(mcmc.last_state.step_size)
    assert np.all(step == step[0]) and np.all(np.asarray(adaptation.trial_step) == step[0])
    assert not np.any(adaptation.trial_failed)
    for name, draws in mcmc.get_samples(group_by_chain=True).items():
        draws = np.asarray(draws)
        assert split_gelman_rubin(draws) <= 1.01, name
        assert effective_sample_size(draws) >= 100, name
