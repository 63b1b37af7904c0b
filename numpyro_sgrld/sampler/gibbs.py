r"""SG-MCMC within Gibbs: a stochastic-gradient kernel for some latent sites, alternating with
exact updates of the others, as NumPyro's ``HMCGibbs`` composes HMC with a user's Gibbs
function.

One transition of :class:`SGGibbs` is

1. a Gibbs sweep (every ``gibbs_every`` steps after warm-up, every step in it):
   ``gibbs_fn(rng_key, gibbs_sites, hmc_sites)`` draws the Gibbs sites from their conditional
   given the others (``hmc_sites``, constrained, at the chain's position: NumPyro's name for
   the sites the gradient-based kernel moves), exactly as ``HMCGibbs`` calls it; without a
   ``gibbs_fn``, the automatic updates of :mod:`numpyro_sgrld.sampler.conditionals` (the SG
   state carried across it: :mod:`~numpyro_sgrld.sampler.gibbs_kick`);
2. one step of the stochastic-gradient kernel on the model conditioned on the Gibbs sites'
   new values (NumPyro's ``conditioned`` model and ``with_conditioning`` keyword arguments),
   the Gibbs sites' Gaussian children moved partially non-centred
   (:mod:`numpyro_sgrld.sampler.decentring`);
3. in warm-up, the children's data curvature learnt (:mod:`~numpyro_sgrld.sampler.decentring`),
   and the share of ``target_bias`` the adapted step aims at, with the whole of it after
   warm-up for the sites no exact draw reads (:mod:`~numpyro_sgrld.sampler.gibbs_bias`).

After warm-up (``interweave_every="auto"``, the default), every few sweeps also draw the
scales given their children's non-centred values and all the data
(:mod:`~numpyro_sgrld.sampler.interweaving`).

Each part leaves the joint law invariant (the Gibbs draw exactly, the SG step up to its own
discretisation and minibatch bias), so the composition samples the joint posterior up to the
SG step's bias. Where the Gibbs sites' conditional involves no data (a centred hierarchical
model's scales given the weights), the sweep costs no pass over the data.

The SG kernel's own control variates would be centred in its coordinates, which move with the
Gibbs sites every sweep: a kernel whose estimator needs the full data is refused, and the
default one of ``step_size=None`` is replaced by the minibatch gradient, which ``SGGibbs``
corrects with control variates centred in the model's coordinates (``control_variate``).
"""

from functools import partial
from typing import Any, NamedTuple

import jax
from jax import lax, random
from numpyro.infer.hmc_gibbs import GIBBS_SITES_KWARG, conditioned, with_conditioning
from numpyro.infer.mcmc import MCMCKernel
from numpyro.infer.util import transform_fn
from numpyro.util import is_prng_key

from numpyro_sgrld.core.gradients import minibatch
from numpyro_sgrld.data.subsample import as_jax_array, compiled_subsampling
from numpyro_sgrld.sampler import (
    conditionals,
    decentring,
    gibbs_bias,
    gibbs_settings,
    gibbs_start,
    gibbs_warmup,
    interweaving,
)
from numpyro_sgrld.sampler import gibbs_bias_check as bias_check
from numpyro_sgrld.sampler import gibbs_control_variates as gibbs_cv
from numpyro_sgrld.sampler import gibbs_kick as kick
from numpyro_sgrld.sampler.kernel import SGMCMC
from numpyro_sgrld.sampler.run_verdict import up_to_relabelling
from numpyro_sgrld.warmup.schedule import first_window_start

__all__ = ["SGGibbs", "SGGibbsState"]

