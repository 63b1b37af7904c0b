"""SGNHT's positions when the gradient noise dominates the injected diffusion: the conjugate
regression (N = 500, d = 3, minibatch 50 with replacement, the closed-form posterior), SGNHT
from the posterior mean, for several diffusions A and steps h: each coordinate's sd over the
exact one (± its ESS-based standard error), the thermostat's mean against A + h σ̄²/2, and the
noise's share of the momentum diffusion, h σ̄²/(2A + h σ̄²) (σ̄² the mean per-coordinate
variance of the minibatch gradient at the posterior mean).

    python benchmarks/investigations/sgnht_noise_bias.py --out docs/results/sgnht_noise_bias.json
    # the scalar thermostat's law, no chains
    python benchmarks/investigations/sgnht_noise_bias.py --predict

``--predict``: the positions' sds that a *scalar* thermostat leaves when the gradient noise is
anisotropic, from the continuous-time dynamics with the friction at its mean: the linear SDE
dθ = p dt, dp = −H(θ − μ) dt − ξ̄ p dt + sqrt(2D) dW with D = A I + hB/2 (B the minibatch
gradient's covariance at the posterior mean) and ξ̄ = tr(D)/d (the thermostat holds the mean
kinetic temperature at 1), whose stationary covariance solves a continuous Lyapunov equation.
"""

import argparse
import json
from functools import partial
from pathlib import Path

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from numpyro.infer import MCMC, init_to_value
from numpyro_sgrld.models import linear_regression as lr

from numpyro_sgrld import SGNHT

#: (A, h, sampling steps): from noise-dominated to injected-noise-dominated. The thermostat
#: rises from A to its equilibrium over tens of time units (h x steps): runs of 4 time units
#: were still heating (thermostat below A + h σ̄²/2, positions too wide); these are 20–200
SETTINGS = ((1.0, 1e-3, 20_000), (1.0, 1e-3, 200_000), (1.0, 1e-4, 200_000),
            (10.0, 1e-4, 200_000), (30.0, 3e-5, 50_000))


def predicted_sd_ratios(X, y, exact, A, h):
    """The scalar thermostat's stationary sds over the exact ones (see the module docstring)."""
    from scipy.linalg import solve_continuous_lyapunov

    d = X.shape[1]
    H = np.eye(d) + X.T @ X / 0.25
    per_datum = X * ((X @ exact.mean - y) / 0.25)[:, None]
    B = 500**2 / 50 * np.cov(per_datum.T, bias=True)
    D = A * np.eye(d) + h * B / 2
    xi = np.trace(D) / d
    F = np.block([[np.zeros((d, d)), np.eye(d)], [-H, -xi * np.eye(d)]])
    Q = np.block([[np.zeros((d, d)), np.zeros((d, d))], [np.zeros((d, d)), 2 * D]])
    cov = solve_continuous_lyapunov(F, -Q)[:d, :d]
    return np.sqrt(np.diag(cov)) / exact.sd


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=int, default=200)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--predict", action="store_true",
                    help="print the scalar thermostat's predicted sd ratios and exit")
    args = ap.parse_args(argv)
    X, y, _ = lr.make_data(seed=0, num_data=500, num_features=3)
    exact = lr.exact_posterior(X, y)
    X64, y64 = np.asarray(X, np.float64), np.asarray(y, np.float64)
    if args.predict:
        for A, h, _ in SETTINGS:
            ratios = predicted_sd_ratios(X64, y64, exact, A, h)
            print(f"A = {A:g}, h = {h:g}: predicted sd ratios {np.round(ratios, 3).tolist()}")
        return
    per_datum = X64 * ((X64 @ exact.mean - y64) / 0.25)[:, None]
    sigma2 = float(np.mean(500**2 / 50 * per_datum.var(0)))
    start = init_to_value(values={"w": jnp.asarray(exact.mean, jnp.float32)})
    rows = []
    for A, h, steps in SETTINGS:
        kernel = SGNHT(partial(lr.model, subsample_size=50), h, diffusion=A,
                       init_strategy=start)
        mcmc = MCMC(kernel, num_warmup=steps // 10, num_samples=steps, thinning=steps // 1000,
                    num_chains=args.chains, chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(2), X, y)
        draws = np.asarray(mcmc.get_samples(group_by_chain=True)["w"], np.float64)
        xi = np.asarray(mcmc.last_state.sampler_state.integrator.thermostat)
        sd = draws.reshape(-1, 3).std(0)
        se = np.array([float(az.mcse(draws[..., j], method="sd")) for j in range(3)])
        row = dict(A=A, h=h, steps=steps, noise_share=h * sigma2 / (2 * A + h * sigma2),
                   sd_ratio=(sd / exact.sd).tolist(), sd_ratio_se=(se / exact.sd).tolist(),
                   thermostat=float(xi.mean()), thermostat_expected=A + h * sigma2 / 2)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out is not None:
            args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
