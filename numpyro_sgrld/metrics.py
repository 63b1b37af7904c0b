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
(:mod:`numpyro_sgrld.correction`) differentiates; ``Metric.decay`` is the weight :math:`\alpha`
of the previous statistic in the moving average (``None`` when the correction does not apply).
"""

import math
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from numpyro_sgrld._checks import integer, real
from numpyro_sgrld._tree import tree_dot, tree_norm

__all__ = [
    "Metric",
    "Preconditioner",
    "StepContext",
    "identity",
    "diagonal",
    "rmsprop",
    "monge",
    "shampoo",
    "wenzel",
    "shampoo_block_shapes",
]


class Preconditioner(NamedTuple):
    """The metric at the current step: ``drift(v) = D v``, ``noise(xi) = D^{1/2} xi``, and the
    correction drift Γ when it was computed (``None`` otherwise)."""

    drift: Callable
    noise: Callable
    correction: Any | None = None


class StepContext(NamedTuple):
    r"""What a metric may know about a step besides the gradient and the position.

    - **num_data** – :math:`N`, to form the per-datum gradient :math:`\bar g = \nabla\hat U/N`.
    - **steps_per_epoch** – :math:`N/n` of the largest subsample plate (1 without one).
    - **step** – the step counter :math:`t` (0 on the first step).
    - **aux** – a dict of the auxiliary values the model's forward pass recorded on this
      minibatch with :func:`numpyro_sgrld.auxiliary` (computed in the same pass as the gradient),
      e.g. a layer's inputs; ``None`` when the model records none.

    ``num_data`` and ``steps_per_epoch`` are Python numbers fixed when the kernel is
    initialised; ``step`` and ``aux`` are arrays. Called directly, ``update(grad, state,
    position)`` uses ``StepContext()`` (:math:`N = 1`).
    """

    num_data: Any = 1
    steps_per_epoch: Any = 1
    step: Any = 0
    aux: Any = None


def _context(context):
    return StepContext() if context is None else context


class Metric(NamedTuple):
    r"""A metric as a pair of pure functions (see the module docstring).

    ``averages_gradient`` declares that the state is made only of moving averages of
    :math:`\bar g` or :math:`\bar g\odot\bar g` (and integer counters), so it stays finite
    whenever the gradient's squared norm is finite: every new entry is a convex combination of
    a finite old entry and a finite statistic. The kernels then need not check the new state
    for finiteness on every step (only the gradient and the new position);
    ``False`` (the default, e.g. for roots of an eigendecomposition) keeps that check.

    ``statistic_order`` is the power of the gradient in the averaged statistic (2 for
    :math:`\bar g\odot\bar g` or :math:`\bar g\bar g^\top`, 1 for :math:`\bar g`); the
    lagged Γ correction uses it (:func:`numpyro_sgrld.correction.lag_response`).

    ``warm_start(state, curvature) -> state`` (optional) gives a metric whose statistic
    estimates :math:`E[\bar g\odot\bar g]` a starting value that does not depend on where the
    chain starts: ``curvature`` is an unbiased estimate of the diagonal of the minibatch
    potential's Hessian at the initial position, and under the posterior
    :math:`E_\pi[(\partial_i U)^2] = E_\pi[\partial_{ii} U]` (integration by parts, the
    Fisher identity), so it is what the squared gradient averages to — also at a mode, where
    the gradient itself is zero. ``context`` is the :class:`StepContext` of the first step.

    ``correction_hint`` says why the Γ correction is not available when ``decay`` is
    ``None`` (and what to change); ``name`` names the metric in error messages;
    ``needs_aux`` names the auxiliary values (see :class:`StepContext`) the metric reads: a
    kernel refuses a model that does not record them.
    """

    init: Callable
    update: Callable
    decay: float | None = None
    averages_gradient: bool = False
    warm_start: Callable | None = None
    statistic_order: int = 2
    correction_hint: str = ""
    needs_aux: tuple = ()
    name: str = "metric"


def _same(tree):
    return tree


def _check_decay(decay, name="decay"):
    return real(decay, name, low=0, high=1, high_open=True)


def _check_nonnegative(value, name):
    return real(value, name, low=0)


def _check_interval(value, name="update_interval"):
    return integer(value, name, low=1)


# --------------------------------------------------------------------------- identity
class IdentityState(NamedTuple):
    """The identity metric has no state."""


def identity() -> Metric:
    r"""The Euclidean metric :math:`D = I`, :math:`\Gamma = 0` (plain SGLD; Welling & Teh 2011)."""

    def init(position):
        return IdentityState()

    def update(grad, state, position, context=None):
        return Preconditioner(drift=_same, noise=_same), state

    return Metric(
        init,
        update,
        averages_gradient=True,
        correction_hint="the identity metric is constant: its Γ is zero, there is nothing to "
        "correct",
        name="identity",
    )


# --------------------------------------------------------------------------- constant diagonal
class DiagonalState(NamedTuple):
    """A constant metric has no state."""


def diagonal(scale) -> Metric:
    r"""A constant diagonal metric :math:`D = \mathrm{diag}(s)` (an inverse mass matrix), with
    ``scale`` :math:`s` a tree like the position (or one positive number for every
    coordinate), :math:`\Gamma = 0`.

    Any integrator takes it: with :func:`~numpyro_sgrld.integrators.langevin` it is
    preconditioned SGLD with a fixed preconditioner (exact in the small-step limit, no Γ), with
    :func:`~numpyro_sgrld.integrators.sghmc` SGHMC with mass matrix :math:`M = D^{-1}`.
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
        return Preconditioner(
            drift=lambda t: jax.tree.map(jnp.multiply, _scale_like(t), t),
            noise=lambda t: jax.tree.map(lambda d, x: jnp.sqrt(d) * x, _scale_like(t), t),
        ), state

    return Metric(
        init,
        update,
        averages_gradient=True,
        correction_hint="a constant metric has Γ = 0: there is nothing to correct",
        name="diagonal",
    )


