"""The defaults a user gets: every preset as ``K(model)``, ``num_warmup=2000``,
``num_samples=20000``, 4 vectorised chains, nothing else set, on NumPyro's own sampling loop.

Each cell is *accurate* (max |mean error| <= 0.15 reference sd and every sd ratio in
[0.87, 1.15]; for the network, a test negative log-likelihood within two standard errors of
the best the step-size grid of ``benchmarks/accuracy/step_size_adaptation.py`` found), and
*warned* or not (the run itself warned at its end: its verdict says the draws cannot be
trusted). An inaccurate run that did not warn is a **miss**, an accurate run that warned a
**false alarm**. One JSON line per cell is appended to ``--out`` as it finishes (a rerun skips
the cells there), and ``--table`` prints the Markdown table of a results file with the
confusion matrix:

    python benchmarks/accuracy/defaults.py --out docs/results/defaults.jsonl
    python benchmarks/accuracy/defaults.py --problems german_credit --kernels SGLD PSGLD
    python benchmarks/accuracy/defaults.py --table docs/results/defaults.jsonl
    python benchmarks/accuracy/defaults.py --kernels PSGLD PSGLD+exact --problems german_credit
    python benchmarks/accuracy/defaults.py --chains 1 --out docs/results/verdict_grid.jsonl
    python benchmarks/accuracy/defaults.py --wrong --out docs/results/verdict_grid.jsonl

``K+exact`` (or ``K+hutchinson``) is ``K(model, correction="exact")``: the Γ-corrected preset.
``--chains 1`` runs NumPyro's default of one chain. ``--wrong`` runs the deliberately wrong
cells of :data:`WRONG` instead (given steps 3x and 10x the adapted one, too short runs, SGNHT
at a small given time step, uncorrected adaptive metrics where their Γ bias is large), each
labelled accurate or not by the same rule: the verdict must warn on every inaccurate one.

Problems:

- ``conjugate``: linear regression with a Gaussian prior and known noise (N = 2,000, 5
  weights, minibatch 100): the exact posterior.
- ``german_credit``: logistic regression on German credit (N = 1,000, 25 weights,
  minibatch 100); NUTS on ``full_batch(model)``, cached.
- ``sparse_german_credit``: the same data under a Gamma-scale shrinkage prior (global scale,
  25 local scales, 25 weights: 51 parameters; the inference gym's sparse logistic
  regression), minibatch 100; NUTS reference, cached.
- ``logistic_100k``: a synthetic logistic regression, N = 100,000, 28 weights, minibatch
  1,000; NUTS reference, cached.
- ``diamonds``: posteriordb's ``diamonds-diamonds`` (N = 5,000, 26 parameters, minibatch
  100): the published reference moments (needs ``../shared/data``).
- ``digits_bnn``: a 64-100-10 horseshoe MLP on scikit-learn's digits (minibatch 100): the
  ensemble's test NLL; its draws are kept every 20 steps (memory), the chain is the same.

The reference means and sds of the first four come from NUTS, 4 chains x 5,000 draws on the
full data (their own Monte Carlo error is well below the 0.15 sd and 13 % bands).
"""

import argparse
import json
import time
import warnings
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC, NUTS

import numpyro_sgrld as ns

PRESETS = ["SGLD", "SGHMC", "PSGLD", "MongeSGLD", "ShampooSGLD", "WenzelSGLD", "AdamSGLD",
           "BAOAB", "SGNHT", "BADODAB", "CyclicalSGLD", "CyclicalSGHMC", "BNPSGLD"]
MAX_MEAN_ERROR = 0.15
SD_RATIO = (0.87, 1.15)
WARNED = ("cannot be trusted",)

#: The deliberately wrong cells: ``(problem, name, settings)``. ``settings`` are keyword
#: arguments of the preset named before the ``@`` (``step_x``: that multiple of the adapted
#: step of the problem's default cell, given as ``step_size``; ``num_samples``, ``chains``:
#: the run's).
WRONG = [
    *[(p, f"{k}@{x}x", {"step_x": x}) for p in ("conjugate", "german_credit", "logistic_100k")
      for k in ("SGLD", "SGHMC") for x in (3, 10)],
    ("german_credit", "SGLD@1e-3", {"step_size": 1e-3}),
    ("german_credit", "SGLD@1e-3/1chain", {"step_size": 1e-3, "chains": 1}),
    ("german_credit", "SGLD@3e-4", {"step_size": 3e-4}),
    ("german_credit", "SGLD@short", {"num_samples": 200}),
    ("german_credit", "MongeSGLD@short/1chain", {"num_samples": 200, "chains": 1}),
    ("logistic_100k", "SGHMC@short", {"num_samples": 100}),
    ("conjugate", "SGNHT@1e-3", {"step_size": 1e-3}),
    ("conjugate", "SGNHT@3e-3", {"step_size": 3e-3}),
    ("gaussian_1d", "PSGLD@eps1", {"step_size": 1e-3, "decay": 0.9, "eps": 1.0}),
    ("gaussian_1d", "MongeSGLD@alpha1", {"step_size": 1e-3, "decay": 0.9, "alpha2": 1.0}),
    ("gaussian_1d", "AdamSGLD@1e-3", {"step_size": 1e-3, "beta1": 0.5, "beta2": 0.9}),
]


