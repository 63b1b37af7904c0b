r"""A stochastic-gradient algorithm as a value: :func:`compose` a metric, an integrator, a
gradient estimator and optionally the Γ correction into an :class:`Algorithm` whose
``init`` gives a chain's first :class:`~numpyro_sgrld.core.state.ChainState` and whose
``step(state, key, target, idx, step_size) -> (state, info)`` is one step, knowing nothing of
NumPyro:

1. estimate :math:`\nabla\hat U` at the state's position on the step's minibatch (the
   :class:`~numpyro_sgrld.core.gradients.GradientEstimator`);
2. the composed step: metric, Γ correction, integrator
   (:func:`numpyro_sgrld.core.composition.transition_with_preconditioner`);
3. the acceptance policy (:mod:`numpyro_sgrld.core.acceptance`): a step that cannot be used is
   rejected and the chain stays where it was.

The step size and the minibatch (``idx``, drawn by ``target.draw``) are the step's
arguments, as in BlackJAX's ``SamplingAlgorithm``: whoever drives the step chooses them; the
chain's state holds neither. The warm-up (:mod:`numpyro_sgrld.warmup`) chooses the step size
around the step, in its own :class:`~numpyro_sgrld.warmup.WarmupState`, and adds its proposal
check by wrapping the algorithm (:func:`checked`); :class:`numpyro_sgrld.SGMCMC` hosts both
for NumPyro (model set-up, chains, postprocessing).
"""

from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import random

from numpyro_sgrld.core.acceptance import accept, accept_pending, usable
from numpyro_sgrld.core.checks import flag, real
from numpyro_sgrld.core.composition import (
    Sampler,
    build_sampler,
    init_sampler,
    transition_with_preconditioner,
)
from numpyro_sgrld.core.gradients import (
    Estimate,
    GradientEstimator,
    hessian_diagonal_estimate,
    minibatch,
)
from numpyro_sgrld.core.metrics import Preconditioner, StepContext
from numpyro_sgrld.core.state import ChainState
from numpyro_sgrld.core.tree import tree_all_finite, tree_dot, tree_norm, tree_where

__all__ = ["Algorithm", "ProposalCheck", "Start", "StepInfo", "checked", "compose", "context",
           "start", "step"]


class Algorithm(NamedTuple):
    """A stochastic-gradient algorithm (:func:`compose`): its pieces, and as methods its
    ``init`` (:meth:`begin`, then :meth:`init`) and its :meth:`step`.

    - **sampler** – the composed :class:`~numpyro_sgrld.core.composition.Sampler` (metric,
      integrator, correction).
    - **gradient** – the :class:`~numpyro_sgrld.core.gradients.GradientEstimator`.
    - **temperature** – :math:`T`.
    - **check_proposal** – whether the potential at the proposal must be finite.
    - **check** – ``None``, or a further :class:`ProposalCheck` of each proposal on its own
      minibatch (the warm-up's: :func:`checked`).
    """

    sampler: Sampler
    gradient: GradientEstimator
    temperature: float = 1.0
    check_proposal: bool = True
    check: Any = None

    def begin(self, key, z, target, idx):
        """What a chain's start needs before its step size is known: :func:`begin`."""
        return begin(self, key, z, target, idx)

    def init(self, start, target, step_size, proposal_next_step):
        """The chain's first :class:`~numpyro_sgrld.core.state.ChainState`: :func:`init`."""
        return init(self, start, target, step_size, proposal_next_step)

    def step(self, state, key, target, idx, step_size, site_scale=None):
        """One step: :func:`step`."""
        return step(self, state, key, target, idx, step_size, site_scale)


def compose(metric, integrator, gradient=None, correction=None, *, temperature=1.0,
            check_proposal=True):
    """The :class:`Algorithm` of a metric (:mod:`numpyro_sgrld.core.metrics`), an integrator
    (:mod:`numpyro_sgrld.core.integrators`), a gradient estimator
    (:mod:`numpyro_sgrld.core.gradients`,
    default :func:`~numpyro_sgrld.core.gradients.minibatch`) and the Γ correction (a
    :class:`~numpyro_sgrld.core.correction.Correction` such as
    :func:`~numpyro_sgrld.core.correction.exact`, its name, or ``None``), at temperature
    ``temperature``; pieces that do not fit are refused with the fix."""
    gradient = minibatch() if gradient is None else gradient
    if not isinstance(gradient, GradientEstimator):
        raise TypeError(
            "`gradient` must be a numpyro_sgrld.core.gradients.GradientEstimator such as "
            f"gradients.minibatch() or gradients.control_variates('mode'), got {gradient!r}."
        )
    temperature = real(temperature, "temperature", low=0, hint="1 samples the posterior.")
    return Algorithm(build_sampler(metric, integrator, correction), gradient, temperature,
                     flag(check_proposal, "check_proposal"))


