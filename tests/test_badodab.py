"""BADODAB (Leimkuhler & Shang 2016): the thermostat's stationary law with exact gradients,
the gradient noise it absorbs, the positions' law, and the inputs it refuses."""

import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import bonferroni_z, check_thermostat_absorbs_noise, thermostats, z_of_mean

from numpyro_sgrld import BADODAB, SGMCMC, integrators, metrics


@pytest.mark.parametrize("mass", [1.0, pytest.param(4.0, marks=pytest.mark.slow)])
def test_thermostat_and_positions_with_exact_gradients(mass):
    """N(0, I_10), exact gradients, A = 1, h = 0.05, 500 chains of 4000 steps (200 units of
    time: from its start at p = 0 the thermostat relaxes over tens of units, and 2000 chains
    after 50 units still had a mean 2 standard errors low): the thermostat is
    N(A, T/(d mu)) (mean and sd by z-scores) and the positions' variance 1 (the splitting's
    bias is below the 2 % standard error)."""

    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0).expand([10]).to_event(1))

    mcmc, xi = thermostats(BADODAB(model, 0.05, diffusion=1.0, thermal_mass=mass), 500, 4000)
    limit = bonferroni_z(3)
    assert abs(z_of_mean(xi, 1.0)) < limit
    sd = np.sqrt(1.0 / (10 * mass))
    assert abs(xi.std(ddof=1) - sd) < limit * sd / np.sqrt(2 * (len(xi) - 1))
    x = np.asarray(mcmc.get_samples()["x"]).ravel()
    assert abs((x.var(ddof=1) - 1.0) / np.sqrt(2.0 / (x.size - 1))) < limit


@pytest.mark.slow
def test_thermostat_absorbs_the_gradient_noise():
    """The thermostat at A + hσ²/2 under a known minibatch noise
    (``conftest.check_thermostat_absorbs_noise``)."""
    check_thermostat_absorbs_noise(BADODAB)


def test_bad_input():
    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="`diffusion` must be"):
        integrators.badodab(diffusion=0.0)
    with pytest.raises(ValueError, match="`thermal_mass` must be"):
        BADODAB(model, 0.1, thermal_mass=-1.0)
    with pytest.raises(ValueError, match="step_size"):
        BADODAB(model, step_size=-0.1)
    with pytest.raises(ValueError, match="takes only a constant metric.*position-dependent"):
        SGMCMC(model, 0.1, metric=metrics.rmsprop(), integrator=integrators.badodab())