class SGGibbsState(NamedTuple):
    """The state of :class:`SGGibbs`.

    - **z** – every latent site, as ``MCMC`` records it: the Gibbs sites' constrained values,
      the SG kernel's sites unconstrained (as NumPyro's ``HMCGibbsState``), its decentred
      sites under their own names at their centred values
      (:mod:`~numpyro_sgrld.sampler.decentring`).
    - **sg_state** – the SG kernel's :class:`~numpyro_sgrld.SGState`.
    - **rng_key** – the key of the next Gibbs sweep.
    - **curvature** – the decentred sites' data curvature :math:`F` (``{site: array}``),
      learnt in warm-up and frozen after it (``{}`` without decentred sites).
    - **centre** – the control variates' centre
      (:class:`~numpyro_sgrld.sampler.gibbs_control_variates.ModelCentre`), ``None`` without.
    - **children** – the count of the decentred children the data say little about
      (:func:`~numpyro_sgrld.sampler.gibbs_bias.weakly_informed`), averaged over warm-up
      (``None`` without decentred sites); ``bias_share`` reads through (below).

    The SG state's fields read through it (``state.diverging``, ``state.step_size``, and in
    ``extra_fields``).
    """

    z: Any
    sg_state: Any
    rng_key: Any
    curvature: Any = None
    centre: Any = None
    children: Any = None

    def __getattr__(self, name):
        """The SG state's fields (``diverging``, ``step_size``, ...) read through, so that
        ``MCMC``'s ``extra_fields`` find them."""
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.sg_state, name)


