r"""Interweaving the centred and non-centred updates of a Gibbs site (Yu & Meng 2011, ASIS).

Within :class:`~numpyro_sgrld.SGGibbs` a Gibbs site :math:`g` (a scale) is drawn from its
conditional given its Gaussian children :math:`w \sim \mathcal N(\mu(g), \sigma(g)^2)`
themselves, :math:`p(g \mid w)`, which involves no data (the *centred*, or sufficient,
update). Where the data say little about a child, :math:`w` and :math:`g` are strongly
dependent a priori (the funnel of a shrinkage prior) and that update barely moves :math:`g`:
with :math:`w` near 0, :math:`g` is drawn small, which holds :math:`w` near 0. The
*non-centred* (ancillary) update draws :math:`g` given :math:`\tilde w = (w - \mu(g))/\sigma(g)`
instead, from

.. math::
    p(g \mid \tilde w, \text{rest}, \text{data}) \propto p(g \mid \text{pa}(g))
        \prod_{c \in \text{ch}(g) \setminus D} p(c \mid \text{pa}(c))\;
        p\big(\text{data} \mid w = \mu(g) + \sigma(g)\,\tilde w, \ldots\big),

:math:`D` the Gaussian children (the density of :math:`\tilde w`, standard normal, does not
involve :math:`g`), and moves :math:`g` and :math:`w` together along the funnel. It involves
the likelihood, on all the data. Interweaving performs the two in turn, the second on the
first's result; each leaves the joint posterior invariant (the second is a Gibbs update in the
:math:`(g, \tilde w)` parametrisation, a bijection of :math:`(g, w)`), so their composition
does, and where either alone mixes well so does the composition (Yu & Meng 2011, Theorem 1).

The non-centred conditional is the log density of the model run on all its data
(:func:`~numpyro_sgrld.data.subsample.full_batch`) with each Gaussian child written through
NumPyro's ``LocScaleReparam(0)``, as a function of :math:`g` with :math:`\tilde w` and every
other site fixed. It is drawn by univariate slice steps (Neal 2003) on each element of
:math:`g`'s unconstrained value in turn (the data couple them): an exact update, whose cost is
a few full-data evaluations of the likelihood per element.
"""

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import log_density

from numpyro_sgrld.data.subsample import as_jax_array, full_batch
from numpyro_sgrld.sampler.conditionals import slice_step
from numpyro_sgrld.sampler.decentring import SUFFIX, fully_non_centred

__all__ = ["check_every", "interweave", "interwoven_sites", "mixing_hint",
           "non_centred",
           "non_centred_model", "non_centred_update", "set_up"]


def check_every(interweave_every):
    """Refuse an ``interweave_every`` that is neither ``None`` nor a whole number >= 1."""
    if interweave_every is not None and (isinstance(interweave_every, bool) or not isinstance(
            interweave_every, int) or interweave_every < 1):
        raise ValueError(
            "`interweave_every` must be None (no interweaving) or a whole number of SG steps "
            f">= 1, got {interweave_every!r}.")


def interwoven_sites(model, gibbs_sites, children, model_args, model_kwargs):
    """The Gibbs sites that are parents of any of ``children`` (the decentred Gaussian
    children), in ``gibbs_sites``' order (NumPyro's
    :func:`~numpyro.infer.inspect.get_dependencies`)."""
    from numpyro.infer.inspect import get_dependencies

    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    parents = get_dependencies(model, model_args, model_kwargs)["prior_dependencies"]
    return tuple(g for g in gibbs_sites if any(g in parents.get(c, {}) for c in children))


def non_centred_model(model, children):
    """``model`` on all its data with each of ``children`` as ``LocScaleReparam(0)`` writes
    it: ``w = loc + scale * w_decentered``, ``w_decentered ~ N(0, 1)``."""
    return fully_non_centred(full_batch(model), children)


