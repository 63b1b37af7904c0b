r"""The named stochastic-gradient kernels: presets of :class:`~numpyro_sgrld.SGMCMC`.

Each is a choice of metric (:mod:`numpyro_sgrld.metrics`), integrator
(:mod:`numpyro_sgrld.integrators`) and, optionally, the Γ correction
(:mod:`numpyro_sgrld.correction`); every other argument is the adapter's
(:class:`~numpyro_sgrld.SGMCMC`), including ``gradient=`` / ``control_variate=``.

============  ======================  ======================
kernel        metric                  integrator
============  ======================  ======================
SGLD          identity                langevin
PSGLD         rmsprop                 langevin
MongeSGLD     monge                   langevin
ShampooSGLD   shampoo                 langevin
WenzelSGLD    wenzel                  langevin
SGHMC         identity (or any)       sghmc
AdamSGLD      identity (or any)       adaptive_drift
BNPSGLD       bnp                     langevin
BAOAB         identity (or any)       baoab
SGNHT         identity                sgnht
============  ======================  ======================
"""

import math
import warnings
from functools import partial

from numpyro_sgrld._adapter import SGMCMC
from numpyro_sgrld._checks import integer, real
from numpyro_sgrld.integrators import adaptive_drift, badodab, baoab, langevin, sghmc, sgnht
from numpyro_sgrld.metrics import (
    bnp,
    identity,
    learnt,
    monge,
    rmsprop,
    shampoo,
    wenzel,
    whitened,
)
from numpyro_sgrld.metrics.monge import AUTO_FREEZE
from numpyro_sgrld.schedules import cyclical

__all__ = [
    "KERNELS",
    "LangevinKernel",
    "SGLD",
    "SGHMC",
    "PSGLD",
    "MongeSGLD",
    "ShampooSGLD",
    "WenzelSGLD",
    "AdamSGLD",
    "BNPSGLD",
    "BAOAB",
    "SGNHT",
    "BADODAB",
    "CyclicalSGLD",
    "CyclicalSGHMC",
]


def _in_learnt_coordinates(metric, step_size):
    """An adaptive preset's metric: with ``step_size=None``, in the coordinates of a dense
    metric learnt in warm-up (:func:`~numpyro_sgrld.metrics.whitened`, for at most
    :data:`~numpyro_sgrld.metrics.constant.DENSE_MAX_DIM` coordinates); as given otherwise."""
    return whitened(metric) if step_size is None else metric


class LangevinKernel(SGMCMC):
    r"""Riemannian Langevin kernel for any :class:`~numpyro_sgrld.metrics.Metric`:
    ``SGMCMC(model, step_size, metric=metric, integrator=integrators.langevin(), ...)``.

    .. math::
        \theta \leftarrow \theta - h\,D\nabla\hat U + hT\,\Gamma + \sqrt{2hT}\,D^{1/2}\xi.
    """

    def __init__(self, model=None, step_size=None, *, metric, **kwargs):
        super().__init__(model, step_size, metric=metric, integrator=langevin(), **kwargs)


class SGLD(SGMCMC):
    r"""Stochastic gradient Langevin dynamics (Welling & Teh 2011).

    Discretises :math:`d\theta = -\nabla U(\theta)\,dt + \sqrt{2T}\,dW` with a minibatch
    gradient:

    .. math::
        \theta_{t+1} = \theta_t - h_t \nabla\hat U(\theta_t) + \sqrt{2 h_t T}\,\xi_t,
        \qquad \xi_t \sim \mathcal N(0, I).

    Parameter mapping: ``step_size`` :math:`h = \epsilon/2` of Welling & Teh
    (who write :math:`\frac{\epsilon}{2}\nabla\log p + \mathcal N(0, \epsilon)`), or
    :math:`h = \mathrm{lr}/N` for a learning rate on the mean log-likelihood.

    **Known bias.** With a constant step the chain's stationary law is not the posterior: on a
    Gaussian :math:`\mathcal N(0, \sigma^2)` with exact gradients its variance is
    :math:`\sigma^2 / (1 - h / (2\sigma^2))`, and minibatch noise adds roughly
    :math:`h \cdot \mathrm{Var}[\nabla\hat U]/2` more (Vollmer, Zygalakis & Teh 2016). Both
    vanish as :math:`h \to 0`; a decaying schedule removes them asymptotically.

    **State size:** none beyond the position.

    :param model: NumPyro model.
    :param step_size: :math:`h`, float > 0 or a schedule.
    :param kwargs: ``potential_fn``, ``temperature``, ``num_data``, ``batching``,
        ``init_strategy`` (see :class:`~numpyro_sgrld.SGMCMC`).

    Example::

        >>> import jax, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> from numpyro_sgrld import SGLD
        >>> def model():
        ...     numpyro.sample("theta", dist.Normal(0.0, 1.0))
        >>> mcmc = MCMC(SGLD(model, step_size=0.05), num_warmup=100, num_samples=500,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0))
        >>> mcmc.get_samples()["theta"].shape
        (500,)
    """

    def __init__(self, model=None, step_size=None, *, metric=None, **kwargs):
        super().__init__(model, step_size, metric=metric, integrator=langevin(), **kwargs)


