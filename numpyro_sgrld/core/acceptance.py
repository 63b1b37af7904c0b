r"""The acceptance policy: what is checked on every step, and what a non-finite step does.

A stochastic-gradient step is never accepted or rejected for statistical reasons (there is no
Metropolis test); it is *rejected* when it cannot be used, and the chain then stays where it
was, with the step counted (``SGState.num_rejected``) and flagged (``SGState.diverging``):

- the potential, the gradient, its squared norm or the step size is not finite, or the step
  size is not positive (:func:`usable`; the squared norm is computed anyway for the
  ``grad_norm`` field, so this costs nothing);
- the potential, the gradient or an entry at the proposed position is not finite (a factor
  wall, a log of a negative number). With ``check_proposal`` (the default) the next step
  checks it (:func:`accept_pending`): its gradient's estimate brings the potential there on
  its own minibatch, so the check costs no forward pass; until then the proposal is held
  apart from the chain's position (``SGState.proposal``), and the chain goes back to that
  position if it fails. Without ``check_proposal`` only the proposal's entries are checked,
  at once (:func:`accept`);
- the kernel's new state is not finite (:func:`~numpyro_sgrld.core.tree.tree_all_finite`).
"""

from typing import NamedTuple

import jax.numpy as jnp

from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.core.tree import tree_all_finite, tree_where

__all__ = ["Averages", "averages_gradient", "usable", "accept", "accept_pending"]


class Averages(NamedTuple):
    r"""A metric's or an integrator's trait (:mod:`numpyro_sgrld.core.traits`): its state is made
    only of moving averages of :math:`\bar g` or :math:`\bar g\odot\bar g` (and integer
    counters), so it stays finite whenever the gradient's squared norm is finite: every new
    entry is a convex combination of a finite old entry and a finite statistic (for an
    integrator: a state that a finite gradient keeps finite, such as SGHMC's damped
    momentum). Without it (e.g. roots of an eigendecomposition) the new state is checked on
    every step (:func:`accept`)."""


def averages_gradient(*pieces):
    """Whether every one of ``pieces`` (a metric, an integrator) has :class:`Averages`."""
    return all(trait(p, Averages) is not None for p in pieces)


def usable(value, grad_norm, step_size):
    """Whether the step's inputs can be used at all (a scalar known before the update)."""
    return jnp.isfinite(grad_norm) & jnp.isfinite(value) & (step_size > 0) & jnp.isfinite(step_size)


def accept(usable, z, landed, sampler_state, old_sampler_state, state_averages_gradient):
    r"""Whether a step is accepted, and the kernel state to keep (see the module docstring).

    When the kernel state is made of moving averages of :math:`\bar g` or
    :math:`\bar g\odot\bar g` (``state_averages_gradient``: RMSprop, Monge, Adam, the
    identity), a usable gradient cannot make it non-finite, since every new entry is a convex
    combination of a finite old entry and a finite statistic. Then the state is selected on
    ``usable`` alone, a scalar known before the update, so XLA fuses the selection into the
    update itself instead of reading the new state once more for a check and again for the
    selection (on the 478k parameters of the 784-400-400-10 MLP that is two passes over the
    state per step). The price: a step rejected only because its new *position* overflowed
    keeps its statistics update, which comes from a gradient evaluated at the position the
    chain stays at.
    """
    if state_averages_gradient:
        ok = usable & landed & tree_all_finite(z)
        return ok, tree_where(usable, sampler_state, old_sampler_state)
    ok = usable & landed & tree_all_finite(z) & tree_all_finite(sampler_state)
    return ok, tree_where(ok, sampler_state, old_sampler_state)


def accept_pending(ready, landed, sampler_state, old_sampler_state, state_averages_gradient):
    r"""Whether a step is accepted, and the kernel state to keep, when its proposal's
    entries and potential are checked by the next step (``check_proposal``, see the module
    docstring): ``ready`` is whether the step's start passed that check and the step's inputs
    are usable, ``landed`` whatever is checked of the proposal at once (``True``, or the
    warm-up's check on the same minibatch). The kernel state is selected as in
    :func:`accept`."""
    if state_averages_gradient:
        return ready & landed, tree_where(ready, sampler_state, old_sampler_state)
    ok = ready & landed & tree_all_finite(sampler_state)
    return ok, tree_where(ok, sampler_state, old_sampler_state)
