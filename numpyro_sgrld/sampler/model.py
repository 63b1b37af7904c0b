"""Setting a NumPyro model up for a stochastic-gradient kernel: its trace with placeholder
minibatches (the subsample plates and :math:`N`), the checks of the data and of the initial
values, and the initial positions (NumPyro's search for valid ones). :func:`set_up` returns
the model's :class:`ModelSetup`, a value the kernel holds; the other functions take it and the
kernel's :class:`Once` (programs compiled once). The checks themselves are in
:mod:`numpyro_sgrld.sampler.setup`."""

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer.hmc_gibbs import GIBBS_SITES_KWARG
from numpyro.infer.util import ParamInfo
from numpyro.util import is_prng_key, not_jax_tracer

from numpyro_sgrld.data.checks import (
    indices_in_bounds_fn,
    observed_ok_fn,
    raise_if_bad_data,
    raise_if_out_of_bounds,
)
from numpyro_sgrld.data.host_data import host_leaves
from numpyro_sgrld.data.sharded_data import sharded_leaves
from numpyro_sgrld.data.subsample import (
    as_jax_array,
    compiled_subsampling,
    placeholder_plates,
    trace_model,
)
from numpyro_sgrld.sampler.loop import under_transform
from numpyro_sgrld.sampler.setup import (
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
    infer_num_data,
    network_sites,
    note_full_data,
    same_objects,
)
from numpyro_sgrld.verdict.evaluation import loglik_fn

__all__ = ["ModelSetup", "Once", "batched_init_params", "check_data", "check_observed",
           "initial_positions", "jit_once", "set_up", "start_model"]


class ModelSetup(NamedTuple):
    """What a kernel knows of its model once it has traced it (:func:`set_up`), as NumPyro's
    ``initialize_model`` returns it for ``HMC``: a value, held by the kernel as its ``setup``.

    - **plates** – the subsample plates (:class:`~numpyro_sgrld.data.subsample.SubsamplePlate`).
    - **num_data** – :math:`N` inferred from the plates (``None``: none found).
    - **trace** – the model's trace with placeholder minibatches.
    - **prepared** – the model with its ``param`` and ``mutable`` sites fixed at their traced
      values (what every potential of the kernel evaluates).
    - **inv_transforms** – per latent site, the transform from unconstrained values.
    - **replay** – whether constraining must replay the model (a site's support depends on
      other sites).
    - **prototype** – one unconstrained position (the traced values).
    - **network_sites** – the latent sites a network bridge sampled (judged in function
      space by the verdict).
    - **evaluation** – a network's function-space reading
      (:func:`numpyro_sgrld.verdict.evaluation.loglik_fn`), ``None`` without a network.
    """

    plates: tuple = ()
    num_data: Any = None
    trace: Any = None
    prepared: Any = None
    inv_transforms: Any = None
    replay: bool = False
    prototype: Any = None
    network_sites: frozenset = frozenset()
    evaluation: Any = None


class Once:
    """A kernel's programs compiled once (``jitted``, by :func:`jit_once`'s name) and the data
    its full-data check passed last (``checked``): what a repeated ``MCMC.run`` with the same
    shapes and the same arrays need not do again."""

    def __init__(self):
        self.jitted = {}
        self.checked = None


def set_up(model, metric, init_strategy, model_args, model_kwargs):
    """The :class:`ModelSetup` of ``model`` for a kernel of ``metric``: its trace with
    placeholder minibatches, the subsample plates and :math:`N`, the constraining transforms
    and a prototype position; refuses what cannot be sampled (see
    :mod:`numpyro_sgrld.sampler.setup`)."""
    with evaluate_now():  # concrete even when MCMC runs init inside pmap
        model_trace, plates, num_data = trace(model, metric, model_args, model_kwargs)
    fixed = {
        name: site["value"]
        for name, site in model_trace.items()
        if site["type"] in ("param", "mutable")
    }
    prepared = handlers.substitute(model, data=fixed) if fixed else model
    inv_transforms, replay = constraining_transforms(model_trace)
    networks = network_sites(model_trace)
    with evaluate_now():
        prototype = {
            name: transform.inv(model_trace[name]["value"])
            for name, transform in inv_transforms.items()
        }
    check_init_values(init_strategy, model_trace)
    return ModelSetup(plates, num_data, model_trace, prepared, inv_transforms, replay,
                      prototype, networks,
                      loglik_fn(prepared, plates) if networks else None)


