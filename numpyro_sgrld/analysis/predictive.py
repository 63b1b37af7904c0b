r"""Predictive evaluation of posterior draws on test data, without subsampling.

Predictions are ensemble averages over draws: for classification the predictive probability
:math:`\bar p(y \mid x) = \frac1S\sum_s p(y \mid x, \theta_s)`, the test log-probability is
:math:`\frac1n\sum_i \log \bar p(y_i \mid x_i)`; for regression the test log-likelihood is
:math:`\frac1n\sum_i \log \frac1S\sum_s \mathcal N(y_i \mid \mu_s(x_i), \sigma_s^2)` and the
RMSE is that of the ensemble mean. Test points are processed in chunks of ``batch_size`` so
memory stays at ``draws x batch_size x classes``.
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.scipy.special import logsumexp
from numpyro.infer import Predictive

from numpyro_sgrld.analysis.function_space import (
    FunctionSpaceBand,
    agreement,
    gaussian_mixture_quantiles,
    quantile_wasserstein2,
    total_variation,
    wasserstein2,
    within_band,
)
from numpyro_sgrld.data.subsample import full_batch

__all__ = [
    "predict_sites",
    "predictive_probs",
    "agreement",
    "total_variation",
    "wasserstein2",
    "gaussian_mixture_quantiles",
    "quantile_wasserstein2",
    "within_band",
    "FunctionSpaceBand",
    "classification_metrics",
    "regression_metrics",
    "expected_calibration_error",
    "maximum_calibration_error",
    "calibration_bins",
    "CalibrationBins",
]


def predictive_chunks(model, samples, X, sites, batch_size, rng_key, model_kwargs):
    """Yield ``{site: draws x chunk x ...}`` for consecutive chunks of test points."""
    rng_key = random.PRNGKey(0) if rng_key is None else rng_key
    predictive = Predictive(full_batch(model), samples, return_sites=list(sites))
    for start in range(0, X.shape[0], batch_size):
        yield predictive(rng_key, jnp.asarray(X[start : start + batch_size]), **model_kwargs)


def predict_sites(model, samples, X, sites, *, batch_size=1000, rng_key=None, **model_kwargs):
    """Values of per-point deterministic ``sites`` of ``full_batch(model)(X_chunk,
    **model_kwargs)`` for every draw, concatenated over chunks of test points (leading axes:
    draws, points)."""
    chunks = list(predictive_chunks(model, samples, X, sites, batch_size, rng_key, model_kwargs))
    return {site: np.concatenate([np.asarray(c[site]) for c in chunks], axis=1) for site in sites}


class CalibrationBins(NamedTuple):
    """Equal-width confidence bins (Naeini et al. 2015): per bin the number of points
    ``count``, the accuracy ``accuracy`` and the mean confidence ``confidence`` (NaN for an
    empty bin), and the bin ``edges`` (``num_bins + 1``)."""

    count: np.ndarray
    accuracy: np.ndarray
    confidence: np.ndarray
    edges: np.ndarray


def calibration_bins(probs, labels, num_bins=10):
    r"""Bin the points by confidence :math:`\hat p = \max_k p_k` into ``num_bins`` equal-width
    bins of [0, 1] (a confidence of exactly 1 falls in the last bin)."""
    if not (isinstance(num_bins, (int, np.integer)) and num_bins >= 1):
        raise ValueError(f"`num_bins` must be an integer >= 1, got {num_bins!r}.")
    probs, labels = np.asarray(probs), np.asarray(labels)
    if probs.ndim != 2 or labels.shape != probs.shape[:1]:
        raise ValueError(
            f"`probs` must be (points, classes) and `labels` (points,); got {probs.shape} and "
            f"{labels.shape}."
        )
    confidence = probs.max(axis=1)
    correct = probs.argmax(axis=1) == labels
    bins = np.minimum((confidence * num_bins).astype(int), num_bins - 1)
    count = np.bincount(bins, minlength=num_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.bincount(bins, correct, minlength=num_bins) / count
        mean_conf = np.bincount(bins, confidence, minlength=num_bins) / count
    return CalibrationBins(count, accuracy, mean_conf, np.linspace(0.0, 1.0, num_bins + 1))


def expected_calibration_error(probs, labels, num_bins=10):
    """ECE with ``num_bins`` equal-width confidence bins: sum_b (n_b / n) |acc_b - conf_b|."""
    b = calibration_bins(probs, labels, num_bins)
    used = b.count > 0
    return float(np.sum(b.count[used] / b.count.sum() * np.abs(b.accuracy - b.confidence)[used]))


def maximum_calibration_error(probs, labels, num_bins=10):
    """MCE (Naeini et al. 2015): max over non-empty bins of |acc_b - conf_b|."""
    b = calibration_bins(probs, labels, num_bins)
    used = b.count > 0
    return float(np.max(np.abs(b.accuracy - b.confidence)[used]))


def _chunked_mean_log_probs(model, samples, X, logits_site, batch_size, model_kwargs):
    """log of the draw-averaged class probabilities, one chunk of test points at a time."""
    out = []
    for chunk in predictive_chunks(model, samples, X, [logits_site], batch_size, None,
                                   model_kwargs):
        log_probs = jax.nn.log_softmax(chunk[logits_site], axis=-1)
        out.append(np.asarray(logsumexp(log_probs, axis=0) - np.log(log_probs.shape[0])))
    return np.concatenate(out, axis=0)


def predictive_probs(model, samples, X, *, logits_site="logits", batch_size=1000,
                     **model_kwargs):
    r"""The ensemble's predictive class probabilities :math:`\bar p(y \mid x_i)` at the test
    points ``X`` (points x classes), for :func:`total_variation` and :func:`agreement` against
    another run's."""
    return np.exp(_chunked_mean_log_probs(model, samples, X, logits_site, batch_size,
                                          model_kwargs))