# --------------------------------------------------------------------------- RMSprop
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
    decay, eps = _check_decay(decay), _check_nonnegative(eps, "eps")

    def init(position):
        zeros = jax.tree.map(jnp.zeros_like, position)
        return RMSpropState(zeros, jnp.zeros((), jnp.int32), zeros)

    def warm_start(state, curvature, context=None):
        num_data = _context(context).num_data
        floor = jax.tree.map(
            lambda c, v: jnp.abs(c).astype(v.dtype) / float(num_data) ** 2,
            curvature,
            state.square_avg,
        )
        return state._replace(floor=floor)

    def update(grad, state, position, context=None):
        num_data = _context(context).num_data
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

    return Metric(
        init, update, decay, averages_gradient=True, warm_start=warm_start, name="rmsprop"
    )


def _rmsprop_diag(eps, v):
    r""":math:`1/(\lambda + \sqrt{\hat V})`, and 1 where :math:`\hat V = 0` (no
    information). The ``where`` is applied to the argument of the square root as well, so that
    the derivative (taken by the Γ correction) is finite at :math:`\hat V = 0`."""
    empty = v == 0
    safe = jnp.where(empty, 1.0, v)
    return jnp.where(empty, 1.0, 1.0 / (eps + jnp.sqrt(safe)))


# --------------------------------------------------------------------------- Monge
class MongeState(NamedTuple):
    """``avg``: the moving average :math:`V` of the per-datum gradient (tree of the position)."""

    avg: Any


def _monge_noise_coefficient(alpha2, sq_norm):
    # f = ((1 + a s)^(-1/2) - 1) / s = -a / (sqrt(1 + a s) (1 + sqrt(1 + a s))): no 0/0 at s = 0
    root = jnp.sqrt(1.0 + alpha2 * sq_norm)
    return -alpha2 / (root * (1.0 + root))


