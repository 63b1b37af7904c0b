r"""SG-MCMC within Gibbs: a stochastic-gradient kernel for some latent sites, alternating with
exact updates of the others, as NumPyro's ``HMCGibbs`` composes HMC with a user's Gibbs
function.

One transition of :class:`SGGibbs` is

1. a Gibbs sweep: ``gibbs_fn(rng_key, gibbs_sites, hmc_sites)`` draws the Gibbs sites from
   their conditional given the others (``hmc_sites``, constrained: NumPyro's name for the
   sites the gradient-based kernel moves), exactly as ``HMCGibbs`` calls it;
2. one step of the stochastic-gradient kernel on the model conditioned on the Gibbs sites'
   new values (NumPyro's ``conditioned`` model and ``with_conditioning`` keyword arguments).

Each part leaves the joint law invariant (the Gibbs draw exactly, the SG step up to its own
discretisation and minibatch bias), so the composition samples the joint posterior up to the
SG step's bias. Where the Gibbs sites' conditional involves no data (a centred hierarchical
model's scales given the weights), the sweep costs no pass over the data.

The SG kernel's gradient is the plain minibatch estimate: control variates are centred at the
Gibbs sites' values at the centre, which move every sweep, so a kernel whose estimator needs
the full data is refused, and the default one of ``step_size=None`` (control variates switched
on in warm-up where they pay) runs as the plain minibatch gradient.
"""

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
from jax import random
from numpyro.distributions import biject_to
from numpyro.infer.hmc_gibbs import GIBBS_SITES_KWARG, conditioned, with_conditioning
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import transform_fn
from numpyro.util import is_prng_key

from numpyro_sgrld.core.gradients import minibatch
from numpyro_sgrld.data.subsample import as_jax_array
from numpyro_sgrld.sampler import conditionals, decentring
from numpyro_sgrld.sampler.kernel import SGMCMC

__all__ = ["CONDITIONAL", "Conditional", "SGGibbs", "SGGibbsState", "declared_conditionals"]

#: The key of a sample site's ``infer`` dict under which a prior declares an exact draw of the
#: site from its conditional given the other sites (a :class:`Conditional`); :class:`SGGibbs`
#: without a ``gibbs_fn`` updates every site that declares one.
CONDITIONAL = "sgrld_conditional"


class Conditional(NamedTuple):
    """An exact draw of a latent site from its conditional given the others, which involves no
    data: ``draw(key, value, sites) -> value``, with ``value`` the site's current constrained
    value and ``sites`` the constrained values of every latent site (for instance
    :func:`numpyro_sgrld.bridges.priors.half_cauchy_scale_draw`)."""

    draw: Callable


class SGGibbsState(NamedTuple):
    """The state of :class:`SGGibbs`.

    - **z** – every latent site: the Gibbs sites' constrained values and the SG kernel's
      unconstrained position (as NumPyro's ``HMCGibbsState``; ``MCMC`` records it).
    - **sg_state** – the SG kernel's :class:`~numpyro_sgrld.SGState`.
    - **rng_key** – the key of the next Gibbs sweep.
    """

    z: Any
    sg_state: Any
    rng_key: Any


