"""One-dimensional Gaussian targets, the exact ground truth for step-size and bias studies."""

import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["standard_normal", "normal", "sgld_stationary_variance", "biased_density"]


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


def _unnormalised_biased_density(kernel, theta, **params):
    a = np.abs(theta)
    if kernel == "psgld":
        return (params.get("eps", 1e-8) + a) * np.exp(-0.5 * theta**2)
    if kernel == "monge":
        return (1.0 + params.get("alpha2", 1.0) * theta**2) * np.exp(-0.5 * theta**2)
    if kernel == "shampoo":
        return a * np.exp(-0.5 * theta**2)
    if kernel == "adam":
        scale, eps = params.get("drift_scale", 1.0), params.get("eps", 1e-8)
        return np.exp(-0.5 * theta**2 - scale * a) * (a + eps) ** (scale * eps)
    if kernel == "exact":
        return np.exp(-0.5 * theta**2)
    raise ValueError(f"unknown kernel {kernel!r}; use psgld, monge, shampoo, adam or exact")


def biased_density(kernel, **params):
    r"""Small-step stationary density of an uncorrected adaptive kernel on :math:`\mathcal N(0,1)`
    (Rensmeyer & Niggemann 2023), as a normalised function of θ.

    ``kernel``: ``"psgld"`` :math:`\propto\varphi(\theta)(\lambda + |\theta|)` (``eps`` λ);
    ``"monge"`` :math:`\propto\varphi(\theta)(1 + a\theta^2)` (``alpha2`` a);
    ``"shampoo"`` :math:`\propto\varphi(\theta)|\theta|`;
    ``"adam"`` :math:`\propto\varphi(\theta)e^{-a|\theta|}(|\theta| + \lambda)^{a\lambda}`
    (``drift_scale`` a, ``eps`` λ); ``"exact"``: :math:`\varphi` itself. Valid when the metric's
    moving average is short compared with the process's mixing time.
    """
    grid = np.linspace(-12.0, 12.0, 240001)
    norm = np.trapezoid(_unnormalised_biased_density(kernel, grid, **params), grid)
    return lambda theta: _unnormalised_biased_density(kernel, np.asarray(theta), **params) / norm
