r"""Gradient estimators, and the minibatch potential they differentiate.

A gradient estimator is a pair of pure functions (:class:`GradientEstimator`)::

    init(position, key, target) -> state
    estimate(position, batch, state, target) -> Estimate(value, grad, aux, state, oracle)

``target`` (:class:`Target`, built by the kernel) holds the minibatch potential
``potential(z, batch) -> (value, aux)``, the full-data potential (``None`` when the kernel has
no model), and ``draw_batch(key)`` for estimators that search (the control variates' mode).
``aux`` is the dict of auxiliary values the model recorded with :func:`auxiliary` on this
minibatch, from the same forward pass as the gradient. ``oracle(z) -> (value, grad)`` is the
same estimator on the same minibatch at another point (for the Γ correction and for
integrators that need a second gradient). The state (a control-variate centre, an anchor's
full gradient) belongs to the estimator: :func:`minibatch` has none, :func:`control_variates`
keeps its :class:`ControlVariate`.

The default estimator differentiates NumPyro's own minibatch potential

.. math::
    \hat U(\theta) = -\log p(\theta) - \frac{N}{n}\sum_{i \in B} \log p(y_i \mid \theta)

(the ``N/n`` scaling comes from ``numpyro.plate(..., subsample_size=n)``), evaluated on the
unconstrained space with the Jacobians of the constraining transforms included. The kernels'
``control_variate`` option switches to the control-variate estimator
(:func:`control_variate_estimate`).
"""

import warnings
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.flatten_util import ravel_pytree
from numpyro import handlers
from numpyro.infer.util import potential_energy
from numpyro.primitives import Messenger, apply_stack
from numpyro.util import not_jax_tracer

from numpyro_sgrld._checks import flag, integer
from numpyro_sgrld._tree import tree_all_finite, tree_dot, tree_where

__all__ = [
    "auxiliary",
    "Target",
    "Estimate",
    "GradientEstimator",
    "minibatch",
    "control_variates",
    "svrg",
    "WarmupControlVariate",
    "activate_control_variates",
    "warmup_control_variates",
    "minibatch_potential",
    "minibatch_potential_with_aux",
    "hessian_diagonal_estimate",
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


AUX_SITE = "auxiliary"


def auxiliary(name, value):
    """Record ``value`` as an auxiliary value of this minibatch's forward pass, under ``name``
    (e.g. a layer's inputs, for a metric that reads them): the stochastic-gradient kernels hand
    it to the metric in :attr:`StepContext.aux <numpyro_sgrld.metrics.StepContext>`, from the
    same pass that computes the gradient. Returns ``value``. Outside those kernels (``NUTS``,
    ``Predictive``) it does nothing: the site carries no density and is not recorded as a
    sample."""
    msg = apply_stack({"type": AUX_SITE, "name": name, "value": value, "cond_indep_stack": []})
    return msg["value"]


class _CollectAux(Messenger):
    """Collects the values of :func:`auxiliary` sites while the model runs."""

    def __init__(self, fn=None):
        self.values = {}
        super().__init__(fn)

    def postprocess_message(self, msg):
        if msg["type"] == AUX_SITE:
            self.values[msg["name"]] = msg["value"]


def minibatch_potential_with_aux(model, model_args=(), model_kwargs=None):
    """``(z, idx) -> (value, aux)``: :func:`minibatch_potential` and the dict of the values the
    model recorded with :func:`auxiliary` in the same pass (empty when it records none)."""
    model_kwargs = {} if model_kwargs is None else model_kwargs

    def potential(z, idx):
        collect = _CollectAux(handlers.substitute(model, data=idx))
        value = potential_energy(collect, model_args, model_kwargs, z)
        return value, collect.values

    return potential


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
    value, grad, _, _, _, shift = _centred(z, idx, cv, lambda x, b: (potential(x, b), {}))
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
    from a ``potential_fn``), and ``draw_batch(key) -> batch``, fresh minibatch indices;
    ``steps_per_epoch`` (:math:`N/n` of the largest subsample plate) and ``step``, the
    transition's index (the same for all chains of a vectorised run, so that a decision on it
    stays a branch under ``vmap``); ``axis_name``, the name of the vectorised chains' axis
    (``None`` otherwise), over which a decision shared by the chains is made one value."""

    potential: Callable
    full_potential: Callable | None
    draw_batch: Callable
    steps_per_epoch: int = 1
    step: Any = None
    axis_name: Any = None


class Estimate(NamedTuple):
    r"""One step's estimate: ``value`` :math:`\hat U`, ``grad`` :math:`\nabla\hat U`, ``aux``
    (the model's auxiliary values on this minibatch), the estimator's new ``state``, and
    ``oracle(z) -> (value, grad)``: the same estimator on the same minibatch at ``z``;
    ``batch_value``, the plain minibatch potential at the position, where ``value`` is
    another estimate (control variates add a constant to it; ``None``: ``value`` is it).
    The proposal check compares it with the plain minibatch potential at the proposal."""

    value: Any
    grad: Any
    aux: Any
    state: Any
    oracle: Callable
    batch_value: Any = None


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
    the window's mean as ``centre`` (:func:`activate_control_variates`). ``name`` names it in
    error messages."""

    init: Callable
    estimate: Callable
    needs_full_data: bool = False
    start: Callable | None = None
    check: Callable | None = None
    name: str = "gradient estimator"
    settled: Callable | None = None
    activate: Callable | None = None


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


def _centred(position, batch, cv, potential):
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
                target.draw_batch,
                mode_steps,
            )
        return control_variate(target.full_potential, point)

    def estimate(position, batch, cv, target):
        value, grad, aux, oracle, batch_value, _ = _centred(position, batch, cv, target.potential)
        return Estimate(value, grad, aux, cv, oracle, batch_value)

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
            value, grad, aux, _, batch_value, _ = _centred(position, batch, state.cv,
                                                           target.potential)
            return value, grad, aux, batch_value

        def plain(position):
            (value, aux), grad = jax.value_and_grad(target.potential, has_aux=True)(
                position, batch)
            return value, grad, aux, value

        def centred_oracle(z):
            return _centred(z, batch, state.cv, target.potential)[3](z)

        def plain_oracle(z):
            return jax.value_and_grad(lambda x: target.potential(x, batch)[0])(z)

        if isinstance(active, bool):
            value, grad, aux, batch_value = (centred if active else plain)(position)
            oracle = centred_oracle if active else plain_oracle
        else:
            value, grad, aux, batch_value = lax.cond(active, centred, plain, position)

            def oracle(z):
                return lax.cond(active, centred_oracle, plain_oracle, z)

        return Estimate(value, grad, aux, state, oracle, batch_value)

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


