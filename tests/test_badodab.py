"""BADODAB (Leimkuhler & Shang 2016): the thermostat's stationary law with exact gradients,
the gradient noise it absorbs, the positions' law, and the inputs it refuses."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import bonferroni_z
from numpyro.infer import MCMC, init_to_value

from numpyro_sgrld import BADODAB, SGMCMC, integrators, metrics


def _run(kernel, chains, steps, *args):
    mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, thinning=steps, num_chains=chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), *args)
    return mcmc, np.asarray(mcmc.last_state.sampler_state.integrator.thermostat)


def _z_mean(x, expected):
    return (x.mean() - expected) / (x.std(ddof=1) / np.sqrt(len(x)))


@pytest.mark.parametrize("mass", [1.0, 4.0])
def test_thermostat_and_positions_with_exact_gradients(mass):
    """N(0, I_10), exact gradients, A = 1, h = 0.05, 500 chains of 4000 steps (200 units of
    time: from its start at p = 0 the thermostat relaxes over tens of units, and 2000 chains
    after 50 units still had a mean 2 standard errors low): the thermostat is
    N(A, T/(d mu)) (mean and sd by z-scores) and the positions' variance 1 (the splitting's
    bias is below the 2 % standard error)."""

    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0).expand([10]).to_event(1))

    mcmc, xi = _run(BADODAB(model, 0.05, diffusion=1.0, thermal_mass=mass), 500, 4000)
    limit = bonferroni_z(3)
    assert abs(_z_mean(xi, 1.0)) < limit
    sd = np.sqrt(1.0 / (10 * mass))
    assert abs(xi.std(ddof=1) - sd) < limit * sd / np.sqrt(2 * (len(xi) - 1))
    x = np.asarray(mcmc.get_samples()["x"]).ravel()
    assert abs((x.var(ddof=1) - 1.0) / np.sqrt(2.0 / (x.size - 1))) < limit


@pytest.mark.slow
def test_thermostat_absorbs_the_gradient_noise():
    """The location model of tests/test_sgnht.py (N = 1000, minibatches of 10 indices drawn
    with replacement: the gradient noise's variance is N^2 S^2 (N - 1) / (N n) per coordinate,
    S^2 the data's sample variance): the thermostat settles at A + h sigma^2 / (2T), not at A
    (both z-tested)."""
    N, n, d, A, h = 1000, 10, 5, 1.0, 2e-5
    y = jax.random.normal(jax.random.PRNGKey(1), (N, d))

    def model(y):
        theta = numpyro.sample("theta", dist.Normal(0.0, 10.0).expand([d]).to_event(1))
        with numpyro.plate("data", N, subsample_size=n) as idx:
            numpyro.sample("y", dist.Normal(theta, 1.0).to_event(1), obs=y[idx])

    S2 = np.asarray(jnp.var(y, axis=0, ddof=1))
    sigma2 = N ** 2 * S2 * (N - 1) / (N * n)
    expected = A + h * sigma2.mean() / 2
    start = init_to_value(values={"theta": jnp.mean(y, axis=0)})
    _, xi = _run(BADODAB(model, h, diffusion=A, init_strategy=start), 100, 500_000, y)
    limit = bonferroni_z(2)
    assert abs(_z_mean(xi, expected)) < limit, (xi.mean(), expected)
    assert abs(_z_mean(xi, A)) > limit


def test_bad_input():
    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="`diffusion` must be"):
        integrators.badodab(diffusion=0.0)
    with pytest.raises(ValueError, match="`thermal_mass` must be"):
        BADODAB(model, 0.1, thermal_mass=-1.0)
    with pytest.raises(ValueError, match="step_size"):
        BADODAB(model)
    with pytest.raises(ValueError, match="takes only the metrics"):
        SGMCMC(model, 0.1, metric=metrics.rmsprop(), integrator=integrators.badodab())
