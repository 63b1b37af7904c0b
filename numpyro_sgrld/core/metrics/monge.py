r"""The Monge metric of Yu et al. (2023) / Hartmann et al. (2022)."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from numpyro_sgrld.core.acceptance import Averages
from numpyro_sgrld.core.checks import integer, real
from numpyro_sgrld.core.correction import GammaBias, Lag, NoLag
from numpyro_sgrld.core.metrics._base import (
    AdaptsUntil,
    Metric,
    Preconditioner,
    check_decay,
    check_nonnegative,
    step_context,
)
from numpyro_sgrld.core.tree import tree_dot, tree_norm


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

#: ``MongeSGLD(alpha2="auto", correction=...)``: :math:`\alpha^2` is held fixed after this many
#: steps (``monge(..., freeze_after=...)``), so that Γ is that of the metric the chain uses.
AUTO_FREEZE = 1000


def _monge_noise_coefficient(alpha2, sq_norm):
    # f = ((1 + a s)^(-1/2) - 1) / s = -a / (sqrt(1 + a s) (1 + sqrt(1 + a s))): no 0/0 at s = 0
    root = jnp.sqrt(1.0 + alpha2 * sq_norm)
    return -alpha2 / (root * (1.0 + root))


def _auto_alpha2(state, sq_norm, freeze_after=None):
    """``(alpha2, new_sq_norm, new_count)``: :data:`AUTO_STRENGTH` over the debiased moving
    average of ``sq_norm``, held constant under differentiation (0 while that average is 0);
    with ``freeze_after``, the average (and so alpha2) stops moving after that many updates."""
    moving = True if freeze_after is None else state.count < freeze_after
    count = jnp.where(moving, state.count + 1, state.count)
    m = jnp.where(moving, AUTO_DECAY * state.sq_norm + (1.0 - AUTO_DECAY) * sq_norm,
                  state.sq_norm)
    debiased = m / (1.0 - AUTO_DECAY ** count.astype(m.dtype))
    ok = jnp.isfinite(debiased) & (debiased > 0)
    alpha2 = jnp.where(ok, AUTO_STRENGTH / jnp.where(ok, debiased, 1.0), 0.0)
    return jax.lax.stop_gradient(alpha2), m, count


def monge(alpha2="auto", decay=0.9, max_drift_norm=None, freeze_after=None) -> Metric:
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
    (Rensmeyer & Niggemann: a fixed :math:`\alpha^2` of that strength inflates the variance of
    N(0, 1) by about :math:`2\kappa`; in one dimension the adapting :math:`\alpha^2` tracks
    :math:`1/\theta^2`, keeps :math:`D` nearly constant, and the variance is 1.03);
    the errors at :math:`\kappa = 0.1` and 1 on German credit and sblrc-blr are in
    docs/benchmarks.md (step-size adaptation).

    **Γ with** ``"auto"``: :math:`\alpha^2` follows the chain (in one dimension it tracks
    :math:`1/\theta^2`, which makes :math:`D` nearly constant), and the lagged Γ, which
    differentiates :math:`V` only, would then correct a position dependence the metric does not
    have (on N(0, 1): variance 0.85 with Γ against 1.03 without). So a correction needs
    ``freeze_after=K``: :math:`\alpha^2` stops adapting after ``K`` updates (a warm-up of at
    least ``K`` steps) and the metric is a fixed-:math:`\alpha^2` Monge metric from then on,
    whose Γ is exact. ``MongeSGLD(correction=...)`` sets ``K`` = :data:`AUTO_FREEZE`; without
    ``freeze_after`` the metric refuses a correction.
    """
    auto = isinstance(alpha2, str) and alpha2 == "auto"
    if not auto:
        if isinstance(alpha2, str):
            raise ValueError(
                f"`alpha2` must be a number >= 0 or 'auto', got {alpha2!r}: e.g. alpha2=1.0 "
                "(Yu et al.'s scale) or alpha2='auto' (scaled to the gradient)."
            )
        alpha2 = check_nonnegative(alpha2, "alpha2")
    if freeze_after is not None:
        if not auto:
            raise ValueError(
                f"`freeze_after` fixes an adapted alpha2 (alpha2='auto'), but alpha2={alpha2!r} "
                "is given: drop freeze_after."
            )
        freeze_after = integer(freeze_after, "freeze_after", low=1)
    decay = check_decay(decay)
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
        num_data = step_context(context).num_data
        avg = jax.tree.map(lambda v, g: decay * v + (1 - decay) * g / num_data, state.avg, grad)
        sq_norm = tree_dot(avg, avg)
        if auto:
            strength, m, count = _auto_alpha2(state, sq_norm, freeze_after)
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

    correctable = not auto or freeze_after is not None
    lag = (Lag(decay, statistic_order=1) if correctable else NoLag(
        "with alpha2='auto' the metric's strength follows the chain, which Γ does not "
        "differentiate; pass freeze_after=K (alpha2 fixed after K steps, a warm-up of at "
        "least K; MongeSGLD(correction=...) does this) or a number alpha2"))
    fixed = () if freeze_after is None else (AdaptsUntil(freeze_after, "alpha2"),)
    return Metric(init, update, name="monge", traits=(Averages(), lag, GammaBias()) + fixed)
