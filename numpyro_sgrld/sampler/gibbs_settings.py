r"""What warm-up learnt within Gibbs, given back: the Gibbs part of
:class:`~numpyro_sgrld.LearntSettings`.

Within :class:`~numpyro_sgrld.SGGibbs` the SG kernel's step and metric are learnt in
coordinates that warm-up learns too: each decentred child :math:`w` is moved as

.. math::
    \tilde w = \frac{w - \mu}{\sigma^{1 - a}}, \qquad a = \frac{\sigma^2 F}{1 + \sigma^2 F},

with :math:`F` its data curvature, learnt in warm-up and frozen after it
(:mod:`~numpyro_sgrld.sampler.decentring`). A metric learnt at one :math:`F` is the metric of
other coordinates at another, so the SG kernel's settings alone do not give back the run: a
new run starts at :math:`F = 0`, where the learnt metric is wrong by the factors
:math:`\sigma^{a}` and the chain can leave to infinity. The Gibbs part
(:class:`GibbsSettings`) holds what fixes those coordinates and the rest warm-up decided:

- ``curvature``: :math:`F` for each decentred site;
- ``centre``: the control variates' centre and whether the chain keeps them
  (:class:`~numpyro_sgrld.sampler.gibbs_control_variates.ModelCentre`; ``None`` without);
- ``children``: the count of weakly informed children
  (:func:`~numpyro_sgrld.sampler.gibbs_bias.weakly_informed`) the step's share was set from.

The settings' ``position`` is each chain's last value as ``SGGibbs`` records it (the Gibbs
sites constrained, the SG sites unconstrained, the decentred ones centred), as its ``init``
takes ``init_params``. The SG sites outside every Gibbs site's Markov blanket stepped
:math:`h/s` after warm-up (:func:`~numpyro_sgrld.sampler.gibbs_bias.full_step`: the metric
:math:`S^{1/2} D S^{1/2}`); for a learnt constant metric (the default of SGLD, SGHMC and the
time-step kernels) :func:`read` writes :math:`S` into the settings' metric, so the new run
takes the same steps with no warm-up state (another metric keeps :math:`D`: those sites then
step :math:`h`).

``SGGibbs(SGLD(model, settings=learnt))``, built as the run that learnt them, starts each
chain there and learns nothing: with ``num_warmup=0`` its transitions are those of the
learnt run after its warm-up.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.core.metrics import LearntState
from numpyro_sgrld.sampler import parts
from numpyro_sgrld.warmup.settings import check_adapted, learnt_settings

__all__ = ["GibbsSettings", "check_given", "curvature", "read", "start", "taken"]


class GibbsSettings(NamedTuple):
    """The Gibbs part of an :class:`~numpyro_sgrld.SGGibbs` run's
    :class:`~numpyro_sgrld.LearntSettings` (module docstring): ``curvature``
    (``{decentred site: F}``), ``centre`` (or ``None``) and ``children`` (or ``None``), each
    with a leading chain axis where the run had several vectorised chains."""

    curvature: Any
    centre: Any = None
    children: Any = None


def _fold(metric, position, factors):
    r"""One chain's learnt constant ``metric`` (:class:`~numpyro_sgrld.core.metrics.
    LearntState`) with the site factors ``factors`` (``{site: s}``) written in:
    :math:`D' = S^{1/2} D S^{1/2}` (the diagonal times :math:`S`, the root's rows times
    :math:`S^{1/2}`), the metric :func:`~numpyro_sgrld.core.composition.site_scaled` steps
    with. Another metric is returned as it is."""
    if not factors or not isinstance(metric, LearntState):
        return metric
    scale = {k: v * factors[k] if k in factors else v for k, v in metric.scale.items()}
    factor = metric.factor
    if factor is not None:
        root = ravel_pytree({k: jnp.broadcast_to(jnp.sqrt(factors[k]) if k in factors else 1.0,
                                                 jnp.shape(v)).astype(jnp.result_type(v))
                             for k, v in position.items()})[0]
        factor = root[:, None] * factor
    return LearntState(scale, factor)


def read(kernel, state):
    """The :class:`~numpyro_sgrld.LearntSettings` of a finished run of the
    :class:`~numpyro_sgrld.SGGibbs` ``kernel`` (its last ``state``): the SG kernel's, with the
    outside sites' step factors written into a learnt constant metric, the position as the
    run records it and the :class:`GibbsSettings`."""
    inner, sg = kernel.inner_kernel, state.sg_state
    check_adapted(inner)
    settings = learnt_settings(sg)
    metric = settings.metric
    if inner.site_scale is not None:  # after warm-up: 1 / bias_share on the outside sites
        factors = inner.site_scale(sg.i, sg.warmup)
        if factors:
            fold = jax.vmap(_fold) if settings.num_chains is not None else _fold
            metric = fold(metric, sg.z, factors)
    return settings._replace(metric=metric, position=state.z, gibbs=GibbsSettings(
        state.curvature, state.centre, state.children))


def taken(inner_kernel):
    """The settings the SG kernel ``inner_kernel`` was built with, for
    :class:`~numpyro_sgrld.SGGibbs` (``None`` without): refused where they were not learnt
    within Gibbs; the kernel keeps their SG part (its position and Gibbs part are
    :class:`~numpyro_sgrld.SGGibbs`'s)."""
    settings = inner_kernel.settings
    if settings is None:
        return None
    if settings.gibbs is None:
        raise ValueError(
            "These learnt settings come from a run outside SGGibbs: their metric is in the "
            "whole model's coordinates, where SGGibbs moves the Gibbs sites' children in "
            "coordinates learnt in its own warm-up. Learn them within Gibbs, "
            "SGGibbs(K(model)) at step_size=None, and give learnt_settings(mcmc) of that run "
            "to SGGibbs(K(model, settings=learnt)).")
    inner_kernel.settings = settings._replace(position=None, gibbs=None)
    return settings


def check_given(settings, decentred_sites, gibbs_sites, control_variates):
    """Refuse ``settings`` (from :func:`taken`) that a :class:`~numpyro_sgrld.SGGibbs` built
    otherwise than the run that learnt them cannot use, naming what differs."""
    learnt = settings.gibbs
    if set(learnt.curvature) != set(decentred_sites):
        raise ValueError(
            f"The learnt settings' decentred sites are {sorted(learnt.curvature)} and this "
            f"SGGibbs decentres {sorted(decentred_sites)}: build it as the run that learnt "
            "them (the same model, gibbs_sites and decentre).")
    position = settings.position or {}
    missing = sorted(set(gibbs_sites) - set(position))
    if missing:
        raise ValueError(
            f"The learnt settings hold no value of the Gibbs sites {missing}: build SGGibbs "
            "with the gibbs_sites of the run that learnt them.")
    if (learnt.centre is None) != (not control_variates):
        have = "no" if learnt.centre is None else "a"
        raise ValueError(
            f"The learnt settings hold {have} control variates' centre and this SGGibbs "
            f"{'has' if control_variates else 'has none'}: give it the control_variate option "
            "of the run that learnt them.")


def curvature(learnt, latent, decentred_sites):
    """Each decentred site's curvature :math:`F` to start from: ``learnt``'s (a
    :class:`GibbsSettings`; ``None``: zeros, nothing learnt yet), refused where the site's
    value in ``latent`` has another shape (settings learnt on data of other shapes)."""
    if learnt is None:
        return {s: jnp.zeros(jnp.shape(latent[s]), jnp.result_type(latent[s]))
                for s in decentred_sites}
    for s in decentred_sites:
        if jnp.shape(learnt.curvature[s]) != jnp.shape(latent[s]):
            raise ValueError(
                f"The learnt settings' curvature of site {s!r} has shape "
                f"{jnp.shape(learnt.curvature[s])} and the site here has "
                f"{jnp.shape(latent[s])}: settings learnt on data of other shapes (another "
                "number of groups or units) do not apply; run a warm-up on these data.")
    return learnt.curvature


def start(settings, init_params, num_chains, decentred_sites, gibbs_sites, control_variates):
    """``(init_params, gibbs)`` for :class:`~numpyro_sgrld.SGGibbs` given ``settings`` (from
    :func:`taken`; checked by :func:`check_given`): ``init_params`` where given, else the
    settings' positions, and their :class:`GibbsSettings`, each for ``num_chains`` vectorised
    chains (``None``: one chain): as they are where the settings hold one entry per chain,
    else one chain's repeated."""
    check_given(settings, decentred_sites, gibbs_sites, control_variates)
    init_params = parts.start(init_params, settings, num_chains)
    if parts.settings_axis(settings, num_chains) == 0 or not num_chains:
        return init_params, settings.gibbs
    return init_params, jax.tree.map(
        lambda x: jnp.broadcast_to(x, (num_chains, *np.shape(x))), settings.gibbs)