class SGGibbs(MCMCKernel):
    """A stochastic-gradient kernel within Gibbs (see the module docstring).

    :param inner_kernel: an :class:`~numpyro_sgrld.SGMCMC` (any preset) built on the model;
        it moves every latent site but the Gibbs sites. Its model is conditioned on them in
        place; an adapted step (``step_size=None``) aims at a share of its ``target_bias``
        that falls with the number of children the data say little about
        (:mod:`~numpyro_sgrld.sampler.gibbs_bias`); built with ``settings=`` from
        ``learnt_settings`` of an ``SGGibbs`` run, the chains start as that run ended, in its
        coordinates (:mod:`~numpyro_sgrld.sampler.gibbs_settings`), and nothing is learnt.
    :param gibbs_fn: ``gibbs_fn(rng_key, gibbs_sites, hmc_sites) -> gibbs_sites``, a draw of
        the Gibbs sites (a dict of constrained values) from their conditional given the other
        sites' constrained values, as for NumPyro's ``HMCGibbs``; ``None`` (default): the
        automatic updates, one after the other
        (:func:`~numpyro_sgrld.sampler.conditionals.automatic_conditionals`): the exact update
        a site's prior declares (e.g. the layer-wise horseshoe's scale, of
        :func:`numpyro_sgrld.bridges.priors.horseshoe`), else a slice step on its conditional
        where that involves no data (a centred hierarchy's scales given the weights).
    :param gibbs_sites: the names of the sites ``gibbs_fn`` updates; without a ``gibbs_fn``,
        the sites to update automatically (``None``: every site that can be).
    :param decentre: move the Gibbs sites' Gaussian children in partially non-centred
        coordinates (default; :mod:`~numpyro_sgrld.sampler.decentring`), or as written.
    :param gibbs_every: the SG steps between Gibbs sweeps after warm-up (default 1: a sweep
        every step; every step in warm-up whatever it is).
    :param control_variate: ``"auto"`` (default): the SG kernel's gradient has control
        variates centred at a mode in the model's own coordinates
        (:mod:`~numpyro_sgrld.sampler.gibbs_control_variates`; each chain's own, searched
        from its own prior draw, and the chain starts there; each chain keeps them only where
        they do not raise the gradient's noise, tested at a start given by ``init_params`` and
        after warm-up's approach, a network's then off: ``gibbs_cv.pays``) wherever no
        observed site depends on a Gibbs site; ``"mode"``: required (refused where one does,
        never tested); ``None``: the plain minibatch gradient.
    :param interweave_every: ``"auto"`` (default): after warm-up, every
        :func:`~numpyro_sgrld.sampler.interweaving.auto_every` steps (four times the rows of
        the steps between), each Gibbs site that is a parent of a decentred site is
        drawn again given the children's non-centred values ``(w - mu) / sigma`` and all the
        data (Yu & Meng 2011; :mod:`~numpyro_sgrld.sampler.interweaving`): a scale and its
        children move together across the funnel the centred update crosses slowly; ``k``:
        every ``k``-th step in warm-up (where the data refuse the site far out), then every
        ``k`` up to a multiple of ``gibbs_every`` (on the sweeps' steps); ``None``: the
        centred update only (no data read).

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

    def __init__(self, inner_kernel, gibbs_fn=None, gibbs_sites=None, *, decentre=True,
                 gibbs_every=1, control_variate="auto", interweave_every="auto"):
        if not isinstance(inner_kernel, SGMCMC):
            raise TypeError(
                "`inner_kernel` must be a stochastic-gradient kernel of numpyro_sgrld (SGLD, "
                f"SGHMC, ..., or SGMCMC), got {type(inner_kernel).__name__}. For HMC or NUTS "
                "use numpyro.infer.HMCGibbs.")
        if inner_kernel.model is None:
            raise ValueError(
                "SGGibbs needs a kernel built on a model (the Gibbs sites are sites of it), "
                "not on `potential_fn`.")
        if getattr(inner_kernel, "bias_hint", None) is not None:
            raise ValueError(
                "This kernel is already inside an SGGibbs, which conditioned its model: build a "
                "new kernel for each SGGibbs.")
        conditionals.check_gibbs_arguments(gibbs_fn, gibbs_sites)
        gradient = inner_kernel.gradient
        if gradient.needs_full_data and gradient.activate is None:
            raise ValueError(
                f"The kernel's gradient estimator {gradient.name!r} keeps full-data "
                "gradients at a centre, which the Gibbs sites' moves make stale every sweep: "
                "build the kernel with gradient=numpyro_sgrld.gradients.minibatch() (the "
                "default with a given step_size).")
        self._settings = gibbs_settings.taken(inner_kernel)  # learnt within Gibbs, or None
        if gradient.activate is not None:  # step_size=None's default: the plain minibatch
            algorithm = inner_kernel.algorithm._replace(gradient=minibatch())
            inner_kernel.algorithm, inner_kernel.gradient = algorithm, algorithm.gradient
        self._plain_model = inner_kernel.model
        inner_kernel.model = conditioned(inner_kernel.model)
        inner_kernel.bias_hint = gibbs_bias.bias_hint(inner_kernel.adapts_step_size)
        #: The stochastic-gradient kernel (its model conditioned on the Gibbs sites).
        self.inner_kernel = inner_kernel
        self._given = gibbs_fn, None if gibbs_sites is None else tuple(gibbs_sites)
        #: The sites the Gibbs sweep updates (the automatic ones known after :meth:`init`).
        self._gibbs_fn, self.gibbs_sites = self._given
        if isinstance(gibbs_every, bool) or not isinstance(gibbs_every, int) or gibbs_every < 1:
            raise ValueError(
                f"`gibbs_every` must be a whole number of SG steps >= 1, got {gibbs_every!r}.")
        #: The SG steps between Gibbs sweeps after warm-up (every step in warm-up).
        self.gibbs_every = gibbs_every
        gibbs_cv.check_option(control_variate)
        self._control_variate = control_variate
        #: Whether the SG kernel's gradient has control variates (known after :meth:`init`).
        self.control_variates = None
        self._centre_search = self._data = None  # (vectorized, compiled search); last data
        self._decentre = bool(decentre)
        #: The Gibbs sites' Gaussian children the SG kernel moves partially non-centred
        #: (known after :meth:`init`; :mod:`numpyro_sgrld.sampler.decentring`).
        self.decentred_sites = None
        interweaving.check_every(interweave_every)
        #: The SG steps between non-centred draws as given; the run's :class:`~.interweaving.
        #: Schedule` (``None``: no draws) is ``interweave_schedule``, known after :meth:`init`.
        self.interweave_every, self.interweave_schedule = interweave_every, None
        #: The Gibbs sites also drawn non-centred (known after :meth:`init`; ``interweaving``).
        self.interwoven_sites = None
        self._non_centred_draws = {}
        self._num_warmup, self._vectorized = 0, False  # vectorized: a key per chain at init

    @property
    def model(self):
        return self._plain_model

    @property
    def default_fields(self):
        return ("z",)

    @property
    def judged_kernel(self):
        """The SG kernel, whose step's choices the verdict reads
        (:func:`~numpyro_sgrld.verdict.run.describe`)."""
        return self.inner_kernel

    @compiled_subsampling
    def init(self, rng_key, num_warmup, init_params=None, model_args=(), model_kwargs=None):
        gibbs_start.check_not_traced(rng_key)
        model_kwargs = {} if model_kwargs is None else dict(model_kwargs)
        if gibbs_start.other_data(self._data, model_args, model_kwargs):  # set up afresh
            self._gibbs_fn, self.gibbs_sites = self._given  # their structure may differ too
            self.decentred_sites = self.interwoven_sites = self._centre_search = None
        self._data = jax.tree.leaves((model_args, model_kwargs))
        self._vectorized = not is_prng_key(rng_key)
        if self._vectorized:  # a key per chain: (chains, 2)
            keys = jax.vmap(partial(random.split, num=3))(rng_key)
            key_trace, key_init, rng_key = keys[:, 0], keys[:, 1], keys[:, 2]
            num_chains = rng_key.shape[0]
        else:
            key_trace, key_init, rng_key = random.split(rng_key, 3)
            num_chains = None
        chains_key_trace, key_trace = key_trace, key_trace[0] if self._vectorized else key_trace
        plain = self._plain_model
        if self._gibbs_fn is None:
            found = conditionals.automatic_conditionals(plain, self.gibbs_sites, key_trace,
                                                        model_args, model_kwargs)
            self.gibbs_sites = tuple(found)
            self._gibbs_fn = conditionals.declared_sweep(found)
            others = gibbs_start.outside_blankets(plain, self.gibbs_sites, model_args,
                                                  model_kwargs)
            self.inner_kernel.site_scale = gibbs_bias.full_step(self.inner_kernel, others)
        if self.decentred_sites is None:
            self.decentred_sites = gibbs_start.decentred_sites(
                plain, self.gibbs_sites, model_args, model_kwargs) if self._decentre else ()
            inner = conditioned(decentring.reparametrised(plain, self.decentred_sites)
                                if self.decentred_sites else plain)
            self.control_variates = gibbs_cv.applies(self._control_variate, plain,
                                                     self.gibbs_sites, model_args, model_kwargs)
            if self.control_variates:
                inner = self._with_correction(inner, key_trace, model_args, model_kwargs)
            self.inner_kernel.model = inner
        self._num_warmup = int(num_warmup)
        learnt = None  # given settings: their start, coordinates and centre; nothing learnt
        if self._settings is not None:
            init_params, learnt = gibbs_settings.start(
                self._settings, init_params, num_chains, self.decentred_sites,
                self.gibbs_sites, self.control_variates)
        self.inner_kernel.chain_kwargs = (GIBBS_SITES_KWARG, decentring.CURVATURE_KWARG,
                                          gibbs_cv.CV_KWARG)
        at_centre = self.control_variates and init_params is None  # values found below
        latent, transforms = gibbs_start.latent_values(
            plain, self.gibbs_sites, init_params, key_trace if at_centre else chains_key_trace,
            model_args, model_kwargs, None if at_centre else num_chains, shapes_only=at_centre)
        if self.interwoven_sites is None:  # the Gibbs sites drawn non-centred too
            self.interwoven_sites, self._non_centred_draws = interweaving.set_up(
                plain, self.gibbs_sites, self.decentred_sites, transforms, model_args,
                model_kwargs, self.interweave_every)
        self.interweave_schedule = interweaving.schedule(
            self.interweave_every, self.interwoven_sites, latent, plain, model_args,
            model_kwargs, num_warmup, self.gibbs_every, None if at_centre else num_chains)
        centre = None if learnt is None else learnt.centre
        if learnt is None and self.control_variates:  # each chain's own, from its prior draw
            if self._centre_search is None or self._centre_search[0] != self._vectorized:
                self._centre_search = self._vectorized, jax.jit(self._per_chain(  # once: data
                    gibbs_cv.centre_search(plain, self._sg_sites, model_args, model_kwargs,
                                           children=self.decentred_sites)))
            centre = self._centre_search[1](
                self._per_chain(lambda k: random.fold_in(k, 1))(chains_key_trace))
            if init_params is None:
                init_params = gibbs_start.mode_start(centre, self.gibbs_sites,
                                                     self._transforms)
                latent, _ = gibbs_start.latent_values(
                    plain, self.gibbs_sites, init_params, chains_key_trace, model_args,
                    model_kwargs, num_chains)
            if not at_centre and self._control_variate == "auto":  # kept where they pay
                centre = self._per_chain(partial(
                    gibbs_cv.at_start, plain, transforms=transforms, model_args=model_args,
                    model_kwargs=model_kwargs, loc_scale=self._loc_scale))(
                    centre, latent, init_params, chains_key_trace)
        gibbs = {k: latent[k] for k in self.gibbs_sites}
        self._transforms_gibbs = {k: transforms[k] for k in sorted(self.gibbs_sites)}
        self.inner_kernel.judged_values = partial(self._judged, self._transforms_gibbs)
        self.inner_kernel.judged_name = partial(decentring.judged_name, self.decentred_sites)
        self.inner_kernel.mixing_hint = interweaving.mixing_hint(
            self.gibbs_sites, self.interweave_schedule, self.decentred_sites, self.gibbs_every)
        self.inner_kernel.warmup_advice = interweaving.warmup_advice(self.interweave_schedule)
        curvature = gibbs_settings.curvature(learnt, latent, self.decentred_sites)
        sg_params = None
        if init_params is not None:
            sg_params = {k: v for k, v in init_params.items() if k not in self.gibbs_sites}
            if set(self.decentred_sites) & set(sg_params):
                sg_params = self._per_chain(partial(self._decentred_start, model_args=model_args,
                                                    model_kwargs=model_kwargs))(
                    sg_params, latent, curvature)
        # the kernel's set-up and data checks run the model without the control variates' factor
        sg_state = self.inner_kernel.init(key_init, num_warmup, sg_params or None, model_args,
                                          self._inner_kwargs(model_kwargs, gibbs, curvature))
        sg_state, children = gibbs_bias.start(sg_state, curvature, num_chains)
        children = children if learnt is None else learnt.children
        sg_state, self._prior_gradient = kick.armed(sg_state, self.inner_kernel)
        sg_state, self._bias_index, self.inner_kernel.composed_check = bias_check.arm(
            sg_state, gibbs, self._transforms_gibbs, self.decentred_sites, num_chains)
        state = SGGibbsState(None, sg_state, rng_key, curvature, centre, children)
        return state._replace(z=self._record(state, gibbs, model_args, model_kwargs))

    def _per_chain(self, fn):
        """``fn`` of one chain's values, over the chains when they are vectorised."""
        return jax.vmap(fn) if self._vectorized else fn

    def _decentred_start(self, sg_params, latent, curvature, model_args, model_kwargs):
        """A chain's initial SG sites with the decentred ones in their own coordinates."""
        params = self._loc_scale({**latent, **sg_params}, model_args, model_kwargs)
        return {**{k: v for k, v in sg_params.items() if k not in params},
                **decentring.decentred(sg_params, params, curvature)}

    def _record(self, state, gibbs, model_args, model_kwargs):  # _recorded, per chain
        return self._per_chain(lambda st, g: self._recorded(st, g, model_args, model_kwargs))(
            state, gibbs)

    def _with_correction(self, inner, key, model_args, model_kwargs):
        """``inner`` with the control variates' correction."""
        args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        self._transforms = gibbs_start.sg_transforms(self._plain_model, self.gibbs_sites, key,
                                                     args, kwargs)
        self._sg_sites = tuple(self._transforms)
        return gibbs_cv.corrected(inner, self._plain_model, self._sg_sites, args, kwargs)

    def _inner_kwargs(self, model_kwargs, gibbs, curvature, centre=None):
        """The SG kernel's keyword arguments: Gibbs values, curvature, control variates' centre."""
        kwargs = with_conditioning(model_kwargs or {}, gibbs)
        if self.decentred_sites:
            kwargs[decentring.CURVATURE_KWARG] = curvature
        if centre is not None:
            kwargs[gibbs_cv.CV_KWARG] = centre
        return kwargs

    def _loc_scale(self, values, model_args, model_kwargs):
        return decentring.loc_scale(self._plain_model, self.decentred_sites, values, model_args,
                                    model_kwargs)

    def _centred(self, position, gibbs, curvature, model_args, model_kwargs):
        """The SG sites at ``position`` (unconstrained), constrained and centred, and the
        decentred sites' ``(loc, scale)`` there."""
        sites = transform_fn(self.inner_kernel.setup.inv_transforms, position)
        if not self.decentred_sites:
            return sites, {}
        params = self._loc_scale({**sites, **gibbs}, model_args, model_kwargs)
        return decentring.centred(sites, params, curvature), params

    def _judged(self, transforms, z, model_args, model_kwargs):
        """What the verdict judges (``run_verdict.judged``) from the SG kernel's position and
        keyword arguments: the Gibbs sites unconstrained (a network's per-unit scales sorted:
        ``up_to_relabelling``), the SG sites, decentred ones centred."""
        gibbs = model_kwargs[GIBBS_SITES_KWARG]
        if self.decentred_sites:
            own = {k: v for k, v in model_kwargs.items() if k not in (
                GIBBS_SITES_KWARG, decentring.CURVATURE_KWARG, gibbs_cv.CV_KWARG)}
            sites = transform_fn(self.inner_kernel.setup.inv_transforms, z)
            params = self._loc_scale({**sites, **gibbs}, model_args, own)
            z = decentring.centred(z, params, model_kwargs[decentring.CURVATURE_KWARG])
        gibbs = {name: t.inv(gibbs[name]) for name, t in transforms.items()}
        return {**z, **up_to_relabelling(gibbs, gibbs_start.relabelled_sites(
            self.inner_kernel.setup.trace, self.gibbs_sites))}

    def _recorded(self, state, gibbs, model_args, model_kwargs):
        """What ``MCMC`` records: the Gibbs sites, the SG sites (unconstrained, centred)."""
        z = state.sg_state.z
        if self.decentred_sites:
            sites = transform_fn(self.inner_kernel.setup.inv_transforms, z)
            params = self._loc_scale({**sites, **gibbs}, model_args, model_kwargs)
            z = decentring.centred(z, params, state.curvature)
        return {**gibbs, **z}

    def sweep(self, state, model_args, model_kwargs, interweave=None):
        """The Gibbs sweep of one transition of one chain: ``(gibbs_sites, sg_state)``, the
        Gibbs sites' new values, drawn given the SG kernel's sites at the chain's position
        (where its next step starts: ``proposal`` with ``check_proposal``), and the SG state
        with its decentred sites moved so that the centred ones stay where they were
        (:mod:`~numpyro_sgrld.sampler.decentring`); both as they were where any value of the
        draw is not finite. ``interweave``: whether the non-centred draw runs too (``None``:
        on every ``interweave_every``-th step)."""
        key = random.split(state.rng_key)[1]
        key_nc = random.fold_in(key, 1)
        gibbs = {k: state.z[k] for k in self.gibbs_sites}
        position = kick.position(state.sg_state)
        sites, before = self._centred(position, gibbs, state.curvature, model_args, model_kwargs)
        old, gibbs = gibbs, self._gibbs_fn(rng_key=key, gibbs_sites=gibbs, hmc_sites=sites)
        conditionals.check_gibbs_values(gibbs, self.gibbs_sites)
        sg_state, params = state.sg_state, {}
        if self.interweave_schedule is not None:
            if interweave is None:
                interweave = interweaving.due(state.sg_state.i, self.interweave_schedule)
            centred, (gibbs, sites) = gibbs, lax.cond(
                interweave,
                lambda g, s: interweaving.interweave(
                    key_nc, self._non_centred_draws, partial(
                        self._loc_scale, model_args=model_args, model_kwargs=model_kwargs),
                    g, s, state.sg_state.i < self.interweave_schedule.start),
                lambda g, s: (g, s), gibbs, sites)
            ran = interweaving.changed(centred, gibbs)  # not skipped (refuses_far, warm-up)
        if self.decentred_sites:
            params = self._loc_scale({**sites, **gibbs}, model_args, model_kwargs)
            sg_state = kick.moved(sg_state, sites, params, state.curvature)
        if self._prior_gradient is not None:  # not across an interwoven draw's move of w
            carry = partial(kick.carried, before=state.sg_state, ratio=kick.ratios(
                before, params, state.curvature), gibbs_before=old, gibbs_after=gibbs,
                gradient=lambda z, g: self._prior_gradient(z, model_args, self._inner_kwargs(
                    model_kwargs, g, state.curvature, state.centre)))
            sg_state = (carry(sg_state) if self.interweave_schedule is None
                        else lax.cond(ran, lambda s: s, carry, sg_state))
        return conditionals.finite_or_kept((gibbs, sg_state),
                               ({k: state.z[k] for k in self.gibbs_sites}, state.sg_state))

    def sample(self, state, model_args, model_kwargs):
        # vectorised chains step in lockstep: one index, so a branch on it stays a branch
        i = state.sg_state.i[0] if self._vectorized else state.sg_state.i
        interweave = (interweaving.due(i, self.interweave_schedule)
                      if self.interweave_schedule else None)
        sweep = self._per_chain(lambda s: self.sweep(s, model_args, model_kwargs, interweave))
        if self.gibbs_every == 1:
            gibbs, sg_state = sweep(state)
        else:
            gibbs, sg_state = lax.cond(
                (i < self._num_warmup) | ((i - self._num_warmup) % self.gibbs_every == 0),
                sweep, lambda s: ({k: s.z[k] for k in self.gibbs_sites}, s.sg_state), state)
        sg_state = bias_check.kept(  # the verdict's moments of the Gibbs sites
            sg_state, gibbs, state.curvature, self.inner_kernel.run_info, self._bias_index,
            self._transforms_gibbs, self._per_chain, self._vectorized,
            lambda p, g, f: self._centred(p, g, f, model_args, model_kwargs)[1])
        network = bool(self.inner_kernel.network_sites)  # no warm-up: off at step 0
        if self.control_variates and self._control_variate == "auto" and (
                self._num_warmup or network) and self._settings is None:
            retest = self._warmup(gibbs_warmup.retest, model_args, model_kwargs, network=network)
            state = lax.cond(i == first_window_start(self._num_warmup), retest,
                             lambda s, g: s, state._replace(sg_state=sg_state), gibbs)
            sg_state = state.sg_state
        sg_state = self.inner_kernel.sample(sg_state, model_args, self._inner_kwargs(
            model_kwargs, gibbs, state.curvature, state.centre))
        state = state._replace(sg_state=sg_state, rng_key=self._per_chain(
            lambda k: random.split(k)[0])(state.rng_key))
        if self.decentred_sites and self._num_warmup > 0 and self._settings is None:
            learn = self._warmup(gibbs_warmup.learn_curvature, model_args, model_kwargs,
                                 children=self.decentred_sites)
            i = sg_state.i[0] if self._vectorized else sg_state.i
            state = lax.cond(i <= self._num_warmup, learn, lambda s, g: s, state, gibbs)
        return state._replace(z=self._record(state, gibbs, model_args, model_kwargs))

    def _warmup(self, fn, model_args, model_kwargs, **more):
        """A :mod:`~numpyro_sgrld.sampler.gibbs_warmup` function ``fn(state, gibbs)`` of a
        chain, over the chains when they are vectorised."""
        return self._per_chain(partial(
            fn, centred=partial(self._centred, model_args=model_args, model_kwargs=model_kwargs),
            model=self._plain_model, model_args=model_args, model_kwargs=model_kwargs, **more))

    def postprocess_fn(self, model_args, model_kwargs):
        """Constrained values under the model's own names (and its deterministic sites,
        computed on the full data), as ``NUTS`` on ``full_batch(model)`` returns them."""
        return gibbs_start.constrainer(self._plain_model, self.gibbs_sites, model_args,
                                       model_kwargs)

    def learnt_settings(self, state):
        """Its run's settings (:func:`~numpyro_sgrld.sampler.gibbs_settings.read`)."""
        return gibbs_settings.read(self, state)

    def get_diagnostics_str(self, state):
        return self.inner_kernel.get_diagnostics_str(state.sg_state)

