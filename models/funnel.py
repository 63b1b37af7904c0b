r"""Neal's funnel as in Yu et al. (2023), Figure 2, with noisy gradients.

.. math:: v \sim \mathcal N(0, 80), \qquad x \mid v \sim \mathcal N(2, \mathrm{softplus}(v))

(variances; NumPyro's scales are their square roots). Yu et al. add N(0, 1) noise to every
coordinate of the exact gradient. Here that noise comes from an ordinary subsample plate, so
any kernel runs it unchanged: ``noise`` holds ``M`` centred vectors ``z_m / M`` with
``z_m ~ N(0, I)``, and a ``numpyro.factor`` inside ``plate("gradient_noise", M,
subsample_size=1)`` adds ``-M * <noise_m, theta>`` to the potential. Its gradient is the
exact one plus ``z_m`` (mean exactly zero, covariance ≈ I), and its expectation leaves the
target unchanged. Pass ``num_data=1`` to adaptive kernels: the "data" are not data.
"""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["model", "make_gradient_noise", "V_SCALE"]

V_SCALE = float(np.sqrt(80.0))


def make_gradient_noise(num_vectors=100_000, seed=0):
    """``num_vectors`` centred 2-vectors ``z_m / M``, ``z_m ~ N(0, I)``."""
    z = np.random.default_rng(seed).normal(size=(num_vectors, 2))
    z -= z.mean(0)
    return jnp.asarray(z / num_vectors, jnp.float32)


def model(noise=None):
    v = numpyro.sample("v", dist.Normal(0.0, V_SCALE))
    x = numpyro.sample("x", dist.Normal(2.0, jnp.sqrt(jnp.logaddexp(v, 0.0))))
    if noise is not None:
        with numpyro.plate("gradient_noise", noise.shape[0], subsample_size=1) as idx:
            numpyro.factor("noise", -(noise[idx] @ jnp.stack([x, v])))
