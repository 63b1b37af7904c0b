"""The layer-wise horseshoe scale's stability limit for SGLD: h < 1/n in the log parametrisation.

For a weight tensor of n weights with w ~ N(0, (m s)²) and u = log s, the potential has
n·u + Σw²/(2m²e^{2u}); its curvature along u is 2Σw²/(m s)², about 2n whatever s is (given
the weights, Σw² ≈ n m² s²). An Euler (SGLD) step is stable along u only if h·2n < 2, i.e.
h < 1/n. In Yu et al.'s parametrisation s = m·softplus(ρ) the curvature along ρ is
2n·(σ(ρ)/softplus(ρ))², 0.40·2n at the start (s = m) and about 2n/ρ² for large ρ.

Runs SGLD at Yu et al.'s learning rate (h = 0.25/50,000) on the 784-W-W-10 MNIST network with
the layer-wise horseshoe in both parametrisations, ``--steps`` steps keeping every 10th, and
prints per weight tensor: n, the predicted h × curvature at the start, and the scale's range
over the kept draws (with the number of draws flagged diverging).

    python benchmarks/investigations/horseshoe_scale_stability.py --widths 400 1200
"""

import argparse
import math
from functools import partial

import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld.models.bnn import mlp_classifier
from numpyro_sgrld.models.mnist import load_mnist

from numpyro_sgrld import SGLD, priors

NUM_TRAIN = 50_000
STEP = 0.25 / NUM_TRAIN


def predicted(n, parametrisation):
    """h × the curvature along the scale's unconstrained coordinate at the start (s = m)."""
    if parametrisation == "log":
        return STEP * 2 * n
    rho = math.log(math.e - 1)
    ratio = (1 / (1 + math.exp(-rho))) / math.log1p(math.exp(rho))
    return STEP * 2 * n * ratio**2


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--widths", type=int, nargs="+", default=[400, 1200])
    p.add_argument("--steps", type=int, default=300)
    args = p.parse_args(argv)
    X, y, _, _ = (jnp.asarray(a) for a in load_mnist(validation="drop"))
    print(
        "| W | parametrisation | tensor | n | predicted h × curvature (stable < 2) "
        "| scale s / m over the draws: min – max | diverging draws |"
    )
    print("|---|---|---|---|---|---|---|")
    for width in args.widths:
        sizes = [784, width, width, 10]
        for par in ("log", "softplus"):
            prior = priors.horseshoe("layer", parametrisation=par)
            model = partial(
                mlp_classifier, hidden=(width, width), prior=prior, subsample_size=100
            )
            kernel = SGLD(model, STEP, init_strategy=priors.init_to_unit_scales)
            mcmc = MCMC(
                kernel, num_warmup=0, num_samples=args.steps, thinning=10, progress_bar=False
            )
            mcmc.run(random.PRNGKey(0), X, y, extra_fields=("diverging",))
            samples = mcmc.get_samples()
            diverging = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
            for layer, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
                n = a * b
                s = np.asarray(samples[f"net/mlp/linear_{layer}/w_scale"])
                # our log form samples s/m; the softplus form records s itself
                ratio = s if par == "log" else s / (1.41 / math.sqrt(a))
                print(
                    f"| {width} | {par} | linear_{layer}/w | {n:,} | {predicted(n, par):.2f} "
                    f"| {ratio.min():.3g} – {ratio.max():.3g} | {diverging} of {len(s)} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
