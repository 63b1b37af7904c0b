r"""Gradient estimators: ``(position, minibatch) -> (value, grad)``.

The default estimator differentiates NumPyro's own minibatch potential

.. math::
    \hat U(\theta) = -\log p(\theta) - \frac{N}{n}\sum_{i \in B} \log p(y_i \mid \theta)

(the ``N/n`` scaling comes from ``numpyro.plate(..., subsample_size=n)``), evaluated on the
unconstrained space with the Jacobians of the constraining transforms included. The kernels'
``control_variate`` option switches to the control-variate estimator
(:func:`control_variate_estimate`).
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random
from numpyro import handlers
from numpyro.infer.util import potential_energy

from numpyro_sgrld._tree import tree_dot

__all__ = [
    "minibatch_potential",
    "hessian_diagonal_estimate",
    "value_and_grad_estimator",
    "ControlVariate",
    "control_variate",
    "control_variate_estimate",
    "centre_distance",
    "find_mode",
]


def minibatch_potential(model, model_args=(), model_kwargs=None):
    """The potential :math:`\\hat U(z; \\text{idx})` of ``model`` with the subsample plates'
    indices substituted by ``idx`` (a dict ``{plate_name: indices}``); ``z`` is a dict of
    unconstrained latent values."""
    model_kwargs = {} if model_kwargs is None else model_kwargs

    def potential(z, idx):
        return potential_energy(handlers.substitute(model, data=idx), model_args, model_kwargs, z)

    return potential


def value_and_grad_estimator(potential):
    """Default estimator: the exact gradient of the minibatch potential, by reverse mode."""
    return jax.value_and_grad(potential)


def hessian_diagonal_estimate(potential, z, idx, key):
    r"""Hutchinson's unbiased estimate of the diagonal of :math:`\nabla^2\hat U(z)` on the
    minibatch ``idx``: :math:`\zeta\odot(H\zeta)` with Rademacher :math:`\zeta` (Bekas,
    Kokiopoulou & Saad 2007), one Hessian-vector product (forward over reverse)."""
    leaves, treedef = jax.tree.flatten(z)
    keys = random.split(key, max(len(leaves), 1))
    probe = jax.tree.unflatten(
        treedef,
        [random.rademacher(k, jnp.shape(x), jnp.result_type(x)) for k, x in zip(keys, leaves)],
    )
    hvp = jax.jvp(jax.grad(lambda x: potential(x, idx)), (z,), (probe,))[1]
    return jax.tree.map(jnp.multiply, probe, hvp)


# --------------------------------------------------------------------------- control variates
class ControlVariate(NamedTuple):
    r"""The centre :math:`\hat\theta` of a control-variate gradient estimator, the full-data
    potential :math:`U(\hat\theta)` and gradient :math:`\nabla U(\hat\theta)` there, and
    ``distance``, the centre's estimated distance from the mode in posterior standard
    deviations (:func:`centre_distance`)."""

    centre: Any
    value: Any
    grad: Any
    distance: Any = None


def control_variate(full_potential, centre):
    """:class:`ControlVariate` at ``centre`` (one full-data gradient and one full-data
    Hessian-vector product)."""
    value, grad = jax.value_and_grad(full_potential)(centre)
    return ControlVariate(centre, value, grad, centre_distance(full_potential, centre, grad))


def centre_distance(full_potential, centre, grad):
    r"""Estimated distance of ``centre`` from the mode of ``full_potential``, in posterior
    standard deviations, along the full-data gradient :math:`g = \nabla U(\hat\theta)`:

    .. math::
        \delta = \frac{\lVert g\rVert^2}{\sqrt{g^\top H g}}, \qquad
        H = \nabla^2 U(\hat\theta),

    the length of the Newton step to the minimum along :math:`g`,
    :math:`\lVert g\rVert^3 / g^\top H g`, over the posterior standard deviation along
    :math:`g` given the other directions, :math:`\lVert g\rVert / \sqrt{g^\top H g}`. Exact
    for a Gaussian posterior when :math:`g` is an eigenvector of :math:`H` (in one dimension,
    :math:`|\hat\theta - \text{mode}| / \text{sd}`); one Hessian-vector product. Zero at a
    stationary point; infinite where the curvature along :math:`g` is not positive (no mode
    nearby in that direction); NaN where the gradient or the curvature is NaN. The
    control-variate estimator is unbiased wherever the centre is, but its variance grows with
    the chain's distance from the centre (Baker et al. 2019): a centre many standard
    deviations away gains little over the plain estimator.
    """
    hess_grad = jax.jvp(jax.grad(full_potential), (centre,), (grad,))[1]
    curvature = tree_dot(grad, hess_grad)
    sq_norm = tree_dot(grad, grad)
    positive = curvature > 0
    distance = sq_norm / jnp.sqrt(jnp.where(positive, curvature, 1.0))
    distance = jnp.where(positive, distance, jnp.where(sq_norm > 0, jnp.inf, 0.0))
    return jnp.where(jnp.isnan(sq_norm) | jnp.isnan(curvature), jnp.nan, distance)


def control_variate_estimate(potential, cv, z, idx):
    r"""Control-variate estimate (Baker et al. 2019, SGLD-CV) of the potential and its gradient
    at ``z`` on the minibatch ``idx``:

    .. math::
        \tilde U(\theta) = U(\hat\theta) + \hat U_B(\theta) - \hat U_B(\hat\theta), \qquad
        \nabla\tilde U(\theta) = \nabla U(\hat\theta) + \nabla\hat U_B(\theta)
                                 - \nabla\hat U_B(\hat\theta).

    Unbiased whatever :math:`\hat\theta` is (both minibatch terms are unbiased for their
    full-data counterparts); its variance is that of
    :math:`\nabla\hat U_B(\theta) - \nabla\hat U_B(\hat\theta)`, which vanishes as
    :math:`\theta \to \hat\theta`, instead of that of :math:`\nabla\hat U_B(\theta)`, which
    does not. Returns ``(value, grad, shift)``; ``shift`` is the constant
    :math:`\nabla U(\hat\theta) - \nabla\hat U_B(\hat\theta)` added to every gradient on this
    minibatch (for correction terms that re-evaluate the gradient elsewhere).
    """
    value, grad = jax.value_and_grad(potential)(z, idx)
    centre_value, centre_grad = jax.value_and_grad(potential)(cv.centre, idx)
    shift = jax.tree.map(jnp.subtract, cv.grad, centre_grad)
    return value - centre_value + cv.value, jax.tree.map(jnp.add, grad, shift), shift


def find_mode(potential, z, key, draw, num_steps=1000, learning_rate=0.1, final_rate=1e-4):
    r"""An approximate posterior mode for the control-variate centre: ``num_steps`` Adam steps
    on minibatch gradients of ``potential(z, idx)`` from ``z`` (``draw(key)`` gives fresh
    indices), the learning rate decaying geometrically from ``learning_rate`` to
    ``final_rate`` (an Adam step moves each coordinate by at most about the rate, so the
    schedule can travel about ``num_steps * learning_rate / ln(learning_rate / final_rate)``
    ≈ 14 units with the defaults, and ends with steps of 1e-4). The centre need not be exact:
    the estimator stays unbiased, only its variance depends on how far the chain is from the
    centre."""
    b1, b2, eps = 0.9, 0.999, 1e-8
    decay = (final_rate / learning_rate) ** (1.0 / max(num_steps - 1, 1))
    grad_fn = jax.grad(potential)

    def step(carry, inputs):
        z, m, v = carry
        key, t = inputs
        g = grad_fn(z, draw(key))
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, g)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, g)
        c1, c2 = 1 - b1 ** (t + 1.0), 1 - b2 ** (t + 1.0)
        rate = learning_rate * decay**t
        z = jax.tree.map(
            lambda z, m, v: z - rate * (m / c1) / (jnp.sqrt(v / c2) + eps), z, m, v
        )
        return (z, m, v), None

    zeros = jax.tree.map(jnp.zeros_like, z)
    steps = (random.split(key, num_steps), jnp.arange(num_steps, dtype=jnp.float32))
    (z, _, _), _ = lax.scan(step, (z, zeros, zeros), steps)
    return z
