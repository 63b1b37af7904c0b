"""Opt-in: ``MCMC`` runs the stochastic-gradient kernels on their own sampling loop.

Importing :mod:`numpyro_sgrld` changes nothing in NumPyro. Without the opt-in, ``MCMC`` runs
our kernels through ``numpyro.util.fori_collect`` like any other kernel, and three costs of that
loop are out of a kernel's reach (NumPyro 0.22, ``numpyro/util.py`` and
``numpyro/infer/mcmc.py``):

- ``fori_collect`` evaluates the collection transform (the kernel's ``postprocess_fn``:
  constraining transforms and, with ``numpyro.deterministic`` sites, a replay of the model on all
  the data) on **every** step and writes it into the sample buffer under a ``lax.cond``; the
  kernel is told neither the step index nor ``thinning``, so it cannot skip the steps that are
  not kept.
- With the progress bar on and one chain, ``fori_collect`` calls the compiled step from Python
  once per step; the kernel's ``sample`` is one step by contract.
- Without the progress bar, the loop is a jitted ``_fori_collect_loop`` whose loop body is a
  *static* argument, wrapped in a new ``jax.jit`` object on every call. Two such wrappers never
  compare equal, so every ``MCMC.run`` traces and compiles the whole loop again, even with the
  same kernel, shapes and ``jit_model_args=True``.

:func:`enable_fast_sampling_loop` replaces ``numpyro.infer.mcmc.fori_collect`` (the name
``MCMC`` calls; ``numpyro.util.fori_collect`` itself is left alone) by a dispatcher that sends the
runs of :class:`~numpyro_sgrld.SGMCMC` instances to :func:`numpyro_sgrld.sampler.loop.collect`
and passes every other call to NumPyro's function unchanged: ``NUTS`` and every other kernel run
exactly as without the opt-in, and nothing is memoised for them. It checks the NumPyro version
and the shape of the code it relies on first, and refuses on a version it was not tested with.
:func:`disable_fast_sampling_loop` puts NumPyro's function back; :func:`fast_sampling_loop`
does both around a ``with`` block.
"""

import contextlib
import inspect

import jax
import numpyro
import numpyro.infer.mcmc
import numpyro.util

from numpyro_sgrld.sampler import loop as _loop

__all__ = [
    "TESTED_NUMPYRO_VERSIONS",
    "disable_fast_sampling_loop",
    "enable_fast_sampling_loop",
    "fast_sampling_loop",
    "fast_sampling_loop_enabled",
    "judged_on_own_loop",
    "parallel_chains",
]

# The (major, minor) releases whose ``MCMC`` -> ``fori_collect`` call the dispatcher was tested
# against (pyproject: numpyro>=0.22,<0.23; tested with 0.22.0).
TESTED_NUMPYRO_VERSIONS = ((0, 22),)
# ``fori_collect``'s parameters as ``MCMC._single_chain_mcmc`` passes them (NumPyro 0.22).
_FORI_COLLECT_PARAMETERS = (
    "lower", "upper", "body_fun", "init_val", "transform", "progbar", "progress_rate",
    "return_last_val", "collection_size", "thinning", "progbar_opts",
)

_numpyro_fori_collect = None  # NumPyro's function while the opt-in is on


def _version_tuple(version):
    parts = []
    for part in version.split(".")[:2]:
        digits = "".join(c for c in part if c.isdigit()) or "0"
        parts.append(int(digits))
    return tuple(parts)


def _check_numpyro():
    """Refuse, with what to do, on a NumPyro whose ``MCMC`` loop this was not tested against."""
    installed = numpyro.__version__
    tested = ", ".join(f"{a}.{b}.x" for a, b in TESTED_NUMPYRO_VERSIONS)
    fix = (
        "Install a tested NumPyro (pip install 'numpyro>=0.22,<0.23'), or leave the fast "
        "sampling loop off: the kernels run correctly on NumPyro's own loop, only slower "
        "(docs/scaling.md, 'The sampling loop')."
    )
    if _version_tuple(installed) not in TESTED_NUMPYRO_VERSIONS:
        raise RuntimeError(
            f"enable_fast_sampling_loop() supports NumPyro {tested}; the installed NumPyro is "
            f"{installed}. {fix}"
        )
    fori_collect = numpyro.infer.mcmc.fori_collect
    params = tuple(inspect.signature(fori_collect).parameters)
    calls = inspect.getclosurevars(numpyro.infer.mcmc.MCMC._single_chain_mcmc).globals
    if params != _FORI_COLLECT_PARAMETERS or "fori_collect" not in calls:
        raise RuntimeError(
            f"NumPyro {installed} does not call `numpyro.infer.mcmc.fori_collect` the way "
            f"NumPyro {tested} does (parameters {params}). {fix}"
        )


def _own_loop(sampler, progbar, num_chains):
    """Whether the dispatcher runs ``sampler``'s chains on the kernels' own loop, given
    ``progbar`` and ``num_chains`` as ``MCMC`` passes them to ``fori_collect`` (more than 1
    only for parallel chains): a kernel that has it (``own_sampling_loop``: the
    :class:`~numpyro_sgrld.SGMCMC` kernels, not ``SGGibbs``), and none of what only NumPyro's
    loop does (per-chain progress bars of parallel chains, control flow disabled)."""
    return (getattr(type(sampler), "own_sampling_loop", False) is True
            and not (progbar and num_chains > 1) and not _control_flow_disabled())


