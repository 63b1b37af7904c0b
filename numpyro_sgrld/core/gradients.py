r"""Gradient estimators.

A gradient estimator is a pair of pure functions (:class:`GradientEstimator`)::

    init(position, key, target) -> state
    estimate(position, batch, state, target) -> Estimate(value, grad, aux, state, oracle)

``target`` (:class:`Target`, built by the kernel) holds the minibatch potential
``potential(z, batch) -> (value, aux)``, the full-data potential (``None`` when the kernel has
no model), and ``draw(key, batch_state) -> (batch, batch_state)``, the run's one minibatch draw
(``batch_state=None`` for a fresh minibatch; estimators that search, the control variates'
mode, draw theirs with it).
``aux`` is the dict of auxiliary values the model recorded with
:func:`~numpyro_sgrld.auxiliary` on this minibatch, from the same forward pass as the gradient.
``oracle(z) -> (value, grad)`` is the
same estimator on the same minibatch at another point (for the Γ correction and for
integrators that need a second gradient). The state (a control-variate centre, an anchor's
full gradient) belongs to the estimator: :func:`minibatch` has none, :func:`control_variates`
keeps its :class:`ControlVariate`.

The default estimator differentiates NumPyro's own minibatch potential
(:mod:`numpyro_sgrld.sampler.potentials` builds it from the model)

.. math::
    \hat U(\theta) = -\log p(\theta) - \frac{N}{n}\sum_{i \in B} \log p(y_i \mid \theta)

(the ``N/n`` scaling comes from ``numpyro.plate(..., subsample_size=n)``), evaluated on the
unconstrained space with the Jacobians of the constraining transforms included. The kernels'
``control_variate`` option switches to the control-variate estimator
(:func:`control_variate_estimate`).
"""

import warnings
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random

from numpyro_sgrld.core.checks import flag, integer
from numpyro_sgrld.core.estimators import (
    ControlVariate,
    Estimate,
    GradientEstimator,
    Target,
    centre_distance,
    centred_estimate,
    control_variate,
    control_variate_estimate,
    find_mode,
    hessian_diagonal_estimate,
)
from numpyro_sgrld.core.tree import tree_all_finite, tree_dot, tree_where

__all__ = [
    "Target",
    "Estimate",
    "GradientEstimator",
    "minibatch",
    "control_variates",
    "svrg",
    "WarmupControlVariate",
    "activate_control_variates",
    "nearer_centre",
    "warmup_control_variates",
    "hessian_diagonal_estimate",
    "ControlVariate",
    "control_variate",
    "control_variate_estimate",
    "centre_distance",
    "find_mode",
]

def minibatch() -> GradientEstimator:
    r"""The plain minibatch gradient: :math:`\nabla\hat U` of NumPyro's ``N/n``-scaled
    minibatch potential, by reverse mode. No state."""

    def init(position, key, target):
        return None

    def estimate(position, batch, state, target):
        (value, aux), grad = jax.value_and_grad(target.potential, has_aux=True)(position, batch)

        def oracle(z):
            return jax.value_and_grad(lambda x: target.potential(x, batch)[0])(z)

        return Estimate(value, grad, aux, state, oracle)

    return GradientEstimator(init, estimate, name="minibatch")


def _check_centre(centre):
    if centre == "mode" or isinstance(centre, dict):
        return centre
    raise ValueError(
        f"`control_variate` must be None, 'mode' or a dict of unconstrained latent values, got "
        f"{centre!r}."
    )


def control_variates(centre="mode", mode_steps=1000, start_at_centre=False) -> GradientEstimator:
    r"""The control-variate estimator (Baker et al. 2019, SGLD-CV;
    :func:`control_variate_estimate`) centred at ``centre``: ``"mode"`` (found at
    initialisation by ``mode_steps`` Adam steps on minibatches, :func:`find_mode`) or a dict of
    unconstrained latent values. Its state is the :class:`ControlVariate` (centre, full-data
    potential and gradient there, the centre's estimated distance from the mode). Each step
    costs two minibatch gradients; initialisation one full-data gradient and one Hessian-vector
    product. ``start_at_centre`` starts the chain at the centre (when it is finite).
    Initialisation warns when the centre is estimated to be more than :math:`\sqrt d`
    posterior sds from the mode."""
    centre = _check_centre(centre)
    mode_steps = integer(mode_steps, "mode_steps")
    start_at_centre = flag(start_at_centre, "start_at_centre")

    def init(position, key, target):
        if isinstance(centre, dict):
            missing = set(position) - set(centre)
            if missing:
                raise ValueError(
                    f"`control_variate` lacks the latent sites {sorted(missing)}: give an "
                    "unconstrained value for every latent site, or use control_variate='mode'."
                )
            point = {k: jnp.asarray(centre[k], jnp.result_type(position[k])) for k in position}
        else:
            point = find_mode(
                lambda z, batch: target.potential(z, batch)[0],
                position,
                random.fold_in(key, 1),
                lambda k: target.draw(k, None)[0],
                mode_steps,
            )
        return control_variate(target.full_potential, point)

    def estimate(position, batch, cv, target):
        value, grad, aux, oracle, batch_value, shift = centred_estimate(position, batch, cv,
                                                                    target.potential)
        return Estimate(value, grad, aux, cv, oracle, batch_value, shift)

    def start(cv, z):
        return tree_where(tree_all_finite(cv.centre), cv.centre, z)

    return GradientEstimator(
        init,
        estimate,
        needs_full_data=True,
        start=start if start_at_centre else None,
        check=warn_if_far_centre,
        name="control_variates",
    )


