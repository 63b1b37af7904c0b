"""Time to accuracy on a large-N Bayesian logistic regression: stochastic-gradient kernels on
minibatches against NUTS on the full data.

    python benchmarks/time_to_accuracy.py            # N = 100,000, d = 20
    python benchmarks/time_to_accuracy.py --quick    # N = 20,000, short reference (smoke run)

Problem: synthetic data, rows x_i ~ N(0, I) (float32), true w ~ N(0, I) / sqrt(d),
y_i ~ Bernoulli(sigmoid(x_i . w)); model ``numpyro_sgrld.models.logistic_regression.model``
(prior w ~ N(0, I)). The SG kernels draw a minibatch of ``--batch`` points (with replacement)
every step; NUTS runs ``full_batch(model)``, the exact full-data model, with default settings.

Reference: per-coordinate posterior mean and sd from a long NUTS run on the full data
(``numpyro_sgrld.reference_posterior``, cached on disk) with a seed different from the timed
NUTS run.

Measurement: the clock (``time.perf_counter``) starts before the first call into ``MCMC``, so
compilation, initialisation and warm-up / burn-in count. The first call is
``MCMC.warmup`` (``--burn-in`` steps for the SG kernels, ``--nuts-warmup`` adaptation steps for
NUTS); sampling then goes on in chunks (``--sg-chunk`` steps, kept every ``--thinning``-th, or
``--nuts-chunk`` NUTS draws), each continued from the previous chunk's last state
(``mcmc.post_warmup_state = mcmc.last_state``). Repeated chunks of one shape reuse the compiled
sampling loop. After every chunk (results blocked on before the clock is read) the running mean
over all post-warm-up draws so far is compared to the reference:

    error = max_j |running mean_j - reference mean_j| / reference sd_j.

The race is run twice on the same ``MCMC`` object with the same seed: "cold" (the time
including compilation) and "warm" (the same work again, every loop already compiled, as in a
repeated analysis of data of the same shapes). The time to accuracy is the time of the first
chunk after which error <= ``--tol``; a contender
that is not there after ``--max-seconds`` is stopped and reported as not reached. Gradient cost
is given in full-data gradient equivalents: one per NUTS leapfrog step (warm-up included), and
``batch / N`` per SG step. Before the first contender a tiny untimed run of each kind on a
slice of the data pays JAX's one-time start-up costs, so that the first contender is not charged
for them; each contender still compiles its own sampling loop inside its timed run.

One run per contender, one seed: the times are indicative. The SG kernels share the seed and so
the sequence of minibatches; where minibatch noise dominates, their running means follow that
common noise closely and reach the tolerance after similar numbers of steps.
"""

import argparse
import time
from functools import partial

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import MCMC, NUTS
from numpyro_sgrld.models import logistic_regression as lr

from numpyro_sgrld import PSGLD, SGHMC, SGLD, MongeSGLD, full_batch, reference_posterior

