r"""The gradient estimators' protocol (:class:`Target`, :class:`Estimate`,
:class:`GradientEstimator`) and the pieces they share: the control variate
(:class:`ControlVariate`, its estimate and its centre's distance), the search for a mode,
and a Hutchinson estimate of the Hessian's diagonal. The estimators themselves are in
:mod:`numpyro_sgrld.core.gradients`, which re-exports all of these."""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax, random
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.core.tree import tree_dot

__all__ = ["ControlVariate", "Estimate", "GradientEstimator", "Target", "centre_distance",
           "centred_estimate", "control_variate", "control_variate_estimate", "find_mode",
           "hessian_diagonal_estimate"]


def hessian_diagonal_estimate(potential, z, idx, key):
    r"""Hutchinson's unbiased estimate of the diagonal of :math:`\nabla^2\hat U(z)` on the
    minibatch ``idx``: :math:`\zeta\odot(H\zeta)` with Rademacher :math:`\zeta` (Bekas,
    Kokiopoulou & Saad 2007), one Hessian-vector product (forward over reverse)."""
    flat, unravel = ravel_pytree(z)
    probe = unravel(random.rademacher(key, flat.shape, flat.dtype))
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
    value, grad, _, _, _, shift = centred_estimate(z, idx, cv, lambda x, b: (potential(x, b), {}))
    return value, grad, shift


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


# --------------------------------------------------------------------------- the protocol
class Target(NamedTuple):
    """What a gradient estimator may evaluate: ``potential(z, batch) -> (value, aux)`` on a
    minibatch, ``full_potential(z) -> value`` on all the data (``None`` when the kernel was built
    from a ``potential_fn``), and ``draw(key, batch_state) -> (batch, batch_state)``, the run's
    minibatch draw (every minibatch comes from it: ``batch_state=None`` draws a fresh one);
    ``steps_per_epoch`` (:math:`N/n` of the largest subsample plate), ``num_data``
    (:math:`N`, read by adaptive metrics through the step's context) and ``step``, the
    transition's index (the same for all chains of a vectorised run, so that a decision on it
    stays a branch under ``vmap``); ``axis_name``, the name of the vectorised chains' axis
    (``None`` otherwise), over which a decision shared by the chains is made one value."""

    potential: Callable
    full_potential: Callable | None
    draw: Callable
    steps_per_epoch: int = 1
    step: Any = None
    axis_name: Any = None
    num_data: int = 1


class Estimate(NamedTuple):
    r"""One step's estimate: ``value`` :math:`\hat U`, ``grad`` :math:`\nabla\hat U`, ``aux``
    (the model's auxiliary values on this minibatch), the estimator's new ``state``, and
    ``oracle(z) -> (value, grad)``: the same estimator on the same minibatch at ``z``;
    ``batch_value``, the plain minibatch potential at the position, where ``value`` is
    another estimate (control variates add a constant to it; ``None``: ``value`` is it), and
    ``shift``, the constant added to the plain minibatch gradient (``None``: none). The
    proposal check compares the plain minibatch potential at the proposal with its first-order
    prediction from these."""

    value: Any
    grad: Any
    aux: Any
    state: Any
    oracle: Callable
    batch_value: Any = None
    shift: Any = None


class GradientEstimator(NamedTuple):
    """A gradient estimator as a pair of pure functions (see the module docstring).

    ``needs_full_data``: the estimator evaluates :attr:`Target.full_potential` (a kernel built
    from a ``potential_fn`` refuses it). ``start(state, z) -> z`` (optional): where the chain
    starts, given the initialised state. ``check(state)`` (optional): called once, outside any
    trace, after initialisation (warnings). ``settled(state) -> GradientEstimator``
    (optional): the same estimator for the steps after warm-up, given its state at warm-up's
    end (concrete), with what only warm-up changes resolved in Python (no branch on it);
    ``None`` where nothing is. ``activate(state, centre, position, target, draw, root, key)
    -> state`` (optional): what warm-up calls at the end of each window after its first, with
    the window's mean as ``centre``
    (:func:`~numpyro_sgrld.core.gradients.activate_control_variates`). ``name`` names it in
    error messages."""

    init: Callable
    estimate: Callable
    needs_full_data: bool = False
    start: Callable | None = None
    check: Callable | None = None
    name: str = "gradient estimator"
    settled: Callable | None = None
    activate: Callable | None = None


def centred_estimate(position, batch, cv, potential):
    """``(value, grad, aux, oracle, batch_value, shift)`` of the control-variate estimate
    centred at ``cv`` (:func:`control_variate_estimate`) for ``potential(z, batch) -> (value,
    aux)``, with the model's auxiliary values at ``position``; ``batch_value`` is the plain
    minibatch potential there and ``shift`` the constant added to every gradient."""
    grad_at = jax.value_and_grad(potential, has_aux=True)
    (value, aux), grad = grad_at(position, batch)
    (centre_value, _), centre_grad = grad_at(cv.centre, batch)
    shift = jax.tree.map(jnp.subtract, cv.grad, centre_grad)
    offset = cv.value - centre_value

    def oracle(z):
        v, g = jax.value_and_grad(lambda x: potential(x, batch)[0])(z)
        return v + offset, jax.tree.map(jnp.add, g, shift)

    return value + offset, jax.tree.map(jnp.add, grad, shift), aux, oracle, value, shift
