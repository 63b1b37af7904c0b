"""``sgrld compare``: every kernel on one problem against NUTS on the full data.

Runs each SG kernel through :class:`numpyro.infer.MCMC` on a subsampled model, runs NUTS on the
full data as the reference (:func:`~numpyro_sgrld.inference_data.reference_posterior`, cached),
compares them (:mod:`numpyro_sgrld.diagnostics`) and writes a report folder::

    report.md            settings, the comparison table, the plots
    comparison.csv       the table
    per_parameter.csv    compare_to_reference for every kernel and parameter
    marginals.png        marginal densities over the reference
    bias.png             bias against the step size (kernels in ``bias_kernels``)
    trace_<kernel>.png   ArviZ trace plots;  rank_reference.png: ArviZ rank plot of NUTS
    <kernel>.nc, reference.nc   the runs as ArviZ InferenceData (NetCDF)
"""

import time
import warnings
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
from numpyro.infer import MCMC

from numpyro_sgrld import _arviz, diagnostics, plots
from numpyro_sgrld._parallel import run_all
from numpyro_sgrld.adaptation import MIN_WARMUP
from numpyro_sgrld.inference_data import (
    SG_EXTRA_FIELDS,
    reference_posterior,
    save_netcdf,
    to_inference_data,
)
from numpyro_sgrld.kernels import (
    BADODAB,
    BAOAB,
    BNPSGLD,
    PSGLD,
    SGHMC,
    SGLD,
    SGNHT,
    AdamSGLD,
    CyclicalSGHMC,
    CyclicalSGLD,
    MongeSGLD,
    ShampooSGLD,
    WenzelSGLD,
)
from numpyro_sgrld.priors import init_to_unit_scales
from numpyro_sgrld.subsample import full_batch

__all__ = ["PROBLEMS", "KERNELS", "BASELINES", "DEFAULT_KERNELS", "Problem", "run_compare",
           "format_table", "verdict_paragraph"]


class Problem(NamedTuple):
    """A model with its data."""

    description: str
    model: Any  # subsampled model
    args: tuple
    network: bool = False  # a network built with random_haiku_module (BNPSGLD applies)
    init_strategy: Any = None  # the SG kernels' init strategy (None: the kernels' default)


def _german_credit(subsample_size=100):
    from numpyro_sgrld.models import logistic_regression as lr

    X, y = lr.load_german_credit()
    return Problem(
        "Bayesian logistic regression on German credit (N = 1000, d = 25, w ~ N(0, I)), "
        f"minibatch {subsample_size}",
        partial(lr.model, subsample_size=subsample_size),
        (X, y),
    )


def _linear_regression(subsample_size=100):
    from numpyro_sgrld.models import linear_regression as lr

    X, y, _ = lr.make_data(seed=0, num_data=2000, num_features=5)
    return Problem(
        "Conjugate Bayesian linear regression (N = 2000, d = 5, synthetic), "
        f"minibatch {subsample_size}",
        partial(lr.model, subsample_size=subsample_size),
        (X, y),
    )


def _digits_mlp(subsample_size=100):
    from numpyro_sgrld.models import bnn

    X, y, _, _ = bnn.load_digits()
    return Problem(
        "Bayesian 64-16-10 ReLU MLP on scikit-learn's digits (N = 1438, Gaussian prior with He "
        f"scales, 1,210 parameters), minibatch {subsample_size}",
        partial(bnn.mlp_classifier, hidden=(16,), subsample_size=subsample_size),
        (X, y),
        network=True,
        init_strategy=init_to_unit_scales,
    )


PROBLEMS = {
    "german_credit": _german_credit,
    "linear_regression": _linear_regression,
    "digits_mlp": _digits_mlp,
}
NETWORK_PROBLEMS = ("digits_mlp",)
#: Kernels that only apply to networks (a dense layer's inputs are what they read).
NETWORK_KERNELS = ("BNPSGLD",)

KERNELS = {
    "SGLD": SGLD,
    "SGHMC": partial(SGHMC, friction=0.1),
    "PSGLD": PSGLD,
    "PSGLD+Γ": partial(PSGLD, correction="exact"),
    "MongeSGLD": MongeSGLD,
    "MongeSGLD+Γ": partial(MongeSGLD, correction="exact"),
    "ShampooSGLD": ShampooSGLD,
    "WenzelSGLD": WenzelSGLD,
    "AdamSGLD": AdamSGLD,
    "BNPSGLD": BNPSGLD,
    "BAOAB": BAOAB,
    "SGNHT": SGNHT,
    "BADODAB": BADODAB,
    "CyclicalSGLD": CyclicalSGLD,
    "CyclicalSGHMC": CyclicalSGHMC,
}
#: The kernels and baselines ``sgrld`` runs by default on German credit: one of each family
#: (constant, RMSprop, Monge and Shampoo preconditioners, Γ-corrected, adaptive drift,
#: underdamped), and MALA; ``kernels="all"`` (``--kernels all``) runs every one.
DEFAULT_KERNELS = ("SGLD", "SGHMC", "PSGLD", "PSGLD+Γ", "MongeSGLD", "ShampooSGLD", "AdamSGLD",
                   "BAOAB", "LMC")
#: A row is accurate when its worst standardised mean error and every sd ratio are inside
#: these bounds (max |mean error| <= 0.15 sd, sd ratios in [0.87, 1.15]).
ACCURATE_MEAN, ACCURATE_SD = 0.15, (0.87, 1.15)
#: The cyclical kernels' cycles per first run (``cycle_length = num_steps // CYCLES``; their
#: continuations keep cycling) and exploration fraction.
CYCLES, EXPLORATION = 4, 0.5


#: Baselines that are not SG-MCMC kernels (:mod:`numpyro_sgrld.baselines`), run on the same
#: model and reported like the kernels: Langevin Monte Carlo with Metropolis–Hastings on the
#: full data, Bayes by Backprop (mean-field VI), constant SGD (Mandt et al. 2017).
BASELINES = ("LMC", "BayesByBackprop", "ConstantSGD")


