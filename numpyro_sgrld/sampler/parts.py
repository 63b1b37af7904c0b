"""What :class:`~numpyro_sgrld.SGMCMC` uses besides its methods: its arguments' checks, the
gradient estimator its arguments name, the step-size rule, the
:class:`~numpyro_sgrld.core.gradients.Target` a step evaluates, a chain's first state, the
minibatch draw (sharded with ``data_parallel``), vectorised chains' lockstep transition and
the progress bar's line."""

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_sgrld.core import equipartition
from numpyro_sgrld.core.algorithm import Algorithm, compose
from numpyro_sgrld.core.checks import flag, integer, real
from numpyro_sgrld.core.correction import as_correction
from numpyro_sgrld.core.gradients import (
    GradientEstimator,
    Target,
    control_variates,
    minibatch,
)
from numpyro_sgrld.core.integrators import langevin
from numpyro_sgrld.core.metrics import AdaptsUntil, Aux
from numpyro_sgrld.core.state import SGState
from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.data.host_data import (
    chunked_full_potential,
    host_leaves,
    one_plate,
    reading_ahead,
)
from numpyro_sgrld.data.sharded_data import stratified_indices
from numpyro_sgrld.data.subsample import (
    as_jax_array,
    check_draws,
    draw_indices,
    full_batch_opaque,
    init_batching,
)
from numpyro_sgrld.sampler.potentials import minibatch_potential, minibatch_potential_with_aux
from numpyro_sgrld.sampler.setup import steps_per_epoch
from numpyro_sgrld.warmup import choices
from numpyro_sgrld.warmup import cycles as cycles_
from numpyro_sgrld.warmup.adaptation import CHAIN_AXIS
from numpyro_sgrld.warmup.settings import LearntSettings
from numpyro_sgrld.warmup.steps import init_warmup

__all__ = ["algorithm", "check_target_bias", "check_algorithm", "check_gradient",
           "check_init_strategy", "check_aux", "check_num_data", "gradient_estimator",
           "with_gradient", "step_size_rule", "target", "init_state", "ahead", "draw",
           "sample_vectorized", "check_settings", "check_not_gibbs_settings",
           "learnt_algorithm", "chains_init", "kwargs_axes", "first_chain_kwargs",
           "settings_axis", "start", "diagnostics_str"]


def check_target_bias(target_bias):
    """``target_bias``, checked."""
    return real(target_bias, "target_bias", low=0, low_open=True,
                hint="It is the relative inflation of the stationary variance that "
                "`step_size=None` allows (default 0.1).")


def algorithm(given, step_size, model, metric, integrator, gradient, correction,
              correction_form, control_variate, temperature, check_proposal, mode_steps,
              start_at_centre):
    """The kernel's :class:`~numpyro_sgrld.Algorithm`: ``given`` (checked, and refused
    together with pieces it holds), or composed from the pieces, with what ``step_size=None``
    turns on where a piece is not given (:mod:`numpyro_sgrld.warmup.choices`)."""
    if given is not None:
        check_algorithm(given, metric, integrator, gradient, correction, correction_form,
                        control_variate, temperature, check_proposal)
        check_gradient(given.gradient, model)
        return given
    estimator = gradient_estimator(gradient, control_variate, mode_steps, start_at_centre,
                                   model)
    return compose(
        choices.kernel_metric(metric, step_size),
        langevin() if integrator is None else integrator,
        choices.default_gradient(step_size, gradient, control_variate, model is not None)
        or estimator,
        as_correction(correction, correction_form),
        temperature=1.0 if temperature is None else temperature,
        check_proposal=True if check_proposal is None else check_proposal)