def activate_control_variates(state, centre, position, target, draw, root, key):
    r"""The :class:`WarmupControlVariate` after deciding, at ``position``, whether control
    variates centred at ``centre`` pay: with pairs of gradients on independent minibatches
    (``draw(key) -> batch``), the noise :math:`e = R^\top(g_1 - g_2)` of the plain estimator
    and :math:`e' = R^\top\big((g_1 - g_1^c) - (g_2 - g_2^c)\big)` of the centred one
    (:math:`g^c` at the centre, same minibatch; ``root`` applies :math:`R^\top`, the
    preconditioner's root), they are switched on where :math:`\sum\lVert e'\rVert^2 \le`
    :data:`CONTROL_VARIATE_GAIN` :math:`\sum\lVert e\rVert^2`, summed over
    :data:`CONTROL_VARIATE_PROBES` pairs (and over the vectorised chains, ``target.axis_name``:
    they decide together). Switching on costs one full-data gradient at the centre."""
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
        return WarmupControlVariate(control_variate(target.full_potential, centre),
                                    jnp.ones((), bool))

    return lax.cond(use, switch_on, lambda s: s, state)


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
        value, grad, aux, oracle, batch_value, _ = _centred(position, batch, cv, target.potential)
        return Estimate(value, grad, aux, cv, oracle, batch_value)

    return GradientEstimator(init, estimate, needs_full_data=True, name="svrg")


def warn_if_far_centre(cv):
    r"""Warn when the control-variate centre's estimated distance from the mode
    (:func:`centre_distance`, in posterior sds) exceeds :math:`\sqrt d`, d the number of
    unconstrained latent dimensions: for a near-Gaussian posterior the chain's own squared
    distance from the mode averages d (in the same units), so beyond that the centre's offset
    adds more to the estimator's variance than the chain's spread does."""
    if not not_jax_tracer(cv.distance):
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
