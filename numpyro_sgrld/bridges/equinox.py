"""Priors on Equinox networks: every inexact array of an ``eqx.Module`` becomes a NumPyro site.

Equinox is an optional extra (``pip install "numpyro-sgrld[equinox]"``, Equinox 0.13 tested);
it is imported when :func:`random_eqx_module` is called, not when this module is.

**Site names.** The parameters are the module's inexact (floating) arrays,
``eqx.partition(module, eqx.is_inexact_array)``. A parameter's site is ``"{name}/{path}"``, its
path being its attribute path in the module joined by ``/`` (field names, tuple and list
indices, dict keys): ``eqx.nn.MLP`` has ``"net/layers/0/..."``. The weight and bias of every
``eqx.nn.Linear`` and ``eqx.nn.Conv`` are named ``w`` and ``b``, as Haiku names them and as the
BNP metric reads them: ``"net/layers/0/w"``, ``"net/layers/0/b"``; every other parameter keeps
its field name.

**Layout.** Equinox stores a dense weight as (out, in) and a convolution's as
(out, in, *kernel), with a bias of shape (out, 1, ..., 1). Their sites have Haiku's and Flax's
layout instead: ``w`` is the weight transposed, (in, out), or (*kernel, in, out) for a
convolution, and ``b`` is (out,); the network is called with the weight transposed back. So the
priors of :mod:`numpyro_sgrld.bridges.priors`, whose fan-in is the product of all but the last axis
of the site's shape, give an ``eqx.nn.Linear(784, 400)`` the He scale ``1.41/sqrt(784)``, and the
BNP metric, which reads a weight as fan-in × outputs, preconditions it. Values given for these
sites (``Predictive``, ``substitute``, ``init_to_value``) are in that layout:
``w = linear.weight.T``, or :func:`conv_weight_to_site` of a convolution's weight and
``conv.bias.reshape(-1)``. Every other parameter keeps Equinox's layout.
"""

import functools

import jax
import jax.numpy as jnp
from jax.tree_util import DictKey, FlattenedIndexKey, GetAttrKey, SequenceKey

from numpyro_sgrld.bridges._network_priors import (
    check_module,
    check_name,
    join_path,
    layer_inputs_sink,
    patch_rows,
    record_layer_inputs,
    rename_dense_leaf,
    sample_parameter,
)
from numpyro_sgrld.core.checks import flag

__all__ = ["conv_weight_from_site", "conv_weight_to_site", "random_eqx_module"]

#: The site leaf names of a dense or convolution layer's parameters.
DENSE_LEAVES = {"weight": "w", "bias": "b"}


def _import_equinox():
    try:
        import equinox as eqx
    except ImportError as e:
        raise ImportError(
            "random_eqx_module needs Equinox: pip install \"numpyro-sgrld[equinox]\" "
            "(Equinox 0.13 tested)."
        ) from e
    return eqx


def _check_module(eqx, module):
    return check_module(
        module,
        eqx.Module,
        "eqx.Module",
        "key=jax.random.key(0)",
        "eqx.nn.MLP(3, 1, 8, 1, key=jax.random.key(0))",
        "For Flax NNX modules use numpyro_sgrld.bridges.nnx.random_nnx_module, for Haiku "
        "random_haiku_module.",
    )


def _key_part(key):
    """One entry of a JAX key path as a path part: a field name, an index or a dict key."""
    if isinstance(key, GetAttrKey):
        return key.name
    if isinstance(key, SequenceKey):
        return key.idx
    if isinstance(key, (DictKey, FlattenedIndexKey)):
        return key.key
    return str(key)


def _parts(keypath):
    return tuple(_key_part(k) for k in keypath)


def _layers(eqx, module):
    """``{path: "linear" | "conv"}`` for the module's ``eqx.nn.Linear`` and ``eqx.nn.Conv``."""
    def is_layer(node):
        return isinstance(node, (eqx.nn.Linear, eqx.nn.Conv))

    nodes, _ = jax.tree_util.tree_flatten_with_path(module, is_leaf=is_layer)
    return {
        _parts(path): "linear" if isinstance(node, eqx.nn.Linear) else "conv"
        for path, node in nodes
        if is_layer(node)
    }


