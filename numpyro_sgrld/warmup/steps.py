r"""The warm-up as one ``(init, update)`` pair around the algorithm's step, composed of its
pieces (:mod:`numpyro_sgrld.warmup.pieces`), as NumPyro's ``warmup_adapter`` composes NUTS's:
:func:`init_warmup` gives the one :class:`WarmupState` (the pieces' states, outside the
chain's :class:`~numpyro_sgrld.core.state.ChainState`), :func:`update_warmup` runs every
piece's update after a step and, at a slow window's end, every piece's ``final``
(:func:`window_end`), putting what each returns where the sampler uses it. :func:`transition`
is a whole transition: its keys, its minibatch (``target.draw``), the step
(:meth:`Algorithm.step <numpyro_sgrld.core.algorithm.Algorithm>`) at the state's step size, where
there is a warm-up the warm-up's update, and the next step's size (the :class:`Setting`'s
rule). What the warm-up does, in one paragraph: ``docs/step_size.md``; what
``step_size=None`` turns on: :mod:`numpyro_sgrld.warmup.choices`.
"""

from contextlib import nullcontext
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import random

import numpyro_sgrld.warmup.pieces as pieces
from numpyro_sgrld.core import equipartition as equi
from numpyro_sgrld.core.algorithm import checked, start
from numpyro_sgrld.core.gradients import shared_flag
from numpyro_sgrld.core.integrator_base import Overdamp, Settle
from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.core.tree import tree_where
from numpyro_sgrld.warmup.adaptation import too_steep
from numpyro_sgrld.warmup.pieces import Begin, Moment, Setting
from numpyro_sgrld.warmup.schedule import first_window_start

__all__ = ["Setting", "WarmupState", "init_warmup", "settled", "transition", "update_warmup",
           "window_end"]


class WarmupState(NamedTuple):
    """The warm-up's state (``SGState.warmup``; ``None`` with a given step size), one field
    per piece that has one:

    - **preconditioner** – the current slow window's statistics
      (:class:`~numpyro_sgrld.warmup.PreconditionerWarmup`), or ``None`` where no metric is
      learnt (then there are no windows);
    - **step** – the step-size adaptation's
      :class:`~numpyro_sgrld.warmup.adaptation.StepSizeState`.
    """

    preconditioner: Any
    step: Any

    @property
    def num_warmup(self):
        """The warm-up's length (held by the step size's state)."""
        return self.step.num_warmup


def init_warmup(setting, key, start_, target, num_warmup):
    """The :class:`WarmupState` at the chain's :class:`~numpyro_sgrld.core.algorithm.Start`: each
    piece's ``init``, with the composed sampler's state at step 1."""
    sampler_state = start_.sampler_state(setting.algorithm, target, 1.0,
                                         setting.algorithm.temperature)
    begin = Begin(start_, target, key, num_warmup, sampler_state)
    return WarmupState(preconditioner=pieces.preconditioner_init(setting, begin),
                       step=pieces.step_size_init(setting, begin))


def update_warmup(setting, moment, warm, chain, key_end):
    """``(warm, chain)`` after a warm-up step of size ``moment.step_size``: each piece's
    ``update`` (the preconditioner's statistics, the step, the momentum rescaled to it), then,
    on the step that ends a slow window, :func:`window_end`."""
    stats = warm.preconditioner
    if stats is not None:
        stats = pieces.preconditioner_update(setting, moment, stats, start(chain))
    step = pieces.step_size_update(setting, moment, warm.step)
    integrator = pieces.momentum_update(setting, chain.sampler_state.integrator,
                                        step.step_size / moment.step_size)
    warm = WarmupState(stats, step)
    chain = chain._replace(sampler_state=chain.sampler_state._replace(integrator=integrator))
    if stats is None:  # no metric learnt: no windows
        return warm, chain
    # one flag for the lockstep chains (the window ends are per-chain state): a batched
    # predicate would run the window's end, a full-data Hessian, on every warm-up step
    target = moment.target
    now = shared_flag(jnp.any(target.step + 1 == stats.window_ends), target.axis_name)
    return jax.lax.cond(now, partial(window_end, setting, moment, key=key_end),
                        lambda *a: a, warm, chain)


def window_end(setting, moment, warm, chain, key):
    """``(warm, chain)`` at a slow window's end: each piece's ``final`` in turn, given what the
    ones before returned: the learnt metric (:func:`~numpyro_sgrld.warmup.pieces.
    preconditioner_final`) goes into the chain's metric state; the control variates' new
    state (:func:`~numpyro_sgrld.warmup.pieces.control_variates_final`) into the chain's
    gradient estimator's, the chain moved with a centre moved towards the mode; the step
    measured again there in the new metric (:func:`~numpyro_sgrld.warmup.pieces.
    step_size_final`); the integrator restarted at it
    (:func:`~numpyro_sgrld.warmup.pieces.momentum_final`)."""
    target, est = moment.target, moment.info.estimate
    z = start(chain)
    learnt = pieces.preconditioner_final(setting, warm.preconditioner,
                                         chain.sampler_state.metric, z, est, target,
                                         moment.before.i)
    chain = chain._replace(sampler_state=chain.sampler_state._replace(
        metric=learnt.metric_state))
    if setting.algorithm.gradient.activate is not None:
        gradient_state = pieces.control_variates_final(
            setting, chain.gradient_state, learnt, z, target, key, learnt.stats.window_ends[0])
        moved, centre = pieces.moved_centre(gradient_state, chain.gradient_state,
                                            learnt.centre)

        def to_centre(x):
            return None if x is None else tree_where(moved, centre, x)

        z = to_centre(z)
        chain = chain._replace(z=to_centre(chain.z), proposal=to_centre(chain.proposal),
                               gradient_state=gradient_state)
    step = pieces.step_size_final(setting, warm.step, z, learnt.preconditioner,
                                  chain.gradient_state, target, moment.idx, key)
    integrator = pieces.momentum_final(setting, z, key, step.step_size,
                                       chain.sampler_state.integrator)
    chain = chain._replace(sampler_state=chain.sampler_state._replace(integrator=integrator))
    return WarmupState(learnt.stats, step), chain


