r"""The diagonal RMSprop metric of pSGLD (Li et al. 2016)."""

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_sgrld.core.acceptance import Averages
from numpyro_sgrld.core.correction import GammaBias, Lag
from numpyro_sgrld.core.metrics._base import (
    Metric,
    Preconditioner,
    WarmStart,
    check_decay,
    check_nonnegative,
    step_context,
)


class RMSpropState(NamedTuple):
    """``square_avg``: :math:`V` (same tree as the position); ``count``: steps taken;
    ``floor``: the curvature-based starting value :math:`V_0` of the statistic (zeros unless
    the metric was warm-started), which fades as :math:`\alpha^t V_0`."""

    square_avg: Any
    count: Any
    floor: Any = None


def rmsprop(decay=0.99, eps=1e-8, bias_correction=True) -> Metric:
    r"""The diagonal RMSprop metric of pSGLD (Li et al. 2016).

    .. math::
        V \leftarrow \alpha V + (1 - \alpha)\,\bar g \odot \bar g, \quad
        \hat V = V / (1 - \alpha^t), \quad
        D = \mathrm{diag}\big(1 / (\lambda + \sqrt{\hat V})\big), \quad D^{1/2} = \sqrt{D}.

    ``decay`` :math:`\alpha`, ``eps`` :math:`\lambda`, ``bias_correction`` the Adam-style
    :math:`1/(1-\alpha^t)` (so the first steps are not huge). State: one number per parameter.

    **A chain started at a mode.** There the gradient is (nearly) zero, so the first
    statistics are (nearly) zero and :math:`D_{ii}` up to :math:`1/\lambda` (1e8 with the
    default): the first step would land hundreds of standard deviations away, and pSGLD's
    drift, about :math:`h` per step, takes very long to come back. Two guards:

    - warm start (the kernels call ``warm_start`` at ``init``): the statistic used is
      :math:`\max(\hat V_t, \alpha^t V_0)`, :math:`V_0 = |\widehat{\mathrm{diag}\,H}|/N^2`
      from one Hutchinson Hessian-vector product at the initial position, what
      :math:`\bar g\odot\bar g` averages to under the posterior (see :class:`Metric`). Its
      weight :math:`\alpha^t` fades within a few :math:`1/(1-\alpha)` steps; it only raises
      a statistic that is smaller than the curvature says it should be;
    - where the statistic is still exactly zero (no information at all: zero curvature and
      zero gradients so far) :math:`D_{ii} = 1`, the identity, not :math:`1/\lambda`.

    Called directly (``init`` without ``warm_start``), the metric is exactly Li et al.'s
    except for the second guard.
    """
    decay, eps = check_decay(decay), check_nonnegative(eps, "eps")

    def init(position):
        zeros = jax.tree.map(jnp.zeros_like, position)
        return RMSpropState(zeros, jnp.zeros((), jnp.int32), zeros)

    def warm_start(state, curvature, context=None):
        num_data = step_context(context).num_data
        floor = jax.tree.map(
            lambda c, v: jnp.abs(c).astype(v.dtype) / float(num_data) ** 2,
            curvature,
            state.square_avg,
        )
        return state._replace(floor=floor)

    def update(grad, state, position, context=None):
        num_data = step_context(context).num_data
        count = state.count + 1
        square_avg = jax.tree.map(
            lambda v, g: decay * v + (1 - decay) * (g / num_data) ** 2, state.square_avg, grad
        )
        weight = decay ** count.astype(jnp.float32)
        scale = 1.0 / (1.0 - weight) if bias_correction else 1.0
        if state.floor is None:
            estimate = jax.tree.map(lambda v: scale * v, square_avg)
        else:
            estimate = jax.tree.map(
                lambda v, f: jnp.maximum(scale * v, weight * f), square_avg, state.floor
            )
        diag = jax.tree.map(partial(_rmsprop_diag, eps), estimate)
        precond = Preconditioner(
            drift=lambda t: jax.tree.map(jnp.multiply, diag, t),
            noise=lambda t: jax.tree.map(lambda d, x: jnp.sqrt(d) * x, diag, t),
        )
        return precond, RMSpropState(square_avg, count, state.floor)

    return Metric(init, update, name="rmsprop",
                  traits=(Lag(decay), Averages(), WarmStart(warm_start),
                                          GammaBias()))


def _rmsprop_diag(eps, v):
    r""":math:`1/(\lambda + \sqrt{\hat V})`, and 1 where :math:`\hat V = 0` (no
    information). The ``where`` is applied to the argument of the square root as well, so that
    the derivative (taken by the Γ correction) is finite at :math:`\hat V = 0`."""
    empty = v == 0
    safe = jnp.where(empty, 1.0, v)
    return jnp.where(empty, 1.0, 1.0 / (eps + jnp.sqrt(safe)))
