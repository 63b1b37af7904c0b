r"""A constant diagonal preconditioner learnt over the warm-up's slow windows.

For each window (:mod:`~numpyro_sgrld.warmup.schedule`) two per-coordinate statistics are
accumulated, each with Welford's update (one pass, numerically stable):

- the chain's positions :math:`\theta_t`: their variance :math:`v_i` (NumPyro's mass-matrix
  estimate for NUTS), shrunk towards the current preconditioner :math:`d_i` as
  :math:`(n v_i + 5 d_i)/(n + 5)` over :math:`n` draws (NumPyro shrinks towards
  :math:`10^{-3}`, which is not scale-free);
- Hutchinson's estimate :math:`\zeta\odot(H\zeta)` of the diagonal of the minibatch potential's
  Hessian (:func:`numpyro_sgrld.core.gradients.hessian_diagonal_estimate`), whose mean :math:`c_i`
  gives the conditional variance :math:`1/c_i` of coordinate :math:`i` given the others
  (exact on a Gaussian, where :math:`1/H_{ii} \le \Sigma_{ii}`).

At the window's end the preconditioner becomes

.. math:: d_i \leftarrow \max\big(v_i^{\rm shrunk},\ 1/c_i\big),

the second term only where :math:`c_i` is more than two standard errors above zero. A dense
metric (:func:`numpyro_sgrld.core.metrics.learnt`, small models) keeps this diagonal and takes the
inverse of the full-data Hessian at the window's mean where that is positive definite (the
Laplace covariance), else the correlations :math:`r_{ij}` of the window's positions
(Welford's co-moments) shrunk towards none as the variances are,
:math:`(n r_{ij} + 5\delta_{ij})/(n + 5)`, on that diagonal:
:math:`D = \mathrm{diag}(d)^{1/2}\,\tilde r\,\mathrm{diag}(d)^{1/2}`
(:func:`preconditioner_factor`). The
positions' variance is the posterior's where the chain has crossed the coordinate within the
window; where it has not (a small step, a slow direction), it is the much smaller spread of
the chain's diffusion, and on its own would make that direction slower still in the next
window. The curvature term is a floor that does not depend on mixing: a chain that cannot
cross a direction in a window still gets that direction's conditional scale. A constant
preconditioner has no Γ drift, so it biases nothing (:mod:`numpyro_sgrld.core.correction`).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.warmup.schedule import window_ends

__all__ = [
    "PreconditionerWarmup",
    "init_preconditioner",
    "laplace_root",
    "preconditioner_factor",
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
    - **cross** – for a dense metric, Welford's co-moment matrix of the flattened positions
      (``None`` otherwise).
    """

    mean: Any
    m2: Any
    curvature_mean: Any
    curvature_m2: Any
    count: Any
    window_ends: Any
    cross: Any = None


def _zeros(tree):
    return jax.tree.map(jnp.zeros_like, tree)


def init_preconditioner(position, num_warmup, dense=False):
    """Empty statistics, and the windows of a warm-up of ``num_warmup`` steps; ``dense``:
    with the co-moments for a dense metric."""
    flat = ravel_pytree(position)[0]
    return PreconditionerWarmup(
        mean=_zeros(position),
        m2=_zeros(position),
        curvature_mean=_zeros(position),
        curvature_m2=_zeros(position),
        count=jnp.zeros((), jnp.int32),
        window_ends=window_ends(num_warmup),
        cross=jnp.zeros((flat.size, flat.size), flat.dtype) if dense else None,
    )


