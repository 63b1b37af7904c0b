r"""How far a sampler's draws are from the truth.

- :func:`compare_to_reference`: per scalar parameter, the standardised mean error, the sd ratio,
  the Wasserstein-1 distance of the marginals, and the ESS and R-hat of the chains.
- :func:`energy_distance`: a multivariate distance between two samples.
- :func:`kernel_stein_discrepancy` and :func:`model_scores`: a distance to the posterior that
  needs no reference draws, only the model's full-data score.
  (These two live in :mod:`numpyro_sgrld.analysis.distances`, re-exported here.)
- :func:`bias_vs_step_size`: the bias of a kernel over a grid of step sizes, each run to a
  target ESS, with standard errors; :func:`fit_bias_order` fits its order in h.
- :func:`histogram_l1`: L1 distance of a 1-D histogram to a density (Rensmeyer & Niggemann).

Plots are in :mod:`numpyro_sgrld.analysis.plots`.

Draws are accepted as an :class:`arviz.InferenceData` (its posterior), a finished
:class:`numpyro.infer.MCMC`, or a dict ``{site: array}`` whose arrays have one leading draw
dimension (one chain; pass ``group_by_chain=True`` for a leading ``(chains, draws)``).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from numpyro_sgrld.analysis import arviz_io as _arviz
from numpyro_sgrld.analysis.distances import energy_distance, histogram_l1, kernel_stein_discrepancy

__all__ = [
    "as_chains",
    "scalar_draws",
    "compare_to_reference",
    "fit_bias_order",
    "energy_distance",
    "kernel_stein_discrepancy",
    "model_scores",
    "score_function",
    "bias_vs_step_size",
    "histogram_l1",
    "latent_sites",
    "wasserstein1",
]


def as_chains(samples, group_by_chain=False):
    """``{site: numpy array (chains, draws, ...)}`` from InferenceData, an MCMC or a dict."""
    if hasattr(samples, "posterior"):
        post = _arviz.dataset(samples, "posterior")
        return {_arviz.site_name(k): np.asarray(post[k].values) for k in post.data_vars}
    if hasattr(samples, "get_samples"):
        return {k: np.asarray(v) for k, v in samples.get_samples(group_by_chain=True).items()}
    if not isinstance(samples, dict) or not samples:
        raise TypeError(
            "Draws must be an arviz.InferenceData, a numpyro MCMC or a non-empty dict of arrays, "
            f"got {type(samples).__name__}."
        )
    out = {k: np.asarray(v) for k, v in samples.items()}
    return out if group_by_chain else {k: v[None] for k, v in out.items()}


def _label(site, index, shape):
    if not shape:
        return site
    return f"{site}[{','.join(map(str, np.unravel_index(index, shape)))}]"


def scalar_draws(samples, sites=None, group_by_chain=False):
    """``{label: array (chains, draws)}`` for every scalar component of every site (labels
    ``"w[3]"``, ``"L[1,2]"``, ``"sigma"``)."""
    chains = as_chains(samples, group_by_chain)
    out = {}
    for site in sites if sites is not None else chains:
        if site not in chains:
            raise KeyError(f"Site '{site}' is not among the draws ({sorted(chains)}).")
        v = chains[site]
        shape = v.shape[2:]
        flat = v.reshape(v.shape[:2] + (-1,))
        for j in range(flat.shape[-1]):
            out[_label(site, j, shape)] = flat[..., j].astype(np.float64)
    return out


def _is_moments(reference):
    return isinstance(reference, dict) and all(
        isinstance(v, dict) and {"mean", "sd"} <= set(v) for v in reference.values()
    )


def _reference_moments(reference, sites):
    """``{label: (mean, sd, mcse_mean, mcse_sd)}`` of a moments reference; the Monte Carlo
    errors are the optional ``"mcse_mean"``/``"mcse_sd"`` entries (0: an exact reference)."""
    out = {}
    for site in sites:
        if site not in reference:
            continue
        entry = reference[site]
        mean = np.asarray(entry["mean"], np.float64)
        shape = mean.shape
        parts = [mean] + [
            np.broadcast_to(np.asarray(entry.get(k, 0.0), np.float64), shape)
            for k in ("sd", "mcse_mean", "mcse_sd")
        ]
        for j, values in enumerate(zip(*(p.ravel() for p in parts))):
            out[_label(site, j, shape)] = tuple(float(v) for v in values)
    return out


def _z(difference, standard_error):
    """``difference / standard_error``; ±inf (0 for no difference) when the error is 0."""
    if standard_error > 0:
        return difference / standard_error
    return 0.0 if difference == 0 else float(np.copysign(np.inf, difference))


def _chain_moments(x):
    """Mean, sd and their ESS-based Monte Carlo standard errors (ArviZ's ``mcse``) of draws
    ``x`` of shape ``(chain, draw)``."""
    return (
        x.mean(),
        x.std(ddof=1),
        _arviz.mcse(x, method="mean"),
        _arviz.mcse(x, method="sd"),
    )


def wasserstein1(x, y):
    """Wasserstein-1 distance between the empirical laws of two 1-D samples
    (:func:`scipy.stats.wasserstein_distance`)."""
    from scipy.stats import wasserstein_distance

    return float(wasserstein_distance(np.ravel(x), np.ravel(y)))


def compare_to_reference(
    samples, reference, sites=None, group_by_chain=False, z_threshold=3.0
):
    r"""A :class:`pandas.DataFrame`, one row per scalar parameter, comparing ``samples`` with
    ``reference``, every difference with its Monte Carlo error:

    - ``mean``, ``sd``: of the draws (all chains pooled); ``ref_mean``, ``ref_sd``;
    - ``mcse_mean``, ``mcse_sd``: their Monte Carlo standard errors, ArviZ's ESS-based
      ``az.mcse(method="mean" | "sd")`` of the chains; ``ref_mcse_mean``, ``ref_mcse_sd``: the
      same for the reference when it is a finite run (draws), else the moments' optional
      ``"mcse_mean"``/``"mcse_sd"`` entries (0 for an exact reference);
    - ``std_mean_error`` :math:`= (\bar\theta - \mu_{ref}) / \sigma_{ref}` and its standard
      error ``std_mean_error_se`` :math:`= \sqrt{m^2 + m_{ref}^2} / \sigma_{ref}`;
    - ``z_mean`` :math:`= (\bar\theta - \mu_{ref}) / \sqrt{m^2 + m_{ref}^2}` and ``z_sd``, the
      same for the sd: standard normal when the sampler is exact (up to the MCSEs' own error);
    - ``sd_ratio`` :math:`= \hat\sigma / \sigma_{ref}`;
    - ``resolved``: ``|z_mean|`` or ``|z_sd|`` above ``z_threshold`` (default 3), i.e. the
      difference from the reference is resolved above the Monte Carlo noise; where it is not,
      the run cannot tell this parameter's bias from noise;
    - ``w1``: Wasserstein-1 distance between the marginal of the draws and of the reference
      (only when the reference has draws), and ``w1_sd`` :math:`= W_1 / \sigma_{ref}`;
    - ``ess_bulk``, ``r_hat``: ArviZ's rank-normalised bulk ESS and split R-hat of the chains.

    ``reference`` is draws (InferenceData, MCMC, dict of arrays with a leading draw dimension)
    or moments ``{site: {"mean": array, "sd": array}}`` (closed forms, published moments such
    as posteriordb's; optionally with ``"mcse_mean"``, ``"mcse_sd"``). ``sites`` defaults to the
    sites the two have in common.
    """
    import pandas as pd

    chains = as_chains(samples, group_by_chain)
    moments = _is_moments(reference)
    ref_chains = None if moments else as_chains(reference)
    common = [s for s in chains if s in (reference if moments else ref_chains)]
    sites = common if sites is None else list(sites)
    if not sites:
        raise ValueError("The draws and the reference have no site in common.")
    draws = scalar_draws(chains, sites, group_by_chain=True)
    if moments:
        ref = _reference_moments(reference, sites)
        ref_draws = {}
    else:
        ref_draws = scalar_draws(ref_chains, sites, group_by_chain=True)
        ref = {k: _chain_moments(v) for k, v in ref_draws.items()}
    rows = {}
    for label, x in draws.items():
        if label not in ref:
            continue
        ref_mean, ref_sd, ref_mcse_mean, ref_mcse_sd = ref[label]
        mean, sd, mcse_mean, mcse_sd = _chain_moments(x)
        se_mean = np.hypot(mcse_mean, ref_mcse_mean)
        se_sd = np.hypot(mcse_sd, ref_mcse_sd)
        row = dict(
            mean=mean,
            sd=sd,
            ref_mean=ref_mean,
            ref_sd=ref_sd,
            mcse_mean=mcse_mean,
            mcse_sd=mcse_sd,
            ref_mcse_mean=ref_mcse_mean,
            ref_mcse_sd=ref_mcse_sd,
            std_mean_error=(mean - ref_mean) / ref_sd,
            std_mean_error_se=se_mean / ref_sd,
            z_mean=_z(mean - ref_mean, se_mean),
            sd_ratio=sd / ref_sd,
            z_sd=_z(sd - ref_sd, se_sd),
        )
        row["resolved"] = bool(
            max(abs(np.nan_to_num(row["z_mean"])), abs(np.nan_to_num(row["z_sd"])))
            > z_threshold
        )
        if label in ref_draws:
            row["w1"] = wasserstein1(x, ref_draws[label])
            row["w1_sd"] = row["w1"] / ref_sd
        row["ess_bulk"] = _arviz.ess(x, method="bulk")
        row["r_hat"] = _arviz.rhat(x) if x.shape[1] >= 4 else float("nan")
        rows[label] = row
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "parameter"
    return table


def model_scores(model, samples, *model_args, batch_size=256, **model_kwargs):
    r"""Unconstrained draws and the full-data scores :math:`-\nabla U` of ``model`` at them.

    ``samples``: a dict of *constrained* draws with one leading draw dimension (as
    ``mcmc.get_samples()``), or anything :func:`as_chains` accepts (chains are pooled). The
    model is evaluated with subsampling off (:func:`numpyro_sgrld.full_batch`); draws are
    mapped to the unconstrained space where the kernels move, and the score includes the
    Jacobian terms. Returns ``(x, scores)``, numpy arrays (draws, d) with the sites in sorted
    order (as :func:`jax.flatten_util.ravel_pytree`), for :func:`kernel_stein_discrepancy`.
    :func:`score_function` gives the same, compiled once for many sets of draws."""
    return score_function(model, *model_args, batch_size=batch_size, **model_kwargs)(samples)


def score_function(model, *model_args, batch_size=256, **model_kwargs):
    """``samples -> (x, scores)``: :func:`model_scores` of ``model`` with these arguments,
    compiled on the first call and reused for every later one."""
    from numpyro.infer.util import potential_energy, unconstrain_fn

    from numpyro_sgrld.data.subsample import full_batch

    fb = full_batch(model)

    def one(draw):
        z = unconstrain_fn(fb, model_args, model_kwargs, draw)
        g = jax.grad(lambda z: potential_energy(fb, model_args, model_kwargs, z))(z)
        return ravel_pytree(z)[0], -ravel_pytree(g)[0]

    chunk = jax.jit(jax.vmap(one))  # traced and compiled once per set of sites and shape

    def scores(samples):
        chains = as_chains(samples, group_by_chain=not isinstance(samples, dict))
        flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in chains.items()}
        latent = latent_sites(fb, flat, *model_args, **model_kwargs)
        flat = {k: jnp.asarray(flat[k]) for k in latent}
        n = len(next(iter(flat.values())))
        size = min(batch_size, n)
        xs, ss = [], []
        for start in range(0, n, size):
            part = {k: v[start : start + size] for k, v in flat.items()}
            short = size - len(next(iter(part.values())))
            if short:  # the last block padded to the others' size: one compiled shape
                part = {k: jnp.concatenate([v, jnp.repeat(v[-1:], short, 0)])
                        for k, v in part.items()}
            x, s = chunk(part)
            xs.append(np.asarray(x)[: size - short])
            ss.append(np.asarray(s)[: size - short])
        return np.concatenate(xs), np.concatenate(ss)

    return scores


def latent_sites(model, draws, *model_args, **model_kwargs):
    """Names of the latent sample sites of ``model`` (one evaluation at the first of
    ``draws``, a dict with a leading draw dimension); raises ``KeyError`` if ``draws`` lacks
    one."""
    from numpyro import handlers

    flat = draws
    first = {k: v[0] for k, v in flat.items()}
    trace = handlers.trace(handlers.substitute(handlers.seed(model, 0), data=first)).get_trace(
        *model_args, **model_kwargs
    )
    latent = [n for n, s in trace.items() if s["type"] == "sample" and not s["is_observed"]]
    missing = [n for n in latent if n not in flat]
    if missing:
        raise KeyError(f"The draws lack the latent sites {missing}.")
    return latent


def bias_vs_step_size(
    kernel,
    step_sizes,
    reference,
    *model_args,
    num_warmup=1000,
    num_samples=10000,
    thinning=1,
    num_chains=1,
    seed=0,
    sites=None,
    target_ess=None,
    max_samples=None,
    **model_kwargs,
):
    """Run ``kernel(step_size=h)`` (e.g. ``partial(SGLD, model)``) for each ``h`` of
    ``step_sizes`` through :class:`numpyro.infer.MCMC` and summarise
    :func:`compare_to_reference` per step size, each bias measure with its Monte Carlo
    standard error.

    A fixed number of steps gives a small step size a small ESS: its error would then be
    mixing error, not discretisation bias (which grows with h). With ``target_ess``, a run
    whose smallest bulk ESS falls short is continued (from its last state, same chains) for
    as many more draws as its ESS per draw says are needed, up to ``max_samples`` draws in all
    (default 20 × ``num_samples``), so every step size is measured to about the same
    precision.

    Returns a :class:`pandas.DataFrame` indexed by step size: ``max_abs_std_mean_error`` and
    its standard error ``max_abs_std_mean_error_se`` (of the parameter with the largest
    error), ``max_abs_z_mean``; ``worst_sd_ratio`` (the sd ratio farthest from 1) with
    ``worst_sd_ratio_se``; ``min_sd_ratio``, ``max_sd_ratio``; ``mean_sd_ratio`` (over the
    parameters: a bias that widens or narrows them all shows here far above the noise) with
    ``mean_sd_ratio_se`` (the parameters' standard errors combined as if independent);
    ``mean_w1_sd`` (when the
    reference has draws); ``num_resolved`` (parameters whose difference is above the noise,
    see :func:`compare_to_reference`); ``ess_min``, ``num_samples`` (draws per chain) and the
    number of ``diverging`` recorded draws. Chains are vectorized. Fit the order of the bias
    in h with :func:`fit_bias_order`.
    """
    import pandas as pd

    if target_ess is not None and not target_ess > 0:
        raise ValueError(f"`target_ess` must be > 0 or None, got {target_ess!r}.")
    max_samples = 20 * num_samples if max_samples is None else int(max_samples)
    rows = {}
    for h in step_sizes:
        draws, diverging = _run_to_ess(
            kernel(step_size=h), model_args, model_kwargs, num_warmup, num_samples, thinning,
            num_chains, seed, target_ess, max_samples, sites,
        )
        table = compare_to_reference(draws, reference, sites=sites, group_by_chain=True)
        worst = table["std_mean_error"].abs().idxmax()
        off = (table["sd_ratio"] - 1).abs().idxmax()
        row = dict(
            max_abs_std_mean_error=float(abs(table.loc[worst, "std_mean_error"])),
            max_abs_std_mean_error_se=float(table.loc[worst, "std_mean_error_se"]),
            max_abs_z_mean=float(table["z_mean"].abs().max()),
            worst_sd_ratio=float(table.loc[off, "sd_ratio"]),
            worst_sd_ratio_se=float(
                np.hypot(table.loc[off, "mcse_sd"], table.loc[off, "ref_mcse_sd"])
                / table.loc[off, "ref_sd"]
            ),
            min_sd_ratio=float(table["sd_ratio"].min()),
            max_sd_ratio=float(table["sd_ratio"].max()),
            mean_sd_ratio=float(table["sd_ratio"].mean()),
            mean_sd_ratio_se=float(
                np.sqrt(np.sum(np.square(
                    np.hypot(table["mcse_sd"], table["ref_mcse_sd"]) / table["ref_sd"]
                ))) / len(table)
            ),
        )
        if "w1_sd" in table:
            row["mean_w1_sd"] = float(table["w1_sd"].mean())
        row["num_resolved"] = int(table["resolved"].sum())
        row["ess_min"] = float(table["ess_bulk"].min())
        row["num_samples"] = int(next(iter(draws.values())).shape[1])
        row["diverging"] = diverging
        rows[float(h)] = row
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.index.name = "step_size"
    return out


def continue_to_ess(mcmc, key, model_args, model_kwargs, target_ess, max_steps, collect, ess_of,
                    **run_kwargs):
    """Run ``mcmc`` (``num_samples`` steps per chain after its warm-up), then continue it —
    the same chains, from their last state — until ``ess_of(parts)``, the smallest bulk ESS
    of the parts collected so far, reaches ``target_ess`` or ``max_steps`` steps per chain
    were taken. Each continuation is as long as the ESS per step so far says is needed (plus
    10 %). ``collect(mcmc)`` turns each run into a part. Returns ``(parts, steps, seconds)``,
    ``seconds`` the wall time of the runs alone."""
    import time

    thinning = mcmc.thinning
    steps = mcmc.num_samples

    def timed_run(rng_key):
        start = time.perf_counter()
        mcmc.run(rng_key, *model_args, **run_kwargs, **model_kwargs)
        jax.block_until_ready(mcmc.get_samples())
        return time.perf_counter() - start

    seconds = timed_run(key)
    parts = [collect(mcmc)]
    while target_ess and steps < max_steps:
        ess = ess_of(parts)
        if not np.isfinite(ess) or ess >= target_ess:
            break
        more = int(np.ceil(steps * (target_ess / max(ess, 1.0) - 1) * 1.1 / thinning))
        more = max(thinning, min(more * thinning, (max_steps - steps) // thinning * thinning))
        mcmc.post_warmup_state = mcmc.last_state
        mcmc.num_samples = more
        seconds += timed_run(mcmc.last_state.rng_key)
        parts.append(collect(mcmc))
        steps += more
    return parts, steps, seconds


def _concat_draws(parts):
    return {k: np.concatenate([p[0][k] for p in parts], 1) for k in parts[0][0]}


def _run_to_ess(
    kernel, args, kwargs, num_warmup, num_samples, thinning, num_chains, seed, target_ess,
    max_samples, sites,
):
    """Grouped draws of one kernel run by :func:`continue_to_ess` (``max_samples`` steps per
    chain at most), and the number of diverging draws."""
    from numpyro.infer import MCMC

    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        thinning=thinning,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )

    def collect(m):
        draws = {k: np.asarray(v) for k, v in m.get_samples(group_by_chain=True).items()}
        return draws, int(np.asarray(m.get_extra_fields()["diverging"]).sum())

    def ess_of(parts):
        labels = scalar_draws(_concat_draws(parts), sites, group_by_chain=True)
        return min(_arviz.ess(x, method="bulk") for x in labels.values())

    parts, _, _ = continue_to_ess(
        mcmc, jax.random.PRNGKey(seed), args, kwargs, target_ess, max_samples, collect, ess_of
    )
    return _concat_draws(parts), sum(p[1] for p in parts)


def fit_bias_order(step_sizes, bias, standard_error, level=0.95):
    r"""The order :math:`p` of a bias in the step size: a weighted least-squares fit of
    :math:`b(h) = c\,h^p` to measured biases ``bias`` with standard errors
    ``standard_error`` (e.g. ``worst_sd_ratio - 1`` and ``worst_sd_ratio_se`` of
    :func:`bias_vs_step_size`), the errors taken as known (``absolute_sigma``).

    Returns a dict: ``order`` :math:`\hat p`, its ``level`` interval ``order_low``,
    ``order_high`` (normal approximation, :math:`\hat p \pm z\,\mathrm{se}`), ``scale``
    :math:`\hat c`, and ``chi2``, ``dof`` of the fit (a chi-square far above ``dof`` says
    the power law does not describe the points within their errors). SGLD's variance bias on
    a Gaussian has order 1 (:math:`\sigma^2/(1 - h/2\sigma^2)`).
    """
    from scipy import optimize, stats

    h = np.asarray(step_sizes, np.float64)
    b = np.asarray(bias, np.float64)
    se = np.asarray(standard_error, np.float64)
    if h.shape != b.shape or h.shape != se.shape or h.size < 3:
        raise ValueError(
            "`step_sizes`, `bias` and `standard_error` must have the same length, at least 3 "
            f"(got {h.size}, {b.size}, {se.size})."
        )
    if np.any(h <= 0) or np.any(se <= 0) or not np.all(np.isfinite(b)):
        raise ValueError("Step sizes and standard errors must be > 0 and biases finite.")
    sign = np.sign(np.sum(b / se**2)) or 1.0
    positive = b * sign > 0
    if positive.sum() >= 2:
        slope, intercept = np.polyfit(np.log(h[positive]), np.log(b[positive] * sign), 1)
    else:
        slope, intercept = 1.0, np.log(np.max(np.abs(b)) / np.max(h))
    h_ref = np.exp(np.mean(np.log(h)))  # fit c at the geometric mean step: better conditioned

    def model(x, log_c, p):
        return sign * np.exp(log_c) * (x / h_ref) ** p

    start = (intercept + slope * np.log(h_ref), slope)
    params, cov = optimize.curve_fit(
        model, h, b, p0=start, sigma=se, absolute_sigma=True, maxfev=10000
    )
    z = stats.norm.ppf(0.5 + level / 2)
    p_se = float(np.sqrt(cov[1, 1]))
    residual = (b - model(h, *params)) / se
    return dict(
        order=float(params[1]),
        order_low=float(params[1] - z * p_se),
        order_high=float(params[1] + z * p_se),
        scale=float(sign * np.exp(params[0]) * h_ref ** (-params[1])),
        chi2=float(np.sum(residual**2)),
        dof=int(h.size - 2),
    )