def check_algorithm(algorithm, *pieces):
    """Refuse an ``algorithm`` that is not an :class:`~numpyro_sgrld.Algorithm`, or one given
    together with the pieces it already holds (``metric``, ``integrator``, ``gradient``,
    ``correction``, ``correction_form``, ``control_variate``, ``temperature``,
    ``check_proposal``)."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(
            "`algorithm` must be a numpyro_sgrld.Algorithm, made by numpyro_sgrld.compose("
            f"metric, integrator, gradient, correction), got {algorithm!r}.")
    names = ("metric", "integrator", "gradient", "correction", "correction_form",
             "control_variate", "temperature", "check_proposal")
    given = [name for name, value in zip(names, pieces) if value is not None]
    if given:
        raise ValueError(
            f"`algorithm=` already holds {', '.join(f'`{n}`' for n in given)}: give them to "
            "numpyro_sgrld.compose(...) instead, or give the pieces without `algorithm`.")


def check_gradient(gradient, model):
    """Refuse an estimator that needs the full data without a model."""
    if gradient.needs_full_data and model is None:
        raise ValueError(
            f"The gradient estimator {gradient.name!r} (`control_variate`) needs a model with "
            "subsample plates (it evaluates the full-data gradient at the centre); it is not "
            "available with `potential_fn`."
        )


def with_gradient(setting, gradient):
    """The warm-up's :class:`~numpyro_sgrld.warmup.pieces.Setting` with the algorithm's
    gradient estimator replaced by ``gradient``."""
    return setting._replace(algorithm=setting.algorithm._replace(gradient=gradient))


def step_size_rule(schedule, cycles):
    """``(i, warmup_state, held) -> h_i``: the schedule's step without a warm-up state, else
    the adapted step (with ``cycles``, after warm-up, times the cycle's cosine:
    :func:`numpyro_sgrld.warmup.cycles.step_size`); without either (a kernel given
    :class:`~numpyro_sgrld.LearntSettings`), ``held``, the chain's own step, which its first
    state takes from the settings."""

    def rule(i, warm, held=None):
        if warm is None:
            if schedule is None:
                return jnp.asarray(held, jnp.result_type(float))
            return jnp.asarray(schedule(i), jnp.result_type(float))
        if cycles is not None:
            return cycles_.step_size(cycles, i, warm.step)
        return warm.step.step_size

    return rule


def check_warmup_length(metric, correction, num_warmup):
    """Warn where a corrected kernel's warm-up is shorter than its metric still adapts
    (:class:`~numpyro_sgrld.core.metrics.AdaptsUntil`): until then Γ corrects a metric that still
    changes."""
    adapts = trait(metric, AdaptsUntil)
    if adapts is None or correction is None or num_warmup >= adapts.steps:
        return
    warnings.warn(
        f"The metric {metric.name!r} fixes {adapts.what} after {adapts.steps} steps, but "
        f"num_warmup={num_warmup}: until then Γ corrects a metric that still changes. Use "
        f"num_warmup >= {adapts.steps}, or give the metric a fixed {adapts.what} (for "
        "MongeSGLD, a number alpha2).", UserWarning, stacklevel=3)


def check_init_strategy(init_strategy):
    """``init_strategy``, checked to be a NumPyro init strategy."""
    if not callable(init_strategy):
        raise ValueError(
            f"`init_strategy` must be a NumPyro init strategy (a callable such as "
            f"numpyro.infer.init_to_uniform, init_to_median or init_to_value(values=...)), "
            f"got {init_strategy!r}."
        )
    return init_strategy


def check_aux(metric, model):
    """Refuse a metric that reads the forward pass's auxiliary values without a model."""
    reads = trait(metric, Aux)
    if reads is not None and model is None:
        raise ValueError(
            f"The metric {metric.name!r} reads auxiliary values of the model's forward pass "
            f"({list(reads.names)}); a kernel built from `potential_fn` has none. Give a "
            "model that records them with numpyro_sgrld.auxiliary(name, value)."
        )


def check_num_data(num_data):
    """``num_data`` checked: ``None`` or a positive integer."""
    if num_data is None:
        return None
    return integer(num_data, "num_data", hint="Or None (inferred from the model's plates).")


