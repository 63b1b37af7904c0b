"""Reuse of NumPyro's compiled sampling loop across ``MCMC.run`` calls.

``numpyro.util.fori_collect`` (the loop behind ``MCMC.run`` with ``progress_bar=False``) caches
its loop body by ``(body_fun, transform)`` and passes it as a *static* argument to a jitted
``_fori_collect_loop``. In NumPyro 0.22 the cached body is wrapped in a *new* ``jax.jit`` object
on every call, and two ``jax.jit`` wrappers of the same function never compare equal, so the
static argument changes and the whole sampling loop is traced and compiled again on every
``MCMC.run`` — even a second run with the same kernel, shapes and ``jit_model_args=True``
(about 1.3 s for logistic regression, more for a neural network) — and the compiled
executables pile up in memory.

:func:`reuse_compiled_loops` makes ``numpyro.util.maybe_jit`` (used only by ``fori_collect``)
return the *same* jitted wrapper for the same function and options, which is what NumPyro's
caching intends. Nothing else changes: ``jax.jit`` of one function with one set of options
behaves identically whether the wrapper object is new or reused. It is applied when
``numpyro_sgrld`` is imported; :func:`restore_numpyro_jit` undoes it.
"""

from collections import OrderedDict

import numpyro.util

__all__ = ["reuse_compiled_loops", "restore_numpyro_jit"]

_ORIGINAL_MAYBE_JIT = numpyro.util.maybe_jit
# Bounded like NumPyro's own ``cached_by`` (8 loop bodies): a wrapper keeps its function, and the
# progress-bar path builds a fresh closure per call, which must not be kept forever.
_MAX_WRAPPERS = 32
_wrappers = OrderedDict()


def _memoized_maybe_jit(fn, *args, **kwargs):
    try:
        key = (fn, args, tuple(sorted(kwargs.items())))
        hash(key)
    except TypeError:
        return _ORIGINAL_MAYBE_JIT(fn, *args, **kwargs)
    if key in _wrappers:
        _wrappers.move_to_end(key)
        return _wrappers[key]
    wrapped = _ORIGINAL_MAYBE_JIT(fn, *args, **kwargs)
    if wrapped is fn:  # control flow primitives disabled (numpyro.util.control_flow_prims_disabled)
        return wrapped
    _wrappers[key] = wrapped
    if len(_wrappers) > _MAX_WRAPPERS:
        _wrappers.popitem(last=False)
    return wrapped


def reuse_compiled_loops():
    """Let repeated ``MCMC.run`` calls with the same shapes reuse the compiled sampling loop
    (see the module docstring). Idempotent."""
    numpyro.util.maybe_jit = _memoized_maybe_jit


def restore_numpyro_jit():
    """Undo :func:`reuse_compiled_loops` (NumPyro then recompiles its loop on every run)."""
    numpyro.util.maybe_jit = _ORIGINAL_MAYBE_JIT
    _wrappers.clear()
