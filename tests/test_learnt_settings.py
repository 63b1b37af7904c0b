"""What warm-up learnt, given back: a default run's :class:`~numpyro_sgrld.LearntSettings` make a
new kernel sample the same law without a warm-up, where the adapted step given back on its own
(a step of the unpreconditioned chain) is rejected; and the verdict names a given step that
froze the chains."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC

import numpyro_sgrld as ns
from numpyro_sgrld.verdict.judge import judgement
from numpyro_sgrld.verdict.step_rejections import MOSTLY_REJECTED, step_rejection_problem

#: |z| beyond this fails: a family of a few dozen z-scores at about 1e-3 chance of a false alarm
Z = 4.0

#: The adapted step's variance inflation at ``target_bias`` 0.1: within [1, 1/(1 - 0.1)]
#: (docs/step_size.md: ``1 + delta`` where noise dominates, ``1/(1 - delta)`` where curvature
#: does).
INFLATION = 1.0 / (1.0 - 0.1)


def _z_scores(draws, mean, cov):
    """z-scores of the draws' means and variances (``(chains, draws, d)``) against a Gaussian
    law ``N(mean, cov)`` whose variances the adapted step may inflate by up to
    :data:`INFLATION`: standard errors from each coordinate's bulk ESS (the mean's
    ``sd/sqrt(ESS)``, the log-variance's ``sqrt(2/ESS)``)."""
    draws = np.asarray(draws, np.float64)
    ess = np.array([effective_sample_size(draws[..., j]) for j in range(draws.shape[-1])])
    ess = np.where(ess > 0, ess, np.nan)  # frozen chains: no effective draws
    flat = draws.reshape(-1, draws.shape[-1])
    sd = np.sqrt(np.diag(cov))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        z_mean = (flat.mean(0) - mean) / (sd / np.sqrt(ess))
        log_ratio = np.log(flat.var(0) / np.diag(cov))
        outside = np.where(log_ratio < 0, log_ratio,
                           np.maximum(log_ratio - np.log(INFLATION), 0.0))
        z_var = outside / np.sqrt(2.0 / ess)
    return z_mean, z_var, ess


def _same_law(draws, mean, cov):
    z_mean, z_var, ess = _z_scores(draws, mean, cov)
    return bool(np.all(np.abs(z_mean) < Z) and np.all(np.abs(z_var) < Z) and np.all(ess > 50))


# A Gaussian posterior whose scales span four orders of magnitude, correlated: the learnt
# preconditioner is its covariance (a constant Hessian), in whose units the adapted step is
# about 0.2; the unpreconditioned chain is stable only below 2 / lambda_max = 2e-4.
SDS = np.array([0.01, 1.0, 30.0])
CORR = np.array([[1.0, 0.6, 0.0], [0.6, 1.0, -0.4], [0.0, -0.4, 1.0]])
COV = CORR * np.outer(SDS, SDS)
MEAN = np.array([1.0, -2.0, 3.0])
LAM_MAX = float(np.linalg.eigvalsh(np.linalg.inv(COV)).max())


def gaussian():
    numpyro.sample("w", dist.MultivariateNormal(jnp.asarray(MEAN, jnp.float32),
                                                jnp.asarray(COV, jnp.float32)))


def _run(kernel, key, num_warmup=0, num_samples=2000, **run):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(key), **run)
    return mcmc, [str(w.message) for w in caught if issubclass(w.category, UserWarning)]


@pytest.fixture(scope="module")
def default_gaussian():
    """``SGLD(gaussian)`` as a user writes it: 2 vectorised chains (the shortest warm-up:
    only what it learnt is read)."""
    mcmc, _ = _run(ns.SGLD(gaussian), 0, num_warmup=200, num_samples=10)
    return mcmc


def test_the_settings_hold_each_chains_step_metric_and_position(default_gaussian):
    learnt = ns.learnt_settings(default_gaussian)
    state = default_gaussian.last_state
    assert learnt.num_chains == 2
    np.testing.assert_array_equal(learnt.step_size, state.warmup.step.step_size)
    np.testing.assert_array_equal(learnt.metric.factor, state.sampler_state.metric.factor)
    np.testing.assert_array_equal(learnt.position["w"], state.z["w"])
    # the learnt metric is the covariance: the step is in its units, not the model's
    factor = np.asarray(learnt.metric.factor[0], np.float64)
    np.testing.assert_allclose(factor @ factor.T / np.outer(SDS, SDS), CORR, atol=1e-3)
    assert np.all(learnt.step_size * LAM_MAX > 100)
    one = learnt.chain(1)
    assert one.num_chains is None and float(one.step_size) == float(learnt.step_size[1])


