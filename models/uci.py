"""UCI regression sets with the 20 published train/test splits (Hernandez-Lobato & Adams 2015;
Gal & Ghahramani 2016), read from ``<data>/uci/<name>/``."""

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from ._data import data_path

__all__ = ["UCISplit", "load_uci_split", "published_results", "UCI_DATASETS"]

UCI_DATASETS = (
    "concrete",
    "energy",
    "yacht",
    "wine-quality-red",
    "kin8nm",
    "power-plant",
    "naval-propulsion-plant",
)


class UCISplit(NamedTuple):
    """Standardised train/test arrays and the target's scale (to report in original units)."""

    X_train: jnp.ndarray
    y_train: jnp.ndarray
    X_test: jnp.ndarray
    y_test: jnp.ndarray
    y_mean: float
    y_std: float


def _indices(name, filename):
    return np.loadtxt(data_path("uci", name, "data", filename), dtype=int, ndmin=1)


def load_uci_split(name, split=0):
    """Split ``split`` (0-19) of data set ``name``. Features and target are standardised with
    the training split's mean and sd (as the published code does); ``y_test`` stays in the
    original units, so metrics computed with ``mean * y_std + y_mean`` compare directly with
    :func:`published_results`."""
    data = np.loadtxt(data_path("uci", name, "data", "data.txt"))
    features = _indices(name, "index_features.txt")
    target = int(_indices(name, "index_target.txt")[0])
    train = _indices(name, f"index_train_{split}.txt")
    test = _indices(name, f"index_test_{split}.txt")
    X, y = data[:, features], data[:, target]
    x_mean, x_std = X[train].mean(0), X[train].std(0)
    x_std[x_std == 0] = 1.0
    y_mean, y_std = float(y[train].mean()), float(y[train].std())
    Xs = (X - x_mean) / x_std
    return UCISplit(
        jnp.asarray(Xs[train], jnp.float32),
        jnp.asarray((y[train] - y_mean) / y_std, jnp.float32),
        jnp.asarray(Xs[test], jnp.float32),
        jnp.asarray(y[test], jnp.float32),
        y_mean,
        y_std,
    )


def published_results(name):
    """The published MC-dropout results (one number per split): ``test_ll``, ``test_rmse``."""
    folder = data_path("uci", name, "results")
    out = {}
    for key in ("test_ll", "test_rmse"):
        matches = sorted(p for p in folder.iterdir() if p.name.startswith(key + "_"))
        out[key] = np.loadtxt(matches[0])
    return out