def gradient_estimator(gradient, control_variate, mode_steps, start_at_centre, model):
    """The gradient estimator from ``gradient=`` or the ``control_variate`` shortcut."""
    if gradient is not None and control_variate is not None:
        raise ValueError(
            "Give either `gradient=` or `control_variate=` (the shortcut for "
            "gradient=gradients.control_variates(...)), not both."
        )
    if start_at_centre and control_variate is None:
        raise ValueError(
            "`start_at_centre=True` starts the chain at the control-variate centre: also pass "
            "`control_variate='mode'` (or a dict of unconstrained latent values)."
        )
    if control_variate is not None:
        gradient = control_variates(control_variate, mode_steps, start_at_centre)
    else:
        integer(mode_steps, "mode_steps")
        flag(start_at_centre, "start_at_centre")
    gradient = minibatch() if gradient is None else gradient
    if not isinstance(gradient, GradientEstimator):
        raise TypeError(
            "`gradient` must be a numpyro_sgrld.core.gradients.GradientEstimator such as "
            f"gradients.minibatch() or gradients.control_variates('mode'), got {gradient!r}."
        )
    check_gradient(gradient, model)
    return gradient


def target(setup, model, potential_fn, axis_name, model_args, model_kwargs, draw, step=None,
           num_data=1):
    """The :class:`~numpyro_sgrld.core.gradients.Target` the gradient estimator evaluates: the
    model's minibatch potential from its ``setup``
    (:class:`~numpyro_sgrld.sampler.model.ModelSetup`), or ``potential_fn`` without a model, at
    transition ``step`` (unbatched for vectorised chains: a branch on it stays one), for
    ``num_data`` :math:`N`, with the minibatch ``draw`` (:func:`draw` given the plates, the
    sharding, the strata and the batching law), the one every minibatch of the run comes
    from."""
    if model is None:
        return Target(lambda z, idx: (potential_fn(z), {}), None, draw, step=step,
                      axis_name=axis_name, num_data=num_data)
    # NumPy arrays in the model arguments become JAX arrays, so that the model can index
    # them with the (traced) minibatch indices, e.g. ``X[idx]``.
    args, kwargs = jax.tree.map(as_jax_array, (model_args, model_kwargs))
    if host_leaves((args, kwargs)):  # rows on the host: full-data passes chunk by chunk
        full_potential = chunked_full_potential(setup.prepared, args, kwargs,
                                                one_plate(setup.plates))
    else:
        full = minibatch_potential(full_batch_opaque(setup.prepared), args, kwargs)
        full_potential = partial(full, idx={})
    return Target(
        minibatch_potential_with_aux(setup.prepared, args, kwargs),
        full_potential,
        draw,
        steps_per_epoch=steps_per_epoch(setup.plates),
        step=step,
        axis_name=axis_name,
        num_data=num_data,
    )


def init_state(setting, target, z, rng_key, num_warmup, plates, batching, adapts,
               proposal_next_step, first_sampling_step, settings=None):
    """One chain's first :class:`~numpyro_sgrld.core.state.SGState` at the unconstrained
    position ``z``: the batching state, the algorithm's start
    (:meth:`Algorithm.begin <numpyro_sgrld.core.algorithm.Algorithm>`: the gradient estimator's
    state, which may move the start, and the estimate there), with ``adapts`` (``step_size=None``)
    the warm-up's state (:func:`~numpyro_sgrld.warmup.steps.init_warmup`), and the chain's
    first state at the first step. ``proposal_next_step``: whether the next step checks the
    proposal (the state holds one); ``first_sampling_step``: the step counter where the
    equipartition check starts counting. With ``settings`` (one chain's
    :class:`~numpyro_sgrld.LearntSettings`) the chain starts at their step, with their metric
    state and gradient estimator's state in place of fresh ones."""
    key_next, key_sampler, key_batch, key_idx = random.split(rng_key, 4)
    batch_state = init_batching(key_batch, plates, batching)
    idx, _ = target.draw(key_idx, batch_state)
    algorithm = setting.algorithm
    start = algorithm.begin(key_sampler, z, target, idx)
    warm = None
    if adapts:
        warm = init_warmup(setting, random.fold_in(key_sampler, 3), start, target, num_warmup)
    step_size = setting.step_size(0, warm, None if settings is None else settings.step_size)
    chain = algorithm.init(start, target, step_size, proposal_next_step)
    if settings is not None:
        chain = _with_settings(chain, settings)
    return SGState(
        chain=chain,
        step_size=step_size,
        batch_state=batch_state,
        rng_key=key_next,
        warmup=warm,
        equipartition=equipartition.init(chain.z, first_sampling_step),
        configurational_temperature=jnp.zeros((), step_size.dtype),
    )


