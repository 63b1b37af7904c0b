"""Priors on Flax NNX networks: every ``nnx.Param`` of an ``nnx.Module`` becomes a NumPyro site.

Flax is an optional extra (``pip install "numpyro-sgrld[flax]"``, Flax 0.12 tested); it is
imported when :func:`random_nnx_module` is called, not when this module is.

**Site names.** A parameter's site is ``"{name}/{path}"``, its path being the attribute path in
the module joined by ``/`` (attribute names and list indices, as ``nnx.split`` reports them):
``nnx.Sequential(nnx.Linear(...), ...)`` has ``"net/layers/0/..."``, a custom module's
``self.head = nnx.Linear(...)`` has ``"net/head/..."``. The kernel and bias of every
``nnx.Linear`` and ``nnx.Conv`` are named ``w`` and ``b``, as Haiku names them and as the BNP
metric reads them (``"{layer}/w"``, ``"{layer}/b"``): ``"net/layers/0/w"``, ``"net/layers/0/b"``;
every other parameter keeps its attribute name (``"net/norm/scale"``). Their layout is Flax's,
which is Haiku's: a dense kernel is (in, out), a convolution's (*kernel, in, out), so the
fan-in of :mod:`numpyro_sgrld.bridges.priors` (product of all but the last axis) is the layer's.
A module shared by two attributes has its parameters once, under the first path.
"""

import jax
import jax.numpy as jnp
from numpyro.primitives import mutable

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

__all__ = ["random_nnx_module"]

#: The site leaf names of a dense or convolution layer's parameters.
DENSE_LEAVES = {"kernel": "w", "bias": "b"}


def _import_nnx():
    try:
        from flax import nnx
    except ImportError as e:
        raise ImportError(
            "random_nnx_module needs Flax: pip install \"numpyro-sgrld[flax]\" "
            "(Flax 0.12 tested)."
        ) from e
    return nnx


def _check_module(nnx, module):
    return check_module(
        module,
        nnx.Module,
        "nnx.Module",
        "rngs=nnx.Rngs(0)",
        "nnx.Linear(3, 4, rngs=nnx.Rngs(0))",
        "For Equinox modules use numpyro_sgrld.bridges.equinox.random_eqx_module, for Haiku "
        "random_haiku_module.",
    )


def _dense_layers(nnx, module):
    """Paths (tuples) of the module's ``nnx.Linear`` and ``nnx.Conv`` layers."""
    return {
        tuple(path)
        for path, node in nnx.iter_graph(module)
        if isinstance(node, (nnx.Linear, nnx.Conv))
    }


def _recording_dot_general(dot_general, key, sink):
    """``dot_general`` that first hands its left operand, the layer's inputs, as rows × fan-in
    to ``sink(key, ...)`` (``nnx.Linear`` computes ``dot_general(inputs, kernel, ...)``)."""

    def recorded(x, *args, **kwargs):
        sink(key, jnp.reshape(x, (-1, jnp.shape(x)[-1])))
        return dot_general(x, *args, **kwargs)

    return recorded


def _recording_conv(conv_general_dilated, key, sink):
    """``conv_general_dilated`` that first hands the patches of its left operand (rows ×
    fan-in, :func:`~numpyro_sgrld.bridges._network_priors.patch_rows`) to ``sink(key, ...)``.
    ``nnx.Conv`` calls it with channels-last dimension numbers and an HWIO kernel (after its
    own padding for the ``CIRCULAR``, ``REFLECT`` and ``CAUSAL`` modes); grouped convolutions
    are not recorded."""

    def recorded(lhs, rhs, window_strides, padding, lhs_dilation=None, rhs_dilation=None,
                 dimension_numbers=None, feature_group_count=1, **kwargs):
        if feature_group_count == 1:
            sink(key, patch_rows(lhs, rhs.shape[:-2], -1, window_strides=window_strides,
                                 padding=padding, lhs_dilation=lhs_dilation,
                                 rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers))
        return conv_general_dilated(
            lhs, rhs, window_strides, padding, lhs_dilation=lhs_dilation,
            rhs_dilation=rhs_dilation, dimension_numbers=dimension_numbers,
            feature_group_count=feature_group_count, **kwargs)

    return recorded