def non_centred(values, params):
    r"""``{"{w}_decentered": (w - loc) / scale}``: the children's :math:`\tilde w` (with
    ``params``, ``{w: (loc, scale)}``, at the Gibbs sites' current values)."""
    return {c + SUFFIX: (values[c] - loc) / scale for c, (loc, scale) in params.items()}


def non_centred_update(nc_model, name, transform, model_args, model_kwargs):
    r"""``draw(key, values) -> value``: site ``name`` drawn from its non-centred conditional
    (module docstring) by a slice step on each element of its unconstrained value in turn;
    ``values`` (constrained) hold every other latent site, the Gibbs sites' and the
    children's :math:`\tilde w` under ``"{w}_decentered"`` (not the children themselves)."""
    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))

    def draw(key, values):
        u, unravel = ravel_pytree(transform.inv(values[name]))

        def logp(flat):
            unconstrained = unravel(flat)
            x = transform(unconstrained)
            log_joint, _ = log_density(nc_model, model_args, model_kwargs, {**values, name: x})
            return log_joint + jnp.sum(transform.log_abs_det_jacobian(unconstrained, x))

        keys = random.split(key, u.size)

        def element(i, u):
            return u.at[i].set(slice_step(keys[i], lambda v: logp(u.at[i].set(v)), u[i]))

        return transform(unravel(lax.fori_loop(0, u.size, element, u)))

    return draw


def set_up(model, gibbs_sites, children, transforms, model_args, model_kwargs):
    """``(sites, draws)``: the Gibbs sites that are parents of ``children``
    (:func:`interwoven_sites`) and ``{site: draw}``, their :func:`non_centred_update` each
    (``transforms``: every latent site's constraining transform)."""
    sites = interwoven_sites(model, gibbs_sites, children, model_args, model_kwargs)
    nc_model = non_centred_model(model, children)
    return sites, {g: non_centred_update(nc_model, g, transforms[g], model_args, model_kwargs)
                   for g in sites}


def interweave(key, draws, loc_scale, gibbs, sites):
    r"""``(gibbs, sites)`` after the non-centred draw of each site of ``draws`` in turn
    (:func:`set_up`), the children moved with them: :math:`\tilde w` held,
    :math:`w = \mu(g') + \sigma(g')\,\tilde w`. ``sites`` are the other latent sites'
    constrained values, the children centred; ``loc_scale(values) -> {child: (loc, scale)}``."""
    params = loc_scale({**sites, **gibbs})
    tilde = non_centred(sites, params)
    values = {**{k: v for k, v in sites.items() if k not in params}, **tilde, **gibbs}
    for k, name in zip(random.split(key, len(draws)), draws):
        values[name] = draws[name](k, values)
    gibbs = {k: values[k] for k in gibbs}
    params = loc_scale({**sites, **gibbs})
    moved = {c: loc + scale * tilde[c + SUFFIX] for c, (loc, scale) in params.items()}
    return gibbs, {**sites, **moved}


def mixing_hint(gibbs_sites, interwoven, children):
    """What the verdict advises where the chains within Gibbs may not mix with more steps."""
    names = ", ".join(map(repr, gibbs_sites))
    if interwoven:
        return (f"Within Gibbs (the Gibbs sites {names} drawn exactly, also given their "
                "children's non-centred values and all the data), leave interweave_every=None "
                "where those draws take a scale far out (a network's saturating units: "
                "docs/gibbs.md), or give a gibbs_fn that draws the slow sites jointly with what "
                "they depend on")
    if not children:
        return (f"Within Gibbs (the Gibbs sites {names} drawn exactly), give a gibbs_fn that "
                "draws the slow sites jointly with what they depend on")
    return (f"Within Gibbs, the sites {names} drawn given their Gaussian children alone cross "
            "a funnel slowly: SGGibbs(..., interweave_every=10) draws them again given the "
            "children's non-centred values and all the data (about 6 full-data likelihood "
            "evaluations per element each time)")