# Step sizes in units of h0 = 1 / (N L), L = 0.25 * largest eigenvalue of X^T X / N, a bound on
# the largest eigenvalue of the per-datum Hessian of the log-likelihood: h0 N L = 1 keeps
# gradient descent on the full-data potential stable. A constant-step SG chain's stationary mean
# is biased to first order in h, and in posterior sds the bias grows like h N^1.5 / batch: at h0
# it is well above 0.1 sd here, so the samplers take 0.02 h0 (SGLD-equivalent), chosen once for
# N = 100,000 and batch 500 and not tuned for this table (smaller N, as in --quick, gives less
# bias at the same multiple of h0).
# - SGLD, MongeSGLD: 0.02 h0. Near the posterior the averaged per-datum gradient is small, so
#   the Monge metric (alpha2 = 1) is close to the identity and takes the same step.
# - SGHMC (h = eta, default friction 0.1): 0.002 h0, so that h / friction, its overdamped
#   SGLD-equivalent step, is 0.02 h0; friction 0.1 is then near critical damping 2 sqrt(h N L).
# - PSGLD: the RMSprop metric divides by the root mean square of the per-datum minibatch
#   gradient, about sqrt(0.2 / batch) ~ 0.02 per coordinate at batch 500, so the same effective
#   step is 0.02 * 0.02 h0.
# - SGLD-CV (control variates centred at an Adam estimate of the mode): the gradient noise is
#   small near the centre, so the step is limited by the discretisation instead: 0.25 h0, whose
#   own bias on a Gaussian posterior is at most 1 / sqrt(1 - 0.125) - 1 ~ 7% of the sd.
SG_KERNELS = {
    "SGLD": (SGLD, 0.02, {}),
    "SGLD-CV": (SGLD, 0.25, {"control_variate": "mode", "mode_steps": 1000}),
    "SGHMC": (SGHMC, 0.002, {"friction": 0.1}),
    "PSGLD": (PSGLD, 0.0004, {}),
    "MongeSGLD": (MongeSGLD, 0.02, {}),
}
NUTS_NAME = "NUTS (full data)"

QUICK = dict(
    num_data=20_000,
    ref_chains=2,
    ref_samples=1000,
    ref_warmup=500,
    max_seconds=60.0,
)


