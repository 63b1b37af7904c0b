r"""Bayesian logistic regression, and the German credit data set as the literature uses it.

.. math:: w \sim \mathcal N(0, I), \qquad y_i \mid w \sim \mathrm{Bernoulli}(\sigma(x_i^\top w)).
"""

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

__all__ = ["model", "load_german_credit", "GERMAN_CREDIT"]

GERMAN_CREDIT = Path(__file__).parent / "data" / "german.data-numeric.gz"


def model(X, y=None, *, subsample_size=None, prior_scale=1.0):
    """Logistic regression (include a column of ones in ``X`` for a bias)."""
    w = numpyro.sample("w", dist.Normal(0.0, prior_scale).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=None if y is None else y[idx])


def load_german_credit():
    """Statlog German credit (numeric): 1000 x 24 features, standardised (population sd),
    a column of ones appended (the bias, last), labels ``raw - 1`` (1 = bad credit).

    Returns ``X`` (1000 x 25, float32) and ``y`` (1000, int32) as JAX arrays. The data ship
    with the package (``data/german.data-numeric.gz``): Statlog (German Credit Data), Hans
    Hofmann, UCI Machine Learning Repository, 1994, CC BY 4.0.
    """
    raw = np.loadtxt(GERMAN_CREDIT)
    features, labels = raw[:, :-1], raw[:, -1]
    features = (features - features.mean(0)) / features.std(0)
    X = np.concatenate([features, np.ones((features.shape[0], 1))], axis=1)
    return jnp.asarray(X, jnp.float32), jnp.asarray(labels - 1, jnp.int32)
