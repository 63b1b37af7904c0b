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

from functools import partial

from numpyro_sgrld.core.integrators import adaptive_drift, langevin
from numpyro_sgrld.core.metrics import (
    monge,
    rmsprop,
    shampoo,
)
from numpyro_sgrld.core.metrics.monge import AUTO_FREEZE
from numpyro_sgrld.host._adapter import SGMCMC
from numpyro_sgrld.host._cyclical_kernels import CYCLE_LENGTH, CyclicalSGHMC, CyclicalSGLD
from numpyro_sgrld.host._layer_kernels import BNPSGLD, WenzelSGLD
from numpyro_sgrld.host._momentum_kernels import BADODAB, BAOAB, SGHMC, SGNHT
from numpyro_sgrld.host._presets import COMMON, example

__all__ = [
    "CYCLE_LENGTH",
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
        + COMMON
        + """
    :param decay: :math:`\\alpha \\in [0, 1)`, default 0.99.
    :param eps: :math:`\\lambda \\ge 0`, default 1e-8.
    :param correction: ``None`` (default), ``"exact"`` or ``"hutchinson"``.
    :param correction_form: ``"lagged"`` (default) or ``"instant"``
        (:mod:`numpyro_sgrld.correction`).
    :param bias_correction: divide V by :math:`1 - \\alpha^t` (default True).
"""
        + example("PSGLD", "step_size=1e-2")
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
        + COMMON
        + """
    :param alpha2: ``"auto"`` (default): :math:`\\alpha^2` scaled so that
        :math:`\\alpha^2\\|V\\|^2` is 0.1 on average, whatever the gradient's scale
        (:func:`numpyro_sgrld.core.metrics.monge`); or a number :math:`\\alpha^2 \\ge 0` (Yu et
        al. use 1.0–1.25 on MNIST). A fixed :math:`\\alpha^2` has units: where the per-datum
        gradient is large (a badly conditioned posterior, :math:`\\|V\\|^2 \\gg 1`)
        :math:`\\alpha^2 = 1` makes the chain diverge at steps SGLD takes (posteriordb's
        sblrc-blr and diamonds) or run away (a horseshoe MLP on digits); ``"auto"`` does not
        (docs/benchmarks.md, step-size adaptation). With ``correction``, an ``"auto"``
        :math:`\\alpha^2` is fixed after :data:`~numpyro_sgrld.core.metrics.monge.AUTO_FREEZE`
        (1000) steps, so that Γ corrects the metric the chain uses (use ``num_warmup`` at
        least that long). ``alpha2=1.0`` is Rensmeyer & Niggemann's and Yu et al.'s fixed
        strength.
    :param decay: :math:`\\lambda \\in [0, 1)`, default 0.9.
    :param correction: ``None`` (default), ``"exact"`` or ``"hutchinson"``.
    :param correction_form: ``"lagged"`` (default) or ``"instant"``
        (:mod:`numpyro_sgrld.correction`).
    :param max_drift_norm: safeguard threshold, default ``None`` (off).
"""
        + example("MongeSGLD", "step_size=1e-2, alpha2=1.0")
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
        super().__init__(
            model, step_size, metric=metric, integrator=langevin(), correction=correction, **kwargs
        )


class ShampooSGLD(SGMCMC):
    __doc__ = (
        r"""SGRLD in the Shampoo metric (Yu et al. 2023; Gupta et al. 2018; Anil et al. 2021).

    Per latent site and block, Kronecker-factored statistics of the per-datum gradient, one
    factor per tensor mode (:func:`numpyro_sgrld.core.metrics.shampoo`):

    .. math::
        L_i \leftarrow \alpha L_i + (1-\alpha)G_{(i)}G_{(i)}^\top, \quad
        N_i = (L_i + \epsilon\lambda_{max}(L_i) I)^{-1/(4k)}, \\
        \theta \leftarrow \theta - h\,(\nabla\hat U \times_1 N_1^2 \cdots \times_k N_k^2)
               + \sqrt{2hT}\,(\xi \times_1 N_1 \cdots \times_k N_k).

    For a weight matrix :math:`D = L^{-1/4}\otimes R^{-1/4}`; vectors and biases get the full
    matrix :math:`L^{-1/2}` (as in Yu et al.'s funnel; their network code left vectors
    unpreconditioned). Roots are recomputed every ``update_interval`` steps, from a statistic
    warm-started at ``init`` at what the gradients' squares average to under the posterior
    (the curvature over :math:`N^2`), with roots computed from it at once; dimensions are
    merged up to, and split into blocks of, ``block_size``.

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
        + COMMON
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
        (:func:`numpyro_sgrld.core.metrics.shampoo`).
"""
        + example("ShampooSGLD", "step_size=1e-2, update_interval=10")
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
        super().__init__(
            model, step_size, metric=metric, integrator=langevin(), correction=correction, **kwargs
        )


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
        + COMMON
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
        + example("AdamSGLD", "step_size=1e-2")
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
        super().__init__(model, step_size, metric=metric, integrator=integrator, **kwargs)


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
