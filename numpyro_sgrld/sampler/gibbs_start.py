"""The chains' starting values within Gibbs (:class:`~numpyro_sgrld.SGGibbs`): every latent
site's first value, one chain's or each of vectorised chains', and the Gibbs sites' Gaussian
children the SG kernel moves partially non-centred."""

import warnings

import jax
import jax.numpy as jnp
from numpyro import handlers
from numpyro.distributions import biject_to
from numpyro.infer.hmc_gibbs import conditioned, with_conditioning
from numpyro.infer.util import constrain_fn

from numpyro_sgrld.data.subsample import as_jax_array, full_batch, structural
from numpyro_sgrld.sampler import decentring
from numpyro_sgrld.sampler.setup import NETWORK, concrete, same_leaves

__all__ = ["check_not_traced", "constrainer", "decentred_sites", "latent_values", "mode_start",
           "other_data", "outside_blankets", "relabelled_sites", "repeated", "sg_transforms"]


def repeated(tree, num_chains):
    """``tree`` with a leading chain axis of ``num_chains`` copies (``None``: as is)."""
    if num_chains is None:
        return tree
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_chains, *jnp.shape(x))), tree)


def check_not_traced(rng_key):
    """Refuse an ``init`` inside a JAX transformation (``MCMC(chain_method="parallel")`` calls
    it inside ``pmap``): ``SGGibbs``'s set-up traces the model with the values it computes
    (the Gibbs sites', the control variates' centres), which are then tracers of that
    transformation."""
    if not concrete(rng_key):
        raise ValueError(
            "SGGibbs cannot set up inside a JAX transformation, as MCMC(chain_method="
            "'parallel') calls init inside pmap: use chain_method='vectorized' (every chain "
            "in one compiled loop on one device) or 'sequential'.")


def other_data(seen, model_args, model_kwargs):
    """Whether ``model_args`` and ``model_kwargs`` hold other arrays than ``seen`` (an earlier
    init's leaves; ``None``: none yet), so that what ``SGGibbs`` set up from the data (the
    automatic conditionals, the decentred sites and control variates' model, the non-centred
    draws, the centres' search) is set up again: a centre's full-data gradient from other
    data biases every gradient, and other shapes (a number of groups) other conditionals."""
    return seen is not None and not same_leaves(seen, jax.tree.leaves((model_args, model_kwargs)))


def mode_start(centre, gibbs_sites, transforms):
    """The control variates' centre's mode as ``init_params`` (the Gibbs sites constrained,
    the SG sites unconstrained by ``transforms``, as ``SGGibbs.init`` reads them); each
    chain's, where the centre holds one per chain."""
    return {k: v if k in gibbs_sites else transforms[k].inv(v) for k, v in centre.mode.items()}


def latent_values(model, gibbs_sites, init_params, key, model_args, model_kwargs,
                  num_chains=None, shapes_only=False):
    """Every latent site's first value (``init_params``'s where given for a Gibbs site, else a
    draw from the model's prior: one trace of the model), each Gibbs site checked to be a
    latent site, and their constraining transforms; for ``num_chains`` vectorised chains
    (``key`` and ``init_params`` with a chain axis), each chain's values. ``shapes_only``:
    values for the sites' shapes, not a start (a structural trace's,
    :func:`~numpyro_sgrld.data.subsample.structural`)."""
    given = {} if init_params is None else {k: init_params[k] for k in gibbs_sites
                                            if k in init_params}
    if num_chains is not None:
        first = jax.tree.map(lambda x: x[0], given)
        _, transforms = latent_values(model, gibbs_sites, first, key[0], model_args,
                                      model_kwargs, shapes_only=True)
        args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        latent = jax.jit(jax.vmap(lambda k, g: latent_values(model, gibbs_sites, g, k, args,
                                                             kwargs)[0]))(key, given)
        return latent, transforms
    substituted = handlers.substitute(model, data=given)
    seeded_model = (structural(substituted, key) if shapes_only
                    else handlers.seed(substituted, key))
    trace = handlers.trace(seeded_model).get_trace(*model_args, **model_kwargs)
    latent = {name for name, site in trace.items()
              if site["type"] == "sample" and not site["is_observed"]}
    missing = [s for s in gibbs_sites if s not in latent]
    if missing:
        raise ValueError(
            f"The Gibbs site {missing[0]!r} is not a latent sample site of the model (its "
            f"latent sites: {sorted(latent)}).")
    return ({s: trace[s]["value"] for s in latent},
            {s: biject_to(trace[s]["fn"].support) for s in latent})


