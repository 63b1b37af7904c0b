r"""The Γ correction drift of Rensmeyer & Niggemann (2023) for adaptive metrics, and the form
of it that works at practical step sizes.

A Riemannian Langevin step needs the drift
:math:`T\,\Gamma_i = T\sum_j \partial D_{ij}/\partial\theta_j` besides :math:`-D\nabla U`;
pSGLD, Monge and Shampoo SGRLD drop it, which moves their stationary density from :math:`p`
towards :math:`p / D`. Rensmeyer & Niggemann compute Γ of the metric as a function of the
current gradient statistic:

.. math::
    D(\theta) := D\big(\alpha S_{prev} + (1 - \alpha)\, s(\theta)\big), \qquad
    \Gamma_i = \frac{1}{1 - \alpha}\sum_j \frac{\partial D_{ij}(\theta)}{\partial\theta_j},

with :math:`s(\theta)` the statistic of the current minibatch gradient at θ (same minibatch).
Dividing by :math:`1 - \alpha` assumes the moving average :math:`S` follows the current θ
(``form="instant"``). That holds only when the average's memory :math:`1/(1-\alpha)` steps is
short against the time the chain takes to move: as :math:`h \to 0` at fixed :math:`\alpha`.

**The moving average's lag** (``form="lagged"``, the default). At practical step sizes the
gradient statistic is driven by the fastest directions of the posterior, which relax in a few
steps, and the average sees their mean, not their current value: it responds to θ only
partly, so the full Γ over-corrects (measured on posteriordb's ``sblrc-blr``: pSGLD's
coefficient sds 0.84 of the truth at every step size from 1e-6 to 2.5e-7, against 1.02
uncorrected). Model each coordinate near the chain's current position as an
Ornstein–Uhlenbeck process relaxing by :math:`e^{-r_i}` per step,
:math:`r_i = h\,(D\hat H)_{ii}`; a statistic of order :math:`k` in the gradient (:math:`k = 2`
for :math:`\bar g\odot\bar g`, 1 for :math:`\bar g`) then has, given the current θ, the
expectation

.. math::
    E[S \mid \theta] - \text{const} \approx \kappa_i\,(s(\theta) - \text{const}), \qquad
    \kappa_i = \sum_{m \ge 0} (1-\alpha)\alpha^m e^{-k r_i m}
             = \frac{1 - \alpha}{1 - \alpha e^{-k r_i}},

and the drift the chain needs is :math:`\kappa_i\Gamma_i`. Limits:
:math:`\kappa \to 1` as :math:`h \to 0` (Rensmeyer & Niggemann's Γ), :math:`\kappa \to 1 -
\alpha` when the coordinate relaxes within one step (only the current gradient's share of the
average depends on θ). :math:`(D\hat H)_{ii}` comes from the same forward-over-reverse pass
as Γ (no extra cost) and is smoothed by a moving average with the metric's ``decay``
(:class:`CorrectionState`).

**Taming.** Where the statistic is small :math:`D` is large and Γ grows like :math:`D^3`
(RMSprop); one Euler step of :math:`hT\kappa\Gamma` can then throw the chain far out. The
lagged form bounds each coordinate's correction step by the noise step
:math:`\ell_i = \sqrt{2hT D_{ii}}`:
:math:`hT\kappa\Gamma_i / (1 + hT|\kappa\Gamma_i|/\ell_i)` (a tamed drift in the sense of
Hutzenthaler, Jentzen & Kloeden 2012). The change is
:math:`O(\sqrt{h}\,|\Gamma_i|/\sqrt{D_{ii}})` relative, so the small-step limit is untouched.

**What it leaves.** The OU model is exact for a Gaussian posterior with a diagonal metric and
a diagonal-dominant Hessian; with strong correlations, :math:`(DH)_{ii}` understates the rate
of the fastest modes and :math:`\kappa` is somewhat too large. Where the gradient statistic
truly vanishes (exact gradients, ``eps`` → 0, at a mode) the metric is singular, no step is
small enough there, and the bias decays only like :math:`h^{1/3}` (the width of the region
where one noise step exceeds the distance to the mode); minibatch noise or
:math:`\lambda` comparable with the per-datum gradient's scale removes the singularity.

- ``"exact"``: for every basis vector :math:`e_j`, the forward-mode derivative of
  :math:`\theta \mapsto (\nabla\hat U(\theta), D(\theta)e_j)` in direction :math:`e_j`: d
  forward-over-reverse passes, vectorised 32 at a time; for small d (a few hundred) it costs
  about as much as one Hutchinson probe on a small model and has no probe noise.
- ``"hutchinson"``: one Rademacher vector z; :math:`\hat\Gamma = J z`,
  :math:`J = \partial(D(\theta) z)/\partial\theta`, and :math:`z \odot D\hat H z` for the
  curvature: one forward-over-reverse pass. :math:`E[\hat\Gamma] = \Gamma`; its noise enters
  the step at order h, like gradient noise, so it does not bias the small-step limit.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import random
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.core.traits import trait

__all__ = [
    "BY_NAME",
    "FORMS",
    "GammaBias",
    "Lag",
    "NoLag",
    "CorrectionState",
    "CorrectionTerms",
    "Correction",
    "as_correction",
    "check_correction",
    "correction_drift",
    "correction_terms",
    "exact",
    "hutchinson",
    "init_correction",
    "lag_response",
    "lagged_correction",
]

EXACT_BATCH = 32  # basis vectors differentiated together by the exact form
FORMS = ("lagged", "instant")


class Lag(NamedTuple):
    r"""A metric's trait (:mod:`numpyro_sgrld.core.traits`): its state is a moving average with
    weight ``decay`` :math:`\alpha` of a statistic of power ``statistic_order`` in the
    gradient (2 for :math:`\bar g\odot\bar g` or :math:`\bar g\bar g^\top`, 1 for
    :math:`\bar g`), which is what Γ differentiates and what :func:`lag_response` reads.
    Without it a metric cannot carry the correction."""

    decay: float
    statistic_order: int = 2


class GammaBias(NamedTuple):
    """A metric's or an integrator's trait (:mod:`numpyro_sgrld.core.traits`): its adaptation
    makes Γ non-zero, so without the correction the chain samples another law even at small
    steps (docs/bias.md); read by the verdict's advice. ``correctable``: whether
    ``correction="exact"`` on its preset removes it (else a constant preconditioner, SGLD's or
    SGHMC's, is the fix)."""

    correctable: bool = True


class NoLag(NamedTuple):
    """A metric's trait: why it cannot carry the Γ correction (and what to change), for the
    error that refuses it."""

    hint: str


def _lag(metric):
    return trait(metric, Lag)


class CorrectionState(NamedTuple):
    r"""``curvature``: moving average of the estimate of :math:`\mathrm{diag}(D\hat H)` (flat
    vector, before the :math:`1/(1-\alpha^t)` bias correction); ``count``: steps taken."""

    curvature: Any
    count: Any


class CorrectionTerms(NamedTuple):
    r"""One step's estimates (flat vectors): ``gamma`` :math:`\Gamma`, ``curvature``
    :math:`\mathrm{diag}(D\hat H)`, ``metric_diag`` :math:`\mathrm{diag}(D)`."""

    gamma: Any
    curvature: Any
    metric_diag: Any


class Correction(NamedTuple):
    r"""The Γ correction as a piece of the composition: ``terms``, its estimator of
    :math:`\sum_j \partial_j D_{ij}` and the diagonals the lagged form reads
    (``(key, flat, apply, metric_at) -> (total, curvature, metric_diag)``, see
    :func:`correction_terms`), ``instant`` its form (Rensmeyer & Niggemann's Γ as written, or
    the lagged one), and ``name`` (``"exact"`` or ``"hutchinson"``)."""

    name: str
    terms: Callable
    instant: bool = False

    def __repr__(self):
        return repr(self.name)


def _exact_terms(key, flat, apply, metric_at, unravel):
    r"""Every column of :math:`\partial(D v)/\partial\theta` along the basis (``d``
    forward-over-reverse passes, batched)."""

    def column(e):
        (grad, d_e), (h_e, dd_e) = jax.jvp(lambda th: apply(th, e), (flat,), (e,))
        dh_e = ravel_pytree(metric_at(grad).drift(unravel(h_e)))[0]
        return dd_e, jnp.dot(e, dh_e), jnp.dot(e, d_e)

    basis = jnp.eye(flat.shape[0], dtype=flat.dtype)
    columns, curvature, metric_diag = jax.lax.map(
        column, basis, batch_size=min(flat.shape[0], EXACT_BATCH)
    )
    return columns.sum(axis=0), curvature, metric_diag


def _hutchinson_terms(key, flat, apply, metric_at, unravel):
    r"""One Rademacher probe :math:`z`: :math:`\hat\Gamma = J z` (one pass)."""
    z = random.rademacher(key, flat.shape, dtype=flat.dtype)
    (grad, d_z), (h_z, total) = jax.jvp(lambda th: apply(th, z), (flat,), (z,))
    curvature = z * ravel_pytree(metric_at(grad).drift(unravel(h_z)))[0]
    return total, curvature, z * d_z


def exact(form="lagged"):
    """Γ from every column of the metric's Jacobian (small models)."""
    return Correction("exact", _exact_terms, _instant(form))


def hutchinson(form="lagged"):
    """Γ from one Rademacher probe a step (one extra forward-over-reverse pass)."""
    return Correction("hutchinson", _hutchinson_terms, _instant(form))


def _instant(form):
    if form not in FORMS:
        raise ValueError(
            f"Unknown correction_form={form!r}; use 'lagged' (default: Γ scaled by the moving "
            "average's response, tamed) or 'instant' (Rensmeyer & Niggemann's Γ as written)."
        )
    return form == "instant"


#: The corrections by the names ``correction=`` accepts.
BY_NAME = {"exact": exact, "hutchinson": hutchinson}


def as_correction(correction, form=None):
    """``correction`` as a :class:`Correction` (``None`` stays ``None``): a name in
    :data:`BY_NAME` with ``form`` (default ``"lagged"``), or a :class:`Correction` (then in
    ``form`` where one is given)."""
    if correction is None or isinstance(correction, Correction):
        if correction is not None and form is not None:
            correction = correction._replace(instant=_instant(form))
        elif correction is None:
            _instant("lagged" if form is None else form)
        return correction
    if correction not in BY_NAME:
        raise ValueError(
            f"Unknown correction={correction!r}; use None, 'exact' (small models) or "
            "'hutchinson' (one extra forward-over-reverse pass per step)."
        )
    return BY_NAME[correction]("lagged" if form is None else form)


def check_correction(correction, metric, integrator):
    """Refuse a :class:`Correction` the metric or the integrator cannot carry, naming the piece
    and the fix; returns ``correction``."""
    if correction is not None and _lag(metric) is None:
        reason = trait(metric, NoLag)
        hint = reason.hint if reason else "it has no moving-average statistic to differentiate"
        others = ", ".join(
            m for m in ("metrics.rmsprop", "metrics.monge", "metrics.shampoo with "
                        "update_interval=1") if not m.startswith(f"metrics.{metric.name}")
        )
        raise ValueError(
            f"The metric {metric.name!r} cannot carry correction={correction.name!r}: {hint}. "
            f"Otherwise use correction=None, or a metric whose statistic Γ differentiates "
            f"({others})."
        )
    if correction is not None and not integrator.carries_correction:
        raise ValueError(
            f"The integrator {integrator.name!r} cannot carry correction={correction.name!r}: "
            "the Γ drift is the first-order (Langevin) correction of a position-dependent "
            "metric; with momentum or an extra drift the exact dynamics need other terms (Ma, "
            "Chen & Fox 2015). Use integrators.langevin() with the correction, or "
            "correction=None."
        )
    return correction


def _grad_and_metric_times(metric, state, grad_fn, unravel, context):
    """``(theta_flat, v_flat) -> (grad(theta), D(theta) v)``, D built from the gradient at
    theta, both flat."""

    def apply(theta_flat, v_flat):
        theta = unravel(theta_flat)
        grad = grad_fn(theta)
        precond, _ = metric.update(grad, state, theta, context)
        return ravel_pytree(grad)[0], ravel_pytree(precond.drift(unravel(v_flat)))[0]

    return apply


def correction_terms(kind, key, position, grad_fn, metric, state, context=None):
    """Γ, :math:`\\mathrm{diag}(D\\hat H)` and :math:`\\mathrm{diag}(D)` at ``position`` (flat
    vectors; see :class:`CorrectionTerms`) by the :class:`Correction` ``kind`` (or its name).
    ``grad_fn(theta)`` is the minibatch gradient on the current minibatch, ``state`` the metric
    state *before* this step's update, ``context`` the step's
    :class:`~numpyro_sgrld.core.metrics.StepContext` (held fixed: the metric is differentiated
    through the gradient only)."""
    flat, unravel = ravel_pytree(position)
    apply = _grad_and_metric_times(metric, state, grad_fn, unravel, context)

    def metric_at_position(grad_flat):
        return metric.update(unravel(grad_flat), state, position, context)[0]

    total, curvature, metric_diag = as_correction(kind).terms(
        key, flat, apply, metric_at_position, unravel)
    return CorrectionTerms(total / (1.0 - _lag(metric).decay), curvature, metric_diag)


def correction_drift(kind, key, position, grad_fn, metric, state, context=None):
    """Rensmeyer & Niggemann's Γ for ``metric`` at ``position`` (a tree like the position)."""
    flat, unravel = ravel_pytree(position)
    return unravel(correction_terms(kind, key, position, grad_fn, metric, state, context).gamma)


def lag_response(rate, decay, order):
    r""":math:`\kappa = (1-\alpha)/(1 - \alpha e^{-k r})`: how much of the current statistic's
    dependence on θ a moving average with weight ``decay`` :math:`\alpha` keeps when the
    coordinate relaxes by :math:`e^{-r}` per step (``rate`` :math:`r \ge 0`) and the statistic
    has ``order`` :math:`k` in the gradient. 1 at :math:`r = 0`, :math:`1-\alpha` as
    :math:`r \to \infty`."""
    # 1 - a e^{-x} = (1 - a) - a expm1(-x), accurate for small x
    return (1.0 - decay) / ((1.0 - decay) - decay * jnp.expm1(-order * rate))


def init_correction(position):
    flat, _ = ravel_pytree(position)
    return CorrectionState(jnp.zeros_like(flat), jnp.zeros((), jnp.int32))


def lagged_correction(
    kind, key, position, grad_fn, metric, state, correction_state, step_size, temperature,
    form=None, context=None,
):
    r"""The correction drift Γ to add as :math:`hT\Gamma` this step, and the new
    :class:`CorrectionState`.

    ``kind``: a :class:`Correction`, or its name with ``form`` (default ``"lagged"``).
    ``form="instant"``: Rensmeyer & Niggemann's Γ. ``form="lagged"``: :math:`\kappa\Gamma`
    with :math:`\kappa` from :func:`lag_response` at :math:`r = h|\overline{(D\hat H)}_{ii}|`,
    tamed so that :math:`hT|\Gamma_i|` stays below the noise step
    :math:`\sqrt{2hTD_{ii}}` (see the module docstring)."""
    flat, unravel = ravel_pytree(position)
    kind = as_correction(kind, form)
    terms = correction_terms(kind, key, position, grad_fn, metric, state, context)
    decay, order = _lag(metric)
    count = correction_state.count + 1
    finite = jnp.isfinite(terms.curvature)
    average = jnp.where(
        finite,
        decay * correction_state.curvature + (1.0 - decay) * terms.curvature,
        correction_state.curvature,
    )
    new_state = CorrectionState(average, count)
    if kind.instant:
        return unravel(terms.gamma), new_state
    seen = 1.0 - decay ** count.astype(average.dtype)
    curvature = jnp.abs(average) / jnp.where(seen > 0, seen, 1.0)
    kappa = lag_response(step_size * curvature, decay, order)
    gamma = kappa * terms.gamma
    # tamed: h T |gamma| / (1 + h T |gamma| / ell) <= ell = sqrt(2 h T D_ii)
    reach = jnp.sqrt(step_size * temperature / 2.0) * jnp.abs(gamma)
    metric_diag = jnp.abs(terms.metric_diag)
    safe = jnp.where(metric_diag > 0, metric_diag, 1.0)
    gamma = jnp.where(metric_diag > 0, gamma / (1.0 + reach / jnp.sqrt(safe)), 0.0)
    return unravel(gamma), new_state
