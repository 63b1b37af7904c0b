"""UCI regression with Bayesian MLPs (one hidden layer of 50 ReLU units) on the 20 published
train/test splits, beside the published MC-dropout results (Gal & Ghahramani 2016).

For each data set, prior (He-scaled Gaussian, layer-wise horseshoe) and sampler (SGHMC, pSGLD),
one chain per split; reports the mean ± standard error over splits of the test log-likelihood and
RMSE in the target's original units. Needs ``../shared/data/uci`` (or ``$NUMPYRO_SGRLD_DATA``).

    python benchmarks/papers/uci_regression.py --out docs/uci_results.md
"""

import argparse
import tempfile
import time
from functools import partial

import jax
import numpy as np
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld.models.bnn import mlp_regressor
from numpyro_sgrld.models.uci import load_uci_split, published_results

from numpyro_sgrld import PSGLD, SGHMC, predict_sites, priors, regression_metrics

DATASETS = ("concrete", "energy", "yacht", "wine-quality-red")
PRIORS = {"Gaussian": priors.gaussian, "horseshoe": partial(priors.horseshoe, "layer")}
# every horseshoe scale and the noise scale sigma start at 1 (the targets are standardised);
# drawn from its prior, sigma can start near 0, where SGHMC's first steps blow up
INIT = partial(priors.init_to_unit_scales, suffixes=(*priors.HORSESHOE_SUFFIXES, "sigma"))
# step sizes h (per full-data potential); minibatch 32
SAMPLERS = {
    "SGHMC": partial(SGHMC, step_size=1e-6, friction=0.1),
    "pSGLD": partial(PSGLD, step_size=1e-5),
}


def run_dataset(name, splits, args):
    """Rows ``(prior, sampler) -> {"test_ll": [...], "rmse": [...]}`` over ``splits``."""
    rows = {}
    for prior_name, prior in PRIORS.items():
        model = partial(mlp_regressor, hidden=(50,), prior=prior(), subsample_size=args.batch)
        for sampler_name, sampler in SAMPLERS.items():
            # one MCMC object per configuration: same shapes across splits, so with
            # jit_model_args the compiled chain is reused
            mcmc = MCMC(
                sampler(model, init_strategy=INIT),
                num_warmup=args.warmup,
                num_samples=args.samples,
                thinning=args.thinning,
                progress_bar=False,
                jit_model_args=True,
            )
            out = {"test_ll": [], "rmse": [], "diverged": 0, "failed": []}
            start = time.perf_counter()
            for split in splits:
                # NumPyro compiles its sampling loop anew on every run; free the executables
                # (the persistent cache makes the next compilation cheap), or hundreds of them
                # exhaust the process's memory maps
                jax.clear_caches()
                data = load_uci_split(name, split)
                mcmc.run(
                    random.PRNGKey(split), data.X_train, data.y_train, extra_fields=("diverging",)
                )
                samples = mcmc.get_samples()
                diverging = np.asarray(mcmc.get_extra_fields()["diverging"])
                out["diverged"] += int(diverging.sum())
                if diverging.any():
                    # a rejected step leaves the chain where it was; a recorded draw flagged
                    # diverging means the chain sat at a point with a non-finite gradient
                    out["failed"].append(split)
                    continue
                mean = predict_sites(model, samples, data.X_test, ["mean"])["mean"]
                m = regression_metrics(
                    mean * data.y_std + data.y_mean,
                    np.asarray(samples["sigma"])[:, None] * data.y_std,
                    data.y_test,
                )
                out["test_ll"].append(m["test_ll"])
                out["rmse"].append(m["rmse"])
            out["seconds"] = time.perf_counter() - start
            rows[prior_name, sampler_name] = out
            print(
                name,
                prior_name,
                sampler_name,
                summary(out["test_ll"]),
                summary(out["rmse"]),
                f"{out['seconds']:.0f}s",
                "failed:",
                failed(out),
                flush=True,
            )
    return rows


def summary(values, digits=2):
    v = np.asarray(values, float)
    se = v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else float("nan")
    return f"{v.mean():.{digits}f} ± {se:.{digits}f}"


def failed(out):
    return ", ".join(map(str, out["failed"])) if out["failed"] else "none"


def table(results, splits, args):
    lines = [
        f"Splits {splits[0]}-{splits[-1]} ({len(splits)}), 50 hidden units, minibatch "
        f"{args.batch}, {args.warmup} burn-in + {args.samples} steps, thinning "
        f"{args.thinning}; mean ± standard error over the splits whose chain finished (a failed "
        "split recorded draws flagged `diverging`: the chain reached a point with a non-finite "
        "gradient and stayed there; it is left out of the mean).\n",
        "| data set | prior | sampler | test LL | RMSE | failed splits "
        "| MC dropout test LL | MC dropout RMSE |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, rows in results.items():
        pub = published_results(name)
        pub_ll = summary(np.asarray(pub["test_ll"])[list(splits)])
        pub_rmse = summary(np.asarray(pub["test_rmse"])[list(splits)])
        for (prior_name, sampler_name), out in rows.items():
            lines.append(
                f"| {name} | {prior_name} | {sampler_name} | {summary(out['test_ll'])} "
                f"| {summary(out['rmse'])} | {failed(out)} | {pub_ll} | {pub_rmse} |"
            )
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=list(DATASETS))
    p.add_argument("--splits", type=int, default=20, help="use splits 0 .. n-1")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--warmup", type=int, default=10_000)
    p.add_argument("--samples", type=int, default=10_000)
    p.add_argument("--thinning", type=int, default=100)
    p.add_argument("--out", default=None, help="write the Markdown table here")
    args = p.parse_args(argv)
    # a persistent compilation cache makes the repeated runs of one configuration cheap
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="uci-jax-cache-"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)

    splits = list(range(args.splits))
    results = {name: run_dataset(name, splits, args) for name in args.datasets}
    text = table(results, splits, args)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
