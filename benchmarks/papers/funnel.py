"""Yu et al. (2023), Figure 2: the funnel with noisy gradients, one chain per metric.

    python benchmarks/papers/funnel.py  # 2,000,000 steps per sampler (as the paper)
    python benchmarks/papers/funnel.py --steps 200000       # quicker

Settings from the paper (their update theta + eta D grad log p + sqrt(2 eta) D^1/2 xi, so
h = eta): start (x, v) = (1, 1); identity 1e-3; RMSprop 2.5e-3 (decay 0.995, eps 0);
Monge 3e-3 (alpha2 0.1, decay 0.7, safeguard 1e3); Shampoo 3e-3 (decay 0.9995, eps 1e-6,
interval 1). Gradient noise N(0, I) on every coordinate (see numpyro_sgrld.models.funnel).

Prints, per sampler, the distance of the v marginal from its exact law Normal(0, sqrt(80)):
Wasserstein-1 (in units of v), the mean and sd of v, the Kolmogorov-Smirnov statistic, and
divergences; writes scatter plots (default docs/images/funnel.png).
"""

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from jax import random  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402
from numpyro_sgrld.models import funnel  # noqa: E402
from scipy import stats  # noqa: E402

from numpyro_sgrld import PSGLD, SGLD, MongeSGLD, ShampooSGLD  # noqa: E402

SAMPLERS = {
    "identity (SGLD)": lambda: SGLD(funnel.model, step_size=1e-3),
    "RMSprop (pSGLD)": lambda: PSGLD(
        funnel.model, step_size=2.5e-3, decay=0.995, eps=0.0, num_data=1
    ),
    "Monge": lambda: MongeSGLD(
        funnel.model, step_size=3e-3, alpha2=0.1, decay=0.7, max_drift_norm=1e3, num_data=1
    ),
    "Shampoo": lambda: ShampooSGLD(
        funnel.model, step_size=3e-3, decay=0.9995, eps=1e-6, update_interval=1, num_data=1
    ),
}


def v_distances(v):
    """Distances of draws of v from Normal(0, sqrt(80))."""
    v = np.sort(np.asarray(v, np.float64))
    n = v.size
    quantiles = funnel.V_SCALE * stats.norm.ppf((np.arange(n) + 0.5) / n)
    return {
        "W1": float(np.mean(np.abs(v - quantiles))),
        "mean": float(v.mean()),
        "sd": float(v.std()),
        "KS": float(stats.kstest(v, "norm", args=(0.0, funnel.V_SCALE)).statistic),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2_000_000)
    parser.add_argument("--thinning", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="docs/images/funnel.png")
    args = parser.parse_args(argv)

    noise = funnel.make_gradient_noise(seed=args.seed)
    exact = np.random.default_rng(1).normal(size=(args.steps // args.thinning, 2))
    exact_v = funnel.V_SCALE * exact[:, 1]
    exact_x = 2 + np.sqrt(np.logaddexp(exact_v, 0)) * exact[:, 0]
    fig, axes = plt.subplots(
        1, len(SAMPLERS) + 1, figsize=(4 * (len(SAMPLERS) + 1), 4), sharex=True, sharey=True
    )
    axes[0].scatter(exact_x, exact_v, s=1, alpha=0.3, color="k")
    axes[0].set_title("exact draws", fontsize=9)
    ref = v_distances(exact_v)
    print(f"{args.steps} steps per sampler, start (x, v) = (1, 1)\n")
    print(
        f"{'sampler':18s} {'W1(v)':>7s} {'mean v':>7s} {'sd v':>6s} {'KS':>6s} "
        f"{'NaN':>4s} {'diverging':>9s} {'seconds':>8s}"
    )
    print(
        f"{'exact (reference)':18s} {ref['W1']:7.3f} {ref['mean']:7.3f} {ref['sd']:6.3f} "
        f"{ref['KS']:6.3f}    -         -        -   (sd of v is {funnel.V_SCALE:.3f})"
    )
    for ax, (name, make) in zip(axes[1:], SAMPLERS.items()):
        mcmc = MCMC(
            make(), num_warmup=0, num_samples=args.steps, thinning=args.thinning, progress_bar=False
        )
        start = time.perf_counter()
        mcmc.run(
            random.PRNGKey(args.seed), noise, init_params={"x": jnp.array(1.0), "v": jnp.array(1.0)}
        )
        samples = jax.block_until_ready(mcmc.get_samples())
        seconds = time.perf_counter() - start
        x, v = np.asarray(samples["x"]), np.asarray(samples["v"])
        nans = int(np.sum(~np.isfinite(x)) + np.sum(~np.isfinite(v)))
        diverging = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
        d = v_distances(v[np.isfinite(v)])
        print(
            f"{name:18s} {d['W1']:7.3f} {d['mean']:7.3f} {d['sd']:6.3f} {d['KS']:6.3f} "
            f"{nans:4d} {diverging:9d} {seconds:8.1f}",
            flush=True,
        )
        ax.scatter(x, v, s=1, alpha=0.3)
        ax.set_title(f"{name}\nW1(v) = {d['W1']:.2f}", fontsize=9)
    for ax in axes:
        ax.set_xlabel("x")
    axes[0].set_ylabel("v")
    axes[0].set_xlim(-25, 30)
    axes[0].set_ylim(-30, 30)
    fig.tight_layout()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=100)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
