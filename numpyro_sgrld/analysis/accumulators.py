"""Running summaries of the draws for :func:`numpyro_sgrld.analysis.streaming.run_streaming`
(re-exported there): an :class:`Accumulator` sees each segment's draws and keeps what a
prediction needs, so the draws themselves can stay on disk."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from jax.scipy.special import logsumexp

from numpyro_sgrld.analysis.predictive import (
    classification_scores,
    gaussian_log_density,
    predictive_chunks,
)
from numpyro_sgrld.core.checks import integer

__all__ = [
    "Accumulator",
    "ClassificationSums",
    "RegressionSums",
    "classification_accumulator",
    "classification_metrics_from",
    "regression_accumulator",
    "regression_metrics_from",
]


class Accumulator(NamedTuple):
    """A running summary of the draws, built segment by segment: ``init()`` returns the empty
    state, ``update(state, samples)`` the state with one segment's draws added (``samples``:
    ``{site: array (chains, draws, ...)}``, NumPy). ``update`` must not keep ``samples``; its
    state must be picklable (it is saved in the checkpoint, so a resumed run goes on summing)."""

    init: Callable[[], Any]
    update: Callable[[Any, dict], Any]


# --------------------------------------------------------------------------- accumulators


def _flat(samples):
    """``{site: (chains * draws, ...)}`` from ``{site: (chains, draws, ...)}``."""
    return {k: np.reshape(v, (-1,) + np.shape(v)[2:]) for k, v in samples.items()}


def _num_draws(samples):
    leaves = jax.tree.leaves(samples)
    return int(np.shape(leaves[0])[0] * np.shape(leaves[0])[1]) if leaves else 0


class ClassificationSums(NamedTuple):
    """Running sums of a classifier's predictive: ``log_prob_sum`` (points x classes, float64)
    is :math:`\\log \\sum_s p(k \\mid x_i, \\theta_s)` over the ``num_draws`` draws so far
    (``None`` before the first)."""

    log_prob_sum: Any
    num_draws: int


def classification_accumulator(
    model, X, *, logits_site="logits", batch_size=1000, **model_kwargs
):
    """An :class:`Accumulator` of the class probabilities of the test inputs ``X`` under each
    draw (``full_batch(model)(X_chunk, **model_kwargs)``'s deterministic ``logits_site``, in
    chunks of ``batch_size`` points, as :func:`numpyro_sgrld.classification_metrics` evaluates
    them): memory holds one segment's ``draws x batch_size x classes``. Its state is a
    :class:`ClassificationSums`; :func:`classification_metrics_from` scores it."""
    batch_size = integer(batch_size, "batch_size")

    def init():
        return ClassificationSums(None, 0)

    def update(sums, samples):
        parts = []
        for chunk in predictive_chunks(model, _flat(samples), X, [logits_site], batch_size, None,
                             model_kwargs):
            log_probs = jax.nn.log_softmax(chunk[logits_site], axis=-1)
            parts.append(np.asarray(logsumexp(log_probs, axis=0), np.float64))
        segment = np.concatenate(parts, axis=0)
        total = segment if sums.log_prob_sum is None else np.logaddexp(sums.log_prob_sum, segment)
        return ClassificationSums(total, sums.num_draws + _num_draws(samples))

    return Accumulator(init, update)


def _check_sums(sums, kind):
    if sums is None or sums.num_draws == 0:
        raise ValueError(
            f"No draws were accumulated (got {sums!r}): pass run_streaming(..., accumulator="
            f"{kind}_accumulator(...)) and score its StreamedRun.accumulated after a segment."
        )


def classification_metrics_from(sums, y, num_bins=10):
    """:func:`numpyro_sgrld.classification_metrics` of the ensemble of all accumulated draws
    (``log_prob``, ``accuracy``, ``ece``, ``mce``, ``probs``), from its
    :class:`ClassificationSums` and the test labels ``y``."""
    _check_sums(sums, "classification")
    return classification_scores(sums.log_prob_sum - np.log(sums.num_draws), y, num_bins)


class RegressionSums(NamedTuple):
    """Running sums of a regressor's predictive over the ``num_draws`` draws so far, per test
    point (float64): ``mean_sum`` :math:`\\sum_s \\mu_s(x_i)`, ``second_moment_sum``
    :math:`\\sum_s \\mu_s(x_i)^2 + \\sigma_s^2`, and with test targets ``log_density_sum``
    :math:`\\log \\sum_s \\mathcal N(y_i \\mid \\mu_s(x_i), \\sigma_s^2)` (else ``None``)."""

    mean_sum: Any
    second_moment_sum: Any
    log_density_sum: Any
    num_draws: int


def regression_accumulator(
    model, X, y=None, *, mean_site="mean", scale_site="sigma", batch_size=1000, **model_kwargs
):
    """An :class:`Accumulator` of a Gaussian regressor's predictive at the test inputs ``X``
    (``full_batch(model)(X_chunk, **model_kwargs)``'s deterministic ``mean_site`` per point and
    ``scale_site``, per draw or per point), in chunks of ``batch_size`` points; with the test
    targets ``y``, also of their predictive densities (for the test log-likelihood). Its state
    is a :class:`RegressionSums`; :func:`regression_metrics_from` scores it."""
    batch_size = integer(batch_size, "batch_size")
    targets = None if y is None else np.asarray(y, np.float64)

    def init():
        return RegressionSums(None, None, None, 0)

    def update(sums, samples):
        means, seconds, densities = [], [], []
        chunks = predictive_chunks(model, _flat(samples), X, [mean_site, scale_site],
                                   batch_size, None, model_kwargs)
        for start, chunk in zip(range(0, X.shape[0], batch_size), chunks):
            mean = np.asarray(chunk[mean_site], np.float64)
            scale = np.asarray(chunk[scale_site], np.float64)
            scale = np.broadcast_to(scale.reshape(scale.shape[0], -1), mean.shape)
            means.append(mean.sum(axis=0))
            seconds.append((mean**2 + scale**2).sum(axis=0))
            if targets is not None:
                y_chunk = targets[start : start + mean.shape[1]]
                densities.append(
                    np.logaddexp.reduce(gaussian_log_density(mean, scale, y_chunk), axis=0)
                )
        parts = [np.concatenate(p) for p in (means, seconds)]
        density = np.concatenate(densities) if densities else None
        if sums.num_draws:
            parts = [sums.mean_sum + parts[0], sums.second_moment_sum + parts[1]]
            if density is not None:
                density = np.logaddexp(sums.log_density_sum, density)
        return RegressionSums(*parts, density, sums.num_draws + _num_draws(samples))

    return Accumulator(init, update)


def regression_metrics_from(sums, y):
    """The ensemble's predictive ``mean`` and ``variance`` per test point, its ``rmse``
    against ``y`` and (when the accumulator had ``y``) the Gaussian mixture's ``test_ll``: the
    values of :func:`numpyro_sgrld.regression_metrics` over all accumulated draws."""
    _check_sums(sums, "regression")
    n = sums.num_draws
    mean = sums.mean_sum / n
    out = {
        "mean": mean,
        "variance": sums.second_moment_sum / n - mean**2,
        "rmse": float(np.sqrt(np.mean((mean - np.asarray(y, np.float64)) ** 2))),
    }
    if sums.log_density_sum is not None:
        out["test_ll"] = float(np.mean(sums.log_density_sum - np.log(n)))
    return out
