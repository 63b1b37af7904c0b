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
from numpyro_sgrld.core.gradients import Target
from numpyro_sgrld.data.subsample import full_batch
from numpyro_sgrld.sampler.potentials import minibatch_potential, minibatch_potential_with_aux


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
    X, y = jnp.asarray(X), jnp.asarray(y)
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
    batches = jnp.arange(X.shape[0])[:, None]

    @jax.jit
    def everything(point):
        def one(i):
            est = estimator.estimate(point, {"data": i}, state, target)
            plain = jax.grad(lambda x: target.potential(x, {"data": i})[0])(point)
            return est.value, est.grad, est.oracle(point)[1], plain
        return jax.vmap(one)(batches)

    exact_value, exact_grad = jax.value_and_grad(target.full_potential)(z)
    values, grads, oracle, plain = everything(z)
    np.testing.assert_allclose(np.mean(values), exact_value, rtol=1e-5)
    for k in z:
        np.testing.assert_allclose(np.mean(grads[k], axis=0), exact_grad[k], rtol=1e-4,
                                   atol=1e-4)
        np.testing.assert_allclose(oracle[k], grads[k], rtol=1e-6)  # same minibatch, same z
    # at the anchor every minibatch gives the exact full-data gradient
    _, anchor_grad = jax.value_and_grad(target.full_potential)(anchor)
    _, at_anchor, _, _ = everything(anchor)
    for k in z:
        np.testing.assert_allclose(at_anchor[k], np.broadcast_to(anchor_grad[k],
                                                                 at_anchor[k].shape),
                                   rtol=1e-5, atol=1e-5)
    # a plain minibatch estimate at z does vary across minibatches: the check has power
    assert np.std(plain["w"], axis=0).max() > 1.0


@pytest.mark.slow  # compile-heavy: in the slow set, to keep the default run under 5 minutes
def test_the_anchor_is_refreshed_on_schedule():
    """The estimator re-anchors at the position it is given at steps k * update_every (k >= 1),
    one epoch (N / n) by default; and in a vectorised MCMC run with ``update_every=3`` the
    transitions 3, 6, 9 re-anchor every chain at the position it starts from (that
    transition's own draw: the draws are one step behind the proposal, which the next step
    checks)."""
    X, y = _data(n=40)
    target = _target(X, y)._replace(steps_per_epoch=10)
    z0 = {"w": jnp.zeros(3), "sigma": jnp.array(0.0)}
    z1 = {"w": jnp.ones(3), "sigma": jnp.array(0.5)}
    batch = {"data": jnp.array([0])}
    for estimator, every in ((gradients.svrg(), 10), (gradients.svrg(update_every=4), 4)):
        state = estimator.init(z0, random.PRNGKey(0), target)
        steps = jnp.array([1, every - 1, every, 2 * every])
        centres = jax.jit(jax.vmap(lambda t, e=estimator, s=state: e.estimate(
            z1, batch, s, target._replace(step=t)).state.centre["w"]))(steps)
        for centre, moved in zip(np.asarray(centres), (False, False, True, True)):
            np.testing.assert_array_equal(centre, (z1 if moved else z0)["w"])
    model = partial(regression, subsample_size=4)
    kernel = SGLD(model, step_size=1e-3, gradient=gradients.svrg(update_every=3))
    mcmc = MCMC(kernel, num_warmup=0, num_samples=12, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y, extra_fields=("gradient_state.centre",))
    z = np.asarray(mcmc.get_samples(group_by_chain=True)["w"])
    anchors = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["gradient_state.centre"]["w"])
    for i in range(3, 12):  # after transition i the anchor is z after transition 3*(i//3)
        np.testing.assert_array_equal(anchors[:, i], z[:, 3 * (i // 3)])
    np.testing.assert_array_equal(anchors[:, 0], anchors[:, 2])  # the initial anchor
    assert not np.allclose(anchors[:, 2], anchors[:, 3])


def test_svrg_bad_input():
    with pytest.raises(ValueError, match="`update_every` must be an integer >= 1.*refreshes"):
        gradients.svrg(update_every=0)
    with pytest.raises(ValueError, match="svrg"):
        SGLD(potential_fn=lambda z: jnp.sum(z["x"] ** 2), step_size=1e-3,
             gradient=gradients.svrg())
