r"""The Monge metric of Yu et al. (2023) / Hartmann et al. (2022)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_sgrld._checks import real
from numpyro_sgrld._tree import tree_dot, tree_norm
from numpyro_sgrld.metrics._base import (
    Metric,
    Preconditioner,
    _check_decay,
    _check_nonnegative,
    _context,
)


class MongeState(NamedTuple):
    """``avg``: the moving average :math:`V` of the per-datum gradient (tree of the position)."""

    avg: Any


def _monge_noise_coefficient(alpha2, sq_norm):
    # f = ((1 + a s)^(-1/2) - 1) / s = -a / (sqrt(1 + a s) (1 + sqrt(1 + a s))): no 0/0 at s = 0
    root = jnp.sqrt(1.0 + alpha2 * sq_norm)
    return -alpha2 / (root * (1.0 + root))


def monge(alpha2=1.0, decay=0.9, max_drift_norm=None) -> Metric:
    r"""The Monge metric of Yu et al. (2023) / Hartmann et al. (2022), one over all sites.

    .. math::
        V \leftarrow \lambda V + (1 - \lambda)\bar g, \qquad
        G = I + \alpha^2 V V^\top, \\
        D\nabla\hat U = \nabla\hat U - \frac{\alpha^2\langle V, \nabla\hat U\rangle}
                                          {1 + \alpha^2\|V\|^2} V, \qquad
        D^{1/2}\xi = \xi + f\langle V, \xi\rangle V, \quad
        f = \frac{(1 + \alpha^2\|V\|^2)^{-1/2} - 1}{\|V\|^2}.

    Inner products run over every leaf (one metric for all latent sites together): O(d) time
    and memory, element-wise work and three global dot products. ``alpha2`` :math:`\alpha^2`
    (0 gives SGLD), ``decay`` :math:`\lambda`. Safeguard (Yu et al.'s funnel code): when
    :math:`\|D\nabla\hat U\| >` ``max_drift_norm``, that step uses
    :math:`D = (\text{max\_drift\_norm}/\|\nabla\hat U\|) I`. State: one number per parameter.
    """
    alpha2 = _check_nonnegative(alpha2, "alpha2")
    decay = _check_decay(decay)
    if max_drift_norm is not None:
        max_drift_norm = real(
            max_drift_norm, "max_drift_norm", low=0, low_open=True, hint="Or None (off)."
        )

    def init(position):
        return MongeState(jax.tree.map(jnp.zeros_like, position))

    def update(grad, state, position, context=None):
        num_data = _context(context).num_data
        avg = jax.tree.map(lambda v, g: decay * v + (1 - decay) * g / num_data, state.avg, grad)
        sq_norm = tree_dot(avg, avg)
        c = alpha2 / (1.0 + alpha2 * sq_norm)
        f = _monge_noise_coefficient(alpha2, sq_norm)

        def drift(t):
            coef = c * tree_dot(avg, t)
            return jax.tree.map(lambda x, v: x - coef * v, t, avg)

        def noise(t):
            coef = f * tree_dot(avg, t)
            return jax.tree.map(lambda x, v: x + coef * v, t, avg)

        if max_drift_norm is None:
            return Preconditioner(drift, noise), MongeState(avg)

        # Safeguard: whether it fires depends on the gradient, so decide once per step.
        fire = tree_norm(drift(grad)) > max_drift_norm
        scale = jnp.where(fire, max_drift_norm / tree_norm(grad), 1.0)

        def safe_drift(t):
            return jax.tree.map(lambda a, b: jnp.where(fire, scale * b, a), drift(t), t)

        def safe_noise(t):
            root = jnp.sqrt(scale)
            return jax.tree.map(lambda a, b: jnp.where(fire, root * b, a), noise(t), t)

        return Preconditioner(safe_drift, safe_noise), MongeState(avg)

    return Metric(
        init, update, decay, averages_gradient=True, statistic_order=1, name="monge"
    )
