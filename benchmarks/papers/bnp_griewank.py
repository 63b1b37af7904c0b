"""Lange et al. (2023) §4.1, Fig. 3.1: the noisy Griewank curve fit, BNP vs SGLD vs pSGLD.

1000 inputs uniform on [-7.5, -5] x [-2.5, 15], label 1 + (x² + y²)/4000 - cos(x) cos(y √2/2)
+ noise; a 2-100-100-1 ReLU MLP (three dense layers, 100 hidden units) with a Gaussian
likelihood of the noise's sd and ``priors.gaussian()`` on the weights; minibatch 100 (10 steps per
epoch). BNP (ρ = 0.985, ε₁ = ε₂ = 1e-3), SGLD and pSGLD; BNP and SGLD at one common step, as in the
paper (see ``STEPS`` for why not the paper's numbers). Each method's prediction is the
mean over the draws of its last 50 epochs (one per epoch) after 500 and 1000 epochs; the ground
truth is SGLD run for 10,000 epochs, the mean prediction over its last 1000 epochs. The distance
is the RMSE between prediction surfaces on a 200 x 200 grid (40,000 test points) of the input
box, over ``--seeds`` independent runs (data and chain).

    python benchmarks/papers/bnp_griewank.py --out docs/results/bnp_griewank.json \
        --figure docs/images/bnp_griewank.png

Results are written after every run (``--out``), and runs already in it are skipped.
"""

import argparse
import json
import time
from pathlib import Path

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import MCMC

from numpyro_sgrld import BNPSGLD, PSGLD, SGLD, priors, random_haiku_module

N, BATCH, NOISE_SD = 1000, 100, 0.1
# the likelihood: the squared-error loss sum (y - f)², i.e. a Gaussian of variance 1/2
LIKELIHOOD_SD = 0.5 ** 0.5
BOX = ((-7.5, -5.0), (-2.5, 15.0))
NET = hk.without_apply_rng(hk.transform(lambda x: hk.nets.MLP([100, 100, 1])(x)))
#: The paper's learning rates (BNP, SGLD, pSGLD) are 1e-5, 1e-5, 5e-5. As steps h of our
#: potential (a sum over the data) SGLD and BNP diverge at 1e-5 (and at 1e-6 in the first
#: steps, while BNP's statistics still hold their start values μ = 0, σ = 1); ``--step`` sets
#: the common step of BNP and SGLD (default 1e-7, stable for both), pSGLD keeps 5e-5 (its
#: RMSprop scaling makes the step scale-free; 5e-5 is stable here).
STEPS = {"BNP": 1e-7, "SGLD": 1e-7, "pSGLD": 5e-5, "BNP ×10": 1e-6}
METHODS = {
    "BNP": lambda m, h: BNPSGLD(m, h, decay=0.985, eps1=1e-3, eps2=1e-3,
                                init_strategy=priors.init_to_unit_scales),
    "SGLD": lambda m, h: SGLD(m, h, init_strategy=priors.init_to_unit_scales),
    "pSGLD": lambda m, h: PSGLD(m, h, init_strategy=priors.init_to_unit_scales),
    # BNP at ten times the common step, where SGLD diverges (BNP's preconditioner makes the
    # step stable there): not in the paper
    "BNP ×10": lambda m, h: BNPSGLD(m, h, decay=0.985, eps1=1e-3, eps2=1e-3,
                                    init_strategy=priors.init_to_unit_scales),
}


def griewank(x, y):
    return 1 + (x ** 2 + y ** 2) / 4000 - np.cos(x) * np.cos(y * np.sqrt(2) / 2)


def data(seed):
    rng = np.random.default_rng(seed)
    X = np.stack([rng.uniform(*BOX[0], N), rng.uniform(*BOX[1], N)], 1)
    y = griewank(X[:, 0], X[:, 1]) + NOISE_SD * rng.normal(size=N)
    return jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)


def grid(n=200):
    gx, gy = np.meshgrid(np.linspace(*BOX[0], n), np.linspace(*BOX[1], n))
    return jnp.asarray(np.stack([gx.ravel(), gy.ravel()], 1), jnp.float32), gx, gy


