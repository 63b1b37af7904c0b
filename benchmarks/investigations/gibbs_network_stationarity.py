"""Whether the unit-horseshoe network's Gibbs composition keeps NUTS's law of the scales:
``SGGibbs(SGLD(model))`` at its defaults on ``cancer_unit_horseshoe`` (the breast-cancer
30-16-2 tanh network of ``benchmarks/references/problems.py``, the centred unit horseshoe on
the first layer), 32 vectorised chains started at 32 NUTS draws of the posterior instead of
the default's mode search, then 2,000 warm-up and 4,000 steps.

A composition that keeps the posterior keeps the chains' law where it started: at every
stage the 32 chains' global log scale is a sample from NUTS's law, its mean within Monte Carlo
error of the reference's (``docs/results/references/cancer_unit_horseshoe.npz``, ensemble
``a``: 4 x 1,000 NUTS draws). A composition whose own law sits where the default's chains go
(a global log scale near 0.5, 1.3 sd below NUTS's) would carry them there. The starts come
from a NUTS run of this script's own (4 chains of 500 warm-up and 200 draws on the full data,
non-centred as the reference writes the model; every 25th draw: 8 a chain)::

    python benchmarks/record.py docs/results/gibbs_network_stationarity.json -- \\
        python benchmarks/investigations/gibbs_network_stationarity.py

It also prints, for the default's start (the control variates' mode search, each chain's
own, where the chain starts without ``init_params``; the first chain's), the first layer's
weight norm there, the norm
its scales make typical a priori, and the global log scale the first sweep draws given those
weights (``priors.half_cauchy_draw``, 1,000 draws): why the default's chains leave that
start at once. A second table gives, at each start, the control variates' gradient noise
(centred at the chain's own mode search) over the plain minibatch gradient's
(``gibbs_control_variates.noise``), whether the chain kept them (``SGGibbs`` keeps them where
that is at most a quarter), and the chain's mean global log scale over its draws. The
error's standard error takes the 32 chains as independent draws (the starts are 25 NUTS
draws apart, the chains' noise is independent); the unit scales are compared up to
relabelling (each draw's sorted), as ``benchmarks/accuracy/gibbs_network.py`` does.
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "references"))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import jax  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402
from presets import reference  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402
from numpyro_sgrld.sampler import decentring  # noqa: E402
from numpyro_sgrld.sampler import gibbs_control_variates as gibbs_cv  # noqa: E402

NAME = "cancer_unit_horseshoe"
GLOBAL, LOCAL = "net/mlp/linear_0/w_global", "net/mlp/linear_0/w_local"
WEIGHTS = "net/mlp/linear_0/w"


def mode_start(centre):
    """A default chain's start (``centre``'s mode, one chain's) as a line: the first layer's
    weight norm, the norm its scales make typical (``E|w|^2 = sum (m tau lam_j)^2`` over the
    weights), and the global log scale the first sweep draws given the weights (mean and sd
    of 1,000 draws)."""
    mode = centre.mode
    w, tau, lam = (np.asarray(mode[k], np.float64) for k in (WEIGHTS, GLOBAL, LOCAL))
    base = ns.priors.he_scale(w.shape)
    typical = np.sqrt(np.sum((base * tau * np.broadcast_to(lam, w.shape)) ** 2))
    keys = jax.random.split(jax.random.PRNGKey(0), 1000)
    drawn = np.log(np.asarray(jax.vmap(lambda k: ns.priors.half_cauchy_draw(
        k, tau, w, base * lam))(keys)))
    return (f"the default's start: global log scale {np.log(tau):.2f}, first-layer weight "
            f"norm {np.linalg.norm(w):.1f} (typical for its scales: {typical:.1f}); the first "
            f"sweep draws the global log scale at {drawn.mean():.2f} (sd {drawn.std():.2f})")


def nuts_starts(problem, chains, every, seed):
    """``{site: (chains * draws, ...)}``: every ``every``-th of 200 NUTS draws a chain, each
    site of the centred model (the first layer's weights as the product they are), and the
    NUTS run's seconds."""
    mcmc = MCMC(NUTS(problem["full"], init_strategy=P.INIT()), num_warmup=500,
                num_samples=200, num_chains=chains, chain_method="sequential",
                progress_bar=False)
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), *problem["train"])
    draws = mcmc.get_samples(group_by_chain=True)
    seconds = time.perf_counter() - start
    keep = {k: np.asarray(v)[:, ::every] for k, v in draws.items() if not k.endswith("_raw")}
    return {k: v.reshape((-1,) + v.shape[2:]) for k, v in keep.items()}, seconds