def conjugate():
    from numpyro_sgrld.models import linear_regression as lr

    X, y, _ = lr.make_data(seed=0, num_data=2000, num_features=5)
    exact = lr.exact_posterior(X, y)
    return dict(model=partial(lr.model, subsample_size=100), args=(X, y),
                reference={"w": (np.asarray(exact.mean), np.asarray(exact.sd))})


def german_credit():
    from numpyro_sgrld.models import logistic_regression as lr

    X, y = lr.load_german_credit()
    return dict(model=partial(lr.model, subsample_size=100), args=(X, y))


def sparse_logistic(X, y=None, subsample_size=None):
    r"""Logistic regression with Gamma-scale shrinkage: :math:`\tau \sim \Gamma(1/2, 1/2)`,
    :math:`\lambda_j \sim \Gamma(1/2, 1/2)`, :math:`\beta_j \sim \mathcal N(0, 1)`, logits
    :math:`X (\tau \lambda \odot \beta)`."""
    d = X.shape[1]
    tau = numpyro.sample("tau", dist.Gamma(0.5, 0.5))
    lam = numpyro.sample("lam", dist.Gamma(0.5, 0.5).expand([d]).to_event(1))
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([d]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ (tau * lam * beta)),
                       obs=None if y is None else y[idx])


def sparse_german_credit():
    from numpyro_sgrld.models import logistic_regression as lr

    X, y = lr.load_german_credit()
    return dict(model=partial(sparse_logistic, subsample_size=100), args=(X, y))


def logistic_100k_model(X, y, subsample_size=1000):
    d = X.shape[1]
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([d]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def logistic_100k():
    n, d = 100_000, 28
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, d)) * np.linspace(0.3, 2.0, d)
    X[:, -1] = 1.0
    w = rng.normal(size=d) * 0.5
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ w)))).astype(np.int32)
    return dict(model=logistic_100k_model, args=(jnp.asarray(X, jnp.float32), jnp.asarray(y)))


def diamonds():
    from numpyro_sgrld.models import diamonds as dm

    X, y, moments = dm.load()
    reference = {k: (np.asarray(v["mean"]), np.asarray(v["sd"])) for k, v in moments.items()}
    return dict(model=partial(dm.model, subsample_size=100),
                args=(jnp.asarray(X), jnp.asarray(y)), reference=reference)


def digits_bnn():
    from numpyro_sgrld.models.bnn import load_digits, mlp_classifier

    from numpyro_sgrld import priors
    from numpyro_sgrld.analysis.predictive import classification_metrics

    X_train, y_train, X_test, y_test = load_digits()
    model = partial(mlp_classifier, hidden=(100,), prior=priors.horseshoe("layer"),
                    subsample_size=100)

    def evaluate(mcmc):
        samples = mcmc.get_samples()
        out = classification_metrics(model, samples, X_test, y_test)
        point = -np.log(out["probs"][np.arange(len(y_test)), np.asarray(y_test)])
        return dict(test_nll=float(point.mean()), test_nll_se=float(point.std() /
                                                                   np.sqrt(point.size)),
                    accuracy=float(out["accuracy"]))

    return dict(model=model, args=(X_train, y_train), evaluate=evaluate, thinning=20)


def sblrc_blr():
    """posteriordb's ``sblrc-blr`` (5 coefficients and ``sigma``, N = 100, minibatch 50; the
    published reference moments): where item 2 of the acceptance measures the corrections."""
    from numpyro_sgrld.models import sblrc_blr as sb

    X, y, moments = sb.load()
    reference = {k: (np.asarray(v["mean"]), np.asarray(v["sd"])) for k, v in moments.items()}
    return dict(model=partial(sb.model, subsample_size=50), args=(X, y), reference=reference)


