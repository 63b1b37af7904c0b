"""What warm-up learnt within Gibbs, given back (``numpyro_sgrld.sampler.gibbs_settings``): a
default ``SGGibbs`` run's ``learnt_settings`` make ``SGGibbs(K(model, settings=learnt))`` take
the learnt run's own steps after its warm-up (the decentred children's coordinates, the
control variates' centre, the outside sites' farther step), and so sample the same law; settings
learnt on one side of Gibbs are refused on the other."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC
from test_gibbs import Y, check_joint, gibbs_fn
from test_gibbs import model as gaussian_hierarchy

import numpyro_sgrld as ns
from numpyro_sgrld.core.composition import site_scaled
from numpyro_sgrld.core.metrics import LearntState
from numpyro_sgrld.core.metrics.constant import dense_preconditioner
from numpyro_sgrld.sampler import gibbs_settings


def sparse_with_intercept(X, y):
    """A centred sparse logistic regression with an intercept ``b`` outside every Gibbs
    site's Markov blanket (so it steps farther after warm-up: ``gibbs_bias.full_step``)."""
    d = X.shape[1]
    tau = numpyro.sample("tau", dist.Gamma(0.5, 0.5))
    lam = numpyro.sample("lam", dist.Gamma(0.5, 0.5).expand([d]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, tau * lam).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 5.0))
    with numpyro.plate("data", X.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w + b), obs=y[idx])


def _data():
    X = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (200, 16)), np.float32)
    logits = X[:, 0] - X[:, 1] + 0.5
    y = (np.asarray(jax.random.uniform(jax.random.PRNGKey(1), (200,))) < 1 / (1 + np.exp(-logits)))
    y = y.astype(np.int32)
    return X, y


@pytest.fixture(scope="module")
def learnt_run():
    """Two vectorised chains at the defaults (no interweaving, so that a step's draws do not
    depend on its index), after warm-up."""
    X, y = _data()
    mcmc = MCMC(ns.SGGibbs(ns.SGLD(sparse_with_intercept), interweave_every=None),
                num_warmup=400, num_samples=100, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), X, y)
    return mcmc, (X, y)


@pytest.mark.slow
def test_given_back_settings_take_the_learnt_runs_own_steps(learnt_run):
    """From the learnt run's last state and the new kernel's first state, with the same keys
    and the proposal the run drew for its next step, five transitions land at the same
    positions (the decentred coordinates' curvature, the metric with the outside site's factor
    written in, the step, the centre and its switches are the run's); the settings hold that
    factor (``1 / bias_share`` on ``b``)."""
    mcmc, args = learnt_run
    last = mcmc.last_state
    learnt = ns.learnt_settings(mcmc)
    share = np.asarray(last.sg_state.warmup.step.bias_share)
    assert np.all(share < 1)  # the outside site's step is farther
    np.testing.assert_allclose(np.asarray(learnt.metric.scale["b"]),
                               np.asarray(last.sg_state.sampler_state.metric.scale["b"]) / share,
                               rtol=1e-6)
    kernel = ns.SGGibbs(ns.SGLD(sparse_with_intercept, settings=learnt), interweave_every=None)
    state = kernel.init(jax.random.split(jax.random.PRNGKey(5), 2), 0, None, args, {})
    np.testing.assert_allclose(np.asarray(state.step_size), np.asarray(last.step_size))
    for k in learnt.gibbs.curvature:
        np.testing.assert_array_equal(state.curvature[k], last.curvature[k])
    np.testing.assert_array_equal(state.centre.on, last.centre.on)
    sg = state.sg_state  # the same keys, and the next step's proposal the run drew
    sg = sg._replace(rng_key=last.sg_state.rng_key, batch_state=last.sg_state.batch_state,
                     chain=sg.chain._replace(proposal=last.sg_state.chain.proposal))
    state = state._replace(rng_key=last.rng_key, sg_state=sg)
    before, after = last, state
    for _ in range(5):
        before = mcmc.sampler.sample(before, args, {})
        after = kernel.sample(after, args, {})
    for k in before.z:
        np.testing.assert_allclose(np.asarray(after.z[k]), np.asarray(before.z[k]), rtol=1e-5,
                                   atol=1e-6, err_msg=k)


