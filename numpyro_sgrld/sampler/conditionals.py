r"""Exact updates of the latent sites whose conditional involves no data, found in the model:
the update :class:`~numpyro_sgrld.SGGibbs` makes of every such site when it is given no
``gibbs_fn``.

A latent site :math:`x` is **data-free** when no factor of the joint density that depends on
it is observed or lies in a subsample plate: its conditional given every other site,

.. math::
    p(x \mid \text{rest}, \text{data}) \propto p(x \mid \text{pa}(x))
        \prod_{c \in \text{ch}(x)} p(c \mid \text{pa}(c)),

involves its own prior and its latent children's densities only (a centred hierarchical
model's scales given the weights). The children come from NumPyro's
:func:`~numpyro.infer.inspect.get_dependencies`.

Such a site is updated by univariate slice sampling (Neal 2003, stepping out and shrinkage)
on each element of its unconstrained value :math:`u = T^{-1}(x)`, on the log conditional
:math:`\log p(T(u) \mid \cdot) + \log|\det J_T(u)| + \sum_c \log p(c \mid \cdot)`: an exact
update, which leaves the conditional invariant whatever the interval's initial width. The
elements are updated all at once where they are conditionally independent (the log
conditional's Hessian in :math:`u` is diagonal at two points: structural zeros, which
automatic differentiation gives exactly), else one after another. Each evaluation runs the
model, but only the factors of :math:`x` are used, so once compiled the data's part of the
model (the likelihood's forward pass) is dead code that XLA removes: the update reads no data.
"""

import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.distributions import biject_to

from numpyro_sgrld.core.tree import uniform_bits, uniform_from_bits
from numpyro_sgrld.data.subsample import as_jax_array, placeholder_plates, structural

__all__ = ["CONDITIONAL", "Conditional", "DataFreeSite", "automatic_conditionals",
           "JointMove", "check_gibbs_arguments", "check_gibbs_values", "data_free_sites",
           "declared_conditionals", "declared_sweep",
           "finite_or_kept", "independent_elements", "log_conditional", "slice_step",
           "slice_step_from", "slice_uniforms", "slice_update"]

#: Stepping-out steps of one slice update, at most (Neal 2003, ``m``): with the initial width
#: of one unconstrained unit, an interval up to 32 units each side.
MAX_STEPS = 32
#: Shrinkage proposals of one slice update, at most: each halves the interval's expected
#: length, so 64 go from 64 units to the float32 resolution of any value; one that ends
#: without acceptance keeps the current value (a valid, if lazy, update).
MAX_SHRINKS = 64


#: The key of a sample site's ``infer`` dict under which a prior declares an exact draw of the
#: site from its conditional given the other sites (a :class:`Conditional`); :class:`SGGibbs`
#: without a ``gibbs_fn`` updates every site that declares one.
CONDITIONAL = "sgrld_conditional"


class Conditional(NamedTuple):
    """An exact draw of a latent site from its conditional given the others, which involves no
    data: ``draw(key, value, sites) -> value``, with ``value`` the site's current constrained
    value and ``sites`` the constrained values of every latent site (for instance
    :func:`numpyro_sgrld.bridges.priors.half_cauchy_scale_draw`).

    ``joint``, optional: a :class:`JointMove` of this site and others made after ``draw``
    where the sweep updates all of them (a move along a direction that the single-site draws
    cross slowly, such as the unit-wise horseshoe's global-local ridge)."""

    draw: Callable
    joint: Any = None


class JointMove(NamedTuple):
    """A move of several latent sites at once that leaves their joint conditional invariant
    and involves no data: ``move(key, sites) -> {name: value}`` for each name of ``sites``
    (``sites`` the constrained values of every latent site)."""

    sites: tuple
    move: Callable


class DataFreeSite(NamedTuple):
    """A latent site whose conditional involves no data: ``factors``, the sites whose density
    depends on it (itself first), and its constraining ``transform``."""

    factors: tuple
    transform: Callable