def gaussian_1d():
    """:math:`\theta \\sim N(0, 1)` with exact gradients: where an adaptive metric's
    dropped Γ changes the law most (docs/bias.md); 200,000 steps a chain (its mixing time
    at h = 1e-3 is 1,000 steps)."""

    def model():
        numpyro.sample("theta", dist.Normal(0.0, 1.0))

    return dict(model=model, args=(), reference={"theta": (np.zeros(()), np.ones(()))},
                num_samples=200_000)


#: Problems outside the acceptance grid, run when named with ``--problems``.
EXTRA = {"sblrc_blr": sblrc_blr, "gaussian_1d": gaussian_1d}

PROBLEMS = {"conjugate": conjugate, "german_credit": german_credit,
            "sparse_german_credit": sparse_german_credit, "logistic_100k": logistic_100k,
            "diamonds": diamonds, "digits_bnn": digits_bnn}


def moments(samples):
    """``{site: (mean, sd)}`` over the draws (no chain axis), in float64: NumPy sums a float32
    array along its first axis in a float32 running total, whose rounding at 80,000 draws of a
    parameter with mean/sd = 1,000 shifts the mean by a third of an sd."""
    return {k: (np.asarray(v, np.float64).mean(0), np.asarray(v, np.float64).std(0))
            for k, v in samples.items()}


def nuts_reference(name, problem, cache):
    """NUTS on the full data, 4 chains x 5,000 draws, cached as ``defaults_reference_*.npz``."""
    path = cache / f"defaults_reference_{name}.npz"
    if not path.exists():
        m = MCMC(NUTS(ns.full_batch(problem["model"])), num_warmup=1000, num_samples=5000,
                 num_chains=4, chain_method="vectorized", progress_bar=False)
        m.run(jax.random.PRNGKey(1), *problem["args"])
        ref = moments(m.get_samples())
        np.savez(path, **{f"{k}__mean": v[0] for k, v in ref.items()},
                 **{f"{k}__sd": v[1] for k, v in ref.items()})
    data = np.load(path)
    sites = {k.rsplit("__", 1)[0] for k in data.files}
    return {k: (data[f"{k}__mean"], data[f"{k}__sd"]) for k in sites}


def grid_best(results=Path("docs/results/step_size_adaptation_bnn.jsonl")):
    """The lowest test NLL (and its standard error) of the step-size grid on the network."""
    best = (np.inf, 0.0)
    for line in results.read_text().splitlines():
        row = json.loads(line)
        for run in [row["adapted"], *row["grid"]]:
            if run.get("total", np.inf) < best[0]:
                best = (run["total"], run["total_se"])
    return best


def errors(samples, reference):
    """The largest |mean error| in reference sds and the extreme sd ratios."""
    mean_err, ratios = [], []
    for k, (m, s) in reference.items():
        x = np.asarray(samples[k], np.float64).reshape(-1, *np.shape(m))  # see moments
        mean_err.append(np.ravel(np.abs(x.mean(0) - m) / s))
        ratios.append(np.ravel(x.std(0) / s))
    mean_err, ratios = np.concatenate(mean_err), np.concatenate(ratios)
    return dict(max_mean_error_sd=float(mean_err.max()), sd_ratio_min=float(ratios.min()),
                sd_ratio_max=float(ratios.max()),
                mean_error_sd=np.round(mean_err, 4).tolist(), sd_ratio=np.round(ratios, 4).tolist(),
                accurate=bool(mean_err.max() <= MAX_MEAN_ERROR and np.all(
                    (ratios >= SD_RATIO[0]) & (ratios <= SD_RATIO[1]))))


def per_coordinate(mcmc, problem):
    """Each reference coordinate's split R-hat and bulk ESS from the kept draws (in the order
    of :func:`errors`' lists), so that the verdict's rules can be studied on the record."""
    from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

    draws = mcmc.get_samples(group_by_chain=True)
    rhat, ess = [], []
    for k in problem["reference"]:
        x = np.asarray(draws[k], np.float64)
        x = x.reshape(x.shape[0], x.shape[1], -1)
        for j in range(x.shape[2]):
            ok = x.shape[1] >= 4 and np.all(np.isfinite(x[:, :, j])) and np.ptp(x[:, :, j]) > 0
            rhat.append(round(float(split_gelman_rubin(x[:, :, j])), 5) if ok else None)
            ess.append(round(float(ns.verdict.capped_ess(effective_sample_size(x[:, :, j]),
                                                         x[:, :, j].size)), 1) if ok else None)
    return dict(rhat=rhat, ess=ess)


def build(kernel_name, model, settings=None):
    """``K(model)``; ``"K+exact"`` / ``"K+hutchinson"``: ``K(model, correction=...)``;
    ``"K@..."``: ``K(model, **settings)``."""
    name, _, correction = kernel_name.split("@")[0].partition("+")
    kw = {"correction": correction} if correction else {}
    return getattr(ns, name)(model, **kw, **(settings or {}))


