r"""The Shampoo metric of Yu et al. (2023) (Gupta et al. 2018; Anil et al. 2021)."""

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from numpyro_sgrld.core.checks import flag
from numpyro_sgrld.core.correction import GammaBias, Lag, NoLag
from numpyro_sgrld.core.metrics._base import (
    Metric,
    Preconditioner,
    WarmStart,
    check_decay,
    check_interval,
    check_nonnegative,
    step_context,
)


def _merge_dims(shape, block_size):
    dims = [d for d in shape if d != 1] or [1]
    merged = [dims[0]]
    for d in dims[1:]:
        if merged[-1] * d <= block_size:
            merged[-1] *= d
        else:
            merged.append(d)
    return tuple(merged)


def shampoo_block_shapes(shape, block_size=128, block_split="even"):
    """How Shampoo sees a tensor of ``shape``: ``(merged_shape, block_shape, num_blocks)``.

    Size-1 dimensions are dropped, consecutive dimensions merged while their product stays
    ``<= block_size``; a dimension larger than ``block_size`` is split into the fewest blocks of
    at most ``block_size``. ``block_split="even"`` (the default): all of one size
    ``ceil(d / count)`` (784 with ``block_size=128``: 7 blocks of 112, not 6 of 128 and a
    padded seventh). ``"fixed"``: blocks of ``block_size`` and a smaller remainder (784: six of
    128 and one of 16), as Anil et al.'s and Yu et al.'s code split. The last block is
    zero-padded to the common block size when it is short: padding rows of the statistics
    are zero, so the Kronecker factors stay block-diagonal and the padding never mixes with
    real entries (with ``"fixed"`` the remainder block's factors are exactly those of the
    unpadded remainder). Even blocks keep the padding, which costs multiply-adds every step
    and carries no information, to a minimum. A scalar is a vector of length 1.
    """
    if block_split not in ("even", "fixed"):
        raise ValueError(f"`block_split` must be 'even' or 'fixed', got {block_split!r}.")
    merged = _merge_dims(tuple(shape), block_size)
    counts = tuple(-(-d // block_size) for d in merged)
    if block_split == "fixed":
        block = tuple(min(d, block_size) for d in merged)
    else:
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


def _fresh_roots(stats_l, roots_l, precs_l, eps, decay, count, ridge="root"):
    r"""Noise roots and drift factors of every leaf and mode from the statistics; returns
    ``(stats, roots, precs)``.

    ``floor`` is the decayed initial statistic :math:`\alpha^t\epsilon` (the state keeps the
    statistics without it), added back here. A block whose statistic is still exactly zero
    (no gradient information: a start at a mode with exact gradients) gets the identity, not
    :math:`(\alpha^t\epsilon)^{-1/(4k)}`. With ``ridge="statistic"`` (Yu et al.'s code) the
    ridge :math:`\epsilon\lambda_{max}` is added into the statistic itself, which keeps it
    (decaying) afterwards; with ``"root"`` the statistics are returned unchanged.

    The batched eigendecompositions run one at a time. XLA:CPU (jaxlib 0.10) runs independent
    operations concurrently, and a batched LAPACK ``eigh`` blocks its worker until its chunks,
    scheduled on the same thread pool, are done: two or more at once can wait on each other
    forever when the pool is small (two cores: a hang in ``block_until_ready``).
    """
    del roots_l, precs_l
    token = jnp.zeros(())
    stats_out, roots_out, precs_out = [], [], []
    for stats in stats_l:
        k = len(stats)
        new_stats, roots = [], []
        for s in stats:
            eye = jnp.eye(s.shape[-1], dtype=s.dtype)
            floor = eps * jnp.asarray(decay, s.dtype) ** count
            ridged = _after(s + floor * eye, token)
            empty = jnp.all(s == 0, axis=(-2, -1), keepdims=True)
            if ridge == "statistic":
                top = jnp.max(jnp.linalg.eigvalsh(ridged), axis=-1)[..., None, None]
                ridge_term = eps * jnp.maximum(top, 0.0) * eye
                token = top[..., 0, 0]
                s = s + ridge_term
                r = jax.vmap(_inverse_root, (0, None, None))(
                    _after(ridged + ridge_term, token), 0.0, 4 * k
                )
            else:
                r = jax.vmap(_inverse_root, (0, None, None))(ridged, eps, 4 * k)
            r = jnp.where(empty, eye, r)
            token = r[..., 0, 0]
            new_stats.append(s)
            roots.append(r)
        stats_out.append(tuple(new_stats))
        roots_out.append(tuple(roots))
        precs_out.append(tuple(r @ r for r in roots))
    return stats_out, roots_out, precs_out


def _curvature_stats(curvature, num_data, layout, stats):
    r"""The warm start's statistics of one leaf: per block and mode, the diagonal of
    :math:`E[G_{(i)}G_{(i)}^\top]` for a per-datum gradient whose entries have second moments
    :math:`|c|/N^2` (:class:`~numpyro_sgrld.core.metrics.WarmStart`: ``c`` the curvature estimate),
    :math:`\mathrm{diag}_a \sum_{b} |c_{ab}| / N^2` over the other modes' indices ``b``."""
    merged, block, counts = layout
    blocks = _to_blocks(jnp.abs(curvature) / float(num_data) ** 2, merged, block, counts)
    out = []
    for i, s in enumerate(stats):
        other = tuple(j + 1 for j in range(len(block)) if j != i)
        diagonal = jnp.sum(blocks, axis=other) if other else blocks
        out.append(jax.vmap(jnp.diag)(diagonal).astype(s.dtype))
    return tuple(out)


class ShampooState(NamedTuple):
    r"""Per leaf, tuples over modes of arrays ``(num_blocks, n_i, n_i)``: the statistics
    ``stats`` (:math:`L_i - \alpha^t\epsilon I`, the moving average of the gradients' Gram
    matrices without its decayed initial value), the noise roots ``roots`` (:math:`N_i`) and
    the drift factors ``precs`` (:math:`P_i = N_i^2`); ``count`` counts steps."""

    stats: Any
    roots: Any
    precs: Any
    count: Any


def shampoo(
    decay=0.99,
    eps=1e-8,
    update_interval=100,
    block_size=128,
    *,
    block_split="even",
    precondition_vectors=True,
    ridge="root",
) -> Metric:
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
    recomputed (batched symmetric eigendecompositions, exact) every ``update_interval`` steps,
    behind a ``lax.cond`` on the step count (with ``update_interval=1`` on every step, without
    one).

    **Warm start** (the kernels call ``warm_start`` at ``init``, and warm-up at each restart
    of the metric in new coordinates): :math:`L_i` starts at the diagonal of
    :math:`E[G_{(i)}G_{(i)}^\top]` for gradients whose squares average to the curvature
    estimate over :math:`N^2`, what they average to under the posterior
    (:class:`~numpyro_sgrld.core.metrics.WarmStart`), and the roots are computed from it at once.
    It fades as :math:`\alpha^t` in the moving average. Without it the statistic starts at
    :math:`\epsilon I` and fills as :math:`1-\alpha^t` (no bias correction), and the metric
    is the identity until the first recomputation: its scale then jumps by orders of magnitude
    (about :math:`N` for a vector), so a step adapted before that jump is far too large after
    it. Called directly (``init`` without ``warm_start``) the metric starts at the identity.

    For a matrix this is :math:`D = L^{-1/4} \otimes R^{-1/4}`; vectors and biases (k = 1) get
    the full-matrix :math:`L^{-1/2}`, as in Yu et al.'s funnel experiment (their network code
    left vectors unpreconditioned). The ridge :math:`\epsilon\lambda_{max}` is added at the root
    only, not into :math:`L_i` (unlike the authors' code). A block whose gradients have all been
    exactly zero so far (:math:`L_i = \alpha^t\epsilon I`: no information, e.g. a start at a
    mode with exact gradients and ``update_interval=1``) keeps the identity instead of the root
    :math:`(\alpha^t\epsilon)^{-1/(4k)}` of its initial value. State: three
    :math:`n_i \times n_i` matrices per block and mode, at most :math:`3\cdot 128^2` numbers
    each.

    **Yu et al.'s code** (``ksnxr/SSGRLDNDM``, ``shampoo_sgld.py``) differs in three ways, each
    a switch here; ``block_split="fixed", precondition_vectors=False, ridge="statistic"``
    reproduces it (``tests/test_reference_updates.py`` checks it step for step against an
    independent transcription):

    - ``block_split``: ``"even"`` blocks (default) or ``"fixed"`` ones of ``block_size`` plus a
      remainder (see :func:`shampoo_block_shapes`);
    - ``precondition_vectors``: ``False`` leaves tensors that merge to one dimension
      (vectors, biases, scalars) unpreconditioned;
    - ``ridge``: ``"root"`` (default) adds :math:`\epsilon\lambda_{max}(L_i)` only inside the
      root; ``"statistic"`` adds it into :math:`L_i` at every recomputation, where it stays
      and decays with the statistic.

    Their inverse roots come from a coupled Newton iteration (tolerance 1e-6), ours from a
    symmetric eigendecomposition: the same matrix to that tolerance.
    """
    decay = check_decay(decay)
    eps = check_nonnegative(eps, "eps")
    update_interval = check_interval(update_interval)
    block_size = check_interval(block_size, "block_size")
    shampoo_block_shapes((1,), block_size, block_split)  # checks block_split
    if ridge not in ("root", "statistic"):
        raise ValueError(f"`ridge` must be 'root' or 'statistic', got {ridge!r}.")
    precondition_vectors = flag(precondition_vectors, "precondition_vectors")

    def layout(x):
        return shampoo_block_shapes(jnp.shape(x), block_size, block_split)

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

    def warm_start(state, curvature, context=None):
        num_data = step_context(context).num_data
        leaves, treedef = jax.tree.flatten(curvature)
        stats = [_curvature_stats(c, num_data, layout(c), s)
                 for c, s in zip(leaves, treedef.flatten_up_to(state.stats))]
        stats, roots, precs = _fresh_roots(stats, None, None, eps=eps, decay=decay,
                                           count=state.count, ridge=ridge)
        return ShampooState(jax.tree.unflatten(treedef, stats),
                            jax.tree.unflatten(treedef, list(roots)),
                            jax.tree.unflatten(treedef, list(precs)), state.count)

    def update(grad, state, position, context=None):
        num_data = step_context(context).num_data
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
        fresh = partial(_fresh_roots, eps=eps, decay=decay, count=count, ridge=ridge)
        if update_interval == 1:  # every step: no branch
            new_stats, new_roots, new_precs = fresh(new_stats, roots_l, precs_l)
        else:
            new_stats, new_roots, new_precs = lax.cond(
                recompute, fresh, lambda stats, roots, precs: (stats, roots, precs),
                new_stats, roots_l, precs_l)

        def apply(factors_l):
            def fn(tree):
                out = []
                for x, factors, (merged, block, counts) in zip(
                    treedef.flatten_up_to(tree), factors_l, layouts
                ):
                    if len(merged) == 1 and not precondition_vectors:
                        out.append(x)
                        continue
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
    lag = (Lag(decay) if update_interval == 1 else
           NoLag(f"with update_interval={update_interval}: the Γ correction needs the metric "
                 "to follow the current gradient statistic, so set update_interval=1"))
    return Metric(init, update, name="shampoo", traits=(lag, GammaBias(), WarmStart(warm_start)))