class SGHMC(SGMCMC):
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
    :param metric: a :class:`~numpyro_sgrld.metrics.Metric` (default identity): with
        ``metrics.rmsprop()`` this is preconditioned SGHMC, mass matrix :math:`M = D^{-1}`
        (:func:`~numpyro_sgrld.integrators.sghmc_step`).
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

    def __init__(
        self,
        model=None,
        step_size=None,
        *,
        friction=0.1,
        noise_estimate=0.0,
        initial_momentum="zero",
        resample_momentum_every=None,
        partial_refresh=0.0,
        naive=False,
        metric=None,
        **kwargs,
    ):
        integrator = sghmc(friction, noise_estimate, initial_momentum, resample_momentum_every,
                           partial_refresh, naive)
        super().__init__(model, step_size, metric=metric, integrator=integrator, **kwargs)


_COMMON = """    :param model: NumPyro model (or ``potential_fn=``).
    :param step_size: :math:`h`, float > 0 or a schedule (:mod:`numpyro_sgrld.schedules`).
    :param kwargs: ``temperature``, ``num_data``, ``batching``, ``init_strategy``,
        ``potential_fn``, ``data_parallel``, ``gradient``, ``control_variate``, ``mode_steps``,
        ``start_at_centre``, ``check_proposal`` (see :class:`~numpyro_sgrld.SGMCMC`)."""


def _example(name, args):
    return f"""
    Example::

        >>> import jax, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> from numpyro_sgrld import {name}
        >>> def model():
        ...     numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        >>> mcmc = MCMC({name}(model, {args}), num_warmup=100, num_samples=200,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0))
        >>> mcmc.get_samples()["theta"].shape
        (200, 3)
    """


class PSGLD(SGMCMC):
    __doc__ = (
        r"""Preconditioned SGLD with the RMSprop metric (Li, Chen, Carlson & Carin 2016).

    .. math::
        V \leftarrow \alpha V + (1-\alpha)\,\bar g\odot\bar g, \quad
        D = \mathrm{diag}\big(1/(\lambda + \sqrt{V / (1-\alpha^t)})\big), \\
        \theta \leftarrow \theta - h\,D\nabla\hat U + h\,\Gamma + \sqrt{2hT}\,D^{1/2}\xi,

    :math:`\bar g = \nabla\hat U/N` the per-datum gradient (prior included, as in TFP,
    bnn_priors and Yu et al.; Li et al.'s paper leaves the prior out).

    Parameter mapping: ``decay`` :math:`\alpha` (Li et al.'s :math:`\alpha`), ``eps``
    :math:`\lambda`, ``bias_correction`` the :math:`1/(1-\alpha^t)` factor (on by default).

    **Known bias** (Rensmeyer & Niggemann 2023). Li et al. drop Γ, so even as
    :math:`h \to 0` the chain samples :math:`\propto p(\theta)/D(\theta)`; on
    :math:`\mathcal N(0,1)` with a short moving average that is
    :math:`\propto \varphi(\theta)(\lambda + |\theta|)`. ``correction="exact"`` or
    ``"hutchinson"`` adds Γ and restores :math:`p` in the small-step limit
    (:mod:`numpyro_sgrld.correction`; closed form
    :math:`\Gamma_i = -D_{ii}^2\,\bar g_i H_{ii}/\sqrt{V_i}`).

    **State size:** one number per parameter (and a step counter).

"""
        + _COMMON
        + """
    :param decay: :math:`\\alpha \\in [0, 1)`, default 0.99.
    :param eps: :math:`\\lambda \\ge 0`, default 1e-8.
    :param correction: ``None`` (default), ``"exact"`` or ``"hutchinson"``.
    :param correction_form: ``"lagged"`` (default) or ``"instant"``
        (:mod:`numpyro_sgrld.correction`).
    :param bias_correction: divide V by :math:`1 - \\alpha^t` (default True).
"""
        + _example("PSGLD", "step_size=1e-2")
    )

    def __init__(
        self,
        model=None,
        step_size=None,
        *,
        decay=0.99,
        eps=1e-8,
        correction=None,
        bias_correction=True,
        **kwargs,
    ):
        metric = rmsprop(decay, eps, bias_correction=bias_correction)
        metric = _in_learnt_coordinates(metric, step_size)
        super().__init__(
            model, step_size, metric=metric, integrator=langevin(), correction=correction, **kwargs
        )


