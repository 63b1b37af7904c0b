"""The inference gym's sparse logistic regression on German credit (N = 1,000, 25 weights,
Gamma(1/2, 1/2) global and local scales), centred, with SG-MCMC within Gibbs at its defaults:
``SGGibbs(K(model))`` finds the scales (their conditional involves no data), slice-samples
them each step, moves the weights in partially non-centred coordinates, and corrects the
minibatch gradient with control variates centred at a mode, where the chains start. 4 chains
(``--chain-method``: sequential, or vectorized) of ``num_warmup=2000``, ``num_samples=20000``
(the default run of ``benchmarks/accuracy/defaults.py``), minibatch 100, once per seed of
``--seeds``.

The reference is NUTS on the full data, non-centred (NumPyro's NUTS mixes it: the gym's own
parametrisation), 4 chains x 20,000 draws, cached in ``--cache``; the weights
``w = tau * lam * beta``. Reported per kernel: the largest |mean error| in reference sds and
the sd ratios of ``log tau``, ``log lam`` and ``w`` (51 coordinates), each with the
reference's own Monte Carlo error; the smallest bulk ESS and largest split R-hat; whether the
verdict warned; the wall time. And NUTS's own time to the same accuracy: NUTS runs of
increasing length (4 chains, 1000 warm-up) until its errors against the reference are
within the tolerance (means 0.15 sd, sds 15 %; a NUTS run of the same seed as the reference's
is not used).

    python benchmarks/record.py docs/results/gibbs_sparse_logistic_cold.json -- \\
        python benchmarks/accuracy/gibbs_sparse_logistic.py --kernels SGLD \\
        --chain-method vectorized --sg-lengths 2000 4000 8000 --nuts-lengths 250 500 1000 \\
        --cold --race 8000 500 --repeats 5
    for rows in 1000 3000 10000; do  # where SGGibbs overtakes NUTS (1000: German credit)
        python benchmarks/record.py docs/results/gibbs_sparse_logistic_race_$rows.json -- \\
            python benchmarks/accuracy/gibbs_sparse_logistic.py $([ $rows = 1000 ] || \\
            echo --rows $rows --reference-draws 5000) --kernels SGLD \\
            --chain-method vectorized --sg-warmup 1000 --sg-lengths 2000 4000 8000 16000 \\
            --nuts-lengths 250 500 1000 2000 --cold --race --repeats 5
    done
    python benchmarks/record.py docs/results/gibbs_sparse_logistic_step_bias.json -- \\
        python benchmarks/accuracy/gibbs_sparse_logistic.py --kernels SGLD SGHMC BADODAB \\
        --chain-method vectorized --seeds 0 1 2 --nuts-lengths --per-chain
    python benchmarks/record.py docs/results/gibbs_sparse_logistic_step_bias_whole.json -- \\
        python benchmarks/accuracy/gibbs_sparse_logistic.py --kernels SGLD SGHMC BADODAB \\
        --chain-method vectorized --seeds 0 1 2 --nuts-lengths --per-chain --target-bias 0.2
    python benchmarks/record.py docs/results/gibbs_sparse_logistic_seeds.json -- \\
        python benchmarks/accuracy/gibbs_sparse_logistic.py --kernels SGLD \\
        --chain-method vectorized --seeds 0 1 2 3 --sg-lengths 1000 2000 4000 8000 \\
        --nuts-lengths 500 1000
    python benchmarks/record.py docs/results/gibbs_sparse_logistic_seeds_interweave.json -- \\
        python benchmarks/accuracy/gibbs_sparse_logistic.py --kernels SGLD \\
        --chain-method vectorized --interweave-every 10 --seeds 0 1 2 3 --nuts-lengths
    python benchmarks/record.py docs/results/gibbs_sparse_logistic.json -- \\
        python benchmarks/accuracy/gibbs_sparse_logistic.py --kernels SGLD SGHMC BADODAB \\
        --control-variate none
    python benchmarks/accuracy/gibbs_sparse_logistic.py --kernels SGLD --gibbs-every 50 \\
        --control-variate none --nuts-lengths
    python benchmarks/accuracy/gibbs_sparse_logistic.py --kernels SGLD SGHMC PSGLD \\
        --no-decentre --control-variate none --num-warmup 500 --num-samples 2000 --nuts-lengths

The loop gives both samplers the same 1,000 warm-up steps on German credit and on simulated
data of 3,000 and 10,000 rows (``--rows``: 25 standard normal covariates, the generating
weights :data:`TRUE_W`, a reference of 4 x 5,000 NUTS draws of its own), and races each
ladder's first run to the tolerance (``--race`` without lengths). The last three are without
control variates (``SGGibbs(..., control_variate=None)``), the
last also moving the weights as the model writes them.
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
from numpyro.infer import MCMC, NUTS
from reference_moments import cached_reference, errors, interweave_label, interweave_option

import numpyro_sgrld as ns

MAX_MEAN_ERROR = 0.15
SD_RATIO = (0.85, 1.15)
#: The generating weights of ``--rows``' simulated data: five of 25 non-zero, German credit's
#: width.
TRUE_W = np.array([1.0, -0.8, 0.6, -0.4, 0.3] + [0.0] * 20, np.float32)


def centred(X, y=None, subsample_size=100):
    r""":math:`\tau, \lambda_j \sim \Gamma(1/2, 1/2)`, :math:`w_j \sim \mathcal N(0,
    (\tau\lambda_j)^2)`, :math:`y_i \sim \mathrm{Bernoulli}(\mathrm{logit}^{-1}(x_i^\top w))`."""
    d = X.shape[1]
    tau = numpyro.sample("tau", dist.Gamma(0.5, 0.5))
    lam = numpyro.sample("lam", dist.Gamma(0.5, 0.5).expand([d]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, tau * lam).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w),
                       obs=None if y is None else y[idx])


def simulated(rows, seed=0):
    """``(X, y)``: ``rows`` rows of 25 standard normal covariates (German credit's columns are
    standardised too) and labels drawn with the generating weights :data:`TRUE_W`."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(rows, TRUE_W.size)).astype(np.float32)
    y = (rng.uniform(size=rows) < 1 / (1 + np.exp(-(X @ TRUE_W)))).astype(np.int32)
    return X, y


