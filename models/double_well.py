r"""Chen, Fox & Guestrin's (2014, Sec. 3.2, Fig. 1) double well with noisy gradients.

.. math:: U(\theta) = -2\theta^2 + \theta^4, \qquad p(\theta) \propto e^{-U(\theta)},
          \qquad \nabla\tilde U = \nabla U + \mathcal N(0, 4).

The gradient noise comes from an ordinary subsample plate, as in :mod:`.funnel`: ``noise``
holds ``M`` centred values ``z_m / M`` with sd(z) = 2, and a ``numpyro.factor`` inside
``plate("gradient_noise", M, subsample_size=1)`` adds ``-M z_m theta / M`` to the potential,
so every kernel runs it unchanged and its expectation leaves the target unchanged (the noise
is the centred empirical law of ``M`` normal draws, variance 4 to within ``O(M^{-1/2})``;
:func:`noise_variance` gives it exactly). Pass ``num_data=1``: the "data" are not data.
"""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

__all__ = ["model", "potential", "make_gradient_noise", "noise_variance", "exact_moments",
           "density"]

NOISE_SD = 2.0


def potential(theta):
    """:math:`U(\\theta) = -2\\theta^2 + \\theta^4`."""
    return -2.0 * theta**2 + theta**4


def make_gradient_noise(num_values=100_000, seed=0):
    """``num_values`` centred values ``z_m / M`` with ``z_m ~ N(0, NOISE_SD^2)``."""
    z = np.random.default_rng(seed).normal(size=num_values) * NOISE_SD
    z -= z.mean()
    return jnp.asarray(z / num_values, jnp.float32)


def noise_variance(noise):
    """The gradient noise's variance: the population variance of ``M * noise``."""
    z = np.asarray(noise, np.float64) * len(noise)
    return float(np.mean(z**2))


def model(noise=None):
    theta = numpyro.sample("theta", dist.ImproperUniform(constraints.real, (), ()))
    numpyro.factor("U", -potential(theta))
    if noise is not None:
        with numpyro.plate("gradient_noise", noise.shape[0], subsample_size=1) as idx:
            numpyro.factor("noise", -(noise[idx] * theta))


def density(grid):
    """The normalised density :math:`e^{-U}/Z` on ``grid`` (Z by quadrature on [-4, 4])."""
    fine = np.linspace(-4.0, 4.0, 200_001)
    z = np.trapezoid(np.exp(-potential(fine)), fine)
    return np.exp(-potential(np.asarray(grid, np.float64))) / z


def exact_moments(powers=(1, 2, 4)):
    r""":math:`E[\theta^k]` under :math:`e^{-U}/Z` by quadrature (the tails beyond
    :math:`|\theta| = 4` weigh less than :math:`e^{-220}`)."""
    fine = np.linspace(-4.0, 4.0, 200_001)
    p = density(fine)
    return {k: float(np.trapezoid(fine**k * p, fine)) for k in powers}