class MongeSGLD(SGMCMC):
    __doc__ = (
        r"""SGRLD in the Monge metric (Yu et al. 2023; Hartmann et al. 2022).

    One rank-one metric over all latent sites together:

    .. math::
        V \leftarrow \lambda V + (1-\lambda)\bar g, \quad G = I + \alpha^2 V V^\top, \quad
        D = G^{-1} = I - \frac{\alpha^2 V V^\top}{1 + \alpha^2\|V\|^2}, \\
        \theta \leftarrow \theta - h\,D\nabla\hat U + h\,\Gamma + \sqrt{2hT}\,D^{1/2}\xi,

    applied without forming a matrix (element-wise work and three dot products per step).

    Parameter mapping to Yu et al.: ``alpha2`` :math:`\alpha^2` (the metric's strength; 0 gives
    SGLD), ``decay`` :math:`\lambda`, ``step_size`` :math:`h = \mathrm{lr}/N`;
    ``max_drift_norm`` is the safeguard of their funnel code (1e3 there): when
    :math:`\|D\nabla\hat U\|` exceeds it, that step uses a scaled identity metric.

    **Known bias** (Rensmeyer & Niggemann 2023): without Γ the small-step limit is
    :math:`\propto p/D`; on :math:`\mathcal N(0,1)` it is
    :math:`\propto\varphi(\theta)(1 + \alpha^2\theta^2)`. ``correction`` adds Γ (closed form
    :math:`\Gamma = -c[HV + \mathrm{tr}(H)V - 2c(V^\top H V)V]`,
    :math:`c = \alpha^2/(1+\alpha^2\|V\|^2)`).

    **State size:** one number per parameter.

"""
        + _COMMON
        + """
    :param alpha2: ``"auto"`` (default): :math:`\\alpha^2` scaled so that
        :math:`\\alpha^2\\|V\\|^2` is 0.1 on average, whatever the gradient's scale
        (:func:`numpyro_sgrld.metrics.monge`); or a number :math:`\\alpha^2 \\ge 0` (Yu et
        al. use 1.0–1.25 on MNIST). A fixed :math:`\\alpha^2` has units: where the per-datum
        gradient is large (a badly conditioned posterior, :math:`\\|V\\|^2 \\gg 1`)
        :math:`\\alpha^2 = 1` makes the chain diverge at steps SGLD takes (posteriordb's
        sblrc-blr and diamonds) or run away (a horseshoe MLP on digits); ``"auto"`` does not
        (docs/benchmarks.md, step-size adaptation). With ``correction``, an ``"auto"``
        :math:`\\alpha^2` is fixed after :data:`~numpyro_sgrld.metrics.monge.AUTO_FREEZE`
        (1000) steps, so that Γ corrects the metric the chain uses (use ``num_warmup`` at
        least that long). ``alpha2=1.0`` is Rensmeyer & Niggemann's and Yu et al.'s fixed
        strength.
    :param decay: :math:`\\lambda \\in [0, 1)`, default 0.9.
    :param correction: ``None`` (default), ``"exact"`` or ``"hutchinson"``.
    :param correction_form: ``"lagged"`` (default) or ``"instant"``
        (:mod:`numpyro_sgrld.correction`).
    :param max_drift_norm: safeguard threshold, default ``None`` (off).
"""
        + _example("MongeSGLD", "step_size=1e-2, alpha2=1.0")
    )

    def __init__(
        self,
        model=None,
        step_size=None,
        *,
        alpha2="auto",
        decay=0.9,
        correction=None,
        max_drift_norm=None,
        **kwargs,
    ):
        auto = isinstance(alpha2, str) and alpha2 == "auto"
        # with Γ, an adapted alpha2 is fixed after AUTO_FREEZE steps (metrics.monge)
        freeze = AUTO_FREEZE if auto and correction is not None else None
        metric = monge(alpha2, decay, max_drift_norm=max_drift_norm, freeze_after=freeze)
        metric = _in_learnt_coordinates(metric, step_size)
        self._freeze_alpha2 = freeze
        super().__init__(
            model, step_size, metric=metric, integrator=langevin(), correction=correction, **kwargs
        )

    def init(self, rng_key, num_warmup, init_params=None, model_args=(), model_kwargs=None):
        if self._freeze_alpha2 is not None and num_warmup < self._freeze_alpha2:
            warnings.warn(
                f"MongeSGLD(alpha2='auto', correction=...) fixes alpha2 after "
                f"{self._freeze_alpha2} steps, but num_warmup={num_warmup}: until then Γ "
                "corrects a metric that still changes. Use num_warmup >= "
                f"{self._freeze_alpha2}, or give a number alpha2.",
                UserWarning,
                stacklevel=2,
            )
        return super().init(rng_key, num_warmup, init_params, model_args, model_kwargs)


