"""The presets' docstrings (:mod:`numpyro_sgrld.presets.table` makes each preset from one of
them and its pieces): the math, the parameter mapping to the papers, the known bias, the state
size, the preset's own options and an example that runs as a doctest; here what they share and
the overdamped (Langevin) presets', the underdamped and cyclical ones' in
:mod:`numpyro_sgrld.presets.momentum_docs`."""


__all__ = [
    "COMMON",
    "example",
    "LangevinKernel",
    "SGLD",
    "PSGLD",
    "MongeSGLD",
    "ShampooSGLD",
    "WenzelSGLD",
    "AdamSGLD",
    "BNPSGLD",
]

#: The parameters every preset shares, for its docstring.
COMMON = """    :param model: NumPyro model (or ``potential_fn=``).
    :param step_size: :math:`h`, float > 0 or a schedule (:mod:`numpyro_sgrld.core.schedules`).
    :param kwargs: ``temperature``, ``num_data``, ``batching``, ``init_strategy``,
        ``potential_fn``, ``data_parallel``, ``gradient``, ``control_variate``, ``mode_steps``,
        ``start_at_centre``, ``check_proposal`` (see :class:`~numpyro_sgrld.SGMCMC`)."""


def example(name, args):
    """The docstring example of preset ``name`` built with ``args``."""
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


LangevinKernel = (
    r"""Riemannian Langevin kernel for any :class:`~numpyro_sgrld.core.metrics.Metric`:
    ``SGMCMC(model, step_size, metric=metric, integrator=integrators.langevin(), ...)``.

    .. math::
        \theta \leftarrow \theta - h\,D\nabla\hat U + hT\,\Gamma + \sqrt{2hT}\,D^{1/2}\xi.
    """
)


SGLD = (
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
)


PSGLD = (
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
    (:mod:`numpyro_sgrld.core.correction`; closed form
    :math:`\Gamma_i = -D_{ii}^2\,\bar g_i H_{ii}/\sqrt{V_i}`).

    **State size:** one number per parameter (and a step counter).

"""
        + COMMON
        + """
    :param decay: :math:`\\alpha \\in [0, 1)`, default 0.99.
    :param eps: :math:`\\lambda \\ge 0`, default 1e-8.
    :param correction: ``None`` (default), ``"exact"`` or ``"hutchinson"``.
    :param correction_form: ``"lagged"`` (default) or ``"instant"``
        (:mod:`numpyro_sgrld.core.correction`).
    :param bias_correction: divide V by :math:`1 - \\alpha^t` (default True).
"""
        + example("PSGLD", "step_size=1e-2")
)


MongeSGLD = (
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
        (:mod:`numpyro_sgrld.core.correction`).
    :param max_drift_norm: safeguard threshold, default ``None`` (off).
"""
        + example("MongeSGLD", "step_size=1e-2, alpha2=1.0")
)


ShampooSGLD = (
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
        (:mod:`numpyro_sgrld.core.correction`).
    :param block_split: ``"even"`` (default) or ``"fixed"`` blocks (Yu et al.'s code).
    :param precondition_vectors: default True; False leaves vectors unpreconditioned (Yu et
        al.'s network code).
    :param ridge: ``"root"`` (default) or ``"statistic"`` (Yu et al.'s code adds the ridge into
        the statistic). The three switches together reproduce Yu et al.'s update
        (:func:`numpyro_sgrld.core.metrics.shampoo`).
"""
        + example("ShampooSGLD", "step_size=1e-2, update_interval=10")
)


WenzelSGLD = (
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
        + COMMON
        + """
    :param decay: :math:`\\alpha \\in [0, 1)`, default 0.99.
    :param eps: :math:`\\epsilon \\ge 0`, default 1e-8.
    :param update_interval: steps between refreshes; default ``None`` = one epoch
        (``N/n`` of the largest subsample plate, 1 without one).
    :param lagged_refresh: default False; True makes a refresh take effect from the next step,
        as in Yu et al.'s code (:func:`numpyro_sgrld.core.metrics.wenzel`).
"""
        + example("WenzelSGLD", "step_size=1e-2")
)


AdamSGLD = (
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
    :param metric: a :class:`~numpyro_sgrld.core.metrics.Metric` (default: with ``step_size=None``
        the constant metric learnt in warm-up, :func:`~numpyro_sgrld.core.metrics.learnt`; the
        identity with a given step), applied to the drift and the noise
        (:func:`~numpyro_sgrld.core.integrators.adaptive_drift_step`).
"""
        + example("AdamSGLD", "step_size=1e-2")
)


BNPSGLD = (
    r"""SGLD with Batch Normalization Preconditioning (Lange, Deng, Ye & Lin 2023, Alg. 1).

    Each dense layer's weights and bias share one preconditioner :math:`P = UD` built from the
    running mean :math:`\mu` and variance :math:`\sigma^2` of the layer's **inputs** on the
    minibatch (:func:`numpyro_sgrld.core.metrics.bnp`):

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
        + COMMON
        + """
    :param decay: :math:`\\rho \\in [0, 1)`, default 0.99.
    :param eps1: :math:`\\epsilon_1 > 0`, default 1e-2.
    :param eps2: :math:`\\epsilon_2 > 0`, default 1e-4.
    :param noise_scale: ``"consistent"`` (default) or ``"as_printed"``.
    :param bias_correction: running statistics without their start values (default False,
        Algorithm 1 as printed; see :func:`numpyro_sgrld.core.metrics.bnp`).
"""
)