def check_settings(settings, step_size, cycles):
    """``settings`` (``None`` or a :class:`~numpyro_sgrld.LearntSettings`), checked: not
    together with a ``step_size`` (they hold it) or cycles, and each chain's step finite and
    positive."""
    if settings is None:
        return None
    if not isinstance(settings, LearntSettings):
        raise TypeError(
            "`settings` must be a numpyro_sgrld.LearntSettings, read from a finished run with "
            f"numpyro_sgrld.learnt_settings(mcmc), got {type(settings).__name__}.")
    if step_size is not None:
        raise ValueError(
            "`settings` hold the step size, in the units of the metric learnt with them: give "
            "`step_size` or `settings`, not both. To try another step in that metric, give "
            "settings._replace(step_size=h).")
    if cycles is not None:
        raise ValueError(
            "A cyclical kernel does not take learnt settings: its cycles start after its own "
            "warm-up. Use its step_size=None, or SGLD/SGHMC with settings=.")
    h = np.asarray(settings.step_size, np.float64)
    if h.size == 0 or h.ndim > 1 or not np.all(np.isfinite(h) & (h > 0)):
        raise ValueError(
            "The settings' step_size must be one finite step > 0 per chain (a scalar, or one "
            f"entry per chain), got {settings.step_size!r}.")
    return settings


def check_not_gibbs_settings(settings):
    """Refuse, in a kernel on its own, ``settings`` learnt within
    :class:`~numpyro_sgrld.SGGibbs` (``SGGibbs`` takes their Gibbs part off the kernel it
    wraps)."""
    if settings is not None and settings.gibbs is not None:
        raise ValueError(
            "These learnt settings come from a run within SGGibbs: their metric is in the "
            "coordinates its warm-up learnt for the Gibbs sites' children. Give them back "
            "within Gibbs, as the run that learnt them: SGGibbs(K(model, settings=learnt)).")


def learnt_algorithm(algorithm, settings):
    """``algorithm`` for a kernel given ``settings``: its gradient estimator in the settled
    form the settings' state selects (:attr:`~numpyro_sgrld.core.gradients.GradientEstimator.
    settled`, the control variates on or off as warm-up left them), as after a warm-up."""
    gradient = algorithm.gradient
    if settings is None or settings.gradient is None or gradient.settled is None:
        return algorithm
    return algorithm._replace(gradient=gradient.settled(settings.gradient))


def chains_init(init_one, settings, num_chains, chain_kwargs=()):
    """``init_one(z, key, args, kwargs, num_warmup, settings)`` over ``num_chains``
    vectorised chains (``vmap``; ``None``: one chain started on its own, as is), the
    ``settings`` mapped along their chain axis (:func:`settings_axis`), the keyword arguments
    named in ``chain_kwargs`` along theirs (:func:`kwargs_axes`); settings learnt within
    Gibbs refused (:func:`check_not_gibbs_settings`)."""
    check_not_gibbs_settings(settings)
    axis = settings_axis(settings, num_chains)
    if num_chains is None:
        return init_one

    def init(z, key, args, kwargs, num_warmup, settings):
        return jax.vmap(init_one, in_axes=(0, 0, None, kwargs_axes(kwargs, chain_kwargs),
                                           None, axis))(z, key, args, kwargs, num_warmup,
                                                        settings)

    return init


