"""Diagnostic plots, saved as PNG: marginals over the reference, bias against the step size,
and ArviZ trace and rank plots. Every function returns the matplotlib figure and, given
``path``, saves it there (and closes it)."""

import itertools

import numpy as np

from numpyro_sgrld.analysis import arviz_io as _arviz
from numpyro_sgrld.analysis.diagnostics import scalar_draws

__all__ = [
    "plot_marginals",
    "plot_bias_vs_step_size",
    "plot_trace",
    "plot_rank",
    "plot_dist_against_reference",
    "plot_rank_against_reference",
    "plot_reliability",
    "plot_errors",
    "plot_trace_rank",
    "plot_time_to_accuracy",
]


def pyplot():
    """``matplotlib.pyplot``, with the non-interactive Agg backend unless a notebook's
    inline one is set (the figures are written to files)."""
    import matplotlib

    if matplotlib.get_backend().lower() not in ("agg", "module://matplotlib_inline.backend_inline"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path, dpi=100):
    """Write ``fig`` to ``path`` and close it (kept open where ``path`` is ``None``);
    returns it."""
    if path is not None:
        fig.savefig(path, dpi=dpi, bbox_inches="tight")
        pyplot().close(fig)
    return fig


def _density(ax, x, grid, **kw):
    x = np.asarray(x, np.float64).ravel()
    x = x[np.isfinite(x)]
    if len(x) < 2 or np.std(x) == 0:
        ax.axvline(x.mean() if len(x) else 0.0, **kw)
        return
    ax.plot(grid, _kde(x, grid), **kw)


