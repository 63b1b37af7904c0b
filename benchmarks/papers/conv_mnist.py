"""Convolutional Bayesian networks on MNIST: the identity (SGLD), RMSprop (PSGLD) and Shampoo
(ShampooSGLD) metrics, and SGHMC, on a small conv net with Fortuin et al.'s correlated normal
prior; a stand-in for Yu et al.'s (2023) ResNet-20 / CIFAR-10 experiment (their Table 3), and a
comparison with SGMCMCJax's Flax CNN on MNIST at equal numbers of gradient evaluations.

The data: the 50,000 training images of ``load_mnist(validation="drop")`` and the 10,000 test
images. The networks (``numpyro_sgrld.models.cnn``): ``cnn_classifier`` (3x3 convolutions with
16 and 32 channels, ReLU, 2x2 max pooling, a dense output layer; 20,490 parameters) and
``resnet_classifier`` (a stem convolution and two residual blocks, 16 and 32 channels, global
average pooling; 19,562 parameters), no batch norm. The prior: ``conv_priors.correlated_normal()``
on the kernels (lengthscale 1, He scale), ``priors.gaussian()`` elsewhere (or everywhere, in
the ``Gaussian`` runs). The start:
``priors.init_to_unit_scales`` (weights a prior draw, biases uniform in +-1/sqrt(size)).

Every run: minibatches of ``--batch`` (100), step size h = lr / N, a draw every
``--thinning`` (100) steps; the draws after a ``--burn-in`` of 200 steps are averaged into the
ensemble predictive. At every checkpoint (500, 1000, 2000 steps; 500 for the residual net) the
table has the test accuracy of the last state (the draw at that step) and the ensemble's test
accuracy, test log-probability and expected calibration error (10 bins), with the number of
gradient evaluations (one minibatch gradient per step for every sampler here, SGHMC included).
The results go to ``--out`` (JSON lines, one per finished run; runs already there are
skipped), the Markdown table to stdout (``--table`` prints it from the file without running).

The runs (``--runs``; lr and the reasons for it in ``docs/conv_nets.md``): by default
``identity 0.125``, ``identity 0.25``, ``identity 0.5``, ``RMSprop`` (lr 5e-4), ``Shampoo``
(5e-3), ``SGHMC`` (0.06, SGMCMCJax's settings), ``ResNet identity`` (0.025) and
``ResNet Shampoo`` (5e-3), about 16 minutes on 2 shared cores; on request ``identity 0.0625``,
the Gaussian-prior runs ``Gaussian SGLD 0.25``, ``Gaussian RMSprop``, ``Gaussian Shampoo``,
and ``identity 0.3 batch 600`` (SGMCMCJax's minibatch of 600 and SGLD step; six times the
cost per step).

    nice python benchmarks/papers/conv_mnist.py --out docs/results/conv_mnist.jsonl
    nice python benchmarks/papers/conv_mnist.py --out docs/results/conv_mnist.jsonl \\
        --runs "identity 0.0625" "Gaussian SGLD 0.25" "Gaussian RMSprop" "Gaussian Shampoo" \\
        "identity 0.3 batch 600"
    python benchmarks/papers/conv_mnist.py --table docs/results/conv_mnist.jsonl
"""

import argparse
import json
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.scipy.special import logsumexp
from numpyro import handlers
from numpyro.infer import MCMC
from numpyro_sgrld.models.cnn import cnn_classifier, resnet_classifier
from numpyro_sgrld.models.mnist import load_mnist

from numpyro_sgrld import PSGLD, SGHMC, SGLD, ShampooSGLD, enable_fast_sampling_loop, priors
from numpyro_sgrld.analysis.predictive import expected_calibration_error
from numpyro_sgrld.bridges.conv_priors import correlated_normal

N = 50_000
MODELS = {"cnn": cnn_classifier, "resnet": resnet_classifier}
PRIORS = {"correlated": correlated_normal, "gaussian": priors.gaussian}
# SGMCMCJax's SGHMC (build_sghmc_kernel(dt=1e-6, L=4), alpha=0.01): friction 0.01, the
# momentum redrawn from N(0, h) every 4 steps, one minibatch gradient per step
SAMPLERS = {
    "identity": lambda m, h: SGLD(m, h, init_strategy=priors.init_to_unit_scales),
    "RMSprop": lambda m, h: PSGLD(m, h, init_strategy=priors.init_to_unit_scales),
    "Shampoo": lambda m, h: ShampooSGLD(m, h, init_strategy=priors.init_to_unit_scales),
    "SGHMC": lambda m, h: SGHMC(m, h, friction=0.01, initial_momentum="random",
                                resample_momentum_every=4,
                                init_strategy=priors.init_to_unit_scales),
}


