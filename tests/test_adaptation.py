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
    BADODAB,
    BAOAB,
    PSGLD,
    SGHMC,
    SGLD,
    SGMCMC,
    SGNHT,
    AdamSGLD,
    CyclicalSGHMC,
    CyclicalSGLD,
    MongeSGLD,
    ShampooSGLD,
    WenzelSGLD,
    integrators,
    metrics,
    to_inference_data,
)
from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.warmup import final_window_start, first_window_start
from numpyro_sgrld.warmup.adaptation import MIN_WARMUP

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
    c_curv, c_noise = trait(integrators.sghmc(friction=friction), integrators.BiasLaw).weights
    lam, s2 = 3.0, 40.0
    for h in (1e-3, 1e-2, 5e-2):
        exact = _lyapunov_variance(h, lam, s2, friction) * lam
        closed = (1 + h * s2 / (2 * friction)) / (1 - h * lam / (2 * (2 - friction)))
        np.testing.assert_allclose(exact, closed, rtol=1e-9)
    h = 1e-6
    np.testing.assert_allclose((closed_first := _lyapunov_variance(h, lam, s2, friction) * lam - 1)
                               / h, c_curv * lam + c_noise * s2, rtol=1e-4)
    assert closed_first > 0
    assert trait(integrators.langevin(), integrators.BiasLaw).weights == (0.5, 0.5)


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
    plain = integrators.langevin()._replace(traits=(), name="mine")
    with pytest.raises(ValueError, match="'mine' has no bias law.*step_size="):
        SGMCMC(regression, integrator=plain)
    # the run's length is no argument: the step aims at the bias target alone
    with pytest.raises(TypeError, match="unexpected keyword argument 'sampling_steps'"):
        SGLD(regression, sampling_steps=1000)


def stiff_gaussian():
    """Hessian diag(1, 100), exact gradients: no gradient noise."""
    numpyro.sample("x", dist.Normal(0.0, jnp.array([1.0, 0.1])).to_event(1))


# (kernel, frozen step): target_bias / (c_curv lam_max) for a first-order law (SGHMC's
# curvature weight at friction 0.1 is 1 / (2 (2 - 0.1))); for the time-step integrators'
# second-order law c h^2 lam_max = target_bias with c = 1/4 (integrators.time_step_law)
NOISELESS = {
    "sgld": (SGLD, 0.1 / (0.5 * 100.0)),
    "sghmc": (lambda m, **kw: SGHMC(m, friction=0.1, **kw), 0.1 / (100.0 / 3.8)),
    "baoab": (BAOAB, np.sqrt(0.1 / (0.25 * 100.0))),
    "badodab": (BADODAB, np.sqrt(0.1 / (0.25 * 100.0))),
}


@pytest.mark.parametrize("case", [
    c if c in ("sgld", "baoab") else pytest.param(c, marks=pytest.mark.slow)
    for c in sorted(NOISELESS)
])
def test_the_frozen_step_is_the_bias_target_on_a_noiseless_gaussian(case):
    """Exact gradients of a fixed Hessian diag(1, 100) make every power-iteration product
    exact, so the frozen step is exactly the law's: target_bias / (c_curv lam_max), or
    sqrt(target_bias / (c lam_max)) for a time step."""
    make, step = NOISELESS[case]
    mcmc = MCMC(make(stiff_gaussian, metric=metrics.identity()), num_warmup=400,
                num_samples=1, progress_bar=False)
    mcmc.warmup(random.PRNGKey(0))
    np.testing.assert_allclose(mcmc.post_warmup_state.step_size, step, rtol=1e-3)


def _stationary(system):
    """The stationary covariance of z' = M z + B e, Cov e = diag(noise), for
    ``system = (M, B, noise)``."""
    from scipy.linalg import solve_discrete_lyapunov

    M, B, noise = system
    return solve_discrete_lyapunov(M, B @ np.diag(noise) @ B.T)