def classification_metrics(
    model, samples, X, y, *, logits_site="logits", batch_size=1000, num_bins=10, **model_kwargs
):
    """Ensemble test log-probability, accuracy, ECE and MCE of a classifier whose model records
    its logits as a deterministic site. Returns a dict with ``log_prob``, ``accuracy``, ``ece``,
    ``mce`` and the mean predictive ``probs`` (for :func:`calibration_bins` and
    :func:`numpyro_sgrld.analysis.plots.plot_reliability`)."""
    log_mean = _chunked_mean_log_probs(model, samples, X, logits_site, batch_size, model_kwargs)
    return classification_scores(log_mean, y, num_bins)


def classification_scores(log_mean, y, num_bins):
    """:func:`classification_metrics` from the log of the ensemble's mean class probabilities
    (points x classes)."""
    y = np.asarray(y)
    probs = np.exp(log_mean)
    return {
        "log_prob": float(np.mean(log_mean[np.arange(y.size), y])),
        "accuracy": float(np.mean(log_mean.argmax(axis=1) == y)),
        "ece": expected_calibration_error(probs, y, num_bins),
        "mce": maximum_calibration_error(probs, y, num_bins),
        "probs": probs,
    }


def regression_metrics(mean, scale, y):
    """Ensemble RMSE and Gaussian test log-likelihood from per-draw predictive means and
    scales (arrays ``draws x points``; ``scale`` may broadcast, e.g. ``draws x 1``)."""
    mean, y = np.asarray(mean, np.float64), np.asarray(y, np.float64)
    log_density = gaussian_log_density(mean, scale, y)
    per_point = logsumexp(log_density, axis=0) - np.log(mean.shape[0])
    return {
        "rmse": float(np.sqrt(np.mean((mean.mean(axis=0) - y) ** 2))),
        "test_ll": float(np.mean(per_point)),
    }


def gaussian_log_density(mean, scale, y):
    """The Gaussian log-density ``log N(y | mean, scale^2)`` in float64, ``scale`` broadcast to
    ``mean``'s shape (draws x points)."""
    mean, y = np.asarray(mean, np.float64), np.asarray(y, np.float64)
    scale = np.broadcast_to(np.asarray(scale, np.float64), mean.shape)
    return -0.5 * ((y - mean) / scale) ** 2 - np.log(scale) - 0.5 * np.log(2 * np.pi)