def reset_preconditioner(state):
    """The statistics emptied for the next window."""
    return state._replace(
        mean=_zeros(state.mean),
        m2=_zeros(state.m2),
        curvature_mean=_zeros(state.curvature_mean),
        curvature_m2=_zeros(state.curvature_m2),
        count=jnp.zeros_like(state.count),
        cross=None if state.cross is None else jnp.zeros_like(state.cross),
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
    cross = state.cross
    if cross is not None:
        x = ravel_pytree(position)[0]
        cross = cross + jnp.outer(x - ravel_pytree(state.mean)[0], x - ravel_pytree(mean)[0])
    return state._replace(mean=mean, m2=m2, curvature_mean=c_mean, curvature_m2=c_m2, count=n,
                          cross=cross)


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


def preconditioner_factor(state, scale, factor, hessian=None):
    r"""A root :math:`L` of the dense preconditioner :math:`L L^\top` at a window's end.

    With ``hessian`` (the full-data potential's Hessian at the window's mean position):
    :math:`L L^\top = S|SHS|^{-1}S` (:func:`laplace_root`), on a positive definite Hessian the
    Laplace approximation's
    covariance, which holds the posterior's marginal scales and correlations on a near-Gaussian
    posterior whether or not the chain has crossed them (the windows' draws do not see a slow
    direction the chain has not crossed, and the curvature floor of
    :func:`preconditioner_scale` is a *conditional* variance, far below the marginal one along
    correlated directions). Otherwise :math:`L L^\top = \mathrm{diag}(d)^{1/2}\,\tilde r\,
    \mathrm{diag}(d)^{1/2}` with ``scale`` :math:`d` the new diagonal and :math:`\tilde r` the
    window's correlations shrunk towards none (module docstring). ``factor``, the current
    one, where neither is a finite factorisation or the window had fewer than two draws."""
    n = state.count.astype(jnp.result_type(float))
    cov = state.cross / jnp.maximum(n - 1.0, 1.0)
    sd = jnp.sqrt(jnp.diagonal(cov))
    corr = cov / jnp.outer(sd, sd)
    corr = jnp.where(jnp.isfinite(corr), corr, 0.0)
    eye = jnp.eye(corr.shape[0], dtype=corr.dtype)
    shrunk = (n * corr + SHRINK_DRAWS * eye) / (n + SHRINK_DRAWS)
    shrunk = shrunk * (1.0 - eye) + eye  # a unit diagonal: d is the variance
    root = jnp.sqrt(ravel_pytree(scale)[0])
    new = jnp.linalg.cholesky(shrunk * jnp.outer(root, root))
    ok = jnp.all(jnp.isfinite(new)) & (n >= 2)
    new = jnp.where(ok, new, factor)
    if hessian is not None:
        new = jnp.where(n >= 2, laplace_root(hessian, new), new)
    return new


#: Eigenvalues of the unit-diagonal Hessian smaller in magnitude than this fraction of the
#: largest are raised to it (float32 rounding of a badly conditioned Hessian).
EIGEN_FLOOR = 1e-6


def laplace_root(hessian, fallback):
    r"""A root :math:`L` with :math:`L L^\top = S|SHS|^{-1}S`, where
    :math:`S = \mathrm{diag}(|\mathrm{diag}(H)|^{-1/2})` and :math:`|A| = V|\Lambda|V^\top` for
    the eigendecomposition :math:`A = V\Lambda V^\top` of the unit-diagonal :math:`SHS` (in
    float32 it keeps the correlations of a badly conditioned Hessian):
    :math:`L = S V |\Lambda|^{-1/2}`, magnitudes below :data:`EIGEN_FLOOR` of the largest
    raised to it. Where :math:`H` is positive definite this is the Laplace covariance
    :math:`H^{-1}`; where it is not (away from the mode, or a funnel), the absolute eigenvalues
    keep the scale of every direction (Betancourt's SoftAbs metric, 2013, in its sharp limit,
    on the unit-diagonal scale). ``fallback`` where anything is not finite or a diagonal entry
    is zero."""
    h = 0.5 * (hessian + hessian.T)
    diag = jnp.abs(jnp.diagonal(h))
    s = 1.0 / jnp.sqrt(jnp.where(diag > 0, diag, 1.0))
    lam, vec = jnp.linalg.eigh(h * jnp.outer(s, s))
    size = jnp.abs(lam)
    root = (s[:, None] * vec) / jnp.sqrt(jnp.maximum(size, EIGEN_FLOOR * jnp.max(size)))[None, :]
    return jnp.where(jnp.all(diag > 0) & jnp.all(jnp.isfinite(root)), root, fallback)