def kwargs_axes(model_kwargs, chain_kwargs):
    """``vmap``'s ``in_axes`` for the model's keyword arguments over vectorised chains: ``0``
    for those named in ``chain_kwargs`` (one value per chain, e.g. the Gibbs sites' values of
    :class:`~numpyro_sgrld.SGGibbs`), ``None`` (shared) for the others."""
    if not chain_kwargs:
        return None
    return {k: 0 if k in chain_kwargs else None for k in model_kwargs}


def first_chain_kwargs(model_kwargs, chain_kwargs):
    """The model's keyword arguments as the first of vectorised chains sees them (those named
    in ``chain_kwargs`` at index 0 of their chain axis): for what runs once per run, outside
    the chains' ``vmap`` (tracing the model, checking its data)."""
    if not chain_kwargs:
        return model_kwargs
    return {k: jax.tree.map(lambda x: x[0], v) if k in chain_kwargs else v
            for k, v in model_kwargs.items()}


def start(init_params, settings, num_chains):
    """The chains' initial unconstrained positions for ``MCMC.run``'s ``init_params``:
    ``init_params`` where given, else the positions of ``settings``
    (:class:`~numpyro_sgrld.LearntSettings`, where they hold them; one chain's repeated for
    ``num_chains`` vectorised chains), else ``None`` (``init_strategy`` draws them)."""
    settings_axis(settings, num_chains or None)
    if init_params is not None or settings is None or settings.position is None:
        return init_params
    if num_chains and settings.num_chains is None:
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (num_chains, *jnp.shape(x))),
                            settings.position)
    return settings.position


def settings_axis(settings, num_chains):
    """The chain axis of ``settings`` for ``vmap`` over ``num_chains`` vectorised chains
    (``None`` for one chain, or ``chain_method`` "sequential" / "parallel"): ``0`` where they
    hold one entry per chain, ``None`` where they hold one chain's; refused where the counts
    differ, or where a chain started on its own cannot tell which entry is its."""
    held = None if settings is None else settings.num_chains
    if held is None:
        return None
    if num_chains == held:
        return 0
    where = (f"{num_chains} vectorised chains" if num_chains else
             "chains started one at a time (chain_method 'sequential' or 'parallel', or one "
             "chain), which cannot tell which entry is theirs")
    raise ValueError(
        f"The learnt settings hold {held} chains' values and the run has {where}. Run "
        f"num_chains={held} with chain_method='vectorized' (chain k starts from chain k's "
        "settings), or give every chain one chain's settings: settings.chain(0).")


def _with_settings(chain, settings):
    """``chain`` with the metric state and gradient estimator's state of ``settings``
    (refused, naming the piece, where they are not shaped as this kernel's)."""
    _fits(chain.sampler_state.metric, settings.metric, "metric")
    gradient_state = chain.gradient_state
    if settings.gradient is not None:
        _fits(gradient_state, settings.gradient, "gradient estimator")
        gradient_state = jax.tree.map(lambda new, old: jnp.asarray(new, old.dtype),
                                      settings.gradient, gradient_state)
    metric = jax.tree.map(lambda new, old: jnp.asarray(new, old.dtype), settings.metric,
                          chain.sampler_state.metric)
    return chain._replace(sampler_state=chain.sampler_state._replace(metric=metric),
                          gradient_state=gradient_state)