def non_centred(X, y):
    """The inference gym's own parametrisation, on the full data (the reference's)."""
    d = X.shape[1]
    tau = numpyro.sample("tau", dist.Gamma(0.5, 0.5))
    lam = numpyro.sample("lam", dist.Gamma(0.5, 0.5).expand([d]).to_event(1))
    beta = numpyro.sample("beta", dist.Normal(0.0, 1.0).expand([d]).to_event(1))
    numpyro.deterministic("w", tau * lam * beta)
    numpyro.sample("y", dist.Bernoulli(logits=X @ (tau * lam * beta)), obs=y)


def judged(draws):
    """``{name: (chains, draws, k)}``: log tau, log lam, w."""
    return {"log_tau": np.log(np.asarray(draws["tau"], np.float64))[..., None],
            "log_lam": np.log(np.asarray(draws["lam"], np.float64)),
            "w": np.asarray(draws["w"], np.float64)}


def nuts(X, y, num_samples, seed):
    mcmc = MCMC(NUTS(non_centred), num_warmup=1000, num_samples=num_samples, num_chains=4,
                chain_method="sequential", progress_bar=False)
    start = time.perf_counter()
    mcmc.run(jax.random.PRNGKey(seed), X, y)
    return judged(mcmc.get_samples(group_by_chain=True)), time.perf_counter() - start


def nuts_arrays(X, y, num_samples, seed):
    """:func:`nuts` given NumPy arrays (picklable arguments)."""
    return nuts(jnp.asarray(X), jnp.asarray(y), num_samples, seed)


def reference(X, y, cache, draws=20_000, rows=None):
    """NUTS, 4 x ``draws`` draws (:func:`reference_moments.cached_reference`), on German
    credit or (``rows``) the simulated data."""
    name = ("gibbs_sparse_logistic_reference.npz" if rows is None
            else f"gibbs_sparse_logistic_reference_{rows}_rows.npz")
    return cached_reference(cache / name, lambda: nuts(X, y, draws, seed=1)[0],
                            ("log_tau", "log_lam", "w"))


def accurate(err):
    worst, low, high = err
    return worst <= MAX_MEAN_ERROR and SD_RATIO[0] <= low and high <= SD_RATIO[1]