def monge(alpha2=1.0, decay=0.9, max_drift_norm=None) -> Metric:
    r"""The Monge metric of Yu et al. (2023) / Hartmann et al. (2022), one over all sites.

    .. math::
        V \leftarrow \lambda V + (1 - \lambda)\bar g, \qquad
        G = I + \alpha^2 V V^\top, \\
        D\nabla\hat U = \nabla\hat U - \frac{\alpha^2\langle V, \nabla\hat U\rangle}
                                          {1 + \alpha^2\|V\|^2} V, \qquad
        D^{1/2}\xi = \xi + f\langle V, \xi\rangle V, \quad
        f = \frac{(1 + \alpha^2\|V\|^2)^{-1/2} - 1}{\|V\|^2}.

    Inner products run over every leaf (one metric for all latent sites together): O(d) time
    and memory, element-wise work and three global dot products. ``alpha2`` :math:`\alpha^2`
    (0 gives SGLD), ``decay`` :math:`\lambda`. Safeguard (Yu et al.'s funnel code): when
    :math:`\|D\nabla\hat U\| >` ``max_drift_norm``, that step uses
    :math:`D = (\text{max\_drift\_norm}/\|\nabla\hat U\|) I`. State: one number per parameter.
    """
    alpha2 = _check_nonnegative(alpha2, "alpha2")
    decay = _check_decay(decay)
    if max_drift_norm is not None:
        max_drift_norm = real(
            max_drift_norm, "max_drift_norm", low=0, low_open=True, hint="Or None (off)."
        )

    def init(position):
        return MongeState(jax.tree.map(jnp.zeros_like, position))

    def update(grad, state, position, context=None):
        num_data = _context(context).num_data
        avg = jax.tree.map(lambda v, g: decay * v + (1 - decay) * g / num_data, state.avg, grad)
        sq_norm = tree_dot(avg, avg)
        c = alpha2 / (1.0 + alpha2 * sq_norm)
        f = _monge_noise_coefficient(alpha2, sq_norm)

        def drift(t):
            coef = c * tree_dot(avg, t)
            return jax.tree.map(lambda x, v: x - coef * v, t, avg)

        def noise(t):
            coef = f * tree_dot(avg, t)
            return jax.tree.map(lambda x, v: x + coef * v, t, avg)

        if max_drift_norm is None:
            return Preconditioner(drift, noise), MongeState(avg)

        # Safeguard: whether it fires depends on the gradient, so decide once per step.
        fire = tree_norm(drift(grad)) > max_drift_norm
        scale = jnp.where(fire, max_drift_norm / tree_norm(grad), 1.0)

        def safe_drift(t):
            return jax.tree.map(lambda a, b: jnp.where(fire, scale * b, a), drift(t), t)

        def safe_noise(t):
            root = jnp.sqrt(scale)
            return jax.tree.map(lambda a, b: jnp.where(fire, root * b, a), noise(t), t)

        return Preconditioner(safe_drift, safe_noise), MongeState(avg)

    return Metric(
        init, update, decay, averages_gradient=True, statistic_order=1, name="monge"
    )


# --------------------------------------------------------------------------- Shampoo
def _merge_dims(shape, block_size):
    dims = [d for d in shape if d != 1] or [1]
    merged = [dims[0]]
    for d in dims[1:]:
        if merged[-1] * d <= block_size:
            merged[-1] *= d
        else:
            merged.append(d)
    return tuple(merged)


