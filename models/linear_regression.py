r"""Conjugate Bayesian linear regression with its closed-form posterior.

.. math::
    w \sim \mathcal N(0, \tau^2 I_d), \qquad y_i \mid w \sim \mathcal N(x_i^\top w, s^2),

with posterior :math:`\mathcal N(\mu, \Sigma)`,
:math:`\Sigma^{-1} = I/\tau^2 + X^\top X / s^2`, :math:`\mu = \Sigma X^\top y / s^2`.
"""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["model", "make_data", "exact_posterior", "GaussianPosterior"]


def model(X, y=None, *, subsample_size=None, prior_scale=1.0, noise_scale=0.5):
    """The regression model; ``subsample_size`` turns on minibatching of the data plate."""
    w = numpyro.sample("w", dist.Normal(0.0, prior_scale).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, noise_scale), obs=None if y is None else y[idx])


def make_data(seed=0, num_data=2000, num_features=5, noise_scale=0.5):
    """Synthetic data: standard normal features, weights ``N(0, 1)``. Returns ``X, y, w``."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(num_data, num_features)).astype(np.float32)
    w = rng.normal(size=num_features).astype(np.float32)
    y = (X @ w + noise_scale * rng.normal(size=num_data)).astype(np.float32)
    return jnp.asarray(X), jnp.asarray(y), w


class GaussianPosterior(NamedTuple):
    mean: np.ndarray
    cov: np.ndarray

    @property
    def sd(self):
        return np.sqrt(np.diag(self.cov))


def exact_posterior(X, y, prior_scale=1.0, noise_scale=0.5):
    """The closed-form posterior of ``w`` (computed in float64)."""
    X = np.asarray(X, np.float64)
    y = np.asarray(y, np.float64)
    precision = np.eye(X.shape[1]) / prior_scale**2 + X.T @ X / noise_scale**2
    cov = np.linalg.inv(precision)
    return GaussianPosterior(cov @ X.T @ y / noise_scale**2, cov)
