"""Chen, Fox & Guestrin (2014), Fig. 1 (Bühler's survey, Fig. 2): naive SGHMC does not sample the
target; SGHMC with friction and HMC with Metropolis–Hastings do.

U(θ) = −2θ² + θ⁴ with N(0, 4) gradient noise (``numpyro_sgrld.models.double_well``). Three
samplers, each against the exact density:

- **HMC** with Metropolis–Hastings: NumPyro's ``HMC`` on the exact potential, step ε = 0.1, 50
  leapfrog steps per proposal, no adaptation;
- **naive SGHMC** (``SGHMC(..., naive=True)``): Hamiltonian dynamics with the noisy gradient, no
  friction, no injected noise, momentum redrawn every 50 steps;
- **SGHMC**: friction C = 4 (α = εC = 0.4 in our parametrisation) and the noise estimate
  B̂ = εV/2 of the known gradient-noise variance V = 4 (β̂ = hV/2 = 0.02), momentum redrawn every 50
  steps as for the naive version.

The SG samplers use ε = 0.1, i.e. the learning rate h = ε² = 0.01 of our SGHMC
(:class:`numpyro_sgrld.SGHMC`). Our choices where the paper is silent: friction, resampling
interval, chain lengths. For every sampler: the Kolmogorov–Smirnov distance ``sup|F̂ − F|`` and
the Wasserstein-1 distance ``∫|F̂ − F|`` to the exact law, and E[θ²], E[θ⁴] with their Monte
Carlo standard errors (ArviZ's ESS-based MCSE, over 4 chains) and z-scores against the exact
moments (quadrature).

    python benchmarks/papers/chen_double_well.py --out docs/results/chen_double_well.json \
        --figure docs/images/chen_double_well.png
"""

import argparse
import json
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import HMC, MCMC
from numpyro_sgrld.models import double_well

from numpyro_sgrld import SGHMC

EPS = 0.1
RESAMPLE_EVERY = 50
FRICTION_C = 4.0


def _sg_kernel(name, noise):
    h = EPS**2
    if name == "naive SGHMC":
        return SGHMC(double_well.model, step_size=h, naive=True,
                     resample_momentum_every=RESAMPLE_EVERY, initial_momentum="random",
                     num_data=1)
    variance = double_well.noise_variance(noise)
    return SGHMC(double_well.model, step_size=h, friction=EPS * FRICTION_C,
                 noise_estimate=h * variance / 2, resample_momentum_every=RESAMPLE_EVERY,
                 initial_momentum="random", num_data=1)


def run_sampler(name, num_steps, chains, seed, noise):
    """Draws ``(chains, n)`` of θ. SG samplers: ``num_steps`` steps per chain, every 10th kept;
    HMC: ``num_steps / 50`` proposals of 50 leapfrog steps (the same number of gradients)."""
    import warnings

    key = random.PRNGKey(seed)
    if name == "HMC":
        kernel = HMC(potential_fn=lambda z: double_well.potential(z["theta"]), step_size=EPS,
                     num_steps=RESAMPLE_EVERY, adapt_step_size=False, adapt_mass_matrix=False)
        mcmc = MCMC(kernel, num_warmup=200, num_samples=num_steps // RESAMPLE_EVERY,
                    num_chains=chains, chain_method="vectorized", progress_bar=False)
        init = {"theta": jnp.linspace(-1.0, 1.0, chains)}
        mcmc.run(key, init_params=init)
    else:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="naive=True")
            kernel = _sg_kernel(name, noise)
        mcmc = MCMC(kernel, num_warmup=1000, num_samples=num_steps, thinning=10,
                    num_chains=chains, chain_method="vectorized", progress_bar=False)
        mcmc.run(key, noise)
    return np.asarray(mcmc.get_samples(group_by_chain=True)["theta"], np.float64)


def _cdf(grid):
    p = double_well.density(grid)
    c = np.concatenate([[0.0], np.cumsum((p[1:] + p[:-1]) / 2 * np.diff(grid))])
    return c / c[-1]


def summarise(draws):
    """Distances and moments of ``draws`` (chains, n) against the exact law."""
    grid = np.linspace(-4.0, 4.0, 8001)
    flat = np.sort(draws.ravel())
    empirical = np.searchsorted(flat, grid, side="right") / flat.size
    gap = np.abs(empirical - _cdf(grid))
    exact = double_well.exact_moments((2, 4))
    out = dict(ks=float(gap.max()), w1=float(np.trapezoid(gap, grid)), n=int(flat.size))
    for k in (2, 4):
        series = draws**k
        mean = float(series.mean())
        mcse = float(az.mcse(series, method="mean"))
        out[f"E[theta^{k}]"] = mean
        out[f"mcse_{k}"] = mcse
        out[f"z_{k}"] = (mean - exact[k]) / mcse
        out[f"exact_{k}"] = exact[k]
    return out


def figure(draws_by_name, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = np.linspace(-2.5, 2.5, 501)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    bins = np.linspace(-2.5, 2.5, 81)
    for (name, draws), colour in zip(draws_by_name.items(), ("C0", "C3", "C2")):
        ax.hist(draws.ravel(), bins=bins, density=True, histtype="step", lw=1.6, color=colour,
                label=name)
    ax.plot(grid, double_well.density(grid), "k--", lw=1.4, label="true density")
    ax.set_xlabel("θ")
    ax.set_ylabel("density")
    ax.set_title("U(θ) = −2θ² + θ⁴, gradient noise N(0, 4), ε = 0.1")
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=200_000, help="steps (gradients) per chain")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args(argv)
    noise = double_well.make_gradient_noise()
    draws, results = {}, {}
    for name in ("HMC", "naive SGHMC", "SGHMC"):
        draws[name] = run_sampler(name, args.steps, args.chains, args.seed, noise)
        results[name] = summarise(draws[name])
        r = results[name]
        print(f"{name:12s} KS {r['ks']:.4f}  W1 {r['w1']:.4f}  "
              f"E[θ²] {r['E[theta^2]']:.4f} ± {r['mcse_2']:.4f} (z {r['z_2']:+.1f})  "
              f"E[θ⁴] {r['E[theta^4]']:.4f} ± {r['mcse_4']:.4f} (z {r['z_4']:+.1f})", flush=True)
        jax.clear_caches()
    if args.out is not None:
        args.out.write_text(json.dumps(dict(steps=args.steps, chains=args.chains, seed=args.seed,
                                            eps=EPS, results=results), indent=1) + "\n")
    if args.figure is not None:
        figure(draws, args.figure)
    return results


if __name__ == "__main__":
    main()
