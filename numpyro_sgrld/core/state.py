"""The state of every stochastic-gradient kernel, one tree with one type per concern: the
algorithm's (:class:`ChainState`, what :func:`numpyro_sgrld.core.algorithm.step` reads and
returns) inside the host's record of it for NumPyro (:class:`SGState`: the chain's state, the
step size its next step takes, the minibatch sampler's state, the next key, the warm-up's, the
run monitor's, and the equipartition check's sums, which a reducer over each step's
:class:`~numpyro_sgrld.core.algorithm.StepInfo` keeps)."""

from typing import Any, NamedTuple

from numpyro_sgrld.core.checks import named_field_lookup
from numpyro_sgrld.core.gradients import ControlVariate

__all__ = ["ChainState", "SGState"]


class ChainState(NamedTuple):
    """The algorithm's state: what one step (:func:`numpyro_sgrld.core.algorithm.step`) reads and
    returns, none of the step's arguments (the step size, the minibatch), the warm-up's, the
    host's (the minibatch sampler's state, the next key) or the diagnostics'. Each field is
    also readable on the :class:`SGState` that holds it
    (``state.z`` is ``state.chain.z``).

    - **i** – iteration counter (0 before the first step); the schedule is evaluated at ``i``.
    - **z** – the current position: a dict of unconstrained latent values, at which the
      minibatch potential and its gradient were finite (the draw ``MCMC`` records).
    - **sampler_state** – the composed kernel's own state
      (:class:`~numpyro_sgrld.core.composition.SamplerState`: metric, integrator, correction).
    - **potential_energy** – the *minibatch estimate* :math:`\\hat U` at the position the last
      step started from (it comes free with that step's gradient): with ``check_proposal``
      (the default) that is ``z`` unless the step was rejected; without it, one step behind
      ``z``. It is an unbiased but noisy estimate of the full-data potential, not
      ``-log p(z | data)``.
    - **grad_norm** – Euclidean norm of that step's gradient estimate :math:`\\nabla\\hat U`.
    - **diverging** – True when the last step was rejected (:mod:`numpyro_sgrld.core.acceptance`):
      the potential or the gradient at its start was not finite (with ``check_proposal``: at
      the previous step's proposal, which is then abandoned), or the proposed position or
      kernel state, or the step size was not positive; ``z`` is then the previous position. (In
      draws collected by ``MCMC`` with ``thinning``, the recorded ``diverging`` is True when
      *any* step since the previous recorded draw was rejected.) (The checks are sums: a
      gradient whose squared norm, or a state whose entries sum, beyond the float range,
      |sum| > 3.4e38 in float32, counts as non-finite too.)
    - **num_rejected** – how many steps have been rejected since ``init`` (cumulative, whatever
      the ``thinning``): a chain that keeps proposing where the gradient is not finite
      (or, without ``check_proposal``, is stuck at such a point) shows it here.
    - **gradient_state** – the gradient estimator's state: ``None`` for the plain minibatch
      gradient; the :class:`~numpyro_sgrld.core.gradients.ControlVariate` (centre, full-data
      potential and gradient there, estimated distance of the centre from the mode) for control
      variates.
    - **proposal** – with ``check_proposal`` (the default), the position the last step
      proposed from ``z``: the next step evaluates the minibatch potential and its gradient
      there and moves ``z`` to it only if both are finite, else the chain goes back to ``z``
      (:func:`numpyro_sgrld.core.algorithm.step`); ``None`` without ``check_proposal`` and for the
      cyclical presets (which check each proposal at once), where the next step starts from
      ``z``.
    """

    i: Any
    z: Any
    sampler_state: Any
    potential_energy: Any
    grad_norm: Any
    diverging: Any
    num_rejected: Any = 0
    gradient_state: Any = None
    proposal: Any = None

    # NumPyro's `extra_fields` look-up tries `state[name]` after `getattr` fails
    __getitem__ = named_field_lookup


