r"""The share of ``target_bias`` an adapted SG step within Gibbs aims at.

A Gibbs site drawn given its Gaussian children reads their spread. The SG step inflates the
spread of each child by its bias, and the site reads that inflation from every child the data
say little about at once, on every sweep, and keeps it over its own correlation time: its
mean moves by many times the children's bias (``docs/gibbs.md``: the global scale of a sparse
logistic regression 0.09 of its sd off at the step's whole ``target_bias``, that of a wider
one 0.25). Those children are counted by

.. math::

    n = \sum_j \frac{1}{1 + \sigma_j^2 F_j},

over the decentred sites' elements (:mod:`~numpyro_sgrld.sampler.decentring`): :math:`\sigma_j`
a child's prior sd at the Gibbs sites' values, :math:`F_j` its learnt data curvature; a child
the data pin (:math:`\sigma_j^2 F_j \gg 1`) counts for nothing, one they do not touch for 1.
The step aims at

.. math::

    s(n) = \min\bigl(1, c / \sqrt{n}\bigr)

of the kernel's ``target_bias`` (:data:`BIAS_SHARE_SCALE` :math:`c`): half at
:math:`n = 9`, a quarter at :math:`n = 36`, the whole where at most :math:`c^2` children are
weakly informed (a random intercept whose groups each hold many rows). :math:`n` is an
exponential average over warm-up (the curvature's rate,
:data:`~numpyro_sgrld.sampler.decentring.CURVATURE_RATE`), and the share is written into the
step-size adaptation's state (``bias_share``) on every warm-up step; the step frozen at the
warm-up's end aims at the share then. It is a sum over every decentred site, an upper bound
on any one Gibbs site's count. Without decentred children (a ``gibbs_fn`` whose sites have
none) the step aims at :data:`FIXED_SHARE`.

The count does not say how long the scale keeps each push: where nothing but its prior and
weakly informed children hold a scale, its correlation time is long and the share is not
enough (``docs/gibbs.md``: such a scale 0.25-0.44 of its sd off at the default).

The share is for the sites the exact draws read. An SG site outside every Gibbs site's
Markov blanket (a network's biases and later layers, beside a first layer's scales) enters
none of those draws, yet a scalar step slows it by the same share (its relaxation time grows
as :math:`1/h`). After warm-up such sites step :math:`h/s` (:func:`full_step`: the metric
:math:`D' = S^{1/2} D S^{1/2}`, :math:`S = 1/s` on them and 1 elsewhere, for a constant
metric). With :math:`\mu` the adapted step's worst-direction bias rate in the metric
:math:`D` (:mod:`~numpyro_sgrld.warmup.adaptation`), :math:`h = s\delta/\mu`, and
:math:`hD' = (\delta/\mu)\, D''` with :math:`D'' \preceq D` (:math:`s` on the blanket's sites,
1 on the others), so the worst direction's bias stays within the whole ``target_bias``
:math:`\delta` and the blanket's sites keep their step :math:`h`.
"""
import jax.numpy as jnp

from numpyro_sgrld.core.metrics import Constant
from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.verdict.judge import MEAN_ERROR

__all__ = ["BIAS_SHARE_SCALE", "FIXED_SHARE", "bias_hint", "full_step", "learnt", "share",
           "start", "weakly_informed", "with_share"]

#: :math:`c` in the share :math:`\min(1, c/\sqrt n)`: the share that kept the global scale of
#: the sparse regressions within 0.05 of its sd at :math:`n \approx 9` (half) and
#: :math:`n \approx 37` (a quarter) (``docs/gibbs.md``).
BIAS_SHARE_SCALE = 1.5

#: The share where the Gibbs sites' children are not known.
FIXED_SHARE = 0.5


