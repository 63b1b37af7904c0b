r"""The equipartition check: does the chain sample the posterior's spread?

For any smooth density :math:`p \propto e^{-U}` on :math:`\mathbb R^d` that decays at infinity,
integration by parts gives, for every coordinate :math:`i` and every constant :math:`c_i`,

.. math::
    \mathbb E_p\big[(\theta_i - c_i)\,\partial_i U(\theta)\big] = 1

(the generalised equipartition theorem; Tolman 1918; its average over coordinates is the
*configurational temperature* that Leimkuhler and co-workers, and Wenzel et al. 2020 for
Bayesian networks, use to check sampling). A chain at temperature :math:`T` targets
:math:`p^{1/T}` and reads :math:`T`. A chain whose law is wider or narrower than the posterior
reads more or less than 1: for a Gaussian posterior whose chain covariance is
:math:`\Sigma + \Delta` the reading of coordinate :math:`i` is :math:`1 + (\Sigma^{-1}\Delta)_{ii}`,
so a variance inflated by a factor :math:`k` in every direction reads :math:`k`, the square of the
sd ratio, and an inflation along one direction reads it in proportion to that direction's share
of the coordinate. It sees inflation and shrinkage alike, whatever their cause (a step too
large, an adaptive metric without its Γ term, a thermostat, a chain not yet at equilibrium in
some directions), and it does not care which mode a chain is in.

It costs no gradient: the step already evaluates the minibatch gradient
:math:`\nabla\hat U` at the chain's position, and because the minibatch is drawn independently
of that position, :math:`\mathbb E[(\theta_i - c_i)\,\partial_i\hat U(\theta)\mid\theta] =
(\theta_i - c_i)\,\partial_i U(\theta)`: the estimate is unbiased under the chain's law whatever
the gradient noise (control variates and SVRG included).

Every step after warm-up adds :math:`(\theta - c)\odot\nabla\hat U` (summed per *group*:
every coordinate on its own when the position has at most :data:`PER_COORDINATE` coordinates,
else every latent leaf, i.e. every site and every layer of a network) to the current batch of
:class:`Equipartition`, and :math:`\theta - c` and :math:`\nabla\hat U` to running totals. The
centre :math:`c` is the first position after warm-up, a constant; at the end the reading is
centred on the run's own mean :math:`\hat m` by the exact identity

.. math::
    \sum_t (\theta_t - \hat m)\,\hat g_t = \sum_t (\theta_t - c)\,\hat g_t
    - (\hat m - c)\sum_t \hat g_t,

so a chain is judged about the mean of the region it sampled (in the mode it is in), and the
estimate's only bias is that of a covariance with an estimated mean, a relative
:math:`1/\mathrm{ESS}` of the chain (a centre that follows the chain as it goes would read low
by the chain's correlation time over the time since the centre was set). The verdict removes
it (:func:`decentred`) by the spread of the chains' means (:func:`centring_factor`): small for
chains of hundreds of effective draws, 10 % for many chains of ten. The batches start
:data:`FIRST_LENGTH` steps long; when all :data:`BATCHES` are full, neighbours merge and the
length doubles, so a run of any length ends with between :data:`BATCHES`/2 and
:data:`BATCHES` contiguous batches, whose spread gives the Monte Carlo error (batch means;
Flegal & Jones 2010). A batch's share of the centring term is taken in proportion to its
steps, so the batches' spread still holds the centre's own noise,
:math:`(\hat m - c)^2\operatorname{Var}\hat g`: the error is conservative, by up to
:math:`\sqrt 2` where the gradient noise dominates (the centre is one posterior draw). It
works with one chain; chains'
batches pool.

:func:`summarize` turns the accumulators into :class:`Temperatures`, and
:func:`departures` names the groups whose reading is outside :data:`BAND` beyond its noise.
"""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.stats import t as student_t

__all__ = ["BAND", "BATCHES", "FAMILY_ERROR", "FIRST_LENGTH", "MIN_BATCH_ESS",
           "PER_COORDINATE", "Equipartition", "Temperatures", "centring_factor", "critical_z",
           "decentred", "departure_z", "departures", "group_names", "group_sizes", "init",
           "observe", "summarize", "update"]

