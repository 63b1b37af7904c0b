"""SGNHT (Ding et al. 2014): the thermostat's stationary mean, with and without gradient noise,
and the positions' law."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import check_thermostat_absorbs_noise, thermostats, z_of_mean
from numpyro.infer import MCMC, init_to_value

from numpyro_sgrld import SGMCMC, SGNHT, integrators, metrics


def test_thermostat_and_positions_with_exact_gradients():
    """N(0, I₁₀), exact gradients, A = 1, h = 0.01, 500 chains of 3000 steps (30 units of
    time): the thermostat's mean is A (the invariant law has ξ ~ N(A, T/d)), its sd
    sqrt(T/d), and the positions' variance 1 (|z| < 4; the O(h) bias, about 1 %, is below
    the 2 % standard error)."""

    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0).expand([10]).to_event(1))

    mcmc, xi = thermostats(SGNHT(model, 0.01, diffusion=1.0), 500, 3000)
    assert abs(z_of_mean(xi, 1.0)) < 4
    sd_se = np.sqrt(0.1) / np.sqrt(2 * (len(xi) - 1))  # se of an sd of Gaussian draws
    assert abs(xi.std(ddof=1) - np.sqrt(0.1)) < 4 * sd_se
    x = np.asarray(mcmc.get_samples()["x"]).ravel()
    z = (x.var(ddof=1) - 1.0) / np.sqrt(2.0 / (x.size - 1))
    assert abs(z) < 4


def test_warm_up_settles_a_thermostat_heated_on_the_way_in():
    """The conjugate regression of the defaults grid (N = 2,000, d = 5) on the full data,
    SGNHT at a given h = 1e-3 from the default initial point: the descent heats the thermostat
    to tens or hundreds, and its own dynamics cool it by at most T per time unit. Settled at
    the end of warm-up (2 time units), it starts sampling at about A (the invariant law has
    xi ~ N(A, T/d): |z| < 5 per chain), and every coordinate's mean and variance match the
    closed form: batch means of 2,000 steps (2 time units, twice the momentum's relaxation
    time 1/A: this underdamped chain's autocorrelations oscillate, which Geyer's ESS misreads),
    Student's t over the 40 batches, Bonferroni over the 10 comparisons. Unsettled, the sds
    were 0.11x."""
    from numpyro_sgrld.models import linear_regression as lr
    from scipy.stats import t as student_t

    X, y, _ = lr.make_data(seed=0, num_data=2000, num_features=5)
    exact = lr.exact_posterior(X, y)
    mcmc = MCMC(SGNHT(lr.model, 1e-3), num_warmup=2000, num_samples=20_000, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    mcmc.warmup(jax.random.PRNGKey(0), X, y)
    xi = np.asarray(mcmc.post_warmup_state.sampler_state.integrator.thermostat)
    assert np.all(np.abs(xi - 1.0) < 5 * np.sqrt(1.0 / 5)), xi
    with warnings.catch_warnings():  # the verdict's ESS misreads the oscillations (above)
        warnings.simplefilter("ignore")
        mcmc.run(mcmc.post_warmup_state.rng_key, X, y)
    w = np.asarray(mcmc.get_samples(group_by_chain=True)["w"], np.float64)
    w = (w - np.asarray(exact.mean)) / np.asarray(exact.sd)
    limit = student_t.ppf(1 - 0.01 / 20, 39)
    for moment in (w, w**2 - 1):
        batches = moment.reshape(4, 10, -1, 5).mean(2).reshape(-1, 5)
        z = batches.mean(0) / (batches.std(0, ddof=1) / np.sqrt(len(batches)))
        assert np.all(np.abs(z) < limit), z


@pytest.mark.slow
def test_thermostat_absorbs_the_gradient_noise():
    """The thermostat at A + hσ²/2 under a known minibatch noise
    (``conftest.check_thermostat_absorbs_noise``)."""
    check_thermostat_absorbs_noise(SGNHT)


def test_bad_input():
    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="diffusion"):
        integrators.sgnht(diffusion=0.0)
    with pytest.raises(ValueError, match="step_size"):
        SGNHT(model, step_size=-0.1)
    with pytest.raises(ValueError, match="takes only a constant metric.*position-dependent"):
        SGMCMC(model, 0.1, metric=metrics.rmsprop(), integrator=integrators.sgnht())


@pytest.mark.slow
def test_positions_on_the_conjugate_regression_with_subsampling():
    """The conjugate regression (N = 500, d = 3, minibatch 50, with replacement), SGNHT from the
    posterior mean with diffusion A = 30 and h = 3e-5, where the gradient noise adds hσ²/2 ≈
    0.3 (1 %) to the injected diffusion: every coordinate's mean and sd match the closed form
    (Bonferroni z over the 6 comparisons, ESS-based standard errors; 200 chains of 50,000
    steps). Where the gradient noise dominates, the scalar thermostat cannot make anisotropic
    noise isotropic: the positions' sds then follow the thermostat's own law (0.97, 1.00, 1.03
    at A = 1, h = 1e-3, measured and predicted; benchmarks/investigations/sgnht_noise_bias.py),
    which this test does not cover."""
    from functools import partial

    from conftest import assert_moments
    from numpyro_sgrld.models import linear_regression as lr

    X, y, _ = lr.make_data(seed=0, num_data=500, num_features=3)
    exact = lr.exact_posterior(X, y)
    start = init_to_value(values={"w": jnp.asarray(exact.mean, jnp.float32)})
    kernel = SGNHT(partial(lr.model, subsample_size=50), 3e-5, diffusion=30.0,
                   init_strategy=start)
    mcmc = MCMC(kernel, num_warmup=5000, num_samples=50_000, thinning=50, num_chains=200,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(2), X, y)
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)["w"], np.float64)
    assert_moments(draws, exact.mean, exact.sd)