class SGGibbs(MCMCKernel):
    """A stochastic-gradient kernel within Gibbs (see the module docstring).

    :param inner_kernel: an :class:`~numpyro_sgrld.SGMCMC` (any preset) built on the model;
        it moves every latent site but the Gibbs sites. Its model is conditioned on them in
        place.
    :param gibbs_fn: ``gibbs_fn(rng_key, gibbs_sites, hmc_sites) -> gibbs_sites``, a draw of
        the Gibbs sites (a dict of constrained values) from their conditional given the other
        sites' constrained values, as for NumPyro's ``HMCGibbs``; ``None`` (default): the
        exact updates the model's priors declare (:data:`CONDITIONAL`, e.g. the layer-wise
        horseshoe of :func:`numpyro_sgrld.bridges.priors.horseshoe`), one after the other.
    :param gibbs_sites: the names of the sites ``gibbs_fn`` updates (``None`` without one).

    Example::

        >>> import jax, jax.numpy as jnp, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> from numpyro_sgrld import SGLD, SGGibbs
        >>> def model(y):
        ...     mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        ...     x = numpyro.sample("x", dist.Normal(mu, 1.0))
        ...     with numpyro.plate("data", y.shape[0], subsample_size=10) as idx:
        ...         numpyro.sample("y", dist.Normal(x, 1.0), obs=y[idx])
        >>> def gibbs_fn(rng_key, gibbs_sites, hmc_sites):  # mu | x ~ N(x / 2, 1 / 2)
        ...     x = hmc_sites["x"]
        ...     return {"mu": x / 2 + jnp.sqrt(0.5) * jax.random.normal(rng_key)}
        >>> kernel = SGGibbs(SGLD(model, step_size=1e-3), gibbs_fn, ["mu"])
        >>> mcmc = MCMC(kernel, num_warmup=100, num_samples=200, progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0), jnp.ones(100))
        >>> sorted(mcmc.get_samples())
        ['mu', 'x']
    """

    sample_field = "z"

    def __init__(self, inner_kernel, gibbs_fn=None, gibbs_sites=None, *, decentre=True):
        if not isinstance(inner_kernel, SGMCMC):
            raise TypeError(
                "`inner_kernel` must be a stochastic-gradient kernel of numpyro_sgrld (SGLD, "
                f"SGHMC, ..., or SGMCMC), got {type(inner_kernel).__name__}. For HMC or NUTS "
                "use numpyro.infer.HMCGibbs.")
        if inner_kernel.model is None:
            raise ValueError(
                "SGGibbs needs a kernel built on a model (the Gibbs sites are sites of it), "
                "not on `potential_fn`.")
        if gibbs_fn is not None and not callable(gibbs_fn):
            raise TypeError(f"`gibbs_fn` must be callable, got {gibbs_fn!r}.")
        if gibbs_fn is not None and gibbs_sites is None:
            raise ValueError(
                "Give `gibbs_sites` with `gibbs_fn`: the names of the sites it updates.")
        if gibbs_sites is not None and (isinstance(gibbs_sites, str) or not gibbs_sites):
            raise ValueError(
                "`gibbs_sites` must be a non-empty list of site names, e.g. ['tau'], got "
                f"{gibbs_sites!r}.")
        gradient = inner_kernel.gradient
        if gradient.needs_full_data and gradient.activate is None:
            raise ValueError(
                f"The kernel's gradient estimator {gradient.name!r} keeps full-data "
                "gradients at a centre, which the Gibbs sites' moves make stale every sweep: "
                "build the kernel with gradient=numpyro_sgrld.gradients.minibatch() (the "
                "default with a given step_size).")
        if gradient.activate is not None:  # step_size=None's default: the plain minibatch
            algorithm = inner_kernel.algorithm._replace(gradient=minibatch())
            inner_kernel.algorithm, inner_kernel.gradient = algorithm, algorithm.gradient
        self._plain_model = inner_kernel.model
        inner_kernel.model = conditioned(inner_kernel.model)
        #: The stochastic-gradient kernel (its model conditioned on the Gibbs sites).
        self.inner_kernel = inner_kernel
        self._gibbs_fn = gibbs_fn
        #: The sites the Gibbs sweep updates (with the automatic updates, known after
        #: :meth:`init`).
        self.gibbs_sites = None if gibbs_sites is None else tuple(gibbs_sites)
        self._decentre = bool(decentre)
        #: The Gibbs sites' Gaussian children the SG kernel moves non-centred (known after
        #: :meth:`init`; :mod:`numpyro_sgrld.sampler.decentring`).
        self.decentred_sites = None

    @property
    def model(self):
        return self.inner_kernel.model

    @property
    def default_fields(self):
        return ("z",)

    def init(self, rng_key, num_warmup, init_params=None, model_args=(), model_kwargs=None):
        if not is_prng_key(rng_key):
            raise ValueError(
                "SGGibbs runs one chain per call: use chain_method='sequential' or "
                "'parallel', not 'vectorized'.")
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        key_trace, key_init, rng_key = random.split(rng_key, 3)
        plain = self._plain_model
        if self._gibbs_fn is None:
            conditionals = automatic_conditionals(plain, self.gibbs_sites, key_trace,
                                                  model_args, model_kwargs)
            self.gibbs_sites = tuple(conditionals)
            self._gibbs_fn = _declared_sweep(conditionals)
        if self.decentred_sites is None:
            self.decentred_sites = (decentring.gaussian_children(
                plain, self.gibbs_sites, model_args, model_kwargs) if self._decentre else ())
            self.inner_kernel.model = conditioned(
                decentring.reparametrised(plain, self.decentred_sites)
                if self.decentred_sites else plain)
        gibbs, transforms = _initial_gibbs_values(plain, self.gibbs_sites, init_params,
                                                  key_trace, model_args, model_kwargs)
        self.inner_kernel.judged_sites = partial(_unconstrained_gibbs, transforms)
        sg_params = None
        if init_params is not None:
            sg_params = {k: v for k, v in init_params.items() if k not in self.gibbs_sites}
            if self.decentred_sites and set(self.decentred_sites) & set(sg_params):
                params = self._loc_scale({**sg_params, **gibbs}, model_args, model_kwargs)
                sg_params = {**{k: v for k, v in sg_params.items() if k not in params},
                             **decentring.decentred(sg_params, params)}
        sg_state = self.inner_kernel.init(key_init, num_warmup, sg_params, model_args,
                                          with_conditioning(model_kwargs, gibbs))
        return SGGibbsState({**gibbs, **sg_state.z}, sg_state, rng_key)

    def _loc_scale(self, values, model_args, model_kwargs):
        return decentring.loc_scale(self._plain_model, self.decentred_sites, values, model_args,
                                    model_kwargs)

    def sweep(self, state, model_args, model_kwargs):
        """The Gibbs sweep of one transition: ``(gibbs_sites, sg_state)``, the Gibbs sites'
        new values, drawn given the SG kernel's sites at the chain's position (where its next
        step starts: ``proposal`` with ``check_proposal``), and the SG state, its non-centred
        sites moved so that the centred ones stay where they were
        (:mod:`~numpyro_sgrld.sampler.decentring`)."""
        model_kwargs = {} if model_kwargs is None else model_kwargs
        key = random.split(state.rng_key)[1]
        gibbs = {k: state.z[k] for k in self.gibbs_sites}
        chain = state.sg_state.chain
        position = chain.z if chain.proposal is None else chain.proposal
        sites = transform_fn(self.inner_kernel.setup.inv_transforms, position)
        if self.decentred_sites:
            sites = decentring.centred(
                sites, self._loc_scale({**sites, **gibbs}, model_args, model_kwargs))
        gibbs = self._gibbs_fn(rng_key=key, gibbs_sites=gibbs, hmc_sites=sites)
        _check_gibbs_values(gibbs, self.gibbs_sites)
        if not self.decentred_sites:
            return gibbs, state.sg_state
        moved = decentring.decentred(
            sites, self._loc_scale({**sites, **gibbs}, model_args, model_kwargs))
        if chain.proposal is None:
            chain = chain._replace(z={**chain.z, **moved})
        else:
            chain = chain._replace(proposal={**chain.proposal, **moved})
        return gibbs, state.sg_state._replace(chain=chain)

    def sample(self, state, model_args, model_kwargs):
        gibbs, sg_state = self.sweep(state, model_args, model_kwargs)
        sg_state = self.inner_kernel.sample(sg_state, model_args,
                                            with_conditioning(model_kwargs or {}, gibbs))
        return SGGibbsState({**gibbs, **sg_state.z}, sg_state, random.split(state.rng_key)[0])

    def postprocess_fn(self, model_args, model_kwargs):
        """Constrained values under the model's own names (a non-centred site's
        ``"{w}_decentered"`` gives way to ``w``), as ``NUTS`` on the model returns them."""
        model_kwargs = {} if model_kwargs is None else model_kwargs
        hidden = {s + decentring.SUFFIX for s in self.decentred_sites or ()}

        def constrain(z):
            gibbs = {k: z[k] for k in self.gibbs_sites}
            rest = {k: v for k, v in z.items() if k not in self.gibbs_sites}
            inner = self.inner_kernel.postprocess_fn(model_args,
                                                     with_conditioning(model_kwargs, gibbs))
            return {**gibbs, **{k: v for k, v in inner(rest).items() if k not in hidden}}

        return constrain

    def get_diagnostics_str(self, state):
        return self.inner_kernel.get_diagnostics_str(state.sg_state)