class _Slice(NamedTuple):
    """The state of :func:`slice_step`'s loop."""

    phase: Any
    left: Any
    right: Any
    left_steps: Any
    right_steps: Any
    level: Any
    proposal: Any
    accepted: Any
    shrinks: Any


#: Uniforms one slice update reads: its level, its interval's place and split, and one a
#: shrinkage proposal.
SLICE_UNIFORMS = 3 + MAX_SHRINKS


def slice_uniforms(key, shape, dtype):
    """The uniforms of slice updates of values of ``dtype`` in ``shape``:
    ``shape + (SLICE_UNIFORMS,)``, drawn at once. Every ``jax.random`` call is a separate
    threefry hash in the compiled program (a ``split`` another), each compiled on its own,
    so the updates of a site's elements read rows of one draw."""
    return uniform_from_bits(uniform_bits(key, (*shape, SLICE_UNIFORMS), dtype), dtype)


def slice_step(key, logp, x, width=1.0):
    r"""One univariate slice-sampling update of ``x`` for the log density ``logp`` (Neal
    2003): :func:`slice_step_from` with its uniforms drawn from ``key``
    (:func:`slice_uniforms`)."""
    return slice_step_from(slice_uniforms(key, (), jnp.result_type(x)), logp, x, width)


def slice_step_from(uniforms, logp, x, width=1.0):
    r"""One univariate slice-sampling update of ``x`` for the log density ``logp`` (Neal
    2003), reading the :data:`SLICE_UNIFORMS` independent uniforms on :math:`[0, 1)` of
    ``uniforms``: a level :math:`\log p(x) - E`, :math:`E = -\log(1 - U_0) \sim
    \mathrm{Exp}(1)`; an interval of ``width`` placed around ``x`` by :math:`U_1` and stepped
    out (at most :data:`MAX_STEPS`, split between the two sides by :math:`U_2`) until both
    ends lie below the level; proposals drawn uniformly on it (:math:`U_{3+k}`, the
    :math:`k`-th), shrinking it towards ``x`` at each rejection. Leaves ``logp``'s law
    invariant; a non-finite ``logp`` counts as below every level, and where ``logp(x)`` itself
    is not finite (a state outside the law's support) ``x`` is kept."""

    dtype = jnp.result_type(x)
    uniforms = uniforms.astype(dtype)
    exp = -jnp.log1p(-uniforms[0])
    left = x - width * uniforms[1]
    left_steps = jnp.floor(MAX_STEPS * uniforms[2]).astype(jnp.int32)
    # one loop, one evaluation of logp a turn (the program holds one copy of it): the current
    # point (phase 0), the left end stepped out (1), the right end (2), the proposals (3)
    start_ = _Slice(jnp.int32(0), left, left + width, left_steps, MAX_STEPS - 1 - left_steps,
                    jnp.zeros((), dtype), x, jnp.array(False), jnp.int32(0))

    def point(c):
        return jnp.select([c.phase == 0, c.phase == 1, c.phase == 2],
                          [x, c.left, c.right], c.proposal)

    def cond(c):
        return (c.phase < 3) | (~c.accepted & (c.shrinks < MAX_SHRINKS))

    def body(c):
        value = logp(point(c))
        value = jnp.where(jnp.isfinite(value), value, -jnp.inf)
        above = value > c.level
        # phase 0: the level below the current density; phases 1, 2: step an end out while
        # it lies above the level and steps remain
        level = jnp.where(c.phase == 0, value - exp, c.level)
        step_left = (c.phase == 1) & above
        step_right = (c.phase == 2) & above
        after_left = jnp.where(c.right_steps > 0, 2, 3)
        phase = jnp.where(c.phase == 0, jnp.where(c.left_steps > 0, 1, after_left), c.phase)
        phase = jnp.where((c.phase == 1) & ~(above & (c.left_steps > 1)), after_left, phase)
        phase = jnp.where((c.phase == 2) & ~(above & (c.right_steps > 1)), 3, phase)
        left = jnp.where(step_left, c.left - width, c.left)
        right = jnp.where(step_right, c.right + width, c.right)
        # phase 3: the proposal was evaluated; accept it or shrink towards x
        shrinking = c.phase == 3
        accepted = shrinking & above
        rejected = shrinking & ~above
        left = jnp.where(rejected & (c.proposal < x), c.proposal, left)
        right = jnp.where(rejected & (c.proposal >= x), c.proposal, right)
        # the next proposal, the k-th, drawn on the (possibly shrunk) interval once phase 3
        # is reached (k: the proposals evaluated so far; the last one drawn is never read)
        shrinks = c.shrinks + shrinking
        u = lax.dynamic_index_in_dim(uniforms, 3 + jnp.minimum(shrinks, MAX_SHRINKS - 1),
                                     keepdims=False)
        drawn = left + (right - left) * u
        proposal = jnp.where((phase == 3) & ~accepted, drawn, c.proposal)
        return _Slice(phase, left, right, jnp.where(step_left, c.left_steps - 1, c.left_steps),
                      jnp.where(step_right, c.right_steps - 1, c.right_steps),
                      level, proposal, accepted, shrinks)

    end = lax.while_loop(cond, body, start_)
    # x is kept where logp(x) is not finite (its level is -inf: nothing lies above it)
    return jnp.where(end.accepted & jnp.isfinite(end.level), end.proposal, x)


