"""A momentum integrator's closing half kick across a Gibbs sweep
(``numpyro_sgrld.sampler.gibbs_kick``): BAOAB, BADODAB, SGHMC and SGNHT within ``SGGibbs``
apply the half kick of the potential the step ended in, at the point where it ended."""

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import bonferroni_z, exact_log_tau
from numpyro.infer import MCMC

import numpyro_sgrld as ns
from numpyro_sgrld.sampler.potentials import minibatch_potential


def regression(X, y, subsample_size=None):
    """``w_j ~ N(0, tau^2)``, ``tau ~ Gamma(2, 2)``, ``y ~ N(X w, 1)`` (as
    ``conftest.weakly_informed_regression``, the minibatch's size an argument)."""
    tau = numpyro.sample("tau", dist.Gamma(2.0, 2.0))
    w = numpyro.sample("w", dist.Normal(0.0, tau).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])


def data(children, predictor_sd, rows=200, seed=0):
    rng = np.random.default_rng(seed)
    X, y = predictor_sd * rng.normal(size=(rows, children)), rng.normal(size=rows)
    return jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)


@pytest.mark.parametrize("name", ["BAOAB"] + [  # the others: the same carry, with the slow set
    pytest.param(name, marks=pytest.mark.slow) for name in ("BADODAB", "SGHMC", "SGNHT")])
def test_the_closing_half_kick_is_the_ended_potentials_gradient_on_any_minibatch(name):
    X, y = data(6, 1.0)  # informed children: the data's part of the gradient is large
    kernel = ns.SGGibbs(getattr(ns, name)(partial(regression, subsample_size=20),
                                          step_size=0.05), interweave_every=None)
    state = kernel.init(jax.random.PRNGKey(0), 20, None, (X, y), {})
    step = jax.jit(lambda s: kernel.sample(s, (X, y), {}))  # one compile, not 25 eager steps
    for _ in range(25):  # past warm-up: the curvature F learnt, the sweeps moving tau
        state = step(state)
    gibbs, after = kernel.sweep(state, (X, y), {})
    r, q = after.chain.sampler_state.integrator.closing
    # where the next step starts (the kernel's proposal, where it keeps one)
    x_old, x_new = (s.chain.z if s.chain.proposal is None else s.chain.proposal
                    for s in (state.sg_state, after))
    assert abs(float(gibbs["tau"] - state.z["tau"])) > 1e-3  # the sweep moved the scale

    def gradient(z, tau, idx):
        kwargs = kernel._inner_kwargs({}, {"tau": tau}, state.curvature, state.centre)
        return jax.grad(minibatch_potential(kernel.inner_kernel.model, (X, y), kwargs))(
            z, {"data": idx})

    for seed in range(3):
        idx = jax.random.choice(jax.random.PRNGKey(seed), 200, (20,), replace=False)
        old = gradient(x_old, state.z["tau"], idx)
        new = gradient(x_new, gibbs["tau"], idx)
        for k in old:
            np.testing.assert_allclose(r[k] * new[k] + q[k], old[k], rtol=1e-4, atol=1e-3)
        # not vacuous: read as it is, the next step's gradient is another
        assert np.max(np.abs(np.asarray(new["w_decentered"] - old["w_decentered"]))) > 0.1


def test_a_step_without_a_sweep_leaves_the_closing_half_kick_as_its_own():
    X, y = data(3, 0.1)
    kernel = ns.SGGibbs(ns.BAOAB(regression, step_size=0.1), gibbs_every=1000)
    state = kernel.init(jax.random.PRNGKey(0), 2, None, (X, y), {})
    step = jax.jit(lambda s: kernel.sample(s, (X, y), {}))
    for _ in range(4):
        state = step(state)
    r, q = state.sg_state.chain.sampler_state.integrator.closing
    assert all(np.all(np.asarray(v) == 1) for v in jax.tree.leaves(r))
    assert all(np.all(np.asarray(v) == 0) for v in jax.tree.leaves(q))
    sgld = ns.SGGibbs(ns.SGLD(regression, step_size=0.1)).init(
        jax.random.PRNGKey(0), 2, None, (X, y), {})
    assert not hasattr(sgld.sg_state.chain.sampler_state.integrator, "closing")


def test_the_half_kick_is_carried_for_a_model_given_numpy_data():
    """The priors' gradient reads the model's arguments as arrays (numpy data indexed by the
    placeholder plates' traced indices failed inside the compiled sweep)."""
    X, y = (np.asarray(a) for a in data(3, 0.1))
    mcmc = MCMC(ns.SGGibbs(ns.SGHMC(partial(regression, subsample_size=20), step_size=0.01)),
                num_warmup=5, num_samples=5, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), X, y)
    assert np.isfinite(np.asarray(mcmc.get_samples()["tau"])).all()


@pytest.mark.slow
def test_baoab_within_gibbs_keeps_the_exact_law_of_a_gaussian_hierarchy_at_a_large_step():
    """With exact gradients BAOAB samples a Gaussian exactly at any stable step; within Gibbs,
    with the half kick read as the next step's gradient, ``log tau``'s sd came out 8 % wide
    at ``step_size=1.5`` and 4 % wide at 0.75 (64 chains; at 0.75 with these 16, mean z -3.1
    and variance z 5.8: this test fails). Carried, what remains is of second order: the
    momentum a sweep carries over is in BAOAB's equilibrium for the scale drawn before it,
    whose law given the position depends on that scale; it moves ``log tau``'s mean by
    +0.011 ± 0.002 sd at 1.5 and +0.003 ± 0.002 at 0.75
    (``docs/results/gibbs_closing_kick_composition.json``), within this run's Monte Carlo
    error (0.007 sd)."""
    X, y = data(9, 0.1)
    mcmc = MCMC(ns.SGGibbs(ns.BAOAB(regression, step_size=0.75)), num_warmup=1000,
                num_samples=20_000, num_chains=16, chain_method="vectorized",
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the verdict's own findings are not under test
        mcmc.run(jax.random.PRNGKey(0), X, y)
    draws = np.log(np.asarray(mcmc.get_samples(group_by_chain=True)["tau"], np.float64))
    mean, sd = exact_log_tau(np.asarray(X, np.float64), np.asarray(y, np.float64))
    centred = draws - mean
    ess_mean = float(numpyro.diagnostics.effective_sample_size(draws))
    ess_var = float(numpyro.diagnostics.effective_sample_size(centred ** 2))
    z_mean = centred.mean() / (draws.std() / np.sqrt(ess_mean))
    # the variance about the exact mean, its error from its own ESS
    var = np.mean(centred ** 2)
    z_var = (var - sd ** 2) / (np.std(centred ** 2) / np.sqrt(ess_var))
    z = bonferroni_z(2)
    assert abs(z_mean) < z and abs(z_var) < z, (z_mean, z_var, np.sqrt(var) / sd)