class ShampooSGLD(SGMCMC):
    __doc__ = (
        r"""SGRLD in the Shampoo metric (Yu et al. 2023; Gupta et al. 2018; Anil et al. 2021).

    Per latent site and block, Kronecker-factored statistics of the per-datum gradient, one
    factor per tensor mode (:func:`numpyro_sgrld.metrics.shampoo`):

    .. math::
        L_i \leftarrow \alpha L_i + (1-\alpha)G_{(i)}G_{(i)}^\top, \quad
        N_i = (L_i + \epsilon\lambda_{max}(L_i) I)^{-1/(4k)}, \\
        \theta \leftarrow \theta - h\,(\nabla\hat U \times_1 N_1^2 \cdots \times_k N_k^2)
               + \sqrt{2hT}\,(\xi \times_1 N_1 \cdots \times_k N_k).

    For a weight matrix :math:`D = L^{-1/4}\otimes R^{-1/4}`; vectors and biases get the full
    matrix :math:`L^{-1/2}` (as in Yu et al.'s funnel; their network code left vectors
    unpreconditioned). Roots are recomputed every ``update_interval`` steps (identity before the
    first); dimensions are merged up to, and split into blocks of, ``block_size``.

    Parameter mapping to Yu et al.: ``decay`` :math:`\alpha` (their :math:`\beta`), ``eps``
    :math:`\epsilon` (1e-6 in their funnel), ``update_interval`` (100; 1 in the funnel).

    **Known bias** (Rensmeyer & Niggemann 2023): without Γ the small-step limit on
    :math:`\mathcal N(0,1)` (1-D, interval 1, :math:`\epsilon\to 0`) is
    :math:`\propto\varphi(\theta)|\theta|`. ``correction`` is available when
    ``update_interval == 1`` (the metric must follow the current statistic); the exact form
    differentiates through symmetric eigendecompositions, which is ill-defined at repeated
    eigenvalues, so prefer it for small models.

    **State size:** per block and mode, three :math:`n_i\times n_i` matrices
    (:math:`n_i \le` ``block_size``).

"""
        + _COMMON
        + """
    :param decay: :math:`\\alpha \\in [0, 1)`, default 0.99.
    :param eps: :math:`\\epsilon \\ge 0`, default 1e-8.
    :param update_interval: steps between root recomputations, default 100.
    :param block_size: largest block dimension, default 128.
    :param correction: ``None`` (default); ``"exact"`` or ``"hutchinson"`` need
        ``update_interval=1``.
    :param correction_form: ``"lagged"`` (default) or ``"instant"``
        (:mod:`numpyro_sgrld.correction`).
    :param block_split: ``"even"`` (default) or ``"fixed"`` blocks (Yu et al.'s code).
    :param precondition_vectors: default True; False leaves vectors unpreconditioned (Yu et
        al.'s network code).
    :param ridge: ``"root"`` (default) or ``"statistic"`` (Yu et al.'s code adds the ridge into
        the statistic). The three switches together reproduce Yu et al.'s update
        (:func:`numpyro_sgrld.metrics.shampoo`).
"""
        + _example("ShampooSGLD", "step_size=1e-2, update_interval=10")
    )

    def __init__(
        self,
        model=None,
        step_size=None,
        *,
        decay=0.99,
        eps=1e-8,
        update_interval=100,
        block_size=128,
        correction=None,
        block_split="even",
        precondition_vectors=True,
        ridge="root",
        **kwargs,
    ):
        metric = shampoo(
            decay,
            eps,
            update_interval,
            block_size,
            block_split=block_split,
            precondition_vectors=precondition_vectors,
            ridge=ridge,
        )
        metric = _in_learnt_coordinates(metric, step_size)
        super().__init__(
            model, step_size, metric=metric, integrator=langevin(), correction=correction, **kwargs
        )