def _fits(fresh, given, piece):
    """Refuse ``given`` (a state from learnt settings) where its tree or shapes differ from
    this kernel's ``fresh`` one."""
    same = jax.tree.structure(fresh) == jax.tree.structure(given) and all(
        np.shape(a) == np.shape(b)
        for a, b in zip(jax.tree.leaves(fresh), jax.tree.leaves(given), strict=True))
    if not same:
        raise ValueError(
            f"The learnt settings' {piece} state does not fit this kernel's "
            f"({type(fresh).__name__} of shapes {[np.shape(x) for x in jax.tree.leaves(fresh)]}"
            f", got {type(given).__name__} of shapes "
            f"{[np.shape(x) for x in jax.tree.leaves(given)]}): give the settings to a kernel "
            "composed as the one that learnt them (the same preset and pieces, step_size not "
            "given), on the same model.")


def diagnostics_str(state):
    """The progress bar's line for ``state``: the step (and whether it is still adapted), the
    gradient's norm, the minibatch potential, rejections and divergence."""
    adapting = state.warmup is not None and int(state.i) < int(state.warmup.num_warmup)
    rejected = int(state.num_rejected)
    return (f"h={float(state.step_size):.2e}{' (adapting)' if adapting else ''} "
            f"|grad|={float(state.grad_norm):.2e} U_batch={float(state.potential_energy):.4g}"
            f"{f' rejected={rejected}' if rejected else ''}"
            f"{' DIVERGING' if bool(state.diverging) else ''}")


def ahead(data):
    """The warm-up :class:`~numpyro_sgrld.warmup.pieces.Setting`'s ``ahead`` for ``data`` (the
    model's arguments): for rows on the host (:class:`~numpyro_sgrld.data.sharding.HostRows`, one
    subsample plate), a step's rows are read in one host call at its start, which also starts
    reading the next step's
    (:func:`~numpyro_sgrld.data.host_data.reading_ahead`); else ``None``."""
    leaves = host_leaves(data)
    if not leaves:
        return None
    return lambda idx, next_idx: reading_ahead(
        leaves, *(next(iter(i.values())) for i in (idx, next_idx)))


def draw(plates, sharding, key, batch_state, strata=None, batching="replacement"):
    """A minibatch's indices for every subsample plate, sharded across devices with
    ``data_parallel``: ``(idx, batch_state)``; with ``strata`` (data in
    :class:`~numpyro_sgrld.data.sharding.ShardedRows`), drawn share by share
    (:func:`~numpyro_sgrld.data.sharded_data.stratified_indices`). ``batch_state=None`` draws
    a check's own minibatch, by ``batching``'s law where it has no state
    (:func:`~numpyro_sgrld.data.subsample.check_draws`)."""
    if batch_state is None:
        batch_state = check_draws(plates, batching)
    if strata is None:
        idx, batch_state = draw_indices(key, plates, batch_state)
    else:
        keys = random.split(key, len(plates)) if len(plates) > 1 else [key]
        idx = {plate.name: stratified_indices(k, strata, plate.subsample_size, plate.size)
               for k, plate in zip(keys, plates)}
    if sharding is not None:
        idx = {name: jax.lax.with_sharding_constraint(i, sharding) for name, i in idx.items()}
    return idx, batch_state


def sample_vectorized(sample_one, state, model_args, model_kwargs, adapting=None,
                       gradient=None, chain_kwargs=()):
    """``sample_one`` over a batch of chains. The chains step in lockstep, so whether they
    are in warm-up is one unbatched flag: the adaptation's ``lax.cond`` stays a branch (under
    ``vmap`` a batched predicate would run both branches on every step). ``adapting`` and
    ``gradient`` as in the kernel's one-chain transition (``adapting=None``: from the state);
    the keyword arguments named in ``chain_kwargs`` hold one value per chain."""
    if adapting is None and state.warmup is not None:
        adapting = state.i[0] < state.warmup.num_warmup[0]
    return jax.vmap(partial(sample_one, adapting=adapting, step=state.i[0], gradient=gradient),
                    in_axes=(0, None, kwargs_axes(model_kwargs, chain_kwargs)),
                    axis_name=CHAIN_AXIS)(state, model_args, model_kwargs)