def parallel_chains(mcmc):
    """Whether ``mcmc``'s chains run mapped by ``chain_method`` (``"parallel"``: one per device
    inside ``pmap``; or a callable), which NumPyro does only for more than one chain (and sets
    "sequential" where there are fewer devices than chains)."""
    return mcmc.num_chains > 1 and (callable(mcmc.chain_method)
                                    or mcmc.chain_method == "parallel")


def judged_on_own_loop(mcmc):
    """Whether ``mcmc.run`` will run on the kernels' own loop outside ``pmap``, which judges
    the kept draws itself (:func:`numpyro_sgrld.sampler.loop_report.judge`), so that the
    kernel keeps no moments for the verdict: the opt-in on, a kernel the dispatcher sends
    there, and chains that are not parallel (each parallel chain's loop is traced inside
    ``pmap``, where the kept draws cannot be judged; one chain is never mapped, and NumPyro
    runs "parallel" chains one after another where there are fewer devices than chains)."""
    return (fast_sampling_loop_enabled() and not parallel_chains(mcmc)
            and _own_loop(mcmc.sampler, mcmc.progress_bar, 1))


def _control_flow_disabled():
    """Whether NumPyro runs its loops in Python (inside
    ``numpyro.util.control_flow_prims_disabled()``, for debugging): asked of its public
    ``numpyro.util.fori_loop``, whose body then sees a Python ``int`` index instead of a traced
    one (a trace of a one-step loop: ``make_jaxpr`` traces it without compiling or running
    anything)."""
    seen = []

    def body(i, x):
        seen.append(isinstance(i, jax.core.Tracer))
        return x

    jax.make_jaxpr(lambda: numpyro.util.fori_loop(0, 1, body, 0))()
    return not seen[0]


def _fori_collect(lower, upper, body_fun, init_val, *args, **kwargs):
    """``numpyro.infer.mcmc.fori_collect`` while the opt-in is on: our loop for our kernels
    except for what only NumPyro's loop does (per-chain progress bars of parallel chains,
    control flow disabled for debugging); NumPyro's function, called as is, for the rest."""
    own = not args and _own_loop(getattr(body_fun, "keywords", {}).get("sampler"),
                                 kwargs.get("progbar", True), kwargs.get("num_chains", 1))
    if not own:
        return _numpyro_fori_collect(lower, upper, body_fun, init_val, *args, **kwargs)
    kwargs.pop("num_chains", None)
    return _loop.collect(lower, upper, body_fun, init_val, **kwargs)


def fast_sampling_loop_enabled():
    """Whether :func:`enable_fast_sampling_loop` is in effect."""
    return numpyro.infer.mcmc.fori_collect is _fori_collect


def enable_fast_sampling_loop():
    """Run the stochastic-gradient kernels on their own sampling loop inside ``MCMC``.

    For :class:`~numpyro_sgrld.SGMCMC` runs: the postprocessing and the write into the
    sample buffer only on the steps ``thinning`` keeps, one compiled call per progress-bar update
    (not per step), and no recompilation on a repeated ``MCMC.run`` with the same shapes. The
    draws are the same as without it. Every other kernel (``NUTS``, ...) is run by NumPyro's
    function unchanged. Replaces ``numpyro.infer.mcmc.fori_collect`` until
    :func:`disable_fast_sampling_loop`; idempotent.

    :raises RuntimeError: on a NumPyro version this was not tested with
        (:data:`TESTED_NUMPYRO_VERSIONS`).
    """
    global _numpyro_fori_collect
    if fast_sampling_loop_enabled():
        return
    _check_numpyro()
    _numpyro_fori_collect = numpyro.infer.mcmc.fori_collect
    numpyro.infer.mcmc.fori_collect = _fori_collect


def disable_fast_sampling_loop():
    """Put NumPyro's ``fori_collect`` back (the state before
    :func:`enable_fast_sampling_loop`); does nothing when the opt-in is off."""
    global _numpyro_fori_collect
    current = numpyro.infer.mcmc.fori_collect
    if _numpyro_fori_collect is None:
        return
    if current is not _fori_collect:
        raise RuntimeError(
            "numpyro.infer.mcmc.fori_collect was replaced by "
            f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', current)} "
            "after enable_fast_sampling_loop(); not overwriting it. Undo that replacement "
            "first, then call disable_fast_sampling_loop()."
        )
    numpyro.infer.mcmc.fori_collect = _numpyro_fori_collect
    _numpyro_fori_collect = None


@contextlib.contextmanager
def fast_sampling_loop():
    """``with fast_sampling_loop(): mcmc.run(...)``: :func:`enable_fast_sampling_loop` for the
    block, then the previous state (still on if it was on before)."""
    was_on = fast_sampling_loop_enabled()
    enable_fast_sampling_loop()
    try:
        yield
    finally:
        if not was_on:
            disable_fast_sampling_loop()