class WenzelSGLD(SGMCMC):
    __doc__ = (
        r"""SGLD with Wenzel et al.'s (2020) layer-wise preconditioner (as in bnn_priors and
    Yu et al. 2023).

    One scale per latent site p, refreshed every ``update_interval`` steps:

    .. math::
        s_p \leftarrow \alpha s_p + (1-\alpha)\,\mathrm{mean}(\bar g_p^2), \quad
        D_p = \big((s_p + \epsilon)/\min_q(s_q + \epsilon)\big)^{-1/2}, \\
        \theta_p \leftarrow \theta_p - h D_p\nabla_p\hat U + \sqrt{2hT D_p}\,\xi_p.

    Being constant between refreshes, the metric adds no Γ term while it is held fixed; the
    refreshes themselves depend on the chain's past, a small adaptation bias that vanishes when
    the statistic settles.

    **State size:** two numbers per site.

"""
        + _COMMON
        + """
    :param decay: :math:`\\alpha \\in [0, 1)`, default 0.99.
    :param eps: :math:`\\epsilon \\ge 0`, default 1e-8.
    :param update_interval: steps between refreshes; default ``None`` = one epoch
        (``N/n`` of the largest subsample plate, 1 without one).
    :param lagged_refresh: default False; True makes a refresh take effect from the next step,
        as in Yu et al.'s code (:func:`numpyro_sgrld.metrics.wenzel`).
"""
        + _example("WenzelSGLD", "step_size=1e-2")
    )

    def __init__(
        self,
        model=None,
        step_size=None,
        *,
        decay=0.99,
        eps=1e-8,
        update_interval=None,
        lagged_refresh=False,
        **kwargs,
    ):
        metric = wenzel(decay, eps, update_interval, lagged_refresh=lagged_refresh)
        metric = _in_learnt_coordinates(metric, step_size)
        super().__init__(model, step_size, metric=metric, integrator=langevin(), **kwargs)


class AdamSGLD(SGMCMC):
    __doc__ = (
        r"""SGLD with an adaptive drift (Kim, Song & Liang 2022, "Stochastic gradient Langevin
    dynamics with adaptive drifts").

    .. math::
        m \leftarrow \beta_1 m + (1-\beta_1)\nabla\hat U, \quad
        V \leftarrow \beta_2 V + (1-\beta_2)\nabla\hat U\odot\nabla\hat U, \\
        \theta \leftarrow \theta - h\Big(\nabla\hat U + a\,\frac{m}{\sqrt V + \lambda}\Big)
               + \sqrt{2hT}\,\xi,

    on the full minibatch gradient, both averages starting at 0. Not a Riemannian method: the
    noise is not preconditioned. (The paper's text was not available to us; this follows a
    public implementation citing it and Rensmeyer & Niggemann's description.)

    Parameter mapping: ``drift_scale`` :math:`a`, ``beta1`` :math:`\beta_1`, ``beta2``
    :math:`\beta_2`, ``eps`` :math:`\lambda`.

    **Known bias** (Rensmeyer & Niggemann 2023): the extra drift changes the stationary law,
    with no Γ-type fix; on :math:`\mathcal N(0,1)` with short averages the small-step limit is
    :math:`\propto\varphi(\theta)\,e^{-a|\theta|}(|\theta|+\lambda)^{a\lambda}` — a distribution
    pulled towards the mode. Use it as an optimiser-flavoured sampler, not for calibrated
    uncertainty.

    **State size:** two numbers per parameter.

"""
        + _COMMON
        + """
    :param drift_scale: :math:`a \\ge 0`, default 1.
    :param beta1: :math:`\\beta_1 \\in [0, 1)`, default 0.9.
    :param beta2: :math:`\\beta_2 \\in [0, 1)`, default 0.999.
    :param eps: :math:`\\lambda \\ge 0`, default 1e-8.
    :param metric: a :class:`~numpyro_sgrld.metrics.Metric` (default: with ``step_size=None``
        the constant metric learnt in warm-up, :func:`~numpyro_sgrld.metrics.learnt`; the
        identity with a given step), applied to the drift and the noise
        (:func:`~numpyro_sgrld.integrators.adaptive_drift_step`).
"""
        + _example("AdamSGLD", "step_size=1e-2")
    )
    def __init__(
        self,
        model=None,
        step_size=None,
        *,
        drift_scale=1.0,
        beta1=0.9,
        beta2=0.999,
        eps=1e-8,
        metric=None,
        **kwargs,
    ):
        integrator = adaptive_drift(drift_scale, beta1, beta2, eps)
        if metric is None:
            metric = learnt() if step_size is None else identity()
        super().__init__(model, step_size, metric=metric, integrator=integrator, **kwargs)


