r"""One step of a stochastic-gradient kernel as a pure function ``(state, inputs) -> (state,
info)``, knowing nothing of NumPyro:

1. estimate :math:`\nabla\hat U` at the state's position on the step's minibatch (the
   :class:`~numpyro_sgrld.gradients.GradientEstimator`);
2. the composed step: metric, Γ correction, integrator
   (:func:`numpyro_sgrld._composition.transition_with_preconditioner`);
3. the acceptance policy (:mod:`numpyro_sgrld._acceptance`): a step that cannot be used is
   rejected and the chain stays where it was.

What does not change during a run is the kernel's :class:`Spec`; what changes from step to step
besides the state is :class:`StepInputs`. The warm-up is a transformation around this step
(:func:`numpyro_sgrld.warmup.steps.transition`), and :class:`numpyro_sgrld.SGMCMC` hosts both
for NumPyro (model set-up, minibatch indices, chains, postprocessing).
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_sgrld import equipartition as equi
from numpyro_sgrld._acceptance import accept, accept_pending, usable
from numpyro_sgrld._composition import Sampler, transition_with_preconditioner
from numpyro_sgrld._state import SGState
from numpyro_sgrld._tree import tree_all_finite, tree_norm, tree_where
from numpyro_sgrld.gradients import Estimate, GradientEstimator
from numpyro_sgrld.metrics import Preconditioner, StepContext

__all__ = ["Spec", "StepInputs", "StepInfo", "context", "start", "step"]


class Spec(NamedTuple):
    """What a kernel's step needs that does not change during a run.

    - **sampler** – the composed :class:`~numpyro_sgrld._composition.Sampler` (metric,
      integrator, correction).
    - **gradient** – the :class:`~numpyro_sgrld.gradients.GradientEstimator`.
    - **temperature** – :math:`T`.
    - **check_proposal** – whether the potential at the proposal must be finite.
    - **target_bias** – :math:`\\delta` of the step-size adaptation (read in warm-up only).
    - **step_size** – ``(i, adaptation) -> h_i``: the schedule's step, or the adaptation's.
    - **draw** – ``(key, batch_state) -> (idx, batch_state)``: a minibatch's indices.
    - **num_data**, **steps_per_epoch** – for the :class:`~numpyro_sgrld.metrics.StepContext`.
    """

    sampler: Sampler
    gradient: GradientEstimator
    temperature: float
    check_proposal: bool
    target_bias: float
    step_size: Callable
    draw: Callable
    num_data: int = 1
    steps_per_epoch: int = 1


class StepInputs(NamedTuple):
    """One step's inputs besides the state.

    - **target** – the :class:`~numpyro_sgrld.gradients.Target` (the minibatch potential).
    - **idx** – this step's minibatch indices; **batch_state** – the minibatch sampler's
      state after drawing them.
    - **key** – the step's random key; **next_key** – the state's key for the next step.
    - **check_now** – ``None``, or a scalar bool (the same for vectorised chains): whether to
      check the proposal's minibatch potential on this step's minibatch at once (one more
      forward pass; the warm-up does, to reject steps that climb too steeply).
    - **reject** – ``None``, or ``(value, new_value) -> bool``: with ``check_now``, a further
      reason to reject the step, from the minibatch potential at its start and at its
      proposal.
    """

    target: Any
    idx: Any
    batch_state: Any
    key: Any
    next_key: Any
    check_now: Any = None
    reject: Callable | None = None


class StepInfo(NamedTuple):
    """What a step computed on the way that the warm-up reads: the gradient's
    :class:`~numpyro_sgrld.gradients.Estimate`, the step's
    :class:`~numpyro_sgrld.metrics.Preconditioner`, whether the step was accepted, and the
    step size it used."""

    estimate: Estimate
    preconditioner: Preconditioner
    accepted: Any
    step_size: Any


def context(spec, i, aux):
    """The :class:`~numpyro_sgrld.metrics.StepContext` of step ``i``."""
    return StepContext(num_data=spec.num_data, steps_per_epoch=spec.steps_per_epoch, step=i,
                       aux=aux or None)


def start(state):
    """Where the next step starts: the pending :attr:`~numpyro_sgrld._state.SGState.proposal`,
    or ``z`` without one."""
    return state.z if state.proposal is None else state.proposal


def step(spec, state, inputs):
    r"""One step from ``state`` (an :class:`~numpyro_sgrld._state.SGState`):
    ``(new state, StepInfo)``.

    .. math::
        \theta' = \mathrm{step}\big(\theta,\ \nabla\hat U_B(\theta),\ D(\theta)\big),

    from :math:`\theta` = :func:`start`, used when :math:`\hat U_B(\theta)`,
    :math:`\nabla\hat U_B(\theta)`, :math:`h`, :math:`\theta'` and the new kernel state are
    finite; else :math:`\theta` is kept and the step counted as rejected.

    With ``spec.check_proposal`` the potential at :math:`\theta'` must be finite too. Where
    the state holds no ``proposal`` (the cyclical presets, whose draws must be sampling-stage
    states) it is checked at once on the same minibatch :math:`B` (one more forward pass).
    Otherwise it is checked by the next step, whose gradient at :math:`\theta'` comes with
    the potential there, on that step's minibatch (no further forward pass): :math:`\theta'`
    is held as the state's ``proposal`` and becomes ``z`` once its potential, gradient and
    entries are found finite; if they are not, the chain goes back to ``z`` and that step is
    rejected. With ``inputs.check_now`` (warm-up), the potential at :math:`\theta'` on the
    same minibatch :math:`B` is checked at once as well, with ``inputs.reject``."""
    target, idx = inputs.target, inputs.idx
    position = start(state)
    est = spec.gradient.estimate(position, idx, state.gradient_state, target)
    step_size = spec.step_size(state.i, state.adaptation)
    z, sampler_state, preconditioner = transition_with_preconditioner(
        spec.sampler, inputs.key, position, state.sampler_state, est.grad, est.oracle,
        step_size, spec.temperature, context(spec, state.i, est.aux),
    )
    grad_norm = tree_norm(est.grad)
    ready = usable(est.value, grad_norm, step_size)
    averages = spec.sampler.state_averages_gradient
    if state.proposal is None:
        landed = True
        if spec.check_proposal:  # at once, on this minibatch: one more forward pass
            landed = _lands(target, idx, est, _when(inputs.check_now, inputs.reject), z)
        ok, sampler_state = accept(ready, z, landed, sampler_state, state.sampler_state,
                                   averages)
        z, proposal = tree_where(ok, z, state.z), None
    else:
        # the previous step's proposal is verified here: its potential and gradient came with
        # this step's estimate, and its entries are read once more from memory
        ready = ready & tree_all_finite(position)
        here = tree_where(ready, position, state.z)
        landed = True
        if inputs.check_now is not None:
            # the proposal's entries too: accept_pending leaves them to the next step
            landed = jax.lax.cond(
                inputs.check_now,
                lambda z: _lands(target, idx, est, inputs.reject, z) & tree_all_finite(z),
                lambda z: jnp.ones((), bool), z)
        ok, sampler_state = accept_pending(ready, landed, sampler_state, state.sampler_state,
                                           averages)
        z, proposal = here, tree_where(ok, z, here)
    checked, reading = _equipartition(spec, state, position, est.grad, ready)
    new = SGState(
        i=state.i + 1,
        z=z,
        sampler_state=sampler_state,
        batch_state=inputs.batch_state,
        potential_energy=est.value,
        grad_norm=grad_norm,
        step_size=step_size,
        diverging=~ok,
        rng_key=inputs.next_key,
        num_rejected=state.num_rejected + (~ok).astype(jnp.int32),
        gradient_state=est.state,
        adaptation=state.adaptation,
        warmup=state.warmup,
        monitor=state.monitor,
        proposal=proposal,
        equipartition=checked,
        configurational_temperature=reading,
    )
    return new, StepInfo(est, preconditioner, ok, step_size)


def _equipartition(spec, state, position, grad, ready):
    """The equipartition sums after this step (:mod:`numpyro_sgrld.equipartition`), with the
    step's own reading; unchanged at temperature 0 (an exploration stage's descent)."""
    acc = state.equipartition
    if acc is None or (isinstance(spec.temperature, (int, float)) and spec.temperature == 0):
        return acc, state.configurational_temperature
    new, products = equi.update(acc, position, grad, ready, state.i)
    size = sum(x.size for x in jax.tree.leaves(position))
    return new, jnp.sum(products) / (size * spec.temperature)


def _when(flag, reject):
    """``reject`` applied only where ``flag`` (``None``: never)."""
    if reject is None or flag is None:
        return None
    return lambda value, new_value: flag & reject(value, new_value)


def _lands(target, idx, est, reject, z):
    """Whether the minibatch potential at ``z`` is finite (and, with ``reject``, not rejected
    against the potential at the step's start); ``z``'s entries are checked by the caller."""
    value = target.potential(z, idx)[0]
    landed = jnp.isfinite(value)
    if reject is not None:
        start_value = est.value if est.batch_value is None else est.batch_value
        landed = landed & ~reject(start_value, value)
    return landed
