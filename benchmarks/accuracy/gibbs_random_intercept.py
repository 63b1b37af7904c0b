"""A random-intercept logistic regression over 100 groups and N = 100,000 rows (simulated, its
generating values known), with SG-MCMC within Gibbs at its defaults: ``SGGibbs(K(model))``
finds the intercepts' mean and scale (their conditional involves no data) and slice-samples
them each step, moves the intercepts partially non-centred (1,000 rows a group: nearly
centred), and corrects the minibatch gradient with control variates centred at each chain's
mode in the model's coordinates. 4 sequential chains of ``num_warmup=2000``,
``num_samples=20000``, minibatch 1,000.

The reference is NUTS on the full data, 4 chains x 2,000 draws (cached in ``--cache``).
Reported per kernel: the largest |mean error| in reference sds and the sd ratios of the
intercepts' mean, ``log`` scale, the 100 intercepts and the 3 slopes, with the reference's
own Monte Carlo error; the smallest bulk ESS and largest split R-hat; whether the verdict
warned; the wall time. NUTS and HMCECS (NumPyro's, minibatch 1,000, Taylor proxy at the MAP)
run with increasing lengths (4 chains) to the same tolerance: their times to that accuracy.

    python benchmarks/record.py docs/results/gibbs_random_intercept_cv.json -- \\
        python benchmarks/accuracy/gibbs_random_intercept.py --nuts-lengths --ecs-lengths
    python benchmarks/record.py docs/results/gibbs_random_intercept_time.json -- \\
        python benchmarks/accuracy/gibbs_random_intercept.py --kernels SGLD \\
        --sg-lengths 250 500 1000 2000 --nuts-lengths 100 200 --ecs-lengths 100 200
    python benchmarks/record.py docs/results/gibbs_random_intercept.json -- \\
        python benchmarks/accuracy/gibbs_random_intercept.py --control-variate none

The last is without control variates (``SGGibbs(..., control_variate=None)``).
"""

import argparse
import time
import warnings
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.infer import HMCECS, MCMC, NUTS
from reference_moments import cached_reference, errors, interweave_label, interweave_option

import numpyro_sgrld as ns

MAX_MEAN_ERROR = 0.15
SD_RATIO = (0.85, 1.15)
GROUPS, ROWS, SLOPES = 100, 100_000, 3
TRUE = dict(mu=-0.5, sigma=0.8, beta=np.array([0.5, -0.3, 0.2]))


def data(seed=0):
    """Groups of 1,000 rows each, standard normal covariates, intercepts drawn from
    ``N(mu, sigma^2)`` with the generating values of :data:`TRUE`."""
    rng = np.random.default_rng(seed)
    group = np.repeat(np.arange(GROUPS), ROWS // GROUPS).astype(np.int32)
    x = rng.normal(size=(ROWS, SLOPES)).astype(np.float32)
    alpha = TRUE["mu"] + TRUE["sigma"] * rng.normal(size=GROUPS)
    logits = alpha[group] + x @ TRUE["beta"]
    y = (rng.uniform(size=ROWS) < 1 / (1 + np.exp(-logits))).astype(np.int32)
    return jnp.asarray(group), jnp.asarray(x), jnp.asarray(y), alpha


def model(group, x, y=None, subsample_size=1000):
    mu = numpyro.sample("mu", dist.Normal(0.0, 2.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([SLOPES]).to_event(1))
    with numpyro.plate("groups", GROUPS):
        alpha = numpyro.sample("alpha", dist.Normal(mu, sigma))
    with numpyro.plate("data", x.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=alpha[group[idx]] + x[idx] @ beta),
                       obs=None if y is None else y[idx])


def judged(draws):
    return {"mu": np.asarray(draws["mu"], np.float64)[..., None],
            "log_sigma": np.log(np.asarray(draws["sigma"], np.float64))[..., None],
            "alpha": np.asarray(draws["alpha"], np.float64),
            "beta": np.asarray(draws["beta"], np.float64)}


def run(kernel, args, num_warmup, num_samples, seed, chain_method="sequential"):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=4,
                chain_method=chain_method, progress_bar=False)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(seed), *args)
    seconds = time.perf_counter() - start
    warned = [str(c.message) for c in caught if "cannot be trusted" in str(c.message)]
    return judged(mcmc.get_samples(group_by_chain=True)), seconds, warned, mcmc.last_state


def share_line(state):
    """Within Gibbs: the share of ``target_bias`` the step aimed at and the weakly informed
    children's count, averaged over the chains."""
    return (f"  the step's share of target_bias {float(np.mean(state.bias_share)):.3f} "
            f"(weakly informed children {float(np.mean(state.children)):.2f})")


def reference(args, cache):
    """NUTS on the full data, 4 x 2,000 draws (:func:`reference_moments.cached_reference`)."""
    return cached_reference(
        cache / "gibbs_random_intercept_reference.npz",
        lambda: run(NUTS(ns.full_batch(model)), args, 1000, 2000, seed=1)[0],
        ("mu", "log_sigma", "alpha", "beta"))


