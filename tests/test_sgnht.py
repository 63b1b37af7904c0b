"""SGNHT (Ding et al. 2014): the thermostat's stationary mean, with and without gradient noise,
and the positions' law."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC, init_to_value

from numpyro_sgrld import SGMCMC, SGNHT, integrators, metrics


def _run(kernel, chains, steps, *args):
    """(MCMC, the thermostats of the chains' last states)."""
    mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, thinning=steps, num_chains=chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *args)
    xi = np.asarray(mcmc.last_state.sampler_state.integrator.thermostat)
    return mcmc, xi


def _z_mean(x, expected):
    return (x.mean() - expected) / (x.std(ddof=1) / np.sqrt(len(x)))


def test_thermostat_and_positions_with_exact_gradients():
    """N(0, I₁₀), exact gradients, A = 1, h = 0.01, 500 chains of 3000 steps (30 units of
    time): the thermostat's mean is A (the invariant law has ξ ~ N(A, T/d)), its sd
    sqrt(T/d), and the positions' variance 1 (|z| < 4; the O(h) bias, about 1 %, is below
    the 2 % standard error)."""

    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0).expand([10]).to_event(1))

    mcmc, xi = _run(SGNHT(model, 0.01, diffusion=1.0), 500, 3000)
    assert abs(_z_mean(xi, 1.0)) < 4
    sd_se = np.sqrt(0.1) / np.sqrt(2 * (len(xi) - 1))  # se of an sd of Gaussian draws
    assert abs(xi.std(ddof=1) - np.sqrt(0.1)) < 4 * sd_se
    x = np.asarray(mcmc.get_samples()["x"]).ravel()
    z = (x.var(ddof=1) - 1.0) / np.sqrt(2.0 / (x.size - 1))
    assert abs(z) < 4


@pytest.mark.slow
def test_thermostat_absorbs_the_gradient_noise():
    """A location model θ ∈ R⁵ with N = 1000 points y_i ~ N(0, I) and a minibatch of 10
    (drawn without replacement): the minibatch gradient N(θ − ȳ_B) has noise variance
    σ² = N² S² (1 − n/N)/n per coordinate (S² the data's sample variance), and SGNHT's
    thermostat settles at A + hσ²/(2T) (Ding et al.: the diffusion the noise adds), here
    about 2 — not at A, which the same test rejects. 100 chains of 500,000 steps (10 units of
    time; the thermostat relaxes over a few)."""
    N, n, d, A, h = 1000, 10, 5, 1.0, 2e-5
    y = jax.random.normal(jax.random.PRNGKey(1), (N, d))

    def model(y):
        theta = numpyro.sample("theta", dist.Normal(0.0, 10.0).expand([d]).to_event(1))
        with numpyro.plate("data", N, subsample_size=n) as idx:
            numpyro.sample("y", dist.Normal(theta, 1.0).to_event(1), obs=y[idx])

    S2 = np.asarray(jnp.var(y, axis=0, ddof=1))
    sigma2 = N ** 2 * S2 * (1 - n / N) / n
    expected = A + h * sigma2.mean() / 2
    # start at the posterior mode: from far away the first gradients (N times the distance)
    # heat the thermostat far above its equilibrium, from which it cools by only T·h a step
    start = init_to_value(values={"theta": jnp.mean(y, axis=0)})
    _, xi = _run(SGNHT(model, h, diffusion=A, init_strategy=start), 100, 500_000, y)
    assert abs(_z_mean(xi, expected)) < 4, (xi.mean(), expected)
    assert abs(_z_mean(xi, A)) > 4


def test_bad_input():
    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="diffusion"):
        integrators.sgnht(diffusion=0.0)
    with pytest.raises(ValueError, match="step_size"):
        SGNHT(model)
    with pytest.raises(ValueError, match="takes only the metrics"):
        SGMCMC(model, 0.1, metric=metrics.rmsprop(), integrator=integrators.sgnht())
