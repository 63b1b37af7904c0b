"""What the network bridges (:mod:`~numpyro_sgrld.bridges.haiku`, :mod:`~numpyro_sgrld.bridges.nnx`,
:mod:`~numpyro_sgrld.bridges.equinox`) share: how ``prior=`` becomes one NumPyro site per
parameter, and
how the recorded inputs of the dense layers (and the patches of the convolutions) become the
auxiliary values BNP reads.

``prior=`` is one of

- a NumPyro distribution: a scalar one is expanded to the parameter's shape and made an event
  (``prior.expand(shape).to_event(len(shape))``); any other must have exactly the shape;
- a dict keyed by site name or by the library's own path of the parameter; a value may be any
  of these three forms;
- a callable ``(path, shape) -> Distribution or value``, called with the site name and shape
  (it may sample auxiliary sites itself; a returned value is recorded as a deterministic site).
"""

import math

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist

from numpyro_sgrld.core.metrics.bnp import layer_inputs_name
from numpyro_sgrld.sampler.potentials import auxiliary
from numpyro_sgrld.sampler.setup import NETWORK


def as_distribution(prior, shape):
    """``prior`` as a distribution whose event shape is ``shape`` (a scalar one expanded)."""
    if prior.batch_shape == () and prior.event_shape == ():
        return prior.expand(shape).to_event(len(shape)) if shape else prior
    expected = tuple(prior.batch_shape) + tuple(prior.event_shape)
    if expected != tuple(shape):
        raise ValueError(f"prior of shape {expected} does not match the parameter shape {shape}")
    return prior.to_event(len(prior.batch_shape)) if prior.batch_shape else prior


def _missing(path, alias, alias_label, available):
    listed = ", ".join(f"'{site}' ('{alias}')" for site, alias in available)
    return (
        f"No prior for parameter '{path}' ({alias_label} '{alias}'); the dict prior must have an "
        "entry for every parameter, keyed by either name."
        + (f" The parameters are: {listed}." if listed else "")
    )


def resolve(prior, path, alias, shape, *, alias_label, available=()):
    """The prior for one parameter: a distribution, or a value sampled by a callable prior.

    :param path: the site name (what a callable prior receives).
    :param alias: the library's own path of the parameter, also accepted as a dict key.
    :param alias_label: what ``alias`` is, for messages (``"Haiku path"``).
    :param available: ``(site name, alias)`` of every parameter, listed when a dict misses one.
    """
    if isinstance(prior, dict):
        for key in (path, alias):
            if key in prior:
                return resolve(
                    prior[key], path, alias, shape, alias_label=alias_label, available=available
                )
        raise KeyError(_missing(path, alias, alias_label, available))
    if isinstance(prior, dist.Distribution):
        return as_distribution(prior, shape)
    if callable(prior):
        out = prior(path, shape)
        return as_distribution(out, shape) if isinstance(out, dist.Distribution) else out
    raise TypeError(
        "`prior` must be a numpyro Distribution, a dict by parameter path, or a callable "
        f"(path, shape) -> Distribution or value; got {type(prior).__name__}."
    )


def _marker(path):
    """``config_fn`` giving the ``infer`` entries of a site sampled for parameter ``path``:
    :data:`~numpyro_sgrld.sampler.setup.NETWORK` for the parameter's own site and for its
    prior's sites of more than one value (a unit-wise horseshoe's local scales, its raw
    weights), which permuting the layer's units or flipping their signs relabels; none for a
    prior's single-valued site (a layer-wide horseshoe scale, a global scale), which no such
    symmetry moves: the verdict judges it as any other latent site (split R-hat, bulk ESS,
    equipartition)."""

    def config(site):
        if site["type"] != "sample":
            return {}
        fn = site["fn"]
        size = math.prod(tuple(fn.batch_shape) + tuple(fn.event_shape))
        return {NETWORK: True} if site["name"] == path or size > 1 else {}

    return config


def sample_parameter(prior, path, alias, shape, *, alias_label, available=()):
    """The parameter's value: a sample site ``path`` of its prior, or, for a value returned by a
    callable prior, that value (reshaped to ``shape``) recorded as a deterministic site. The
    parameter's site and its prior's sites that a permutation of units relabels are marked as
    a network's (:data:`~numpyro_sgrld.sampler.setup.NETWORK`, :func:`_marker`)."""
    with numpyro.handlers.infer_config(config_fn=_marker(path)):
        resolved = resolve(prior, path, alias, shape, alias_label=alias_label,
                           available=available)
        if isinstance(resolved, dist.Distribution):
            return numpyro.sample(path, resolved)
    return numpyro.deterministic(path, jnp.reshape(resolved, shape))