def declared_conditionals(model, key, model_args, model_kwargs):
    """``{site: Conditional}`` of the model's sample sites that declare an exact update
    (:data:`CONDITIONAL` in their ``infer``), in the model's order, from one trace."""
    from numpyro import handlers

    trace = handlers.trace(handlers.seed(model, key)).get_trace(*model_args, **model_kwargs)
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
    found = conditionals.data_free_sites(model, model_args, model_kwargs, exclude=declared)
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    trace = handlers.trace(handlers.seed(model, key)).get_trace(*args, **kwargs)
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
        independent = conditionals.independent_elements(model, name, found[name], values,
                                                        model_args, model_kwargs, key)
        draws[name] = Conditional(conditionals.slice_update(
            model, name, found[name], model_args, model_kwargs, independent))
    return draws


def _declared_sweep(conditionals):
    """A ``gibbs_fn`` drawing each site of ``conditionals`` in turn from its
    :class:`Conditional`, given the others' latest values."""

    def gibbs_fn(rng_key, gibbs_sites, hmc_sites):
        values = {**hmc_sites, **gibbs_sites}
        for key, (name, conditional) in zip(random.split(rng_key, len(conditionals)),
                                             conditionals.items()):
            values[name] = conditional.draw(key, values[name], values)
        return {name: values[name] for name in conditionals}

    return gibbs_fn