def _pooled(draws, max_draws=2000):
    """Draws ``{site: (n, ...)}`` as one (n, d) array (at most ``max_draws``, evenly spaced)."""
    x = np.concatenate([v.reshape(len(v), -1) for v in draws.values()], axis=1)
    idx = np.linspace(0, len(x) - 1, min(len(x), max_draws)).astype(int)
    return x[idx]


def _latent_only(idata, model, args):
    """Posterior dict of the latent sites only (no deterministic ones), draws pooled."""
    chains = diagnostics.as_chains(idata)
    flat = {k: v.reshape((-1,) + v.shape[2:]) for k, v in chains.items()}
    latent = diagnostics.latent_sites(full_batch(model), flat, *args)
    return {k: flat[k] for k in latent}


def _reference_noise(ref, problem):
    """The energy distance between the first and the second half of the reference's chains:
    what two exact samples of this size are apart, the noise level against which the SG
    kernels' energy distances are read."""
    chains = diagnostics.as_chains(ref)
    half = next(iter(chains.values())).shape[0] // 2
    if half < 1:
        return float("nan")
    parts = []
    for sl in (slice(0, half), slice(half, None)):
        flat = {k: v[sl].reshape((-1,) + v.shape[2:]) for k, v in chains.items()}
        latent = diagnostics.latent_sites(full_batch(problem.model), flat, *problem.args)
        parts.append(_pooled({k: flat[k] for k in latent}))  # as many draws as the SG rows
    return diagnostics.energy_distance(*parts)


def _ksd(model, args, draws, max_draws=1000):
    n = len(next(iter(draws.values())))
    idx = np.linspace(0, n - 1, min(n, max_draws)).astype(int)
    x, s = diagnostics.model_scores(model, {k: v[idx] for k, v in draws.items()}, *args)
    return diagnostics.kernel_stein_discrepancy(x, s)


#: A kernel whose chains have a split R-hat above this, or a bulk ESS below
#: :data:`MIN_ESS`, is flagged as not converged in the table (Vehtari et al. 2021 recommend
#: R-hat < 1.01 and a bulk ESS of at least 100 per parameter).
MAX_RHAT = 1.01
MIN_WARMUP_ADAPT = MIN_WARMUP
MIN_ESS = 100


def _step_used(stats):
    """The step size of a run: the chains' geometric mean of the recorded (after warm-up:
    the adapted and frozen, or the given) step."""
    h = np.asarray(stats["step_size"], np.float64)
    return float(np.exp(np.mean(np.log(h))))


def _summary_row(table, idata, seconds, energy, ksd):
    stats = _arviz.dataset(idata, "sample_stats")
    diverging = int(np.asarray(stats["diverging"]).sum()) if "diverging" in stats else 0
    worst = table["std_mean_error"].abs().idxmax()
    off = (table["sd_ratio"] - 1).abs().idxmax()
    rhat, ess = float(table["r_hat"].max()), float(table["ess_bulk"].min())
    problems = []
    if np.isfinite(rhat) and rhat > MAX_RHAT:
        problems.append(f"R-hat {rhat:.3f}")
    if ess < MIN_ESS:
        problems.append(f"ESS {ess:.0f}")
    return {
        "step size": _step_used(stats) if "step_size" in stats else float("nan"),
        "max abs mean err/sd": float(abs(table.loc[worst, "std_mean_error"])),
        "± se": float(table.loc[worst, "std_mean_error_se"]),
        "worst sd ratio": float(table.loc[off, "sd_ratio"]),
        "± se (sd)": float(
            np.hypot(table.loc[off, "mcse_sd"], table.loc[off, "ref_mcse_sd"])
            / table.loc[off, "ref_sd"]
        ),
        "off beyond noise": f"{int(table['resolved'].sum())}/{len(table)}",
        "mean W1/sd": float(table["w1_sd"].mean()),
        "energy dist": energy,
        "KSD": ksd,
        "min ESS": ess,
        "max R-hat": rhat,
        "converged": "yes" if not problems else "NO: " + ", ".join(problems),
        "accurate": _accurate(table),
        "diverging": diverging,
        "seconds": seconds,
    }


def _accurate(table):
    """``"yes"`` when the worst standardised mean error is at most :data:`ACCURATE_MEAN` and
    every sd ratio inside :data:`ACCURATE_SD`; else what is off."""
    err = float(table["std_mean_error"].abs().max())
    lo, hi = float(table["sd_ratio"].min()), float(table["sd_ratio"].max())
    off = []
    if not err <= ACCURATE_MEAN:
        off.append(f"mean error {err:.2f} sd")
    if not (ACCURATE_SD[0] <= lo and hi <= ACCURATE_SD[1]):
        off.append(f"sd ratios {lo:.2f}–{hi:.2f}")
    return "yes" if not off else "NO: " + ", ".join(off)


def _progress_of(target_ess, joined, parts):
    """The smallest bulk ESS, or less where the largest split R-hat is above
    :data:`MAX_RHAT`: R-hat − 1 falls roughly like 1/length, so a run at R-hat r needs about
    (r − 1)/(MAX_RHAT − 1) times its length, which the continuation (it extends a run by
    ``target_ess / ess``) is told as ``target_ess (MAX_RHAT − 1)/(r − 1)``."""
    import arviz as az

    idata = joined(parts)
    ess = float(np.min(_arviz.stat_values(az.ess(idata))))
    rhat = float(np.max(_arviz.stat_values(az.rhat(idata))))
    if np.isfinite(rhat) and rhat > MAX_RHAT:
        ess = min(ess, target_ess * (MAX_RHAT - 1) / (rhat - 1))
    return ess


