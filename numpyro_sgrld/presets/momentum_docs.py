"""The docstrings of the underdamped presets (SGHMC, BAOAB, SGNHT, BADODAB) and of the
cyclical ones, as :mod:`numpyro_sgrld.presets.docs` holds the others'."""

from numpyro_sgrld.presets.docs import COMMON, example

__all__ = ["SGHMC", "BAOAB", "SGNHT", "BADODAB", "CyclicalSGLD", "CyclicalSGHMC"]


SGHMC = (
    r"""Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin 2014, Eq. 15).

    Discretises the second-order Langevin dynamics with friction, unit mass:

    .. math::
        v_{t+1} &= (1 - \alpha) v_t - h\nabla\hat U(\theta_t)
                  + \mathcal N\big(0,\; 2(\alpha - \hat\beta) h T\big), \\
        \theta_{t+1} &= \theta_t + v_{t+1}.

    Parameter mapping to Chen et al.: ``step_size`` :math:`h = \eta` (learning rate),
    ``friction`` :math:`\alpha`, ``noise_estimate`` :math:`\hat\beta`. In continuous time
    :math:`\epsilon = \sqrt{h}` and friction :math:`C = \alpha / \epsilon`. The momentum is
    kept across steps (and across ``MCMC.run`` calls continued from ``last_state``); a fresh
    minibatch is drawn every step.

    **Known bias.** Like SGLD, a constant step gives :math:`O(h)` discretisation bias and the
    unaccounted minibatch noise inflates the spread (by about
    :math:`h\,\mathrm{Var}[\nabla\hat U] / (2(\alpha - \hat\beta))` relative to the injected
    noise); a larger ``friction`` or a good ``noise_estimate`` reduces it.

    **State size:** one momentum per parameter (``sampler_state.integrator.momentum``).

    :param model: NumPyro model.
    :param step_size: :math:`h = \eta`, float > 0 or a schedule.
    :param friction: :math:`\alpha \in (0, 1]`, default 0.1.
    :param noise_estimate: :math:`\hat\beta \in [0, \alpha)`, default 0.
    :param initial_momentum: ``"zero"`` (default) or ``"random"`` (:math:`\mathcal N(0, h_0 T)`).
    :param resample_momentum_every: redraw :math:`v \sim \mathcal N(0, h_t T)` every this many
        steps (``None``: never).
    :param partial_refresh: :math:`a \in [0, 1)`: at each resampling keep a fraction of the
        momentum, :math:`v \leftarrow av + \sqrt{1 - a^2}\,v'` (Horowitz 1991); 0 (default)
        redraws it.
    :param naive: naive SGHMC, no friction and no injected noise (Chen et al. 2014, Sec. 3.2):
        does **not** sample the posterior with stochastic gradients; warns. Needs
        ``resample_momentum_every``; for demonstrations (``benchmarks/papers/chen_double_well.py``).
    :param metric: a :class:`~numpyro_sgrld.core.metrics.Metric` (default: learnt in warm-up with
        ``step_size=None``, else the identity): with ``metrics.rmsprop()`` this is
        preconditioned SGHMC, mass matrix :math:`M = D^{-1}`
        (:func:`~numpyro_sgrld.core.integrators.sghmc_step`), in learnt coordinates with
        ``step_size=None`` (:func:`~numpyro_sgrld.warmup.choices.kernel_metric`).
    :param kwargs: ``potential_fn``, ``temperature``, ``num_data``, ``batching``,
        ``init_strategy`` (see :class:`~numpyro_sgrld.SGMCMC`).

    Example::

        >>> import jax, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> from numpyro_sgrld import SGHMC
        >>> def model():
        ...     numpyro.sample("theta", dist.Normal(0.0, 1.0))
        >>> mcmc = MCMC(SGHMC(model, step_size=0.01, friction=0.1), num_warmup=100,
        ...             num_samples=500, progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0))
        >>> mcmc.get_samples()["theta"].shape
        (500,)
    """
)