def _initial_gibbs_values(model, gibbs_sites, init_params, key, model_args, model_kwargs):
    """The Gibbs sites' first values (``init_params``'s where given, else a draw from the
    model's prior: one trace of the model), each site checked to be a latent site, and their
    constraining transforms."""
    from numpyro import handlers

    given = {} if init_params is None else {k: init_params[k] for k in gibbs_sites
                                            if k in init_params}
    trace = handlers.trace(handlers.seed(handlers.substitute(model, data=given), key)).get_trace(
        *model_args, **model_kwargs)
    latent = {name for name, site in trace.items()
              if site["type"] == "sample" and not site["is_observed"]}
    missing = [s for s in gibbs_sites if s not in latent]
    if missing:
        raise ValueError(
            f"The Gibbs site {missing[0]!r} is not a latent sample site of the model (its "
            f"latent sites: {sorted(latent)}).")
    return ({s: trace[s]["value"] for s in gibbs_sites},
            {s: biject_to(trace[s]["fn"].support) for s in gibbs_sites})


def _unconstrained_gibbs(transforms, model_kwargs):
    """The Gibbs sites' unconstrained values, from the SG kernel's keyword arguments: what the
    verdict judges of them (:attr:`~numpyro_sgrld.SGMCMC.judged_sites`)."""
    values = model_kwargs[GIBBS_SITES_KWARG]
    return {name: t.inv(values[name]) for name, t in transforms.items()}


def _check_gibbs_values(gibbs, gibbs_sites):
    """Refuse a ``gibbs_fn`` result that does not give exactly the Gibbs sites."""
    if not isinstance(gibbs, dict) or set(gibbs) != set(gibbs_sites):
        raise ValueError(
            "`gibbs_fn` must return a dict with exactly the Gibbs sites "
            f"{sorted(gibbs_sites)}, got "
            f"{sorted(gibbs) if isinstance(gibbs, dict) else type(gibbs).__name__}.")
