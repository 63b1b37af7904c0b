"""The warm-up: small pieces, each an ``init``, an ``update`` and a ``final`` that returns what
it learnt (:mod:`~numpyro_sgrld.warmup.pieces`: the step of the bias law, the momentum, the
constant preconditioner learnt over the slow windows, the control variates), composed into
one ``(init, update)`` with one :class:`WarmupState` (:mod:`~numpyro_sgrld.warmup.steps`), as
NumPyro's ``warmup_adapter`` composes NUTS's. The windows are in
:mod:`~numpyro_sgrld.warmup.schedule`, the preconditioner's statistics in
:mod:`~numpyro_sgrld.warmup.preconditioner`, the step size's measurement in
:mod:`~numpyro_sgrld.warmup.adaptation`, what ``step_size=None`` turns on in
:mod:`~numpyro_sgrld.warmup.choices`, and what it learnt, as a value a new kernel takes, in
:mod:`~numpyro_sgrld.warmup.settings`. Cyclical SG-MCMC's stages, which wrap the transition,
are in :mod:`~numpyro_sgrld.warmup.cycles`. ``docs/step_size.md``
says in one paragraph what the warm-up does."""

from numpyro_sgrld.warmup.pieces import Setting
from numpyro_sgrld.warmup.preconditioner import (
    PreconditionerWarmup,
    init_preconditioner,
    preconditioner_factor,
    preconditioner_scale,
    reset_preconditioner,
    update_preconditioner,
)
from numpyro_sgrld.warmup.schedule import (
    NUM_WINDOWS,
    final_window_start,
    first_window_start,
    window_ends,
)
from numpyro_sgrld.warmup.settings import LearntSettings, learnt_settings
from numpyro_sgrld.warmup.steps import WarmupState, init_warmup, update_warmup

__all__ = [
    "NUM_WINDOWS",
    "LearntSettings",
    "Setting",
    "WarmupState",
    "init_warmup",
    "update_warmup",
    "PreconditionerWarmup",
    "final_window_start",
    "first_window_start",
    "init_preconditioner",
    "learnt_settings",
    "preconditioner_factor",
    "preconditioner_scale",
    "reset_preconditioner",
    "update_preconditioner",
    "window_ends",
]
