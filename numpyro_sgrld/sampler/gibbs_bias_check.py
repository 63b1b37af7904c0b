r"""The verdict's check of the Gibbs sites within :class:`~numpyro_sgrld.SGGibbs`: how far the
SG step's bias, read by a Gibbs site in its children's spread, moves the site's mean.

A Gibbs site :math:`\theta` drawn given its Gaussian children
:math:`w_j \sim \mathcal N(\mu_j, \sigma_j(\theta)^2)` reads their spread. Where the SG step
samples a child's decentred coordinate :math:`u_j = (w_j - \mu_j)/c_j`,
:math:`c_j = (\sigma_j^{-2} + F_j)^{-1/2}` (:mod:`~numpyro_sgrld.sampler.decentring`), with
:math:`1 + \varepsilon_j` times its posterior variance (:math:`\varepsilon_j` the child's
equipartition reading less 1, :mod:`numpyro_sgrld.core.equipartition`), the reading of
:math:`(w_j - \mu_j)^2/\sigma_j^2` grows by :math:`\varepsilon_j` times the child's
conditional variance over :math:`\sigma_j^2`, :math:`c_j^2/\sigma_j^2 = 1/(1 + \sigma_j^2
F_j)`: a pull on :math:`\log\sigma_j` whose integral over it is :math:`\varepsilon_j \log c_j`.
To first order (linear response: a law :math:`\pi e^{G}` has its means moved by
:math:`\mathrm{Cov}_\pi(\cdot, G)`) each unconstrained Gibbs coordinate moves by

.. math::

    \delta_k = \frac{\mathrm{Cov}(\theta_k, G)}{\mathrm{sd}(\theta_k)}, \qquad
    G(\theta) = \sum_j \varepsilon_j \log c_j(\theta)

of its sd. Where nothing but its prior and such children hold a scale, :math:`\delta` is
:math:`n \bar\varepsilon\,\mathrm{sd}(\log\tau)` (``n`` children the data leave free); where
the data pin a child, :math:`\log c_j` barely moves with :math:`\theta` and the child adds
nothing; where local scales share the children with a global one, the covariances take the
share each carries.

The run keeps, per chain and after warm-up, the Gibbs coordinates' sums and sums of squares,
and the sums of :math:`L_g = \sum_{j \in g}\log c_j` over each equipartition group ``g`` of
the decentred sites (a coordinate, or a whole site where the equipartition check reads sites)
and of their products with the Gibbs coordinates (:class:`GibbsMoments`, in the run monitor);
the verdict combines them with the groups' readings (:func:`problems`). A coordinate is named
where its predicted shift is beyond :data:`~numpyro_sgrld.verdict.judge.MEAN_ERROR` and beyond
its error (the readings' errors, at :func:`~numpyro_sgrld.core.equipartition.critical_z` over
the Gibbs coordinates), on chains that have mixed. The prediction is first order: on the
regressions of ``docs/gibbs.md`` it is 0.76-1.44 times the measured shift of the runs it
names (SGLD, SGHMC); at four times the default's step target SGHMC's overstates its shift
up to twice; and a random intercept of a few rows a group moves its scale with the
children's spread nearly right, by a path the prediction does not carry (``docs/gibbs.md``).
"""

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_sgrld.core import equipartition
from numpyro_sgrld.sampler import decentring, gibbs_kick, gibbs_start

__all__ = ["GibbsMoments", "arm", "coordinates", "group_names", "init", "kept",
           "log_spreads", "predicted_shifts", "problems", "update"]


class GibbsMoments(NamedTuple):
    """One chain's post-warm-up moments of the Gibbs coordinates ``theta`` (``(K,)``) and the
    decentred groups' summed log spreads ``L`` (``(J,)``), about the run's first values.

    - **count** – steps counted; **origin_theta**, **origin_spread** – the first values.
    - **theta**, **theta2** – sums of ``theta - origin`` and of its square.
    - **spread** – sums of ``L - origin``; **cross** – ``(K, J)`` sums of their products.
    """

    count: Any
    origin_theta: Any
    origin_spread: Any
    theta: Any
    theta2: Any
    spread: Any
    cross: Any


def group_names(z, decentred_sites):
    """The names of the equipartition groups of a position like ``z`` (one chain's SG
    sites) that hold the decentred sites, and their indices among all the groups."""
    names = equipartition.group_names(z)
    prefixes = tuple(s + decentring.SUFFIX for s in decentred_sites)
    index = [k for k, n in enumerate(names)
             if n in prefixes or n.split("[")[0] in prefixes]
    return tuple(names[k] for k in index), np.asarray(index, np.int64)


