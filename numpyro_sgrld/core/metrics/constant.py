r"""Constant metrics: the identity (SGLD) and a fixed diagonal (a mass matrix)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.core.acceptance import Averages
from numpyro_sgrld.core.correction import NoLag
from numpyro_sgrld.core.metrics._base import (
    Constant,
    Learnt,
    Metric,
    Preconditioner,
    unchanged,
)

_CONSTANT = NoLag("a constant metric has Γ = 0: there is nothing to correct")


class IdentityState(NamedTuple):
    """The identity metric has no state."""


def identity() -> Metric:
    r"""The Euclidean metric :math:`D = I`, :math:`\Gamma = 0` (plain SGLD; Welling & Teh 2011)."""

    def init(position):
        return IdentityState()

    def update(grad, state, position, context=None):
        return Preconditioner(drift=unchanged, noise=unchanged), state

    return Metric(init, update, name="identity", traits=(Averages(), Constant(), NoLag(
        "the identity metric is constant: its Γ is zero, there is nothing to correct")))


def _scaled(scale_like):
    """The preconditioner ``D = diag(d)``, ``D^{1/2} = diag(sqrt(d))``, with ``d =
    scale_like(t)`` a tree like ``t``."""
    return Preconditioner(
        drift=lambda t: jax.tree.map(jnp.multiply, scale_like(t), t),
        noise=lambda t: jax.tree.map(lambda d, x: jnp.sqrt(d) * x, scale_like(t), t),
    )


# --------------------------------------------------------------------------- constant diagonal
class DiagonalState(NamedTuple):
    """A constant metric has no state."""


def diagonal(scale) -> Metric:
    r"""A constant diagonal metric :math:`D = \mathrm{diag}(s)` (an inverse mass matrix), with
    ``scale`` :math:`s` a tree like the position (or one positive number for every
    coordinate), :math:`\Gamma = 0`.

    Any integrator takes it: with :func:`~numpyro_sgrld.core.integrators.langevin` it is
    preconditioned SGLD with a fixed preconditioner (exact in the small-step limit, no Γ), with
    :func:`~numpyro_sgrld.core.integrators.sghmc` SGHMC with mass matrix :math:`M = D^{-1}`.
    """
    leaves = jax.tree.leaves(scale)
    if not leaves:
        raise ValueError("`scale` of metrics.diagonal has no entries: give a positive number or "
                         "a tree of positive arrays like the position.")
    for leaf in leaves:
        leaf = jnp.asarray(leaf)
        if not bool(jnp.all(jnp.isfinite(leaf) & (leaf > 0))):
            raise ValueError(
                f"`scale` of metrics.diagonal must be finite and > 0 everywhere, got {leaf!r}: "
                "it is the diagonal of the inverse metric (inverse mass)."
            )
    scalar = not isinstance(scale, (dict, list, tuple)) and jnp.ndim(scale) == 0

    def init(position):
        return DiagonalState()

    def _scale_like(t):
        return jax.tree.map(lambda x: scale, t) if scalar else scale

    def update(grad, state, position, context=None):
        return _scaled(_scale_like), state

    return Metric(init, update, name="diagonal", traits=(Averages(), _CONSTANT, Constant()))


# --------------------------------------------------------------------------- learnt in warm-up
class LearntDiagonalState(NamedTuple):
    """The diagonal :math:`d` of the inverse metric (a tree like the position)."""

    scale: Any


def learnt_diagonal() -> Metric:
    r"""A constant diagonal metric :math:`D = \mathrm{diag}(d)` learnt during warm-up, as
    NUTS learns its mass matrix: :math:`d = 1` at the start, re-estimated at the end of each
    slow warm-up window from the window's draws and curvature
    (:mod:`numpyro_sgrld.warmup.preconditioner`) when the step is adapted (``step_size=None``),
    then held. Constant after warm-up, so :math:`\Gamma = 0`: it removes the posterior's global
    scaling without the stationary bias of the adaptive metrics. With a given step size it
    stays the identity (nothing is learnt)."""

    def init(position):
        return LearntDiagonalState(jax.tree.map(jnp.ones_like, position))

    def update(grad, state, position, context=None):
        return _scaled(lambda t: state.scale), state

    return Metric(init, update, name="learnt_diagonal",
                  traits=(Averages(), _CONSTANT, Constant(), Learnt()))


class LearntState(NamedTuple):
    """The diagonal :math:`d` of the inverse metric (a tree like the position) and, where the
    metric is dense, a root :math:`L` (not triangular in general) of the whole inverse metric
    :math:`D = L L^\top` over the flattened position (``None`` where it is diagonal)."""

    scale: Any
    factor: Any = None


#: The largest number of coordinates for which :func:`learnt` learns a dense metric: a step
#: then costs two products with a ``d x d`` factor, ``2 d^2`` flops, no more than one minibatch
#: gradient of a linear model on 100 data points for ``d = 100``, while a correlated
#: posterior mixes as if it were uncorrelated.
DENSE_MAX_DIM = 100


def dense_preconditioner(factor, unravel):
    """The preconditioner ``D = L L^T`` (``drift``), with the root ``R = L`` (``noise``) and
    its transpose (``noise_transpose``), on trees flattened by ``unravel``'s inverse."""

    def flat(t):
        return ravel_pytree(t)[0]

    return Preconditioner(
        drift=lambda t: unravel(factor @ (factor.T @ flat(t))),
        noise=lambda t: unravel(factor @ flat(t)),
        noise_transpose=lambda t: unravel(factor.T @ flat(t)),
    )


def learnt(dense_max_dim=DENSE_MAX_DIM) -> Metric:
    r"""A constant metric learnt during warm-up, as NUTS learns its mass matrix: dense over
    the flattened position where it has at most ``dense_max_dim`` coordinates, diagonal
    otherwise (:func:`learnt_diagonal`). :math:`D = I` at the start, re-estimated at the end
    of each slow warm-up window (:mod:`numpyro_sgrld.warmup.preconditioner`: dense, the
    inverse of the full-data Hessian at the window's mean, or the window's correlations where
    there is no full-data potential; diagonal, the window's variances with a curvature floor)
    when the step is adapted (``step_size=None``), then held.
    Constant after warm-up, so :math:`\Gamma = 0`. With a given step size it stays the
    identity. The default metric of SGLD, SGHMC and AdamSGLD with ``step_size=None``."""

    def init(position):
        flat = ravel_pytree(position)[0]
        factor = jnp.eye(flat.size, dtype=flat.dtype) if flat.size <= dense_max_dim else None
        return LearntState(jax.tree.map(jnp.ones_like, position), factor)

    def update(grad, state, position, context=None):
        if state.factor is None:
            return _scaled(lambda t: state.scale), state
        return dense_preconditioner(state.factor, ravel_pytree(position)[1]), state

    return Metric(init, update, name="learnt", traits=(Averages(), _CONSTANT, Constant(), Learnt()))
