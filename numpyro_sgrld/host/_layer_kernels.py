r"""The layer-wise presets (re-exported by :mod:`numpyro_sgrld.kernels`): WenzelSGLD, one
scale per latent site (Wenzel et al. 2020), and BNPSGLD, a preconditioner per dense layer from
its inputs' statistics (Lange et al. 2023)."""

from numpyro_sgrld.core.integrators import langevin
from numpyro_sgrld.core.metrics import bnp, wenzel
from numpyro_sgrld.host._adapter import SGMCMC
from numpyro_sgrld.host._presets import COMMON, example

__all__ = ["WenzelSGLD", "BNPSGLD"]


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
        super().__init__(model, step_size, metric=metric, integrator=langevin(), **kwargs)




class BNPSGLD(SGMCMC):
    __doc__ = (
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
