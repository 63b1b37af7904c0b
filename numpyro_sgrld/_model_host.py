"""Setting a NumPyro model up for a stochastic-gradient kernel: its trace with placeholder
minibatches (the subsample plates and :math:`N`), the checks of the data and of the initial
values, and the initial positions (NumPyro's search for valid ones). Each function takes the
kernel and sets or reads its model attributes (``_plates``, ``_prepared_model``,
``_inv_transforms``, ``_replay``, ``_prototype``, ``_model_trace``); the checks themselves are
in :mod:`numpyro_sgrld._setup`."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer.util import ParamInfo
from numpyro.util import is_prng_key, not_jax_tracer

from numpyro_sgrld._evaluation import loglik_fn
from numpyro_sgrld._loop import _under_transform
from numpyro_sgrld._setup import (
    ModelSetupError,
    check_aux,
    check_init_params,
    check_init_values,
    check_latent_sites,
    check_observed_shapes,
    concrete,
    constraining_transforms,
    describe_args,
    evaluate_now,
    find_valid_batched,
    indices_in_bounds_fn,
    infer_num_data,
    network_sites,
    note_full_data,
    observed_ok_fn,
    raise_if_bad_data,
    raise_if_out_of_bounds,
    same_objects,
)
from numpyro_sgrld.subsample import as_jax_array, placeholder_plates, trace_model

__all__ = ["batched_init_params", "check_data", "check_observed", "jit_once", "setup_model",
           "trace"]


def setup_model(kernel, rng_key, init_params, model_args, model_kwargs):
    with evaluate_now():  # concrete even when MCMC runs init inside pmap
        model_trace = trace(kernel, model_args, model_kwargs)
    fixed = {
        name: site["value"]
        for name, site in model_trace.items()
        if site["type"] in ("param", "mutable")
    }
    kernel._prepared_model = (
        handlers.substitute(kernel._model, data=fixed) if fixed else kernel._model
    )
    kernel._inv_transforms, kernel._replay = constraining_transforms(model_trace)
    kernel._evaluation = (loglik_fn(kernel._prepared_model, kernel._plates)
                          if kernel.network_sites else None)
    with evaluate_now():
        prototype = {
            name: transform.inv(model_trace[name]["value"])
            for name, transform in kernel._inv_transforms.items()
        }
    kernel._prototype = prototype
    check_data(kernel, model_args, model_kwargs)
    check_init_values(kernel._init_strategy, model_trace)
    if init_params is not None:
        init_params = init_params.z if isinstance(init_params, ParamInfo) else init_params
        num_chains = None if is_prng_key(rng_key) else rng_key.shape[0]
        check_init_params(init_params, prototype, num_chains)
        return init_params
    if is_prng_key(rng_key):
        z = batched_init_params(kernel, rng_key[None], prototype, model_args, model_kwargs)
        return jax.tree.map(lambda x: x[0], z)
    return batched_init_params(kernel, rng_key, prototype, model_args, model_kwargs)


def trace(kernel, model_args, model_kwargs):
    """Trace the model once with placeholder minibatches; find its subsample plates and
    :math:`N`; refuse what cannot be sampled (see :mod:`numpyro_sgrld._setup`)."""
    try:
        model_trace, kernel._plates, declared = trace_model(
            kernel._model, model_args, model_kwargs
        )
    except ModelSetupError:
        raise
    except Exception as e:
        e.add_note(
            "numpyro_sgrld: raised by the model when the kernel ran it once to find its "
            "sites (minibatch indices 0..n-1 for every subsample plate), with arguments "
            f"{describe_args(model_args, model_kwargs)}."
        )
        raise
    check_latent_sites(model_trace, kernel._plates)
    check_aux(model_trace, kernel.metric)
    check_observed_shapes(model_trace)
    note_full_data(model_trace, kernel._plates, declared)
    kernel._inferred_num_data = infer_num_data(model_trace, declared)
    kernel._model_trace = model_trace
    kernel.network_sites = network_sites(model_trace)
    return model_trace


def check_data(kernel, model_args, model_kwargs):
    """Refuse plates larger than the data they index (JAX would clamp the indices)."""
    if not kernel._plates:
        return
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    if not concrete((args, kwargs)):
        return
    with evaluate_now():  # MCMC calls init inside pmap for parallel chains
        fn = indices_in_bounds_fn(kernel._prepared_model, kernel._plates)
        fn = jit_once(kernel, ("bounds", kernel._plates), fn, args, kwargs, ONCE)
        error = fn(args, kwargs)
    raise_if_out_of_bounds(error, kernel._plates)


def check_observed(kernel, z, model_args, model_kwargs):
    """Refuse data points whose log-density is not finite at the initial position ``z``
    (one chain's; the model's prototype position when ``z`` is traced, as under
    ``pmap``), checked on the full data."""
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    if not concrete((args, kwargs)):
        return
    # a repeated run on the same (immutable) JAX arrays was checked already: skip the
    # full-data pass (NumPy data is converted anew on every run, so it is checked again)
    seen = (kernel._prepared_model, kernel._plates, jax.tree.leaves((args, kwargs)))
    if kernel._checked_data is not None and same_objects(seen, kernel._checked_data):
        return
    z = z if concrete(z) else kernel._prototype
    key = ("observed", kernel._plates, id(kernel._prepared_model))
    fn = jit_once(kernel, key, observed_ok_fn(kernel._prepared_model), args, kwargs, ONCE)
    with evaluate_now():
        checked = fn(z, args, kwargs)
    raise_if_bad_data(checked, kernel._model_trace)
    kernel._checked_data = seen


#: XLA options for the programs that run once per run and return draws and flags (the search
#: for valid initial values, which draws them and checks that the potential and its gradient
#: are finite, and the data checks): compiled without the backend's optimisation passes,
#: which take about half their compile time and pay only in a program that runs many times
#: (every preset's draws on German credit are bit-identical either way: docs/benchmarks.md,
#: "The first run's compilations"). The kernel's initial state is compiled as the loop is:
#: the step-size adaptation starts from it, and a rounding there changes the chain.
ONCE = {"xla_backend_optimization_level": 0}


def jit_once(kernel, name, fn, model_args, model_kwargs, compiler_options=None):
    """``fn`` jitted once per kernel (so a repeated ``MCMC.run`` with the same shapes does
    not trace or compile it again), when the model arguments are arrays; else ``fn``. With
    XLA's ``compiler_options`` where it is compiled on its own, not inside a transformation
    (``MCMC``'s parallel chains call ``init`` inside ``pmap``; JAX takes options only for a
    top-level ``jit``)."""
    leaves = jax.tree.leaves((model_args, model_kwargs))
    if not all(isinstance(x, (jax.Array, np.ndarray)) for x in leaves):
        return fn
    if compiler_options and _under_transform((model_args, model_kwargs)):
        compiler_options = None
    key = (name, compiler_options is not None)
    if key not in kernel._jitted:
        kernel._jitted[key] = jax.jit(fn, compiler_options=compiler_options)
    return kernel._jitted[key]


def batched_init_params(kernel, keys, prototype, model_args, model_kwargs):
    """Initial positions, one per key: NumPyro's search for valid initial values
    (``find_valid_initial_params``, the one ``NUTS`` uses) on the model with placeholder
    minibatch indices, compiled once per kernel. (Called eagerly, it costs a few tenths of
    a second on every ``MCMC.run``; with a batch of keys NumPyro compiles it every time.)"""
    find = partial(
        find_valid_batched, placeholder_plates(kernel._model), kernel._init_strategy
    )
    find = jit_once(kernel, "find_valid", find, model_args, model_kwargs, ONCE)
    z, valid = find(keys, prototype, model_args, model_kwargs)
    if not_jax_tracer(valid) and not bool(jnp.all(valid)):
        raise RuntimeError(
            "Cannot find valid initial parameters for every chain (the potential or its "
            "gradient is not finite at the values drawn by `init_strategy`). Check the "
            "model, or pass another `init_strategy` or `init_params`."
        )
    return z
