"""Time to accuracy on a large-N Bayesian logistic regression: stochastic-gradient kernels on
minibatches against NUTS on the full data.

    python benchmarks/speed/time_to_accuracy.py            # N = 100,000, d = 20
    python benchmarks/speed/time_to_accuracy.py --quick    # N = 20,000, short reference (smoke run)
    python benchmarks/speed/time_to_accuracy.py --fast-loop  # the SG kernels on their own loop

Without ``--fast-loop`` every kernel runs on NumPyro's loop, as ``MCMC`` runs it by default,
which compiles its loop again on every run, the "warm" runs included.

Problem: synthetic data, rows x_i ~ N(0, I) (float32), true w ~ N(0, I) / sqrt(d),
y_i ~ Bernoulli(sigmoid(x_i . w)); model ``numpyro_sgrld.models.logistic_regression.model``
(prior w ~ N(0, I)). The SG kernels draw a minibatch of ``--batch`` points (with replacement)
every step; NUTS runs ``full_batch(model)``, the exact full-data model, with default settings.

Reference: per-coordinate posterior mean and sd from a long NUTS run on the full data
(``numpyro_sgrld.reference_posterior``, cached on disk) with a seed different from the timed
NUTS run.

Measurement, per contender, "oracle stopping" (as when reading the crossing time off an
error-versus-time curve, but without the cost of monitoring):

1. trace (untimed): one ``MCMC.run`` of ``--burn-in`` steps (SG; ``--nuts-warmup`` adaptation
   steps for NUTS) and up to ``--sg-max-steps`` further steps, every ``--thinning``-th kept
   (``--nuts-max-draws`` draws for NUTS). The running mean over the kept draws gives, at every
   kept draw, ``error = max_j |running mean_j - reference mean_j| / reference sd_j``; the
   needed length is the first draw with error <= ``--tol``.
2. cold (timed, ``--repeats`` times, the fastest kept: other load on the machine only adds
   time): a new kernel and ``MCMC`` object run exactly that length with the same seed, so its
   draws are the first draws of the trace (the script checks that its error is the trace's).
   The clock (``time.perf_counter``) runs from the call to ``MCMC.run`` until the draws are
   ready: tracing, compilation, initialisation and warm-up / burn-in count. The part of it spent
   tracing and compiling (``jax.monitoring`` events) is reported too.
3. warm (timed, ``--repeats`` times, the fastest kept): the same ``run`` again on the last
   ``MCMC`` object, every loop already compiled, as in a repeated analysis of data of the same
   shapes.

Gradient cost is given in full-data gradient equivalents: one per NUTS leapfrog step (warm-up
included), ``batch / N`` per SG step (two per step with control variates, plus the mode search,
one full gradient and one full Hessian-vector product, counted as two gradients). Before the
first contender a tiny untimed run of each kind on a slice of the data pays JAX's one-time
start-up costs, so that the first contender is not charged for them; each contender still
compiles its own programs inside its cold run.

``hand SGLD-CV (one jitted program)`` (``--contenders hand``) is SGLD-CV written out as a single
jitted function outside NumPyro (``HandCV``): its cold time is about the least a cold SG run
costs on this machine.

One chain per contender, one seed: the times are indicative. The SG kernels share the seed and so
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
from jax import lax, random
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
#   Twice: from the initial position like the others (with their burn-in), and started at the
#   centre it found (`start_at_centre`, as Baker et al. 2019 start SGLD-CV), already in the bulk
#   of the posterior, with no burn-in.
# Entries: kernel, step size in units of h0, options, burn-in (None: --burn-in).
CV = {"control_variate": "mode", "mode_steps": 1000}
SG_KERNELS = {
    "SGLD": (SGLD, 0.02, {}, None),
    "SGLD-CV": (SGLD, 0.25, CV, None),
    "SGLD-CV (start at centre)": (SGLD, 0.25, {**CV, "start_at_centre": True}, 0),
    "SGHMC": (SGHMC, 0.002, {"friction": 0.1}, None),
    "PSGLD": (PSGLD, 0.0004, {}, None),
    "MongeSGLD": (MongeSGLD, 0.02, {"alpha2": 1.0}, None),
}
HAND_CV = "hand SGLD-CV (one jitted program)"
NUTS_NAME = "NUTS (full data)"

QUICK = dict(
    num_data=20_000,
    ref_chains=2,
    ref_samples=1000,
    ref_warmup=500,
    sg_max_steps=100_000,
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
    draws = np.asarray(draws, np.float64).reshape(-1, draws.shape[-1])  # a float64 sum
    ess = float(az.ess(idata, var_names=["w"])["w"].values.min())
    return draws.mean(0), draws.std(0), ess


def running_errors(draws, ref_mean, ref_sd):
    """``error[j]`` of the running mean over draws ``0..j`` (draws: (S, d))."""
    draws = np.asarray(draws, np.float64)
    means = np.cumsum(draws, 0) / np.arange(1, draws.shape[0] + 1)[:, None]
    return np.max(np.abs(means - ref_mean) / ref_sd, axis=1)


def first_within(errors, tol):
    """1 + the index of the first error <= tol (the number of draws needed), or None."""
    hits = np.flatnonzero(errors <= tol)
    return int(hits[0]) + 1 if hits.size else None


class CompileClock:
    """Seconds spent tracing, lowering and compiling (``jax.monitoring`` events) since
    ``reset``."""

    EVENTS = (
        "/jax/core/compile/jaxpr_trace_duration",
        "/jax/core/compile/jaxpr_to_mlir_module_duration",
        "/jax/core/compile/backend_compile_duration",
    )

    def __init__(self):
        self.seconds = 0.0
        jax.monitoring.register_event_duration_secs_listener(self._record)

    def _record(self, event, duration, **_):
        if event in self.EVENTS:
            self.seconds += duration

    def reset(self):
        self.seconds = 0.0


def warm_up_jax(X, y, batch):
    """Untimed: a few steps of SGLD and NUTS on a slice of the data (JAX start-up costs)."""
    X, y = X[: 2 * batch], y[: 2 * batch]
    sg = partial(lr.model, subsample_size=batch)
    for kernel in (SGLD(sg, step_size=1e-6), NUTS(full_batch(lr.model))):
        mcmc = MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False, jit_model_args=True)
        mcmc.run(random.PRNGKey(0), X, y)
        jax.block_until_ready(mcmc.get_samples())


def race(make_mcmc, X, y, ref, args, clock, extra_fields=()):
    """Trace, then the cold and warm timed runs of the needed length (see the module docstring).

    ``make_mcmc(num_samples)`` builds a new kernel and ``MCMC`` object. Returns a dict: draws
    (kept draws needed, None if not reached), error (at that draw, or the trace's last), cold and
    warm seconds (fastest of ``args.repeats``), compile seconds of the fastest cold run and of
    each, and the summed extra fields of the timed run.
    """
    key = random.PRNGKey(args.seed)
    trace = make_mcmc(None)
    trace.run(key, X, y, extra_fields=extra_fields)
    errors = running_errors(trace.get_samples()["w"], *ref)
    needed = first_within(errors, args.tol)
    if needed is None:
        return dict(draws=None, error=float(errors[-1]), kept=errors.size)

    def timed(mcmc):
        clock.reset()
        start = time.perf_counter()
        mcmc.run(key, X, y, extra_fields=extra_fields)
        draws = jax.block_until_ready(mcmc.get_samples()["w"])
        return time.perf_counter() - start, clock.seconds, draws

    # cold: a new kernel and MCMC object each repeat (so each compiles); warm: the last one again
    colds = []
    for _ in range(args.repeats):
        mcmc = make_mcmc(needed)
        colds.append(timed(mcmc))
    warm = min(timed(mcmc)[0] for _ in range(args.repeats))
    cold, compile_seconds, draws = min(colds, key=lambda c: c[0])
    error = float(running_errors(draws, *ref)[-1])
    if not np.isclose(error, errors[needed - 1], rtol=1e-3, atol=1e-4):
        raise RuntimeError(
            f"the timed run's error {error:.4f} differs from the trace's "
            f"{errors[needed - 1]:.4f} at the same draw: the runs are not the same chain"
        )
    totals = {name: int(np.asarray(value).sum()) for name, value in mcmc.get_extra_fields().items()}
    return dict(
        draws=needed,
        error=error,
        cold=cold,
        compile=compile_seconds,
        cold_compiles=[round(c[1], 2) for c in colds],
        warm=warm,
        **totals,
    )


def time_sg(name, X, y, ref, args, clock):
    kernel_cls, step_units, options, burn_in = SG_KERNELS[name]
    burn_in = args.burn_in if burn_in is None else burn_in
    model = partial(lr.model, subsample_size=args.batch)
    step_size = step_units * base_step_size(X)

    def make_mcmc(num_steps):
        return MCMC(
            kernel_cls(model, step_size=step_size, **options),
            num_warmup=burn_in,
            num_samples=args.sg_max_steps if num_steps is None else num_steps * args.thinning,
            thinning=args.thinning,
            progress_bar=False,
            jit_model_args=True,
        )

    result = race(make_mcmc, X, y, ref, args, clock)
    kept = result["draws"] or result["kept"]
    steps = burn_in + kept * args.thinning
    result["iterations"] = steps
    result["gradients"] = steps * args.batch / X.shape[0]
    if options.get("control_variate") == "mode":
        # two minibatch gradients per step, the Adam steps, one full gradient at the centre and
        # one full Hessian-vector product (the centre check, counted as two gradients)
        result["gradients"] = (2 * steps + options["mode_steps"]) * args.batch / X.shape[0] + 3
    result["setting"] = (
        f"h = {step_size:.2e}"
        + "".join(f", {k} {v}" for k, v in options.items())
        + f", burn-in {burn_in}"
    )
    return result


class HandCV:
    """SGLD-CV written out by hand as one jitted program, with the ``MCMC`` methods ``race``
    uses: w ~ U(-2, 2) (as ``init_to_uniform``), ``mode_steps`` Adam steps on minibatches with
    the learning rate decaying from 0.1 to 1e-4 (as ``find_mode``), the full-data gradient at
    the centre, then SGLD-CV started at the centre, every ``thinning``-th step kept. A new
    object is a new jitted function, so its first ``run`` traces and compiles: the least a
    cold SG run costs on this machine, whatever the library."""

    def __init__(self, X, y, step_size, batch, mode_steps, thinning, num_kept):
        N, d = X.shape
        y = y.astype(X.dtype)

        def potential(w, idx):
            logits = X[idx] @ w
            loglik = jnp.sum(y[idx] * logits - jax.nn.softplus(logits))
            return 0.5 * jnp.sum(w**2) - N / batch * loglik

        def full_potential(w):
            logits = X @ w
            return 0.5 * jnp.sum(w**2) - jnp.sum(y * logits - jax.nn.softplus(logits))

        def draw(key):
            return random.randint(key, (batch,), 0, N)

        def adam(carry, inputs):
            w, m, v = carry
            key, t = inputs
            g = jax.grad(potential)(w, draw(key))
            m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
            rate = 0.1 * (1e-4 / 0.1) ** (t / max(mode_steps - 1, 1))
            mhat, vhat = m / (1 - 0.9 ** (t + 1)), v / (1 - 0.999 ** (t + 1))
            return (w - rate * mhat / (jnp.sqrt(vhat) + 1e-8), m, v), None

        def run(key):
            k_init, k_mode, k_chain = random.split(key, 3)
            w = random.uniform(k_init, (d,), X.dtype, -2.0, 2.0)
            zeros = jnp.zeros_like(w)
            steps = (random.split(k_mode, mode_steps), jnp.arange(mode_steps, dtype=X.dtype))
            (centre, _, _), _ = lax.scan(adam, (w, zeros, zeros), steps)
            centre_grad = jax.grad(full_potential)(centre)
            grad_at = jax.grad(potential)

            def step(_, carry):
                w, key = carry
                key, k_idx, k_noise = random.split(key, 3)
                idx = draw(k_idx)
                g = centre_grad + grad_at(w, idx) - grad_at(centre, idx)
                xi = random.normal(k_noise, w.shape, w.dtype)
                return w - step_size * g + jnp.sqrt(2 * step_size) * xi, key

            def kept(carry, _):
                carry = lax.fori_loop(0, thinning, step, carry)
                return carry, carry[0]

            return lax.scan(kept, (centre, k_chain), length=num_kept)[1]

        self.run_info = jax.jit(run)
        self._draws = None

    def run(self, key, X, y, extra_fields=()):
        del X, y, extra_fields  # bound at construction
        self._draws = self.run_info(key)

    def get_samples(self):
        return {"w": self._draws}

    def get_extra_fields(self):
        return {}


def time_hand_cv(X, y, ref, args, clock):
    step_units, options = SG_KERNELS["SGLD-CV"][1:3]
    step_size = step_units * base_step_size(X)

    def make_mcmc(num_kept):
        num_kept = args.sg_max_steps // args.thinning if num_kept is None else num_kept
        return HandCV(
            X, y, step_size, args.batch, options["mode_steps"], args.thinning, num_kept
        )

    result = race(make_mcmc, X, y, ref, args, clock)
    steps = (result["draws"] or result["kept"]) * args.thinning
    result["iterations"] = steps
    result["gradients"] = (2 * steps + options["mode_steps"]) * args.batch / X.shape[0] + 1
    result["setting"] = f"h = {step_size:.2e}, mode_steps {options['mode_steps']}, burn-in 0"
    return result


def time_nuts(X, y, ref, args, clock):
    def make_mcmc(num_draws):
        return MCMC(
            NUTS(full_batch(lr.model)),
            num_warmup=args.nuts_warmup,
            num_samples=args.nuts_max_draws if num_draws is None else num_draws,
            progress_bar=False,
            jit_model_args=True,
        )

    result = race(make_mcmc, X, y, ref, args, clock, ("num_steps",))
    result["iterations"] = args.nuts_warmup + (result["draws"] or result["kept"])
    if result["draws"] is not None:
        # the timed run's extra fields cover its draws; its warm-up (the same chain) is counted
        # by an untimed warm-up-only run with the same seed
        warmup = make_mcmc(1)
        warmup.warmup(
            random.PRNGKey(args.seed), X, y, extra_fields=("num_steps",), collect_warmup=True
        )
        steps = np.asarray(warmup.get_extra_fields()["num_steps"]).sum()
        result["gradients"] = result["num_steps"] + int(steps)
    result["setting"] = f"{args.nuts_warmup} warm-up"
    return result


def table(results, args, num_data, ref_ess):
    nuts = results.get(NUTS_NAME, {})
    lines = [
        f"Logistic regression, N = {num_data:,}, d = {args.dim}, SG minibatch {args.batch}; "
        f"tolerance {args.tol} reference sd (max over coordinates); reference: NUTS, "
        f"{args.ref_chains} x {args.ref_samples} draws, smallest ESS {ref_ess:.0f}.\n",
        "| contender | setting | iterations to tol (incl. warm-up) | full-data gradients "
        "| error | cold: time (s) | of which compiling (s) | cold: speed-up vs NUTS "
        "| warm: time (s) | warm: speed-up |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        gradients = "-" if r.get("gradients") is None else f"{r['gradients']:,.0f}"
        if r["draws"] is None:
            lines.append(
                f"| {name} | {r['setting']} | not reached in {r['iterations']:,} | {gradients} "
                f"| {r['error']:.3f} | - | - | - | - | - |"
            )
            continue
        speedups = [
            f"{nuts[k] / r[k]:.1f}x" if nuts.get("draws") else "-" for k in ("cold", "warm")
        ]
        lines.append(
            f"| {name} | {r['setting']} | {r['iterations']:,} | {gradients} | {r['error']:.3f} "
            f"| {r['cold']:.2f} | {r['compile']:.2f} | {speedups[0]} | {r['warm']:.2f} "
            f"| {speedups[1]} |"
        )
    return "\n".join(lines)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-data", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=20)
    p.add_argument("--batch", type=int, default=500, help="SG minibatch size")
    p.add_argument("--tol", type=float, default=0.1, help="in reference posterior sds")
    p.add_argument("--burn-in", type=int, default=2000, help="SG steps discarded")
    p.add_argument(
        "--sg-max-steps", type=int, default=300_000, help="SG steps after burn-in in the trace"
    )
    p.add_argument("--thinning", type=int, default=10, help="SG draws kept: every n-th step")
    p.add_argument("--nuts-warmup", type=int, default=500)
    p.add_argument("--nuts-max-draws", type=int, default=1500, help="NUTS draws in the trace")
    p.add_argument("--ref-chains", type=int, default=4)
    p.add_argument("--ref-samples", type=int, default=2000)
    p.add_argument("--ref-warmup", type=int, default=1000)
    p.add_argument("--ref-seed", type=int, default=1, help="must differ from --seed")
    p.add_argument("--seed", type=int, default=0, help="seed of the timed runs")
    p.add_argument(
        "--repeats", type=int, default=3, help="timed cold and warm runs; the fastest is kept"
    )
    p.add_argument("--data-seed", type=int, default=0)
    p.add_argument(
        "--contenders",
        nargs="+",
        default=[*SG_KERNELS, "hand", "NUTS"],
        choices=[*SG_KERNELS, "hand", "NUTS"],
        help="'hand': SGLD-CV written out as one jitted program (the cold lower bound)",
    )
    p.add_argument("--quick", action="store_true", help="smaller problem and reference")
    p.add_argument("--out", default=None, help="write the Markdown table here")
    p.add_argument("--fast-loop", action="store_true",
                   help="run the SG kernels on their own sampling loop "
                        "(numpyro_sgrld.enable_fast_sampling_loop(); NUTS keeps NumPyro's)")
    args = p.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            if getattr(args, key) == p.get_default(key):
                setattr(args, key, value)
    if args.ref_seed == args.seed:
        p.error("--ref-seed must differ from --seed")
    if args.sg_max_steps % args.thinning:
        p.error("--sg-max-steps must be a multiple of --thinning")
    return args


def main(argv=None):
    args = parse_args(argv)
    if args.fast_loop:
        import numpyro_sgrld

        numpyro_sgrld.enable_fast_sampling_loop()
    X, y = make_data(args.num_data, args.dim, args.data_seed)
    start = time.perf_counter()
    *ref, ref_ess = reference_moments(X, y, args)
    print(
        f"reference ready ({time.perf_counter() - start:.1f} s, smallest ESS {ref_ess:.0f}; "
        f"its own Monte Carlo error is about {1 / np.sqrt(ref_ess):.3f} sd)",
        flush=True,
    )
    warm_up_jax(X, y, args.batch)
    clock = CompileClock()
    results = {}
    for name in args.contenders:
        if name == "NUTS":
            name, result = NUTS_NAME, time_nuts(X, y, ref, args, clock)
        elif name == "hand":
            name, result = HAND_CV, time_hand_cv(X, y, ref, args, clock)
        else:
            result = time_sg(name, X, y, ref, args, clock)
        results[name] = result
        if result["draws"] is None:
            status = f"NOT reached in {result['iterations']:,} iterations"
        else:
            status = (
                f"reached after {result['iterations']:,} iterations: cold {result['cold']:.2f} s "
                f"({result['compile']:.2f} s compiling; per repeat {result['cold_compiles']}), "
                f"warm {result['warm']:.2f} s"
            )
        print(f"{name}: {status}, error {result['error']:.3f}", flush=True)
    text = table(results, args, X.shape[0], ref_ess)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
