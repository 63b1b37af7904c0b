r"""Control variates within Gibbs, centred in the model's own coordinates.

The control-variate gradient (Baker et al. 2019) corrects the minibatch gradient of the
log-likelihood :math:`\ell` by its error at a centre :math:`\theta_0`,

.. math::
    \nabla\hat\ell(\theta) = \nabla\ell_B(\theta) + \big[\nabla\ell(\theta_0)
        - \nabla\ell_B(\theta_0)\big],

with :math:`\ell_B` the ``N/n``-scaled log-likelihood of the step's minibatch :math:`B` and
:math:`\nabla\ell(\theta_0)` computed once on all the data. Within Gibbs the stochastic-gradient
kernel's own coordinates move with the Gibbs sites (its model is conditioned on them, and its
decentred sites are :math:`u = (w - \mu)/c`), so a centre held there would need a new
full-data gradient every sweep. In the model's coordinates :math:`\theta` (the SG sites'
constrained values, the weights :math:`w` themselves) the log-likelihood does not depend on a
Gibbs site that no observed site depends on — the data-free sites :class:`~numpyro_sgrld.SGGibbs`
finds — so one centre and one full-data gradient serve a chain's whole run. The correction
:math:`\Delta = \nabla\ell(\theta_0) - \nabla\ell_B(\theta_0)` (the step's minibatch) enters the
SG kernel's model as the factor :math:`\langle\Delta, \theta(u)\rangle` with :math:`\Delta` held
constant, whose gradient in the kernel's coordinates is :math:`J(u)^\top\Delta`: the
correction mapped through the coordinates' Jacobian (:math:`\mathrm{diag}(c)` for a decentred
site). Each step costs a second minibatch gradient, at the centre.

The centre is an approximate posterior mode (:func:`~numpyro_sgrld.core.estimators.find_mode`:
Adam on minibatch gradients of the model's potential over every latent site, unconstrained),
each chain's own, searched from the chain's own prior draw (:func:`centre_search`), where the
chain starts: chains that find other modes start apart, and R-hat sees them.
The estimator is unbiased wherever the chain is, but its noise grows with the chain's distance
from the centre (Baker et al. 2019), and a network's posterior lies far from its mode: on the
unit-horseshoe MLP of ``docs/benchmarks.md`` control variates at the mode leave the noise at
NUTS's draws as large as the plain minibatch gradient's or up to 60 times larger, and the
chains started at the draws where it is larger leave the posterior in warm-up. So each chain
keeps them only where they do not raise the noise (:func:`pays`), tested at a start given by
``init_params`` (:func:`at_start`; a chain that starts at the centre has them on) and again
once warm-up's approach has brought the chain to the posterior's bulk (:func:`retested`).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpyro
from jax import random
from numpyro import handlers
from numpyro.distributions import biject_to
from numpyro.infer.hmc_gibbs import GIBBS_SITES_KWARG

from numpyro_sgrld.core.estimators import find_mode
from numpyro_sgrld.core.gradients import CONTROL_VARIATE_PROBES
from numpyro_sgrld.data.subsample import (
    as_jax_array,
    draw_indices,
    find_subsample_plates,
    full_batch,
    structural,
)
from numpyro_sgrld.sampler.decentring import CURVATURE_KWARG, SUFFIX, fully_non_centred
from numpyro_sgrld.sampler.potentials import minibatch_potential

__all__ = ["CV_KWARG", "FACTOR", "NOISE_LIMIT", "ModelCentre", "applies", "at_start", "centre",
           "centre_search", "check_likelihood_free_of", "check_option", "corrected",
           "data_loglik", "noise", "pays", "retested"]

#: The keyword argument that carries the :class:`ModelCentre` to the SG kernel's model.
CV_KWARG = "_sgrld_model_centre"
#: The name of the correction's factor site.
FACTOR = "_sgrld_control_variate"
#: Control variates are kept where their gradient's noise is at most this many times the plain
#: minibatch gradient's: where they do not raise it. A chain without them still computes the
#: centre's minibatch gradient, so, unlike the SG kernels' own switch (which asks for a cut to
#: a quarter, paying for their second gradient), any noise they take away is a gain.
NOISE_LIMIT = 1.0


class ModelCentre(NamedTuple):
    r"""The centre :math:`\theta_0` (``values``: the SG sites' constrained values), the
    full-data gradient of the log-likelihood there (``grad``, a dict like ``values``), the
    mode of every latent site (``mode``, constrained), where the chains start, and whether the
    correction is applied (``on``: a chain's :func:`pays`; ``True`` at the centre itself)."""

    values: dict
    grad: dict
    mode: dict
    on: Any = True


def data_loglik(model, values, model_args, model_kwargs, excluded=()):
    """The summed log-density (scaled as the plates scale it) of the model's observed sites but
    ``excluded`` (the Gibbs sites, observed under conditioning), at ``values`` (constrained,
    plate indices included), run apart from any enclosing handler."""
    with handlers.block():
        seeded = handlers.seed(handlers.substitute(model, data=values), 0)
        trace = handlers.trace(seeded).get_trace(*model_args, **model_kwargs)
    total = jnp.zeros(())
    for name, site in trace.items():
        if site["type"] == "sample" and site["is_observed"] and name not in excluded:
            log_prob = jnp.sum(site["fn"].log_prob(site["value"]))
            total = total + (log_prob if site.get("scale") is None else site["scale"] * log_prob)
    return total


def centre_search(model, sg_sites, model_args, model_kwargs, num_steps=1000, children=()):
    """``key -> ModelCentre``, a pure function (``jax.jit`` and ``jax.vmap`` it): from the
    key's prior draw, an approximate mode (Adam on minibatches, every latent site
    unconstrained) and the full-data gradient of the log-likelihood in the SG sites there.
    The mode is searched with ``children`` (Gaussian sites under Gibbs-updated scales)
    non-centred, as ``LocScaleReparam(0)`` writes them: a centred hierarchy's density is
    unbounded where a scale and its children collapse to 0 together, so a mode search in its
    own coordinates may end there; the non-centred form has no such point."""
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    search = fully_non_centred(model, children) if children else model
    plates = find_subsample_plates(model, args, kwargs)
    potential = minibatch_potential(search, args, kwargs)

    def draw(k):  # with replacement: O(n) a draw, not a permutation of all N rows
        return draw_indices(k, plates, None)[0]

    def found(key):
        key_start, key_mode = random.split(key)
        trace = handlers.trace(handlers.seed(search, key_start)).get_trace(*args, **kwargs)
        latent = {n: s for n, s in trace.items()
                  if s["type"] == "sample" and not s["is_observed"]}
        transforms = {n: biject_to(s["fn"].support) for n, s in latent.items()}
        start = {n: transforms[n].inv(s["value"]) for n, s in latent.items()}
        mode = find_mode(potential, start, key_mode, draw, num_steps)
        values = {n: transforms[n](v) for n, v in mode.items()}
        if children:  # the children's centred values at the mode
            at_mode = handlers.trace(structural(handlers.substitute(search, data=values)))
            sites = at_mode.get_trace(*args, **kwargs)
            values = {n: v for n, v in values.items()
                      if n not in {c + SUFFIX for c in children}}
            values.update({c: sites[c]["value"] for c in children})
        theta = {n: values[n] for n in sg_sites}
        rest = {n: v for n, v in values.items() if n not in sg_sites}
        grad = jax.grad(lambda t: data_loglik(full_batch(model), {**rest, **t}, args,
                                              kwargs))(theta)
        return ModelCentre(theta, grad, values, jnp.ones((), bool))

    return found


def centre(model, sg_sites, key, model_args, model_kwargs, num_steps=1000, children=()):
    """The :class:`ModelCentre` that :func:`centre_search` finds from ``key``: one compiled
    program."""
    return jax.jit(centre_search(model, sg_sites, model_args, model_kwargs, num_steps,
                                 children))(key)


def noise(model, centre, values, spreads, key, model_args, model_kwargs):
    r"""``(plain, centred)``: the summed squared noise of the plain minibatch gradient of the
    log-likelihood at ``values`` (every latent site, constrained, the children centred) and
    of the control-variate one centred at ``centre``, over
    :data:`~numpyro_sgrld.core.gradients.CONTROL_VARIATE_PROBES` pairs of independent
    minibatches: :math:`e = g_1 - g_2` against :math:`e' = (g_1 - g_1^c) - (g_2 - g_2^c)`
    (:math:`g^c` at the centre, same minibatch), in the SG kernel's coordinates: each
    decentred child's gradient times its ``spreads`` :math:`c` (``{child: c}``), the other
    sites' as they are."""
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    plates = find_subsample_plates(model, args, kwargs)
    theta = {s: values[s] for s in centre.values}
    rest = {n: v for n, v in values.items() if n not in theta}
    grad = jax.grad(lambda t, idx: data_loglik(model, {**rest, **idx, **t}, args, kwargs))

    def probe(j, carry):
        k1, k2 = random.split(random.fold_in(key, j))
        i1, i2 = draw_indices(k1, plates, None)[0], draw_indices(k2, plates, None)[0]
        g1, g2 = grad(theta, i1), grad(theta, i2)
        c1, c2 = grad(centre.values, i1), grad(centre.values, i2)
        plain, centred = carry
        for s in theta:
            c = spreads.get(s, 1.0)
            plain = plain + jnp.sum((c * (g1[s] - g2[s])) ** 2)
            centred = centred + jnp.sum((c * ((g1[s] - c1[s]) - (g2[s] - c2[s]))) ** 2)
        return plain, centred

    zero = jnp.zeros((), jnp.result_type(float))
    return jax.lax.fori_loop(0, CONTROL_VARIATE_PROBES, probe, (zero, zero))


def pays(model, centre, values, spreads, key, model_args, model_kwargs):
    """Whether control variates centred at ``centre`` leave the SG gradient's :func:`noise` at
    ``values`` at most :data:`NOISE_LIMIT` times the plain minibatch gradient's (the SG
    kernels' warm-up switch, :func:`~numpyro_sgrld.core.gradients.activate_control_variates`,
    measures it the same way)."""
    plain, centred = noise(model, centre, values, spreads, key, model_args, model_kwargs)
    return (centred <= NOISE_LIMIT * plain) & (plain > 0)


def at_start(model, centre, latent, init_params, key, *, transforms, loc_scale, model_args,
             model_kwargs):
    """A chain's ``centre`` with ``on`` where the control variates :func:`pays` at its start:
    ``latent`` (every latent site, constrained) with the SG sites of ``init_params``
    (unconstrained, the children centred; ``transforms`` constrain them), the children's
    :math:`c` their prior scales (the data curvature is learnt in warm-up, 0 at the start:
    ``loc_scale(values, model_args, model_kwargs) -> {child: (loc, scale)}``)."""
    values = {**latent, **{k: transforms[k](v) for k, v in init_params.items()
                           if k in centre.values}}
    spreads = {s: scale for s, (_, scale) in loc_scale(values, model_args, model_kwargs).items()}
    return centre._replace(on=pays(model, centre, values, spreads, random.fold_in(key, 2),
                                   model_args, model_kwargs))


def retested(centre, model, sites, gibbs, spreads, key, model_args, model_kwargs):
    """A chain's ``centre`` with ``on`` re-decided by :func:`pays` at its position (``sites``:
    the SG sites constrained, the children centred; ``gibbs``: the Gibbs sites; ``spreads``:
    the children's :math:`c`), where warm-up's approach has brought it to the posterior's bulk
    (:func:`~numpyro_sgrld.warmup.schedule.first_window_start`): a chain that started at the
    centre has moved from it, and a network's chains far."""
    return centre._replace(on=pays(model, centre, {**sites, **gibbs}, spreads, key,
                                   model_args, model_kwargs))


def check_option(control_variate):
    """Refuse a ``control_variate`` option of :class:`~numpyro_sgrld.SGGibbs` that is not one
    of its three."""
    if control_variate not in ("auto", None, "mode"):
        raise ValueError(
            f"`control_variate` must be 'auto' (control variates where the likelihood "
            f"does not read a Gibbs site), 'mode' (required) or None, got "
            f"{control_variate!r}.")


def applies(control_variate, model, gibbs_sites, model_args, model_kwargs):
    """Whether the SG kernel's gradient gets control variates (``SGGibbs``'s
    ``control_variate``): ``"mode"`` requires a likelihood that reads no Gibbs site (refused
    otherwise, :func:`check_likelihood_free_of`), ``"auto"`` takes them where that holds,
    ``None`` never."""
    if control_variate is None:
        return False
    try:
        check_likelihood_free_of(model, gibbs_sites, model_args, model_kwargs)
    except Exception:  # noqa: BLE001  (a Gibbs site in the likelihood, or no tracing)
        if control_variate == "mode":
            raise
        return False
    return True


def check_likelihood_free_of(model, gibbs_sites, model_args, model_kwargs):
    """Refuse control variates where an observed site depends on a Gibbs site (its
    log-likelihood's gradient at the centre would move with every sweep)."""
    from numpyro.infer.inspect import get_dependencies

    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    trace = handlers.trace(structural(model)).get_trace(*args, **kwargs)
    parents = get_dependencies(model, args, kwargs)["prior_dependencies"]
    for name, site in trace.items():
        if site["type"] == "sample" and site["is_observed"]:
            bad = sorted(set(parents.get(name, {})) & set(gibbs_sites))
            if bad:
                raise ValueError(
                    f"control_variate='mode' needs a likelihood that does not depend on the "
                    f"Gibbs sites, but the observed site {name!r} depends on {bad}: leave "
                    "control_variate=None, or leave those sites to the SG kernel.")


def corrected(model, plain, sg_sites, model_args, model_kwargs):
    """The SG kernel's ``model`` with the correction factor (module docstring) where its
    keyword arguments carry a :class:`ModelCentre` under :data:`CV_KWARG`; ``plain`` is the
    user's model (the log-likelihood at the centre is evaluated on it; its subsample plates
    found at ``model_args``, ``model_kwargs``). Where the kernel evaluates the model on all
    the rows (its data checks), the correction is 0."""
    subsampled = {p.name: p for p in find_subsample_plates(plain, model_args, model_kwargs)}

    def with_correction(*args, **kwargs):
        cv = kwargs.pop(CV_KWARG, None)
        if cv is None:
            return model(*args, **kwargs)
        gibbs = kwargs.get(GIBBS_SITES_KWARG) or {}
        trace = handlers.trace(model).get_trace(*args, **kwargs)
        idx = {n: s["value"] for n, s in trace.items() if s["type"] == "plate"
               and n in subsampled}
        theta = {s: trace[s]["value"] for s in sg_sites}
        own = {k: v for k, v in kwargs.items() if k not in (GIBBS_SITES_KWARG, CURVATURE_KWARG)}

        every_row = any(jnp.shape(v)[0] == subsampled[n].size for n, v in idx.items())
        at = full_batch(plain) if every_row else plain

        def loglik(t):
            return data_loglik(at, {**idx, **gibbs, **t}, args, own, excluded=gibbs)

        at_centre = jax.grad(loglik)(cv.values)
        delta = {s: jax.lax.stop_gradient(jnp.where(cv.on, cv.grad[s] - at_centre[s], 0.0))
                 for s in sg_sites}
        numpyro.factor(FACTOR, sum(jnp.sum(delta[s] * theta[s]) for s in sg_sites))

    return with_correction
