"""The data checks made once when a kernel is set up: every minibatch index within its data,
and every observed data point's log-density finite on the full data at the initial position.
Each error names the plate or site and the first bad data point, and what to do."""

from functools import partial

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax.experimental import checkify
from numpyro import handlers
from numpyro.distributions.transforms import biject_to

from numpyro_sgrld.core.checks import ModelSetupError
from numpyro_sgrld.data.subsample import full_batch_opaque, seeded

__all__ = ["indices_in_bounds_fn", "observed_ok_fn", "raise_if_bad_data",
           "raise_if_out_of_bounds"]


def _last_indices(plates):
    return {p.name: jnp.arange(p.size - p.subsample_size, p.size) for p in plates}


def indices_in_bounds_fn(model, plates):
    """A function ``(args, kwargs) -> checkify error`` that runs ``model`` on the *last*
    minibatch indices of every subsample plate (``N - n .. N - 1``) with JAX's index checks
    on: an index past the end of the data it selects from (a plate larger than the data; JAX
    would otherwise clamp it to the last row) is an error."""
    substituted = handlers.substitute(seeded(model), data=_last_indices(plates))

    def run(args, kwargs):
        with handlers.block():
            handlers.trace(substituted).get_trace(*args, **kwargs)

    checked = checkify.checkify(run, errors=checkify.index_checks)

    def fn(args, kwargs):
        return checked(args, kwargs)[0]

    return fn


def raise_if_out_of_bounds(error, plates):
    message = error.get()
    if message is None:
        return
    described = ", ".join(f"'{p.name}' (size {p.size})" for p in plates)
    raise ModelSetupError(
        f"The model indexes past the end of its data with the subsample plate(s) {described}: "
        f"{message.splitlines()[0]} The plate's size must be the number of data points it "
        "selects from (e.g. numpyro.plate('data', X.shape[0], subsample_size=n)); JAX would "
        "clamp such indices to the last data point and count it many times."
    )


def observed_ok_fn(model):
    """A function ``(z, args, kwargs) -> {site: (ok, value_ok)}`` that evaluates every observed
    site on the **full** data at the unconstrained position ``z``: ``ok`` marks the data points
    whose log-density is finite and whose observed value lies in the support (masked-out
    points count as ok), ``value_ok`` those whose observed value itself is finite."""
    whole = full_batch_opaque(model)

    def fn(z, args, kwargs):
        # one pass: each latent site takes its constrained value as the model runs
        constrained = handlers.substitute(whole, substitute_fn=partial(_constrained, z))
        with handlers.block():
            model_trace = handlers.trace(seeded(constrained)).get_trace(*args, **kwargs)
        out = {}
        for name, site in model_trace.items():
            if site["type"] != "sample" or not site["is_observed"]:
                continue
            fn_, value = site["fn"], site["value"]
            if isinstance(fn_, dist.Unit):  # numpyro.factor: a term of the density, not data
                continue
            log_prob = fn_.log_prob(value)
            if _fixed_support(fn_.support):
                ok = jnp.isfinite(log_prob) & jnp.broadcast_to(
                    fn_.support(value), jnp.shape(log_prob)
                )
            else:  # -inf may be the parameters' doing (e.g. Uniform(0, theta)): only NaN
                ok = ~jnp.isnan(log_prob)
            if site.get("mask") is not None:
                ok = ok | ~jnp.broadcast_to(site["mask"], jnp.shape(ok))
            event = len(fn_.event_shape)
            finite = jnp.isfinite(value)
            if event:
                finite = jnp.all(finite, axis=tuple(range(-event, 0)))
            out[name] = (ok, jnp.broadcast_to(finite, jnp.shape(ok)))
        return out

    return fn


def _constrained(z, site):
    if site["type"] == "sample" and not site["is_observed"] and site["name"] in z:
        return biject_to(site["fn"].support)(z[site["name"]])
    return None


def _fixed_support(support):
    """Whether ``support`` does not depend on the parameters (no array-valued bound)."""
    for bound in ("lower_bound", "upper_bound"):
        value = getattr(support, bound, None)
        if value is not None and not isinstance(value, (int, float)):
            return False
    return True


def raise_if_bad_data(checked, model_trace):
    """Raise for the first observed site with a data point whose log-density is not finite
    or whose value lies outside the support (``checked`` from :func:`observed_ok_fn`; the
    plates are named from ``model_trace``, the set-up trace of the model)."""
    for name, (ok, value_ok) in checked.items():
        if bool(jnp.all(ok)):  # on the devices: data sharded across processes stay there
            continue
        ok, value_ok = _gathered(ok), _gathered(value_ok)
        bad = np.argwhere(~ok)
        first = tuple(bad[0].tolist())
        site = model_trace.get(name, {"cond_indep_stack": []})
        names = {f.dim: f.name for f in site["cond_indep_stack"]}
        where = ", ".join(
            f"{i} of plate '{names[d]}'" if d in names else f"index {i} of axis {d}"
            for d, i in zip(range(-len(first), 0), first)
        )
        cause = (
            "its observed value there is not finite (NaN or inf)"
            if not value_ok[first]
            else "a covariate there is not finite, or the observed value lies outside the "
            "distribution's support"
        )
        raise ModelSetupError(
            f"Observed site '{name}' has a non-finite log-density at {bad.shape[0]} data "
            f"point(s), the first at {where or 'its only point'}: {cause}. Remove or impute "
            "those data points, or mask them out (numpyro.handlers.mask, or obs_mask for "
            "missing values). (Checked on the full data at the initial position; a "
            "stochastic-gradient chain would meet them only on the minibatches that hold them, "
            "as rejected steps.)"
        )


def _gathered(x):
    """``x`` as a NumPy array on this process (gathered from every process where ``x`` is
    sharded across them)."""
    if getattr(x, "is_fully_addressable", True):
        return np.asarray(x)
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))
