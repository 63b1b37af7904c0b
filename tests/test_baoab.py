"""BAOAB (Leimkuhler & Matthews 2013) against the exact law, and told apart from SGLD."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC

from numpyro_sgrld import BAOAB, SGLD, integrators, metrics

CHAINS = 2000


def _last_states(kernel, steps):
    """The last state of CHAINS independent vectorised chains: independent draws of the
    chain's law after ``steps`` steps."""
    mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, thinning=steps, num_chains=CHAINS,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0))
    return {k: np.asarray(v)[:, -1] for k, v in mcmc.get_samples(group_by_chain=True).items()}


def _z_variance(x, expected):
    """z of a sample variance of independent Gaussian draws against ``expected``."""
    return (np.var(x, ddof=1) - expected) / (expected * np.sqrt(2.0 / (len(x) - 1)))


def test_baoab_samples_a_gaussian_exactly_where_sglds_variance_is_inflated():
    """N(0, σ²), σ = 1, exact gradients, h = 0.5 (stable: h < 2σ), γ = 1, 200 steps (100
    units of time, 100 relaxation times of the O step): BAOAB's position variance is σ²
    (|z| < 4), while SGLD at the same h has σ²/(1 − h/(2σ²)) = 4/3 — and the same test
    rejects σ² for SGLD (|z| > 4) and rejects 4/3 for BAOAB."""

    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0))

    h = 0.5
    x = _last_states(BAOAB(model, h, friction=1.0), 200)["x"]
    assert abs(_z_variance(x, 1.0)) < 4
    assert abs(_z_variance(x, 1.0 / (1 - h / 2))) > 4
    s = _last_states(SGLD(model, h), 200)["x"]
    assert abs(_z_variance(s, 1.0 / (1 - h / 2))) < 4
    assert abs(_z_variance(s, 1.0)) > 4


@pytest.mark.slow
def test_baoab_samples_a_correlated_gaussian_exactly():
    """2-D Gaussian, sds (1, 2), correlation 0.8, h = 0.4 (stable: h√λ_max ≈ 1.2 < 2): the
    sample covariance matches Σ entry by entry, |z| < 4 with the standard errors of a
    covariance estimate of independent Gaussian draws, Var(s_ij) = (Σ_ii Σ_jj + Σ_ij²)/(n−1)."""
    cov = np.array([[1.0, 1.6], [1.6, 4.0]])

    def model():
        numpyro.sample("x", dist.MultivariateNormal(jnp.zeros(2), jnp.asarray(cov)))

    x = _last_states(BAOAB(model, 0.4, friction=1.0), 400)["x"]
    sample = np.cov(x, rowvar=False)
    se = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov ** 2) / (CHAINS - 1))
    z = (sample - cov) / se
    assert np.all(np.abs(z) < 4), z


@pytest.mark.slow
def test_baoab_composes_with_a_constant_metric():
    """BAOAB with a constant diagonal metric (mass D⁻¹) on N(0, diag(1, 9)) with h = 0.5: still
    exact (the metric rescales the time per coordinate; stability h·sqrt(λ_max(DH)) < 2)."""

    def model():
        numpyro.sample("x", dist.Normal(0.0, jnp.array([1.0, 3.0])).to_event(1))

    kernel = BAOAB(model, 0.5, metric=metrics.diagonal({"x": jnp.array([1.0, 4.0])}))
    x = _last_states(kernel, 300)["x"]
    for i, var in enumerate([1.0, 9.0]):
        assert abs(_z_variance(x[:, i], var)) < 4


def test_bad_input():
    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0))

    with pytest.raises(ValueError, match="friction"):
        integrators.baoab(friction=0.0)
    with pytest.raises(ValueError, match="step_size"):
        BAOAB(model, step_size=0.0)
    with pytest.raises(ValueError, match="baoab"):
        BAOAB(model, 0.1, metric=metrics.rmsprop(), correction="exact")
