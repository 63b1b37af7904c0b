r"""An adaptive metric applied in the coordinates of a constant dense metric learnt in warm-up.

With :math:`L` a root of the learnt inverse metric (:func:`~numpyro_sgrld.core.metrics.learnt`,
:math:`L L^\top \approx H^{-1}` at the end of warm-up) and the coordinates
:math:`z = L^{-1}\theta`, an adaptive metric :math:`D_z` built from the gradients in those
coordinates, :math:`\nabla_z\hat U = L^\top\nabla\hat U`, is in the original coordinates

.. math::
    D(\theta) = L\,D_z\big(L^\top\nabla\hat U(\theta)\big)\,L^\top, \qquad
    D^{1/2} = L\,D_z^{1/2}.

This is what NUTS does with its mass matrix: the learnt :math:`L` removes the posterior's
global scaling and correlations, which a diagonal or Kronecker-factored adaptive metric
cannot, and the adaptive metric follows what is left. Since :math:`L` is constant after
warm-up, Γ of :math:`D` is :math:`L\,\Gamma_z`: the adaptive metric's stationary bias is that
of :math:`D_z` in whitened coordinates, and the Γ correction
(:mod:`numpyro_sgrld.core.correction`) differentiates :math:`D` through the gradient as for any
metric.

The metric is dense only for positions of at most ``dense_max_dim`` coordinates; above it the
adaptive metric is used on its own (:math:`L = I`, nothing learnt). When warm-up changes
:math:`L`, the adaptive metric's statistics belong to the old coordinates: they restart
(``restart``), warm-started, where the metric has a warm start, with the curvature of the new
coordinates, :math:`\mathrm{diag}(L^\top H L) \approx 1`.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.core.metrics._base import Aux, Metric, Preconditioner, Restart, WarmStart
from numpyro_sgrld.core.metrics.constant import DENSE_MAX_DIM, dense_preconditioner
from numpyro_sgrld.core.traits import trait


class WhitenedState(NamedTuple):
    """The learnt part, as in :class:`~numpyro_sgrld.core.metrics.LearntState` (``scale``: the
    diagonal of :math:`L L^\top`; ``factor``: :math:`L`, ``None`` above ``dense_max_dim``),
    and the adaptive metric's state ``inner`` (in the coordinates :math:`L^{-1}\theta`)."""

    scale: Any
    factor: Any
    inner: Any


def _composed(inner_preconditioner, base):
    """:math:`D = L D_z L^\top`, :math:`R = L R_z`, :math:`R^\top = R_z^\top L^\top`, from the
    base's root :math:`L` (``base.noise``) and its transpose."""
    inner_transpose = inner_preconditioner.noise_transpose or inner_preconditioner.noise
    return Preconditioner(
        drift=lambda t: base.noise(inner_preconditioner.drift(base.noise_transpose(t))),
        noise=lambda t: base.noise(inner_preconditioner.noise(t)),
        noise_transpose=lambda t: inner_transpose(base.noise_transpose(t)),
    )


def whitened(inner: Metric, dense_max_dim=DENSE_MAX_DIM) -> Metric:
    r"""``inner`` (an adaptive metric) in the coordinates of a dense metric learnt in warm-up
    (see the module docstring). What ``step_size=None`` makes of every adaptive metric a
    kernel is given, a preset's (PSGLD, MongeSGLD, ShampooSGLD, WenzelSGLD) or a user's
    (:func:`~numpyro_sgrld.warmup.choices.kernel_metric`); with a given step :math:`L = I` and
    this is ``inner``."""
    reads = trait(inner, Aux)
    inner_warm = trait(inner, WarmStart)
    if reads is not None:
        raise ValueError(
            f"The metric {inner.name!r} reads the model's auxiliary values {list(reads.names)}"
            " in the model's own coordinates; it cannot be whitened. Use it on its own."
        )

    def init(position):
        flat = ravel_pytree(position)[0]
        factor = jnp.eye(flat.size, dtype=flat.dtype) if flat.size <= dense_max_dim else None
        return WhitenedState(jax.tree.map(jnp.ones_like, position), factor, inner.init(position))

    def warm_start(state, curvature, context=None):
        return state._replace(inner=inner_warm.fn(state.inner, curvature, context))

    def restart(state, position, context=None):
        fresh = inner.init(position)
        if inner_warm is not None:
            fresh = inner_warm.fn(fresh, jax.tree.map(jnp.ones_like, position), context)
        return state._replace(inner=fresh)

    def update(grad, state, position, context=None):
        if state.factor is None:
            preconditioner, inner_state = inner.update(grad, state.inner, position, context)
            return preconditioner, state._replace(inner=inner_state)
        base = dense_preconditioner(state.factor, ravel_pytree(position)[1])
        preconditioner, inner_state = inner.update(base.noise_transpose(grad), state.inner,
                                                   position, context)
        return _composed(preconditioner, base), state._replace(inner=inner_state)

    kept = tuple(t for t in inner.traits if not isinstance(t, (WarmStart, Restart)))
    warm = () if inner_warm is None else (WarmStart(warm_start),)
    return Metric(init, update, name=inner.name, traits=kept + warm + (Restart(restart),))