def decentred_sites(model, gibbs_sites, model_args, model_kwargs):
    """:func:`~numpyro_sgrld.sampler.decentring.gaussian_children`, or none (with a warning)
    where NumPyro cannot trace the model's dependencies."""
    try:
        return decentring.gaussian_children(model, gibbs_sites, model_args, model_kwargs)
    except Exception as e:  # noqa: BLE001  (NumPyro's dependency tracing of this model)
        warnings.warn(
            f"SGGibbs could not trace which sites depend on the Gibbs sites ({type(e).__name__}:"
            f" {e}), so the SG kernel moves every site as the model writes it.", UserWarning,
            stacklevel=3)
        return ()


def outside_blankets(model, gibbs_sites, model_args, model_kwargs):
    """The latent sites outside ``gibbs_sites`` and outside every Gibbs site's Markov blanket
    (its parents, its children and their other parents: NumPyro's
    :func:`~numpyro.infer.inspect.get_dependencies`), in the model's order: the sites no
    data-free draw of a Gibbs site reads. None where NumPyro cannot trace the dependencies."""
    from numpyro.infer.inspect import get_dependencies

    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    try:
        parents = get_dependencies(model, model_args, model_kwargs)["prior_dependencies"]
    except Exception:  # noqa: BLE001  (decentred_sites warns of the same failure)
        return ()
    blanket = set(gibbs_sites)
    for child, up in parents.items():
        for g in gibbs_sites:
            if g in up or child == g:
                blanket |= set(up) | {child}
    trace = handlers.trace(structural(model)).get_trace(*model_args, **model_kwargs)
    return tuple(name for name in parents if name not in blanket and name in trace
                 and trace[name]["type"] == "sample" and not trace[name]["is_observed"])


def relabelled_sites(trace, gibbs_sites):
    """The Gibbs sites that a network bridge marked (:data:`~numpyro_sgrld.sampler.setup.NETWORK`)
    as relabelled by permuting the units (a unit-wise horseshoe's per-unit scales), in a
    ``trace`` of the model (the SG kernel's, where they are conditioned on), which the verdict
    judges up to relabelling (:func:`~numpyro_sgrld.sampler.run_verdict.up_to_relabelling`)."""
    return tuple(sorted(name for name in gibbs_sites if name in trace
                        and (trace[name].get("infer") or {}).get(NETWORK)))


def sg_transforms(model, gibbs_sites, key, model_args, model_kwargs):
    """``{site: transform}``: the constraining transform of each latent site not among the
    ``gibbs_sites`` (the SG kernel's), from a structural trace of ``model``."""
    trace = handlers.trace(structural(model, key)).get_trace(*model_args, **model_kwargs)
    return {n: biject_to(s["fn"].support) for n, s in trace.items()
            if s["type"] == "sample" and not s["is_observed"] and n not in gibbs_sites}


def constrainer(model, gibbs_sites, model_args, model_kwargs):
    """``z -> values``: a recorded draw of :class:`~numpyro_sgrld.SGGibbs` (the Gibbs sites
    constrained, the others unconstrained) constrained under the model's own names, with its
    deterministic sites computed on the full data, as ``NUTS`` on ``full_batch(model)``
    returns them."""
    model = full_batch(conditioned(model))
    args, kwargs = jax.tree.map(as_jax_array, (model_args, {} if model_kwargs is None
                                                            else model_kwargs))

    def constrain(z):
        gibbs = {k: z[k] for k in gibbs_sites}
        rest = {k: v for k, v in z.items() if k not in gibbs_sites}
        values = constrain_fn(model, args, with_conditioning(kwargs, gibbs), rest,
                              return_deterministic=True)
        return {**gibbs, **values}

    return constrain