def mixing(draws):
    summary = numpyro.diagnostics.summary(draws)
    return (float(min(np.min(s["n_eff"]) for s in summary.values())),
            float(max(np.max(s["r_hat"]) for s in summary.values())))


def sg_gibbs(kernel_name, X, y, num_warmup, num_samples, decentre=True, gibbs_every=1,
             control_variate="auto", interweave_every="auto", seed=0, chain_method="sequential",
             target_bias=None):
    own = {} if target_bias is None else {"target_bias": target_bias}
    kernel = ns.SGGibbs(getattr(ns, kernel_name)(partial(centred, subsample_size=100), **own),
                        decentre=decentre, gibbs_every=gibbs_every,
                        control_variate=control_variate, interweave_every=interweave_every)
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, num_chains=4,
                chain_method=chain_method, progress_bar=False)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(seed), X, y)
    seconds = time.perf_counter() - start
    warned = [str(c.message) for c in caught if "cannot be trusted" in str(c.message)]
    kernel.last_share = (float(np.mean(mcmc.last_state.bias_share)),
                         float(np.mean(mcmc.last_state.children)))
    return judged(mcmc.get_samples(group_by_chain=True)), seconds, warned, kernel


def worst_by_chain(draws, ref):
    """The global scale's mean error (``log tau``, in the reference's sds; and each chain's);
    the coordinate whose mean is furthest from the reference's: its name, index, error, each
    chain's mean and the reference's mean and sd; and each site's sd ratio to the
    reference's, averaged over its coordinates."""
    rows = []
    for k, r in ref.items():
        by_chain = draws[k].reshape(draws[k].shape[:2] + (-1,))
        err = (by_chain.reshape(-1, by_chain.shape[-1]).mean(0) - r["mean"]) / r["sd"]
        j = int(np.argmax(np.abs(err)))
        rows.append((abs(float(err[j])), k, j, float(err[j]), by_chain[:, :, j].mean(1),
                     float(r["mean"][j]), float(r["sd"][j])))
    _, name, j, err, chains, mean, sd = max(rows, key=lambda row: row[0])
    spread = {k: float(np.mean(draws[k].reshape(-1, draws[k].shape[-1]).std(0) / r["sd"]))
              for k, r in ref.items()}
    r = ref["log_tau"]
    tau = (draws["log_tau"][..., 0].mean(1) - r["mean"][0]) / r["sd"][0]
    return (f"  log tau {float(tau.mean()):+.3f} sd (chains "
            f"{', '.join(f'{t:+.3f}' for t in tau)}); worst: {name}[{j}] {err:+.3f} sd; "
            f"chain means "
            f"{', '.join(f'{m:.3f}' for m in chains)}; reference {mean:.3f} (sd {sd:.3f}); "
            f"mean sd ratio {', '.join(f'{k} {v:.3f}' for k, v in spread.items())}")