def cell(kernel_name, problem, chains=4, settings=None, num_samples=None):
    kernel = build(kernel_name, problem["model"], settings)
    mcmc = MCMC(kernel, num_warmup=2000,
                num_samples=num_samples or problem.get("num_samples", 20_000),
                num_chains=chains, thinning=problem.get("thinning", 1),
                chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = time.perf_counter()
        mcmc.warmup(jax.random.PRNGKey(0), *problem["args"])
        jax.block_until_ready(mcmc.post_warmup_state)
        warm = time.perf_counter() - t
        mcmc.run(mcmc.post_warmup_state.rng_key, *problem["args"])
        jax.block_until_ready(mcmc.get_samples())
        jax.effects_barrier()
        total = time.perf_counter() - t
    said = [str(w.message) for w in caught if any(s in str(w.message) for s in WARNED)]
    steps = np.asarray(mcmc.last_state.step_size, np.float64)
    row = {"kernel": kernel_name, "warned": bool(said), "warning": said[0][:400] if said else "",
           "step_size": steps.tolist(), "step_spread": float(steps.max() / steps.min()),
           "warmup_seconds": warm, "total_seconds": total}
    gs = mcmc.last_state.gradient_state
    row["control_variates"] = (bool(np.all(np.asarray(gs.active)))
                               if hasattr(gs, "active") else None)
    if "evaluate" in problem:
        row.update(problem["evaluate"](mcmc))
        best, best_se = problem["best"]
        row["accurate"] = bool(row["test_nll"] <= best + 2 * np.hypot(row["test_nll_se"],
                                                                       best_se))
        row["grid_best_nll"] = best
        # the evaluation batch's log-likelihood, as check(mcmc) judges the kept draws
        v = ns.check(mcmc, warn=False)
        row.update(evaluation_rhat=v.max_rhat, evaluation_ess=v.min_ess,
                   check_trusted=v.trusted)
    else:
        row.update(errors(mcmc.get_samples(), problem["reference"]))
        v = ns.check(mcmc, warn=False)
        row.update(max_rhat=v.max_rhat, min_ess=v.min_ess, **per_coordinate(mcmc, problem))
    t = ns.verdict.temperatures_of(mcmc.last_state, kernel)
    if t is not None:
        departed = ns.equipartition.departures(t)
        row.update(temperature=t.overall, temperature_se=t.overall_se,
                   temperature_min=float(np.min(t.estimate)),
                   temperature_max=float(np.max(t.estimate)),
                   temperature_departures=[(n, round(x, 4), round(e, 4))
                                           for n, x, e in departed[:3]],
                   readings=np.round(t.estimate, 4).tolist(),
                   readings_se=np.round(t.se, 4).tolist())
    row["chains"] = chains
    row["silent_failure"] = not row["accurate"] and not row["warned"]
    return row


def table(paths):
    rows = [json.loads(line) for path in paths for line in Path(path).read_text().splitlines()
            if line]
    print("| problem | kernel | chains | accurate | warned | max mean err (sd) | sd ratios | "
          "equipartition T [min, max] | R-hat | min ESS | step spread | total s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "refused" in r:
            print(f"| {r['problem']} | {r['kernel']} | {r.get('chains', 4)} | refuses "
                  f"`K(model)`: {r['refused'][:120]} |||||||||")
            continue
        if "test_nll" in r:
            err = f"test NLL {r['test_nll']:.3f} ± {r['test_nll_se']:.3f}"
            ratios, rhat, ess = f"(grid best {r['grid_best_nll']:.3f})", "–", "–"
        else:
            err = f"{r['max_mean_error_sd']:.2f}"
            ratios = f"{r['sd_ratio_min']:.2f}–{r['sd_ratio_max']:.2f}"
            rhat, ess = f"{r['max_rhat']:.3f}", f"{r['min_ess']:.0f}"
        flag = "**silent**" if r["silent_failure"] else ("yes" if r["warned"] else "no")
        temp = (f"{r['temperature']:.3f} [{r['temperature_min']:.2f}, "
                f"{r['temperature_max']:.2f}]" if "temperature" in r else "–")
        print(f"| {r['problem']} | {r['kernel']} | {r.get('chains', 4)} | "
              f"{'yes' if r['accurate'] else 'no'} | {flag} | {err} | {ratios} | {temp} | "
              f"{rhat} | {ess} | {r['step_spread']:.2f} | {r['total_seconds']:.0f} |")
    n = len(rows)
    accurate = sum(r["accurate"] for r in rows)
    silent = sum(r["silent_failure"] for r in rows)
    print(f"\n{n} cells: {accurate} accurate ({accurate / max(n, 1):.0%}), "
          f"{sum(r['warned'] for r in rows)} warned, {silent} silent failures.")
    m = confusion(rows)
    print("\n| | quiet | warned |\n|---|---|---|")
    print(f"| accurate | {m['accurate_quiet']} | {m['accurate_warned']} |")
    print(f"| inaccurate | {m['inaccurate_quiet']} | {m['inaccurate_warned']} |")
    print(f"\nFalse alarms: {m['accurate_warned']} of {m['accurate']} accurate runs "
          f"({m['false_alarm_rate']:.1%}); misses: {m['inaccurate_quiet']} of "
          f"{m['inaccurate']} inaccurate runs.")


def confusion(rows):
    """The verdict as a classifier over result rows (refused cells left out): the four
    counts, the accurate and inaccurate totals and the false-alarm rate."""
    rows = [r for r in rows if "refused" not in r]
    m = {f"{a}_{w}": sum(1 for r in rows if r["accurate"] == (a == "accurate")
                         and r["warned"] == (w == "warned"))
         for a in ("accurate", "inaccurate") for w in ("quiet", "warned")}
    m["accurate"] = m["accurate_quiet"] + m["accurate_warned"]
    m["inaccurate"] = m["inaccurate_quiet"] + m["inaccurate_warned"]
    m["false_alarm_rate"] = m["accurate_warned"] / max(m["accurate"], 1)
    return m


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS),
                        choices=list(PROBLEMS) + list(EXTRA))
    parser.add_argument("--kernels", nargs="+", default=PRESETS)
    parser.add_argument("--out", type=Path, default=Path("docs/results/defaults.jsonl"))
    parser.add_argument("--cache", type=Path, default=Path("docs/results"))
    parser.add_argument("--table", type=Path, nargs="+", default=None,
                        help="print the table of these results files (rows of all of them)")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--wrong", action="store_true",
                        help="the deliberately wrong cells (WRONG) of the named problems")
    a = parser.parse_args()
    if a.table is not None:
        return table(a.table)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    if a.out.exists():
        rows = [json.loads(line) for line in a.out.read_text().splitlines() if line]
    done = {(r["problem"], r["kernel"], r.get("chains", 4)) for r in rows}
    if a.wrong:
        return run_wrong(a, rows, done)
    for name in a.problems:
        if all((name, k, a.chains) in done for k in a.kernels):
            continue
        problem = load(name, a.cache)
        for k in a.kernels:
            if (name, k, a.chains) in done:
                continue
            try:
                row = {"problem": name, **cell(k, problem, a.chains)}
            except (TypeError, ValueError) as e:  # a preset that refuses K(model), saying why
                row = {"problem": name, "kernel": k, "refused": str(e), "accurate": False,
                       "warned": True, "silent_failure": False}
            print(json.dumps(row), flush=True)
            with a.out.open("a") as f:
                f.write(json.dumps(row) + "\n")