def log_spreads(z, params, curvature, index):
    r""":math:`L_g = \sum_{j\in g} \log c_j` for the groups at ``index``, with ``z`` one chain's
    position (its decentred sites' leaves take :math:`\log c`, the others 0), ``params``
    ``{site: (loc, scale)}`` and ``curvature`` ``{site: F}``."""
    logs = {s + decentring.SUFFIX: jnp.log(decentring.spread(scale, curvature[s]))
            for s, (_, scale) in params.items()}
    leaves = [jnp.broadcast_to(logs[k], jnp.shape(v)) if k in logs else jnp.zeros_like(v)
              for k, v in sorted(z.items())]
    if equipartition.per_coordinate(z):
        flat = jnp.concatenate([jnp.ravel(x) for x in leaves])
    else:
        flat = jnp.stack([jnp.sum(x) for x in leaves])
    return flat[index]


def init(num_gibbs, num_groups, dtype=jnp.float32):
    """Empty moments for ``num_gibbs`` Gibbs coordinates and ``num_groups`` groups."""
    k, j = jnp.zeros((num_gibbs,), dtype), jnp.zeros((num_groups,), dtype)
    n = jnp.zeros((), jnp.int32)
    return GibbsMoments(n, k, j, k, k, j, jnp.zeros((num_gibbs, num_groups), dtype))


def update(m, theta, spread, offset):
    """The moments after a step at Gibbs coordinates ``theta`` and log spreads ``spread``;
    ``offset``: the step's index after warm-up (negative in warm-up: unchanged; 0 starts
    afresh)."""
    first = offset == 0
    m = jax.tree.map(lambda x: jnp.where(first, jnp.zeros_like(x), x), m)
    origin_theta = jnp.where(first, theta, m.origin_theta)
    origin_spread = jnp.where(first, spread, m.origin_spread)
    weight = (offset >= 0).astype(theta.dtype)
    t, s = (theta - origin_theta) * weight, (spread - origin_spread) * weight
    return GibbsMoments(m.count + (offset >= 0).astype(jnp.int32), origin_theta,
                        origin_spread, m.theta + t, m.theta2 + t * t, m.spread + s,
                        m.cross + t[:, None] * s[None, :])


