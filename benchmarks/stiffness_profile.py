"""The warm-up's stiffness along the chain, and the stability caps it would give.

The adapted step is capped by the stability limit at the stiffest point the warm-up's second
half visited, ``h ≤ FAST_TARGET / max_t s_t`` (``s_t`` the curvature term ``c_λ uᵀAu`` of step
``t``, ``docs/step_size.md``). Where the curvature varies by orders of magnitude along the
chain (a funnel's neck), that maximum is one rare point. This script records every ``s_t`` of
one warm-up (one chain, ``--warmup`` steps, ``sampling_steps`` set so that the budget rule runs)
and prints, per kernel, the adapted step, the cap, quantiles of ``s_t`` in units of the cap,
and the step at which an *on-average* criterion would cap instead: the largest ``h`` whose
double is stable in the mean log-growth along the recorded path,
``mean_t log|1 - 2 x_t| ≤ 0`` with ``x_t = h s_t / FAST_TARGET`` (``h λ_t`` for Langevin: the
Lyapunov exponent of the linearised recursion along the tracked direction; for a constant
curvature it is the present cap). It is the alternative weighed in ``docs/step_size.md``; it is not
what the library does.

    python benchmarks/stiffness_profile.py --problem funnel \\
        --kernels PSGLD "PSGLD+Γ" ShampooSGLD SGLD SGHMC WenzelSGLD AdamSGLD \\
        MongeSGLD "MongeSGLD(auto)"

The stiffness is read through a wrapper around the adapter's ``update_step_size`` installed
by this script only (a diagnostic: the library itself is not changed).
"""

import argparse
import sys
from pathlib import Path

import jax
import numpy as np
from numpyro.infer import MCMC

import numpyro_sgrld._adapter as adapter
from numpyro_sgrld.adaptation import FAST_TARGET

sys.path.insert(0, str(Path(__file__).parent))
import step_size_adaptation as bench  # noqa: E402


def record_stiffness():
    """Install a recorder of ``(i, s_i)``; returns the list it appends to."""
    rows = []
    update = adapter.update_step_size

    def recorded(state, i, rho, y, stiffness, *args, **kwargs):
        jax.debug.callback(lambda i, s: rows.append((int(i), float(s))), i, stiffness)
        return update(state, i, rho, y, stiffness, *args, **kwargs)

    adapter.update_step_size = recorded
    return rows


def lyapunov_cap(s, h_low, span=1e3, points=600):
    """The smallest ``h`` on a log grid from ``h_low`` to ``span * h_low`` at which
    ``mean log|1 - 2 h s_t / FAST_TARGET|`` turns positive (``nan`` if it never does)."""
    hs = np.geomspace(h_low, span * h_low, points)
    x = s / FAST_TARGET
    growth = np.array([np.mean(np.log(np.abs(1.0 - 2.0 * h * x) + 1e-300)) for h in hs])
    return float(hs[np.argmax(growth > 0)]) if (growth > 0).any() else float("nan")


def profile(problem, name, warmup, sampling_steps, seed, rows):
    rows.clear()
    kernel = bench.KERNELS[name](problem["model"], step_size=None,
                                 sampling_steps=sampling_steps, **problem["kwargs"])
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=1, num_chains=1, progress_bar=False)
    mcmc.warmup(jax.random.PRNGKey(seed), *problem["args"])
    jax.block_until_ready(mcmc.post_warmup_state)
    jax.effects_barrier()  # every callback has run
    i, s = np.asarray(rows).T
    s = s[i >= warmup // 2]
    s = np.where(np.isfinite(s), s, 0.0)  # as the adaptation counts a non-finite term
    cap = FAST_TARGET / s.max()
    q = np.quantile(s, [0.5, 0.9, 0.99]) / s.max()
    return dict(kernel=name, adapted=float(mcmc.post_warmup_state.step_size), cap=cap,
                median=q[0], q90=q[1], q99=q[2], lyapunov=lyapunov_cap(s, cap))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--problem", default="funnel", choices=list(bench.PROBLEMS))
    parser.add_argument("--kernels", nargs="+", default=["PSGLD"], choices=list(bench.KERNELS))
    parser.add_argument("--warmup", type=int, default=10_000)
    parser.add_argument("--sampling-steps", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rows = record_stiffness()
    problem = bench.PROBLEMS[args.problem]()
    print("| kernel | adapted h | cap h | s_t median / 90 % / 99 % (of max) "
          "| mean-log-growth cap h (× cap) |\n|---|---|---|---|---|")
    for name in args.kernels:
        r = profile(problem, name, args.warmup, args.sampling_steps, args.seed, rows)
        print(f"| {name} | {r['adapted']:.2e} | {r['cap']:.2e} | {r['median']:.3f} / "
              f"{r['q90']:.3f} / {r['q99']:.3f} | {r['lyapunov']:.2e} "
              f"(×{r['lyapunov'] / r['cap']:.1f}) |", flush=True)


if __name__ == "__main__":
    main()