#: The effective draws a chain's batch must hold for that chain's own reading to be judged:
#: with fewer, batch means understate the error (Flegal & Jones 2010). Over replicated right
#: chains of 4 (``tests/test_equipartition.py``), chains' own readings from batches of about 3
#: effective draws each flagged 2 % of the runs, twice :data:`FAMILY_ERROR`.
MIN_BATCH_ESS = 5

#: The batches of a run's steps (even: neighbours merge in pairs).
BATCHES = 16

#: The steps in each batch at the start of a run.
FIRST_LENGTH = 16

#: A position of at most this many coordinates is judged coordinate by coordinate; a larger one
#: by latent leaf (site, network layer).
PER_COORDINATE = 128

#: The readings a trusted run may have: the project's accuracy promise is every posterior sd
#: within 15 % (sd ratios in [0.87, 1.15]), and a variance inflated by :math:`k` reads
#: :math:`k`, so the band is :math:`[0.87^2, 1.15^2]`.
BAND = (0.87**2, 1.15**2)

#: The chance, over all groups of a run, that a chain sampling the posterior exactly has a
#: reading outside :data:`BAND` flagged by noise alone is at most this (Bonferroni).
FAMILY_ERROR = 0.01


class Equipartition(NamedTuple):
    r"""One chain's running equipartition sums.

    - **start** – the first step counted (the sampling phase's first).
    - **centre** – :math:`c`: the first counted position (a tree like the position).
    - **shift**, **gradient** – the sums of :math:`\theta - c` and of
      :math:`\nabla\hat U` over the counted steps (trees like the position);
      **count** – counted steps.
    - **sums** – ``(BATCHES, K + 1)``: per batch and group, :math:`\sum (\theta_i - c_i)
      \partial_i\hat U`, and in the last column the steps counted in the batch.
    - **row** – the current batch; **filled** – steps in it so far; **length** – steps per
      batch.
    """

    start: Any
    centre: Any
    shift: Any
    gradient: Any
    count: Any
    sums: Any
    row: Any
    filled: Any
    length: Any


class Temperatures(NamedTuple):
    """The run's readings (all chains pooled), each with its Monte Carlo error.

    - **names** – one per group: ``"site[j]"`` per coordinate, ``"site"`` per leaf.
    - **estimate**, **se** – ``(K,)`` arrays.
    - **overall**, **overall_se** – the average over all coordinates.
    - **steps** – the steps counted over all chains; **batches** – the batches (all chains)
      the errors come from.
    - **chains** – with several chains, each chain's own :class:`Temperatures` (a chain
      whose law differs from the others', e.g. one that adapted a larger step, is judged on
      its own too).
    """

    names: tuple
    estimate: Any
    se: Any
    overall: float
    overall_se: float
    steps: int
    batches: int = 0
    chains: tuple = ()


def _leaf_names(tree):
    paths = jax.tree_util.tree_flatten_with_path(tree)[0]
    return ["/".join(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k))))
                     for k in path) or "z" for path, _ in paths]


def per_coordinate(z):
    """Whether a position like ``z`` is judged coordinate by coordinate."""
    return sum(int(np.size(x)) for x in jax.tree.leaves(z)) <= PER_COORDINATE


def group_names(z):
    """The names of the groups of a position like ``z`` (one chain's)."""
    names = _leaf_names(z)
    if per_coordinate(z):
        return tuple(f"{n}[{j}]" if np.size(x) > 1 or np.ndim(x) else n
                     for n, x in zip(names, jax.tree.leaves(z)) for j in range(int(np.size(x))))
    return tuple(names)


def group_sizes(z):
    """The coordinates in each group of a position like ``z``."""
    if per_coordinate(z):
        return np.ones(sum(int(np.size(x)) for x in jax.tree.leaves(z)))
    return np.asarray([int(np.size(x)) for x in jax.tree.leaves(z)], np.float64)


def init(z, start):
    """Empty sums for a chain at ``z`` whose sampling phase starts at step ``start``."""
    k = len(group_names(z))
    leaves = jax.tree.leaves(z)
    dtype = jnp.result_type(*leaves) if leaves else jnp.float32
    zeros = jax.tree.map(jnp.zeros_like, z)
    table = jnp.zeros((BATCHES, k + 1), dtype)
    return Equipartition(
        start=jnp.asarray(start, jnp.int32), centre=z, shift=zeros, gradient=zeros,
        count=jnp.zeros((), jnp.int32), sums=table, row=jnp.zeros((), jnp.int32),
        filled=jnp.zeros((), jnp.int32), length=jnp.asarray(FIRST_LENGTH, jnp.int32))