class SGState(NamedTuple):
    """State of every stochastic-gradient kernel, as ``MCMC`` holds it (``last_state``,
    ``post_warmup_state``). The fields of its :class:`ChainState` read through it
    (``state.z``, ``state.diverging``, ..., and in ``extra_fields``);
    to change one, replace the chain: ``state._replace(chain=state.chain._replace(z=...))``.

    - **chain** – the algorithm's :class:`ChainState`.
    - **step_size** – the step size :math:`h` the chain's next step takes, in the units of the
      metric the chain runs with (:math:`h` of
      :math:`\\theta \\leftarrow \\theta - hD\\nabla\\hat U + \\sqrt{2hT}\\,D^{1/2}\\xi`), as in
      NumPyro's ``HMCState``: set at ``init`` and after each step by the step-size rule (a given
      step, a schedule's next value, or the warm-up's adapted step). With ``step_size=None``,
      ``post_warmup_state.step_size`` is the frozen step sampling uses, for :math:`D` the
      preconditioner learnt with it; given back on its own as ``step_size``, it runs without
      that :math:`D` (a given step learns nothing) and is another step: reuse both with
      :func:`~numpyro_sgrld.learnt_settings`.
    - **batch_state** – the minibatch sampler's state (``None`` when drawing with replacement).
    - **rng_key** – random key for the next step.
    - **warmup** – with ``step_size=None``, the warm-up's
      :class:`~numpyro_sgrld.warmup.WarmupState` (the step-size adaptation's state, its
      ``step``, and, for a metric learnt in warm-up, the current slow window's statistics, its
      ``preconditioner``); ``None`` with a given step size. The learnt preconditioner itself is
      ``sampler_state.metric.scale`` (its diagonal) and ``sampler_state.metric.factor`` (a
      root of it, where it is dense). ``adaptation`` reads its ``step``.
    - **monitor** – when ``numpyro.infer.MCMC``'s own loop runs the kernel, the run's streaming
      moments for the verdict at its end (:class:`~numpyro_sgrld.verdict.monitor.RunMonitor`);
      ``None`` otherwise.
    - **equipartition** – the run's equipartition sums after warm-up
      (:class:`~numpyro_sgrld.core.equipartition.Equipartition`): the verdict's check that the
      chain samples the posterior's spread, from the gradient each step evaluates anyway,
      kept by :func:`~numpyro_sgrld.core.equipartition.observe` over each step's
      :class:`~numpyro_sgrld.core.algorithm.StepInfo`.
    - **configurational_temperature** – the last step's reading of that check,
      :math:`\\frac{1}{dT}\\sum_i(\\theta_i - c_i)\\,\\partial_i\\hat U(\\theta)` at the position it
      started from (:mod:`numpyro_sgrld.core.equipartition`): its mean over the draws after warm-up
      is 1 for a chain that samples the posterior (``extra_fields``).
    """

    chain: ChainState
    step_size: Any
    batch_state: Any
    rng_key: Any
    warmup: Any = None
    monitor: Any = None
    equipartition: Any = None
    configurational_temperature: Any = None

    @property
    def adaptation(self):
        """The step-size adaptation's :class:`~numpyro_sgrld.warmup.adaptation.StepSizeState`
        (``warmup.step``), or ``None`` with a given step size."""
        return None if self.warmup is None else self.warmup.step

    @property
    def bias_share(self):
        """The share of ``target_bias`` the adapted step aims at where a composition set one
        (:mod:`~numpyro_sgrld.sampler.gibbs_bias`); ``None`` for the whole, or with a given
        step size."""
        return None if self.warmup is None else self.warmup.step.bias_share

    @property
    def control_variate(self):
        """The :class:`~numpyro_sgrld.core.gradients.ControlVariate`, or ``None`` without one."""
        state = self.chain.gradient_state
        return state if isinstance(state, ControlVariate) else None

    # NumPyro's `extra_fields` look-up tries `state[name]` after `getattr` fails
    __getitem__ = named_field_lookup


def _read_through(name):
    """The :class:`SGState` property that reads the chain's field ``name``."""
    return property(lambda state: getattr(state.chain, name),
                    doc=f"The chain's ``{name}`` (:class:`ChainState`).")


for _name in ChainState._fields:
    setattr(SGState, _name, _read_through(_name))

