r"""Within Gibbs, the stochastic-gradient kernel moves the Gibbs sites' Gaussian children in
partially non-centred coordinates, and the Gibbs sweep draws the sites given the children
themselves.

A latent site :math:`w \sim \mathcal N(\mu(g), \sigma(g)^2)` whose location or scale depends on
Gibbs sites :math:`g` (a centred hierarchy's weights under their scales) has, given :math:`g`,
the curvature :math:`\sigma^{-2} + F` per element, :math:`F` the data's (the likelihood's
Hessian diagonal). It varies with :math:`g` by orders of magnitude as a shrinkage prior's
scale collapses or grows, so no one step size suits the centred coordinate :math:`w`, nor the
non-centred :math:`(w - \mu)/\sigma` (where it is :math:`1 + \sigma^2 F`). The kernel moves

.. math::
    u = \frac{w - \mu}{c}, \qquad c = \big(\sigma^{-2} + F\big)^{-1/2},

whose prior is :math:`\mathcal N(0, \sigma^2/c^2)` and whose curvature given :math:`g` is
:math:`c^2(\sigma^{-2} + F) = 1` whatever :math:`g` (Papaspiliopoulos, Roberts & Sköld's
partial non-centring, 2007); with :math:`F = 0` it is the fully non-centred coordinate of
NumPyro's ``LocScaleReparam(0)``. Given :math:`g` this is the same conditional law of
:math:`w`, in coordinates where one step size suits every value of :math:`g` (SGLD in
:math:`u` is SGLD in :math:`w` with the preconditioner :math:`c^2`, which does not depend on
:math:`w`: no correction term). :math:`F` is learnt in warm-up (Hutchinson's estimate of the
minibatch potential's Hessian diagonal without the children's own Gaussian factors,
averaged) and frozen after it.

The Gibbs sweep draws :math:`g` from :math:`p(g \mid w, \ldots)`, the conditional given the
*centred* value, which involves no data in a centred hierarchy; it holds :math:`w` fixed and
sets :math:`u' = (w - \mu(g'))/c(g')`. That is a Gibbs update of :math:`g` in the
:math:`(w, g)` parametrisation, mapped to :math:`(u, g)` by a bijection, so it leaves the joint
law invariant: each part of the composition does.
"""

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro import handlers
from numpyro.infer.reparam import LocScaleReparam, Reparam

from numpyro_sgrld.data.subsample import as_jax_array, placeholder_plates, structural

__all__ = ["CURVATURE_KWARG", "CURVATURE_RATE", "SUFFIX", "PartialDecentring", "centred",
           "curvature_estimate", "decentred", "fully_non_centred", "gaussian_children",
           "judged_name", "loc_scale", "reparametrised", "spread"]

#: The suffix of a decentred site's name (NumPyro's ``LocScaleReparam``'s).
SUFFIX = "_decentered"
#: The keyword argument that carries :math:`F` (``{site: array}``) to the SG kernel's model.
CURVATURE_KWARG = "_sgrld_curvature"


def _base(fn):
    """The distribution under ``Independent`` and ``ExpandedDistribution`` wrappers."""
    while isinstance(fn, (dist.Independent, dist.ExpandedDistribution)):
        fn = fn.base_dist
    return fn


def spread(scale, curvature):
    r""":math:`c = (\sigma^{-2} + F)^{-1/2}`."""
    return jax.lax.rsqrt(scale**-2.0 + curvature)


def gaussian_children(model, gibbs_sites, model_args, model_kwargs):
    """The latent sites outside ``gibbs_sites`` with a Gaussian prior (``dist.Normal``, under
    any ``expand`` / ``to_event``) whose parameters depend on a Gibbs site, in the model's
    order (NumPyro's :func:`~numpyro.infer.inspect.get_dependencies`)."""
    from numpyro.infer.inspect import get_dependencies

    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    trace = handlers.trace(structural(model)).get_trace(*model_args, **model_kwargs)
    parents = get_dependencies(model, model_args, model_kwargs)["prior_dependencies"]
    return tuple(
        name for name, site in trace.items()
        if site["type"] == "sample" and not site["is_observed"] and name not in gibbs_sites
        and type(_base(site["fn"])) is dist.Normal
        and any(g in parents.get(name, {}) for g in gibbs_sites))


class PartialDecentring(Reparam):
    """The site ``w ~ N(mu, sigma^2)`` as ``w = mu + c u`` with ``u ~ N(0, sigma^2 / c^2)``
    at site ``"{w}_decentered"`` (module docstring); ``curvature`` is :math:`F`."""

    def __init__(self, curvature):
        self.curvature = curvature

    def __call__(self, name, fn, obs):
        if obs is not None:
            raise ValueError(f"The decentred site {name!r} is observed.")
        shape, event_dim = fn.shape(), fn.event_dim
        base = _base(fn)
        loc, scale = jnp.broadcast_to(base.loc, shape), jnp.broadcast_to(base.scale, shape)
        c = spread(scale, self.curvature)
        u = numpyro.sample(f"{name}{SUFFIX}", dist.Normal(0.0, scale / c).to_event(event_dim))
        return None, loc + c * u


