"""The rows of ``sgrld compare``'s table: one run against the reference.

:func:`summary_row` reduces a run's per-parameter comparison
(:func:`~numpyro_sgrld.analysis.diagnostics.compare_to_reference`) to one row: the worst errors with
their Monte Carlo errors, the energy distance to the reference with its Monte Carlo error
(:func:`energy_distance_with_error`), the squared KSD with its Monte Carlo error
(:func:`ksd_with_error`), ESS, R-hat, whether it converged, whether it is accurate and how
many parameters miss the accuracy promise beyond the Monte Carlo noise
(:func:`outside_promise`). :func:`worst_parameters` names the parameters farthest off, for the
plots.
"""

import numpy as np

from numpyro_sgrld.analysis import arviz_io as _arviz
from numpyro_sgrld.analysis import diagnostics, distances
from numpyro_sgrld.app.report import (
    ACCURATE_MEAN,
    ACCURATE_SD,
    PROMISE_Z,
    equipartition_reading,
)
from numpyro_sgrld.data.subsample import full_batch
from numpyro_sgrld.verdict.judge import MAX_RHAT, MIN_ESS

__all__ = ["energy_distance_with_error", "ksd_with_error", "summary_row", "reference_row",
           "outside_promise", "worst_parameters"]

#: Contiguous blocks of draws per sample for the energy distance's jackknife.
ENERGY_BLOCKS = 20


def pooled(draws, max_draws=2000):
    """Draws ``{site: (n, ...)}`` as one (n, d) array (at most ``max_draws``, evenly spaced)."""
    x = np.concatenate([v.reshape(len(v), -1) for v in draws.values()], axis=1)
    idx = np.linspace(0, len(x) - 1, min(len(x), max_draws)).astype(int)
    return x[idx]


def latent_only(idata, model, args):
    """Posterior dict of the latent sites only (no deterministic ones), draws pooled."""
    chains = diagnostics.as_chains(idata)
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in chains.items()}
    latent = diagnostics.latent_sites(full_batch(model), flat, *args)
    return {k: flat[k] for k in latent}