class WarmupControlVariate(NamedTuple):
    """The state of :func:`warmup_control_variates`: the :class:`ControlVariate` and whether
    it is in use (``active``, a boolean scalar)."""

    cv: ControlVariate
    active: Any


def shared_flag(flag, axis_name):
    """``flag`` as one value for all vectorised chains (true if it is in any chain), so that a
    ``lax.cond`` on it stays a branch under their ``vmap``; ``flag`` itself without an axis."""
    if axis_name is None:
        return flag
    return lax.pmax(flag.astype(jnp.int32), axis_name) > 0


def warmup_control_variates() -> GradientEstimator:
    r"""The plain minibatch gradient until warm-up switches control variates on
    (:func:`control_variate_estimate`, Baker et al. 2019), centred at the warm-up's estimate of
    the posterior's centre, where they reduce the gradient noise enough to pay for their second
    gradient (:func:`activate_control_variates`). The default gradient estimator of the
    kernels whose warm-up learns their metric. Each step costs one minibatch gradient while
    inactive and two when active; the switch costs one full-data gradient."""

    def init(position, key, target):
        zero = jnp.zeros((), jnp.result_type(float))
        cv = ControlVariate(position, zero, jax.tree.map(jnp.zeros_like, position),
                            jnp.full((), jnp.inf))
        return WarmupControlVariate(cv, jnp.zeros((), bool))

    def estimate(position, batch, state, target, active=None):
        """With ``active`` a Python bool, that branch alone; else the state's flag decides."""
        if active is None:
            active = shared_flag(state.active, target.axis_name)

        def centred(position):
            value, grad, aux, _, batch_value, shift = centred_estimate(
                position, batch, state.cv, target.potential)
            return value, grad, aux, batch_value, shift

        def plain(position):
            (value, aux), grad = jax.value_and_grad(target.potential, has_aux=True)(
                position, batch)
            return value, grad, aux, value, jax.tree.map(jnp.zeros_like, grad)

        def centred_oracle(z):
            return centred_estimate(z, batch, state.cv, target.potential)[3](z)

        def plain_oracle(z):
            return jax.value_and_grad(lambda x: target.potential(x, batch)[0])(z)

        if isinstance(active, bool):
            value, grad, aux, batch_value, shift = (centred if active else plain)(position)
            oracle = centred_oracle if active else plain_oracle
        else:
            value, grad, aux, batch_value, shift = lax.cond(active, centred, plain, position)

            def oracle(z):
                return lax.cond(active, centred_oracle, plain_oracle, z)

        return Estimate(value, grad, aux, state, oracle, batch_value, shift)

    settled_forms = {}

    def settled(state):
        """After warm-up the switch no longer moves: one estimator per position of it
        (the same object each time, so that a compiled loop of it is found again)."""
        active = bool(np.any(np.asarray(state.active)))
        if active not in settled_forms:
            settled_forms[active] = GradientEstimator(
                init, partial(_fixed_active, estimate, active), needs_full_data=True,
                name=f"warmup_control_variates ({'on' if active else 'off'})")
        return settled_forms[active]

    return GradientEstimator(init, estimate, needs_full_data=True,
                             name="warmup_control_variates", settled=settled,
                             activate=activate_control_variates)


def _fixed_active(estimate, active, position, batch, state, target):
    return estimate(position, batch, state, target, active)


#: Control variates are switched on where they cut the gradient noise's variance (in the
#: preconditioned metric) to at most this fraction: the step the bias target allows grows about
#: as the noise shrinks where the noise dominates, and a control-variate step costs two
#: gradients, so a reduction to a quarter at least doubles the draws per gradient.
CONTROL_VARIATE_GAIN = 0.25

#: Pairs of minibatch gradients the switch compares.
CONTROL_VARIATE_PROBES = 10