def reparametrised(model, sites):
    """``model`` taking :data:`CURVATURE_KWARG` (``{site: F}``; absent: 0) with each of
    ``sites`` partially decentred (:class:`PartialDecentring`)."""

    def partially_decentred(*args, **kwargs):
        curvature = kwargs.pop(CURVATURE_KWARG, None) or {}
        config = {s: PartialDecentring(curvature.get(s, 0.0)) for s in sites}
        return handlers.reparam(model, config=config)(*args, **kwargs)

    return partially_decentred


def fully_non_centred(model, sites):
    """``model`` with each of ``sites`` as NumPyro's ``LocScaleReparam(0)`` writes it:
    ``w = loc + scale * w_decentered``, ``w_decentered ~ N(0, 1)`` (:math:`F = 0`'s
    coordinate, whose density has no point where a scale and its children collapse
    together)."""
    return handlers.reparam(model, config={s: LocScaleReparam(centered=0.0) for s in sites})


def loc_scale(model, sites, values, model_args, model_kwargs):
    r"""``{site: (loc, scale)}``: the Gaussian prior's :math:`\mu` and :math:`\sigma` of each of
    ``sites`` (broadcast to the site's shape) with the other sites at ``values`` (constrained;
    a missing one is drawn, which only the sites' own values may be)."""
    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    # placeholder indices: no minibatch is drawn for a trace that reads only priors
    substituted = handlers.seed(handlers.substitute(placeholder_plates(model), data=values), 0)
    trace = handlers.trace(substituted).get_trace(*model_args, **model_kwargs)
    out = {}
    for s in sites:
        shape = jnp.shape(trace[s]["value"])
        base = _base(trace[s]["fn"])
        out[s] = (jnp.broadcast_to(base.loc, shape), jnp.broadcast_to(base.scale, shape))
    return out


def judged_name(decentred, name):
    """The name a site of the decentred model is judged and recorded by: ``w`` for
    ``"{w}_decentered"`` where ``w`` is one of ``decentred`` (:func:`centred`), else
    ``name``."""
    base = name.removesuffix(SUFFIX)
    return base if name != base and base in decentred else name


def centred(values, params, curvature):
    """``values`` with each ``"{w}_decentered"`` replaced by ``w = loc + c u``."""
    out = {k: v for k, v in values.items() if k not in {s + SUFFIX for s in params}}
    for s, (loc, scale) in params.items():
        out[s] = loc + spread(scale, curvature[s]) * values[s + SUFFIX]
    return out


def decentred(values, params, curvature):
    """``{"{w}_decentered": (w - loc) / c}`` for the sites of ``params``."""
    return {s + SUFFIX: (values[s] - loc) / spread(scale, curvature[s])
            for s, (loc, scale) in params.items()}


#: The weight of the latest estimate in :math:`F`'s exponential average over warm-up (an
#: average over about the last 100 steps).
CURVATURE_RATE = 0.01


def curvature_estimate(model, sites, values, key, model_args, model_kwargs):
    r"""Hutchinson's estimate of :math:`F` at ``values`` (constrained, every latent site; the
    Gibbs sites conditioned in ``model_kwargs``): :math:`\zeta\odot(H\zeta)`, :math:`H` the
    Hessian in the ``sites`` of the potential of one minibatch the model's subsample plates
    draw with ``key`` less the ``sites``' own Gaussian factors, :math:`\zeta` Rademacher.
    Those factors are left out of the sum, not subtracted from it: their curvature
    :math:`\sigma^{-2}` reaches :math:`10^{13}` where a shrinkage prior's scale collapses,
    and in single precision a difference of such sums would leave rounding errors of
    :math:`10^{6}` and more in :math:`F`."""
    from numpyro.infer.util import compute_log_probs

    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    key_batch, key_probe = jax.random.split(key)
    seeded = handlers.seed(model, key_batch)

    def potential(ws):
        log_probs = compute_log_probs(seeded, model_args, model_kwargs, {**values, **ws})[0]
        return -sum((v for k, v in log_probs.items() if k not in ws), start=0.0)

    ws = {s: values[s] for s in sites}
    keys = dict(zip(sites, jax.random.split(key_probe, len(sites))))
    probe = {s: jax.random.rademacher(keys[s], jnp.shape(w), jnp.result_type(w))
             for s, w in ws.items()}
    hvp = jax.jvp(jax.grad(potential), (ws,), (probe,))[1]
    return {s: probe[s] * hvp[s] for s in sites}