def layer_inputs_sink(inputs):
    """``sink(key, x)``, appending ``x`` (a layer's inputs, rows × fan-in) to ``inputs[key]``
    when the layer runs at the JAX trace level the sink was made at (that of the network's
    call); inputs seen inside a transformation of the network's own (``jax.checkpoint``,
    ``jax.vmap``, ``jax.lax.scan``, ``nnx.scan``) are dropped: they are values of that inner
    trace and cannot be read outside it. Such a layer is not recorded, and BNP leaves it
    unpreconditioned."""
    from jax.extend.core import get_opaque_trace_state  # (only the NNX and Equinox bridges)

    level = get_opaque_trace_state()

    def sink(key, x):
        if get_opaque_trace_state() == level:
            inputs.setdefault(key, []).append(x)

    return sink


def patch_rows(x, kernel_shape, feature_axis, **conv):
    """The patches of a convolution of ``x`` (with its batch axis) by a kernel of spatial
    shape ``kernel_shape``: rows (batch × output positions) × the fan-in, in the order of an
    HWIO kernel's ``w.reshape(-1, c_out)`` (spatial offsets, then input channels), so that the
    convolution is ``patches @ w.reshape(-1, c_out)``. ``conv``: ``window_strides``,
    ``padding``, ``lhs_dilation``, ``rhs_dilation``, ``dimension_numbers`` as XLA's
    convolution takes them; ``feature_axis`` is the output's channel axis under those
    dimension numbers (where ``conv_general_dilated_patches`` puts the fan-in, ordered
    (c_in, *kernel)). The patches are extracted at full precision (XLA extracts them with a
    convolution, which accelerators would otherwise run in reduced precision, e.g. TF32)."""
    patches = jax.lax.conv_general_dilated_patches(
        x, filter_shape=tuple(kernel_shape), precision=jax.lax.Precision.HIGHEST, **conv
    )
    patches = jnp.moveaxis(patches, feature_axis, -1)
    rows = math.prod(patches.shape[:-1])
    c_in = patches.shape[-1] // math.prod(kernel_shape)
    patches = jnp.reshape(patches, (rows, c_in, *kernel_shape))
    return jnp.reshape(jnp.moveaxis(patches, 1, -1), (rows, -1))


def record_layer_inputs(inputs):
    """Record ``{layer path: [inputs, ...]}`` (each rows × fan-in) as the auxiliary values
    ``"layer_inputs:{layer path}"`` that BNP reads, a layer's calls stacked along the rows.
    BNP pairs them with the sites ``"{layer path}/w"`` (fan-in × outputs) and
    ``"{layer path}/b"``."""
    for path, xs in inputs.items():
        auxiliary(layer_inputs_name(path), jnp.concatenate(xs, axis=0))


def check_name(name):
    """``name``, the prefix of a network's site names: a non-empty string."""
    if not (isinstance(name, str) and name):
        raise ValueError(
            f"`name` must be a non-empty string, the prefix of the site names (e.g. 'net'); "
            f"got {name!r}."
        )
    return name


def join_path(parts):
    """``("layers", 0, "kernel")`` -> ``"layers/0/kernel"``."""
    return "/".join(str(part) for part in parts)


def rename_dense_leaf(parts, dense_layers, names):
    """The site path of the parameter at ``parts``: the leaf ``parts[-1]`` renamed by ``names``
    (e.g. ``{"kernel": "w", "bias": "b"}``) when ``parts[:-1]`` is a dense or convolution layer
    (in ``dense_layers``), unchanged otherwise."""
    *layer, leaf = parts
    if tuple(layer) in dense_layers and leaf in names:
        leaf = names[leaf]
    return join_path([*layer, leaf])


def check_module(module, base, kind, construct, example, others):
    """``module`` if it is an instance of ``base``; otherwise a ``TypeError`` that names the
    library (``kind``, e.g. ``"nnx.Module"``), how to construct a class that was passed
    instead of an instance (``construct``), an ``example`` and the bridges of the
    ``others``."""
    if isinstance(module, base):
        return module
    if isinstance(module, type):
        raise TypeError(
            f"`module` must be an {kind} instance; got the class {module.__name__}: "
            f"construct it first, e.g. {module.__name__}(..., {construct})."
        )
    raise TypeError(
        f"`module` must be an {kind} instance (e.g. {example}); got {type(module).__name__}. "
        f"{others}"
    )