def test_the_folded_metric_is_the_site_scaled_one():
    """:func:`gibbs_settings._fold` writes ``S`` into a learnt diagonal and a dense root: the
    same drift and noise as :func:`site_scaled` on the unfolded metric."""
    position = {"a": jnp.zeros(2), "b": jnp.zeros(())}
    factors = {"b": jnp.asarray(2.5)}
    v = {"a": jnp.array([0.3, -1.2]), "b": jnp.asarray(0.7)}
    root = jax.random.normal(jax.random.PRNGKey(0), (3, 3))
    unravel = jax.flatten_util.ravel_pytree(position)[1]
    dense = dense_preconditioner(root, unravel)
    folded = gibbs_settings._fold(LearntState({"a": jnp.ones(2), "b": jnp.ones(())}, root),
                                  position, factors)
    assert folded.scale["b"] == 2.5 and jnp.all(folded.scale["a"] == 1.0)
    for name in ("drift", "noise"):
        want = getattr(site_scaled(dense, factors), name)(v)
        got = getattr(dense_preconditioner(folded.factor, unravel), name)(v)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-5, err_msg=f"{name} {k}")


def test_a_users_gibbs_fn_at_the_defaults_and_its_settings_given_back_sample_the_joint_law():
    """SGLD within Gibbs at its defaults (4 vectorised chains of 1,000 + 2,000 steps: half the
    slow set's run of every preset, ``test_gibbs.py``), and its settings given back
    (``num_warmup=0``): each run's means of ``mu`` and ``x`` and ``mu``'s sd within Bonferroni
    z of the closed form, the given-back run at the curvature the first learnt. Settings
    learnt on one side of Gibbs are refused on the other, and by an ``SGGibbs`` built
    otherwise (one run serves both: a fixture would run once per test worker)."""
    mcmc = MCMC(ns.SGGibbs(ns.SGLD(gaussian_hierarchy), gibbs_fn, ["mu"]), num_warmup=1000,
                num_samples=2000, num_chains=4, chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), Y)
    check_joint(mcmc.get_samples(group_by_chain=True))
    learnt = ns.learnt_settings(mcmc)
    again = MCMC(ns.SGGibbs(ns.SGLD(gaussian_hierarchy, settings=learnt), gibbs_fn, ["mu"]),
                 num_warmup=0, num_samples=4000, num_chains=4, chain_method="vectorized",
                 progress_bar=False)
    again.run(jax.random.PRNGKey(1), Y)
    np.testing.assert_array_equal(again.last_state.curvature["x"], learnt.gibbs.curvature["x"])
    check_joint(again.get_samples(group_by_chain=True))

    with pytest.raises(ValueError, match="within SGGibbs"):  # a kernel on its own
        MCMC(ns.SGLD(gaussian_hierarchy, settings=learnt), num_warmup=0, num_samples=5,
             num_chains=4, chain_method="vectorized", progress_bar=False).run(
            jax.random.PRNGKey(0), Y)
    with pytest.raises(ValueError, match="outside SGGibbs"):
        ns.SGGibbs(ns.SGLD(gaussian_hierarchy, settings=learnt._replace(gibbs=None)),
                   gibbs_fn, ["mu"])
    kernel = ns.SGGibbs(ns.SGLD(gaussian_hierarchy, settings=learnt), gibbs_fn, ["mu"],
                        decentre=False)
    with pytest.raises(ValueError, match="decentred sites"):
        kernel.init(jax.random.split(jax.random.PRNGKey(0), 4), 0, None, (Y,), {})
    with pytest.raises(TypeError, match="from the run"):
        ns.learnt_settings(mcmc.last_state)


def test_settings_learnt_on_data_of_other_shapes_are_refused_naming_the_site():
    """A decentred site's learnt curvature of another shape than the site has here (settings
    learnt on 20 groups given to a run on 10) is refused naming the site and both shapes
    (without the check, the SG kernel's set-up failed with a broadcasting error naming
    neither); of the same shape it is the start, and with nothing learnt the start is 0."""
    latent = {"a": jnp.ones((2, 10))}
    learnt = gibbs_settings.GibbsSettings(curvature={"a": jnp.full((2, 20), 3.0)})
    with pytest.raises(ValueError, match=r"site 'a' has shape \(2, 20\).*\(2, 10\)"):
        gibbs_settings.curvature(learnt, latent, ("a",))
    same = learnt._replace(curvature={"a": jnp.full((2, 10), 3.0)})
    np.testing.assert_array_equal(gibbs_settings.curvature(same, latent, ("a",))["a"], 3.0)
    np.testing.assert_array_equal(gibbs_settings.curvature(None, latent, ("a",))["a"],
                                  np.zeros((2, 10)))
