r"""The SG state across a Gibbs sweep within :class:`~numpyro_sgrld.SGGibbs`: the decentred
coordinates moved to hold the children (:func:`moved`), and a momentum integrator's closing
half kick carried (:func:`carried`).

BAOAB and BADODAB apply a step's closing half kick at the start of the next step, with that
step's gradient (one gradient per step), and so, in effect, do SGHMC and SGNHT, whose velocity
is a half step from the positions: the kick between two steps is one merged kick, the closing
half of the last step and the opening half of the next
(:class:`~numpyro_sgrld.core.integrator_base.PendingKick`). Within Gibbs a sweep comes between
the two: it draws the Gibbs sites :math:`\theta` anew and moves the decentred coordinates
:math:`u = (w - \mu)/c` so that the children :math:`w` stay where they were
(:mod:`~numpyro_sgrld.sampler.decentring`). Read from the next step's gradient as it is, the
pending half kick would be the gradient of the new potential at the moved point, an error of
:math:`\tfrac h2(\nabla\hat U_{\rm new}(x') - \nabla\hat U_{\rm old}(x))` in the momentum on
every sweep: a bias of the joint law of first order in :math:`h` that comes with the sweeps
(``docs/gibbs.md``).

The half kick of the potential the step ended in follows from the next step's gradient with no
other pass over the data. The data's terms of the potential are functions of the children and
the other SG sites, which the sweep holds (the Gibbs sites' conditional reads no data), so in
a decentred coordinate their gradient is :math:`c` times their gradient in :math:`w`, on
whatever minibatch; hence

.. math::

    \nabla\hat U_{\rm old}(x) = r\odot\nabla\hat U_{\rm new}(x') + q, \qquad
    r = c_{\rm old}/c_{\rm new}\ (1 \text{ on the other SG sites}), \qquad
    q = \nabla U^0_{\rm old}(x) - r\odot\nabla U^0_{\rm new}(x'),

with :math:`U^0` the potential's terms outside the subsample plates (priors, Jacobians; two
gradients of them a sweep, no data). The sweep sets :math:`(r, q)` in the integrator's state,
and the next step's closing half kick takes :math:`r\odot\nabla\hat U + q`.

Exact where the Gibbs sites' conditional reads no data (the automatic updates). A user's
``gibbs_fn`` that draws a site the likelihood reads changes the data's terms too, which
:math:`q` does not hold; an interwoven sweep moves the children, and none is set there.
"""

import jax
import jax.numpy as jnp
from numpyro import handlers
from numpyro.infer.util import potential_energy

from numpyro_sgrld.core.integrator_base import PendingKick
from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.data.subsample import as_jax_array, placeholder_plates
from numpyro_sgrld.sampler import decentring

__all__ = ["armed", "carried", "moved", "position", "prior_gradient", "ratios"]


def prior_gradient(model, integrator, plates):
    """``(z, model_args, model_kwargs) -> grad``: the gradient in the SG kernel's unconstrained
    sites ``z`` of ``model``'s potential without its sites in the subsample ``plates``, where
    ``integrator`` carries a closing half kick (:class:`PendingKick`); ``None`` elsewhere."""
    if trait(integrator, PendingKick) is None:
        return None
    names = {p.name for p in plates}

    def hidden(msg):
        return msg["type"] == "sample" and any(
            f.name in names for f in msg.get("cond_indep_stack", ()))

    priors = placeholder_plates(handlers.block(model, hide_fn=hidden))

    def gradient(z, model_args, model_kwargs):
        # as arrays: the placeholder indices are traced, and numpy data cannot take them
        args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
        return jax.grad(lambda x: potential_energy(priors, args, kwargs, x))(z)

    return gradient


def moved(sg_state, sites, params, curvature):
    """``sg_state`` with its decentred sites (``z`` and ``proposal``) set so that the
    centred ones are at ``sites`` under ``params`` (``{site: (loc, scale)}``) and
    ``curvature``."""
    new = decentring.decentred(sites, params, curvature)
    chain = sg_state.chain
    chain = chain._replace(z={**chain.z, **new},
                           proposal=None if chain.proposal is None else {**chain.proposal, **new})
    return sg_state._replace(chain=chain)


def _with_closing(sg_state, closing):
    chain = sg_state.chain
    integrator = chain.sampler_state.integrator._replace(closing=closing)
    return sg_state._replace(chain=chain._replace(
        sampler_state=chain.sampler_state._replace(integrator=integrator)))


def armed(sg_state, kernel):
    """``(sg_state, gradient)``: where the SG ``kernel``'s integrator carries a closing half
    kick, its state with :math:`r = 1, q = 0` and :func:`prior_gradient` of its model; else
    both as they are and ``None``."""
    gradient = prior_gradient(kernel.model, kernel.integrator, kernel.subsample_plates)
    if gradient is None:
        return sg_state, None
    z = sg_state.chain.z
    return _with_closing(sg_state, (jax.tree.map(jnp.ones_like, z),
                                    jax.tree.map(jnp.zeros_like, z))), gradient


def ratios(before, after, curvature):
    r"""``{decentred site: c_old / c_new}`` from the decentred sites' ``(loc, scale)`` before
    and after a sweep, and their curvature :math:`F`."""
    return {s + decentring.SUFFIX: decentring.spread(before[s][1], curvature[s])
            / decentring.spread(scale, curvature[s]) for s, (_, scale) in after.items()}


def position(sg_state):
    """Where the SG state's next step starts: its ``proposal`` (``check_proposal``), else
    ``z``."""
    chain = sg_state.chain
    return chain.z if chain.proposal is None else chain.proposal


def carried(after, before, ratio, gradient, gibbs_before, gibbs_after):
    """``after`` (the SG state a sweep left) with the closing half kick of the potential the
    last step ended in (module docstring): ``before`` the SG state before the sweep,
    ``ratio`` from :func:`ratios`, ``gradient(z, gibbs)`` the potential's gradient without
    the data's terms (:func:`prior_gradient`) under the Gibbs sites ``gibbs``."""
    x_old, x_new = position(before), position(after)
    r = {k: ratio[k] if k in ratio else jnp.ones_like(v) for k, v in x_new.items()}
    old, new = gradient(x_old, gibbs_before), gradient(x_new, gibbs_after)
    return _with_closing(after, (r, {k: old[k] - r[k] * new[k] for k in x_new}))
