"""The verdict's check of the Gibbs sites within ``SGGibbs``
(``numpyro_sgrld.sampler.gibbs_bias_check``): the moments it keeps against numpy's
covariances, its log spreads against their formula, its rule on hand-made moments, and on a
Gaussian regression whose scale's posterior is exact (a quadrature) that it names a scale the
SG step moves beyond the tolerance and stays quiet where the step does not."""

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from conftest import exact_log_tau, weakly_informed_regression
from numpyro.infer import MCMC

import numpyro_sgrld as ns
from numpyro_sgrld.core.equipartition import Temperatures
from numpyro_sgrld.sampler import gibbs_bias_check as check
from numpyro_sgrld.verdict.judge import MEAN_ERROR
from numpyro_sgrld.verdict.run import Run


def kept_moments(theta, spread, warmup):
    """The moments :func:`check.update` keeps over ``(chains, steps, K)`` and
    ``(chains, steps, J)`` values, the first ``warmup`` steps not counted."""
    chains = []
    for t, s in zip(theta, spread):
        m = check.init(t.shape[-1], s.shape[-1])
        for i in range(t.shape[0]):
            m = check.update(m, jnp.asarray(t[i], jnp.float32), jnp.asarray(s[i], jnp.float32),
                             jnp.asarray(i - warmup))
        chains.append(m)
    return jax.tree.map(lambda *x: np.stack(x), *chains)


def test_the_moments_give_the_pooled_covariances_of_the_gibbs_coordinates_and_spreads():
    """The predicted shift is ``sum_g eps_g Cov(theta_k, L_g) / sd(theta_k)`` over the
    post-warm-up values of all chains pooled, its error the readings' errors carried the
    same way; values far from 0 (the sums are about each chain's first value)."""
    rng = np.random.default_rng(0)
    mix = rng.normal(size=(2, 3))
    theta = rng.normal(size=(2, 60, 2)) + 50.0
    spread = theta @ mix + 0.5 * rng.normal(size=(2, 60, 3)) - 300.0
    warmup = 10
    moments = kept_moments(theta, spread, warmup)
    readings, se = np.array([1.05, 0.98, 1.2]), np.array([0.01, 0.02, 0.03])
    shift, error = check.predicted_shifts(moments, readings, se)
    t = theta[:, warmup:].reshape(-1, 2)
    s = spread[:, warmup:].reshape(-1, 3)
    cov = (t - t.mean(0)).T @ (s - s.mean(0)) / len(t)
    per_sd = cov / t.std(0)[:, None]
    np.testing.assert_allclose(shift, per_sd @ (readings - 1), rtol=2e-3)
    np.testing.assert_allclose(error, np.sqrt(per_sd**2 @ se**2), rtol=2e-3)
    assert np.all(np.asarray(moments.count) == 50)


def test_the_log_spreads_are_summed_over_each_equipartition_group():
    """``L_g = sum_{j in g} log c_j``, ``c_j = (1/sigma_j^2 + F_j)^(-1/2)``: a group per
    coordinate of a small position, one per site of a large one."""
    z = {"a": jnp.zeros(2), "w_decentered": jnp.zeros(3)}
    scale, curvature = jnp.array([1.0, 2.0, 4.0]), jnp.array([0.0, 1.0, 3.0])
    names, index = check.group_names(z, ("w",))
    assert names == ("w_decentered[0]", "w_decentered[1]", "w_decentered[2]")
    c = (1 / scale**2 + curvature) ** -0.5
    spreads = check.log_spreads(z, {"w": (0.0, scale)}, {"w": curvature}, index)
    np.testing.assert_allclose(spreads, np.log(c), rtol=1e-6)
    big = {"a": jnp.zeros(2), "w_decentered": jnp.zeros(200)}
    scale = jnp.linspace(0.5, 2.0, 200)
    names, index = check.group_names(big, ("w",))
    assert names == ("w_decentered",)
    spreads = check.log_spreads(big, {"w": (0.0, scale)}, {"w": jnp.ones(200)}, index)
    np.testing.assert_allclose(spreads, [np.sum(np.log((1 / scale**2 + 1) ** -0.5))],
                               rtol=1e-5)