def row(stage, steps, log_global, log_local, ref_global, ref_local):
    """A table row: the chains' global log scale against the reference's (error in its sd,
    with the standard error of 32 independent chains), the sd ratio, and the unit scales'
    largest sorted-mean error."""
    m, s = ref_global.mean(), ref_global.std()
    err = (log_global.mean() - m) / s
    se = log_global.std() / np.sqrt(log_global.size) / s
    ranks, ref_ranks = np.sort(log_local, -1), np.sort(ref_local.reshape(-1, 16), -1)
    local = np.max(np.abs(ranks.mean(0) - ref_ranks.mean(0)) / ref_ranks.std(0))
    local_se = np.max(ranks.std(0) / np.sqrt(ranks.shape[0]) / ref_ranks.std(0))
    return (f"| {stage} | {steps} | {log_global.mean():.2f} | {err:+.2f} ± {se:.2f} "
            f"| {log_global.std() / s:.2f} | {local:.2f} (se {local_se:.2f}) |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-warmup", type=int, default=2000)
    parser.add_argument("--num-samples", type=int, default=4000)
    parser.add_argument("--control-variate", default="auto", choices=["auto", "none"])
    a = parser.parse_args()
    problem = P.PROBLEMS[NAME]()
    ref, meta = reference(NAME)
    ref_global = ref[f"log_scale_a:{GLOBAL}"].ravel()  # log scales already
    ref_local = ref[f"log_scale_a:{LOCAL}"]
    starts, nuts_seconds = nuts_starts(problem, 4, 25, seed=7)
    chains = len(starts[GLOBAL])
    print(f"reference: NUTS ensemble a, 4 x {meta['draws']} draws: global log scale "
          f"{ref_global.mean():.2f} (sd {ref_global.std():.2f}); starts: {chains} draws of "
          f"this script's NUTS run ({nuts_seconds:.0f} s)")
    kernel = ns.SGGibbs(ns.SGLD(problem["gibbs_model"]),
                        control_variate=None if a.control_variate == "none" else "auto")
    mcmc = MCMC(kernel, num_warmup=a.num_warmup, num_samples=a.num_samples,
                num_chains=chains, chain_method="vectorized", progress_bar=False)
    init = {k: jax.numpy.asarray(v) for k, v in starts.items()}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.warmup(jax.random.PRNGKey(1), *problem["train"], init_params=init,
                    collect_warmup=True)
        warm = mcmc.get_samples(group_by_chain=True)
        mcmc.run(mcmc.post_warmup_state.rng_key, *problem["train"])
    draws = mcmc.get_samples(group_by_chain=True)
    centres = mcmc.last_state.centre if kernel.control_variates else None  # each chain's
    if centres is not None:
        print(mode_start(jax.tree.map(lambda x: x[0], centres)) + " (the first chain's)")
    print(f"SGGibbs(SGLD){'' if a.control_variate == 'auto' else ', control_variate=None'}, "
          f"{chains} vectorised chains from the NUTS draws")
    print("| stage | steps | global log scale mean | error (NUTS sd) ± se | sd ratio "
          "| unit log scales up to relabelling: max error (sd) |")
    print("|---|---|---|---|---|---|")
    print(row("start (NUTS draws)", 0, np.log(starts[GLOBAL]), np.log(starts[LOCAL]),
              ref_global, ref_local))
    print(row("end of warm-up", f"{a.num_warmup:,}", np.log(np.asarray(warm[GLOBAL][:, -1])),
              np.log(np.asarray(warm[LOCAL][:, -1])), ref_global, ref_local))
    n = a.num_samples
    for q in (n // 2, n):
        print(row("sampling", f"{a.num_warmup + q:,}", np.log(np.asarray(draws[GLOBAL][:, q - 1])),
                  np.log(np.asarray(draws[LOCAL][:, q - 1])), ref_global, ref_local))
    pooled = np.log(np.asarray(draws[GLOBAL]))
    print(f"  every chain's mean global log scale over its draws: min {pooled.mean(1).min():.2f}"
          f", max {pooled.mean(1).max():.2f}")
    kept = np.asarray(centres.on) if centres is not None else np.zeros(chains)
    print("each start's gradient noise with control variates over the plain gradient's")
    print("| chain | start's global log scale | noise ratio | control variates "
          "| mean global log scale |")
    print("|---|---|---|---|---|")
    for c in range(chains):
        values = {k: v[c] for k, v in init.items()}
        ratio = np.nan
        if centres is not None:
            centre = jax.tree.map(lambda x, c=c: x[c], centres)
            scales = decentring.loc_scale(problem["gibbs_model"], kernel.decentred_sites,
                                          values, problem["train"], {})
            plain, centred = gibbs_cv.noise(
                problem["gibbs_model"], centre, values, {s: v[1] for s, v in scales.items()},
                jax.random.PRNGKey(c), problem["train"], {})
            ratio = float(centred / plain)
        print(f"| {c} | {np.log(starts[GLOBAL][c]):.2f} | {ratio:.2f} "
              f"| {'on' if kept[c] else 'off'} | {pooled[c].mean():.2f} |")
    for w in caught:
        if "cannot be trusted" in str(w.message):
            print(f"  verdict: {str(w.message)[:300]}")


if __name__ == "__main__":
    main()
