"""One-dimensional Gaussian targets, the exact ground truth for step-size and bias studies."""

import numpyro
import numpyro.distributions as dist

__all__ = ["standard_normal", "normal", "sgld_stationary_variance"]


def standard_normal():
    """``theta ~ Normal(0, 1)``: the target of Rensmeyer et al.'s Figure 1."""
    numpyro.sample("theta", dist.Normal(0.0, 1.0))


def normal(sigma=1.0):
    """``theta ~ Normal(0, sigma)``; no data, so every gradient is exact."""
    numpyro.sample("theta", dist.Normal(0.0, sigma))


def sgld_stationary_variance(sigma, step_size):
    r"""Stationary variance of the *discretised* SGLD chain on :math:`\mathcal N(0, \sigma^2)`
    with exact gradients: :math:`\sigma^2 / (1 - h / (2\sigma^2))` (requires :math:`h < 2\sigma^2`).

    From :math:`\theta' = (1 - h/\sigma^2)\theta + \sqrt{2h}\,\xi`:
    :math:`v = (1 - h/\sigma^2)^2 v + 2h`.
    """
    if not 0 < step_size < 2 * sigma**2:
        raise ValueError("the chain is stationary only for 0 < step_size < 2 sigma^2")
    return sigma**2 / (1.0 - step_size / (2.0 * sigma**2))