@compiled_subsampling
def start_model(model, metric, init_strategy, once, rng_key, init_params, model_args,
                model_kwargs):
    """``(setup, init_params)`` of a kernel on ``model``: its :func:`set_up`, its data checked
    (:func:`check_data`), the chains' initial positions (:func:`initial_positions`, one per
    key of ``rng_key``) and the first chain's observed sites checked there
    (:func:`check_observed`)."""
    setup = set_up(model, metric, init_strategy, model_args, model_kwargs)
    check_data(setup, once, model_args, model_kwargs)
    init_params = initial_positions(setup, model, init_strategy, once, rng_key, init_params,
                                    model_args, model_kwargs)
    first = init_params if is_prng_key(rng_key) else jax.tree.map(lambda x: x[0], init_params)
    check_observed(setup, once, first, model_args, model_kwargs)
    return setup, init_params


def initial_positions(setup, model, init_strategy, once, rng_key, init_params, model_args,
                      model_kwargs):
    """The chains' initial unconstrained positions: ``init_params`` checked against the
    model's sites, or NumPyro's search for valid initial values, one per key."""
    if init_params is not None:
        init_params = init_params.z if isinstance(init_params, ParamInfo) else init_params
        num_chains = None if is_prng_key(rng_key) else rng_key.shape[0]
        check_init_params(init_params, setup.prototype, num_chains)
        return init_params
    spread = bool(sharded_leaves((model_args, model_kwargs)))
    find = partial(batched_init_params, model, init_strategy, once, spread=spread)
    if is_prng_key(rng_key):
        z = find(rng_key[None], setup.prototype, model_args, model_kwargs)
        return jax.tree.map(lambda x: x[0], z)
    return find(rng_key, setup.prototype, model_args, model_kwargs)


def trace(model, metric, model_args, model_kwargs):
    """``(trace, plates, N)``: the model traced once with placeholder minibatches, its
    subsample plates and :math:`N`; refuses what cannot be sampled (see
    :mod:`numpyro_sgrld.sampler.setup`). The placeholder minibatch is ``0..n-1``; with rows
    sharded across devices (:class:`~numpyro_sgrld.data.sharding.ShardedRows`) it is ``n`` rows
    evenly spread over the plate (:func:`~numpyro_sgrld.data.subsample.spread_indices`),
    whose ``k``-th block of ``n/K`` lies in the ``k``-th share: every device reads its own
    rows, and a model that validates its distributions' arguments sees data, not the NaN an
    index outside its share reads as."""
    spread = bool(sharded_leaves((model_args, model_kwargs)))
    try:
        model_trace, plates, declared = trace_model(model, model_args, model_kwargs, spread)
    except ModelSetupError:
        raise
    except Exception as e:
        indices = ("n indices evenly spread over each plate, floor(i*N/n), n/K in each share "
                   "of the ShardedRows" if spread else "minibatch indices 0..n-1")
        e.add_note(
            "numpyro_sgrld: raised by the model when the kernel ran it once to find its "
            f"sites ({indices} for every subsample plate), with arguments "
            f"{describe_args(model_args, model_kwargs)}."
        )
        raise
    check_latent_sites(model_trace, plates)
    check_aux(model_trace, metric)
    check_observed_shapes(model_trace)
    note_full_data(model_trace, plates, declared,
                   conditioned=set((model_kwargs or {}).get(GIBBS_SITES_KWARG) or ()))
    return model_trace, plates, infer_num_data(model_trace, declared)


def check_data(setup, once, model_args, model_kwargs):
    """Refuse plates larger than the data they index (JAX would clamp the indices); rows
    sharded across devices are matched to their plate by
    :func:`~numpyro_sgrld.data.sharded_data.plan` instead."""
    if not setup.plates or sharded_leaves((model_args, model_kwargs)) or host_leaves(
            (model_args, model_kwargs)):
        return
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    if not concrete((args, kwargs)):
        return
    with evaluate_now():  # MCMC calls init inside pmap for parallel chains
        fn = indices_in_bounds_fn(setup.prepared, setup.plates)
        fn = jit_once(once, ("bounds", setup.plates), fn, args, kwargs, ONCE)
        error = fn(args, kwargs)
    raise_if_out_of_bounds(error, setup.plates)