def row(name, steps, err, draws, seconds, warned):
    summary = numpyro.diagnostics.summary(draws)
    ess = min(float(np.min(s["n_eff"])) for s in summary.values())
    rhat = max(float(np.max(s["r_hat"])) for s in summary.values())
    ok = err[0] <= MAX_MEAN_ERROR and SD_RATIO[0] <= err[1] and err[2] <= SD_RATIO[1]
    verdict = "–" if warned is None else ("warned" if warned else "quiet")
    print(f"| {name} | {steps} | {err[0]:.3f} | {err[1]:.2f}–{err[2]:.2f} | {ess:.0f} "
          f"| {rhat:.3f} | {'yes' if ok else 'no'} | {verdict} | {seconds:.0f} |", flush=True)
    return ok


def ecs_kernel(args):
    """NumPyro's HMCECS with the Taylor proxy at the MAP (found by SVI on the full data)."""
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoDelta

    full = ns.full_batch(model)
    guide = AutoDelta(full)
    svi = SVI(full, guide, numpyro.optim.Adam(0.01), Trace_ELBO())
    result = svi.run(jax.random.PRNGKey(3), 3000, *args, progress_bar=False)
    ref_params = {k.removesuffix("_auto_loc"): v for k, v in result.params.items()}
    proxy = HMCECS.taylor_proxy(ref_params)
    return HMCECS(NUTS(model), num_blocks=10, proxy=proxy)


def options(a):
    """The SGGibbs options of the command line, as the table names them."""
    return "".join([f", control_variate={a.control_variate!r}" if a.control_variate != "auto"
                    else "", interweave_label(a.interweave_every),
                    "; vectorized" if a.chain_method == "vectorized" else ""])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", nargs="+", default=["SGLD", "SGHMC"])
    parser.add_argument("--cache", type=Path, default=Path("docs/results"))
    parser.add_argument("--nuts-lengths", type=int, nargs="*", default=[200, 500, 1000])
    parser.add_argument("--ecs-lengths", type=int, nargs="*", default=[200, 500])
    parser.add_argument("--control-variate", choices=["auto", "mode", "none"], default="auto",
                        help="SGGibbs's control_variate ('none': None; default: its default)")
    parser.add_argument("--interweave-every", type=interweave_option, default="auto",
                        help="SGGibbs's interweave_every: auto (its default), none or "
                             "a number of steps")
    parser.add_argument("--chain-method", choices=["sequential", "vectorized"],
                        default="sequential", help="MCMC's chain_method for SGGibbs")
    parser.add_argument("--sg-lengths", type=int, nargs="*", default=[],
                        help="instead of the default run: SGGibbs(K) of the first kernel at "
                             "num_warmup = num_samples = each length until accurate, its "
                             "time to the tolerance")
    a = parser.parse_args()
    cv_option = None if a.control_variate == "none" else a.control_variate
    group, x, y, alpha = data()
    args = (group, x, y)
    ref = reference(args, a.cache)
    print(f"reference: NUTS 4 x 2,000 on the full data; smallest ESS "
          f"{min(float(np.min(r['ess'])) for r in ref.values()):.0f}; largest mean error "
          f"it contributes {max(float(np.max(r['mean_se'] / r['sd'])) for r in ref.values()):.3f}"
          f" sd; generating mu {TRUE['mu']}, sigma {TRUE['sigma']}: reference "
          f"{float(ref['mu']['mean'][0]):.3f}, {float(np.exp(ref['log_sigma']['mean'][0])):.3f}")
    print("| kernel | steps per chain | max mean err (sd) | sd ratios | min bulk ESS "
          "| max R-hat | accurate | verdict | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in [] if a.sg_lengths else a.kernels:  # the default run, unless timing lengths
        kernel = ns.SGGibbs(getattr(ns, name)(partial(model, subsample_size=1000)),
                            control_variate=cv_option, interweave_every=a.interweave_every)
        draws, seconds, warned, state = run(kernel, args, 2000, 20000, seed=0,
                                            chain_method=a.chain_method)
        cv = options(a)
        row(f"SGGibbs({name}{cv}) [{', '.join(kernel.gibbs_sites)}]", "22,000",
            errors(draws, ref), draws, seconds, warned)
        print(share_line(state))
        for w in warned:
            print(f"  verdict: {w[:300]}")
    for length in a.sg_lengths:
        name = a.kernels[0]
        kernel = ns.SGGibbs(getattr(ns, name)(partial(model, subsample_size=1000)),
                            control_variate=cv_option, interweave_every=a.interweave_every)
        draws, seconds, warned, state = run(kernel, args, length, length, seed=2,
                                            chain_method=a.chain_method)
        cv = options(a)
        accurate = row(f"SGGibbs({name}{cv})", f"{2 * length:,}", errors(draws, ref), draws,
                       seconds, warned)
        print(share_line(state))
        if accurate:
            break
    for length in a.nuts_lengths:
        draws, seconds, *_ = run(NUTS(ns.full_batch(model)), args, length, length, seed=2)
        if row("NUTS (full data)", f"{2 * length:,}", errors(draws, ref), draws, seconds, None):
            break
    for length in a.ecs_lengths:
        draws, seconds, *_ = run(ecs_kernel(args), args, length, length, seed=2)
        if row("HMCECS (minibatch 1,000)", f"{2 * length:,}", errors(draws, ref), draws,
               seconds, None):
            break


if __name__ == "__main__":
    main()