def predicted_shifts(moments, readings, readings_se):
    r"""Per Gibbs coordinate, ``(shift, se)`` in its posterior sds (all chains pooled):
    :math:`\sum_g \varepsilon_g \mathrm{Cov}(\theta_k, L_g)/\mathrm{sd}(\theta_k)` with
    :math:`\varepsilon_g` = ``readings - 1`` and its error from ``readings_se``; ``moments``
    stacked over chains (leading axis) or one chain's."""
    m = jax.tree.map(lambda x: np.asarray(x, np.float64), moments)
    if m.count.ndim == 0:
        m = jax.tree.map(lambda x: x[None], m)
    n = m.count[:, None]
    total = float(m.count.sum())
    # raw sums about 0 from each chain's sums about its own origin
    theta = m.theta + n * m.origin_theta
    spread = m.spread + n * m.origin_spread
    theta2 = m.theta2 + 2 * m.origin_theta * m.theta + n * m.origin_theta ** 2
    cross = (m.cross + m.origin_theta[:, :, None] * m.spread[:, None, :]
             + m.theta[:, :, None] * m.origin_spread[:, None, :]
             + n[:, :, None] * m.origin_theta[:, :, None] * m.origin_spread[:, None, :])
    mean_t, mean_s = theta.sum(0) / total, spread.sum(0) / total
    var = theta2.sum(0) / total - mean_t ** 2
    cov = cross.sum(0) / total - mean_t[:, None] * mean_s[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        per_sd = np.where(var[:, None] > 0, cov / np.sqrt(var)[:, None], np.nan)
    eps = np.asarray(readings, np.float64) - 1.0
    se = np.nan_to_num(np.asarray(readings_se, np.float64))
    return per_sd @ eps, np.sqrt((per_sd ** 2) @ se ** 2)


def problems(moments, temperatures, groups, gibbs_names, run, bound):
    """The verdict's problem (a one-item list) where a Gibbs coordinate's predicted shift
    (:func:`predicted_shifts`) is beyond ``bound`` sds and beyond its error; ``[]`` where
    none is, where nothing was kept, or where a group of children reads at or below 0 (its
    reading is then no ratio of spreads to predict from: the chains are far from equilibrium
    there, as the equipartition check says). ``groups``: the decentred groups' names among the
    ``temperatures``' (:func:`group_names`); ``gibbs_names``: the Gibbs coordinates'
    ``(site, index)``; ``run``: the :class:`~numpyro_sgrld.verdict.run.Run`."""
    if moments is None or temperatures is None or not groups:
        return []
    at = {n: k for k, n in enumerate(temperatures.names)}
    if any(g not in at for g in groups):
        return []
    k = [at[g] for g in groups]
    estimate, se = np.asarray(temperatures.estimate)[k], np.asarray(temperatures.se)[k]
    if not np.all(estimate > 0):  # no spread ratio there: the chains are far from
        return []  # equilibrium, which the equipartition check names; no shift is predicted
    shift, error = predicted_shifts(moments, estimate, se)
    z = equipartition.critical_z(len(gibbs_names), temperatures.batches or None)
    beyond = [i for i in range(len(shift))
              if abs(shift[i]) > bound and abs(shift[i]) > z * error[i]]
    if not beyond:
        return []
    worst = max(beyond, key=lambda i: abs(shift[i]))
    name, j = gibbs_names[worst]
    ratio = bound / 2 / abs(shift[worst])
    widest = estimate[np.argmax(np.abs(estimate - 1))] - 1
    others = (f" ({len(beyond)} of the {len(gibbs_names)} Gibbs coordinates beyond "
              f"{bound} sd)" if len(beyond) > 1 else "")
    if run.adapts_step_size and run.target_bias is not None:
        fix = (f"Run again with target_bias={run.target_bias * ratio:.2g} (the shift falls "
               "about in proportion to it)")
    else:
        fix = (f"Run again with a step_size about {ratio:.2g} times this one (the shift "
               "falls about in proportion to it)")
    return [
        f"The Gibbs site {name!r}[{j}] (unconstrained) is predicted to sit {shift[worst]:+.2f}"
        f" ± {error[worst]:.2f} of its posterior sd off{others}: the SG step "
        f"{'widens' if widest > 0 else 'narrows'} its children's spread (by up to "
        f"{abs(widest):.1%}), and a Gibbs site reads that from every child on every sweep "
        f"(docs/gibbs.md). {fix}, and compare the Gibbs sites' means."]


def coordinates(gibbs, transforms):
    """The Gibbs sites' values unconstrained and flattened (``transforms``' order)."""
    return jnp.concatenate([jnp.ravel(t.inv(gibbs[k])) for k, t in transforms.items()])


def arm(sg_state, gibbs, transforms, decentred_sites, num_chains=None):
    """``(sg_state, index, check)``: the SG state with empty moments in its run monitor,
    the decentred groups' indices among the equipartition groups, and the verdict's check
    (:func:`problems` with the groups and the Gibbs coordinates named); the state as it is
    and ``None`` twice without a monitor or decentred sites. ``gibbs``: the Gibbs sites'
    values (with a leading axis of ``num_chains`` vectorised chains)."""
    monitor = sg_state.monitor
    if monitor is None or not decentred_sites:
        return sg_state, None, None
    one = (lambda x: x[0]) if num_chains else (lambda x: x)
    groups, index = group_names(jax.tree.map(one, sg_state.z), decentred_sites)
    first = jax.tree.map(one, gibbs)
    names = [(k, j) for k, t in transforms.items()
             for j in range(int(jnp.size(t.inv(first[k]))))]
    theta = coordinates(first, transforms)
    fresh = gibbs_start.repeated(init(theta.size, len(groups), theta.dtype), num_chains)
    check = partial(problems, groups=groups, gibbs_names=names)
    return sg_state._replace(monitor=monitor._replace(composed=fresh)), index, check


def kept(sg_state, gibbs, curvature, run_info, index, transforms, per_chain, vectorized,
         loc_scale):
    """``sg_state`` with its monitor's moments updated at the Gibbs sites' new values
    ``gibbs`` and the SG position (unchanged where :func:`arm` kept none): the step's index
    after warm-up as the run monitor counts it; ``loc_scale(position, gibbs, curvature)``, the
    decentred sites' ``{site: (loc, scale)}``; ``per_chain``, one chain's function over the
    chains."""
    monitor = sg_state.monitor
    if index is None or monitor is None or monitor.composed is None or run_info is None:
        return sg_state
    t = monitor.transitions[0] if vectorized else monitor.transitions
    offset = t - run_info.num_warmup
    offset = jnp.where(offset >= 0, offset % run_info.num_samples, -1)

    def one(sg, g, f):
        position = gibbs_kick.position(sg)
        spread = log_spreads(position, loc_scale(position, g, f), f, index)
        return update(sg.monitor.composed, coordinates(g, transforms), spread, offset)

    # a branch, not a select (the offset is the same for vectorised chains): no work in warm-up
    composed = jax.lax.cond(offset >= 0, lambda: per_chain(one)(sg_state, gibbs, curvature),
                            lambda: monitor.composed)
    return sg_state._replace(monitor=monitor._replace(composed=composed))
