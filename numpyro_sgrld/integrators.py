r"""One-step integrators. Pure functions; none of them computes a gradient.

They receive the gradient :math:`\nabla\hat U` (from a gradient estimator) and a
:class:`~numpyro_sgrld.metrics.Preconditioner`, and return the next position (and momentum).
"""

import jax
import jax.numpy as jnp

from numpyro_sgrld._tree import tree_normal

__all__ = ["langevin", "sghmc", "adaptive_drift_langevin"]


def langevin(key, position, grad, preconditioner, step_size, temperature):
    r"""Euler–Maruyama step of the (Riemannian) Langevin diffusion.

    .. math::
        \theta \leftarrow \theta - h\,D\nabla\hat U(\theta) + hT\,\Gamma
                          + \sqrt{2hT}\,D^{1/2}\xi, \qquad \xi \sim \mathcal N(0, I).

    With :math:`D = I` this is SGLD (Welling & Teh 2011). ``step_size`` is :math:`h`,
    ``temperature`` is :math:`T`; :math:`\Gamma` is ``preconditioner.correction`` (skipped when
    ``None``). Γ is multiplied by :math:`T`: the diffusion :math:`\sqrt{2T D}\,dW` has
    stationary density :math:`\propto e^{-U/T}` only with the drift :math:`-D\nabla U + T\,
    \nabla\cdot D` (Fokker–Planck), so a tempered or cold chain (:math:`T \ne 1`) needs
    :math:`T\Gamma`, and none at :math:`T = 0`.
    """
    xi = tree_normal(key, position)
    drift = preconditioner.drift(grad)
    noise = preconditioner.noise(xi)
    scale = jnp.sqrt(2.0 * step_size * temperature)
    new = jax.tree.map(lambda x, d, n: x - step_size * d + scale * n, position, drift, noise)
    if preconditioner.correction is not None:
        new = jax.tree.map(
            lambda x, g: x + step_size * temperature * g, new, preconditioner.correction
        )
    return new


def sghmc(key, position, momentum, grad, step_size, friction, noise_estimate, temperature):
    r"""One SGHMC step (Chen, Fox & Guestrin 2014, Eq. 15) with unit mass.

    .. math::
        v \leftarrow (1 - \alpha) v - h\nabla\hat U(\theta)
                     + \mathcal N\big(0, 2(\alpha - \hat\beta) h T\big), \qquad
        \theta \leftarrow \theta + v.

    ``step_size`` :math:`h` is Chen's learning rate :math:`\eta`, ``friction`` :math:`\alpha` the
    momentum decay, ``noise_estimate`` :math:`\hat\beta` the estimated gradient-noise term.
    Returns ``(position, momentum)``.
    """
    xi = tree_normal(key, position)
    scale = jnp.sqrt(2.0 * (friction - noise_estimate) * step_size * temperature)
    momentum = jax.tree.map(
        lambda v, g, n: (1.0 - friction) * v - step_size * g + scale * n, momentum, grad, xi
    )
    position = jax.tree.map(lambda x, v: x + v, position, momentum)
    return position, momentum


def adaptive_drift_langevin(key, position, grad, extra_drift, step_size, temperature):
    r"""Langevin step with an extra drift term (AdamSGLD; Kim, Song & Liang 2022).

    .. math::
        \theta \leftarrow \theta - h\,(\nabla\hat U + a) + \sqrt{2hT}\,\xi,

    ``extra_drift`` :math:`a` (e.g. :math:`a\,m / (\sqrt{V} + \lambda)`), identity metric.
    """
    xi = tree_normal(key, position)
    scale = jnp.sqrt(2.0 * step_size * temperature)
    return jax.tree.map(
        lambda x, g, a, n: x - step_size * (g + a) + scale * n, position, grad, extra_drift, xi
    )
