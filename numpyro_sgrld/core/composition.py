r"""One step of a composed sampler: metric × integrator (× Γ correction), pure functions.

Given the gradient estimate, the step

1. updates the metric with the gradient (:meth:`Metric.update <numpyro_sgrld.core.metrics.Metric>`),
   giving the preconditioner :math:`D`;
2. with a correction, adds the Γ drift of that metric
   (:func:`numpyro_sgrld.core.correction.lagged_correction`), differentiating the metric through the
   gradient oracle on the same minibatch;
3. moves the position with the integrator.

Nothing here knows about NumPyro: the algorithm's step (:func:`numpyro_sgrld.core.algorithm.step`)
asks the gradient estimator on the minibatch it is given, builds the
:class:`~numpyro_sgrld.core.metrics.StepContext`, calls this and applies the acceptance policy
(:mod:`numpyro_sgrld.core.acceptance`); the warm-up's transition
(:func:`numpyro_sgrld.warmup.steps.transition`) draws the minibatch and chooses the step size.
"""

from typing import Any, NamedTuple

import jax.numpy as jnp
from jax import random

from numpyro_sgrld.core.acceptance import averages_gradient
from numpyro_sgrld.core.checks import named_field_lookup
from numpyro_sgrld.core.correction import (
    as_correction,
    check_correction,
    init_correction,
    lagged_correction,
)
from numpyro_sgrld.core.integrators import Integrator, NeedsConstantMetric, StepSetting
from numpyro_sgrld.core.metrics import Constant, Metric, WarmStart
from numpyro_sgrld.core.traits import trait

__all__ = [
    "Sampler",
    "SamplerState",
    "build_sampler",
    "init_sampler",
    "site_scaled",
    "transition_with_preconditioner",
]


class SamplerState(NamedTuple):
    """A composed kernel's own state (``SGState.sampler_state``): the metric's state, the
    integrator's (e.g. :class:`~numpyro_sgrld.core.integrators.SGHMCState`), and the correction's
    (:class:`~numpyro_sgrld.core.correction.CorrectionState`, ``None`` without a correction)."""

    metric: Any
    integrator: Any
    correction: Any = None

    __getitem__ = named_field_lookup


class Sampler(NamedTuple):
    """The pieces of a composed kernel (checked by :func:`build_sampler`): a metric, an
    integrator and a :class:`~numpyro_sgrld.core.correction.Correction` (``None``: none)."""

    metric: Any
    integrator: Any
    correction: Any = None

    @property
    def state_averages_gradient(self):
        """Whether the whole state is moving averages of the gradient (and counters): see
        :func:`numpyro_sgrld.core.acceptance.accept`."""
        return averages_gradient(self.metric, self.integrator)


def build_sampler(metric, integrator, correction=None):
    """The :class:`Sampler`, refusing pieces that do not fit (with the piece and the fix);
    ``correction`` a :class:`~numpyro_sgrld.core.correction.Correction`, its name or ``None``."""
    if not isinstance(metric, Metric):
        hint = (
            " (a metric factory: call it, e.g. metrics.rmsprop(decay=0.99); the data size now "
            "comes from the step's context)"
            if callable(metric)
            else ""
        )
        raise TypeError(
            f"`metric` must be a numpyro_sgrld.core.metrics.Metric such as metrics.rmsprop(), got "
            f"{metric!r}{hint}."
        )
    if not isinstance(integrator, Integrator):
        raise TypeError(
            "`integrator` must be a numpyro_sgrld.core.integrators.Integrator such as "
            f"integrators.langevin() or integrators.sghmc(friction=0.1), got {integrator!r}."
        )
    needs = trait(integrator, NeedsConstantMetric)
    if needs is not None and trait(metric, Constant) is None:
        raise ValueError(
            f"The integrator {integrator.name!r} takes only a constant metric (metrics."
            "identity(), diagonal(...), learnt_diagonal(), learnt() or one whitened in "
            f"warm-up), not {metric.name!r}: {needs.hint}. Use metrics.identity()."
        )
    correction = check_correction(as_correction(correction), metric, integrator)
    return Sampler(metric, integrator, correction)


def init_sampler(sampler, key, position, curvature, context, step_size, temperature):
    """The initial :class:`SamplerState` at ``position``; ``curvature()`` estimates the diagonal
    of the potential's Hessian there (for a metric's ``warm_start``)."""
    metric = sampler.metric
    metric_state = metric.init(position)
    warm = trait(metric, WarmStart)
    if warm is not None:
        metric_state = warm.fn(metric_state, curvature(), context)
    correction = init_correction(position) if sampler.correction is not None else None
    return SamplerState(
        metric_state,
        sampler.integrator.init(position, key, step_size, temperature),
        correction,
    )


def site_scaled(preconditioner, site_scale):
    r"""The :class:`~numpyro_sgrld.core.metrics.Preconditioner` :math:`D' = S^{1/2} D S^{1/2}`,
    :math:`S` diagonal with the value ``site_scale[k]`` on every coordinate of site ``k`` (1 on
    the sites it does not name), with the root :math:`S^{1/2}R` of :math:`D'`. A constant
    :math:`S` leaves a constant metric's stationary law alone (any constant positive-definite
    :math:`D'` does); it is the step :math:`h s_k` on site ``k``. Only for metrics without a
    Γ drift (a constant :math:`D`): the drift of a position-dependent :math:`D'` differs."""
    root = {k: jnp.sqrt(s) for k, s in site_scale.items()}

    def scaled(v):
        return {k: x * root[k] if k in root else x for k, x in v.items()}

    transpose = preconditioner.noise_transpose or preconditioner.noise
    return preconditioner._replace(
        drift=lambda v: scaled(preconditioner.drift(scaled(v))),
        noise=lambda xi: scaled(preconditioner.noise(xi)),
        noise_transpose=lambda v: transpose(scaled(v)))


def transition_with_preconditioner(
    sampler, key, position, state, grad, oracle, step_size, temperature, context,
    site_scale=None,
):
    """One step from ``position`` with the step's
    :class:`~numpyro_sgrld.core.metrics.Preconditioner`: ``(position, SamplerState,
    preconditioner)`` (step-size adaptation reads the preconditioner). ``oracle(z) ->
    (value, grad)`` is the gradient estimator on this step's minibatch; ``site_scale``
    (``{site: s}``, for a metric without a correction; ``None``: none) scales the metric of
    the sites it names (:func:`site_scaled`)."""
    preconditioner, metric_state = sampler.metric.update(grad, state.metric, position, context)
    if site_scale is not None:
        preconditioner = site_scaled(preconditioner, site_scale)
    correction_state = state.correction
    if sampler.correction is not None:
        key, key_probe = random.split(key)
        gamma, correction_state = lagged_correction(
            sampler.correction,
            key_probe,
            position,
            lambda z: oracle(z)[1],
            sampler.metric,
            state.metric,
            state.correction,
            step_size,
            temperature,
            context=context,
        )
        preconditioner = preconditioner._replace(correction=gamma)
    position, integrator_state = sampler.integrator.step(
        key, position, state.integrator, grad, preconditioner,
        StepSetting(step_size, temperature, context, oracle),
    )
    return position, SamplerState(metric_state, integrator_state, correction_state), preconditioner