class BNPSGLD(SGMCMC):
    __doc__ = (
        r"""SGLD with Batch Normalization Preconditioning (Lange, Deng, Ye & Lin 2023, Alg. 1).

    Each dense layer's weights and bias share one preconditioner :math:`P = UD` built from the
    running mean :math:`\mu` and variance :math:`\sigma^2` of the layer's **inputs** on the
    minibatch (:func:`numpyro_sgrld.metrics.bnp`):

    .. math::
        \theta \leftarrow \theta - \frac{h}{q^2} PP^\top\nabla\hat U
                           + \sqrt{2hT}\,\frac{P}{q}\,\xi, \qquad
        q^2 = \max(m/n, 1),

    :math:`m` the layer's input dimension, :math:`n` the minibatch size; a convolution is the
    dense map on its patches (:math:`m = c_{in}\prod k`, :math:`n` = batch × output
    positions). Every other parameter (priors' scale sites, a regressor's noise scale, other
    layers) gets the identity: plain SGLD. The model's networks must be built with
    :func:`numpyro_sgrld.random_haiku_module` (it records each ``hk.Linear``'s inputs and each
    convolution's patches in the gradient's own forward pass), with a centred prior on the
    weights.

    Parameter mapping: ``decay`` :math:`\rho`, ``eps1`` :math:`\epsilon_1`, ``eps2``
    :math:`\epsilon_2` (the paper's defaults 0.99, 1e-2, 1e-4); ``noise_scale="as_printed"``
    uses Algorithm 1's printed noise :math:`P\xi/\sqrt q`, which samples a layer with
    :math:`q > 1` at temperature :math:`q` (the default ``"consistent"`` uses :math:`P\xi/q`).

    **Bias.** Lange et al. drop Γ; for this metric Γ ≡ 0 (a layer's block depends only on the
    earlier layers' parameters; the metric is block diagonal by layer), so unlike pSGLD's the
    small-step limit is the posterior, up to the lag of the running averages. The usual
    :math:`O(h)` discretisation bias remains.

    **State size:** two vectors of each dense layer's input dimension.

"""
        + _COMMON
        + """
    :param decay: :math:`\\rho \\in [0, 1)`, default 0.99.
    :param eps1: :math:`\\epsilon_1 > 0`, default 1e-2.
    :param eps2: :math:`\\epsilon_2 > 0`, default 1e-4.
    :param noise_scale: ``"consistent"`` (default) or ``"as_printed"``.
    :param bias_correction: running statistics without their start values (default False,
        Algorithm 1 as printed; see :func:`numpyro_sgrld.metrics.bnp`).
"""
    )

    def __init__(
        self,
        model=None,
        step_size=None,
        *,
        decay=0.99,
        eps1=1e-2,
        eps2=1e-4,
        noise_scale="consistent",
        bias_correction=False,
        **kwargs,
    ):
        metric = bnp(decay, eps1, eps2, noise_scale=noise_scale, bias_correction=bias_correction)
        super().__init__(model, step_size, metric=metric, integrator=langevin(), **kwargs)


class BAOAB(SGMCMC):
    __doc__ = (
        r"""Underdamped Langevin dynamics by the BAOAB splitting (Leimkuhler & Matthews 2013),
    with stochastic gradients (:func:`numpyro_sgrld.integrators.baoab`).

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
    :func:`~numpyro_sgrld.integrators.baoab`: the gradient noise inflates the variance by
    :math:`h s^2/(2\gamma T)`, and the step stays at :math:`h\sqrt{\lambda} \le
    2\sqrt\delta` (``target_bias`` :math:`\delta`), well inside the stability limit.

"""
        + _COMMON
        + r"""
    :param friction: :math:`\gamma > 0`, default 1.
    :param metric: a :class:`~numpyro_sgrld.metrics.Metric` (mass :math:`D^{-1}`); default
        the preconditioner learnt in warm-up with ``step_size=None``, else the identity.
"""
        + _example("BAOAB", "step_size=0.1")
    )

    def __init__(self, model=None, step_size=None, *, friction=1.0, metric=None, **kwargs):
        super().__init__(model, step_size, metric=metric, integrator=baoab(friction), **kwargs)