def make_data(num_data, dim, seed=0):
    """Synthetic logistic-regression data: X (N, d) float32, y (N,) int32."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(num_data, dim)).astype(np.float32)
    w = rng.normal(size=dim) / np.sqrt(dim)
    y = (rng.random(num_data) < 1 / (1 + np.exp(-X @ w))).astype(np.int32)
    return jnp.asarray(X), jnp.asarray(y)


def base_step_size(X):
    """h0 = 1 / (N L), L = 0.25 * largest eigenvalue of X^T X / N."""
    X = np.asarray(X, np.float64)
    lipschitz = 0.25 * np.linalg.eigvalsh(X.T @ X / X.shape[0])[-1]
    return 1.0 / (X.shape[0] * lipschitz)


def reference_moments(X, y, args):
    """Posterior mean and sd of w per coordinate, and the smallest bulk ESS, from NUTS."""
    idata = reference_posterior(
        lr.model,
        X,
        y,
        num_samples=args.ref_samples,
        num_warmup=args.ref_warmup,
        num_chains=args.ref_chains,
        seed=args.ref_seed,
    )
    draws = idata.posterior["w"].values
    draws = draws.reshape(-1, draws.shape[-1])
    ess = float(az.ess(idata, var_names=["w"])["w"].values.min())
    return draws.mean(0), draws.std(0), ess


class RunningError:
    """Running mean of the post-warm-up draws of w, and its error against the reference."""

    def __init__(self, ref_mean, ref_sd):
        self.ref_mean, self.ref_sd = ref_mean, ref_sd
        self.total = np.zeros_like(ref_mean)
        self.count = 0

    def update(self, draws):
        draws = np.asarray(draws, np.float64)
        self.total += draws.sum(0)
        self.count += draws.shape[0]
        return self.error()

    def error(self):
        mean = self.total / max(self.count, 1)
        return float(np.max(np.abs(mean - self.ref_mean) / self.ref_sd))


def run_to_tolerance(mcmc, X, y, seed, tracker, tol, max_seconds, extra_fields=()):
    """Warm up, then sample chunk by chunk until the error is <= tol or time runs out.

    Returns a dict: seconds (to tolerance, None if not reached), elapsed, chunks, error, and
    the summed extra fields (warm-up and sampling) under their names.
    """
    totals = dict.fromkeys(extra_fields, 0)
    start = time.perf_counter()
    mcmc.warmup(random.PRNGKey(seed), X, y, extra_fields=extra_fields, collect_warmup=True)
    _add_fields(totals, mcmc)
    chunks, seconds, error = 0, None, float("inf")
    while time.perf_counter() - start < max_seconds:
        mcmc.post_warmup_state = mcmc.last_state
        mcmc.run(mcmc.post_warmup_state.rng_key, X, y, extra_fields=extra_fields)
        draws = jax.block_until_ready(mcmc.get_samples()["w"])
        chunks += 1
        error = tracker.update(draws)
        _add_fields(totals, mcmc)
        if error <= tol:
            seconds = time.perf_counter() - start
            break
    elapsed = time.perf_counter() - start
    return dict(seconds=seconds, elapsed=elapsed, chunks=chunks, error=error, **totals)


def _add_fields(totals, mcmc):
    fields = mcmc.get_extra_fields()
    for name in totals:
        totals[name] += int(np.asarray(fields[name]).sum())


def warm_up_jax(X, y, batch):
    """Untimed: a few steps of SGLD and NUTS on a slice of the data (JAX start-up costs)."""
    X, y = X[: 2 * batch], y[: 2 * batch]
    sg = partial(lr.model, subsample_size=batch)
    for kernel in (SGLD(sg, step_size=1e-6), NUTS(full_batch(lr.model))):
        mcmc = MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False, jit_model_args=True)
        mcmc.run(random.PRNGKey(0), X, y)
        jax.block_until_ready(mcmc.get_samples())


def _cold_and_warm(mcmc, X, y, ref, args, extra_fields=()):
    """The race twice with the same seed on the same ``MCMC`` object: the first ("cold") pays
    compilation, the second ("warm") repeats the same work with every loop already compiled,
    as a repeated analysis of data of the same shapes would."""
    cold = run_to_tolerance(
        mcmc, X, y, args.seed, RunningError(*ref), args.tol, args.max_seconds, extra_fields
    )
    warm = run_to_tolerance(
        mcmc, X, y, args.seed, RunningError(*ref), args.tol, args.max_seconds, extra_fields
    )
    cold["warm_seconds"] = warm["seconds"]
    return cold


def time_sg(name, X, y, ref, args):
    kernel_cls, step_units, options = SG_KERNELS[name]
    model = partial(lr.model, subsample_size=args.batch)
    step_size = step_units * base_step_size(X)
    mcmc = MCMC(
        kernel_cls(model, step_size=step_size, **options),
        num_warmup=args.burn_in,
        num_samples=args.sg_chunk,
        thinning=args.thinning,
        progress_bar=False,
        jit_model_args=True,
    )
    result = _cold_and_warm(mcmc, X, y, ref, args)
    steps = args.burn_in + result["chunks"] * args.sg_chunk
    result["iterations"] = steps
    result["gradients"] = steps * args.batch / X.shape[0]
    if options.get("control_variate") == "mode":
        # two minibatch gradients per step, the Adam steps, one full gradient at the centre
        result["gradients"] = (2 * steps + options["mode_steps"]) * args.batch / X.shape[0] + 1
    result["setting"] = f"h = {step_size:.2e}" + "".join(f", {k} {v}" for k, v in options.items())
    return result


def time_nuts(X, y, ref, args):
    mcmc = MCMC(
        NUTS(full_batch(lr.model)),
        num_warmup=args.nuts_warmup,
        num_samples=args.nuts_chunk,
        progress_bar=False,
        jit_model_args=True,
    )
    result = _cold_and_warm(mcmc, X, y, ref, args, ("num_steps",))
    result["iterations"] = args.nuts_warmup + result["chunks"] * args.nuts_chunk
    result["gradients"] = result["num_steps"]
    result["setting"] = f"{args.nuts_warmup} warm-up, chunks of {args.nuts_chunk}"
    return result


def table(results, args, num_data, ref_ess):
    nuts = results.get(NUTS_NAME, {}).get("seconds")
    nuts_warm = results.get(NUTS_NAME, {}).get("warm_seconds")
    lines = [
        f"Logistic regression, N = {num_data:,}, d = {args.dim}, SG minibatch {args.batch}; "
        f"tolerance {args.tol} reference sd (max over coordinates); reference: NUTS, "
        f"{args.ref_chains} x {args.ref_samples} draws, smallest ESS {ref_ess:.0f}. "
        f"Stopped after {args.max_seconds:g} s.\n",
        "| contender | setting | time to tol (s) | iterations (incl. warm-up) "
        "| full-data gradients | final error | speed-up vs NUTS | warm: time (s) | warm: "
        "speed-up |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        if r["seconds"] is None:
            reached, speedup = f"not reached (> {r['elapsed']:.1f})", "-"
        else:
            reached = f"{r['seconds']:.1f}"
            speedup = f"{nuts / r['seconds']:.1f}x" if nuts else "-"
        warm = r.get("warm_seconds")
        warm_cells = (
            f"{warm:.2f} | {nuts_warm / warm:.1f}x" if warm and nuts_warm else "- | -"
        )
        lines.append(
            f"| {name} | {r['setting']} | {reached} | {r['iterations']:,} | "
            f"{r['gradients']:,.0f} | {r['error']:.3f} | {speedup} | {warm_cells} |"
        )
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-data", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=20)
    p.add_argument("--batch", type=int, default=500, help="SG minibatch size")
    p.add_argument("--tol", type=float, default=0.1, help="in reference posterior sds")
    p.add_argument("--burn-in", type=int, default=2000, help="SG steps discarded")
    p.add_argument("--sg-chunk", type=int, default=5000, help="SG steps per chunk")
    p.add_argument("--thinning", type=int, default=10, help="SG draws kept: every n-th step")
    p.add_argument("--nuts-warmup", type=int, default=500)
    p.add_argument("--nuts-chunk", type=int, default=50, help="NUTS draws per chunk")
    p.add_argument("--max-seconds", type=float, default=120.0, help="cap per contender")
    p.add_argument("--ref-chains", type=int, default=4)
    p.add_argument("--ref-samples", type=int, default=2000)
    p.add_argument("--ref-warmup", type=int, default=1000)
    p.add_argument("--ref-seed", type=int, default=1, help="must differ from --seed")
    p.add_argument("--seed", type=int, default=0, help="seed of the timed runs")
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument(
        "--contenders",
        nargs="+",
        default=[*SG_KERNELS, "NUTS"],
        choices=[*SG_KERNELS, "NUTS"],
    )
    p.add_argument("--quick", action="store_true", help="smaller problem and reference")
    p.add_argument("--out", default=None, help="write the Markdown table here")
    args = p.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if getattr(args, key) == p.get_default(key):
                setattr(args, key, value)
    if args.ref_seed == args.seed:
        p.error("--ref-seed must differ from --seed")
    if args.sg_chunk % args.thinning:
        p.error("--sg-chunk must be a multiple of --thinning")
    return args


def main(argv=None):
    args = parse_args(argv)
    X, y = make_data(args.num_data, args.dim, args.data_seed)
    start = time.perf_counter()
    *ref, ref_ess = reference_moments(X, y, args)
    print(
        f"reference ready ({time.perf_counter() - start:.1f} s, smallest ESS {ref_ess:.0f}; "
        f"its own Monte Carlo error is about {1 / np.sqrt(ref_ess):.3f} sd)",
        flush=True,
    )
    warm_up_jax(X, y, args.batch)
    results = {}
    for name in args.contenders:
        if name == "NUTS":
            name, result = NUTS_NAME, time_nuts(X, y, ref, args)
        else:
            result = time_sg(name, X, y, ref, args)
        results[name] = result
        status = "reached" if result["seconds"] is not None else "NOT reached"
        print(
            f"{name}: {status}, error {result['error']:.3f} after {result['iterations']:,} "
            f"iterations, {result['elapsed']:.1f} s",
            flush=True,
        )
    text = table(results, args, X.shape[0], ref_ess)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
