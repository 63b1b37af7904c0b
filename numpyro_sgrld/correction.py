r"""The Γ correction drift of Rensmeyer & Niggemann (2023) for adaptive metrics.

A Riemannian Langevin step needs the drift
:math:`\Gamma_i = \sum_j \partial D_{ij}/\partial\theta_j` besides :math:`-D\nabla U`;
pSGLD, Monge and Shampoo SGRLD drop it, which moves their small-step stationary density from
:math:`p` to roughly :math:`p / D` (or :math:`p\,D^{-\alpha}` when only
the current gradient's share of the moving average is differentiated). The fix computes Γ of
the metric as a function of the current gradient statistic:

.. math::
    D(\theta) := D\big(\alpha S_{prev} + (1 - \alpha)\, s(\theta)\big), \qquad
    \Gamma_i = \frac{1}{1 - \alpha}\sum_j \frac{\partial D_{ij}(\theta)}{\partial\theta_j},

with :math:`s(\theta)` the statistic of the current minibatch gradient at θ (same minibatch).

- ``"exact"``: for every basis vector :math:`e_j`, the forward-mode derivative of
  :math:`\theta \mapsto D(\theta)e_j` in direction :math:`e_j`, summed over j: d
  forward-over-reverse passes, for small d.
- ``"hutchinson"``: one Rademacher vector z; :math:`\hat\Gamma = J z`,
  :math:`J = \partial(D(\theta) z)/\partial\theta`: one forward-over-reverse pass.
  :math:`E[\hat\Gamma] = \Gamma`; its noise enters the step at order h, like gradient noise, so
  it does not bias the small-step limit.
"""

import jax
import jax.numpy as jnp
from jax import random
from jax.flatten_util import ravel_pytree

__all__ = ["CORRECTIONS", "check_correction", "correction_drift"]

CORRECTIONS = (None, "exact", "hutchinson")


def check_correction(correction, metric_decay, kernel_name, hint=""):
    if correction not in CORRECTIONS:
        raise ValueError(
            f"Unknown correction={correction!r}; use None, 'exact' (small models) or "
            "'hutchinson' (one extra forward-over-reverse pass per step)."
        )
    if correction is not None and metric_decay is None:
        raise ValueError(f"{kernel_name} cannot apply correction={correction!r}{hint}.")
    return correction


def _inverse_metric_times(metric, state, grad_fn, unravel):
    """``(theta_flat, v_flat) -> D(theta) v``, D built from the gradient at theta."""

    def apply(theta_flat, v_flat):
        theta = unravel(theta_flat)
        precond, _ = metric.update(grad_fn(theta), state, theta)
        return ravel_pytree(precond.drift(unravel(v_flat)))[0]

    return apply


def correction_drift(kind, key, position, grad_fn, metric, state):
    """Γ for ``metric`` at ``position`` (a tree like the position).

    ``grad_fn(theta)`` is the minibatch gradient on the current minibatch, ``state`` the
    metric state *before* this step's update.
    """
    flat, unravel = ravel_pytree(position)
    apply = _inverse_metric_times(metric, state, grad_fn, unravel)
    if kind == "exact":

        def column_derivative(e):
            return jax.jvp(lambda th: apply(th, e), (flat,), (e,))[1]

        basis = jnp.eye(flat.shape[0], dtype=flat.dtype)
        total = jax.lax.map(column_derivative, basis).sum(axis=0)
    elif kind == "hutchinson":
        z = random.rademacher(key, flat.shape, dtype=flat.dtype)
        total = jax.jvp(lambda th: apply(th, z), (flat,), (z,))[1]
    else:
        raise ValueError(f"unknown correction {kind!r}")
    return unravel(total / (1.0 - metric.decay))