def conv_weight_to_site(weight):
    """Equinox's convolution weight (out, in, *kernel) as (*kernel, in, out)."""
    spatial = tuple(range(2, weight.ndim))
    return jnp.transpose(weight, (*spatial, 1, 0))


def conv_weight_from_site(w):
    """(*kernel, in, out) back to Equinox's (out, in, *kernel)."""
    d = w.ndim - 2
    return jnp.transpose(w, (d + 1, d, *range(d)))


def _layout(kind, leaf, shape):
    """``(site shape, site value -> Equinox value)`` of the parameter ``leaf`` of a layer of
    ``kind`` (``None``: not a dense or convolution layer) whose Equinox shape is ``shape``."""
    if kind == "linear" and leaf == "weight":
        return shape[::-1], jnp.transpose
    if kind == "conv" and leaf == "weight":
        return (*shape[2:], shape[1], shape[0]), conv_weight_from_site
    if kind == "conv" and leaf == "bias":
        return shape[:1], lambda b: jnp.reshape(b, shape)
    return shape, lambda value: value


def linear_rows(linear, x):
    """An ``eqx.nn.Linear`` call's inputs as rows × fan-in."""
    return jnp.reshape(x, (-1, linear.weight.shape[-1]))


def conv_patches(conv, x):
    """The patches of an ``eqx.nn.Conv`` call on one example ``x`` (channels, *spatial):
    rows (output positions) × fan-in, in the order of the site ``w.reshape(-1, c_out)``
    (spatial offsets, then input channels; the site is the HWIO kernel), so that the
    convolution is ``patches @ w.reshape(-1, c_out)`` (+ bias)."""
    padding = conv.padding
    if conv.padding_mode != "ZEROS":
        x, padding = conv._nonzero_pad(x), "VALID"
    return patch_rows(x[None], conv.weight.shape[2:], 1, window_strides=conv.stride,
                      padding=padding, rhs_dilation=conv.dilation)


@functools.cache
def _recorder_class():
    """An ``eqx.Module`` standing in for a layer for one call of the network: it hands
    ``rows(layer, x)`` (the layer's inputs as rows × fan-in: :func:`linear_rows`,
    :func:`conv_patches`) to ``sink`` and calls the layer; other attributes are the layer's."""
    eqx = _import_equinox()

    class RecordedLayer(eqx.Module):
        layer: eqx.Module
        key: str = eqx.field(static=True)
        sink: object = eqx.field(static=True)
        rows: object = eqx.field(static=True)

        def __call__(self, x, *args, **kwargs):
            self.sink(self.key, self.rows(self.layer, x))
            return self.layer(x, *args, **kwargs)

        def __getattr__(self, item):
            if item in ("layer", "key", "sink", "rows") or item.startswith("__"):
                raise AttributeError(item)
            return getattr(self.layer, item)

    return RecordedLayer


def _recording(eqx, net, name, sink):
    """``net`` with each ``eqx.nn.Linear`` replaced by a recorder handing its inputs (rows ×
    fan-in) to ``sink("{name}/{layer path}", ...)``, and each ``eqx.nn.Conv`` without groups
    by one handing its patches."""
    recorder = _recorder_class()

    def is_layer(node):
        return isinstance(node, (eqx.nn.Linear, eqx.nn.Conv))

    def record(path, node):
        key = join_path([name, *_parts(path)])
        if isinstance(node, eqx.nn.Linear):
            return recorder(node, key, sink, linear_rows)
        if isinstance(node, eqx.nn.Conv) and node.groups == 1:
            return recorder(node, key, sink, conv_patches)
        return node

    return jax.tree_util.tree_map_with_path(
        lambda path, node: record(path, node) if is_layer(node) else node, net, is_leaf=is_layer
    )


