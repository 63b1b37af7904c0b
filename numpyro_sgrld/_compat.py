"""Adjustments to NumPyro's ``MCMC`` driver: compiled loops reused across ``MCMC.run`` calls,
and the stochastic-gradient kernels' own sampling loop.

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

:func:`use_sampling_loop` chooses the loop ``MCMC`` runs the stochastic-gradient kernels with:
``"sgrld"`` (the default, set on import), :func:`numpyro_sgrld._loop.collect`, which evaluates the
postprocessing and writes a draw only on the steps ``thinning`` keeps and updates the progress
bar in chunks; or ``"numpyro"``, NumPyro's ``fori_collect``. Same draws either way; every other
kernel (``NUTS``, ...) always runs on NumPyro's loop.
"""

from collections import OrderedDict

import numpyro.infer.mcmc
import numpyro.util

from numpyro_sgrld import _loop
from numpyro_sgrld._cache import lru_get

__all__ = ["reuse_compiled_loops", "restore_numpyro_jit", "use_sampling_loop"]

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
    wrapped = lru_get(
        _wrappers, key, lambda: _ORIGINAL_MAYBE_JIT(fn, *args, **kwargs), _MAX_WRAPPERS
    )
    if wrapped is fn:  # control flow primitives disabled (numpyro.util.control_flow_prims_disabled)
        del _wrappers[key]
    return wrapped


def reuse_compiled_loops():
    """Let repeated ``MCMC.run`` calls with the same shapes reuse the compiled sampling loop
    (see the module docstring). Idempotent."""
    numpyro.util.maybe_jit = _memoized_maybe_jit


def restore_numpyro_jit():
    """Undo :func:`reuse_compiled_loops` (NumPyro then recompiles its loop on every run)."""
    numpyro.util.maybe_jit = _ORIGINAL_MAYBE_JIT
    _wrappers.clear()


_ORIGINAL_FORI_COLLECT = numpyro.infer.mcmc.fori_collect


def _runs_sg_kernel(body_fun):
    """Whether ``body_fun`` is ``MCMC``'s step function for a stochastic-gradient kernel (a
    ``functools.partial`` with the kernel as its ``sampler`` keyword)."""
    from numpyro_sgrld._adapter import SGMCMCKernel

    return isinstance(getattr(body_fun, "keywords", {}).get("sampler"), SGMCMCKernel)


def _fori_collect(lower, upper, body_fun, init_val, *args, **kwargs):
    """``fori_collect`` as ``numpyro.infer.mcmc`` calls it: our loop for our kernels, except
    for what only NumPyro's loop does (per-chain progress bars of parallel chains, control flow
    disabled for debugging)."""
    progbar = kwargs.get("progbar", True)
    own = (
        _runs_sg_kernel(body_fun)
        and not args
        and not getattr(numpyro.util, "_DISABLE_CONTROL_FLOW_PRIM", False)
        and not (progbar and kwargs.get("num_chains", 1) > 1)
    )
    if not own:
        return _ORIGINAL_FORI_COLLECT(lower, upper, body_fun, init_val, *args, **kwargs)
    kwargs.pop("num_chains", None)
    return _loop.collect(lower, upper, body_fun, init_val, **kwargs)


def use_sampling_loop(which="sgrld"):
    """The loop ``MCMC`` runs the stochastic-gradient kernels with: ``"sgrld"`` (default,
    set when ``numpyro_sgrld`` is imported) or ``"numpyro"`` (NumPyro's ``fori_collect``,
    which postprocesses and writes the state on every step). Both give the same draws."""
    if which == "sgrld":
        numpyro.infer.mcmc.fori_collect = _fori_collect
    elif which == "numpyro":
        numpyro.infer.mcmc.fori_collect = _ORIGINAL_FORI_COLLECT
    else:
        raise ValueError(f'`which` must be "sgrld" or "numpyro", got {which!r}')