def shampoo_block_shapes(shape, block_size=128):
    """How Shampoo sees a tensor of ``shape``: ``(merged_shape, block_shape, num_blocks)``.

    Size-1 dimensions are dropped, consecutive dimensions merged while their product stays
    ``<= block_size``; a dimension larger than ``block_size`` is split into the fewest blocks of
    at most ``block_size``, all of one size ``ceil(d / count)`` (784 with ``block_size=128``:
    7 blocks of 112, not 6 of 128 and a padded seventh). When that size does not divide ``d``
    the last block is zero-padded (fewer than ``count`` rows): padding rows of the statistics
    are zero, so the Kronecker factors stay block-diagonal and the padding never mixes with
    real entries. Equal blocks keep the padding, which costs multiply-adds every step and
    carries no information, to a minimum. A scalar is a vector of length 1.
    """
    merged = _merge_dims(tuple(shape), block_size)
    counts = tuple(-(-d // block_size) for d in merged)
    block = tuple(-(-d // c) for d, c in zip(merged, counts))
    return merged, block, counts


def _to_blocks(x, merged, block, counts):
    x = jnp.reshape(x, merged)
    x = jnp.pad(x, [(0, c * b - d) for d, b, c in zip(merged, block, counts)])
    x = jnp.reshape(x, [s for c, b in zip(counts, block) for s in (c, b)])
    k = len(merged)
    x = jnp.transpose(x, [2 * i for i in range(k)] + [2 * i + 1 for i in range(k)])
    return jnp.reshape(x, (-1,) + block)


def _from_blocks(blocks, shape, merged, block, counts):
    k = len(merged)
    x = jnp.reshape(blocks, counts + block)
    x = jnp.transpose(x, [j for i in range(k) for j in (i, k + i)])
    x = jnp.reshape(x, [c * b for c, b in zip(counts, block)])
    x = x[tuple(slice(0, d) for d in merged)]
    return jnp.reshape(x, shape)


def _mode_product(x, matrix, mode):
    """:math:`x \\times_{mode} M`: multiply the mode-``mode`` fibres of ``x`` by ``M``."""
    return jnp.moveaxis(jnp.tensordot(matrix, x, axes=(1, mode)), 0, mode)


def _unfold_gram(x, mode):
    unfolded = jnp.reshape(jnp.moveaxis(x, mode, 0), (x.shape[mode], -1))
    return unfolded @ unfolded.T


def _root_eigen(stat, eps, power):
    """Eigenvectors of ``stat``, the ridged eigenvalues ``m`` and ``m^(-1/power)``."""
    w, q = jnp.linalg.eigh(stat)
    w = jnp.maximum(w, 0.0)
    top = jnp.max(w)
    m = jnp.maximum(w + eps * top, jnp.finfo(w.dtype).tiny)
    root = jnp.where(top > 0, m ** (-1.0 / power), 1.0)
    return q, m, root, top


@partial(jax.custom_jvp, nondiff_argnums=(1, 2))
def _inverse_root(stat, eps, power):
    """:math:`(L + \\epsilon\\lambda_{max}(L) I)^{-1/power}` of a symmetric PSD matrix.

    Differentiated with the Daleckii–Krein formula rather than through ``eigh``, so that the
    derivative (needed by the Γ correction) stays finite at repeated eigenvalues.
    """
    q, _, root, _ = _root_eigen(stat, eps, power)
    return (q * root) @ q.T


@_inverse_root.defjvp
def _inverse_root_jvp(eps, power, primals, tangents):
    (stat,), (dstat,) = primals, tangents
    q, m, root, top = _root_eigen(stat, eps, power)
    b = q.T @ dstat @ q
    # the ridge eps * lambda_max moves with the top eigenvalue: d lambda_max = q_top' dL q_top
    b = b + eps * b[-1, -1] * jnp.eye(b.shape[0], dtype=b.dtype)
    diff_m = m[:, None] - m[None, :]
    diff_f = root[:, None] - root[None, :]
    mid = 0.5 * (m[:, None] + m[None, :])
    slope = (-1.0 / power) * mid ** (-1.0 / power - 1.0)
    close = jnp.abs(diff_m) <= 1e-6 * jnp.maximum(mid, jnp.finfo(m.dtype).tiny)
    divided = jnp.where(close, slope, diff_f / jnp.where(close, 1.0, diff_m))
    tangent = jnp.where(top > 0, q @ (divided * b) @ q.T, jnp.zeros_like(stat))
    return (q * root) @ q.T, tangent


def _after(x, token):
    """``x`` unchanged, but computed after ``token``: a data dependency (``x + 0 * finite``) that
    XLA cannot fold away, so that the two computations run one after the other."""
    t = jnp.sum(token)
    return x + jnp.where(jnp.isfinite(t), t, 0.0).astype(x.dtype) * 0


def _fresh_roots(stats_l, roots_l, precs_l, eps, decay, count):
    """Noise roots and drift factors of every leaf and mode from the statistics.

    ``floor`` is the decayed initial statistic :math:`\alpha^t\\epsilon` (the state keeps the
    statistics without it), added back here. A block whose statistic is still exactly zero
    (no gradient information: a start at a mode with exact gradients) gets the identity, not
    :math:`(\alpha^t\\epsilon)^{-1/(4k)}`.

    The batched eigendecompositions run one at a time. XLA:CPU (jaxlib 0.10) runs independent
    operations concurrently, and a batched LAPACK ``eigh`` blocks its worker until its chunks,
    scheduled on the same thread pool, are done: two or more at once can wait on each other
    forever when the pool is small (two cores: a hang in ``block_until_ready``).
    """
    del roots_l, precs_l
    token = jnp.zeros(())
    roots_out, precs_out = [], []
    for stats in stats_l:
        k = len(stats)
        roots = []
        for s in stats:
            eye = jnp.eye(s.shape[-1], dtype=s.dtype)
            floor = eps * jnp.asarray(decay, s.dtype) ** count
            ridged = _after(s + floor * eye, token)
            r = jax.vmap(_inverse_root, (0, None, None))(ridged, eps, 4 * k)
            empty = jnp.all(s == 0, axis=(-2, -1), keepdims=True)
            r = jnp.where(empty, eye, r)
            token = r[..., 0, 0]
            roots.append(r)
        roots_out.append(tuple(roots))
        precs_out.append(tuple(r @ r for r in roots))
    return roots_out, precs_out


class ShampooState(NamedTuple):
    r"""Per leaf, tuples over modes of arrays ``(num_blocks, n_i, n_i)``: the statistics
    ``stats`` (:math:`L_i - \alpha^t\epsilon I`, the moving average of the gradients' Gram
    matrices without its decayed initial value), the noise roots ``roots`` (:math:`N_i`) and
    the drift factors ``precs`` (:math:`P_i = N_i^2`); ``count`` counts steps."""

    stats: Any
    roots: Any
    precs: Any
    count: Any


def shampoo(decay=0.99, eps=1e-8, update_interval=100, block_size=128) -> Metric:
    r"""The Shampoo metric of Yu et al. (2023) (Gupta et al. 2018; Anil et al. 2021).

    Per latent site and per block (see :func:`shampoo_block_shapes`), a rank-k tensor with
    Kronecker factors, one per mode i:

    .. math::
        L_i \leftarrow \alpha L_i + (1 - \alpha)\, G_{(i)} G_{(i)}^\top
        \quad(L_i = \epsilon I \text{ at start}), \\
        N_i = (L_i + \epsilon\,\lambda_{max}(L_i)\,I)^{-1/(4k)}, \quad P_i = N_i^2, \\
        D\nabla\hat U = \nabla\hat U \times_1 P_1 \cdots \times_k P_k, \qquad
        D^{1/2}\xi = \xi \times_1 N_1 \cdots \times_k N_k,

    :math:`G_{(i)}` the mode-i unfolding of the per-datum gradient block. The roots are
    recomputed (symmetric eigendecompositions) every ``update_interval`` steps, behind
    ``lax.cond``; before the first recomputation the metric is the identity. For a matrix this
    is :math:`D = L^{-1/4} \otimes R^{-1/4}`; vectors and biases (k = 1) get the full-matrix
    :math:`L^{-1/2}`, as in Yu et al.'s funnel experiment (their network code left vectors
    unpreconditioned). The ridge :math:`\epsilon\lambda_{max}` is added at the root only, not
    into :math:`L_i` (unlike the authors' code). A block whose gradients have all been exactly
    zero so far (:math:`L_i = \alpha^t\epsilon I`: no information, e.g. a start at a mode with
    exact gradients and ``update_interval=1``) keeps the identity instead of the root
    :math:`(\alpha^t\epsilon)^{-1/(4k)}` of its initial value. State: three
    :math:`n_i \times n_i` matrices per block and mode, at most :math:`3\cdot 128^2` numbers
    each.
    """
    decay = _check_decay(decay)
    eps = _check_nonnegative(eps, "eps")
    update_interval = _check_interval(update_interval)
    block_size = _check_interval(block_size, "block_size")

    def layout(x):
        return shampoo_block_shapes(jnp.shape(x), block_size)

    def init(position):
        def leaf_init(x):
            _, block, counts = layout(x)
            nb = math.prod(counts)
            eye = [
                jnp.broadcast_to(jnp.eye(b, dtype=jnp.result_type(x)), (nb, b, b)) for b in block
            ]
            return tuple(jnp.zeros_like(e) for e in eye), tuple(eye), tuple(eye)

        parts = jax.tree.map(leaf_init, position)
        is_triple = lambda t: isinstance(t, tuple) and len(t) == 3  # noqa: E731
        pick = lambda j: jax.tree.map(lambda t: t[j], parts, is_leaf=is_triple)  # noqa: E731
        return ShampooState(pick(0), pick(1), pick(2), jnp.zeros((), jnp.int32))

    def update(grad, state, position, context=None):
        num_data = _context(context).num_data
        count = state.count + 1
        recompute = count % update_interval == 0
        leaves, treedef = jax.tree.flatten(grad)
        stats_l = treedef.flatten_up_to(state.stats)
        roots_l = treedef.flatten_up_to(state.roots)
        precs_l = treedef.flatten_up_to(state.precs)
        layouts = [layout(g) for g in leaves]
        new_stats = []
        for g, stats, (merged, block, counts) in zip(leaves, stats_l, layouts):
            blocks = _to_blocks(g / num_data, merged, block, counts)
            new_stats.append(
                tuple(
                    decay * s + (1 - decay) * jax.vmap(_unfold_gram, (0, None))(blocks, i)
                    for i, s in enumerate(stats)
                )
            )
        new_roots, new_precs = lax.cond(
            recompute,
            partial(_fresh_roots, eps=eps, decay=decay, count=count),
            lambda stats, roots, precs: (roots, precs),
            new_stats,
            roots_l,
            precs_l,
        )

        def apply(factors_l):
            def fn(tree):
                out = []
                for x, factors, (merged, block, counts) in zip(
                    treedef.flatten_up_to(tree), factors_l, layouts
                ):
                    blocks = _to_blocks(x, merged, block, counts)
                    for i, m in enumerate(factors):
                        blocks = jax.vmap(_mode_product, (0, 0, None))(blocks, m, i)
                    out.append(_from_blocks(blocks, jnp.shape(x), merged, block, counts))
                return jax.tree.unflatten(treedef, out)

            return fn

        new_state = ShampooState(
            jax.tree.unflatten(treedef, new_stats),
            jax.tree.unflatten(treedef, list(new_roots)),
            jax.tree.unflatten(treedef, list(new_precs)),
            count,
        )
        return Preconditioner(apply(new_precs), apply(new_roots)), new_state

    # The correction differentiates D through the current statistic: only meaningful when the
    # roots follow the statistic every step.
    return Metric(
        init,
        update,
        decay if update_interval == 1 else None,
        correction_hint=f"with update_interval={update_interval}: the Γ correction needs the "
        "metric to follow the current gradient statistic, so set update_interval=1",
        name="shampoo",
    )


# --------------------------------------------------------------------------- Wenzel
class WenzelState(NamedTuple):
    """``avg``: per-site running mean square :math:`s_p`; ``scale``: the current
    :math:`D_p`; ``count``: steps taken."""

    avg: Any
    scale: Any
    count: Any


def wenzel(decay=0.99, eps=1e-8, update_interval=None) -> Metric:
    r"""Wenzel et al.'s (2020) layer-wise metric, as in bnn_priors and Yu et al. (2023).

    One scalar per latent site p:

    .. math::
        s_p \leftarrow \alpha s_p + (1 - \alpha)\,\mathrm{mean}(\bar g_p^2), \quad
        M_p = s_p + \epsilon, \quad D_p = (M_p / \min_q M_q)^{-1/2},

    :math:`s_p` starting at ones; :math:`D_p` is refreshed every ``update_interval`` steps
    (``None``, the default: one epoch, ``context.steps_per_epoch`` = :math:`N/n` of the largest
    subsample plate) and is 1 before the first refresh. State: two numbers per site.
    """
    decay = _check_decay(decay)
    eps = _check_nonnegative(eps, "eps")
    if update_interval is not None:
        update_interval = _check_interval(update_interval)

    def init(position):
        ones = jax.tree.map(lambda x: jnp.ones((), jnp.result_type(x)), position)
        return WenzelState(ones, ones, jnp.zeros((), jnp.int32))

    def update(grad, state, position, context=None):
        context = _context(context)
        num_data = context.num_data
        interval = context.steps_per_epoch if update_interval is None else update_interval
        count = state.count + 1
        avg = jax.tree.map(
            lambda s, g: decay * s + (1 - decay) * jnp.mean((g / num_data) ** 2), state.avg, grad
        )
        mass = jax.tree.map(lambda s: s + eps, avg)
        smallest = jnp.min(jnp.stack(jax.tree.leaves(mass)))
        fresh = jax.tree.map(lambda m: (m / smallest) ** -0.5, mass)
        scale = jax.tree.map(
            lambda new, old: jnp.where(count % interval == 0, new, old), fresh, state.scale
        )
        precond = Preconditioner(
            drift=lambda t: jax.tree.map(lambda d, x: d * x, scale, t),
            noise=lambda t: jax.tree.map(lambda d, x: jnp.sqrt(d) * x, scale, t),
        )
        return precond, WenzelState(avg, scale, count)

    return Metric(
        init,
        update,
        correction_hint="the layer-wise metric is held constant between refreshes, so it has "
        "no moving-average statistic to differentiate",
        name="wenzel",
    )