class ProposalCheck(NamedTuple):
    """A check of each proposal on the step's own minibatch, at once (one more forward pass),
    which :func:`checked` adds to an algorithm (the warm-up's, to reject steps that climb too
    steeply):

    - **now** – a scalar bool (the same for vectorised chains): whether to check on this step;
    - **reject** – ``(value, new_value) -> bool``: a further reason to reject the step, from
      the minibatch potential at its start and at its proposal (:func:`step`).
    """

    now: Any
    reject: Callable


def checked(algorithm, now, reject):
    """``algorithm`` whose steps also check each proposal on their own minibatch where ``now``
    (a :class:`ProposalCheck`): the same steps where ``now`` is false."""
    return algorithm._replace(check=ProposalCheck(now, reject))


class Start(NamedTuple):
    """A chain's start before its step size is known (:func:`begin`): the position ``z`` (the
    gradient estimator may move it), the :class:`~numpyro_sgrld.core.gradients.Estimate` there on
    the first minibatch ``idx``, the key of the composed sampler's state, and
    ``curvature()``, a Hessian-diagonal estimate at ``z`` (for a metric's warm start)."""

    z: Any
    estimate: Any
    idx: Any
    key: Any
    curvature: Callable

    def sampler_state(self, algorithm, target, step_size, temperature):
        """The composed sampler's first state for step ``step_size``."""
        return init_sampler(algorithm.sampler, self.key, self.z, self.curvature,
                            context(target, 0, self.estimate.aux), step_size, temperature)


def begin(algorithm, key, z, target, idx):
    """A chain's :class:`Start` at ``z`` on the minibatch ``idx``: the gradient estimator's
    state (which may move the start, ``gradient.start``) and the estimate there."""
    gradient = algorithm.gradient
    gradient_state = gradient.init(z, key, target)
    if gradient.start is not None:
        z = gradient.start(gradient_state, z)
    est = gradient.estimate(z, idx, gradient_state, target)
    curvature = partial(hessian_diagonal_estimate, lambda x, b: target.potential(x, b)[0],
                        z, idx, random.fold_in(key, 2))
    return Start(z, est, idx, key, curvature)


def init(algorithm, start, target, step_size, proposal_next_step):
    """The chain's first :class:`~numpyro_sgrld.core.state.ChainState` from its :class:`Start`,
    its composed sampler's state made for a first step of size ``step_size`` (the state does
    not hold it); ``proposal_next_step`` is whether the next step checks the proposal (the
    state holds one)."""
    z, est = start.z, start.estimate
    return ChainState(
        i=jnp.zeros((), jnp.int32),
        z=z,
        sampler_state=start.sampler_state(algorithm, target, step_size,
                                          algorithm.temperature),
        potential_energy=est.value,
        grad_norm=tree_norm(est.grad),
        diverging=jnp.zeros((), bool),
        num_rejected=jnp.zeros((), jnp.int32),
        gradient_state=est.state,
        proposal=z if proposal_next_step else None,
    )


class StepInfo(NamedTuple):
    """What a step computed on the way, which the warm-up and the diagnostics read: the
    gradient's :class:`~numpyro_sgrld.core.gradients.Estimate`, the step's
    :class:`~numpyro_sgrld.core.metrics.Preconditioner`, whether the step was accepted, the step's
    counter ``i`` (the state's before it), the position it started from (``start``, where the
    estimate's gradient was evaluated) and whether its inputs were usable there (``usable``: a
    rejected start is not counted by the equipartition check)."""

    estimate: Estimate
    preconditioner: Preconditioner
    accepted: Any
    i: Any
    start: Any
    usable: Any


def context(target, i, aux):
    """The :class:`~numpyro_sgrld.core.metrics.StepContext` of step ``i`` on ``target``."""
    return StepContext(num_data=target.num_data, steps_per_epoch=target.steps_per_epoch,
                       step=i, aux=aux or None)