def data_free_sites(model, model_args, model_kwargs, exclude=()):
    """``{site: DataFreeSite}`` of the model's latent sites whose conditional involves no data
    (module docstring), in the model's order; the sites of ``exclude`` are not searched."""
    from numpyro.infer.inspect import get_dependencies

    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    trace = handlers.trace(structural(model)).get_trace(*model_args, **model_kwargs)
    sites = {name: site for name, site in trace.items() if site["type"] == "sample"}
    subsampled = {name for name, site in trace.items()
                  if site["type"] == "plate" and site["args"][1] is not None
                  and site["args"][1] < site["args"][0]}
    parents = get_dependencies(model, model_args, model_kwargs)["prior_dependencies"]
    found = {}
    for name, site in sites.items():
        if site["is_observed"] or name in exclude or site["fn"].support.is_discrete:
            continue
        factors = (name, *(child for child, up in parents.items()
                           if child != name and name in up))
        if all(_data_free(sites[f], subsampled) for f in factors):
            found[name] = DataFreeSite(factors, biject_to(site["fn"].support))
    return found


def _data_free(site, subsampled):
    """Whether a factor reads no data: latent, and in no subsample plate."""
    return not site["is_observed"] and not any(
        frame.name in subsampled for frame in site["cond_indep_stack"])


def log_conditional(model, name, site, values, model_args, model_kwargs):
    """``u -> log p(x = T(u) | rest) + log|det J_T(u)|`` (up to a constant) for the flat
    unconstrained value ``u`` of site ``name``, the other sites at ``values`` (constrained)."""
    model_args, model_kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    _, unravel = ravel_pytree(site.transform.inv(values[name]))

    def logp(u):
        unconstrained = unravel(u)
        x = site.transform(unconstrained)
        # placeholder indices: the site's factors read no data, so no minibatch is drawn;
        # the values substituted inside the seed, which then splits no key for them
        substituted = handlers.seed(handlers.substitute(placeholder_plates(model),
                                                        data={**values, name: x}), 0)
        trace = handlers.trace(substituted).get_trace(*model_args, **model_kwargs)
        total = jnp.sum(site.transform.log_abs_det_jacobian(unconstrained, x))
        for factor in site.factors:
            s = trace[factor]
            log_prob = jnp.sum(s["fn"].log_prob(s["value"]))
            total = total + (log_prob if s.get("scale") is None else s["scale"] * log_prob)
        return total

    return logp


