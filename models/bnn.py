"""Bayesian MLPs built on Haiku, with a subsampled data plate, and small data loaders."""

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from numpyro_sgrld import priors
from numpyro_sgrld.bridges.haiku import random_haiku_module

__all__ = ["mlp_classifier", "load_digits"]


def _mlp(sizes):
    return hk.transform(lambda x: hk.nets.MLP(sizes, activation=jax.nn.relu)(x))


def mlp_classifier(X, y=None, *, hidden=(100,), num_classes=10, prior=None, subsample_size=None):
    """ReLU MLP classifier, ``y ~ Categorical(logits=net(x))``. The logits are recorded as the
    deterministic site ``"logits"`` when ``y`` is None (prediction), not while sampling."""
    apply = random_haiku_module(
        "net", _mlp([*hidden, num_classes]), (1, X.shape[1]), prior or priors.gaussian()
    )
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        logits = apply(X[idx])
        if y is None:
            numpyro.deterministic("logits", logits)
        numpyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx])


def load_digits(test_fraction=0.2, seed=0):
    """scikit-learn's bundled 8x8 digits (1797 images), pixels scaled to [0, 1], a fixed random
    train/test split. Returns ``X_train, y_train, X_test, y_test``."""
    from sklearn.datasets import load_digits as sk_digits

    data = sk_digits()
    X = (data.data / 16.0).astype(np.float32)
    y = data.target.astype(np.int32)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(round(test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    return jnp.asarray(X[train]), jnp.asarray(y[train]), jnp.asarray(X[test]), jnp.asarray(y[test])


def mlp_regressor(
    X,
    y=None,
    *,
    hidden=(50,),
    prior=None,
    noise_scale=None,
    noise_prior_scale=1.0,
    subsample_size=None,
):
    """ReLU MLP regressor, ``y ~ Normal(net(x), sigma)``.

    Start SG kernels from prior draws (``init_strategy=init_to_sample``): NumPyro's default
    ``init_to_uniform`` puts every weight in (-2, 2), far out in the tails of a He-scaled prior,
    where the first gradients are huge.

    ``noise_scale`` fixes sigma; by default it is learned with ``sigma ~ HalfNormal(
    noise_prior_scale)``. The predictive mean is the deterministic site ``"mean"`` and the noise
    scale ``"sigma"`` when ``y`` is None.
    """
    apply = random_haiku_module(
        "net", _mlp([*hidden, 1]), (1, X.shape[1]), prior or priors.gaussian()
    )
    if noise_scale is None:
        sigma = numpyro.sample("sigma", dist.HalfNormal(noise_prior_scale))
    else:
        sigma = numpyro.deterministic("sigma", jnp.asarray(noise_scale))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        mean = apply(X[idx])[..., 0]
        if y is None:
            numpyro.deterministic("mean", mean)
        numpyro.sample("y", dist.Normal(mean, sigma), obs=None if y is None else y[idx])
