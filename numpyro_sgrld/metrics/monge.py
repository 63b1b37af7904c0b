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


class MongeAutoState(NamedTuple):
    r"""The state of ``monge(alpha2="auto")``: ``avg`` the moving average :math:`V` of the
    per-datum gradient, ``sq_norm`` the moving average :math:`m` of :math:`\|V\|^2` (not yet
    debiased) and ``count`` the number of updates."""

    avg: Any
    sq_norm: Any
    count: Any


#: ``monge(alpha2="auto")``: the target of :math:`\alpha^2\|V\|^2` on average.
AUTO_STRENGTH = 0.1

#: ``monge(alpha2="auto")``: the decay of the moving average of :math:`\|V\|^2`.
AUTO_DECAY = 0.99


def _monge_noise_coefficient(alpha2, sq_norm):
    # f = ((1 + a s)^(-1/2) - 1) / s = -a / (sqrt(1 + a s) (1 + sqrt(1 + a s))): no 0/0 at s = 0
    root = jnp.sqrt(1.0 + alpha2 * sq_norm)
    return -alpha2 / (root * (1.0 + root))


def _auto_alpha2(state, sq_norm):
    """``(alpha2, new_sq_norm, new_count)``: :data:`AUTO_STRENGTH` over the debiased moving
    average of ``sq_norm``, held constant under differentiation (0 while that average is 0)."""
    count = state.count + 1
    m = AUTO_DECAY * state.sq_norm + (1.0 - AUTO_DECAY) * sq_norm
    debiased = m / (1.0 - AUTO_DECAY ** count.astype(m.dtype))
    ok = jnp.isfinite(debiased) & (debiased > 0)
    alpha2 = jnp.where(ok, AUTO_STRENGTH / jnp.where(ok, debiased, 1.0), 0.0)
    return jax.lax.stop_gradient(alpha2), m, count


def monge(alpha2="auto", decay=0.9, max_drift_norm=None) -> Metric:
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

    ``alpha2="auto"`` (the default): :math:`\alpha^2 = \kappa/\bar m` with :math:`\bar m`
    the (debiased) moving average, decay :data:`AUTO_DECAY`, of :math:`\|V\|^2`, so that
    :math:`\alpha^2\|V\|^2` is :math:`\kappa` = :data:`AUTO_STRENGTH` (0.1) on average,
    whatever the gradient's scale. A fixed :math:`\alpha^2` has units (one over a squared
    per-datum gradient): :math:`\alpha^2 = 1` is weak where
    :math:`\|V\|^2 \approx \mathrm{tr}(H)/N^2` is small and, where it is about 2000 (the
    badly conditioned sblrc-blr regression), suppresses the drift along :math:`V` two
    thousandfold while the gradient's changing part moves at full step: the chain diverges at
    steps SGLD takes. :math:`\kappa` trades the metric's strength against its bias without Γ
    (Rensmeyer & Niggemann: on N(0, 1) the variance is inflated by about :math:`2\kappa`);
    measured with adapted steps: German credit total error 0.11 at :math:`\kappa = 0.1`, 0.69
    at 1 (0.075 with :math:`\alpha^2 = 1`); sblrc-blr no divergence at either (docs/benchmarks.md,
    step-size adaptation). :math:`\alpha^2` is a lagged statistic, like :math:`V`: the Γ
    correction holds it constant at each step.
    """
    auto = isinstance(alpha2, str) and alpha2 == "auto"
    if not auto:
        if isinstance(alpha2, str):
            raise ValueError(
                f"`alpha2` must be a number >= 0 or 'auto', got {alpha2!r}: e.g. alpha2=1.0 "
                "(Yu et al.'s scale) or alpha2='auto' (scaled to the gradient)."
            )
        alpha2 = _check_nonnegative(alpha2, "alpha2")
    decay = _check_decay(decay)
    if max_drift_norm is not None:
        max_drift_norm = real(
            max_drift_norm, "max_drift_norm", low=0, low_open=True, hint="Or None (off)."
        )

    def init(position):
        avg = jax.tree.map(jnp.zeros_like, position)
        if auto:
            dtype = jnp.result_type(*jax.tree.leaves(position), float)
            return MongeAutoState(avg, jnp.zeros((), dtype), jnp.zeros((), jnp.int32))
        return MongeState(avg)

    def update(grad, state, position, context=None):
        num_data = _context(context).num_data
        avg = jax.tree.map(lambda v, g: decay * v + (1 - decay) * g / num_data, state.avg, grad)
        sq_norm = tree_dot(avg, avg)
        if auto:
            strength, m, count = _auto_alpha2(state, sq_norm)
            new_state = MongeAutoState(avg, m, count)
        else:
            strength, new_state = alpha2, MongeState(avg)
        c = strength / (1.0 + strength * sq_norm)
        f = _monge_noise_coefficient(strength, sq_norm)

        def drift(t):
            coef = c * tree_dot(avg, t)
            return jax.tree.map(lambda x, v: x - coef * v, t, avg)

        def noise(t):
            coef = f * tree_dot(avg, t)
            return jax.tree.map(lambda x, v: x + coef * v, t, avg)

        if max_drift_norm is None:
            return Preconditioner(drift, noise), new_state

        # Safeguard: whether it fires depends on the gradient, so decide once per step.
        fire = tree_norm(drift(grad)) > max_drift_norm
        scale = jnp.where(fire, max_drift_norm / tree_norm(grad), 1.0)

        def safe_drift(t):
            return jax.tree.map(lambda a, b: jnp.where(fire, scale * b, a), drift(t), t)

        def safe_noise(t):
            root = jnp.sqrt(scale)
            return jax.tree.map(lambda a, b: jnp.where(fire, root * b, a), noise(t), t)

        return Preconditioner(safe_drift, safe_noise), new_state

    return Metric(
        init, update, decay, averages_gradient=True, statistic_order=1, name="monge"
    )