def in_fresh_process(fn, *args):
    """``fn(*args)`` run in a new Python process (``spawn``): timed from a cold start, nothing
    compiled by an earlier run of the same process, as a user's script runs it."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def sg_run(a, X, y, name, num_warmup, num_samples, seed, fresh):
    """:func:`sg_gibbs_sites` with the options ``a``, in a fresh process where ``fresh``."""
    run = in_fresh_process if fresh else (lambda f, *r: f(*r))
    return run(sg_gibbs_sites, name, np.asarray(X), np.asarray(y), num_warmup, num_samples,
               not a.no_decentre, a.gibbs_every,
               None if a.control_variate == "none" else a.control_variate, a.interweave_every,
               seed, a.chain_method, a.target_bias)


def sg_gibbs_sites(name, X, y, *args):
    """:func:`sg_gibbs`, the kernel replaced by its Gibbs and decentred sites and the share
    of ``target_bias`` its step aimed at with the weakly informed children's count, averaged
    over the chains (picklable)."""
    draws, seconds, warned, kernel = sg_gibbs(name, jnp.asarray(X), jnp.asarray(y), *args)
    return draws, seconds, warned, (kernel.gibbs_sites, kernel.decentred_sites,
                                    kernel.last_share)


def main():
    from numpyro_sgrld.models import logistic_regression as lr

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", nargs="+", default=["SGLD"])
    parser.add_argument("--num-warmup", type=int, default=2000)
    parser.add_argument("--num-samples", type=int, default=20000)
    parser.add_argument("--cache", type=Path, default=Path("docs/results"))
    parser.add_argument("--nuts-lengths", type=int, nargs="*", default=[250, 500, 1000, 2000])
    parser.add_argument("--no-decentre", action="store_true",
                        help="SGGibbs(..., decentre=False): the weights moved as written")
    parser.add_argument("--gibbs-every", type=int, default=1)
    parser.add_argument("--control-variate", choices=["auto", "mode", "none"], default="auto",
                        help="SGGibbs's control_variate ('none': None; default: its default)")
    parser.add_argument("--interweave-every", type=interweave_option, default="auto",
                        help="SGGibbs's interweave_every: auto (its default), none or "
                             "a number of steps")
    parser.add_argument("--target-bias", type=float, default=None,
                        help="the SG kernel's target_bias (default: its default; within Gibbs "
                             "its step aims at a share of it, printed with --per-chain)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="the default runs' seeds (each kernel once per seed)")
    parser.add_argument("--chain-method", choices=["sequential", "vectorized"],
                        default="sequential", help="MCMC's chain_method for SGGibbs")
    parser.add_argument("--per-chain", action="store_true",
                        help="print each run's worst coordinate with its chains' means")
    parser.add_argument("--cold", action="store_true",
                        help="time each run of the --sg-lengths and --nuts-lengths ladders in "
                             "a fresh Python process (compilation included, nothing cached "
                             "by an earlier run), as a user's script starts")
    parser.add_argument("--race", type=int, nargs="*", metavar="LENGTH",
                        help="after the ladders: SGGibbs at num_samples = SG_LENGTH (and "
                             "num_warmup the same, or --sg-warmup; seed 2) and NUTS at 1000 + "
                             "NUTS_LENGTH (seed 2), each --repeats times, alternating, each in "
                             "a fresh process: the median and range of their wall times. "
                             "Two numbers: SG_LENGTH NUTS_LENGTH; none: each ladder's first "
                             "run to the tolerance")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sg-warmup", type=int, default=None,
                        help="the --sg-lengths ladder's and the race's num_warmup (default: "
                             "each run's num_samples)")
    parser.add_argument("--rows", type=int, default=None,
                        help="simulated data of this many rows (generating weights TRUE_W) "
                             "instead of German credit; its own reference")
    parser.add_argument("--reference-draws", type=int, default=20_000,
                        help="the reference's draws per chain, where it is not cached")
    parser.add_argument("--sg-lengths", type=int, nargs="*", default=[],
                        help="after the default runs: SGGibbs(K) of the first kernel at "
                             "num_warmup = num_samples = each length (another seed) until "
                             "accurate, quiet and of bulk ESS >= 100: its time to the "
                             "tolerance")
    a = parser.parse_args()
    if a.race is not None and len(a.race) not in (0, 2):
        parser.error(f"--race takes two lengths or none, got {a.race}")
    X, y = lr.load_german_credit() if a.rows is None else simulated(a.rows)
    X, y = jnp.asarray(X), jnp.asarray(y)
    ref = reference(X, y, a.cache, a.reference_draws, a.rows)
    print(f"data: {'German credit' if a.rows is None else 'simulated'}, {X.shape[0]:,} rows; "
          f"reference: NUTS 4 x {a.reference_draws:,} (non-centred); smallest ESS "
          f"{min(float(np.min(r['ess'])) for r in ref.values()):.0f}; largest mean error "
          f"it contributes {max(float(np.max(r['mean_se'] / r['sd'])) for r in ref.values()):.3f}"
          " sd")
    print("| kernel | steps per chain | gibbs sites | decentred | max mean err (sd) | sd ratios "
          "| min bulk ESS | max R-hat | accurate | verdict | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    options = "".join([", decentre=False" if a.no_decentre else "",
                       f", gibbs_every={a.gibbs_every}" if a.gibbs_every > 1 else "",
                       f", control_variate={a.control_variate!r}"
                       if a.control_variate != "auto" else "",
                       interweave_label(a.interweave_every),
                       f", target_bias={a.target_bias}" if a.target_bias is not None else "",
                       "; vectorized" if a.chain_method == "vectorized" else ""])
    runs = [(name, a.num_warmup, a.num_samples, seed) for name in a.kernels for seed in a.seeds]
    runs += [(a.kernels[0], a.sg_warmup or length, length, 2) for length in a.sg_lengths]
    first_accurate = {}  # each ladder's first run to the tolerance: its num_samples
    for name, num_warmup, num_samples, seed in runs:
        ladder = (num_warmup, num_samples) != (a.num_warmup, a.num_samples)
        draws, seconds, warned, (gibbs_sites, decentred_sites, (share, children)) = sg_run(
            a, X, y, name, num_warmup, num_samples, seed, fresh=ladder and a.cold)
        err = errors(draws, ref)
        ess, rhat = mixing(draws)
        print(f"| SGGibbs({name}{options}){f' seed {seed}' if len(a.seeds) > 1 else ''} "
              f"| {num_warmup + num_samples:,} "
              f"| {', '.join(gibbs_sites)} | {', '.join(decentred_sites)} "
              f"| {err[0]:.3f} | {err[1]:.2f}–{err[2]:.2f} | {ess:.0f} | {rhat:.3f} "
              f"| {'yes' if accurate(err) else 'no'} | {'warned' if warned else 'quiet'} "
              f"| {seconds:.0f} |", flush=True)
        if a.per_chain:
            print(f"  the step's share of target_bias {share:.3f} (weakly informed children "
                  f"{children:.1f}); {worst_by_chain(draws, ref).strip()}")
        for w in warned:
            print(f"  verdict: {w[:400]}")
        if ladder and accurate(err) and ess >= 100 and not warned:
            first_accurate["sg"] = num_samples
            break
    for length in a.nuts_lengths:
        draws, seconds = (in_fresh_process if a.cold else lambda f, *r: f(*r))(
            nuts_arrays, np.asarray(X), np.asarray(y), length, 2)
        err = errors(draws, ref)
        ess, rhat = mixing(draws)
        print(f"| NUTS (full data, non-centred) | {1000 + length:,} | – | – | {err[0]:.3f} "
              f"| {err[1]:.2f}–{err[2]:.2f} | {ess:.0f} | {rhat:.3f} "
              f"| {'yes' if accurate(err) else 'no'} | – | {seconds:.0f} |", flush=True)
        if accurate(err):
            first_accurate.setdefault("nuts", length)
    if a.race == [] and len(first_accurate) < 2:
        print(f"\nno race: a ladder did not reach the tolerance "
              f"(first accurate: {first_accurate or 'none'})")
    elif a.race is not None:
        race(a, X, y, ref, *(a.race or (first_accurate["sg"], first_accurate["nuts"])))


def race(a, X, y, ref, sg_length, nuts_length):
    """SGGibbs and NUTS at the given lengths, ``a.repeats`` times each, alternating, each in a
    fresh process (the same seed each time: the same draws, only the time varies)."""
    times = {"sg": [], "nuts": []}
    for _ in range(a.repeats):
        draws, seconds, warned, _ = sg_run(a, X, y, a.kernels[0], a.sg_warmup or sg_length,
                                           sg_length, 2, fresh=True)
        times["sg"].append(seconds)
        sg_right = accurate(errors(draws, ref)) and mixing(draws)[0] >= 100 and not warned
        draws, seconds = in_fresh_process(nuts_arrays, np.asarray(X), np.asarray(y),
                                          nuts_length, 2)
        times["nuts"].append(seconds)
        nuts_right = accurate(errors(draws, ref))
    sg, nuts_ = np.median(times["sg"]), np.median(times["nuts"])
    print(f"\nrace, {a.repeats} fresh processes each, alternating: SGGibbs({a.kernels[0]}) "
          f"{(a.sg_warmup or sg_length) + sg_length:,} steps (accurate, quiet, ESS >= 100: "
          f"{'yes' if sg_right else 'no'}) median {sg:.1f} s (range "
          f"{min(times['sg']):.1f}-{max(times['sg']):.1f}); NUTS {1000 + nuts_length:,} steps "
          f"(accurate: {'yes' if nuts_right else 'no'}) median {nuts_:.1f} s (range "
          f"{min(times['nuts']):.1f}-{max(times['nuts']):.1f}); NUTS / SGGibbs "
          f"{nuts_ / sg:.2f}")


if __name__ == "__main__":
    main()
