r"""What warm-up learnt, as a value a new kernel takes: :class:`LearntSettings`.

With ``step_size=None`` warm-up learns, for each chain, a step size :math:`h`, the state of the
kernel's metric and the gradient estimator's state (:mod:`numpyro_sgrld.warmup.choices`). The
step is in the units of the learnt metric: the Langevin step is

.. math::
    \theta \leftarrow \theta - h\,D\nabla\hat U + \sqrt{2hT}\,D^{1/2}\xi,

with :math:`D = LL^\top` the preconditioner learnt in warm-up (SGLD, SGHMC, AdamSGLD, BAOAB,
SGNHT, BADODAB: a constant one; the adaptive presets: their metric in the coordinates
:math:`L^{-1}\theta`). In the coordinates :math:`z = L^{-1}\theta` this is SGLD at step
:math:`h` on a posterior of curvature :math:`L^\top HL`, which warm-up makes about the
identity; the same number given as ``step_size`` to a kernel without :math:`D` (a given step
runs the metric as composed: the identity for SGLD) is SGLD on the curvature :math:`H` itself,
stable only for :math:`h\,\lambda_{\max}(H) < 2`. Where the posterior's scales differ from 1
by orders of magnitude, a learnt step given back on its own is unstable.

:func:`learnt_settings` reads the settings from a finished run; a kernel given them
(``SGLD(model, settings=...)``, any preset composed as the one that learnt them) starts each
chain with that step, that metric state and that gradient estimator's state, and runs without
a warm-up (``num_warmup=0``): the transitions of the default run after its warm-up, so it
samples the same law.
"""

from typing import Any, NamedTuple

import jax
import numpy as np

__all__ = ["LearntSettings", "check_adapted", "learnt_settings"]


class LearntSettings(NamedTuple):
    r"""What warm-up learnt, for each chain (a leading chain axis on every leaf where the run
    had several chains, as ``mcmc.last_state``; none for one chain).

    - **step_size** – :math:`h`, in the units of the learnt metric (module docstring): the
      step the chain took after warm-up.
    - **metric** – the metric's state: for the default metric of SGLD, SGHMC, AdamSGLD and the
      time-step kernels a :class:`~numpyro_sgrld.core.metrics.LearntState` (``scale``, the diagonal
      of the inverse metric :math:`D`, and ``factor``, a root :math:`L` with :math:`D = LL^\top`,
      where it is dense); for the adaptive presets a ``WhitenedState`` (the learnt :math:`L`
      and the adaptive metric's statistics in its coordinates).
    - **gradient** – the gradient estimator's state (the control variates' centre, the
      full-data potential and gradient there, and whether they are on), ``None`` for the
      plain minibatch gradient.
    - **position** – where each chain was, unconstrained (``state.z``): in the posterior's
      bulk, which warm-up's first stage brings the chains to. A kernel given the settings
      starts there where ``MCMC.run`` is given no ``init_params``; without a warm-up, a start
      drawn by ``init_strategy`` in the tails would put the way in among the draws.
      ``settings._replace(position=None)`` starts from ``init_strategy``.
    - **gibbs** – for a run of :class:`~numpyro_sgrld.SGGibbs`, what its warm-up learnt
      beside the SG kernel's step and metric (the decentred children's data curvature, which
      fixes the coordinates the metric is learnt in, the control variates' centre, the
      weakly informed children's count: :mod:`~numpyro_sgrld.sampler.gibbs_settings`), and
      ``position`` is then as ``SGGibbs`` records it (the Gibbs sites constrained); ``None``
      for a kernel on its own.
      Such settings go to ``SGGibbs(K(model, settings=learnt))`` built as the run that learnt
      them; a kernel on its own refuses them, and ``SGGibbs`` refuses settings learnt outside
      it.

    Give it to a kernel composed as the one that learnt it: ``SGLD(model, settings=learnt)``
    (``step_size`` not given). A kernel of ``C`` chains given the settings of ``C`` chains
    starts chain ``k`` with chain ``k``'s (vectorised chains); :meth:`chain` gives one chain's
    settings, which every chain then starts from (any ``chain_method``). To try another
    step in the same metric: ``settings._replace(step_size=h)``.
    """

    step_size: Any
    metric: Any
    gradient: Any = None
    position: Any = None
    gibbs: Any = None

    @property
    def num_chains(self):
        """The number of chains the settings hold (``None``: one chain's, no chain axis)."""
        shape = np.shape(self.step_size)
        return shape[0] if shape else None

    def chain(self, k):
        """Chain ``k``'s settings (without a chain axis)."""
        if self.num_chains is None:
            return self
        if not -self.num_chains <= k < self.num_chains:
            raise IndexError(f"The settings hold {self.num_chains} chains, not chain {k}.")
        return jax.tree.map(lambda x: x[k], self)


def check_adapted(kernel):
    """Refuse to read settings from a run of ``kernel`` whose step was given: its warm-up
    learnt nothing."""
    if kernel is not None and getattr(kernel, "settings", None) is None and not getattr(
            kernel, "adapts_step_size", True):
        raise ValueError(
            "This run's step was given (step_size=...): warm-up learnt nothing, and the metric "
            "ran as composed. Run the kernel with step_size=None (the default) to learn the "
            "step and the preconditioner, then read them with learnt_settings(mcmc).")


def learnt_settings(run):
    """The :class:`LearntSettings` of a finished run with ``step_size=None``: ``run`` a
    ``numpyro.infer.MCMC`` (its ``last_state``) or a stochastic-gradient kernel's state
    (:class:`~numpyro_sgrld.SGState`, e.g. ``mcmc.post_warmup_state``). The step is the one
    frozen at warm-up's end (for a cyclical preset, the peak of its cycles). A run of
    :class:`~numpyro_sgrld.SGGibbs` gives its settings with their Gibbs part
    (:func:`numpyro_sgrld.sampler.gibbs_settings.read`); read them from the ``MCMC`` run,
    whose kernel knows the Gibbs sites' transforms."""
    kernel = getattr(run, "sampler", None)
    state = getattr(run, "last_state", run)
    reader = getattr(kernel, "learnt_settings", None)
    if reader is not None and state is not None:
        return reader(state)
    if hasattr(state, "sg_state"):
        raise TypeError(
            "This is the state of an SGGibbs run: read its settings from the run, "
            "learnt_settings(mcmc), whose kernel gives the Gibbs sites' part of them.")
    check_adapted(kernel)
    if state is None or not all(hasattr(state, f) for f in ("sampler_state", "step_size", "i")):
        raise TypeError(
            "learnt_settings reads a finished numpyro.infer.MCMC run of a stochastic-gradient "
            f"kernel (or its state, mcmc.last_state), got {type(run).__name__}: run MCMC first.")
    warm = state.warmup
    step_size = state.step_size
    if warm is not None:
        if np.any(np.asarray(state.i) < np.asarray(warm.num_warmup)):
            raise ValueError(
                "Warm-up has not ended in this state: its step and preconditioner are still "
                "being learnt. Read the settings after MCMC.run (mcmc.last_state).")
        step_size = warm.step.step_size
    return LearntSettings(step_size, state.sampler_state.metric, state.gradient_state,
                          state.z)