def _group(parts, coordinates):
    """``(K,)`` group sums of per-coordinate ``parts`` (a list of leaves)."""
    if coordinates:
        return jnp.concatenate([jnp.ravel(p) for p in parts])
    return jnp.stack([jnp.sum(p) for p in parts])


def update(acc, position, grad, ok, i):
    r"""``(sums, products)``: the sums after step ``i`` evaluated :math:`\nabla\hat U`
    (``grad``) at the chain's ``position``, and that step's ``(K,)`` products
    :math:`\sum_{i \in G}(\theta_i - c_i)\,\partial_i\hat U`; ``ok``: whether
    the step used them (a rejected start is not counted). Steps before ``acc.start`` leave the
    sums as they are; the first counted position becomes the centre."""
    counted = i >= acc.start
    w = counted & ok
    wf = w.astype(acc.sums.dtype)
    first = w & (acc.count == 0)
    centre = jax.tree.map(lambda x, c: jnp.where(first, x, c), position, acc.centre)
    diff = jax.tree.map(jnp.subtract, position, centre)
    coordinates = per_coordinate(position)
    step = _group(jax.tree.leaves(jax.tree.map(jnp.multiply, diff, grad)), coordinates)
    # the steps counted ride in the table's last column: one table, one update
    sums = acc.sums.at[acc.row].add(jnp.append(step, 1.0) * wf)
    shift = jax.tree.map(lambda s, d: s + d * wf, acc.shift, diff)
    gradient = jax.tree.map(lambda s, g: s + g * wf, acc.gradient, grad)
    filled = acc.filled + counted.astype(jnp.int32)
    boundary = filled == acc.length
    row = acc.row + boundary
    filled = jnp.where(boundary, 0, filled)
    full = row == BATCHES
    half = BATCHES // 2

    def merged(x):
        pairs = x[0::2] + x[1::2]
        return jnp.where(full, jnp.concatenate([pairs, jnp.zeros_like(pairs)]), x)

    new = Equipartition(acc.start, centre, shift, gradient, acc.count + w, merged(sums),
                        jnp.where(full, half, row),
                        filled, jnp.where(full, 2 * acc.length, acc.length))
    return new, step


def observe(acc, reading, info, temperature):
    r"""The reducer over each step's :class:`~numpyro_sgrld.core.algorithm.StepInfo`:
    ``(sums, reading)`` after the step ``info`` describes, ``reading`` being that step's
    :math:`\frac{1}{dT}\sum_i(\theta_i - c_i)\,\partial_i\hat U(\theta)` at the position it
    started from; unchanged without sums (``acc`` ``None``) or at temperature 0 (an
    exploration stage's descent)."""
    if acc is None or (isinstance(temperature, (int, float)) and temperature == 0):
        return acc, reading
    new, products = update(acc, info.start, info.estimate.grad, info.usable, info.i)
    size = sum(x.size for x in jax.tree.leaves(info.start))
    return new, jnp.sum(products) / (size * temperature)


def summarize(acc, temperature=1.0):
    """The :class:`Temperatures` of one or more chains' :class:`Equipartition` (arrays with a
    leading chain axis, or one chain's), for a kernel at ``temperature``; ``None`` where no
    step was counted."""
    one_chain = np.ndim(acc.count) == 0
    chains = [acc] if one_chain else [jax.tree.map(lambda x, c=c: np.asarray(x)[c], acc)
                                      for c in range(np.shape(acc.count)[0])]
    names = group_names(chains[0].centre)
    sizes = group_sizes(chains[0].centre) * float(temperature)
    parts = [_centred_rows(chain) for chain in chains]
    pooled = _readings(np.concatenate([r for r, _ in parts]),
                       np.concatenate([c for _, c in parts]), names, sizes)
    if pooled is None or one_chain:
        return pooled
    return pooled._replace(chains=tuple(_readings(r, c, names, sizes) for r, c in parts))