def _run_spec(model, prior, sampler, lr, steps, batch=None):
    """A run; ``batch`` (default ``--batch``) overrides the minibatch size."""
    return dict(model=model, prior=prior, sampler=sampler, lr=lr, steps=steps, batch=batch)


RUNS = {
    "identity 0.0625": _run_spec("cnn", "correlated", "identity", 0.0625, 2000),
    "identity 0.125": _run_spec("cnn", "correlated", "identity", 0.125, 2000),
    "identity 0.25": _run_spec("cnn", "correlated", "identity", 0.25, 2000),
    "identity 0.5": _run_spec("cnn", "correlated", "identity", 0.5, 2000),
    "RMSprop": _run_spec("cnn", "correlated", "RMSprop", 5e-4, 2000),
    "Shampoo": _run_spec("cnn", "correlated", "Shampoo", 5e-3, 2000),
    "SGHMC": _run_spec("cnn", "correlated", "SGHMC", 0.06, 2000),
    "ResNet identity": _run_spec("resnet", "correlated", "identity", 0.025, 500),
    "ResNet Shampoo": _run_spec("resnet", "correlated", "Shampoo", 5e-3, 500),
    "Gaussian SGLD 0.25": _run_spec("cnn", "gaussian", "identity", 0.25, 2000),
    "Gaussian RMSprop": _run_spec("cnn", "gaussian", "RMSprop", 5e-4, 2000),
    "Gaussian Shampoo": _run_spec("cnn", "gaussian", "Shampoo", 5e-3, 2000),
    # SGMCMCJax's minibatch (1 % of the data) and SGLD step (dt = 5e-6 on 60,000 images)
    "identity 0.3 batch 600": _run_spec("cnn", "correlated", "identity", 0.3, 2000, 600),
}
EXTRA_RUNS = ("identity 0.0625", "Gaussian SGLD 0.25", "Gaussian RMSprop", "Gaussian Shampoo",
              "identity 0.3 batch 600")
DEFAULT_RUNS = [name for name in RUNS if name not in EXTRA_RUNS]
CHECKPOINTS = (500, 1000, 2000)


def network(spec, **kwargs):
    """The model of a run, ``kwargs`` (``subsample_size``, ``conv``) bound."""
    return partial(MODELS[spec["model"]], prior=PRIORS[spec["prior"]](), **kwargs)


def sample(spec, data, batch, thinning, seed):
    """Draws every ``thinning`` steps (the last at ``spec["steps"]``), seconds, rejections."""
    X, y = data
    kernel = SAMPLERS[spec["sampler"]](network(spec, subsample_size=batch), spec["lr"] / N)
    mcmc = MCMC(kernel, num_warmup=0, num_samples=spec["steps"], thinning=thinning,
                progress_bar=False)
    start = time.perf_counter()
    mcmc.run(random.PRNGKey(seed), X, y)
    samples = jax.block_until_ready(mcmc.get_samples())
    return samples, time.perf_counter() - start, int(mcmc.last_state.num_rejected)


def draw_log_probs(spec, samples, X_test):
    """Log class probabilities of every draw on the test images, (draws, n_test, classes),
    with ``hk.Conv2D`` (outside a sampling loop it is the faster convolution) and the model's
    chunks of 1000 images."""
    model = network(spec, subsample_size=None, conv="xla")

    @jax.jit
    def one(draw):
        seeded = handlers.seed(handlers.substitute(model, data=draw), 0)
        logits = handlers.trace(seeded).get_trace(X_test, None)["logits"]["value"]
        return jax.nn.log_softmax(logits)

    draws = len(next(iter(samples.values())))
    return np.stack([np.asarray(one({k: v[i] for k, v in samples.items()}))
                     for i in range(draws)])


def scores(log_probs, y):
    """Accuracy, mean test log-probability and ECE of the ensemble of ``log_probs`` (draws,
    points, classes): the predictive is the mean of the draws' probabilities."""
    log_mean = np.asarray(logsumexp(jnp.asarray(log_probs), axis=0)) - np.log(len(log_probs))
    y = np.asarray(y)
    return dict(
        accuracy=float(np.mean(log_mean.argmax(-1) == y)),
        log_prob=float(np.mean(log_mean[np.arange(y.size), y])),
        ece=float(expected_calibration_error(np.exp(log_mean), y, 10)),
    )


