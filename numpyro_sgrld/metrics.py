r"""Metrics (preconditioners) for Riemannian Langevin steps.

A metric is a pair of pure functions shaped like an optax ``GradientTransformation``::

    init(position) -> state
    update(grad, state, position) -> (Preconditioner, state)

``state`` is a ``NamedTuple`` of arrays only, so it crosses ``jit``, ``vmap`` and ``pmap``.
The returned :class:`Preconditioner` applies the inverse metric :math:`D = G^{-1}` to a tree
(the drift), :math:`D^{1/2}` to the noise, and carries the correction drift
:math:`\Gamma_i = \sum_j \partial D_{ij} / \partial\theta_j` when it is computed (``None``
otherwise). No metric ever forms a ``d x d`` matrix.
"""

from collections.abc import Callable
from typing import NamedTuple

__all__ = ["Metric", "Preconditioner", "identity"]


class Preconditioner(NamedTuple):
    """The metric at the current step: ``drift(v) = D v``, ``noise(xi) = D^{1/2} xi``."""

    drift: Callable
    noise: Callable
    correction: object | None = None


class Metric(NamedTuple):
    """A metric as a pair of pure functions (see the module docstring)."""

    init: Callable
    update: Callable


class IdentityState(NamedTuple):
    """The identity metric has no state."""


def _same(tree):
    return tree


def identity() -> Metric:
    r"""The Euclidean metric :math:`D = I`, :math:`\Gamma = 0` (plain SGLD; Welling & Teh 2011)."""

    def init(position):
        return IdentityState()

    def update(grad, state, position):
        return Preconditioner(drift=_same, noise=_same), state

    return Metric(init, update)