def check_observed(setup, once, z, model_args, model_kwargs):
    """Refuse data points whose log-density is not finite at the initial position ``z``
    (one chain's; the model's prototype position when ``z`` is traced, as under
    ``pmap``), checked on the full data."""
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    if not concrete((args, kwargs)) or host_leaves((args, kwargs)):  # every row: not on disk
        return
    # a repeated run on the same (immutable) JAX arrays was checked already: skip the
    # full-data pass (NumPy data is converted anew on every run, so it is checked again)
    seen = (setup.prepared, setup.plates, jax.tree.leaves((args, kwargs)))
    if once.checked is not None and same_objects(seen, once.checked):
        return
    z = z if concrete(z) else setup.prototype
    key = ("observed", setup.plates, id(setup.prepared))
    fn = jit_once(once, key, observed_ok_fn(setup.prepared), args, kwargs, ONCE)
    with evaluate_now():  # the check's reductions too: under pmap they would be traced
        raise_if_bad_data(fn(z, args, kwargs), setup.trace)
    once.checked = seen


#: XLA options for the programs that run once per run and return draws and flags (the search
#: for valid initial values, which draws them and checks that the potential and its gradient
#: are finite, and the data checks): compiled without the backend's optimisation passes,
#: which take about half their compile time and pay only in a program that runs many times
#: (every preset's draws on German credit are bit-identical either way: docs/benchmarks.md,
#: "The first run's compilations"). The kernel's initial state is compiled as the loop is:
#: the step-size adaptation starts from it, and a rounding there changes the chain.
ONCE = {"xla_backend_optimization_level": 0}


def jit_once(once, name, fn, model_args, model_kwargs, compiler_options=None):
    """``fn`` jitted once per kernel, in its :class:`Once` (so a repeated ``MCMC.run`` with the
    same shapes does not trace or compile it again), when the model arguments are arrays;
    else ``fn``. With
    XLA's ``compiler_options`` where it is compiled on its own, not inside a transformation
    (``MCMC``'s parallel chains call ``init`` inside ``pmap``; JAX takes options only for a
    top-level ``jit``)."""
    leaves = jax.tree.leaves((model_args, model_kwargs))
    if not all(isinstance(x, (jax.Array, np.ndarray)) for x in leaves):
        return fn
    if compiler_options and under_transform((model_args, model_kwargs)):
        compiler_options = None
    key = (name, compiler_options is not None)
    if key not in once.jitted:
        once.jitted[key] = jax.jit(fn, compiler_options=compiler_options)
    return once.jitted[key]


def batched_init_params(model, init_strategy, once, keys, prototype, model_args, model_kwargs,
                        spread=False):
    """Initial positions, one per key: NumPyro's search for valid initial values
    (``find_valid_initial_params``, the one ``NUTS`` uses) on the model with placeholder
    minibatch indices, compiled once per kernel. (Called eagerly, it costs a few tenths of
    a second on every ``MCMC.run``; with a batch of keys NumPyro compiles it every time.)"""
    find = partial(find_valid_batched, placeholder_plates(model, spread), init_strategy)
    find = jit_once(once, "find_valid", find, model_args, model_kwargs, ONCE)
    z, valid = find(keys, prototype, model_args, model_kwargs)
    if not_jax_tracer(valid) and not bool(jnp.all(valid)):
        raise RuntimeError(
            "Cannot find valid initial parameters for every chain (the potential or its "
            "gradient is not finite at the values drawn by `init_strategy`). Check the "
            "model, or pass another `init_strategy` or `init_params`."
        )
    return z


def jax_arguments(model_args, model_kwargs):
    """The model's arguments with NumPy data as JAX arrays (``model_kwargs`` ``None``: none),
    converted once, concretely, even when ``MCMC`` calls ``init`` inside ``pmap``: a model
    indexes them with traced indices."""
    with evaluate_now():
        return jax.tree.map(as_jax_array, (model_args, model_kwargs or {}))