def random_eqx_module(name, module, prior, *, batched=True):
    """Register the parameters of an Equinox network as NumPyro sample sites; return ``apply``.

    :param name: prefix of the site names (see the module docstring: ``"net/layers/0/w"``).
    :param module: an ``eqx.Module`` instance; its parameters' values are not used (only their
        paths and shapes).
    :param prior: a NumPyro distribution (scalar ones are expanded to every parameter), a dict
        by site name or Equinox path (``"layers/0/weight"``), or a callable ``(path, shape)``
        returning a distribution or a value, such as :func:`numpyro_sgrld.bridges.priors.horseshoe`
        (the same forms as :func:`~numpyro_sgrld.bridges.haiku.random_haiku_module`). Shapes are the
        sites' (the module docstring's layout: a dense weight is (in, out)).
    :param batched: ``True`` (default): ``apply(x, *args, **kwargs)`` maps the module over the
        leading axis of ``x``, ``jax.vmap(lambda xi: module(xi, *args, **kwargs))(x)``, as
        Equinox layers take one example at a time (the other arguments are not mapped).
        ``False``: ``apply`` calls the module on its arguments as they are.
    :return: ``apply``, the module with the sampled parameters. Every call records the inputs
        of each ``eqx.nn.Linear`` (rows × fan-in, one row per example and call), and the
        patches of each ``eqx.nn.Conv`` without groups (one row per example, output position
        and call, in the order of the site ``w.reshape(-1, c_out)``), as the
        auxiliary value ``"layer_inputs:{name}/{layer path}"``, which the BNP metric
        (:func:`numpyro_sgrld.core.metrics.bnp`) reads with the sites ``".../w"``, ``".../b"``.
        Do not wrap ``apply`` in ``jax.vmap`` yourself (let ``batched=True`` map it): inputs
        recorded inside a transformation cannot be read outside it. A layer called inside a
        transformation of the module's own (``jax.vmap``, ``jax.lax.scan``,
        ``jax.checkpoint``) is not recorded, so BNP leaves it unpreconditioned.

    Stateful modules (``eqx.nn.State``) are not handled: pass the state as an argument and keep
    it in a ``numpyro.mutable`` site yourself.
    """
    eqx = _import_equinox()
    check_name(name)
    _check_module(eqx, module)
    batched = flag(batched, "batched")
    params, static = eqx.partition(module, eqx.is_inexact_array)
    leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    layers = _layers(eqx, module)
    specs = []
    for keypath, leaf in leaves:
        parts = _parts(keypath)
        kind = layers.get(parts[:-1])
        shape, to_module = _layout(kind, parts[-1], tuple(jnp.shape(leaf)))
        site = f"{name}/{rename_dense_leaf(parts, layers, DENSE_LEAVES)}"
        specs.append((site, join_path(parts), shape, to_module))
    available = [(site, alias) for site, alias, _, _ in specs]
    values = [
        to_module(
            sample_parameter(prior, site, alias, shape, alias_label="Equinox path",
                             available=available)
        )
        for site, alias, shape, to_module in specs
    ]
    net = eqx.combine(jax.tree_util.tree_unflatten(treedef, values), static)

    def call(*args, **kwargs):
        inputs = {}
        out = _recording(eqx, net, name, layer_inputs_sink(inputs))(*args, **kwargs)
        return out, {key: jnp.concatenate(xs, axis=0) for key, xs in inputs.items()}

    def apply(*args, **kwargs):
        if batched:
            if not args:
                raise TypeError(
                    "apply(x, ...) of a batched random_eqx_module takes the batch `x` first "
                    "(the module is mapped over its leading axis)."
                )
            x, *rest = args
            out, inputs = jax.vmap(lambda xi: call(xi, *rest, **kwargs))(x)
        else:
            out, inputs = call(*args, **kwargs)
        record_layer_inputs(
            {key: [jnp.reshape(xs, (-1, xs.shape[-1]))] for key, xs in inputs.items()}
        )
        return out

    return apply