def plot_marginals(draws, reference, params=None, max_params=12, ncols=4, path=None):
    """Marginal densities (Gaussian KDE) of each sampler's draws over the reference's, one
    panel per scalar parameter, in the style of Rensmeyer & Niggemann's Figure 1: each sampler
    a colour and a line style of its own, named in the legend below the panels.

    ``draws``: ``{sampler name: draws}`` (anything
    :func:`~numpyro_sgrld.analysis.diagnostics.as_chains`
    accepts); ``reference``: draws. ``params``: labels such as ``"w[3]"`` (default: the first
    ``max_params`` of the reference).
    """
    plt = pyplot()
    ref = scalar_draws(reference, group_by_chain=not isinstance(reference, dict))
    runs = {
        name: scalar_draws(d, group_by_chain=not isinstance(d, dict)) for name, d in draws.items()
    }
    params = list(params) if params is not None else list(ref)[:max_params]
    nrows = max(1, -(-len(params) // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.4 * nrows), squeeze=False)
    for ax, label in zip(axes.ravel(), params):
        r = ref[label].ravel()
        lo, hi = np.percentile(r, [0.5, 99.5])
        pad = 0.5 * (hi - lo) + 1e-12
        grid = np.linspace(lo - pad, hi + pad, 200)
        ax.fill_between(grid, 0, _kde(r, grid), color="0.8", label="reference")
        for (name, run), color, style in zip(runs.items(), _colors(len(runs)),
                                               itertools.cycle(_STYLES)):
            if label in run:
                _density(ax, run[label], grid, label=name, lw=1.3, color=color, ls=style)
        ax.set_title(label, fontsize=9)
        ax.tick_params(labelsize=7)
    for row in axes:
        row[0].set_ylabel("density", fontsize=8)
    for ax in axes.ravel()[len(params) :]:
        ax.axis("off")
    legend = {}
    for ax in axes.ravel():
        for handle, text in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(text, handle)
    fig.tight_layout()
    fig.legend(legend.values(), legend.keys(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(len(legend), 4), fontsize=8, frameon=False, handlelength=3)
    return save_figure(fig, path)


#: Line styles, cycled: with the colours, they tell curves apart where they overlap.
_STYLES = ["-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3))]


def _colors(n):
    """``n`` distinct colours (tab10, then tab20's lighter ones)."""
    import matplotlib

    base = list(matplotlib.colormaps["tab10"].colors)
    extra = list(matplotlib.colormaps["tab20"].colors)[1::2]
    return (base + extra)[:n] if n <= 20 else [matplotlib.colormaps["hsv"](i / n)
                                               for i in range(n)]


def _kde(x, grid, refine=4, reach=5.0):
    r"""Gaussian kernel density of the draws ``x`` at the evenly spaced ``grid``, with Scott's
    bandwidth :math:`h = \hat\sigma n^{-1/5}` (as ``scipy.stats.gaussian_kde``): the draws
    binned linearly onto a grid ``refine`` times finer, then one discrete convolution with the
    kernel out to ``reach`` bandwidths (Wand 1994). Its error is far below a plot's line width
    while the bandwidth spans a few fine cells; below that the sum is taken directly."""
    x = np.asarray(x, np.float64).ravel()
    x = x[np.isfinite(x)]
    n = len(x)
    h = float(np.std(x, ddof=1)) * n ** (-0.2) if n > 1 else 0.0
    if not h > 0:
        return np.zeros_like(grid)
    step = (grid[-1] - grid[0]) / (len(grid) - 1) / refine if len(grid) > 1 else h
    if step > h / 2:
        z = (grid[:, None] - x[None, :]) / h
        return np.exp(-0.5 * z * z).sum(1) / (n * h * np.sqrt(2 * np.pi))
    pad = int(np.ceil(reach * h / step))
    lo = grid[0] - pad * step
    size = (len(grid) - 1) * refine + 2 * pad + 1
    pos = (x - lo) / step
    inside = (pos >= 0) & (pos < size - 1)
    j = np.floor(pos[inside]).astype(int)
    frac = pos[inside] - j
    counts = np.bincount(j, 1 - frac, size) + np.bincount(j + 1, frac, size)
    offsets = np.arange(-pad, pad + 1) * step / h
    kernel = np.exp(-0.5 * offsets**2) / (n * h * np.sqrt(2 * np.pi))
    return np.convolve(counts, kernel, mode="same")[pad : pad + len(grid) * refine : refine]


def plot_bias_vs_step_size(curves, column="max_abs_std_mean_error", path=None):
    """Log-log curves of a bias measure against the step size, one line per kernel, with
    error bars of ±2 standard errors where the table has ``column + "_se"`` (as
    :func:`~numpyro_sgrld.analysis.diagnostics.bias_vs_step_size` gives for its bias measures).
    ``worst_sd_ratio`` and ``mean_sd_ratio`` are shown as ``|sd ratio - 1|``.

    ``curves``: ``{kernel name: DataFrame}`` from
    :func:`~numpyro_sgrld.analysis.diagnostics.bias_vs_step_size` (or one DataFrame).
    """
    from matplotlib.ticker import LogLocator, NullFormatter

    plt = pyplot()
    if not isinstance(curves, dict):
        curves = {"": curves}
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for name, table in curves.items():
        values = table[column].to_numpy(np.float64)
        values = np.abs(values - 1.0 if column in _RATIOS else values)
        se = table.get(column + "_se")
        yerr = None if se is None else 2 * se.to_numpy(np.float64)
        ax.errorbar(
            table.index.values, values, yerr=yerr, fmt="o-", capsize=3, label=name or None
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    # label the measured step sizes only (a log axis labels minor ticks too, which overlap)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ticks = _spread(np.unique(np.concatenate([t.index.values for t in curves.values()])))
    if len(ticks) <= 8:
        ax.set_xticks(ticks, [f"{t:.2g}" for t in ticks], rotation=30 if len(ticks) > 4 else 0)
    else:
        ax.xaxis.set_major_locator(LogLocator(numticks=6))
    ax.set_xlabel("step size h")
    label = {"worst_sd_ratio": "|sd ratio - 1|, worst parameter",
             "mean_sd_ratio": "|mean sd ratio - 1|"}.get(column, column.replace("_", " "))
    ax.set_ylabel(label + ("  (±2 se)" if any(column + "_se" in t for t in curves.values())
                           else ""))
    if any(curves):
        ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


_RATIOS = ("worst_sd_ratio", "mean_sd_ratio")


def _spread(ticks, min_ratio=1.4):
    """The step sizes to label on a log axis: each at least ``min_ratio`` times the last one
    kept (close values, such as 2e-5 and 2.5e-5, would print over each other)."""
    kept = []
    for t in ticks:
        if not kept or t >= kept[-1] * min_ratio:
            kept.append(t)
    return np.asarray(kept)


def plot_trace(idata, var_names=None, path=None, **kwargs):
    """ArviZ's trace plot as one figure: ``az.plot_trace(compact=True)`` on ArviZ 0.x,
    ``az.plot_trace_dist`` (the same marginal-and-trace layout) on ArviZ 1.x."""
    az = _arviz.arviz()
    pyplot()
    if _arviz.is_datatree():
        plotted = az.plot_trace_dist(idata, var_names=var_names, backend="matplotlib", **kwargs)
    else:
        plotted = az.plot_trace(idata, var_names=var_names, compact=True, **kwargs)
    return save_figure(_arviz.figure_of(plotted), path)


def plot_rank(idata, var_names=None, path=None, **kwargs):
    """ArviZ's rank plot (``az.plot_rank``) as one figure: rank histograms per chain on ArviZ
    0.x, the fractional-rank ECDF difference per chain with its envelope on ArviZ 1.x. Needs
    two or more chains to say anything."""
    az = _arviz.arviz()
    pyplot()
    if _arviz.is_datatree():
        kwargs.setdefault("backend", "matplotlib")
    plotted = az.plot_rank(idata, var_names=var_names, **kwargs)
    return save_figure(_arviz.figure_of(plotted), path)


def _reference_dataset(idata, reference):
    from numpyro_sgrld.analysis.inference_data import REFERENCE_GROUP, add_reference

    if reference is not None:
        add_reference(idata, reference)
    if REFERENCE_GROUP not in _arviz.group_names(idata):
        raise ValueError(
            "No reference: pass `reference=` (draws of the exact posterior), or store one in "
            "the InferenceData with numpyro_sgrld.analysis.inference_data.add_reference."
        )
    return _arviz.dataset(idata, REFERENCE_GROUP)


def _names(idata, ref, var_names):
    names = [v for v in _arviz.dataset(idata, "posterior").data_vars if v in ref.data_vars]
    return names if var_names is None else [v for v in var_names if v in names]


def _dist(az, x, ax, **kwargs):
    """One marginal density on ``ax``: ``az.plot_dist`` on ArviZ 0.x; on ArviZ 1.x (whose
    ``plot_dist`` draws whole figures) ArviZ's KDE (``az.kde``) drawn as ``plot_dist`` does,
    a line, filled when ``fill_kwargs`` is given."""
    if not _arviz.is_datatree():
        az.plot_dist(x, ax=ax, **kwargs)
        return
    grid, density = az.kde(np.asarray(x, np.float64))[:2]
    fill = kwargs.pop("fill_kwargs", None)
    (line,) = ax.plot(grid, density, **kwargs)
    if fill is not None:
        ax.fill_between(grid, density, color=line.get_color(), **fill)


def plot_dist_against_reference(idata, reference=None, var_names=None, max_panels=12, path=None):
    """ArviZ's marginal density of the draws (all chains) over the reference's, one panel per
    scalar parameter (the first ``max_panels``): the reference filled in grey, the draws as a
    line (``az.plot_dist`` on ArviZ 0.x, ``az.kde`` on ArviZ 1.x). The reference comes from
    ``reference`` (stored into ``idata`` with
    :func:`~numpyro_sgrld.analysis.inference_data.add_reference`) or from ``idata``'s
    ``reference_posterior`` group."""
    az = _arviz.arviz()
    plt = pyplot()
    ref = _reference_dataset(idata, reference)
    names = _names(idata, ref, var_names)
    posterior = _arviz.dataset(idata, "posterior")
    post = scalar_draws({k: posterior[k].values for k in names}, group_by_chain=True)
    refs = scalar_draws({k: ref[k].values for k in names}, group_by_chain=True)
    labels = list(post)[:max_panels]
    ncols = min(4, len(labels))
    nrows = -(-len(labels) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 2.4 * nrows), squeeze=False)
    for ax, label in zip(axes.ravel(), labels):
        _dist(az, refs[label].ravel(), ax, color="0.55", fill_kwargs={"alpha": 0.4},
              label="reference")
        _dist(az, post[label].ravel(), ax, color="C0", label="draws")
        ax.set_title(label, fontsize=9)
        ax.set_yticks([])
        if ax.get_legend() is not None:
            ax.get_legend().remove()
    for ax in axes.ravel()[len(labels):]:
        ax.axis("off")
    handles, texts = axes.ravel()[0].get_legend_handles_labels()
    fig.legend(handles, texts, loc="lower center", ncol=2, fontsize=8)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return save_figure(fig, path)


def plot_rank_against_reference(idata, reference=None, var_names=None, path=None, **kwargs):
    """ArviZ's rank plot (``az.plot_rank``) of the sampler's chains *and* the reference's,
    ranked together: the reference's draws are thinned to the chains' length and shown as
    extra chains (the last ones). When the sampler draws from the reference's law, every
    chain's rank histogram is flat; a biased sampler's chains pile up at one end (a shifted
    mean) or at both ends or the middle (a wrong spread), and the reference's mirror them."""
    ref = _reference_dataset(idata, reference)
    names = _names(idata, ref, var_names)
    posterior = _arviz.dataset(idata, "posterior")
    draws = posterior.sizes["draw"]
    combined = {}
    for k in names:
        own = np.asarray(posterior[k].values)
        other = np.asarray(ref[k].values)
        step = max(other.shape[1] // draws, 1)
        other = other[:, ::step][:, :draws]
        if other.shape[1] < draws:
            own = own[:, : other.shape[1]]
        combined[k] = np.concatenate([own, other], axis=0)
    pyplot()
    if _arviz.is_datatree():
        kwargs.setdefault("backend", "matplotlib")
    plotted = _arviz.arviz().plot_rank(_arviz.from_dict(posterior=combined), var_names=names,
                                       **kwargs)
    fig = _arviz.figure_of(plotted)
    chains = posterior.sizes["chain"]
    fig.suptitle(
        f"chains 0-{chains - 1}: the sampler; {chains}-{chains + ref.sizes['chain'] - 1}: the "
        "reference",
        fontsize=11,
        y=1.04,
    )
    return save_figure(fig, path)


def plot_reliability(probs, labels, num_bins=10, ax=None, title=None, path=None):
    """Reliability diagram (Guo et al. 2017; Lange et al. 2023 Fig. 4.4): per confidence bin the
    accuracy (bars) against the identity (perfect calibration), the gap to it shaded, and the
    ECE and MCE in the legend. ``probs``: (points, classes) predictive probabilities."""
    from numpyro_sgrld.analysis.predictive import (
        calibration_bins,
        expected_calibration_error,
        maximum_calibration_error,
    )

    plt = pyplot()
    b = calibration_bins(probs, labels, num_bins)
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(4, 4))
    centres = (b.edges[:-1] + b.edges[1:]) / 2
    width = 1.0 / num_bins
    used = b.count > 0
    acc = np.where(used, b.accuracy, 0.0)
    ax.bar(centres, acc, width=width, edgecolor="k", color="tab:blue", label="accuracy")
    # the gap from each bin's accuracy to its mean confidence (what the ECE sums)
    ax.bar(centres[used], (b.confidence - acc)[used], bottom=acc[used], width=width,
           color="tab:red", alpha=0.35, edgecolor="tab:red", label="gap to the confidence")
    ax.plot([0, 1], [0, 1], "k--", lw=1)
    ece = expected_calibration_error(probs, labels, num_bins)
    mce = maximum_calibration_error(probs, labels, num_bins)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence")
    ax.set_ylabel("accuracy")
    ax.legend(title=f"ECE {100 * ece:.2f} %, MCE {100 * mce:.2f} %", fontsize=8,
              title_fontsize=8, loc="upper left")
    if title:
        ax.set_title(title, fontsize=10)
    return save_figure(fig if fig is not None else ax.figure, path)


def _farthest_off(tables, n):
    """The ``n`` parameters farthest off over every table (largest |mean error| + |sd ratio -
    1|), in the first table's order."""
    import pandas as pd

    score = pd.concat([(t["sd_ratio"] - 1).abs() + t["std_mean_error"].abs()
                       for t in tables.values()], axis=1).max(axis=1)
    kept = set(score.sort_values(ascending=False, na_position="last").index[:n])
    return [p for p in score.index if p in kept]


def _error_limits(ax, low, high, band, centre, share=0.6):
    """x limits from the data (``low``, ``high``: each dot's value -/+ 2 standard errors),
    widened where needed so that the accuracy ``band`` fills at most ``share`` of the axis."""
    low, high = (np.asarray(a, np.float64) for a in (low, high))
    low, high = low[np.isfinite(low)], high[np.isfinite(high)]
    lo = min(np.min(low, initial=centre), centre - (centre - band[0]) / share)
    hi = max(np.max(high, initial=centre), centre + (band[1] - centre) / share)
    pad = 0.04 * (hi - lo)
    ax.set_xlim(lo - pad, hi + pad)


def plot_errors(tables, mean_tol=0.15, sd_band=(0.87, 1.15), max_params=40, path=None):
    """Every parameter's error against the reference: the standardised mean error (left) and
    the sd ratio (right), one labelled row per parameter, in it each sampler a dot of its own
    colour (the legend names them) with its ±2 standard error bar; the accuracy band shaded.
    The x limits follow the data, widened where needed so that the band fills at most 60 % of
    the axis. At most ``max_params`` parameters, the farthest off over all samplers.
    ``tables``: ``{name: compare_to_reference table}`` (columns ``std_mean_error``,
    ``std_mean_error_se``, ``sd_ratio``, ``mcse_sd``, ``ref_mcse_sd``, ``ref_sd``)."""
    plt = pyplot()
    names = list(tables)
    params = _farthest_off(tables, max_params)
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.3 * len(params) + 1.6), sharey=True)
    offsets = (np.arange(len(names)) - (len(names) - 1) / 2) * 0.7 / max(len(names), 1)
    spans = [([], []), ([], [])]
    for name, offset, color in zip(names, offsets, _colors(len(names))):
        t = tables[name].reindex(params)
        sd_se = np.hypot(t["mcse_sd"], t["ref_mcse_sd"]) / t["ref_sd"]
        for k, (value, se) in enumerate(((t["std_mean_error"], t["std_mean_error_se"]),
                                         (t["sd_ratio"], sd_se))):
            value, se = np.asarray(value, np.float64), 2 * np.asarray(se, np.float64)
            axes[k].errorbar(value, np.arange(len(params)) + offset, xerr=se, fmt="o", ms=3,
                             lw=0.7, color=color, label=name)
            se = np.where(np.isfinite(se), se, 0.0)
            spans[k][0].append(value - se)
            spans[k][1].append(value + se)
    for ax, band, centre, (low, high) in zip(axes, ((-mean_tol, mean_tol), sd_band), (0, 1),
                                             spans):
        ax.axvspan(*band, color="0.9", zorder=0)
        ax.axvline(centre, color="k", lw=0.6)
        _error_limits(ax, np.concatenate(low), np.concatenate(high), band, centre)
        for row in range(len(params) - 1):
            ax.axhline(row + 0.5, color="0.85", lw=0.4)
        ax.tick_params(labelsize=8)
    axes[0].set_xlabel("(mean − reference mean) / reference sd", fontsize=9)
    axes[1].set_xlabel("sd / reference sd", fontsize=9)
    axes[0].set_yticks(range(len(params)), params, fontsize=7)
    axes[0].set_ylim(len(params) - 0.5, -0.5)
    total = len(next(iter(tables.values()))) if tables else 0
    which = (f"the {len(params)} of {total} parameters farthest off" if len(params) < total
             else "each parameter")
    fig.suptitle(f"Errors of {which}, one colour per sampler (±2 standard errors); "
                 "shaded: accurate", fontsize=9)
    fig.tight_layout()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(len(labels), 5), fontsize=8, frameon=False)
    return save_figure(fig, path)


def plot_trace_rank(draws, params=None, max_params=4, title=None, path=None):
    """Trace (left) and rank histogram per chain (right), one row per scalar parameter:
    ``params`` (labels such as ``"w[3]"``; default the first ``max_params``). The traces are
    thin and translucent, so that no chain hides the others; each rank histogram is drawn as
    its outline's top (the count per bin of ranks), against the flat count (dashed) that
    chains sampling the same law share."""
    plt = pyplot()
    chains = scalar_draws(draws, group_by_chain=not isinstance(draws, dict))
    params = list(params) if params is not None else list(chains)[:max_params]
    fig, axes = plt.subplots(len(params), 2, figsize=(9, 1.7 * len(params) + 0.5),
                             squeeze=False, gridspec_kw={"width_ratios": (3, 1)})
    for (ax_t, ax_r), label in zip(axes, params):
        x = np.asarray(chains[label], np.float64)
        x = x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)
        _trace_and_ranks(ax_t, ax_r, x)
        ax_t.set_ylabel(label, fontsize=8)
    axes[-1][0].set_xlabel("draw", fontsize=8)
    axes[-1][1].set_xlabel("rank (all chains)", fontsize=8)
    axes[0][0].set_title("trace, one colour per chain", fontsize=9)
    axes[0][1].set_title("draws per rank bin, per chain", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def _trace_and_ranks(ax_t, ax_r, x):
    """One parameter's chains ``x`` (chains, draws): their traces on ``ax_t``, their rank
    histograms (20 bins) on ``ax_r``."""
    ranks = np.argsort(np.argsort(x.ravel())).reshape(x.shape)
    bins = np.linspace(0, x.size, 21)
    alpha = min(0.8, max(0.25, 2.0 / x.shape[0]))
    for c, color in zip(range(x.shape[0]), _colors(x.shape[0])):
        ax_t.plot(x[c], lw=0.4, color=color, alpha=alpha)
        counts, _ = np.histogram(ranks[c], bins=bins)
        ax_r.stairs(counts, bins, baseline=None, color=color, lw=1.0)
    ax_r.axhline(x.shape[1] / 20, color="k", lw=0.6, ls="--")
    ax_r.set_ylim(bottom=0)
    ax_t.tick_params(labelsize=7)
    ax_r.tick_params(labelsize=7)


def plot_time_to_accuracy(results, path=None):
    """Seconds to the stated accuracy per method (horizontal bars); a method stopped at its
    time cap before reaching it is drawn hatched, labelled with the time it ran ("> t s")."""
    plt = pyplot()
    results = sorted(results, key=lambda r: (not r.reached, r.seconds_to_target))
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(results) + 1.2))
    for row, r in enumerate(results):
        ax.barh(row, r.seconds_to_target, color="C2" if r.reached else "0.85",
                hatch=None if r.reached else "//", edgecolor="k", lw=0.5)
        text = f"{r.seconds_to_target:.0f} s" if r.reached else \
            f"> {r.seconds_to_target:.0f} s (not reached)"
        ax.text(r.seconds_to_target, row, "  " + text, va="center", fontsize=8)
    ax.set_yticks(range(len(results)), [r.method for r in results], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("wall time to the stated accuracy (s), compilation and warm-up included",
                  fontsize=8)
    ax.set_xlim(0, 1.45 * max(r.seconds_to_target for r in results))
    ax.tick_params(labelsize=8)
    fig.tight_layout()
    return save_figure(fig, path)