def model(X, y=None):
    f = random_haiku_module("net", NET, (2, 2), priors.gaussian())
    with numpyro.plate("data", X.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("y", dist.Normal(f(X[idx])[:, 0], LIKELIHOOD_SD), obs=y[idx])


def mean_prediction(samples, Xg):
    def one(p):
        params = {}
        for site, value in p.items():
            _, *module, name = site.split("/")
            params.setdefault("/~/".join(module), {})[name] = value
        return NET.apply(params, Xg)[:, 0]

    return jax.lax.map(one, samples).mean(0)


def run(method, seed, epochs, keep):
    X, y = data(seed)
    steps = N // BATCH
    mcmc = MCMC(METHODS[method](model, STEPS[method]), num_warmup=(epochs - keep) * steps,
                num_samples=keep * steps, thinning=steps, progress_bar=False)
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), X, y)
    samples = mcmc.get_samples()
    seconds = time.perf_counter() - start
    ok = all(bool(jnp.isfinite(v).all()) for v in samples.values())
    return samples, seconds, ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--step", type=float, default=STEPS["SGLD"],
                    help="the common step of BNP and SGLD (and of the ground truth)")
    ap.add_argument("--truth-epochs", type=int, default=10_000)
    ap.add_argument("--out", default="docs/results/bnp_griewank.json")
    ap.add_argument("--figure", default="docs/images/bnp_griewank.png")
    args = ap.parse_args()
    STEPS["BNP"] = STEPS["SGLD"] = args.step
    STEPS["BNP ×10"] = 10 * args.step
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    Xg, gx, gy = grid()
    surfaces = {}
    for seed in range(args.seeds):
        key = f"truth/{seed}"
        if all(k in results for k in [key] + [f"{m}/{e}/{seed}" for m in METHODS
                                             for e in (500, 1000)]) and seed > 0:
            continue
        samples, seconds, ok = run("SGLD", seed, args.truth_epochs, 1000)
        truth = np.asarray(mean_prediction(samples, Xg))
        surfaces[("truth", seed)] = truth
        results[key] = {"seconds": seconds, "finite": ok,
                        "rmse_to_function": float(np.sqrt(np.mean(
                            (truth - griewank(np.asarray(Xg[:, 0]), np.asarray(Xg[:, 1]))) ** 2)))}
        for method in METHODS:
            for epochs in (500, 1000):
                samples, seconds, ok = run(method, seed, epochs, 50)
                pred = np.asarray(mean_prediction(samples, Xg))
                surfaces[(method, epochs, seed)] = pred
                results[f"{method}/{epochs}/{seed}"] = {
                    "seconds": seconds, "finite": ok,
                    "rmse_to_truth": float(np.sqrt(np.mean((pred - truth) ** 2))),
                }
                print(method, epochs, seed, results[f"{method}/{epochs}/{seed}"], flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
    figure(surfaces, gx, gy, Path(args.figure))
    table(results, args.seeds)


def table(results, seeds):
    print("| method | epochs | RMSE to the ground truth (mean ± sd over seeds) |")
    print("|---|---|---|")
    for method in METHODS:
        for epochs in (500, 1000):
            r = [results[f"{method}/{epochs}/{s}"]["rmse_to_truth"] for s in range(seeds)]
            print(f"| {method} | {epochs} | {np.mean(r):.3f} ± {np.std(r, ddof=1):.3f} |")


def figure(surfaces, gx, gy, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 5, figsize=(16, 6.5), sharex=True, sharey=True)
    truth = surfaces[("truth", 0)].reshape(gx.shape)
    lim = (truth.min(), truth.max())
    for row, epochs in enumerate((500, 1000)):
        panels = [("ground truth (SGLD, 10,000 epochs)", truth)] + [
            (f"{m}, {epochs} epochs", surfaces[(m, epochs, 0)].reshape(gx.shape))
            for m in METHODS
        ]
        for ax, (title, z) in zip(axes[row], panels):
            im = ax.pcolormesh(gx, gy, z, vmin=lim[0], vmax=lim[1], shading="auto")
            ax.set_title(title, fontsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel("y")
    for ax in axes[1]:
        ax.set_xlabel("x")
    fig.colorbar(im, ax=axes, shrink=0.8, label="mean prediction")
    fig.suptitle("Noisy Griewank: mean prediction over the last 50 epochs (seed 0; "
                 f"h = {STEPS['SGLD']:g} for BNP and SGLD, {STEPS['pSGLD']:g} for pSGLD)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()