def _record_linear_inputs(nnx, model, name, sink):
    """Make every ``nnx.Linear`` of ``model`` (a fresh ``nnx.merge``, used for one call) hand
    its inputs, and every ``nnx.Conv`` without a mask its patches, to ``sink`` under
    ``"{name}/{layer path}"``."""
    for path, node in list(nnx.iter_graph(model)):
        key = join_path([name, *path])
        if isinstance(node, nnx.Linear):
            node.dot_general = _recording_dot_general(node.dot_general, key, sink)
        elif isinstance(node, nnx.Conv) and node.mask is None:
            node.conv_general_dilated = _recording_conv(node.conv_general_dilated, key, sink)


def _value(var):
    """A state leaf's value: an ``nnx.Variable``'s, or a plain array attribute itself (such as
    an ``nnx.Conv``'s ``mask``)."""
    return var.get_value() if hasattr(var, "get_value") else var


def _state(nnx, variables, values):
    """A fresh ``nnx.State``: each of ``variables`` (``(path, Variable)``, or a plain array)
    with a new value."""
    return nnx.from_flat_state(
        [(path, var.replace(value) if hasattr(var, "replace") and hasattr(var, "get_value")
          else value) for (path, var), value in zip(variables, values)]
    )


def random_nnx_module(name, module, prior):
    """Register the parameters of a Flax NNX network as NumPyro sample sites; return ``apply``.

    :param name: prefix of the site names (see the module docstring: ``"net/layers/0/w"``).
    :param module: an ``nnx.Module`` instance; its parameters' values are not used (only their
        paths and shapes), and it is not modified.
    :param prior: a NumPyro distribution (scalar ones are expanded to every parameter), a dict
        by site name or NNX path (``"layers/0/kernel"``), or a callable ``(path, shape)``
        returning a distribution or a value, such as :func:`numpyro_sgrld.bridges.priors.horseshoe`
        (the same forms as :func:`~numpyro_sgrld.bridges.haiku.random_haiku_module`).
    :return: ``apply(*args, **kwargs)``: the module, with the sampled parameters, called on the
        arguments. Its other state (``nnx.BatchStat``, ``nnx.Rngs`` counters, any variable that
        is not an ``nnx.Param``) is the ``numpyro.mutable`` site ``"{name}$state"``
        (``{"state": {path: value}}``, not sampled), updated on every call. Every call records
        the inputs of each ``nnx.Linear`` (rows × fan-in, a layer's calls stacked), and the
        patches of each ``nnx.Conv`` without a mask or feature groups (rows = batch × output
        positions, in the order of the site ``w.reshape(-1, c_out)``), as the auxiliary value
        ``"layer_inputs:{name}/{layer path}"``, which the BNP metric
        (:func:`numpyro_sgrld.core.metrics.bnp`) reads with the sites ``".../w"``, ``".../b"``.
        A layer called inside a JAX transformation of the module's own (``nnx.scan``,
        ``nnx.vmap``, ``jax.checkpoint``) is not recorded (its inputs there are values of the
        inner trace), so BNP leaves it unpreconditioned.
    """
    nnx = _import_nnx()
    check_name(name)
    _check_module(nnx, module)
    graphdef, params, rest = nnx.split(module, nnx.Param, ...)
    param_vars = list(nnx.to_flat_state(params))
    rest_vars = list(nnx.to_flat_state(rest))
    dense = _dense_layers(nnx, module)
    specs = [
        (f"{name}/{rename_dense_leaf(path, dense, DENSE_LEAVES)}", join_path(path), var.shape)
        for path, var in param_vars
    ]
    available = [(site, alias) for site, alias, _ in specs]
    values = [
        sample_parameter(prior, site, alias, tuple(shape), alias_label="NNX path",
                         available=available)
        for site, alias, shape in specs
    ]
    param_state = _state(nnx, param_vars, values)

    state_site = None
    if rest_vars:
        state_site = mutable(f"{name}$state")
        if state_site is None:
            state_site = mutable(
                f"{name}$state", {"state": {join_path(p): _value(v) for p, v in rest_vars}}
            )

    def apply(*args, **kwargs):
        rest_state = _state(
            nnx,
            rest_vars,
            [state_site["state"][join_path(p)] for p, _ in rest_vars] if state_site else [],
        )
        model = nnx.merge(graphdef, param_state, rest_state, copy=True)
        inputs = {}
        _record_linear_inputs(nnx, model, name, layer_inputs_sink(inputs))
        out = model(*args, **kwargs)
        if state_site is not None:
            _, _, new_rest = nnx.split(model, nnx.Param, ...)
            state_site["state"] = {
                join_path(p): jax.lax.stop_gradient(_value(v))
                for p, v in nnx.to_flat_state(new_rest)
            }
        record_layer_inputs(inputs)
        return out

    return apply