def test_the_check_names_a_gibbs_site_beyond_the_bound_and_its_error_only():
    """A shift beyond ``MEAN_ERROR`` and its error is named with the target_bias that
    brings it to half the bound; one within the bound, or within its error, is not."""
    rng = np.random.default_rng(1)
    theta = rng.normal(size=(2, 400, 1))
    spread = 9.0 * theta + 0.1 * rng.normal(size=(2, 400, 1))  # Cov/sd about 9
    moments = kept_moments(theta, spread, 0)
    run = Run(given=True, adapts_step_size=True, target_bias=0.1)

    def said(reading, se):
        t = Temperatures(("w_decentered",), np.array([reading]), np.array([se]), reading, se,
                         800, 64)
        return check.problems(moments, t, ("w_decentered",), [("tau", 0)], run, MEAN_ERROR)

    shift = float(check.predicted_shifts(moments, np.array([1.03]), np.array([0.0]))[0][0])
    (problem,) = said(1.03, 0.001)  # about +0.27 sd
    assert "'tau'[0]" in problem and "widens" in problem
    advised = float(re.search(r"target_bias=([0-9.e-]+)", problem).group(1))
    np.testing.assert_allclose(advised, 0.1 * MEAN_ERROR / 2 / shift, rtol=0.01)
    assert said(1.01, 0.001) == []  # about 0.09 sd: within the bound
    assert said(1.03, 0.02) == []  # about 0.27 +- 0.18 sd: within its error
    assert "narrows" in said(0.97, 0.001)[0]
    # at or below 0 a reading is no ratio of spreads (chains far from equilibrium): the
    # equipartition check names it, and no shift is predicted from it
    assert said(0.0, 0.001) == [] and said(-4.8, 0.3) == []


def judged_run(children, predictor_sd, num_samples, chain_method="vectorized",
               interweave_every=None, **own):
    """``(warnings, check(mcmc), log tau's error in sds and its ESS-based error)``; the
    scale drawn given its children alone unless ``interweave_every`` (the prediction's
    case)."""
    rng = np.random.default_rng(0)
    X, y = predictor_sd * rng.normal(size=(200, children)), rng.normal(size=200)
    mcmc = MCMC(ns.SGGibbs(ns.SGLD(weakly_informed_regression, **own),
                           interweave_every=interweave_every), num_warmup=1000,
                num_samples=num_samples, num_chains=4, chain_method=chain_method,
                progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(0), jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32))
    said = " ".join(str(c.message) for c in caught if "cannot be trusted" in str(c.message))
    draws = np.log(np.asarray(mcmc.get_samples(group_by_chain=True)["tau"], np.float64))
    ess = float(np.ravel(numpyro.diagnostics.effective_sample_size(draws))[0])
    mean, sd = exact_log_tau(X, y)
    return said, ns.check(mcmc, warn=False), ((draws.mean() - mean) / sd,
                                              draws.std() / np.sqrt(ess) / sd)


@pytest.mark.slow
@pytest.mark.parametrize("chain_method", ["vectorized", "sequential"])
def test_the_verdict_names_a_scale_that_its_childrens_bias_moves_far(chain_method):
    """36 children the data barely touch, SGLD at ``target_bias=0.35``: ``log tau`` sits
    far beyond the tolerance against its exact law (checked here at z > 3), and the run's
    verdict and ``check(mcmc)`` both name it, with a predicted shift of the same sign."""
    said, verdict, (err, se) = judged_run(36, 0.02, 5000, chain_method, target_bias=0.35)
    assert abs(err) - 3 * se > MEAN_ERROR
    for text in (said, " ".join(verdict.problems)):
        found = re.search(r"'tau'\[0\] \(unconstrained\) is predicted to sit ([+-][0-9.]+)",
                          text)
        assert found and np.sign(float(found.group(1))) == np.sign(err), text


@pytest.mark.slow
def test_the_default_interweaving_keeps_that_scale_within_the_tolerance_and_quiet():
    """The same run at the default ``interweave_every="auto"``: the scale is also drawn given
    its children's non-centred values and all the data, which barely touch them, so it
    follows its prior whatever the children's spread: within ``MEAN_ERROR`` (beyond it by at
    most 3 errors) and not named."""
    said, verdict, (err, se) = judged_run(36, 0.02, 5000, interweave_every="auto",
                                          target_bias=0.35)
    assert abs(err) <= MEAN_ERROR + 3 * se, (err, se)
    assert "is predicted to sit" not in said + " ".join(verdict.problems)


@pytest.mark.slow
def test_the_verdict_names_the_defaults_shift_of_a_scale_held_by_its_prior():
    """9 children the data barely touch, SGLD at its defaults but drawing the scale given its
    children alone (4 chains of 1,000 + 40,000 steps): ``log tau`` sits beyond the tolerance
    against its exact law (at z > 3; ``test_gibbs.py`` holds the full default, interweaving,
    to that law), and the verdict names it."""
    said, verdict, (err, se) = judged_run(9, 0.02, 40000)
    assert abs(err) - 3 * se > MEAN_ERROR
    assert "'tau'[0] (unconstrained) is predicted to sit +" in said, said