def independent_elements(model, name, site, values, model_args, model_kwargs, key):
    """Whether the elements of site ``name`` are conditionally independent given the others
    at ``values`` (concrete): its log conditional's Hessian is diagonal at the site's value
    and at a perturbed one (structural zeros)."""
    logp = log_conditional(model, name, site, values, model_args, model_kwargs)
    size = math.prod(site.transform.inverse_shape(jnp.shape(values[name])))
    if size == 1:
        return True
    off = ~np.eye(size, dtype=bool)

    def diagonal(value, key):
        u, _ = ravel_pytree(site.transform.inv(value))
        points = jnp.stack([u, u + random.normal(key, u.shape, u.dtype)])
        return jnp.all(jax.vmap(jax.hessian(logp))(points)[:, off] == 0.0)

    # one compiled program (the model's data part is dead code in the site's factors)
    return bool(jax.jit(diagonal)(values[name], key))


def slice_update(model, name, site, model_args, model_kwargs, independent):
    """A :class:`Conditional` ``draw(key, value, sites)`` of
    the data-free ``site`` called ``name``: a slice step on every element of its unconstrained
    value (module docstring), all at once where they are conditionally ``independent``
    (:func:`independent_elements`), else one after another."""

    def draw(key, value, sites):
        values = {**sites, name: value}
        logp = log_conditional(model, name, site, values, model_args, model_kwargs)
        u, unravel = ravel_pytree(site.transform.inv(value))
        uniforms = slice_uniforms(key, u.shape, u.dtype)

        def element(i, u, uniforms):
            return slice_step_from(uniforms, lambda v: logp(u.at[i].set(v)), u[i])

        if independent:
            new = jax.vmap(element, (0, None, 0))(jnp.arange(u.size), u, uniforms)
        else:
            new = lax.fori_loop(0, u.size,
                                lambda i, u: u.at[i].set(element(i, u, uniforms[i])), u)
        return site.transform(unravel(new))

    return draw


def declared_conditionals(model, key, model_args, model_kwargs):
    """``{site: Conditional}`` of the model's sample sites that declare an exact update
    (:data:`CONDITIONAL` in their ``infer``), in the model's order, from one trace."""
    from numpyro import handlers

    trace = handlers.trace(structural(model, key)).get_trace(*model_args, **model_kwargs)
    return {name: site["infer"][CONDITIONAL] for name, site in trace.items()
            if site["type"] == "sample" and not site["is_observed"]
            and CONDITIONAL in site.get("infer", {})}


