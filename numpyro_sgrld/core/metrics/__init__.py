r"""Metrics (preconditioners) for Riemannian Langevin steps.

A metric is a pair of pure functions shaped like an optax ``GradientTransformation``::

    init(position) -> state
    update(grad, state, position, context) -> (Preconditioner, state)

``state`` is a ``NamedTuple`` of arrays only, so it crosses ``jit``, ``vmap`` and
``shard_map``. ``grad`` is the minibatch gradient :math:`\nabla\hat U`; ``context`` is a
:class:`StepContext`: what a metric may know about the step besides the gradient (the data size
:math:`N`, the steps per epoch, the step counter, and auxiliary values the model's forward pass
produced on this minibatch). Adaptive metrics build their statistics from the per-datum
gradient :math:`\bar g = \nabla\hat U / N` (``context.num_data`` = N), so that ``decay``,
``eps`` and ``alpha2`` mean the same whatever the data size. Statistics are updated with the
current gradient *before* they are used. No metric knows about NumPyro or the kernel: the
kernel builds the context every step.

The returned :class:`Preconditioner` applies the inverse metric :math:`D = G^{-1}` to a tree
(the drift) and :math:`D^{1/2}` to the noise; no metric ever forms a ``d x d`` matrix.
``update`` is a differentiable function of ``grad``, which is what the Γ correction
(:mod:`numpyro_sgrld.core.correction`) differentiates; a metric's
:class:`~numpyro_sgrld.core.correction.Lag` trait holds the weight :math:`\alpha` of the previous
statistic in the moving average (a metric without it cannot carry the correction).
"""

from numpyro_sgrld.core.acceptance import Averages
from numpyro_sgrld.core.metrics._base import (
    AdaptsUntil,
    Aux,
    Constant,
    Learnt,
    Metric,
    Preconditioner,
    Restart,
    StepContext,
    WarmStart,
    step_context,
)
from numpyro_sgrld.core.metrics.bnp import BNPState, bnp
from numpyro_sgrld.core.metrics.constant import (
    DiagonalState,
    IdentityState,
    LearntDiagonalState,
    LearntState,
    diagonal,
    identity,
    learnt,
    learnt_diagonal,
)
from numpyro_sgrld.core.metrics.monge import MongeAutoState, MongeState, monge
from numpyro_sgrld.core.metrics.rmsprop import RMSpropState, rmsprop
from numpyro_sgrld.core.metrics.shampoo import ShampooState, shampoo, shampoo_block_shapes
from numpyro_sgrld.core.metrics.wenzel import WenzelState, wenzel
from numpyro_sgrld.core.metrics.whitened import WhitenedState, whitened

__all__ = [
    "Metric",
    "Preconditioner",
    "StepContext",
    "step_context",
    "AdaptsUntil",
    "Aux",
    "Averages",
    "WarmStart",
    "Constant",
    "Learnt",
    "Restart",
    "identity",
    "diagonal",
    "learnt",
    "learnt_diagonal",
    "rmsprop",
    "monge",
    "shampoo",
    "wenzel",
    "bnp",
    "whitened",
    "shampoo_block_shapes",
    "IdentityState",
    "DiagonalState",
    "LearntDiagonalState",
    "LearntState",
    "RMSpropState",
    "MongeAutoState",
    "MongeState",
    "ShampooState",
    "WenzelState",
    "BNPState",
    "WhitenedState",
]