def test_learnt_settings_sample_the_same_law_without_warm_up(default_gaussian):
    """The settings given back run with num_warmup=0 and sample N(MEAN, COV) (z-scores of
    means and variances from the ESS); the adapted step given back on its own runs without the
    preconditioner and is rejected, its chains frozen."""
    learnt = ns.learnt_settings(default_gaussian)
    again, warned = _run(ns.SGLD(gaussian, settings=learnt), 1, num_samples=1500)
    assert np.all(np.asarray(again.last_state.step_size) == np.asarray(learnt.step_size))
    assert int(np.sum(again.last_state.num_rejected)) == 0
    draws = again.get_samples(group_by_chain=True)["w"]
    assert _same_law(draws, MEAN, COV), _z_scores(draws, MEAN, COV)
    assert not any("cannot be trusted" in w for w in warned), warned

    raw = float(np.median(learnt.step_size))
    given, warned = _run(ns.SGLD(gaussian, step_size=raw), 1, num_samples=1500,
                         init_params=learnt.position)
    draws = given.get_samples(group_by_chain=True)["w"]
    assert not _same_law(draws, MEAN, COV)
    assert np.all(np.asarray(given.last_state.num_rejected) > 0.4 * 1500)
    assert any(f"step_size={raw:.3g}" in w for w in warned), warned


def test_a_step_five_times_the_stable_one_is_named_in_the_runs_advice():
    """5x the largest stable step of the unpreconditioned chain (2/lambda_max): the warning at
    the run's end and numpyro_sgrld.check lead with the step, its value and what to do."""
    h = 5 * 2.0 / LAM_MAX
    mcmc, warned = _run(ns.SGLD(gaussian, step_size=h), 2, num_samples=1000,
                        init_params={"w": jnp.tile(jnp.asarray(MEAN, jnp.float32), (2, 1))})
    value = f"step_size={h:.3g}"
    named = [w for w in warned if value in w]
    assert named, warned
    assert "too large" in named[0] and "settings=numpyro_sgrld.learnt_settings(mcmc)" in named[0]
    v = ns.check(mcmc, warn=False)
    assert not v.trusted and value in v.problems[0], v.problems


@pytest.mark.slow
def test_the_fast_loop_names_the_given_step_too():
    h = 5 * 2.0 / LAM_MAX
    with ns.fast_sampling_loop():
        mcmc, warned = _run(ns.SGLD(gaussian, step_size=h), 2, num_samples=1000,
                            init_params={"w": jnp.tile(jnp.asarray(MEAN, jnp.float32), (2, 1))})
    assert any(f"step_size={h:.3g}" in w and "too large" in w for w in warned), warned
    assert np.all(np.asarray(mcmc.last_state.num_rejected) > 0.4 * 1000)


def test_the_verdict_names_a_chosen_step_only_when_most_proposals_were_rejected():
    kernel = ns.SGLD(gaussian, step_size=1e-3)
    sites = [("w", j) for j in range(3)]
    # 2 chains of 1000 steps; a rejected proposal takes two steps: 600 rejected of 2000
    # steps reject 600 of 1400 proposals, under half
    few = judgement([1.0] * 3, [500.0] * 3, sites, 600, 1000, kernel, np.full(2, 1e-3),
                    num_chains=2)
    assert not any("step_size=0.001" in p for p in few.problems)
    assert any("600 steps after warm-up were rejected" in p for p in few.problems)
    frozen = judgement([np.inf] * 3, [0.0] * 3, sites, 990, 1000, kernel, np.full(2, 1e-3),
                       num_chains=2)
    assert "step_size=0.001" in frozen.problems[0] and "too large" in frozen.problems[0]
    assert "identity" in frozen.problems[0]
    # an adapted step is not named (the warm-up chose it): the general rejection advice
    adapted = ns.SGLD(gaussian)
    assert step_rejection_problem(adapted, np.full(2, 1e-3), 990, 1000, 2) is None
    assert step_rejection_problem(kernel, 1e-3, 1, 1000, 2) is None
    assert MOSTLY_REJECTED == 0.5


