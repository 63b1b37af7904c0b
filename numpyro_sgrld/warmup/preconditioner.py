r"""A constant diagonal preconditioner learnt over the warm-up's slow windows.

For each window (:mod:`~numpyro_sgrld.warmup.schedule`) two per-coordinate statistics are
accumulated, each with Welford's update (one pass, numerically stable):

- the chain's positions :math:`\theta_t`: their variance :math:`v_i` (NumPyro's mass-matrix
  estimate for NUTS), shrunk towards the current preconditioner :math:`d_i` as
  :math:`(n v_i + 5 d_i)/(n + 5)` over :math:`n` draws (NumPyro shrinks towards
  :math:`10^{-3}`, which is not scale-free);
- Hutchinson's estimate :math:`\zeta\odot(H\zeta)` of the diagonal of the minibatch potential's
  Hessian (:func:`numpyro_sgrld.gradients.hessian_diagonal_estimate`), whose mean :math:`c_i`
  gives the conditional variance :math:`1/c_i` of coordinate :math:`i` given the others
  (exact on a Gaussian, where :math:`1/H_{ii} \le \Sigma_{ii}`).

At the window's end the preconditioner becomes

.. math:: d_i \leftarrow \max\big(v_i^{\rm shrunk},\ 1/c_i\big),

the second term only where :math:`c_i` is more than two standard errors above zero. The
positions' variance is the posterior's where the chain has crossed the coordinate within the
window; where it has not (a small step, a slow direction), it is the much smaller spread of
the chain's diffusion, and on its own would make that direction slower still in the next
window. The curvature term is a floor that does not depend on mixing: a chain that cannot
cross a direction in a window still gets that direction's conditional scale. A constant
preconditioner has no Γ drift, so it biases nothing (:mod:`numpyro_sgrld.correction`).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_sgrld.warmup.schedule import window_ends

__all__ = [
    "PreconditionerWarmup",
    "init_preconditioner",
    "preconditioner_scale",
    "reset_preconditioner",
    "update_preconditioner",
]

#: Pseudo-draws of the current preconditioner the positions' variance is shrunk towards.
SHRINK_DRAWS = 5.0

#: The curvature floor applies where its window mean is this many standard errors above 0.
CURVATURE_Z = 2.0


class PreconditionerWarmup(NamedTuple):
    """The current window's statistics (``SGState.warmup``).

    - **mean**, **m2** – Welford's running mean and sum of squared deviations of the
      positions (trees like the position).
    - **curvature_mean**, **curvature_m2** – the same for the Hutchinson estimates of the
      Hessian's diagonal.
    - **count** – draws in the window so far.
    - **window_ends** – the steps after which a window ends (:func:`~numpyro_sgrld.warmup.
      schedule.window_ends`).
    """

    mean: Any
    m2: Any
    curvature_mean: Any
    curvature_m2: Any
    count: Any
    window_ends: Any


def _zeros(tree):
    return jax.tree.map(jnp.zeros_like, tree)


def init_preconditioner(position, num_warmup):
    """Empty statistics, and the windows of a warm-up of ``num_warmup`` steps."""
    return PreconditionerWarmup(
        mean=_zeros(position),
        m2=_zeros(position),
        curvature_mean=_zeros(position),
        curvature_m2=_zeros(position),
        count=jnp.zeros((), jnp.int32),
        window_ends=window_ends(num_warmup),
    )


def reset_preconditioner(state):
    """The statistics emptied for the next window."""
    return state._replace(
        mean=_zeros(state.mean),
        m2=_zeros(state.m2),
        curvature_mean=_zeros(state.curvature_mean),
        curvature_m2=_zeros(state.curvature_m2),
        count=jnp.zeros_like(state.count),
    )


def _welford(mean, m2, x, n):
    """Welford's update of ``(mean, m2)`` with draw ``x``, the ``n``-th (trees)."""
    new_mean = jax.tree.map(lambda m, v: m + (v - m) / n, mean, x)
    new_m2 = jax.tree.map(lambda s, m, mn, v: s + (v - m) * (v - mn), m2, mean, new_mean, x)
    return new_mean, new_m2


def update_preconditioner(state, position, curvature):
    """The statistics with one more draw ``position`` and Hessian-diagonal estimate
    ``curvature`` (a tree like the position)."""
    n = state.count + 1
    nf = n.astype(jnp.result_type(float))
    mean, m2 = _welford(state.mean, state.m2, position, nf)
    c_mean, c_m2 = _welford(state.curvature_mean, state.curvature_m2, curvature, nf)
    return state._replace(mean=mean, m2=m2, curvature_mean=c_mean, curvature_m2=c_m2, count=n)


def preconditioner_scale(state, scale):
    r"""The preconditioner :math:`d` at a window's end from its statistics and the current
    ``scale`` (see the module docstring); ``scale`` itself where a coordinate's estimate is not
    a finite positive number, or the window had fewer than two draws."""
    n = state.count.astype(jnp.result_type(float))

    def one(m2, c_mean, c_m2, d):
        variance = m2 / jnp.maximum(n - 1.0, 1.0)
        shrunk = (n * variance + SHRINK_DRAWS * d) / (n + SHRINK_DRAWS)
        c_se = jnp.sqrt(c_m2 / jnp.maximum(n - 1.0, 1.0) / jnp.maximum(n, 1.0))
        significant = c_mean > CURVATURE_Z * c_se
        floor = jnp.where(significant, 1.0 / jnp.where(significant, c_mean, 1.0), 0.0)
        new = jnp.maximum(shrunk, floor)
        ok = jnp.isfinite(new) & (new > 0) & (n >= 2)
        return jnp.where(ok, new, d)

    return jax.tree.map(one, state.m2, state.curvature_mean, state.curvature_m2, scale)
