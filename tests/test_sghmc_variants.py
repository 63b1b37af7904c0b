"""SGHMC's options beyond Chen et al.'s Eq. 15: Horowitz's partial momentum refreshment (the
discretised chain's exact law) and naive SGHMC (warns; Chen et al.'s Fig. 1 double well: it
does not sample the target while SGHMC and HMC do)."""

import warnings

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import bonferroni_z
from jax import random
from numpyro.infer import MCMC
from scipy.linalg import solve_discrete_lyapunov

from numpyro_sgrld import SGHMC


def standard_normal():
    numpyro.sample("x", dist.Normal(0.0, 1.0))


def _refresh_law(h, alpha, a, T=1.0):
    r"""Stationary variance of x for SGHMC with a partial refresh every step on N(0, 1) with
    exact gradients: v' = (1-alpha)(a v + sqrt(1-a^2) f) - h x + sqrt(2 alpha h T) xi,
    f ~ N(0, hT), x' = x + v' (a linear Gaussian chain: a discrete Lyapunov equation)."""
    F = np.array([[1.0 - h, (1 - alpha) * a], [-h, (1 - alpha) * a]])
    s2 = (1 - alpha) ** 2 * (1 - a**2) * h * T + 2 * alpha * h * T  # v's noise variance
    Q = np.array([[s2, s2], [s2, s2]])  # x' = x + v' carries v's noise too
    return solve_discrete_lyapunov(F, Q)[0, 0]


def test_partial_refreshment_has_the_law_of_its_discretised_chain():
    """The position variance of 1000 vectorised chains after 600 steps (the chain contracts by
    0.755 a step: its start is forgotten to 1e-70) equals the
    discretised chain's exact stationary variance (z-score on the chains' variance), and the
    refreshment is visible: without it (a = 1 is no refresh) the law differs measurably."""
    h, alpha, a = 0.2, 0.05, 0.6
    expected = _refresh_law(h, alpha, a)
    assert abs(expected / _refresh_law(h, alpha, 0.999999) - 1) > 0.05  # the test can tell
    chains, steps = 1000, 600
    kernel = SGHMC(standard_normal, step_size=h, friction=alpha, resample_momentum_every=1,
                   partial_refresh=a)
    mcmc = MCMC(kernel, num_warmup=0, num_samples=steps, num_chains=chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(random.PRNGKey(0), init_params={"x": jnp.zeros(chains)})
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"][:, -1], np.float64)
    var = x.var()
    # the variance of a sample variance of normal draws: 2 sigma^4 / (n - 1)
    z = (var - expected) / (expected * np.sqrt(2.0 / (chains - 1)))
    assert abs(z) < bonferroni_z(1), (var, expected, z)


def test_naive_sghmc_warns_and_needs_resampling():
    with pytest.warns(UserWarning, match="naive=True.*does not sample the posterior"):
        SGHMC(standard_normal, step_size=0.01, naive=True, resample_momentum_every=50)
    with pytest.raises(ValueError, match="`naive=True`.*needs `resample_momentum_every`"):
        SGHMC(standard_normal, step_size=0.01, naive=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="'naive sghmc' has no bias law"):
            SGHMC(standard_normal, naive=True, resample_momentum_every=50)
    with pytest.raises(ValueError, match="`partial_refresh=0.5`.*resample_momentum_every=k"):
        SGHMC(standard_normal, step_size=0.01, partial_refresh=0.5)
    for bad in (1.0, -0.1):
        with pytest.raises(ValueError, match="`partial_refresh` must be a finite number in"):
            SGHMC(standard_normal, step_size=0.01, partial_refresh=bad,
                  resample_momentum_every=1)
    with pytest.raises(ValueError, match="`naive` must be True or False"):
        SGHMC(standard_normal, step_size=0.01, naive="yes", resample_momentum_every=1)


@pytest.mark.slow
def test_chen_double_well_naive_sghmc_is_measurably_wrong():
    """Chen et al.'s Fig. 1 (``benchmarks/papers/chen_double_well.py``, 100,000 gradients per
    chain):
    E[theta^2] and E[theta^4] of HMC with MH and of SGHMC within Monte Carlo error of the exact
    moments (four z-scores, Bonferroni), naive SGHMC's beyond it. SGHMC's own discretisation
    bias at epsilon = 0.1 is below the Monte Carlo error at this length."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks" / "papers"))
    import chen_double_well as cdw
    from numpyro_sgrld.models import double_well

    noise = double_well.make_gradient_noise()
    out = {name: cdw.summarise(cdw.run_sampler(name, 100_000, 4, 0, noise))
           for name in ("HMC", "SGHMC", "naive SGHMC")}
    limit = bonferroni_z(4)
    for name in ("HMC", "SGHMC"):
        assert abs(out[name]["z_2"]) < limit and abs(out[name]["z_4"]) < limit, out[name]
    assert out["naive SGHMC"]["z_2"] > limit, out["naive SGHMC"]
