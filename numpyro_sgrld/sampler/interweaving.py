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

By default (``interweave_every="auto"``) the draws run after warm-up only, every
:func:`auto_every` steps, so that they read about four times the data rows of the SG steps
between them. A draw in warm-up (``interweave_every`` a number) runs only where the data
refuse the site far out (:func:`refuses_far`): on a network whose units saturate, the
likelihood given :math:`\tilde w` stays bounded as a scale grows, and a draw far out, where
the units' gradient vanishes, drives the step-size adaptation to a vanishing step that freezes the
chain. Whether it runs depends on :math:`\tilde w` and the other sites only, never on
:math:`g`, so the draw-or-keep leaves the joint posterior invariant as the draw does. After
warm-up the step is fixed and every due draw runs: on the unit-horseshoe network of
``docs/benchmarks.md`` they are what mixes its scales.
"""

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import log_density

from numpyro_sgrld.data.subsample import as_jax_array, find_subsample_plates, full_batch
from numpyro_sgrld.sampler.conditionals import slice_step_from, slice_uniforms
from numpyro_sgrld.sampler.decentring import SUFFIX, fully_non_centred
from numpyro_sgrld.sampler.gibbs_control_variates import data_loglik

__all__ = ["AUTO_MIN_EVERY", "AUTO_ROWS", "FAR", "SATURATION_DROP", "Schedule", "auto_every",
           "changed", "check_every", "due", "interweave", "interwoven_sites", "mixing_hint",
           "non_centred", "non_centred_model", "non_centred_update", "on_sweeps", "refuses_far",
           "schedule", "set_up", "warmup_advice"]

#: The fewest SG steps between two non-centred draws that ``interweave_every="auto"`` picks.
AUTO_MIN_EVERY = 10
#: How many times the rows of the SG steps between them the non-centred draws of
#: ``interweave_every="auto"`` read, by the row count (:func:`auto_every`).
AUTO_ROWS = 4
#: How far out (unconstrained units) :func:`refuses_far` reads the data's log-likelihood.
FAR = 16.0
#: By how much the data's log-likelihood must fall there for the non-centred draw to run.
SATURATION_DROP = 50.0


class Schedule(NamedTuple):
    """When the non-centred draws run: on the steps ``i >= start`` with ``(i - start) %
    every == 0``, and before ``start`` (warm-up) on those with ``i % warmup_every == 0``
    (``0``: none)."""

    every: int
    start: int
    warmup_every: int = 0


def check_every(interweave_every):
    """Refuse an ``interweave_every`` that is neither ``"auto"``, ``None`` nor a whole number
    >= 1."""
    if interweave_every is None or (isinstance(interweave_every, str)
                                    and interweave_every == "auto"):
        return
    if isinstance(interweave_every, bool) or not isinstance(interweave_every, int) or (
            interweave_every < 1):
        raise ValueError(
            "`interweave_every` must be 'auto' (after warm-up, at a rate set by the draws' "
            "cost), None (no interweaving) or a whole number of SG steps >= 1, got "
            f"{interweave_every!r}.")


def auto_every(elements, plates):
    r"""The SG steps between non-centred draws for ``interweave_every="auto"``: the draws of
    ``elements`` unconstrained scale elements read about :math:`6 \times` ``elements`` full
    passes of the data (a slice step each), an SG step about :math:`6 n` rows (the gradient,
    about three passes' work, at the minibatch and at the control variates' centre), so every
    :math:`\max(10, \lceil \mathrm{elements} \cdot N / (R\,n) \rceil)` steps the draws read
    about :data:`AUTO_ROWS` :math:`= R` times as many rows as the steps between them
    (:math:`N / n` the largest over the subsample ``plates``; 1 without one). A step's cost
    is mostly not its rows but its fixed work (the sweep, the warm-up's machinery, the
    control flow), so the draws cost little at that rate (docs/gibbs.md, interweaving)."""
    ratio = max((p.size / p.subsample_size for p in plates), default=1.0)
    return max(AUTO_MIN_EVERY, math.ceil(elements * ratio / AUTO_ROWS))


def schedule(interweave_every, sites, values, model, model_args, model_kwargs, num_warmup,
             gibbs_every=1, num_chains=None):
    """The :class:`Schedule` of ``interweave_every`` for the interwoven ``sites`` of ``model``
    (``values``: their values, for their sizes; each of ``num_chains`` vectorised chains' along
    a leading axis, ``None``: one chain's), or ``None``: ``"auto"`` draws after warm-up
    only, every :func:`auto_every` steps rounded up to a multiple of ``gibbs_every`` (the
    draws run within the sweeps, which run every ``gibbs_every``-th step after warm-up); a
    number ``k`` every ``k``-th step in warm-up (a sweep every step) and after it every
    ``k`` steps rounded up to a multiple of ``gibbs_every``, on the sweeps' steps."""
    if not sites or interweave_every is None:
        return None
    if interweave_every == "auto":
        elements = sum(int(jnp.size(values[s])) for s in sites) // (num_chains or 1)
        plates = find_subsample_plates(model, *jax.tree.map(as_jax_array,
                                                            (model_args, model_kwargs)))
        return Schedule(on_sweeps(auto_every(elements, plates), gibbs_every), int(num_warmup))
    every = int(interweave_every)
    return Schedule(on_sweeps(every, gibbs_every), int(num_warmup), every)


def on_sweeps(every, gibbs_every):
    """``every`` rounded up to a multiple of ``gibbs_every``."""
    return -(-every // gibbs_every) * gibbs_every


def changed(before, after):
    """Whether any value of the Gibbs sites ``after`` an interweaving differs from ``before``."""
    return jnp.any(jnp.stack([jnp.any(a != b) for a, b in zip(
        jax.tree.leaves(before), jax.tree.leaves(after))]))


def due(i, plan):
    """Whether step ``i`` (traced) draws non-centred under the :class:`Schedule` ``plan``."""
    after = (i >= plan.start) & ((i - plan.start) % plan.every == 0)
    if not plan.warmup_every:
        return after
    return after | ((i < plan.start) & (i % plan.warmup_every == 0))


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


def refuses_far(nc_model, name, transform, unravel, flat, model_args, model_kwargs, values):
    r"""Whether the data refuse site ``name`` far out: their log-likelihood, the children's
    :math:`\tilde w` and every other site held at ``values``, falls by more than
    :data:`SATURATION_DROP` from the site's unconstrained value 0 to :data:`FAR` in every
    element (a scale :math:`e^{16}` times larger). Where it does not (a network's saturating
    units: the likelihood stays bounded as the scale grows) the non-centred draw is skipped
    (``flat``: the site's flat unconstrained value, ``unravel`` its inverse flattening).
    The test reads neither the site's own value nor anything the draw changes, so skipping
    the draw where it fails leaves the joint law invariant as the draw does."""
    zero = jnp.zeros_like(flat)

    def at(u):
        return data_loglik(nc_model, {**values, name: transform(unravel(u))}, model_args,
                           model_kwargs)

    return at(zero + FAR) < at(zero) - SATURATION_DROP


def non_centred_update(nc_model, name, transform, model_args, model_kwargs):
    r"""``draw(key, values, guarded=False) -> value``: site ``name`` drawn from its
    non-centred conditional (module docstring) by a slice step on each element of its
    unconstrained value in turn; where ``guarded`` (a draw in warm-up), only where the data
    refuse it far out (:func:`refuses_far`), else kept. ``values`` (constrained) hold every
    other latent site, the Gibbs sites' and the children's :math:`\tilde w` under
    ``"{w}_decentered"`` (not the children themselves)."""
    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))

    def draw(key, values, guarded=False):
        u, unravel = ravel_pytree(transform.inv(values[name]))

        def logp(flat):
            unconstrained = unravel(flat)
            x = transform(unconstrained)
            log_joint, _ = log_density(nc_model, model_args, model_kwargs, {**values, name: x})
            return log_joint + jnp.sum(transform.log_abs_det_jacobian(unconstrained, x))

        uniforms = slice_uniforms(key, u.shape, u.dtype)

        def element(i, u):
            return u.at[i].set(slice_step_from(uniforms[i], lambda v: logp(u.at[i].set(v)),
                                               u[i]))

        runs = jnp.logical_not(guarded) | refuses_far(nc_model, name, transform, unravel, u,
                                                      model_args, model_kwargs, values)
        drawn = lax.cond(runs, lambda u: lax.fori_loop(0, u.size, element, u), lambda u: u, u)
        # skipped: the value itself, not its round trip through the transform
        return jnp.where(runs, transform(unravel(drawn)), values[name])

    return draw