def checkpoints(log_probs, draw_steps, y, steps, burn_in, batch):
    """Per checkpoint: the last state's scores and the ensemble's (draws after ``burn_in``);
    ``draw_steps``: the step of each draw in ``log_probs``."""
    rows = []
    for c in [c for c in CHECKPOINTS if c <= steps] or [steps]:
        last = int(np.flatnonzero(draw_steps == c)[0])
        kept = (draw_steps > burn_in) & (draw_steps <= c)
        rows.append(dict(
            steps=int(c), gradient_evaluations=int(c), examples=int(c * batch),
            epochs=c * batch / N, last=scores(log_probs[last:last + 1], y),
            ensemble=scores(log_probs[kept], y), draws=int(kept.sum()),
        ))
    return rows


def run(name, data, test, args):
    spec = dict(RUNS[name])
    batch = spec.pop("batch") or args.batch
    samples, seconds, rejected = sample(spec, data, batch, args.thinning, args.seed)
    draw_steps = args.thinning * np.arange(1, len(next(iter(samples.values()))) + 1)
    kept = draw_steps > args.burn_in  # every checkpoint is after the burn-in
    start = time.perf_counter()
    log_probs = draw_log_probs(spec, {k: v[kept] for k, v in samples.items()}, test[0])
    evaluation = time.perf_counter() - start
    rows = checkpoints(log_probs, draw_steps[kept], test[1], spec["steps"], args.burn_in, batch)
    jax.clear_caches()
    return dict(name=name, **spec, batch=batch, thinning=args.thinning,
                burn_in=args.burn_in, seed=args.seed, rejected=rejected,
                sampling_seconds=seconds, evaluation_seconds=evaluation, checkpoints=rows)


def table(results):
    """The Markdown table of a list of results, one row per run and checkpoint."""
    lines = [
        "| run | network | prior | lr | batch | steps = gradient evaluations | epochs "
        "| last-state accuracy | ensemble accuracy | ensemble log-prob | ensemble ECE "
        "| draws | rejected | seconds (sampling + test) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for c in r["checkpoints"]:
            lines.append(
                f"| {r['name']} | {r['model']} | {r['prior']} | {r['lr']:g} | {r['batch']} "
                f"| {c['steps']} "
                f"| {c['epochs']:.1f} | {100 * c['last']['accuracy']:.2f} % "
                f"| {100 * c['ensemble']['accuracy']:.2f} % | {c['ensemble']['log_prob']:.4f} "
                f"| {c['ensemble']['ece']:.4f} | {c['draws']} | {r['rejected']} "
                f"| {r['sampling_seconds']:.0f} + {r['evaluation_seconds']:.0f} |"
            )
    return "\n".join(lines)


def read(path):
    if path is None or not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, choices=list(RUNS),
                    metavar="RUN", help=f"runs, of: {', '.join(RUNS)}")
    ap.add_argument("--batch", type=int, default=100)
    ap.add_argument("--thinning", type=int, default=100)
    ap.add_argument("--burn-in", type=int, default=200, help="steps before the ensemble")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="JSON lines, appended per run")
    ap.add_argument("--table", type=Path, default=None,
                    help="print the table of this results file and exit")
    args = ap.parse_args(argv)
    if args.table is not None:
        print(table(read(args.table)))
        return read(args.table)
    if any(c % args.thinning for c in CHECKPOINTS) or args.burn_in % args.thinning:
        ap.error("--thinning must divide the checkpoints (500, 1000, 2000) and --burn-in")
    if args.burn_in >= min(CHECKPOINTS):
        ap.error(f"--burn-in must end before the first checkpoint ({min(CHECKPOINTS)} steps)")
    enable_fast_sampling_loop()
    X, y, Xt, yt = (jnp.asarray(a) for a in load_mnist(validation="drop"))
    assert X.shape[0] == N, X.shape
    done = {r["name"] for r in read(args.out)}
    results = []
    for name in args.runs:
        if name in done:
            print(f"{name}: in {args.out} already, skipped", flush=True)
            continue
        result = run(name, (X, y), (Xt, yt), args)
        results.append(result)
        final = result["checkpoints"][-1]
        print(f"{name:18s} {final['steps']} steps: last {100 * final['last']['accuracy']:.2f} %, "
              f"ensemble {100 * final['ensemble']['accuracy']:.2f} % "
              f"({result['sampling_seconds']:.0f} + {result['evaluation_seconds']:.0f} s, "
              f"{result['rejected']} rejected)", flush=True)
        if args.out is not None:
            with args.out.open("a") as f:
                f.write(json.dumps(result) + "\n")
    print(table(read(args.out) if args.out is not None else results))
    return results


if __name__ == "__main__":
    main()
