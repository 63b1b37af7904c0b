"""The SVRG gradient estimator (``gradients.svrg``): unbiased by exact enumeration of the
minibatches, exact at its anchor, its anchor refreshed on schedule, and the inputs it refuses."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC

from numpyro_sgrld import SGLD, gradients
from numpyro_sgrld.gradients import Target, minibatch_potential, minibatch_potential_with_aux
from numpyro_sgrld.subsample import full_batch


def _data(n=6, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X @ np.arange(1.0, d + 1) + rng.normal(size=n)).astype(np.float32)
    return X, y


def regression(X, y, subsample_size=1):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, sigma), obs=y[idx])


def _target(X, y, step=None):
    model = partial(regression, subsample_size=1)
    full = minibatch_potential(full_batch(model), (X, y))
    return Target(minibatch_potential_with_aux(model, (X, y)), lambda z: full(z, {}), None,
                  steps_per_epoch=X.shape[0], step=step)


def test_svrg_is_unbiased_and_exact_at_its_anchor():
    """Every minibatch of size 1 (equally likely under sampling with replacement): the mean of
    the estimates is the full-data value and gradient at any point, and at the anchor every
    minibatch gives the full-data gradient itself (variance zero)."""
    X, y = _data()
    target = _target(X, y)
    estimator = gradients.svrg()
    anchor = {"w": jnp.array([0.5, 0.1, -0.3]), "sigma": jnp.array(-0.2)}
    z = {"w": jnp.array([0.3, -0.2, 1.0]), "sigma": jnp.array(0.4)}
    state = estimator.init(anchor, random.PRNGKey(0), target)
    exact_value, exact_grad = jax.value_and_grad(target.full_potential)(z)
    _, anchor_grad = jax.value_and_grad(target.full_potential)(anchor)
    values, grads = [], []
    for i in range(X.shape[0]):
        batch = {"data": jnp.array([i])}
        est = estimator.estimate(z, batch, state, target)
        values.append(est.value)
        grads.append(est.grad)
        at_anchor = estimator.estimate(anchor, batch, state, target).grad
        for k in z:
            np.testing.assert_allclose(at_anchor[k], anchor_grad[k], rtol=1e-5, atol=1e-5)
        # the oracle is the same estimator on the same minibatch
        np.testing.assert_allclose(est.oracle(z)[1]["w"], est.grad["w"], rtol=1e-6)
    np.testing.assert_allclose(np.mean(values), exact_value, rtol=1e-5)
    for k in z:
        np.testing.assert_allclose(np.mean([g[k] for g in grads], axis=0), exact_grad[k],
                                   rtol=1e-4, atol=1e-4)
    # a plain minibatch estimate at z does vary across minibatches: the check has power
    def plain(i):
        return jax.grad(lambda x: target.potential(x, {"data": jnp.array([i])})[0])(z)["w"]

    plain = [plain(i) for i in range(X.shape[0])]
    assert np.std(plain, axis=0).max() > 1.0


def test_the_anchor_is_refreshed_to_the_position_every_update_every_steps():
    """With ``update_every=3`` the transitions 3, 6, 9, ... re-anchor at the position they
    start from (the draw of the transition before); vectorised chains refresh in lockstep."""
    X, y = _data(n=40)
    model = partial(regression, subsample_size=4)
    kernel = SGLD(model, step_size=1e-3, gradient=gradients.svrg(update_every=3))
    mcmc = MCMC(kernel, num_warmup=0, num_samples=12, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y, extra_fields=("gradient_state.centre",))
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["w"])
    anchors = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["gradient_state.centre"]["w"])
    for i in range(12):  # after transition i the anchor is z after transition 3*(i//3) - 1
        if i >= 3:
            np.testing.assert_array_equal(anchors[:, i], z[:, 3 * (i // 3) - 1])
    np.testing.assert_array_equal(anchors[:, 0], anchors[:, 2])  # the initial anchor
    assert not np.allclose(anchors[:, 2], anchors[:, 3])
    # the default: one epoch, N / n = 10 steps
    default = SGLD(model, step_size=1e-3, gradient=gradients.svrg())
    mcmc = MCMC(default, num_warmup=0, num_samples=21, progress_bar=False)
    mcmc.run(random.PRNGKey(1), X, y, extra_fields=("gradient_state.centre",))
    z = np.asarray(mcmc.get_samples()["w"])
    anchors = np.asarray(mcmc.get_extra_fields()["gradient_state.centre"]["w"])
    np.testing.assert_array_equal(anchors[10], z[9])
    np.testing.assert_array_equal(anchors[20], z[19])
    np.testing.assert_array_equal(anchors[10], anchors[19])


def test_svrg_bad_input():
    with pytest.raises(ValueError, match="`update_every` must be an integer >= 1.*refreshes"):
        gradients.svrg(update_every=0)
    with pytest.raises(ValueError, match="svrg"):
        SGLD(potential_fn=lambda z: jnp.sum(z["x"] ** 2), step_size=1e-3,
             gradient=gradients.svrg())
