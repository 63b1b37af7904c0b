r"""What :class:`~numpyro_sgrld.SGGibbs` learns in warm-up, each a function of one chain's
state: the decentred children's data curvature :math:`F` and the step's share of
``target_bias`` it sets (every warm-up step), and whether the control variates still pay once
warm-up's approach has brought the chain to the posterior's bulk (one step; a network's are
turned off there).

``centred(position, gibbs, curvature) -> (sites, params)`` gives the SG sites at the chain's
position, constrained and centred, and the decentred children's ``(loc, scale)`` there.
"""

import jax.numpy as jnp
from jax import random
from numpyro.infer.hmc_gibbs import conditioned, with_conditioning

from numpyro_sgrld.sampler import decentring, gibbs_bias
from numpyro_sgrld.sampler import gibbs_control_variates as gibbs_cv
from numpyro_sgrld.sampler import gibbs_kick as kick

__all__ = ["learn_curvature", "retest"]


def learn_curvature(state, gibbs, *, centred, model, children, model_args, model_kwargs):
    """One warm-up step's learning: :math:`F` averaged with one more of Hutchinson's
    estimates at the chain's position (of ``model``'s, the user's, ``children``), clipped at
    0, the decentred sites moved to hold the centred ones; the weakly informed children's
    count averaged at the same rate, and the step's share of ``target_bias`` set from it."""
    sg_state = state.sg_state
    sites, params = centred(kick.position(sg_state), gibbs, state.curvature)
    key, rng_key = random.split(state.rng_key)
    estimate = decentring.curvature_estimate(
        conditioned(model), children, sites, key, model_args,
        with_conditioning(model_kwargs or {}, gibbs))
    rate = jnp.maximum(decentring.CURVATURE_RATE, 1.0 / sg_state.i)
    curvature = {s: jnp.maximum((1 - rate) * f + rate * estimate[s], 0.0)
                 for s, f in state.curvature.items()}
    sg_state, counted = gibbs_bias.learnt(
        kick.moved(sg_state, sites, params, curvature), state.children, rate, params,
        curvature)
    return state._replace(sg_state=sg_state, rng_key=rng_key, curvature=curvature,
                          children=counted)


def retest(state, gibbs, *, centred, model, model_args, model_kwargs, network=False):
    """The chain's control variates kept where they pay at its position
    (:func:`~numpyro_sgrld.sampler.gibbs_control_variates.retested`, the children's
    :math:`c` at the learnt curvature); the chain's key is read, not advanced. A network's
    (``network``: the SG kernel has sites a network bridge marked; without warm-up, at step
    0) are turned off: its posterior lies far from the mode, where they raise the gradient's
    noise, and a chain that passed the test near the centre left the posterior later
    (:func:`~numpyro_sgrld.sampler.gibbs_control_variates.retested`)."""
    if network:
        return state._replace(centre=state.centre._replace(
            on=jnp.zeros_like(state.centre.on)))
    sites, params = centred(kick.position(state.sg_state), gibbs, state.curvature)
    spreads = {s: decentring.spread(p[1], state.curvature[s]) for s, p in params.items()}
    return state._replace(centre=gibbs_cv.retested(
        state.centre, model, sites, gibbs, spreads, random.fold_in(state.rng_key, 3),
        model_args, model_kwargs))