def _readings(rows, counts, names, sizes):
    """:class:`Temperatures` from centred batches ``rows`` ``(R, K)`` of ``counts`` steps."""
    keep = counts > 0
    if not keep.any():
        return None
    rows, counts = rows[keep], counts[keep]
    estimate, se = _ratio(rows, counts[:, None] * sizes)
    overall, overall_se = _ratio(rows.sum(1, keepdims=True), counts[:, None] * sizes.sum())
    return Temperatures(names, estimate, se, float(overall[0]), float(overall_se[0]),
                        int(counts.sum()), int(keep.sum()))


def _centred_rows(acc):
    r"""One chain's batches ``(BATCHES, K)`` centred on the chain's mean (see the module's
    identity; each batch takes its steps' share of the centring term), and their step
    counts."""
    table = np.asarray(acc.sums, np.float64)
    sums, counts = table[:, :-1], table[:, -1]
    n = max(float(np.asarray(acc.count)), 1.0)
    offset = [np.asarray(s, np.float64) / n for s in jax.tree.leaves(acc.shift)]
    terms = [o * np.asarray(g, np.float64) for o, g in zip(offset, jax.tree.leaves(acc.gradient))]
    if per_coordinate(acc.centre):
        total = np.concatenate([np.ravel(x) for x in terms]) if terms else np.zeros(0)
    else:
        total = np.asarray([np.sum(x) for x in terms])
    return sums - np.outer(counts / n, total), counts


def _ratio(numerators, denominators):
    """The ratio of sums over batches and its batch-means standard error (``nan`` with fewer
    than two batches)."""
    total = denominators.sum(0)
    ratio = numerators.sum(0) / total
    r = numerators.shape[0]
    if r < 2:
        return ratio, np.full_like(ratio, np.nan)
    resid = numerators - ratio * denominators
    se = np.sqrt(r / (r - 1) * np.sum(resid**2, 0)) / total
    return ratio, se


def critical_z(num_groups, batches=None):
    """The multiple of its standard error a reading must be from 1 to be flagged,
    ``num_groups`` readings judged at once (:data:`FAMILY_ERROR`, two-sided, Bonferroni):
    Student's t with one fewer degrees of freedom than the ``batches`` (the error's own
    uncertainty), the normal's with many."""
    df = np.inf if batches is None or batches < 2 else batches - 1
    return float(student_t.ppf(1 - FAMILY_ERROR / (2 * max(num_groups, 1)), df))


