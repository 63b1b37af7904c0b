r"""Within Gibbs, the stochastic-gradient kernel moves the Gibbs sites' Gaussian children in
non-centred coordinates, and the Gibbs sweep draws the sites given the children themselves.

A latent site :math:`w \sim \mathcal N(\mu(g), \sigma(g)^2)` whose location or scale depends on
Gibbs sites :math:`g` (a centred hierarchy's weights under their scales) is, given :math:`g`,
stiff where :math:`\sigma(g)` is small: the prior's curvature :math:`\sigma^{-2}` grows without
bound as a shrinkage prior's scale collapses, and a step size learnt at one value of the scales
is unstable at another. In the non-centred coordinate :math:`u = (w - \mu)/\sigma` the prior is
:math:`\mathcal N(0, 1)` whatever :math:`g` (NumPyro's ``LocScaleReparam(0)``, site
``"{w}_decentered"``), so the kernel moves :math:`u` given :math:`g`: the same conditional law
of :math:`w`, drawn in better-conditioned coordinates (SGLD in :math:`u` is SGLD in :math:`w`
with the preconditioner :math:`\sigma^2`, which does not depend on :math:`w`: no correction
term).

The Gibbs sweep draws :math:`g` from :math:`p(g \mid w, \ldots)`, the conditional given the
*centred* value, which involves no data in a centred hierarchy; it holds :math:`w` fixed and
sets :math:`u' = (w - \mu(g'))/\sigma(g')`. That is a Gibbs update of :math:`g` in the
:math:`(w, g)` parametrisation, mapped to :math:`(u, g)` by a bijection, so it leaves the joint
law invariant: each part of the composition does.
"""

import jax
import jax.numpy as jnp
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.infer.reparam import LocScaleReparam

from numpyro_sgrld.data.subsample import as_jax_array

__all__ = ["SUFFIX", "centred", "decentred", "gaussian_children", "loc_scale", "reparametrised"]

#: The suffix of a non-centred site's name (NumPyro's ``LocScaleReparam``).
SUFFIX = "_decentered"


def _base(fn):
    """The distribution under ``Independent`` and ``ExpandedDistribution`` wrappers."""
    while isinstance(fn, (dist.Independent, dist.ExpandedDistribution)):
        fn = fn.base_dist
    return fn


def gaussian_children(model, gibbs_sites, model_args, model_kwargs):
    """The latent sites outside ``gibbs_sites`` with a Gaussian prior (``dist.Normal``, under
    any ``expand`` / ``to_event``) whose parameters depend on a Gibbs site, in the model's
    order (NumPyro's :func:`~numpyro.infer.inspect.get_dependencies`)."""
    from numpyro.infer.inspect import get_dependencies

    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    trace = handlers.trace(handlers.seed(model, 0)).get_trace(*model_args, **model_kwargs)
    parents = get_dependencies(model, model_args, model_kwargs)["prior_dependencies"]
    return tuple(
        name for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"] and name not in gibbs_sites
        and type(_base(site["fn"])) is dist.Normal
        and any(g in parents.get(name, {}) for g in gibbs_sites))


def reparametrised(model, sites):
    """``model`` with each of ``sites`` non-centred (``LocScaleReparam(0)``)."""
    return handlers.reparam(model, config={s: LocScaleReparam(0) for s in sites})


def loc_scale(model, sites, values, model_args, model_kwargs):
    r"""``{site: (loc, scale)}``: the Gaussian prior's :math:`\mu` and :math:`\sigma` of each of
    ``sites`` (broadcast to the site's shape) with the other sites at ``values`` (constrained;
    a missing one is drawn, which only the sites' own values may be)."""
    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    substituted = handlers.substitute(handlers.seed(model, 0), data=values)
    trace = handlers.trace(substituted).get_trace(*model_args, **model_kwargs)
    out = {}
    for s in sites:
        shape = jnp.shape(trace[s]["value"])
        base = _base(trace[s]["fn"])
        out[s] = (jnp.broadcast_to(base.loc, shape), jnp.broadcast_to(base.scale, shape))
    return out


def centred(values, params):
    """``values`` with each non-centred ``"{w}_decentered"`` replaced by ``w = loc + scale u``."""
    out = {k: v for k, v in values.items() if k not in {s + SUFFIX for s in params}}
    for s, (loc, scale) in params.items():
        out[s] = loc + scale * values[s + SUFFIX]
    return out


def decentred(values, params):
    """``{"{w}_decentered": (w - loc) / scale}`` for the sites of ``params``."""
    return {s + SUFFIX: (values[s] - loc) / scale for s, (loc, scale) in params.items()}