BAOAB = (
    r"""Underdamped Langevin dynamics by the BAOAB splitting (Leimkuhler & Matthews 2013),
    with stochastic gradients (:func:`numpyro_sgrld.core.integrators.baoab`).

    .. math::
        v \leftarrow v - \tfrac h2 D\nabla\hat U,\;
        \theta \leftarrow \theta + \tfrac h2 v,\;
        v \leftarrow e^{-\gamma h}v + \sqrt{T(1 - e^{-2\gamma h})}\,D^{1/2}\xi,\;
        \theta \leftarrow \theta + \tfrac h2 v,\;
        v \leftarrow v - \tfrac h2 D\nabla\hat U(\theta).

    ``step_size`` :math:`h` is a time step (not SGHMC's learning rate), ``friction``
    :math:`\gamma` a rate per unit of time. With exact gradients the positions sample a
    Gaussian target exactly at every stable step (:math:`h < 2/\sqrt{\lambda_{\max}}`); SGLD at
    the same :math:`h` has variance :math:`\sigma^2/(1 - h/(2\sigma^2))`. One gradient per
    step. With ``step_size=None`` (the default) warm-up learns the preconditioner as SGLD's
    does and adapts the step by the time-step law of
    :func:`~numpyro_sgrld.core.integrators.baoab`: the gradient noise inflates the variance by
    :math:`h s^2/(2\gamma T)`, and the step stays at :math:`h\sqrt{\lambda} \le
    2\sqrt\delta` (``target_bias`` :math:`\delta`), well inside the stability limit.

"""
        + COMMON
        + r"""
    :param friction: :math:`\gamma > 0`, default 1.
    :param metric: a :class:`~numpyro_sgrld.core.metrics.Metric` (mass :math:`D^{-1}`); default
        the preconditioner learnt in warm-up with ``step_size=None``, else the identity.
"""
        + example("BAOAB", "step_size=0.1")
)


SGNHT = (
    r"""The stochastic gradient Nosé–Hoover thermostat (Ding et al. 2014; the integrator
    :func:`numpyro_sgrld.core.integrators.sgnht`): SGHMC whose friction :math:`\xi` is a dynamic
    variable that keeps the kinetic temperature at :math:`T`, absorbing the unknown gradient
    noise.

    .. math::
        p \leftarrow e^{-\xi h}p - \nabla\hat U\,h + \sqrt{2AhT}\,\eta, \quad
        \theta \leftarrow \theta + p\,h, \quad
        \xi \leftarrow \xi + (p^\top p/d - T)\,h.

    ``step_size`` :math:`h` is a time step; ``diffusion`` :math:`A`. With ``step_size=None``
    (the default) warm-up learns a constant preconditioner as SGLD's does, in whose
    coordinates the thermostat runs, and adapts the step by the time-step law of
    :func:`~numpyro_sgrld.core.integrators.sgnht`.

    **Known limit.** The thermostat is one scalar: it absorbs the gradient noise's *average*
    variance. Where anisotropic gradient noise dominates the injected diffusion, coordinates
    with more noise than average come out wider and the others narrower (±3 % on a small
    regression, docs/benchmarks.md, "SGNHT when the gradient noise dominates"); a larger
    ``diffusion`` reduces it. The thermostat also takes tens of time units to reach its
    equilibrium from :math:`A`.

"""
        + COMMON
        + """
    :param diffusion: :math:`A > 0`, default 1.
    :param metric: a constant :class:`~numpyro_sgrld.core.metrics.Metric`; default the
        preconditioner learnt in warm-up with ``step_size=None``, else the identity.
"""
        + example("SGNHT", "step_size=0.05")
)


BADODAB = (
    r"""BADODAB (Leimkuhler & Shang 2016, "Adaptive thermostats for noisy gradient
    systems"; the integrator :func:`numpyro_sgrld.core.integrators.badodab`): the adaptive
    Langevin thermostat of SGNHT, integrated by the B A D O D A B splitting (BAOAB's
    splitting with a half-step of the thermostat around an exact Ornstein–Uhlenbeck step at
    the thermostat's friction).

    .. math::
        d\theta = p\,dt, \quad dp = -\nabla U\,dt - \xi p\,dt + \sqrt{2AT}\,dW, \quad
        d\xi = \mu^{-1}(p^\top p/d - T)\,dt.

    ``step_size`` :math:`h` is a time step; ``diffusion`` :math:`A`, ``thermal_mass``
    :math:`\mu`. With ``step_size=None`` (the default) warm-up adapts the step by the
    time-step law of :func:`~numpyro_sgrld.core.integrators.badodab`, in the coordinates of a
    constant preconditioner learnt as SGLD's is.

"""
        + COMMON
        + r"""
    :param diffusion: :math:`A > 0`, default 1.
    :param thermal_mass: :math:`\mu > 0`, default 1.
    :param metric: a constant :class:`~numpyro_sgrld.core.metrics.Metric`; default the
        preconditioner learnt in warm-up with ``step_size=None``, else the identity.
"""
        + example("BADODAB", "step_size=0.05")
)