def load(name, cache):
    """A problem with its reference."""
    problem = {**PROBLEMS, **EXTRA}[name]()
    if "evaluate" in problem:
        problem["best"] = grid_best()
    elif "reference" not in problem:
        problem["reference"] = nuts_reference(name, problem, cache)
    return problem


def run_wrong(a, rows, done):
    """The :data:`WRONG` cells of ``a.problems`` (``gaussian_1d``'s with ``conjugate``'s),
    appended to ``a.out``; a ``step_x`` cell reads the adapted step of the problem's default
    cell with 4 chains in ``a.out`` (run first)."""
    loaded = {}
    for name, label, settings in WRONG:
        settings = dict(settings)
        chains = settings.pop("chains", 4)
        named = name in a.problems or (name == "gaussian_1d" and "conjugate" in a.problems)
        if not named or (name, label, chains) in done:
            continue
        if "step_x" in settings:
            base = [r for r in rows if r["problem"] == name and r.get("chains", 4) == 4
                    and r["kernel"] == label.split("@")[0] and "step_size" in r]
            if not base:
                print(f"skipped {name} {label}: no default cell to read the step from")
                continue
            settings["step_size"] = settings.pop("step_x") * float(
                np.median(base[-1]["step_size"]))
        num_samples = settings.pop("num_samples", None)
        if name not in loaded:
            loaded[name] = load(name, a.cache)
        row = {"problem": name, "wrong": True, "settings": settings,
               **cell(label, loaded[name], chains, settings, num_samples)}
        row["kernel"] = label
        print(json.dumps(row), flush=True)
        with a.out.open("a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