def automatic_conditionals(model, sites, key, model_args, model_kwargs):
    """``{site: draw}``: the exact update of each of ``sites`` (``None``: of every site that
    has one), in the model's order: the update its prior declares (:data:`CONDITIONAL`), else
    a slice step on its conditional where that involves no data
    (:mod:`numpyro_sgrld.sampler.conditionals`). Refuses a named site with neither, and a
    model all of whose latent sites would be updated so (nothing left to the SG kernel)."""
    from numpyro import handlers

    declared = declared_conditionals(model, key, model_args, model_kwargs)
    try:
        found = data_free_sites(model, model_args, model_kwargs, exclude=declared)
    except Exception as e:  # noqa: BLE001  (NumPyro's dependency tracing of this model)
        warnings.warn(
            f"SGGibbs could not trace which sites the model's densities depend on "
            f"({type(e).__name__}: {e}), so it updates only the sites whose priors declare an "
            "exact update; give a gibbs_fn for others.", UserWarning, stacklevel=4)
        found = {}
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    trace = handlers.trace(structural(model, key)).get_trace(*args, **kwargs)
    latent = [name for name, site in trace.items()
              if site["type"] == "sample" and not site["is_observed"]]
    names = [n for n in latent if n in declared or n in found] if sites is None else list(sites)
    for name in names:
        if name not in declared and name not in found:
            raise ValueError(
                f"The Gibbs site {name!r} has no exact update: its prior declares none and its "
                "conditional involves the data (a factor that depends on it is observed or in "
                "a subsample plate). Give SGGibbs a gibbs_fn for it, or leave it to the "
                "stochastic-gradient kernel.")
    if not names:
        raise ValueError(
            "The model has no latent site with an exact update: none whose prior declares one "
            f"(infer[{CONDITIONAL!r}]) and none whose conditional involves no data (a centred "
            "hierarchy's scales given the weights). Give SGGibbs a gibbs_fn and gibbs_sites.")
    if set(latent) <= set(names):
        raise ValueError(
            f"Every latent site ({sorted(latent)}) has an exact update, so nothing is left to "
            "the stochastic-gradient kernel: name the sites to update with gibbs_sites=[...].")
    values = {n: trace[n]["value"] for n in latent}
    draws = {}
    for name in names:
        if name in declared:
            draws[name] = declared[name]
            continue
        independent = independent_elements(model, name, found[name], values,
                                                        model_args, model_kwargs, key)
        draws[name] = Conditional(slice_update(
            model, name, found[name], model_args, model_kwargs, independent))
    return draws


def declared_sweep(conditionals):
    """A ``gibbs_fn`` drawing each site of ``conditionals`` in turn from its
    :class:`Conditional`, given the others' latest values, each followed by its joint move
    where every site that moves is among ``conditionals`` (else the move is not made: it would
    change a site the sweep does not own)."""

    joint = {name: c.joint for name, c in conditionals.items()
             if c.joint is not None and set(c.joint.sites) <= set(conditionals)}

    def gibbs_fn(rng_key, gibbs_sites, hmc_sites):
        values = {**hmc_sites, **gibbs_sites}
        for key, (name, conditional) in zip(random.split(rng_key, len(conditionals)),
                                             conditionals.items()):
            if name in joint:
                key, key_joint = random.split(key)
            values[name] = conditional.draw(key, values[name], values)
            if name in joint:
                values.update(joint[name].move(key_joint, values))
        return {name: values[name] for name in conditionals}

    return gibbs_fn


def finite_or_kept(new, old):
    """``new`` where every value in it is finite, else ``old``: a sweep whose draw overflows
    (a scale at 0 or beyond the float range) is not taken."""
    finite = jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(new)
                                  if jnp.issubdtype(jnp.result_type(x), jnp.inexact)]))
    return jax.tree.map(lambda a, b: jnp.where(finite, a, b), new, old)


def check_gibbs_arguments(gibbs_fn, gibbs_sites):
    """``SGGibbs``'s ``gibbs_fn`` and ``gibbs_sites``, checked."""
    if gibbs_fn is not None and not callable(gibbs_fn):
        raise TypeError(f"`gibbs_fn` must be callable, got {gibbs_fn!r}.")
    if gibbs_fn is not None and gibbs_sites is None:
        raise ValueError(
            "Give `gibbs_sites` with `gibbs_fn`: the names of the sites it updates.")
    if gibbs_sites is not None and (isinstance(gibbs_sites, str) or not gibbs_sites):
        raise ValueError(
            "`gibbs_sites` must be a non-empty list of site names, e.g. ['tau'], got "
            f"{gibbs_sites!r}.")


def check_gibbs_values(gibbs, gibbs_sites):
    """Refuse a ``gibbs_fn`` result that does not give exactly the Gibbs sites."""
    if not isinstance(gibbs, dict) or set(gibbs) != set(gibbs_sites):
        raise ValueError(
            "`gibbs_fn` must return a dict with exactly the Gibbs sites "
            f"{sorted(gibbs_sites)}, got "
            f"{sorted(gibbs) if isinstance(gibbs, dict) else type(gibbs).__name__}.")