def transition(setting, state, target, adapting=None):
    """One transition from ``state`` (an :class:`~numpyro_sgrld.core.state.SGState`): its keys
    (three, five with a warm-up: a split's cost grows with its keys), its minibatch, the step
    size, the step and, with a warm-up (``state.warmup``), during it: the check of each
    proposal on its own minibatch and the rejection of steps that climb too steeply, and the
    warm-up's update (:func:`update_warmup`). ``adapting`` is whether this is a warm-up step
    (given unbatched for vectorised chains, so that the warm-up's branches stay branches;
    ``False`` in Python for a step known to come after warm-up, which then has none of them:
    the same step as with a traced ``False``)."""
    keys = random.split(state.rng_key, 3 if state.warmup is None else 5)
    idx, batch_state = target.draw(keys[1], state.batch_state)
    reading = nullcontext()
    if setting.ahead is not None:
        # the next transition splits keys[0] the same way and draws from the same batching state
        next_idx, _ = target.draw(random.split(keys[0], len(keys))[1], batch_state)
        reading = setting.ahead(idx, next_idx)
    with reading:
        return _transition(setting, state, target, adapting, keys, idx, batch_state)


def _transition(setting, state, target, adapting, keys, idx, batch_state):
    """:func:`transition` from its ``keys``, minibatch ``idx`` and new ``batch_state``."""
    algorithm, warm, chain = setting.algorithm, state.warmup, state.chain
    key_next, _, key_step, *keys = keys
    # the rule's value, not the state's copy of it: a given step stays a constant the
    # compiler folds into the step's arithmetic
    step_size = setting.step_size(chain.i, warm, state.step_size)
    site_scale = None if setting.site_scale is None else setting.site_scale(chain.i, warm)
    if warm is None or adapting is False:  # after warm-up, known when traced: no branches
        new, info = algorithm.step(chain, key_step, target, idx, step_size, site_scale)
        if warm is None:
            new = settled(algorithm, new, state.equipartition)
        return _record(setting, state, new, info, batch_state, key_next, warm)
    if adapting is None:
        adapting = chain.i < warm.num_warmup
    checking = checked(algorithm, adapting,
                       lambda a, b: too_steep(a, b, algorithm.temperature))
    new, info = checking.step(chain, key_step, target, idx, step_size, site_scale)
    key_curvature, key_end = random.split(keys[1])
    moment = Moment(chain, info, step_size, target, idx, batch_state, keys[0], key_curvature,
                    warm.num_warmup)
    warm, new = jax.lax.cond(
        adapting, lambda w, c: update_warmup(setting, moment, w, c, key_end),
        lambda *a: a, warm, new)
    new = overdamped(algorithm, new, info.preconditioner, random.fold_in(keys[1], 1),
                     first_window_start(warm.num_warmup))
    new = settled(algorithm, new, state.equipartition)
    return _record(setting, state, new, info, batch_state, key_next, warm)


def _record(setting, state, chain, info, batch_state, key, warm):
    """The host's record after a step: the new ``chain``, the next step's size (the rule's;
    after warm-up the frozen one, a cyclical preset's its cosine), the minibatch sampler's
    state, the next ``key``, the warm-up's state ``warm`` and the equipartition check's sums
    with the step observed (:func:`~numpyro_sgrld.core.equipartition.observe`)."""
    algorithm = setting.algorithm
    sums, reading = equi.observe(state.equipartition, state.configurational_temperature,
                                 info, algorithm.temperature)
    return state._replace(chain=chain,
                          step_size=setting.step_size(chain.i, warm, state.step_size),
                          batch_state=batch_state, rng_key=key, warmup=warm,
                          equipartition=sums, configurational_temperature=reading)


def overdamped(algorithm, new, preconditioner, key, approach):
    """``new`` with a fresh momentum while the chain is in warm-up's approach (its first
    ``approach`` steps; :class:`~numpyro_sgrld.core.integrators.Overdamp`)."""
    overdamp = trait(algorithm.sampler.integrator, Overdamp)
    if overdamp is None:
        return new
    integrator = new.sampler_state.integrator
    fresh = overdamp.fn(integrator, key, algorithm.temperature, preconditioner)
    integrator = jax.tree.map(lambda a, b: jnp.where(new.i <= approach, a, b), fresh,
                              integrator)
    return new._replace(sampler_state=new.sampler_state._replace(integrator=integrator))


def settled(algorithm, new, acc):
    """The chain ``new`` with the integrator's state restarted halfway through warm-up and
    settled at its end (:class:`~numpyro_sgrld.core.integrators.Settle`): in the state from which
    the equipartition check (its sums ``acc``) starts counting."""
    settle = trait(algorithm.sampler.integrator, Settle)
    if settle is None or acc is None:
        return new
    integrator = new.sampler_state.integrator
    for at, fn in ((acc.start // 2, settle.restart),
                   (acc.start, lambda s: settle.fn(s, algorithm.temperature))):
        # a select over the leaves the trait changes (its thermostat's scalars), not over
        # the leaves it returns unchanged (the momentum, the size of the position)
        integrator = jax.tree.map(
            lambda a, b, at=at: b if a is b else jnp.where(new.i == at, a, b),
            fn(integrator), integrator)
    return new._replace(sampler_state=new.sampler_state._replace(integrator=integrator))