def activate_control_variates(state, centre, position, target, draw, root, key, drift=None):
    r"""The :class:`WarmupControlVariate` after deciding, at ``position``, whether control
    variates centred at ``centre`` pay: with pairs of gradients on independent minibatches
    (``draw(key) -> batch``), the noise :math:`e = R^\top(g_1 - g_2)` of the plain estimator
    and :math:`e' = R^\top\big((g_1 - g_1^c) - (g_2 - g_2^c)\big)` of the centred one
    (:math:`g^c` at the centre, same minibatch; ``root`` applies :math:`R^\top`, the
    preconditioner's root), they are switched on where :math:`\sum\lVert e'\rVert^2 \le`
    :data:`CONTROL_VARIATE_GAIN` :math:`\sum\lVert e\rVert^2`, summed over
    :data:`CONTROL_VARIATE_PROBES` pairs (and over the vectorised chains, ``target.axis_name``:
    they decide together). Switching on costs one full-data gradient at the centre. With
    ``drift`` (``v -> D v``, the preconditioner), a centre far from the mode is moved towards
    it first (:func:`nearer_centre`)."""
    grad = jax.grad(lambda z, b: target.potential(z, b)[0])

    def probe(j, carry):
        plain, centred = carry
        b1, b2 = draw(random.fold_in(key, 2 * j)), draw(random.fold_in(key, 2 * j + 1))
        g1, g2 = grad(position, b1), grad(position, b2)
        c1, c2 = grad(centre, b1), grad(centre, b2)
        e = root(jax.tree.map(jnp.subtract, g1, g2))
        e_c = root(jax.tree.map(lambda a, b, c, d: (a - c) - (b - d), g1, g2, c1, c2))
        return plain + tree_dot(e, e), centred + tree_dot(e_c, e_c)

    zero = jnp.zeros((), jnp.result_type(float))
    plain, centred = lax.fori_loop(0, CONTROL_VARIATE_PROBES, probe, (zero, zero))
    if target.axis_name is not None:
        plain, centred = lax.psum(plain, target.axis_name), lax.psum(centred, target.axis_name)
    use = (centred <= CONTROL_VARIATE_GAIN * plain) & (plain > 0) & tree_all_finite(centre)
    use = shared_flag(use, target.axis_name)

    def switch_on(state):
        cv = control_variate(target.full_potential, centre)
        if drift is not None:
            cv = nearer_centre(cv, target.full_potential, drift)
        return WarmupControlVariate(cv, jnp.ones((), bool))

    return lax.cond(use, switch_on, lambda s: s, state)


#: Newton steps at most that :func:`nearer_centre` takes towards the mode.
CENTRING_STEPS = 4

#: Halvings at most of a Newton step whose full-data potential does not fall.
BACKTRACKS = 8


def nearer_centre(cv, full_potential, drift, steps=CENTRING_STEPS):
    r"""The :class:`ControlVariate` ``cv`` moved towards the mode while its centre is far from
    it: while the estimated distance (:func:`centre_distance`, in posterior sds) exceeds
    :math:`\sqrt d` (:func:`warn_if_far_centre`'s limit, ``d`` the number of unconstrained
    dimensions), up to ``steps`` Newton steps in the metric :math:`D` (``drift(v) = Dv``, the
    warm-up's preconditioner, whose learnt part approximates the inverse Hessian: the Laplace
    covariance where it is dense, the inverse Hessian diagonal where the chain has not spread),
    each with an exact line search on the quadratic model,

    .. math::
        p = D\,\nabla U(\hat\theta), \qquad
        \hat\theta' = \hat\theta - \frac{\nabla U(\hat\theta)^\top p}{p^\top H p}\,p,

    halved up to :data:`BACKTRACKS` times until the full-data potential falls (far out on a
    saturating likelihood the curvature vanishes and the full step overshoots), and kept only
    where it does (the iteration stops at the first step that does not). Each step costs one
    full-data Hessian-vector product, a full-data potential per halving and the new centre's
    full-data gradient and distance (:func:`control_variate`). Where the gradient noise is
    large (:math:`N/n` large) the warm-up's chain, whose mean becomes the centre, cannot have
    found the mode to within a posterior sd (a minibatch method needs about :math:`N/n`
    steps for that); the estimator is unbiased wherever the centre is, but its variance grows
    with the chain's distance from it (Baker et al. 2019), and the adapted step shrinks with
    it."""
    limit = float(np.sqrt(sum(leaf.size for leaf in jax.tree.leaves(cv.centre))))
    hvp = jax.grad(full_potential)

    def far(carry):
        k, cv, done = carry
        return (k < steps) & ~done & (cv.distance > limit)

    def newton(carry):
        k, cv, _ = carry
        p = drift(cv.grad)
        curvature = tree_dot(p, jax.jvp(hvp, (cv.centre,), (p,))[1])
        rate = tree_dot(cv.grad, p) / jnp.where(curvature > 0, curvature, 1.0)

        def at(r):
            return jax.tree.map(lambda c, q: c - r * q, cv.centre, p)

        def higher(c):  # backtracking: halve the step until the potential falls
            j, r = c
            value = full_potential(at(r))
            return (j < BACKTRACKS) & ~(value < cv.value)

        j, rate = lax.while_loop(higher, lambda c: (c[0] + 1, c[1] / 2), (0, rate))
        new = control_variate(full_potential, at(rate))
        better = ((curvature > 0) & (j < BACKTRACKS) & tree_all_finite(new.centre)
                  & (new.value < cv.value))
        return k + 1, tree_where(better, new, cv), ~better

    return lax.while_loop(far, newton, (0, cv, jnp.zeros((), bool)))[1]