class SGNHT(SGMCMC):
    __doc__ = (
        r"""The stochastic gradient Nosé–Hoover thermostat (Ding et al. 2014; the integrator
    :func:`numpyro_sgrld.integrators.sgnht`): SGHMC whose friction :math:`\xi` is a dynamic
    variable that keeps the kinetic temperature at :math:`T`, absorbing the unknown gradient
    noise.

    .. math::
        p \leftarrow e^{-\xi h}p - \nabla\hat U\,h + \sqrt{2AhT}\,\eta, \quad
        \theta \leftarrow \theta + p\,h, \quad
        \xi \leftarrow \xi + (p^\top p/d - T)\,h.

    ``step_size`` :math:`h` is a time step; ``diffusion`` :math:`A`. With ``step_size=None``
    (the default) warm-up learns a constant preconditioner as SGLD's does, in whose
    coordinates the thermostat runs, and adapts the step by the time-step law of
    :func:`~numpyro_sgrld.integrators.sgnht`.

    **Known limit.** The thermostat is one scalar: it absorbs the gradient noise's *average*
    variance. Where anisotropic gradient noise dominates the injected diffusion, coordinates
    with more noise than average come out wider and the others narrower (±3 % on a small
    regression, docs/benchmarks.md, "SGNHT when the gradient noise dominates"); a larger
    ``diffusion`` reduces it. The thermostat also takes tens of time units to reach its
    equilibrium from :math:`A`.

"""
        + _COMMON
        + """
    :param diffusion: :math:`A > 0`, default 1.
    :param metric: a constant :class:`~numpyro_sgrld.metrics.Metric`; default the
        preconditioner learnt in warm-up with ``step_size=None``, else the identity.
"""
        + _example("SGNHT", "step_size=0.05")
    )

    def __init__(self, model=None, step_size=None, *, diffusion=1.0, metric=None, **kwargs):
        super().__init__(model, step_size, metric=metric, integrator=sgnht(diffusion),
                         **kwargs)


class BADODAB(SGMCMC):
    __doc__ = (
        r"""BADODAB (Leimkuhler & Shang 2016, "Adaptive thermostats for noisy gradient
    systems"; the integrator :func:`numpyro_sgrld.integrators.badodab`): the adaptive
    Langevin thermostat of SGNHT, integrated by the B A D O D A B splitting (BAOAB's
    splitting with a half-step of the thermostat around an exact Ornstein–Uhlenbeck step at
    the thermostat's friction).

    .. math::
        d\theta = p\,dt, \quad dp = -\nabla U\,dt - \xi p\,dt + \sqrt{2AT}\,dW, \quad
        d\xi = \mu^{-1}(p^\top p/d - T)\,dt.

    ``step_size`` :math:`h` is a time step; ``diffusion`` :math:`A`, ``thermal_mass``
    :math:`\mu`. With ``step_size=None`` (the default) warm-up adapts the step by the
    time-step law of :func:`~numpyro_sgrld.integrators.badodab`, in the coordinates of a
    constant preconditioner learnt as SGLD's is.

"""
        + _COMMON
        + r"""
    :param diffusion: :math:`A > 0`, default 1.
    :param thermal_mass: :math:`\mu > 0`, default 1.
    :param metric: a constant :class:`~numpyro_sgrld.metrics.Metric`; default the
        preconditioner learnt in warm-up with ``step_size=None``, else the identity.
"""
        + _example("BADODAB", "step_size=0.05")
    )

    def __init__(self, model=None, step_size=None, *, diffusion=1.0, thermal_mass=1.0,
                 metric=None, **kwargs):
        super().__init__(model, step_size, metric=metric,
                         integrator=badodab(diffusion, thermal_mass), **kwargs)


#: Steps per cycle of the cyclical presets when ``cycle_length`` is not given: with the default
#: ``exploration=0.5``, 500 draws per cycle.
CYCLE_LENGTH = 1000


def _cycle(kernel, step_size, cycle_length, exploration):
    """The cosine schedule with peak ``step_size`` and period ``cycle_length`` (``None`` with
    ``step_size=None``: the peak is adapted in warm-up), and the exploration stage's
    ``(L, E)``, checked."""
    length = integer(CYCLE_LENGTH if cycle_length is None else cycle_length, "cycle_length",
                     low=2, hint="It is the number of steps per cycle, exploration included.")
    beta = real(exploration, "exploration", low=0, high=1, high_open=True,
                hint="It is the fraction beta of each cycle spent exploring (no noise, no draws).")
    explore = math.ceil(beta * length)
    if explore >= length:
        raise ValueError(
            f"exploration={beta!r} of cycle_length={length} leaves no sampling step in a cycle "
            f"({explore} exploration steps): lower `exploration` or raise `cycle_length`."
        )
    if step_size is None:
        return None, (length, explore)
    h0 = real(step_size, "step_size", low=0, low_open=True,
              hint=f"It is the cycle's peak step h0 (a number: the schedule is the cosine), "
              f"or None to adapt it in warm-up: {kernel}(model).")
    return cyclical(h0, length, 1), (length, explore)