def start(state):
    """Where the next step starts: the pending :attr:`~numpyro_sgrld.core.state.SGState.proposal`,
    or ``z`` without one."""
    return state.z if state.proposal is None else state.proposal


def step(spec, state, key, target, idx, step_size, site_scale=None):
    r"""One step of the :class:`Algorithm` ``spec`` from ``state`` (a
    :class:`~numpyro_sgrld.core.state.ChainState`) with the random ``key``, on the minibatch
    ``idx`` of ``target`` (a :class:`~numpyro_sgrld.core.gradients.Target`), of size ``step_size``
    (:math:`h`): ``(new state, StepInfo)``. ``site_scale`` (``{site: s}``, or ``None``) scales
    the metric of the sites it names (:func:`~numpyro_sgrld.core.composition.site_scaled`).

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
    rejected. With ``spec.check`` (a :class:`ProposalCheck`, the warm-up's), where its ``now``
    holds, the potential at :math:`\theta'` on the same minibatch :math:`B` is checked at once
    as well, with its ``reject``."""
    position = start(state)
    est = spec.gradient.estimate(position, idx, state.gradient_state, target)
    check = spec.check
    z, sampler_state, preconditioner = transition_with_preconditioner(
        spec.sampler, key, position, state.sampler_state, est.grad, est.oracle,
        step_size, spec.temperature, context(target, state.i, est.aux), site_scale,
    )
    grad_norm = tree_norm(est.grad)
    ready = usable(est.value, grad_norm, step_size)
    averages = spec.sampler.state_averages_gradient
    if state.proposal is None:
        landed = True
        if spec.check_proposal:  # at once, on this minibatch: one more forward pass
            landed = _lands(target, idx, est, _when(check), z, position)
        ok, sampler_state = accept(ready, z, landed, sampler_state, state.sampler_state,
                                   averages)
        z, proposal = tree_where(ok, z, state.z), None
    else:
        # the previous step's proposal is verified here: its potential and gradient came with
        # this step's estimate, and its entries are read once more from memory
        ready = ready & tree_all_finite(position)
        here = tree_where(ready, position, state.z)
        landed = True
        if check is not None:
            # the proposal's entries too: accept_pending leaves them to the next step
            landed = jax.lax.cond(
                check.now,
                lambda z: (_lands(target, idx, est, check.reject, z, position)
                           & tree_all_finite(z)),
                lambda z: jnp.ones((), bool), z)
        ok, sampler_state = accept_pending(ready, landed, sampler_state, state.sampler_state,
                                           averages)
        z, proposal = here, tree_where(ok, z, here)
    new = ChainState(
        i=state.i + 1,
        z=z,
        sampler_state=sampler_state,
        potential_energy=est.value,
        grad_norm=grad_norm,
        diverging=~ok,
        num_rejected=state.num_rejected + (~ok).astype(jnp.int32),
        gradient_state=est.state,
        proposal=proposal,
    )
    return new, StepInfo(est, preconditioner, ok, state.i, position, ready)


def _when(check):
    """The :class:`ProposalCheck` ``check``'s ``reject`` applied only where its ``now``
    (``None``: never)."""
    if check is None:
        return None
    return lambda value, new_value: check.now & check.reject(value, new_value)


def _lands(target, idx, est, reject, z, position):
    r"""Whether the minibatch potential at ``z`` is finite and, with ``reject``, not rejected:
    a step is rejected where the minibatch potential rose too much both from the step's start
    ``position`` and above its first-order prediction
    :math:`\hat U_B(\theta) + \nabla\hat U_B(\theta)^\top(z - \theta)`, so for the step's
    own curvature (an overshoot), not for the minibatch's slope, whose noise grows as
    :math:`\sqrt{N/n}`; ``z``'s entries are checked by the caller."""
    value = target.potential(z, idx)[0]
    landed = jnp.isfinite(value)
    if reject is not None:
        start_value = est.value if est.batch_value is None else est.batch_value
        grad = est.grad if est.shift is None else jax.tree.map(jnp.subtract, est.grad, est.shift)
        slope = tree_dot(grad, jax.tree.map(jnp.subtract, z, position))
        landed = landed & ~(reject(start_value, value) & reject(start_value + slope, value))
    return landed