def svrg(update_every=None) -> GradientEstimator:
    r"""The SVRG gradient estimator (Johnson & Zhang 2013; SVRG-Langevin, Dubey et al. 2016,
    "Variance reduction in stochastic gradient Langevin dynamics"): the control variate
    (:func:`control_variate_estimate`) with a moving **anchor** :math:`\tilde\theta`,

    .. math::
        \nabla\tilde U(\theta) = \nabla U(\tilde\theta) + \nabla\hat U_B(\theta)
                                 - \nabla\hat U_B(\tilde\theta),

    unbiased for :math:`\nabla U(\theta)` whatever the anchor, and exact at it. The anchor is
    the chain's current position, with the full-data potential and gradient there, refreshed
    every ``update_every`` steps (default: one epoch, :math:`N/n` steps of the largest
    subsample plate) and at initialisation. Between refreshes each step costs two minibatch
    gradients, and a refresh one full-data gradient (one extra epoch's worth of gradients per
    epoch with the default). The refresh is a ``lax.cond`` on the transition's index, shared by
    vectorised chains, so it stays a branch. State: a :class:`ControlVariate` (``distance``
    ``None``). Needs the model's full data (a kernel built from ``potential_fn`` refuses it).

    Unlike :func:`control_variates`, whose centre is fixed near the mode, the anchor follows the
    chain: the variance is that of :math:`\nabla\hat U_B(\theta) - \nabla\hat U_B(\tilde
    \theta)`, small while the chain stays within a short distance of where it was an epoch ago
    (Dubey et al.'s bound is in :math:`h^2` times the epoch length), without a mode search.
    """
    if update_every is not None:
        update_every = integer(update_every, "update_every",
                               hint="It is the number of steps between anchor refreshes, or "
                               "None (one epoch).")

    def anchor(target, position):
        value, grad = jax.value_and_grad(target.full_potential)(position)
        return ControlVariate(position, value, grad)

    def init(position, key, target):
        return anchor(target, position)

    def estimate(position, batch, cv, target):
        every = target.steps_per_epoch if update_every is None else update_every
        if target.step is not None:
            refresh = (target.step > 0) & (target.step % every == 0)
            cv = lax.cond(refresh, lambda: anchor(target, position), lambda: cv)
        value, grad, aux, oracle, batch_value, shift = centred_estimate(position, batch, cv,
                                                                    target.potential)
        return Estimate(value, grad, aux, cv, oracle, batch_value, shift)

    return GradientEstimator(init, estimate, needs_full_data=True, name="svrg")


def warn_if_far_centre(cv):
    r"""Warn when the control-variate centre's estimated distance from the mode
    (:func:`centre_distance`, in posterior sds) exceeds :math:`\sqrt d`, d the number of
    unconstrained latent dimensions: for a near-Gaussian posterior the chain's own squared
    distance from the mode averages d (in the same units), so beyond that the centre's offset
    adds more to the estimator's variance than the chain's spread does."""
    if isinstance(cv.distance, jax.core.Tracer):
        return
    dim = sum(np.size(x) for x in jax.tree.leaves(cv.centre)) // max(np.size(cv.distance), 1)
    worst = float(np.max(np.asarray(cv.distance)))
    if np.isnan(worst):
        warnings.warn(
            "The control-variate centre, or the full-data gradient or curvature there, is not "
            "finite: every gradient estimate will be non-finite too. Check the model at the "
            "centre; with control_variate='mode', try another `init_strategy` or `init_params` "
            "for the mode search.",
            UserWarning,
            stacklevel=3,
        )
    elif worst > np.sqrt(dim):
        warnings.warn(
            f"The control-variate centre is about {worst:.3g} posterior standard deviations "
            f"from the mode (estimated along the full-data gradient; more than sqrt(d) = "
            f"{np.sqrt(dim):.3g} for the d = {dim} latent dimensions): the gradient estimator "
            "stays unbiased but its variance is dominated by the centre's offset. With "
            "control_variate='mode', increase `mode_steps`; with a centre dict, pass a value "
            "closer to the mode.",
            UserWarning,
            stacklevel=3,
        )