def set_up(model, gibbs_sites, children, transforms, model_args, model_kwargs,
           interweave_every="auto"):
    """``(sites, draws)``: the Gibbs sites that are parents of ``children``
    (:func:`interwoven_sites`) and ``{site: draw}``, their :func:`non_centred_update` each
    (``transforms``: every latent site's constraining transform); ``((), {})`` without
    children or with ``interweave_every=None``."""
    if interweave_every is None or not children:
        return (), {}
    sites = interwoven_sites(model, gibbs_sites, children, model_args, model_kwargs)
    nc_model = non_centred_model(model, children)
    return sites, {g: non_centred_update(nc_model, g, transforms[g], model_args, model_kwargs)
                   for g in sites}


def interweave(key, draws, loc_scale, gibbs, sites, guarded=False):
    r"""``(gibbs, sites)`` after the non-centred draw of each site of ``draws`` in turn
    (:func:`set_up`; ``guarded``, in warm-up: :func:`non_centred_update`), the children moved
    with them: :math:`\tilde w` held, :math:`w = \mu(g') + \sigma(g')\,\tilde w`. ``sites``
    are the other latent sites' constrained values, the children centred;
    ``loc_scale(values) -> {child: (loc, scale)}``."""
    params = loc_scale({**sites, **gibbs})
    tilde = non_centred(sites, params)
    values = {**{k: v for k, v in sites.items() if k not in params}, **tilde, **gibbs}
    for k, name in zip(random.split(key, len(draws)), draws):
        values[name] = draws[name](k, values, guarded)
    gibbs = {k: values[k] for k in gibbs}
    params = loc_scale({**sites, **gibbs})
    moved = {c: loc + scale * tilde[c + SUFFIX] for c, (loc, scale) in params.items()}
    return gibbs, {**sites, **moved}