def _baoab(h, lam, s2, gamma, T=1.0):
    """BAOAB's (theta, v) map on N(0, T/lam) with gradient noise s2 (one kick of h per
    step, as integrators.baoab merges them): z' = M z + B (eps, xi)."""
    c = np.exp(-gamma * h)
    a = np.sqrt(T * (1 - c * c))
    kick = np.array([[1.0, 0.0], [-h * lam, 1.0]]), np.array([[0.0, 0.0], [-h, 0.0]])
    drift = np.array([[1.0, h / 2], [0.0, 1.0]])
    o = np.diag([1.0, c]), np.array([[0.0, 0.0], [0.0, a]])
    M = drift @ o[0] @ drift @ kick[0]
    B = drift @ o[0] @ drift @ kick[1] + drift @ o[1]
    return M, B, np.array([s2, 1.0])


def _sgnht(h, lam, xi, A, T=1.0):
    """SGNHT's (theta, p) map at a fixed thermostat xi (integrators.sgnht)."""
    c = np.exp(-xi * h)
    M = np.array([[1.0 - h * h * lam, h * c], [-h * lam, c]])
    B = np.array([[0.0, h * np.sqrt(2 * A * h * T)], [0.0, np.sqrt(2 * A * h * T)]])
    return M, B, np.array([0.0, 1.0])


@pytest.mark.parametrize("h", [0.01, 0.05, 0.1])
def test_the_time_step_law_is_the_discretised_chains(h):
    """The laws of integrators.time_step_law, from the discrete Lyapunov equation on a
    Gaussian of curvature lam, at the steps the adaptation takes (h^2 lam / 4 <= 0.1):
    BAOAB's variance is exactly the target's without gradient noise, and 1 + h s2 / (2 gamma T)
    of it with noise, up to a relative error of second order (at most h^2 (lam + gamma^2) / 2);
    SGNHT's, at the thermostat xi that gives E[p^2] = T, is at least 1 - 0.6 h A at the
    largest step it takes for a target_bias of h A (max_step), and about 1 - h A / 2 where
    the curvature is small."""
    from scipy.optimize import brentq

    for lam in (0.01, 1.0, 0.4 / h**2):
        assert _stationary(_baoab(h, lam, 0.0, 1.0))[0, 0] * lam == pytest.approx(1, abs=1e-9)
        for s2, gamma in ((1.0, 1.0), (100.0, 1.0), (10.0, 2.0)):
            inflation = _stationary(_baoab(h, lam, s2, gamma))[0, 0] * lam - 1
            law = h * s2 / (2 * gamma)
            assert abs(inflation / law - 1) <= h**2 * (lam + gamma**2) / 2, (lam, s2, gamma)
        A = 1.0

        def kinetic(xi, lam=lam, A=A):
            return _stationary(_sgnht(h, lam, xi, A))[1, 1] - 1.0

        xi = brentq(kinetic, 1e-3, 100.0)
        deflation = 1 - _stationary(_sgnht(h, lam, xi, A))[0, 0] * lam
        assert 0 < deflation <= 0.6 * h * A, (lam, deflation)
        if h**2 * lam <= 0.01:
            assert deflation / (h * A / 2) - 1 == pytest.approx(0, abs=h * A), (lam, deflation)