def _run_kernel(kernel, problem, num_warmup, num_steps, thinning, num_chains, seed,
                target_ess, max_steps, extra_fields=SG_EXTRA_FIELDS):
    """One kernel's run as InferenceData, continued (same chains) until its smallest bulk ESS
    reaches ``target_ess`` and its largest split R-hat is at most :data:`MAX_RHAT`, or it took
    ``max_steps`` steps per chain
    (:func:`~numpyro_sgrld.diagnostics.continue_to_ess`); returns ``(idata, seconds, steps)``."""
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_steps,
        thinning=thinning,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )

    def joined(parts):
        return _arviz.concat_draws(parts)

    parts, steps, seconds = diagnostics.continue_to_ess(
        mcmc,
        jax.random.PRNGKey(seed),
        problem.args,
        {},
        target_ess,
        max_steps,
        lambda m: to_inference_data(m, *problem.args, log_likelihood=False),
        partial(_progress_of, target_ess, joined),
        extra_fields=extra_fields,
    )
    return joined(parts), seconds, steps


def _run_baseline(name, problem, num_warmup, num_steps, thinning, num_chains, seed,
                  target_ess, max_steps):
    """A baseline's run as ``(idata, seconds, steps)`` (:mod:`numpyro_sgrld.baselines`): LMC
    and constant SGD run through ``MCMC`` like the kernels (continued to the ESS target);
    Bayes by Backprop fits its guide by ``num_steps`` SVI steps and gives ``num_chains`` x
    ``num_steps // thinning`` independent draws of it."""
    from numpyro_sgrld import baselines

    init = problem.init_strategy
    if name == "LMC":
        kernel = baselines.lmc_kernel(problem.model, init)
        return _run_kernel(kernel, problem, num_warmup, num_steps, thinning, num_chains, seed,
                           target_ess, max_steps, extra_fields=baselines.LMC_EXTRA_FIELDS)
    if name == "ConstantSGD":
        kernel, _, _ = baselines.constant_sgd(problem.model, problem.args, seed=seed,
                                              init_strategy=init)
        return _run_kernel(kernel, problem, num_warmup, num_steps, thinning, num_chains, seed,
                           target_ess, max_steps)
    draws, info = baselines.bayes_by_backprop(problem.model, problem.args, num_steps=num_steps,
                                              num_chains=num_chains,
                                              num_draws=num_steps // thinning, seed=seed)
    shape = (num_chains, num_steps // thinning)
    stats = {"diverging": np.full(shape, not info["finite"])}
    return _arviz.from_dict(posterior=draws, sample_stats=stats), info["seconds"], num_steps


def check_options(
    model, kernels, step_sizes, num_steps, num_warmup, thinning, num_chains, reference_samples
):
    """Validate the options of :func:`run_compare`; returns the list of kernels."""
    if model not in PROBLEMS:
        raise ValueError(f"Unknown model {model!r}; choose one of {sorted(PROBLEMS)}.")
    network = model in NETWORK_PROBLEMS
    if kernels is None:  # on a network, the network-only kernels too
        kernels = [k for k in DEFAULT_KERNELS if k in KERNELS]
        kernels += [k for k in NETWORK_KERNELS if network] + [
            k for k in DEFAULT_KERNELS if k in BASELINES]
    elif list(kernels) == ["all"]:
        kernels = [k for k in KERNELS if network or k not in NETWORK_KERNELS] + list(BASELINES)
    kernels = list(kernels)
    unknown = [k for k in kernels if k not in KERNELS and k not in BASELINES]
    if unknown:
        raise ValueError(
            f"Unknown kernels {unknown}; choose from {list(KERNELS)} or the baselines "
            f"{list(BASELINES)}."
        )
    misplaced = [k for k in kernels if k in NETWORK_KERNELS and not network]
    if misplaced:
        raise ValueError(
            f"{', '.join(misplaced)} preconditions the dense layers of a network, and the model "
            f"{model!r} has none: choose a network model ({', '.join(NETWORK_PROBLEMS)}) or "
            "leave it out."
        )
    for name, value in dict(
        num_steps=num_steps,
        num_chains=num_chains,
        thinning=thinning,
        reference_samples=reference_samples,
    ).items():
        if not (isinstance(value, int) and value >= 1):
            raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")
    if not (isinstance(num_warmup, int) and num_warmup >= 0):
        raise ValueError(f"`num_warmup` must be a non-negative integer, got {num_warmup!r}.")
    adapting = [k for k in kernels if k not in (step_sizes or {})
                and k not in ("BayesByBackprop", "ConstantSGD")]
    if adapting and num_warmup < MIN_WARMUP_ADAPT:
        raise ValueError(
            f"`num_warmup`={num_warmup} is too short for {', '.join(adapting)} to choose their "
            f"step size (at least {MIN_WARMUP_ADAPT} burn-in steps): raise it, or fix their "
            "steps (`step_sizes`, --step-size KERNEL=STEP)."
        )
    if num_steps // thinning < 2:
        raise ValueError("`num_steps // thinning` must be at least 2 draws per chain.")
    for name, h in (step_sizes or {}).items():
        if name in BASELINES:
            raise ValueError(
                f"{name} is a baseline that chooses its own step (LMC by dual averaging, "
                "ConstantSGD by Mandt et al.'s rule) or has none (BayesByBackprop): drop its "
                "step size."
            )
        if name not in KERNELS:
            raise ValueError(f"Step size given for unknown kernel {name!r}.")
        if not (isinstance(h, (int, float)) and h > 0):
            raise ValueError(f"The step size of {name} must be > 0, got {h!r}.")
    return kernels


def run_compare(
    model="german_credit",
    kernels=None,
    step_sizes=None,
    num_steps=20000,
    num_warmup=2000,
    thinning=5,
    num_chains=4,
    reference_samples=1000,
    bias_kernels=(),
    bias_factors=(0.25, 0.5, 1.0, 2.0),
    seed=0,
    out="sgrld-report",
    progress_bar=True,
    log=print,
    target_ess=2 * MIN_ESS,
    budget=1.0,
    gamma_panel=False,
    large=None,
    large_kernels=None,
    workers=1,
):
    """Run the comparison and write the report folder ``out``; returns the summary rows
    ``{kernel: {...}}`` (the reference NUTS run included).

    Each kernel runs ``num_steps`` steps per chain, then continues until the smallest bulk
    ESS over the parameters reaches ``target_ess`` and the largest split R-hat is at most
    :data:`MAX_RHAT`, or it has taken ``5 * num_steps`` steps;
    ``budget`` multiplies both (and the bias curves' runs). The table gives the worst errors
    with their standard errors, how many parameters differ from the reference above the
    Monte Carlo noise, whether the row is accurate, and flags a kernel that has not converged.
    ``bias_kernels`` adds bias-against-step-size curves, ``gamma_panel`` :func:`gamma_demo`
    (the Γ bias on Rensmeyer & Niggemann's 1-D target, with and without the correction).
    ``large`` (a :class:`~numpyro_sgrld.time_to_accuracy.Setting`, or ``None`` for none) adds
    the time-to-accuracy race on a large logistic regression
    (:func:`~numpyro_sgrld.time_to_accuracy.run_large`). The report opens with a verdict
    (:func:`verdict_paragraph`). ``workers`` runs of the first problem (the reference and the
    kernels) go at a time, each in its own process (:func:`numpyro_sgrld._parallel.run_all`);
    the large problem's race always runs one method at a time."""
    if not (isinstance(workers, int) and workers >= 1):
        raise ValueError(f"`workers` must be a positive integer, got {workers!r}.")
    from numpyro_sgrld.inference_data import reference_file, reference_seconds

    kernels = check_options(
        model, kernels, step_sizes, num_steps, num_warmup, thinning, num_chains, reference_samples
    )
    if not (isinstance(budget, (int, float)) and budget > 0):
        raise ValueError(f"`budget` must be a number > 0, got {budget!r}.")
    num_steps = max(thinning * 2, int(round(num_steps * budget / thinning)) * thinning)
    max_steps = 5 * num_steps
    problem = PROBLEMS[model]()
    # None: the kernel chooses its step during warm-up (step_size=None); --step-size fixes one
    steps = {name: (step_sizes or {}).get(name) for name in kernels}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    clock = time.perf_counter()

    def stamp():
        return f"[{time.perf_counter() - clock:5.0f} s]"

    log(f"{stamp()} Problem 1: {problem.description}.")
    settings_ref = dict(num_samples=reference_samples, num_warmup=reference_samples,
                        num_chains=4, seed=seed)
    cached = reference_file(problem.model, *problem.args, **settings_ref).exists()
    if workers > 1:
        log(f"{stamp()} {workers} runs at a time, each in its own process (--workers); each "
            "run's seconds are measured while another runs beside it")
    reference = "NUTS (reference)"
    tasks = {reference: (_reference_task, (model, settings_ref,
                                           progress_bar and not cached and workers == 1))}
    tasks.update({name: (_kernel_task, (model, name, steps[name], num_warmup, num_steps,
                                        thinning, num_chains, seed + 1, target_ess, max_steps))
                  for name in kernels})
    order = {name: count for count, name in enumerate(kernels, 1)}

    def on_start(label):
        if label == reference:
            log(f"{stamp()} Reference: NUTS on the full data, {reference_samples} draws x 4 "
                "chains" + (" (cached: read from disk)" if cached
                            else " (computing; it is cached for later runs)"))
        else:
            log(f"{stamp()} [{order[label]}/{len(kernels)}] {label}: compiling and running "
                f"({num_warmup} warm-up steps, {num_steps} steps x {num_chains} chains)")

    rows, tables, idatas, taken, used, waiting = {}, {}, {}, {}, {}, {}
    ref = None
    for label, result in run_all(tasks, workers, lambda text: log(f"{stamp()}{text}"),
                                 on_start=on_start):
        if label == reference:
            ref, seconds = result
            ref_seconds = reference_seconds(ref) if cached else seconds
            log(f"{stamp()} Reference ready: NUTS took {ref_seconds:.1f} s"
                + (" when it was computed" if cached else ""))
            save_netcdf(ref, out / "reference.nc")
            ref_draws = _latent_only(ref, problem.model, problem.args)
            ref_pooled = _pooled(ref_draws)
            rows[reference] = _reference_row(ref, ref_seconds, ref_draws, problem)
        else:
            waiting[label] = result
        if ref is None:
            continue
        for name in list(waiting):
            idata, seconds, taken[name] = waiting.pop(name)
            save_netcdf(idata, out / f"{_file_name(name)}.nc")
            table = diagnostics.compare_to_reference(idata, ref)
            draws = _latent_only(idata, problem.model, problem.args)
            energy = diagnostics.energy_distance(_pooled(draws), ref_pooled)
            rows[name] = _summary_row(
                table, idata, seconds, energy, _ksd(problem.model, problem.args, draws)
            )
            tables[name], idatas[name] = table, idata
            used[name] = rows[name]["step size"]
            r = rows[name]
            log(f"{stamp()}     {name}: {seconds:.1f} s; max |mean error| "
                f"{r['max abs mean err/sd']:.3f} sd, worst sd ratio {r['worst sd ratio']:.3f}; "
                f"accurate: {r['accurate']}; converged: {r['converged']}")
    rows = {name: rows[name] for name in (reference, *kernels)}
    _write_tables(out, rows, tables)

    log(f"{stamp()} Plots")
    plots.plot_errors(tables, ACCURATE_MEAN, ACCURATE_SD, path=out / "errors.png")
    worst = _worst_parameters(tables, 8)
    plots.plot_marginals(idatas, ref, params=worst, path=out / "marginals.png")
    for name in kernels:
        plots.plot_trace_rank(idatas[name], params=worst[:4], title=name,
                              path=out / f"trace_{_file_name(name)}.png")
    plots.plot_trace_rank(ref, params=worst[:4], title="NUTS (reference)",
                          path=out / "trace_reference.png")
    curves = {}
    # (the cyclical kernels' step is a schedule: no bias curve over a constant step)
    for name in [k for k in bias_kernels if k in kernels and k in KERNELS
                 and not k.startswith("Cyclical")]:
        log(f"{stamp()} Bias against the step size: {name}")
        grid = [used[name] * f for f in bias_factors]
        curves[name] = diagnostics.bias_vs_step_size(
            partial(KERNELS[name], problem.model, **_init(problem)),
            grid,
            ref,
            *problem.args,
            num_warmup=num_warmup,
            num_samples=num_steps,
            thinning=thinning,
            num_chains=num_chains,
            seed=seed + 2,
            target_ess=target_ess,
            max_samples=max_steps,
        )
    if curves:
        plots.plot_bias_vs_step_size(curves, column="mean_sd_ratio", path=out / "bias.png")
    gamma = None
    if gamma_panel:
        log(f"{stamp()} The Γ panel")
        gamma = gamma_demo(out / "gamma.png", num_steps=max(2000, int(20000 * budget)),
                           seed=seed)
    race = None
    if large is not None:
        from numpyro_sgrld.time_to_accuracy import run_large

        log(f"{stamp()} Problem 2: time to accuracy on a large logistic regression")
        race = run_large(large, out, log=lambda text: log(f"{stamp()} {text}"),
                         **({} if large_kernels is None else {"kernels": large_kernels}))
    _write_report(
        out,
        problem,
        rows,
        curves,
        gamma,
        dict(
            kernels=kernels,
            steps=used,
            adapted=[k for k in kernels if steps[k] is None and k in KERNELS],
            num_steps=num_steps,
            num_warmup=num_warmup,
            thinning=thinning,
            num_chains=num_chains,
            reference_samples=reference_samples,
            seed=seed,
            target_ess=target_ess,
            max_steps=max_steps,
            taken=taken,
            latent_sites=list(ref_draws),
            ref_cached=cached,
        ),
        race,
    )
    log(f"{stamp()} Done.")
    return rows


def _reference_row(ref, seconds, ref_draws, problem):
    """The reference's row of the table: its own errors (zero by construction) left blank."""
    ref_row = _summary_row(
        diagnostics.compare_to_reference(ref, ref),
        ref,
        seconds,
        _reference_noise(ref, problem),
        _ksd(problem.model, problem.args, ref_draws),
    )
    for key in ("max abs mean err/sd", "± se", "worst sd ratio", "± se (sd)", "mean W1/sd"):
        ref_row[key] = float("nan")
    ref_row["off beyond noise"] = "—"
    ref_row["accurate"] = "—"
    return ref_row


def _reference_task(model, settings, progress_bar):
    """NUTS's reference on problem ``model`` (cached): ``(idata, seconds)``."""
    problem = PROBLEMS[model]()
    start = time.perf_counter()
    ref = reference_posterior(problem.model, *problem.args, **settings,
                              progress_bar=progress_bar)
    return ref, time.perf_counter() - start


def _kernel_task(model, name, *args):
    """:func:`_run_one` on problem ``model``: ``(idata, seconds, steps)``."""
    return _run_one(name, PROBLEMS[model](), *args)


def _run_one(name, problem, step_size, num_warmup, num_steps, thinning, num_chains, seed,
             target_ess, max_steps):
    """One kernel's or baseline's run, ``(idata, seconds, steps)``."""
    if name in BASELINES:
        return _run_baseline(name, problem, num_warmup, num_steps, thinning, num_chains, seed,
                             target_ess, max_steps)
    extra = {}
    if name.startswith("Cyclical"):
        extra = {"cycle_length": max(2, num_steps // CYCLES), "exploration": EXPLORATION}
    kernel = KERNELS[name](problem.model, step_size=step_size, **_init(problem), **extra)
    with warnings.catch_warnings():
        # the verdict's warnings: the table and the report's verdict say it for all
        warnings.simplefilter("ignore", UserWarning)
        return _run_kernel(kernel, problem, num_warmup, num_steps, thinning, num_chains, seed,
                           target_ess, max_steps)


def _worst_parameters(tables, n):
    """The ``n`` parameters whose sd ratio or mean error is farthest off over all rows."""
    import pandas as pd

    score = pd.concat([(t["sd_ratio"] - 1).abs() + t["std_mean_error"].abs()
                       for t in tables.values()], axis=1).max(axis=1)
    return list(score.sort_values(ascending=False).index[:n])


def _init(problem):
    return {} if problem.init_strategy is None else {"init_strategy": problem.init_strategy}


def _file_name(name):
    return name.replace("+Γ", "_corrected")


def _write_tables(out, rows, tables):
    import pandas as pd

    pd.DataFrame.from_dict(rows, orient="index").to_csv(out / "comparison.csv")
    pd.concat(tables, names=["kernel"]).to_csv(out / "per_parameter.csv")


def _fmt(v):
    if isinstance(v, float):
        if not np.isfinite(v):
            return "—"
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)


def format_table(rows, markdown=False):
    """The summary rows as a plain-text (or Markdown) table."""
    headers = ["kernel", *next(iter(rows.values()))]
    cells = [[name, *(_fmt(v) for v in row.values())] for name, row in rows.items()]
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        return "\n".join(lines + ["| " + " | ".join(c) + " |" for c in cells])
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = lambda items: "  ".join(s.rjust(w) for s, w in zip(items, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(c) for c in cells])


def gamma_demo(path=None, num_chains=2000, num_steps=20000, seed=0):
    r"""The Γ bias, visible and removed: pSGLD (decay 0.9, ``eps`` 1, h = 1e-3) on
    Rensmeyer & Niggemann's target :math:`\theta \sim \mathcal N(0, 1)`, ``num_chains``
    vectorised chains, without and with ``correction="exact"``.

    Without Γ the small-step law is :math:`\propto \varphi(\theta)(1 + |\theta|)`
    (sd 1.20); with it, :math:`\mathcal N(0, 1)`. Returns ``{name: {"sd", "sd_se", "l1_normal",
    "l1_predicted"}}`` (sd with ArviZ's MCSE over the chains; L1 distances of the histograms,
    :func:`~numpyro_sgrld.diagnostics.histogram_l1`) and draws the histograms to ``path``."""
    from numpyro.infer import init_to_sample

    from numpyro_sgrld.models.gaussian import biased_density, standard_normal

    def normal(t):
        return np.exp(-np.square(t) / 2) / np.sqrt(2 * np.pi)

    predicted = biased_density("psgld", eps=1.0)
    rows, draws = {}, {}
    for name, correction in (("PSGLD", None), ("PSGLD+Γ", "exact")):
        kernel = PSGLD(standard_normal, step_size=1e-3, decay=0.9, eps=1.0,
                       correction=correction, init_strategy=init_to_sample)
        mcmc = MCMC(kernel, num_warmup=5000, num_samples=num_steps,
                    thinning=max(1, num_steps // 1000), num_chains=num_chains,
                    chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(seed))
        x = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"], np.float64)
        draws[name] = x.ravel()
        rows[name] = dict(
            sd=float(x.std()),
            sd_se=_arviz.mcse(x, method="sd"),
            l1_normal=float(diagnostics.histogram_l1(x.ravel(), normal)),
            l1_predicted=float(diagnostics.histogram_l1(x.ravel(), predicted)),
        )
    if path is not None:
        plt = plots._pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(8, 3), sharey=True)
        grid = np.linspace(-4.5, 4.5, 300)
        for ax, (name, x) in zip(axes, draws.items()):
            ax.hist(x, bins=np.arange(-4.5, 4.55, 0.1), density=True, color="0.75",
                    label=f"{name} draws")
            ax.plot(grid, normal(grid), "k--", lw=1.2, label="N(0, 1), the target")
            ax.plot(grid, predicted(grid), "r-", lw=1.0, label="φ(θ)(1 + |θ|), Γ dropped")
            ax.set_title(f"{name}: sd {rows[name]['sd']:.3f} ± {rows[name]['sd_se']:.3f}",
                         fontsize=9)
            ax.set_xlabel("θ")
        axes[0].set_yticks([])
        axes[1].legend(fontsize=7, loc="upper right")
        fig.tight_layout()
        plots._finish(fig, path)
    return rows


def _gamma_text(gamma):
    if not gamma:
        return []
    lines = [
        "## The Γ bias, visible and removed",
        "",
        "pSGLD (decay 0.9, eps 1, h = 1e-3, 2000 vectorized chains) on Rensmeyer & Niggemann's "
        "1-D target θ ~ N(0, 1). Dropping Γ, its small-step law is ∝ φ(θ)(1 + |θ|) (sd 1.20, "
        "red); `correction=\"exact\"` restores N(0, 1) (dashed). sd ± its Monte Carlo "
        "standard error; L1 distances between the histogram (bin width 0.1) and each density.",
        "",
        "| kernel | sd (target 1) | L1 to N(0, 1) | L1 to φ(θ)(1 + \\|θ\\|) |",
        "|---|---|---|---|",
    ]
    for name, r in gamma.items():
        lines.append(f"| {name} | {r['sd']:.3f} ± {r['sd_se']:.3f} | {r['l1_normal']:.3f} "
                     f"| {r['l1_predicted']:.3f} |")
    return lines + ["", "![gamma](gamma.png)", ""]


def _score(row):
    """How far a row is off: the larger of its worst mean error and its worst sd ratio's
    distance from 1 (both in reference sds)."""
    return max(row["max abs mean err/sd"], abs(row["worst sd ratio"] - 1))


def verdict_paragraph(rows, race=None):
    """The report's opening paragraph: the most accurate SG kernel, the accurate and the
    biased rows with their errors and Monte Carlo errors, the rows that did not converge, and,
    with ``race`` (:class:`~numpyro_sgrld.time_to_accuracy.LargeRace`), which method reached
    the stated accuracy first on the large problem and by how much."""
    sg = {k: r for k, r in rows.items() if k in KERNELS}
    text = []
    if sg:
        best = min(sg, key=lambda k: _score(sg[k]))
        b = sg[best]
        text.append(
            f"On German credit the most accurate SG kernel is **{best}**: its worst parameter "
            f"mean is off by {b['max abs mean err/sd']:.3f} ± {b['± se']:.3f} posterior sd and "
            f"its sd ratio farthest from 1 is {b['worst sd ratio']:.3f} ± {b['± se (sd)']:.3f} "
            "(NUTS on the full data is the reference; ± one Monte Carlo standard error).")
        good = [k for k, r in rows.items() if r.get("accurate") == "yes"]
        bad = [k for k, r in rows.items() if str(r.get("accurate", "")).startswith("NO")]
        if good:
            text.append(
                f"{len(good)} of {len(rows) - 1} rows are accurate (every mean within "
                f"{ACCURATE_MEAN} sd, every sd within {ACCURATE_SD[0]}–{ACCURATE_SD[1]} times "
                f"the reference's): {', '.join(good)}.")
        if bad:
            parts = []
            for k in bad:
                r = rows[k]
                pct = 100 * (r["worst sd ratio"] - 1)
                parts.append(f"{k} (sds {'too wide' if pct > 0 else 'too narrow'} by up to "
                             f"{abs(pct):.0f} ± {100 * r['± se (sd)']:.0f} %, worst mean off "
                             f"by {r['max abs mean err/sd']:.2f} ± {r['± se']:.2f} sd)")
            text.append("**Not accurate**: " + "; ".join(parts) + ".")
        ratios = [r["worst sd ratio"] for r in sg.values() if np.isfinite(r["worst sd ratio"])]
        wide = all(r["worst sd ratio"] - 1 > 2 * r["± se (sd)"] for r in sg.values())
        if ratios and wide:  # every SG row's sd beyond 2 standard errors above the reference's
            text.append(
                "Every SG kernel's sds are somewhat too wide (worst ratio "
                + (f"{min(ratios):.2f}–{max(ratios):.2f}" if len(ratios) > 1
                   else f"{ratios[0]:.2f}")
                + "): that is the step's own bias, which warm-up sets on purpose "
                "(the default `target_bias=0.1` inflates the variance by about 10 %, the sd by "
                "about 5 %); a smaller `target_bias` is more exact and mixes more slowly.")
        stuck = [k for k, r in rows.items() if str(r.get("converged", "yes")) != "yes"]
        if stuck:
            text.append("**Did not converge** (their errors are mixing error, not bias; run "
                        "longer): " + ", ".join(f"{k} ({rows[k]['converged'][4:]})"
                                                for k in stuck) + ".")
        else:
            text.append(f"Every run converged (split R-hat ≤ {MAX_RHAT}, bulk ESS ≥ "
                        f"{MIN_ESS}).")
    if race is not None:
        text.append(_race_sentence(race))
    return " ".join(text)


def _race_sentence(race):
    from numpyro_sgrld.time_to_accuracy import MEAN_TOL, SD_BAND

    results = race.results
    sg = [r for r in results if r.method in KERNELS]
    done = [r for r in sg if r.reached]
    n = race.setting.num_data
    head = (f"On the large problem (logistic regression, N = {n:,}), the stated accuracy is "
            f"every mean within {MEAN_TOL} sd and every sd within {SD_BAND[0]}–{SD_BAND[1]} "
            "times the reference's. ")
    if not done:
        return head + "No SG kernel reached it within its time cap."
    fast = min(done, key=lambda r: r.seconds_to_target)
    first = min((r for r in results if r.reached), key=lambda r: r.seconds_to_target)
    if first is fast:
        words = [f"**{fast.method}** reached it first, in {fast.seconds_to_target:.0f} s "
                 "(compilation and warm-up included)."]
    else:
        words = [f"{first.method} reached it first, in {first.seconds_to_target:.0f} s; the "
                 f"fastest SG kernel, **{fast.method}**, took {fast.seconds_to_target:.0f} s "
                 "(compilation and warm-up included)."]
    for r in results:
        if r.method in ("NUTS", "HMCECS", "MALA"):
            if r.reached:
                ratio = r.seconds_to_target / fast.seconds_to_target
                words.append(f"{r.method} reached it in {r.seconds_to_target:.0f} s "
                              f"({ratio:.1f}× {fast.method}'s time).")
            else:
                words.append(f"{r.method} had not reached it when stopped after "
                             f"{r.seconds_to_target:.0f} s, so {fast.method} is more than "
                             f"{r.seconds_to_target / fast.seconds_to_target:.1f}× faster.")
    return head + " ".join(words)


def _race_text(race):
    if race is None:
        return []
    from numpyro_sgrld.time_to_accuracy import MEAN_TOL, SD_BAND

    ref, s = race.reference, race.setting
    lines = [
        "## Where SG-MCMC wins: time to accuracy on a large data set",
        "",
        f"Bayesian logistic regression, w ~ N(0, I), on {s.num_data:,} synthetic rows with "
        f"{s.num_features} standard normal features. A method has reached the stated accuracy "
        f"when, over all its draws so far, every coordinate's mean is within {MEAN_TOL} "
        f"reference sd of the reference mean and every sd ratio is within "
        f"[{SD_BAND[0]}, {SD_BAND[1]}]. Its time is the wall time of its runs until the first "
        "check that passed (checks after every chunk, off the clock): tracing, compilation, "
        "initialisation, warm-up and sampling count. Every method runs "
        f"{s.chains} chain(s) (NumPyro's default for `MCMC`). The SG kernels run at their "
        f"defaults (minibatch {s.batch}, {s.sg_warmup} warm-up steps, chunks of {s.sg_chunk} "
        f"steps, every 10th kept), each for at most {race.sg_cap:.0f} s; NUTS (`NUTS("
        "full_batch(model))`), MALA (`HMC` with one leapfrog step, full data) and NumPyro's "
        f"HMCECS (NUTS within Gibbs on subsamples of {s.hmcecs_subsample}, 100 blocks, Taylor "
        "proxy around a MAP found by SVI, as in NumPyro's HMCECS example; the MAP search "
        f"counts) run {s.exact_warmup} warm-up iterations. NUTS and HMCECS run until the "
        f"target or {race.speedup:.0f}× the fastest SG kernel's time ({race.exact_cap:.0f} s), "
        f"which is what it takes to tell whether that kernel is {race.speedup:.0f}× faster; "
        "MALA for at most "
        f"{race.mala_cap:.0f} s. Each method runs in a process of its own, one after another; "
        "every `MCMC` gets the data as arguments (`jit_model_args=True`).",
        "",
        f"Reference: importance sampling from the Laplace approximation ({ref.num_draws} "
        f"draws; Pareto k̂ = {ref.khat:.2f}, reliable below 0.7; importance ESS {ref.ess:.0f}; "
        f"Monte Carlo error of its means ≤ {np.max(ref.mean_se / ref.sd):.3f} sd and of its "
        f"sds ≤ {100 * np.max(ref.sd_se / ref.sd):.1f} %); computing it took "
        f"{ref.seconds:.1f} s, and it is cached for later runs.",
        "",
        r"| method | seconds to target | reached | draws | max \|mean error\| (sd) | "
        "worst sd ratio | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in race.results:
        secs = f"{r.seconds_to_target:.1f}" if r.reached else f"> {r.seconds_to_target:.1f}"
        lines.append(f"| {r.method} | {secs} | {'yes' if r.reached else 'no'} | {r.draws:,} | "
                     f"{r.max_mean_error:.3f} | {r.worst_sd_ratio:.3f} | {r.note} |")
    return lines + ["", "![time to accuracy](time_to_accuracy.png)", "",
                    "The same numbers: `time_to_accuracy.csv`.", ""]


def _write_report(out, problem, rows, curves, gamma, settings, race=None):
    steps = ", ".join(
        f"{k} {settings['steps'][k]:.3g}{' (adapted)' if k in settings['adapted'] else ''}"
        for k in settings["kernels"] if np.isfinite(settings["steps"][k])
    )
    baselines = [k for k in settings["kernels"] if k in BASELINES]
    ksd_ref = rows["NUTS (reference)"]["KSD"]
    text = [
        "# SG-MCMC against exact methods",
        "",
        "**Verdict.** " + verdict_paragraph(rows, race),
        "",
        "## The bias of each kernel: German credit",
        "",
        problem.description + ".",
        "",
        f"SG kernels at their defaults (`step_size=None`: the step, the preconditioner and "
        f"control variates where they pay are chosen in warm-up): {settings['num_chains']} "
        f"vectorized chains x at least {settings['num_steps']} steps after "
        f"{settings['num_warmup']} warm-up steps, every {settings['thinning']}th kept, "
        f"continued until the smallest bulk ESS reached {settings['target_ess']} and the "
        f"largest split R-hat was at most {MAX_RHAT}, or {settings['max_steps']} steps (steps "
        "per chain: " + ", ".join(f"{k} {v}" for k, v in settings["taken"].items())
        + f"); step sizes {steps} (the chains' geometric mean); seed {settings['seed']}. "
        f"Reference: NUTS on the full data, 4 chains x {settings['reference_samples']} draws"
        + (" (read from the cache; its time is the time it took when computed)."
           if settings.get("ref_cached") else "."),
        "",
        "How to read the table. Errors are in reference posterior standard deviations, per "
        "scalar parameter: the worst standardised mean error and the sd ratio farthest from 1, "
        "each ± its Monte Carlo standard error (the draws' and the reference's, ESS-based). "
        f"*accurate* is yes when every mean is within {ACCURATE_MEAN} sd and every sd ratio "
        f"within [{ACCURATE_SD[0]}, {ACCURATE_SD[1]}]. *off beyond noise* counts the "
        "parameters whose mean or sd differs from the reference by more than 3 standard "
        "errors: with long runs even a harmless difference is resolved, so read it with the "
        f"errors' size. *converged* is NO when the split R-hat exceeds {MAX_RHAT} or the "
        f"smallest bulk ESS is below {MIN_ESS}: that row's errors are mixing error, not bias. "
        "The energy distance is between pooled draws and the reference (the NUTS row: between "
        "two halves of its own chains, the distance two exact samples of this size are apart). "
        "KSD is the IMQ kernel Stein discrepancy from the model's full-data score, which needs "
        f"no reference: exact draws of this size give about {_fmt(ksd_ref)} (the NUTS row); "
        "larger values mean draws from another law. *seconds* is each run's wall time, "
        "compilation included. Per-parameter numbers, with z-scores: `per_parameter.csv`.",
        "",
        format_table(rows, markdown=True),
        "",
        *_baseline_text(baselines),
        *_wenzel_note(settings),
        "",
        "![errors of every parameter](errors.png)",
        "",
        "Marginal densities of the 8 parameters farthest off (over all rows), the reference "
        "shaded:",
        "",
        "![marginals](marginals.png)",
        "",
    ]
    text += _race_text(race)
    text += _gamma_text(gamma)
    if curves:
        text += [
            "## Bias against the step size",
            "",
            "The sd ratio averaged over the parameters, |mean sd ratio − 1|, ± 2 standard "
            "errors (the parameters' combined as if independent); each step size run until its "
            "smallest bulk ESS reached the target. "
            "A curve that falls with h is the step's bias; one that stays flat as h → 0 is a "
            "bias of the stationary law (the Γ bias) or the noise floor of the run.",
            "",
            "![bias](bias.png)",
            "",
        ]
        for name, table in curves.items():
            text += [f"{name}:", "", _frame_markdown(table), ""]
    text += ["## Traces and rank plots", "",
             "The 4 parameters farthest off, per run: traces by chain and rank histograms by "
             "chain (flat when the chains sample the same law).", ""]
    text += [f"![{p.stem}]({p.name})" for p in sorted(out.glob("trace_*.png"))]
    (out / "report.md").write_text("\n".join(text) + "\n")


_BASELINE_NOTES = {
    "LMC": "LMC: Langevin Monte Carlo with Metropolis–Hastings (MALA) on the full data: "
    "NumPyro's `HMC` with one leapfrog step, its step ε adapted by dual averaging to an "
    "acceptance rate of 0.574 (the Langevin step is h = ε²/2). Exact up to Monte Carlo error; "
    "each step costs a full-data gradient.",
    "BayesByBackprop": "BayesByBackprop: mean-field normal VI (`AutoNormal`, Adam 1e-2 "
    "decaying to 1e-4, minibatch ELBO) for as many SVI steps as the kernels' first run; its "
    "rows are independent "
    "draws of the fitted normal (so its ESS is the number of draws and R-hat 1): its error is "
    "the mean-field approximation's, typically sds too small where parameters correlate.",
    "ConstantSGD": "ConstantSGD: SGD iterates at Mandt, Hoffman & Blei's (2017) KL-optimal "
    "constant learning rate, started at the MAP; their stationary Gaussian approximates the "
    "posterior (sds roughly right where the gradient noise is isotropic, not in general).",
}


def _baseline_text(baselines):
    return [f"- {_BASELINE_NOTES[k]}" for k in baselines] + ([""] if baselines else [])


def _wenzel_note(settings):
    if "WenzelSGLD" not in settings["kernels"] or len(settings["latent_sites"]) != 1:
        return []
    return [
        f"- WenzelSGLD: this model has one latent site ({settings['latent_sites'][0]}), so "
        "the layer-wise scale, normalised by the smallest site's, is exactly 1 and the kernel "
        "is SGLD (its row equals SGLD's when their step sizes agree)."
    ]


def _frame_markdown(frame):
    headers = [frame.index.name or "", *frame.columns]
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    for idx, row in frame.iterrows():
        lines.append("| " + " | ".join([_fmt(float(idx)), *(_fmt(v) for v in row.values)]) + " |")
    return "\n".join(lines)
