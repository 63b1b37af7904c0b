"""Priors on Haiku networks: every parameter of an ``hk.Transformed`` becomes a NumPyro site.

NumPyro 0.22 dropped its Haiku bridge; this one registers each Haiku parameter as a sample
site (so every kernel of this library, NUTS and ``Predictive`` see it) and returns the network's
``apply`` with the sampled parameters bound.
"""

import inspect
import math

import haiku as hk
import jax
import jax.numpy as jnp
from jax import random
from numpyro.primitives import mutable

from numpyro_sgrld.bridges._network_priors import patch_rows, record_layer_inputs, sample_parameter

__all__ = ["conv_patches", "random_haiku_module", "site_name"]


def site_name(name, module, param):
    """Readable site name: ``"{name}/{module}/{param}"`` with Haiku's ``~/`` markers dropped,
    e.g. ``"net/mlp/linear_0/w"``."""
    return "/".join([name, module.replace("~/", ""), param])


def conv_patches(module, x):
    """The patches of an ``hk.ConvND`` call on ``x``: rows (batch × output positions) × the
    kernel's fan-in, in the order of ``w.reshape(-1, c_out)`` (spatial offsets, then input
    channels), so that the convolution is ``patches @ w.reshape(-1, c_out)`` (+ bias)."""
    if x.ndim == module.num_spatial_dims + 1:
        x = x[None]
    return patch_rows(
        x,
        module.kernel_shape,
        -1,
        window_strides=module.stride,
        padding=module.padding,
        lhs_dilation=module.lhs_dilation,
        rhs_dilation=module.kernel_dilation,
        dimension_numbers=module.dimension_numbers,
    )


def _layer_inputs(context, call_args, call_kwargs):
    """The inputs a BNP preconditioner reads for this module call (rows × fan-in), or None."""
    if context.method_name != "__call__":
        return None
    module = context.module
    x = call_args[0] if call_args else call_kwargs.get("inputs")
    if isinstance(module, hk.Linear):
        return jnp.reshape(x, (-1, jnp.shape(x)[-1]))
    if (
        isinstance(module, hk.ConvND)
        and module.channel_index == -1
        and module.feature_group_count == 1
        and module.mask is None
    ):
        return conv_patches(module, jnp.asarray(x))
    return None


def _recording_inputs(name, fn):
    """``fn`` (a Haiku ``apply``) that also records the inputs of every ``hk.Linear`` (and the
    patches of every channels-last ``hk.ConvND`` without feature groups or mask) it calls as the
    auxiliary value ``"layer_inputs:{name}/{module}"`` (rows × fan-in; a module called more
    than once has its inputs stacked), from the same forward pass. Outside the
    stochastic-gradient kernels the values are not collected; XLA drops what no metric reads."""

    def recorded(*args, **kwargs):
        inputs = {}

        def interceptor(next_fn, call_args, call_kwargs, context):
            x = _layer_inputs(context, call_args, call_kwargs)
            if x is not None:
                inputs.setdefault(context.module.module_name, []).append(x)
            return next_fn(*call_args, **call_kwargs)

        with hk.intercept_methods(interceptor):
            out = fn(*args, **kwargs)
        record_layer_inputs(
            {"/".join([name, module.replace("~/", "")]): xs for module, xs in inputs.items()}
        )
        return out

    return recorded


def random_haiku_module(name, transformed, input_shape, prior, *, apply_rng=None):
    """Register the parameters of a Haiku network as NumPyro sample sites; return ``apply(x)``.

    :param name: prefix of the site names (see :func:`site_name`).
    :param transformed: ``hk.transform(f)`` or ``hk.transform_with_state(f)``, with or
        without ``hk.without_apply_rng`` (``apply_rng``, default ``None``, is passed to an
        ``apply`` that takes one).
    :param input_shape: shape of an input batch, used once to find the parameter shapes.
    :param prior: a NumPyro distribution (scalar ones are expanded to every parameter), a dict
        by site path or Haiku path (``"mlp/~/linear_0/w"``), or a callable ``(path, shape)``
        returning a distribution or a value (the ready-made ones are in
        :mod:`numpyro_sgrld.bridges.priors`; callables may sample auxiliary sites such as horseshoe
        scales). A value returned by a callable is recorded as a deterministic site.
    :return: ``apply(x, *args, **kwargs)``. For ``transform_with_state`` networks the state is a
        ``numpyro.mutable`` site ``"{name}$state"`` (not sampled), updated on every call.
        Every call records the inputs of each ``hk.Linear`` as the auxiliary value
        ``"layer_inputs:{name}/{module}"`` (:func:`numpyro_sgrld.auxiliary`), which the BNP
        metric reads (:func:`numpyro_sgrld.core.metrics.bnp`).

    Flax NNX and Equinox networks have the same bridge, with the same ``prior=`` and the same
    layer inputs: :func:`numpyro_sgrld.bridges.nnx.random_nnx_module` and
    :func:`numpyro_sgrld.bridges.equinox.random_eqx_module` (extras ``numpyro-sgrld[flax]`` and
    ``numpyro-sgrld[equinox]``).
    """
    with_state = isinstance(transformed, hk.TransformedWithState)
    # hk.without_apply_rng(...) drops the rng argument of apply
    takes_rng = "rng" in inspect.signature(transformed.apply).parameters
    dummy = jnp.zeros(input_shape)
    shapes = jax.eval_shape(transformed.init, random.PRNGKey(0), dummy)
    param_shapes = shapes[0] if with_state else shapes
    specs = [
        (module, param, site_name(name, module, param), f"{module}/{param}", tuple(spec.shape))
        for module, entries in param_shapes.items()
        for param, spec in entries.items()
    ]
    available = [(path, haiku_path) for _, _, path, haiku_path, _ in specs]
    params = {module: {} for module in param_shapes}
    for module, param, path, haiku_path, shape in specs:
        params[module][param] = sample_parameter(
            prior, path, haiku_path, shape, alias_label="Haiku path", available=available
        )
    if not with_state:
        if not takes_rng:
            return _recording_inputs(
                name, lambda x, *args, **kwargs: transformed.apply(params, x, *args, **kwargs)
            )
        return _recording_inputs(
            name,
            lambda x, *args, **kwargs: transformed.apply(params, apply_rng, x, *args, **kwargs),
        )

    state_site = mutable(f"{name}$state")
    if state_site is None:
        state_site = mutable(
            f"{name}$state", {"state": transformed.init(random.PRNGKey(0), dummy)[1]}
        )

    def apply(x, *args, **kwargs):
        rng = (apply_rng,) if takes_rng else ()
        out, new_state = transformed.apply(params, state_site["state"], *rng, x, *args, **kwargs)
        state_site["state"] = new_state
        return out

    return _recording_inputs(name, apply)


def fan_in(shape):
    """Fan-in of a weight of ``shape`` (all but the last axis); 1 for vectors and scalars."""
    return math.prod(shape[:-1]) if len(shape) >= 2 else 1