PRESETS = {
    "SGLD": SGLD,
    "SGHMC": SGHMC,
    "PSGLD": PSGLD,
    "PSGLD+Γ": lambda m: PSGLD(m, correction="exact"),
    "MongeSGLD": MongeSGLD,
    "ShampooSGLD": lambda m: ShampooSGLD(m, update_interval=20),
    "WenzelSGLD": WenzelSGLD,
    "AdamSGLD": AdamSGLD,
    "BAOAB": BAOAB,
    "SGNHT": SGNHT,
    "BADODAB": BADODAB,
    "CyclicalSGLD": CyclicalSGLD,
    "CyclicalSGHMC": CyclicalSGHMC,
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
    peak = np.asarray(mcmc.last_state.adaptation.step_size)[:, None]
    if name.startswith("Cyclical"):  # the next step's: the cosine below the adapted peak
        assert np.all(h > 0) and np.all(h <= peak * (1 + 1e-6))
    else:
        assert np.all(h > 0) and np.all(h == peak)
    precision = np.eye(3) + np.asarray(X).T @ np.asarray(X)
    sd = np.sqrt(np.diag(np.linalg.inv(precision)))
    sd_hat = w.reshape(-1, 3).std(0)
    se = mcse(w)[1]
    # one-sided: with h (c_curv lam + c_noise s2) = target_bias in the worst direction, the
    # discretised chain's variance is at most 1/(1 - target_bias) times the posterior's
    # (the curvature-only end of the exact law; the noise-only end gives 1 + target_bias)
    z = (sd_hat - sd / np.sqrt(1.0 - 0.1)) / se
    assert np.all(z < bonferroni_z(3 * len(PRESETS))), (name, sd_hat / sd, z)


def test_a_kernel_that_cannot_adapt_says_what_to_give():
    with pytest.raises(ValueError, match="'naive sghmc' has no bias law.*give `step_size="
                       ".*without friction the chain has no stationary law"):
        SGHMC(regression, naive=True, resample_momentum_every=50)


def test_sghmc_momentum_follows_the_step():
    state = integrators.SGHMCState({"x": jnp.array([2.0, -4.0])})
    out = trait(integrators.sghmc(), integrators.Rescale).fn(state, 0.25)
    np.testing.assert_allclose(out.momentum["x"], [1.0, -2.0])


def _run_updates(rhos, stiffnesses, accepted=None, num_warmup=MIN_WARMUP, target_bias=0.1):
    """update_step_size over a warm-up of scalar 'positions', from a state whose estimate is
    rhos[0]; returns the states after every step."""
    from numpyro_sgrld.warmup.adaptation import StepSizeState, update_step_size

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
    from numpyro_sgrld.warmup.adaptation import FAST_TARGET

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
    from numpyro_sgrld.warmup.adaptation import SHRINK, too_steep

    rhos = np.full(10, 4.0)
    ok = np.ones(10, bool)
    ok[5] = False
    states = _run_updates(rhos, np.zeros(10), ok)
    np.testing.assert_allclose(states[5].step_size, states[4].step_size / SHRINK, rtol=1e-5)
    # a rise of the minibatch potential beyond NumPyro's max_delta_energy, over T, is too steep
    assert bool(too_steep(10.0, 1011.0, 1.0)) and not bool(too_steep(10.0, 1009.0, 1.0))
    assert not bool(too_steep(10.0, 1011.0, 2.0))


def test_vectorised_chains_give_the_sequential_chains_steps_and_draws():
    """A kernel's vectorised chains (its named vmap over the chains) adapt the same steps and
    give the same draws as sequential chains."""
    runs = {}
    for method in ("vectorized", "sequential"):
        mcmc = MCMC(SGLD(noisy_gaussian, metric=metrics.identity()), num_warmup=MIN_WARMUP,
                    num_samples=100, num_chains=2, chain_method=method, progress_bar=False)
        mcmc.run(random.PRNGKey(1), NOISE)
        runs[method] = (np.asarray(mcmc.last_state.step_size),
                        np.asarray(mcmc.get_samples(group_by_chain=True)["x"]))
    for a, b in zip(runs["vectorized"], runs["sequential"]):
        np.testing.assert_allclose(a, b, rtol=1e-5)


@pytest.mark.parametrize("kernel", [PSGLD, MongeSGLD])
def test_adaptive_presets_sample_in_the_coordinates_learnt_in_warm_up(kernel):
    """With ``step_size=None`` an adaptive preset's metric is whitened by a dense root L
    learnt in warm-up: on a Gaussian posterior L^T H L = I (H the full-data Hessian), and
    the metric is still the preset's own (its name, its moving average)."""
    X, y = _data(n=400, d=3)
    X = X @ jnp.array([[1.0, 0.9, 0.0], [0.0, 0.4, 0.0], [0.0, 0.0, 3.0]])  # correlated
    k = kernel(regression)
    mcmc = MCMC(k, num_warmup=MIN_WARMUP, num_samples=10, progress_bar=False)
    mcmc.warmup(random.PRNGKey(0), X, y)
    metric_state = mcmc.post_warmup_state.sampler_state.metric
    assert k.metric.name == kernel(regression, 1e-3).metric.name
    L = np.asarray(metric_state.factor)
    H = np.eye(3) + np.asarray(X).T @ np.asarray(X)
    np.testing.assert_allclose(L.T @ H @ L, np.eye(3), atol=1e-3)
