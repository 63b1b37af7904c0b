"""Small pytree helpers shared by metrics, integrators and the adapter."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import random


def tree_dot(a, b):
    """Global inner product ``sum_leaves <a, b>`` of two trees of the same structure."""
    products = jax.tree.leaves(jax.tree.map(jnp.vdot, a, b))
    return sum(products[1:], products[0]) if products else jnp.zeros(())


def tree_norm(a):
    """Global Euclidean norm of a tree."""
    return jnp.sqrt(tree_dot(a, a))


def tree_all_finite(a):
    """True when every entry of every floating-point leaf is finite.

    Computed as ``isfinite(sum_leaves sum(x))``: a NaN or an infinity anywhere makes the sum NaN
    or infinite, so no non-finite entry passes. A plain sum is a vectorised reduction on
    XLA:CPU, cheaper than ``all(isfinite(x))``, a boolean reduction (docs/benchmarks.md). The
    price is conservative: a finite state whose entries
    sum beyond the float32 range (|sum| > 3.4e38; leaves narrower than float32 are summed in
    float32) also counts as non-finite, i.e. diverging. Integer and boolean leaves (counters)
    are always finite.
    """
    sums = [
        jnp.sum(x, dtype=jnp.promote_types(x.dtype, jnp.float32))
        for x in jax.tree.leaves(a)
        if jnp.issubdtype(jnp.result_type(x), jnp.inexact)
    ]
    return jnp.isfinite(sum(sums[1:], sums[0])) if sums else jnp.array(True)


def tree_normal(key, like):
    """Standard normal noise with the structure, shapes and dtypes of ``like``.

    **One** draw of random bits over all entries (in the widest floating dtype of the leaves),
    as BlackJAX's ``generate_gaussian_noise`` draws one vector: one call of the generator is
    one threefry hash in the compiled program, faster to run than one per leaf and smaller to
    compile (the noise-draw table of ``benchmarks/speed/speed.py --problem mlp``,
    docs/benchmarks.md). The bits are cut into the leaves *before* they become normals
    (:func:`normal_from_bits`, the values of ``jax.random.normal(key, (n,))`` cut the same
    way), so each leaf's conversion is an element-wise operation on that leaf alone: XLA's
    cost analysis counts an operation inside a fusion at its full shape, and a conversion of
    the whole vector cut afterwards counted once per leaf.
    Leaves that are not real floating point raise ``TypeError`` (noise cast to an integer
    would be truncated).
    """
    leaves, treedef = jax.tree.flatten(like)
    if not leaves:
        return like
    dtypes = [jnp.result_type(x) for x in leaves]
    if not all(jnp.issubdtype(t, jnp.floating) for t in dtypes):
        raise TypeError(
            "Gaussian noise needs real floating-point leaves, got dtypes "
            f"{sorted(map(str, set(dtypes)))}: cast the position (or momentum) to a float "
            "dtype, e.g. jnp.asarray(x, jnp.float32)."
        )
    dtype = jnp.result_type(*dtypes)
    sizes = [int(np.size(x)) for x in leaves]
    bits = random.bits(key, (sum(sizes),), _UINT[jnp.finfo(dtype).bits])
    ends = np.cumsum(sizes)
    noise = [
        normal_from_bits(bits[end - size : end], dtype).reshape(jnp.shape(x)).astype(t)
        for x, t, size, end in zip(leaves, dtypes, sizes, ends)
    ]
    return jax.tree.unflatten(treedef, noise)


_UINT = {16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}


def uniform_bits(key, shape, dtype):
    """Unsigned random bits of ``dtype``'s width in ``shape``: one call of the generator, for
    :func:`uniform_from_bits` and :func:`normal_from_bits`."""
    return random.bits(key, shape, _UINT[jnp.finfo(dtype).bits])


def uniform_from_bits(bits, dtype):
    r"""Uniforms on :math:`[0, 1)` from unsigned random ``bits`` of ``dtype``'s width, by the
    construction of ``jax.random.uniform``: the top mantissa bits under the exponent of 1 give
    a float in :math:`[1, 2)`, less one. Many uniforms cut from one draw of bits cost one
    threefry hash in the compiled program, where each ``jax.random`` call costs one (and a
    ``split`` another)."""
    finfo = jnp.finfo(dtype)
    uint = bits.dtype.type
    one = np.array(1.0, dtype).view(uint)
    return jax.lax.bitcast_convert_type(
        jax.lax.shift_right_logical(bits, uint(finfo.bits - finfo.nmant)) | one, dtype
    ) - np.array(1.0, dtype)


def normal_from_bits(bits, dtype):
    r"""Standard normals from unsigned random ``bits`` of ``dtype``'s width, by the
    construction of ``jax.random.normal``: the top mantissa bits make :math:`u` uniform on
    :math:`(-1, 1)`, and :math:`\sqrt 2\,\mathrm{erf}^{-1}(u)` is standard normal."""
    unit = uniform_from_bits(bits, dtype)
    low = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = jax.lax.max(low, unit * (np.array(1.0, dtype) - low) + low)
    return np.array(np.sqrt(2.0), dtype) * jax.lax.erf_inv(u)


def tree_where(pred, on_true, on_false):
    """Leaf-wise ``jnp.where`` with a scalar predicate."""
    return jax.tree.map(lambda x, y: jnp.where(pred, x, y), on_true, on_false)