def _block_edges(n, blocks):
    """Edges of at most ``blocks`` contiguous blocks of ``n`` draws, at least 2 draws each."""
    return np.linspace(0, n, max(1, min(blocks, n // 2)) + 1).round().astype(int)


def _block_sums(a, b, edges_a, edges_b):
    r"""The sums of :math:`\|a_i - b_j\|` over each pair of blocks, an (A, B) array (in chunks
    of rows, as :func:`~numpyro_sgrld.analysis.diagnostics.energy_distance`)."""
    out = np.zeros((len(edges_a) - 1, len(edges_b) - 1))
    block_of = np.repeat(np.arange(len(edges_a) - 1), np.diff(edges_a))
    chunk = distances.chunk_rows(b)
    for i in range(0, len(a), chunk):
        d = np.sqrt(distances.squared_distances(a[i : i + chunk], b))
        np.add.at(out, block_of[i : i + chunk], np.add.reduceat(d, edges_b[:-1], axis=1))
    return out


def energy_distance_with_error(x, y, blocks=ENERGY_BLOCKS):
    r"""``(estimate, standard error)``: :func:`~numpyro_sgrld.analysis.diagnostics.energy_distance`
    between the draws ``x`` (n, d) and ``y`` (m, d), and its Monte Carlo error.

    The estimate is unbiased for independent draws, so it comes out negative now and then
    where the laws agree. Its error is the delete-a-block jackknife's: each sample is cut into
    ``blocks`` contiguous blocks (consecutive draws, so that a chain's autocorrelation stays
    inside a block, as in batch means), the estimate is recomputed with each block left out,
    and the two samples' jackknife variances :math:`\frac{B-1}B\sum_b (\hat{\mathcal E}_{-b}
    - \bar{\mathcal E})^2` are added. For independent blocks the jackknife variance is
    conservative in expectation (Efron & Stein 1981), and it follows the estimate's spread
    whether the laws differ (spread of order :math:`n^{-1/2}`) or agree (of order
    :math:`n^{-1}`). Every left-out estimate comes from the block sums of the three distance
    matrices, so the error costs about as much as the estimate. The error is ``nan`` for fewer
    than 4 draws in a sample."""
    x, y = (np.asarray(a, np.float64) for a in (x, y))
    x, y = (a[:, None] if a.ndim == 1 else a.reshape(len(a), -1) for a in (x, y))
    value = diagnostics.energy_distance(x, y)  # checks the shapes
    ex, ey = _block_edges(len(x), blocks), _block_edges(len(y), blocks)
    sxy, sxx, syy = (_block_sums(x, y, ex, ey), _block_sums(x, x, ex, ex),
                     _block_sums(y, y, ey, ey))
    nx, ny = np.diff(ex), np.diff(ey)

    def estimate(kx, ky):
        n, m = nx[kx].sum(), ny[ky].sum()
        return (2 * sxy[np.ix_(kx, ky)].sum() / (n * m)
                - sxx[np.ix_(kx, kx)].sum() / (n * (n - 1))
                - syy[np.ix_(ky, ky)].sum() / (m * (m - 1)))

    all_x, all_y = np.ones(len(nx), bool), np.ones(len(ny), bool)
    if len(nx) < 2 or len(ny) < 2:
        return value, float("nan")
    var = 0.0
    for left_out in ([estimate(all_x & (np.arange(len(nx)) != b), all_y) for b in range(len(nx))],
                     [estimate(all_x, all_y & (np.arange(len(ny)) != b)) for b in range(len(ny))]):
        left_out = np.asarray(left_out)
        var += (len(left_out) - 1) / len(left_out) * np.sum((left_out - left_out.mean()) ** 2)
    return value, float(np.sqrt(var))


def reference_noise(ref, problem):
    """The energy distance between the first and the second half of the reference's chains,
    with its Monte Carlo error: what two exact samples of this size are apart, the noise level
    against which the SG kernels' energy distances are read."""
    chains = diagnostics.as_chains(ref)
    half = next(iter(chains.values())).shape[0] // 2
    if half < 1:
        return float("nan"), float("nan")
    parts = []
    for sl in (slice(0, half), slice(half, None)):
        flat = {k: v[sl].reshape((-1,) + v.shape[2:]) for k, v in chains.items()}
        latent = diagnostics.latent_sites(full_batch(problem.model), flat, *problem.args)
        parts.append(pooled({k: flat[k] for k in latent}))  # as many draws as the SG rows
    return energy_distance_with_error(*parts)


def _evenly(draws, max_draws):
    n = len(next(iter(draws.values())))
    idx = np.linspace(0, n - 1, min(n, max_draws)).astype(int)
    return {k: v[idx] for k, v in draws.items()}


def ksd_scale(scores, reference, max_draws=1000):
    """The reference draws' sd per unconstrained coordinate: the length scale of
    :func:`ksd_with_error`'s kernel, the same for every row of a table."""
    x, _ = scores(_evenly(reference, max_draws))
    return np.asarray(x, np.float64).reshape(len(x), -1).std(0)


def ksd_with_error(scores, draws, max_draws=1000, blocks=ENERGY_BLOCKS, c=1.0, beta=-0.5,
                   scale=None):
    r"""``(estimate, standard error)``: the squared IMQ kernel Stein discrepancy of at most
    ``max_draws`` evenly spaced ``draws`` (``scores``: the problem's
    :func:`~numpyro_sgrld.analysis.diagnostics.score_function`) as a U-statistic,

    .. math:: \widehat{\mathrm{KSD}^2} = \frac1{n(n-1)}\sum_{i\ne j} k_0(x_i, x_j),

    with :math:`k_0` of :func:`~numpyro_sgrld.analysis.diagnostics.kernel_stein_discrepancy`. Its
    expectation is 0 for independent draws from the posterior, whatever their number, and
    positive for draws from another law. The V-statistic's diagonal, :math:`k_0(x, x) \approx
    \|\nabla\log p(x)\|^2 c^{2\beta}`, is smaller for draws nearer the mode, so it reads
    too-narrow draws as closer than exact ones; the U-statistic leaves it out. Its error is
    the delete-a-block jackknife's, as for :func:`energy_distance_with_error`. With ``scale``
    (per coordinate, :func:`ksd_scale`) the discrepancy is that of the standardised
    coordinates :math:`x/\sigma` (scores :math:`\sigma\,\nabla\log p`): the kernel's width
    ``c`` then spans about one posterior sd in every coordinate, where a width fixed in the
    model's units would be flat over a posterior much narrower than it."""
    x, s = (np.asarray(a, np.float64) for a in scores(_evenly(draws, max_draws)))
    x, s = (a[:, None] if a.ndim == 1 else a for a in (x, s))
    if scale is not None:
        scale = np.asarray(scale, np.float64)
        x, s = x / scale, s * scale
    n = len(x)
    k0 = distances.imq_stein_kernel(float(c), float(beta))
    edges = _block_edges(n, blocks)
    block_of = np.repeat(np.arange(len(edges) - 1), np.diff(edges))
    sums = np.zeros((len(edges) - 1, len(edges) - 1))
    diagonal = np.zeros(len(edges) - 1)
    chunk = distances.chunk_rows(x)
    for i in range(0, n, chunk):
        m = k0(x[i : i + chunk], s[i : i + chunk], x, s)
        np.add.at(sums, block_of[i : i + chunk], np.add.reduceat(m, edges[:-1], axis=1))
        rows = np.arange(len(m))
        np.add.at(diagonal, block_of[i : i + chunk], m[rows, i + rows])
    sizes = np.diff(edges)

    def estimate(keep):
        k = sizes[keep].sum()
        return (sums[np.ix_(keep, keep)].sum() - diagonal[keep].sum()) / (k * (k - 1))

    everything = np.ones(len(sizes), bool)
    value = float(estimate(everything))
    if len(sizes) < 2:
        return value, float("nan")
    left_out = np.asarray([estimate(everything & (np.arange(len(sizes)) != b))
                           for b in range(len(sizes))])
    var = (len(left_out) - 1) / len(left_out) * np.sum((left_out - left_out.mean()) ** 2)
    return value, float(np.sqrt(var))


def _step_used(stats):
    """The step size of a run: the chains' geometric mean of the recorded (after warm-up:
    the adapted and frozen, or the given) step."""
    h = np.asarray(stats["step_size"], np.float64)
    return float(np.exp(np.mean(np.log(h))))


def _convergence(rhat, ess):
    """``"yes"``, or ``"NO: ..."`` with what is off (R-hat, ESS, or draws that are not
    finite numbers)."""
    if not np.isfinite(ess):
        return "NO: no finite draws"
    problems = []
    if np.isfinite(rhat) and rhat > MAX_RHAT:
        problems.append(f"R-hat {rhat:.3f}")
    if ess < MIN_ESS:
        problems.append(f"ESS {ess:.0f}")
    return "yes" if not problems else "NO: " + ", ".join(problems)


def outside_promise(table, z=PROMISE_Z):
    """Per parameter of ``table``
    (:func:`~numpyro_sgrld.analysis.diagnostics.compare_to_reference`):
    whether it misses the accuracy promise beyond the Monte Carlo noise, that is its absolute
    standardised mean error exceeds :data:`ACCURATE_MEAN`, or its sd ratio lies outside
    :data:`ACCURATE_SD`, by more than ``z`` of that number's standard errors. A parameter within
    the promise is never outside it, so a row whose every parameter is within the promise
    (``accurate`` yes) counts none; a difference from the reference that is resolved but small
    (``resolved`` in the table) is not counted."""
    mean_se = table["std_mean_error_se"]
    ratio_se = np.hypot(table["mcse_sd"], table["ref_mcse_sd"]) / table["ref_sd"]
    mean_off = table["std_mean_error"].abs() - ACCURATE_MEAN > z * mean_se
    sd_off = ((table["sd_ratio"] - ACCURATE_SD[1] > z * ratio_se)
              | (ACCURATE_SD[0] - table["sd_ratio"] > z * ratio_se))
    return (mean_off | sd_off).rename("outside_promise")


def summary_row(table, idata, seconds, energy, ksd, step_units=""):
    """A run's row: ``table`` its :func:`~numpyro_sgrld.analysis.diagnostics.compare_to_reference`,
    ``energy`` its energy distance to the reference and ``ksd`` its squared KSD
    (:func:`ksd_with_error`), each with its Monte Carlo error; ``step_units`` what its step size
    measures (:func:`~numpyro_sgrld.app._tables.step_units`)."""
    stats = _arviz.dataset(idata, "sample_stats")
    diverging = int(np.asarray(stats["diverging"]).sum()) if "diverging" in stats else 0
    err = table["std_mean_error"].abs()
    worst = err.idxmax() if err.notna().any() else table.index[0]
    off = (table["sd_ratio"] - 1).abs()
    off = off.idxmax() if off.notna().any() else table.index[0]
    rhat, ess = float(table["r_hat"].max()), float(table["ess_bulk"].min())
    return {
        "step size": _step_used(stats) if "step_size" in stats else float("nan"),
        "step units": step_units if "step_size" in stats else "—",
        "max abs mean err/sd": float(abs(table.loc[worst, "std_mean_error"])),
        "± se": float(table.loc[worst, "std_mean_error_se"]),
        "worst sd ratio": float(table.loc[off, "sd_ratio"]),
        "± se (sd)": float(
            np.hypot(table.loc[off, "mcse_sd"], table.loc[off, "ref_mcse_sd"])
            / table.loc[off, "ref_sd"]
        ),
        "outside promise beyond noise": (f"{int(outside_promise(table).sum())}/{len(table)}"
                                         if np.isfinite(ess) else "—"),
        "mean W1/sd": float(table["w1_sd"].mean()),
        "energy dist": float(energy[0]),
        "± se (energy)": float(energy[1]),
        "KSD²": float(ksd[0]),
        "± se (KSD²)": float(ksd[1]),
        "min ESS": ess,
        "max R-hat": rhat,
        "equipartition T": equipartition_reading(idata),
        "converged": _convergence(rhat, ess),
        "accurate": accurate(table),
        "diverging": diverging,
        "seconds": seconds,
    }


def accurate(table):
    """``"yes"`` when the worst standardised mean error is at most :data:`ACCURATE_MEAN` and
    every sd ratio inside :data:`ACCURATE_SD`; else what is off."""
    err = float(table["std_mean_error"].abs().max())
    lo, hi = float(table["sd_ratio"].min()), float(table["sd_ratio"].max())
    if not np.isfinite([err, lo, hi]).all():
        return "NO: no finite draws"
    off = []
    if not err <= ACCURATE_MEAN:
        off.append(f"mean error {err:.2f} sd")
    if not (ACCURATE_SD[0] <= lo and hi <= ACCURATE_SD[1]):
        off.append(f"sd ratios {lo:.2f}–{hi:.2f}")
    return "yes" if not off else "NO: " + ", ".join(off)


def reference_row(ref, seconds, energy, ksd, step_units=""):
    """The reference's row of the table: its own errors (zero by construction) left blank;
    ``energy`` its :func:`reference_noise`."""
    ref_row = summary_row(diagnostics.compare_to_reference(ref, ref), ref, seconds, energy,
                          ksd, step_units)
    for key in ("max abs mean err/sd", "± se", "worst sd ratio", "± se (sd)", "mean W1/sd"):
        ref_row[key] = float("nan")
    ref_row["outside promise beyond noise"] = "—"
    ref_row["accurate"] = "—"
    return ref_row


def worst_parameters(tables, n):
    """The ``n`` parameters whose sd ratio or mean error is farthest off over all rows of
    ``tables`` (``{name: compare_to_reference table}``; one table: that run's own worst)."""
    import pandas as pd

    score = pd.concat([(t["sd_ratio"] - 1).abs() + t["std_mean_error"].abs()
                       for t in tables.values()], axis=1).max(axis=1)
    return list(score.sort_values(ascending=False, na_position="last").index[:n])