def centring_factor(chain_means, chain_variances):
    r"""Per coordinate, the factor that undoes the centring of each chain on its own mean,
    from the chains' means and variances about them (``(chains, K)`` each; at least two
    chains): a chain's reading about its own mean :math:`\hat m` counts
    :math:`1 - \operatorname{Var}(\hat m)/\sigma^2` of the true one (exactly for a Gaussian:
    :math:`\mathbb E[(\theta - \hat m)\,\partial U] = 1 - \operatorname{Var}(\hat m)\,
    \mathbb E[\partial^2 U]`), and its variance about its own mean the same share of
    :math:`\sigma^2`, so the factor is :math:`1 + \operatorname{Var}_c(\hat m_c) /
    \overline{s^2_c}`, the spread of the chains' means over their mean variance (the
    ratio behind :math:`\hat R`). It needs chains that sample one law: where the chains
    sit in different modes the spread of their means is not the centring's."""
    m = np.asarray(chain_means, np.float64)
    v = np.asarray(chain_variances, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return 1.0 + m.var(0, ddof=1) / v.mean(0)


def decentred(t, factor, ess_per_chain=None):
    r""":class:`Temperatures` ``t`` with the bias of centring each chain on its own mean
    removed: every reading (pooled and per chain) and its error times ``factor``
    (:func:`centring_factor`, or :math:`1/(1 - 1/\mathrm{ESS})` for one chain). Negligible
    for chains of a few hundred effective draws; for many short chains it is what keeps a
    law 40 % too wide from reading within the band. A chain's own reading is not judged
    (its errors become NaN) where ``ess_per_chain`` leaves fewer than
    :data:`MIN_BATCH_ESS` effective draws in each of its batches: batch means then
    understate the error (Flegal & Jones 2010)."""
    if t is None:
        return None
    f = float(factor) if factor is not None and np.isfinite(factor) and factor >= 1 else 1.0
    e = np.inf if ess_per_chain is None else float(ess_per_chain)

    def scaled(r, judged=True):
        if r is None:
            return None
        se, overall_se = np.asarray(r.se) * f, r.overall_se * f
        if not judged:
            se, overall_se = np.full_like(se, np.nan), float("nan")
        return r._replace(estimate=np.asarray(r.estimate) * f, se=se,
                          overall=r.overall * f, overall_se=overall_se)

    return scaled(t)._replace(chains=tuple(
        scaled(c, c is not None and e >= MIN_BATCH_ESS * max(c.batches, 1))
        for c in t.chains))


def departure_z(estimate, se):
    r"""How many standard errors readings ``estimate`` (errors ``se``) are from 1, judged on
    the scale of the sd ratio, whose error grows more slowly with a departure than the
    reading's.

    A chain whose law is wider than the posterior by a variance factor :math:`k` reads
    :math:`k`, the square of its sd ratio, and its products :math:`(\theta_i - m_i)\,
    \partial_i\hat U` grow with it: as :math:`k` where the curvature term dominates them, as
    :math:`\sqrt k` where the gradient noise does (:math:`(\theta_i - m_i)\,\varepsilon_i`).
    Their batch-means error ``se`` grows the same way, so the Wald statistic
    :math:`|\hat T - 1|/\mathrm{se}` tends to :math:`1/(\text{relative error})` however wide
    the law, and loses its power exactly where the departure is largest. On the sd-ratio scale
    :math:`\hat r = \sqrt{\hat T}`, the scale of the accuracy promise (:data:`BAND`), the
    delta method gives :math:`\operatorname{se}(\hat r) = \mathrm{se}/(2\sqrt{\hat T})`, and

    .. math::
        z = \max\Big(\frac{|\hat T - 1|}{\mathrm{se}},\;
        \frac{2\,(\hat T - \sqrt{\hat T})}{\mathrm{se}}\Big)

    grows as :math:`\sqrt k` where the noise dominates and tends to twice the Wald
    statistic's limit where the curvature does. The second term is the larger only above 1
    (the two differ by :math:`(\sqrt{\hat T} - 1)^2/\mathrm{se}`), so below 1 the Wald
    statistic is kept, and at 1 the two agree to first order: the critical value
    (:func:`critical_z`) holds the family error on right runs (``tests/test_equipartition.py``
    counts it over replicated right chains). The log scale, on which an error proportional to
    the reading is constant, is not used: it treats a noisy reading of a right chain (an
    error that grows as :math:`\sqrt k` of nothing, from gradient noise) as a departure. A
    reading whose error could not be estimated gives ``nan``."""
    estimate = np.asarray(estimate, np.float64)
    se = np.asarray(se, np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        wald = np.abs(estimate - 1.0) / se
        wide = estimate > 1.0
        root = np.sqrt(np.where(wide, estimate, 1.0))
        ratio = np.where(wide, 2.0 * (estimate - root) / se, 0.0)
        z = np.maximum(wald, ratio)
    return np.where(np.isfinite(se) & (se > 0), z, np.nan)


def departures(t):
    """``[(name, estimate, se)]``: the readings of :class:`Temperatures` ``t`` (the groups
    and the overall one, pooled over the chains and of each chain on its own) outside
    :data:`BAND` and more than :func:`critical_z` standard errors from 1 by
    :func:`departure_z` (Bonferroni over every reading judged), worst first. A reading whose
    error could not be estimated is not flagged."""
    sets = [(t, "")] + [(c, f" (chain {k})") for k, c in enumerate(t.chains) if c is not None]
    tests = len(sets) * (len(t.names) + 1)
    found = []
    for r, label in sets:
        names = [n + label for n in r.names] + ["all coordinates" + label]
        estimate = np.append(r.estimate, r.overall)
        se = np.append(r.se, r.overall_se)
        z = critical_z(tests, r.batches or None)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (estimate < BAND[0]) | (estimate > BAND[1])
            flagged = out & (departure_z(estimate, se) > z)
        found += [(names[k], float(estimate[k]), float(se[k])) for k in np.flatnonzero(flagged)]
    return sorted(found, key=lambda f: -abs(np.log(f[1])) if f[1] > 0 else -np.inf)