class _Cyclical:
    """The exploration stage and the cycle bookkeeping shared by the cyclical presets."""

    def cycle_position(self, i):
        r"""``(cycle, step_in_cycle)`` of the step that produced the state with counter ``i``
        (the ``i`` extra field of a draw): ``(k - 1) // L`` and ``(k - 1) % L`` for
        ``k = i - W``, ``W`` the warm-up's length when the step is adapted (the cycles begin
        after it), else 0. Every draw has ``step_in_cycle >= E`` (a sampling step)."""
        length, _ = self._exploration
        k = i - self._cycle_start
        return (k - 1) // length, (k - 1) % length

    @property
    def cycle_length(self):
        """:math:`L`, steps per cycle (exploration included)."""
        return self._exploration[0]

    @property
    def exploration_steps(self):
        r""":math:`E = \lceil\beta L\rceil`, exploration steps at the start of each cycle."""
        return self._exploration[1]


_CYCLICAL_DOC = r"""

    **The step:** :math:`h_k = \frac{h_0}{2}\big[\cos(\pi\,\mathrm{mod}(k, L)/L) + 1\big]`
    (:class:`~numpyro_sgrld.schedules.cyclical`), :math:`k` the step counter, :math:`L` =
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
    and the step of the bias target (:mod:`numpyro_sgrld.adaptation`), which becomes the
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


class CyclicalSGLD(_Cyclical, SGMCMC):
    __doc__ = r"""Cyclical SGLD (Zhang, Li, Zhang, Chen & Wilson 2020, "Cyclical stochastic
    gradient MCMC for Bayesian deep learning", cSGLD): SGLD (or preconditioned Langevin with
    ``metric=``) with a cosine step size restarted every cycle and an exploration stage at the
    start of each cycle.""" + _CYCLICAL_DOC + r"""
    :param metric: a :class:`~numpyro_sgrld.metrics.Metric` (default: learnt in warm-up with
        ``step_size=None``, else the identity).
    :param kwargs: as :class:`~numpyro_sgrld.SGMCMC` (``gradient``, ``correction``, ...).
    """

    def __init__(self, model=None, step_size=None, *, cycle_length=None, exploration=0.5,
                 metric=None, **kwargs):
        schedule, cycle = _cycle("CyclicalSGLD", step_size, cycle_length, exploration)
        super().__init__(model, schedule, metric=metric, integrator=langevin(), **kwargs)
        self._exploration = cycle


class CyclicalSGHMC(_Cyclical, SGMCMC):
    __doc__ = r"""Cyclical SGHMC (Zhang et al. 2020, cSGHMC): SGHMC (:class:`SGHMC`, Chen et
    al.'s parametrisation, ``step_size`` the learning rate) with a cosine step size restarted
    every cycle and an exploration stage (momentum SGD: friction, no injected noise) at the
    start of each cycle. The momentum is kept across stages and cycles.""" + _CYCLICAL_DOC + r"""
    :param friction: :math:`\alpha \in (0, 1]`, default 0.1.
    :param noise_estimate: :math:`\hat\beta \in [0, \alpha)`, default 0.
    :param metric: a :class:`~numpyro_sgrld.metrics.Metric` (default: learnt in warm-up with
        ``step_size=None``, else the identity).
    :param kwargs: as :class:`~numpyro_sgrld.SGMCMC`.
    """

    def __init__(self, model=None, step_size=None, *, cycle_length=None, exploration=0.5,
                 friction=0.1, noise_estimate=0.0, metric=None, **kwargs):
        schedule, cycle = _cycle("CyclicalSGHMC", step_size, cycle_length, exploration)
        super().__init__(model, schedule, metric=metric,
                         integrator=sghmc(friction, noise_estimate), **kwargs)
        self._exploration = cycle


#: Every preset by the name ``sgrld`` and its reports use (``SGHMC`` with friction 0.1, and
#: the Γ-corrected pSGLD and Monge SGLD as rows of their own).
KERNELS = {
    "SGLD": SGLD,
    "SGHMC": partial(SGHMC, friction=0.1),
    "PSGLD": PSGLD,
    "PSGLD+Γ": partial(PSGLD, correction="exact"),
    "MongeSGLD": MongeSGLD,
    "MongeSGLD+Γ": partial(MongeSGLD, correction="exact"),
    "ShampooSGLD": ShampooSGLD,
    "WenzelSGLD": WenzelSGLD,
    "AdamSGLD": AdamSGLD,
    "BNPSGLD": BNPSGLD,
    "BAOAB": BAOAB,
    "SGNHT": SGNHT,
    "BADODAB": BADODAB,
    "CyclicalSGLD": CyclicalSGLD,
    "CyclicalSGHMC": CyclicalSGHMC,
}