def test_settings_are_checked_where_they_are_given(default_gaussian):
    learnt = ns.learnt_settings(default_gaussian)
    with pytest.raises(ValueError, match=r"settings._replace\(step_size=h\)"):
        ns.SGLD(gaussian, step_size=0.1, settings=learnt)
    with pytest.raises(TypeError, match="LearntSettings"):
        ns.SGLD(gaussian, settings={"step_size": 0.1})
    with pytest.raises(ValueError, match="finite step > 0"):
        ns.SGLD(gaussian, settings=learnt._replace(step_size=-learnt.step_size))
    with pytest.raises(ValueError, match="cyclical"):
        ns.CyclicalSGLD(gaussian, settings=learnt)
    # chains that cannot tell which entry is theirs, or a different number of chains
    for chains, method in ((2, "sequential"), (3, "vectorized")):
        mcmc = MCMC(ns.SGLD(gaussian, settings=learnt), num_warmup=0, num_samples=10,
                    num_chains=chains, chain_method=method, progress_bar=False)
        with pytest.raises(ValueError, match=r"settings.chain\(0\)"):
            mcmc.run(jax.random.PRNGKey(0))
    # a kernel composed otherwise: PSGLD's metric is not SGLD's learnt one
    with pytest.raises(ValueError, match="metric state does not fit"):
        MCMC(ns.PSGLD(gaussian, settings=learnt.chain(0)), num_warmup=0, num_samples=10,
             progress_bar=False).run(jax.random.PRNGKey(0))
    # a run with a given step learnt nothing
    given = MCMC(ns.SGLD(gaussian, step_size=1e-4), num_warmup=0, num_samples=10,
                 progress_bar=False)
    with pytest.raises(ValueError, match="warm-up learnt nothing"):
        ns.learnt_settings(given)


@pytest.mark.slow
def test_one_chains_settings_start_every_chain_and_another_step_is_tried_in_their_metric(
        default_gaussian):
    """``settings.chain(0)`` for sequential chains; ``_replace(step_size=...)`` halves the step
    in the learnt metric (and the chains still sample the law)."""
    learnt = ns.learnt_settings(default_gaussian).chain(0)
    half = learnt._replace(step_size=learnt.step_size / 2)
    mcmc = MCMC(ns.SGLD(gaussian, settings=half), num_warmup=0, num_samples=2000,
                num_chains=2, chain_method="sequential", progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(3))
    np.testing.assert_allclose(np.asarray(mcmc.last_state.step_size), float(half.step_size))
    draws = mcmc.get_samples(group_by_chain=True)["w"]
    assert _same_law(draws, MEAN, COV), _z_scores(draws, MEAN, COV)


# -- a conjugate regression with minibatches: the control variates' centre travels too -------


def _regression(num_data=2000, subsample=50):
    """y = X w + noise with columns on scales 1, 30 and 0.05, w ~ N(0, 10^2 I): the posterior
    is N(mean, cov) in closed form."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(num_data, 3)) * np.array([1.0, 30.0, 0.05])
    y = X @ np.array([0.5, -0.1, 8.0]) + rng.normal(size=num_data)
    precision = X.T @ X + np.eye(3) / 100.0
    cov = np.linalg.inv(precision)
    mean = cov @ X.T @ y

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0.0, 10.0).expand([3]).to_event(1))
        with numpyro.plate("data", X.shape[0], subsample_size=subsample) as idx:
            numpyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])

    return model, X.astype(np.float32), y.astype(np.float32), mean, cov


@pytest.mark.slow
@pytest.mark.parametrize("kernel", [ns.SGLD, ns.PSGLD, ns.SGHMC],
                         ids=["SGLD", "PSGLD", "SGHMC"])
def test_a_default_runs_settings_sample_the_regressions_posterior_without_warm_up(kernel):
    model, X, y, mean, cov = _regression()
    default, _ = _run(kernel(model), 0, num_warmup=500, num_samples=4000, X=X, y=y)
    learnt = ns.learnt_settings(default)
    assert learnt.gradient is not None
    again, warned = _run(kernel(model, settings=learnt), 1, num_samples=4000, X=X, y=y)
    assert int(np.sum(again.last_state.num_rejected)) == 0
    for run in (default, again):
        draws = run.get_samples(group_by_chain=True)["w"]
        assert _same_law(draws, mean, cov), _z_scores(draws, mean, cov)
    raw = float(np.median(learnt.step_size))
    given, warned = _run(kernel(model, step_size=raw), 1, num_samples=1000,
                         init_params=learnt.position, X=X, y=y)
    assert not _same_law(given.get_samples(group_by_chain=True)["w"], mean, cov)
