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
import numpyro
import numpyro.distributions as dist
from jax import random
from numpyro.primitives import mutable

from numpyro_sgrld.gradients import auxiliary
from numpyro_sgrld.metrics.bnp import layer_inputs_name

__all__ = ["conv_patches", "random_haiku_module", "site_name"]


def site_name(name, module, param):
    """Readable site name: ``"{name}/{module}/{param}"`` with Haiku's ``~/`` markers dropped,
    e.g. ``"net/mlp/linear_0/w"``."""
    return "/".join([name, module.replace("~/", ""), param])


def _as_distribution(prior, shape):
    if prior.batch_shape == () and prior.event_shape == ():
        return prior.expand(shape).to_event(len(shape)) if shape else prior
    expected = tuple(prior.batch_shape) + tuple(prior.event_shape)
    if expected != tuple(shape):
        raise ValueError(f"prior of shape {expected} does not match the parameter shape {shape}")
    return prior.to_event(len(prior.batch_shape)) if prior.batch_shape else prior


def _resolve(prior, path, haiku_path, shape):
    """The prior for one parameter: a Distribution, or a value sampled by a callable prior."""
    if isinstance(prior, dict):
        for key in (path, haiku_path):
            if key in prior:
                return _resolve(prior[key], path, haiku_path, shape)
        raise KeyError(
            f"No prior for parameter '{path}' (Haiku path '{haiku_path}'); the dict prior "
            "must have an entry for every parameter, keyed by either name."
        )
    if isinstance(prior, dist.Distribution):
        return _as_distribution(prior, shape)
    if callable(prior):
        out = prior(path, shape)
        return _as_distribution(out, shape) if isinstance(out, dist.Distribution) else out
    raise TypeError(
        "`prior` must be a numpyro Distribution, a dict by parameter path, or a callable "
        f"(path, shape) -> Distribution or value; got {type(prior).__name__}."
    )


def conv_patches(module, x):
    """The patches of an ``hk.ConvND`` call on ``x``: rows (batch × output positions) × the
    kernel's fan-in, in the order of ``w.reshape(-1, c_out)`` (spatial offsets, then input
    channels), so that the convolution is ``patches @ w.reshape(-1, c_out)`` (+ bias)."""
    if x.ndim == module.num_spatial_dims + 1:
        x = x[None]
    patches = jax.lax.conv_general_dilated_patches(
        x,
        filter_shape=module.kernel_shape,
        window_strides=module.stride,
        padding=module.padding,
        lhs_dilation=module.lhs_dilation,
        rhs_dilation=module.kernel_dilation,
        dimension_numbers=module.dimension_numbers,
    )  # features ordered (c_in, *kernel)
    rows = math.prod(patches.shape[:-1])
    patches = jnp.reshape(patches, (rows, x.shape[-1], *module.kernel_shape))
    return jnp.reshape(jnp.moveaxis(patches, 1, -1), (rows, -1))


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
        for module, xs in inputs.items():
            path = "/".join([name, module.replace("~/", "")])
            auxiliary(layer_inputs_name(path), jnp.concatenate(xs, axis=0))
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
        :mod:`numpyro_sgrld.priors`; callables may sample auxiliary sites such as horseshoe
        scales). A value returned by a callable is recorded as a deterministic site.
    :return: ``apply(x, *args, **kwargs)``. For ``transform_with_state`` networks the state is a
        ``numpyro.mutable`` site ``"{name}$state"`` (not sampled), updated on every call.
        Every call records the inputs of each ``hk.Linear`` as the auxiliary value
        ``"layer_inputs:{name}/{module}"`` (:func:`numpyro_sgrld.auxiliary`), which the BNP
        metric reads (:func:`numpyro_sgrld.metrics.bnp`).

    The same samplers run Flax, NNX and Equinox networks through
    ``numpyro.contrib.module.random_flax_module`` / ``random_nnx_module`` /
    ``random_eqx_module``: those register parameters as sample sites the same way.
    """
    with_state = isinstance(transformed, hk.TransformedWithState)
    # hk.without_apply_rng(...) drops the rng argument of apply
    takes_rng = "rng" in inspect.signature(transformed.apply).parameters
    dummy = jnp.zeros(input_shape)
    shapes = jax.eval_shape(transformed.init, random.PRNGKey(0), dummy)
    param_shapes = shapes[0] if with_state else shapes
    params = {}
    for module, entries in param_shapes.items():
        params[module] = {}
        for param, spec in entries.items():
            path = site_name(name, module, param)
            haiku_path = f"{module}/{param}"
            shape = tuple(spec.shape)
            resolved = _resolve(prior, path, haiku_path, shape)
            if isinstance(resolved, dist.Distribution):
                value = numpyro.sample(path, resolved)
            else:
                value = numpyro.deterministic(path, jnp.reshape(resolved, shape))
            params[module][param] = value
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