def warmup_advice(plan):
    """What the verdict advises a network's chains within Gibbs in place of a longer warm-up,
    where the :class:`Schedule` ``plan`` draws non-centred after warm-up only (the default):
    more steps after it, where those draws run (``None`` for any other plan). On the
    unit-horseshoe network of ``docs/benchmarks.md`` a warm-up of 12,000 steps instead of
    2,000 left the global scale 0.50 sd below NUTS's (z 4.4), the chains drifting in warm-up
    towards the small scales the centred sweep alone leaves them at."""
    if plan is None or plan.start == 0 or plan.warmup_every:
        return None
    return (f"more steps after warm-up, where the non-centred draws of the scales run (every "
            f"{plan.every} steps), not a longer num_warmup: within Gibbs warm-up has none of "
            "them, and its chains drift towards the small scales the centred sweep alone "
            "leaves (docs/benchmarks.md, the unit-horseshoe network)")


def mixing_hint(gibbs_sites, plan, children, gibbs_every=1):
    """What the verdict advises where the chains within Gibbs may not mix with more steps
    (``plan``: the run's :class:`Schedule`, or ``None``; ``gibbs_every``: the SG steps
    between sweeps after warm-up, where the draws run)."""
    names = ", ".join(map(repr, gibbs_sites))
    far = ("interweave_every=None where those draws take a scale so far out that the chains "
           "stop (docs/gibbs.md)")
    if plan is not None and plan.start > 0 and not plan.warmup_every:
        if plan.every > on_sweeps(AUTO_MIN_EVERY, gibbs_every):
            every, how = AUTO_MIN_EVERY, "more often"
        else:
            every, how = 1, ("on every step" if gibbs_every == 1 else
                             f"on every sweep (every {gibbs_every} steps after warm-up)")
        return (f"Within Gibbs (the Gibbs sites {names} drawn exactly given their Gaussian "
                f"children, and every {plan.every} steps after warm-up also given their "
                f"non-centred values and all the data), SGGibbs(..., interweave_every={every})"
                f" draws them non-centred {how}, in warm-up too where the data refuse them far "
                "out; or " + far)
    if plan is not None:
        return (f"Within Gibbs (the Gibbs sites {names} drawn exactly, also given their "
                f"children's non-centred values and all the data), set {far}, or give a "
                "gibbs_fn that draws the slow sites jointly with what they depend on")
    if not children:
        return (f"Within Gibbs (the Gibbs sites {names} drawn exactly), give a gibbs_fn that "
                "draws the slow sites jointly with what they depend on")
    return (f"Within Gibbs, the sites {names} drawn given their Gaussian children alone cross "
            "a funnel slowly: SGGibbs(..., interweave_every=10) draws them again given the "
            "children's non-centred values and all the data (about 6 full-data likelihood "
            "evaluations per element each time)")