def weakly_informed(params, curvature):
    r""":math:`n = \sum_j 1/(1 + \sigma_j^2 F_j)` over the decentred sites' elements
    (``params``: ``{site: (loc, scale)}``; ``curvature``: ``{site: F}``, :math:`F \ge 0`)."""
    total = 0.0
    for s, (_, scale) in params.items():
        f = curvature[s]
        informed = jnp.where(f > 0, jnp.square(scale) * f, 0.0)  # an infinite scale at F = 0
        total = total + jnp.sum(1.0 / (1.0 + informed))
    return total


def share(children):
    r""":math:`\min(1, c/\sqrt n)` for ``children`` :math:`n` (:func:`weakly_informed`)."""
    return jnp.minimum(1.0, BIAS_SHARE_SCALE * jnp.sqrt(1.0 / jnp.maximum(children, 1e-6)))


def with_share(sg_state, value):
    """``sg_state`` with its step-size adaptation aiming at ``value`` of ``target_bias``
    (unchanged without an adaptation)."""
    warm = sg_state.warmup
    if warm is None or warm.step is None:
        return sg_state
    step_size = warm.step.step_size  # one per chain
    step = warm.step._replace(bias_share=jnp.broadcast_to(
        jnp.asarray(value, jnp.result_type(step_size)), jnp.shape(step_size)))
    return sg_state._replace(warmup=warm._replace(step=step))


def start(sg_state, curvature, num_chains=None):
    """``(sg_state, children)`` at the chains' start: every decentred child counted (at
    :math:`F = 0`), one count per chain (``num_chains`` vectorised ones), and the share set
    from it; :data:`FIXED_SHARE` and no count without decentred sites."""
    if not curvature:
        return with_share(sg_state, FIXED_SHARE), None
    count = sum(jnp.size(f) for f in curvature.values()) // (num_chains or 1)
    children = jnp.full((num_chains,) if num_chains else (), count,
                        jnp.result_type(*curvature.values()))
    return with_share(sg_state, share(children)), children


def learnt(sg_state, children, rate, params, curvature):
    """``(sg_state, children)`` after a warm-up step: the count averaged with its value at
    ``params`` and ``curvature`` (weight ``rate``), the share set from it."""
    children = (1 - rate) * children + rate * weakly_informed(params, curvature)
    return with_share(sg_state, share(children)), children


def full_step(kernel, sites):
    """The SG ``kernel``'s ``site_scale`` rule ``(i, warmup_state) -> {site: factor}``: after
    warm-up, ``1 / bias_share`` on ``sites`` (those outside every Gibbs site's Markov
    blanket), 1 before (module docstring). ``None`` where there are none, where the step is not
    adapted, or where the kernel's metric is not constant or carries a Γ correction (the
    scaled metric's drift would differ)."""
    sampler = kernel.algorithm.sampler
    if (not sites or not kernel.adapts_step_size or sampler.correction is not None
            or trait(sampler.metric, Constant) is None):
        return None

    def rule(i, warm):
        if warm is None or warm.step.bias_share is None:
            return None
        factor = jnp.where(i >= warm.num_warmup, 1.0 / warm.step.bias_share, 1.0)
        return {site: factor for site in sites}

    return rule


def bias_hint(adapts_step_size):
    """The verdict's note within Gibbs: what its prediction of the Gibbs sites' shift does
    not see, and how to check it."""
    smaller = "half the target_bias" if adapts_step_size else "half the step_size"
    share_note = (" (the step aims at a share of target_bias that shrinks as the children "
                  "the data say little about grow in number: mcmc.last_state.bias_share)"
                  if adapts_step_size else "")
    return ("Within Gibbs the Gibbs sites are drawn given the SG sites, so they read the "
            "step's bias in their children's spread, amplified by their own correlation time; "
            "the verdict predicts each Gibbs site's shift from its children's equipartition "
            f"readings and names one beyond {MEAN_ERROR} of its sd, but it does not see every "
            "path by which the step moves them, it reads the draws given the children alone "
            "(the non-centred draws of interweave_every also move the scales), and it can "
            f"overstate SGHMC's{share_note} "
            f"(docs/gibbs.md); to check a Gibbs site's mean, compare a run at {smaller}.")