#: What the cyclical presets' docstrings share.
CYCLICAL = r"""

    **The step:** :math:`h_k = \frac{h_0}{2}\big[\cos(\pi\,\mathrm{mod}(k, L)/L) + 1\big]`
    (:class:`~numpyro_sgrld.core.schedules.cyclical`), :math:`k` the step counter, :math:`L` =
    ``cycle_length``. **The stages:** the first :math:`E = \lceil\beta L\rceil` steps of every
    cycle (``exploration`` :math:`\beta`) are an *exploration stage*: the same update at
    temperature 0 (no injected noise), which moves fast towards a mode while the step is large;
    the remaining :math:`L - E` steps sample. Exploration states are not posterior draws, so
    they never reach ``MCMC``'s draws: ``MCMC`` records one state per transition on a fixed
    grid, and the transition that starts a cycle runs the whole exploration stage internally
    (a loop of :math:`E` steps) before its one sampling step. Every recorded state is a
    sampling-stage state; ``num_samples`` counts sampling steps (each cycle gives
    :math:`L - E` of them, at the cost of :math:`L` gradients) and the step counter ``i`` counts
    all steps. :meth:`cycle_position` maps a draw's ``i`` (``extra_fields=("i",)``) to its
    cycle and step within the cycle.

    **By default** (``step_size=None``) warm-up runs the plain kernel (SGLD or SGHMC) with
    its adaptation: the preconditioner learnt in warm-up, control variates where they pay,
    and the step of the bias target (:mod:`numpyro_sgrld.warmup.adaptation`), which becomes the
    peak :math:`h_0`. The cycles start when warm-up ends (:math:`k` counts the steps since),
    so every draw is taken at a step of at most :math:`h_0/2` (with ``exploration=0.5``) and
    inflates the variance by at most half the ``target_bias``. See ``docs/cyclical.md``.

    :param model: NumPyro model (or ``potential_fn=``).
    :param step_size: :math:`h_0`, the cycle's peak step (a float > 0), or ``None`` (default):
        adapted in warm-up.
    :param cycle_length: :math:`L`, steps per cycle (exploration included; >= 2; default
        :data:`CYCLE_LENGTH`).
    :param exploration: :math:`\beta \in [0, 1)`, the fraction of each cycle spent exploring
        (default 0.5, our choice; Zhang et al. tune it per experiment). 0: cyclical step sizes
        only."""


CyclicalSGLD = (
    r"""Cyclical SGLD (Zhang, Li, Zhang, Chen & Wilson 2020, "Cyclical stochastic
    gradient MCMC for Bayesian deep learning", cSGLD): SGLD (or preconditioned Langevin with
    ``metric=``) with a cosine step size restarted every cycle and an exploration stage at the
    start of each cycle.""" + CYCLICAL + r"""
    :param metric: a :class:`~numpyro_sgrld.core.metrics.Metric` (default: learnt in warm-up with
        ``step_size=None``, else the identity).
    :param kwargs: as :class:`~numpyro_sgrld.SGMCMC` (``gradient``, ``correction``, ...).
    """
)


CyclicalSGHMC = (
    r"""Cyclical SGHMC (Zhang et al. 2020, cSGHMC): SGHMC
    (:class:`~numpyro_sgrld.SGHMC`, Chen et al.'s parametrisation, ``step_size`` the learning rate)
    with a cosine step size restarted
    every cycle and an exploration stage (momentum SGD: friction, no injected noise) at the
    start of each cycle. The momentum is kept across stages and cycles.""" + CYCLICAL + r"""
    :param friction: :math:`\alpha \in (0, 1]`, default 0.1.
    :param noise_estimate: :math:`\hat\beta \in [0, \alpha)`, default 0.
    :param metric: a :class:`~numpyro_sgrld.core.metrics.Metric` (default: learnt in warm-up with
        ``step_size=None``, else the identity).
    :param kwargs: as :class:`~numpyro_sgrld.SGMCMC`.
    """
)
