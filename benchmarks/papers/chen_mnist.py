"""Chen, Fox & Guestrin (2014), Sec. 4.2 (Bühler's survey, Fig. 3): test error over epochs of SGD,
SGD with momentum, SGLD and SGHMC on a 784-100-10 network on MNIST.

The network: one hidden layer of 100 ReLU units (``models.bnn.mlp_classifier``, Gaussian prior
with He scales), minibatch 500, the 50,000 training images (``load_mnist(validation="drop")``),
the 10,000 test images. Four runs through ``MCMC``, the same seed:

- **SGD**: ``SGLD(model, h, temperature=0)`` (no noise), h = lr / N with lr = 0.5 on the mean
  log-likelihood;
- **SGD with momentum**: ``SGHMC(model, h_m, friction=0.1, temperature=0)``, h_m = 0.05 / N
  (momentum 0.9, learning rate 0.05: the same effective rate 0.05 / 0.1 = 0.5);
- **SGLD**: ``SGLD(model, h)``, the same step as SGD;
- **SGHMC**: ``SGHMC(model, h_m, friction=0.1)``, the same step and friction as SGD with
  momentum.

Our choices where we do not follow the paper: the prior (Gaussian with He scales, not their
Gamma hyperprior sampled by Gibbs steps), the learning rates above (not tuned per method), the
length (``--epochs``, 200 by default, against the paper's 800). Test error after every epoch:
for SGD and SGD with momentum the current iterate's; for SGLD and SGHMC the error of the
posterior predictive averaged over the draws since the end of the burn-in (``--burn-in``
epochs, 50 by default; 10 draws per epoch), as Chen et al. average their samples.

    python benchmarks/papers/chen_mnist.py --out docs/results/chen_mnist.json \
        --figure docs/images/chen_mnist.png
    python benchmarks/papers/chen_mnist.py --replot --out docs/results/chen_mnist.json \
        --figure docs/images/chen_mnist.png     # the figure again, from the results
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
from numpyro.infer import MCMC, Predictive
from numpyro_sgrld.models.bnn import mlp_classifier
from numpyro_sgrld.models.mnist import load_mnist

from numpyro_sgrld import SGHMC, SGLD, priors

N, BATCH, FRICTION = 50_000, 500, 0.1
LR, LR_MOMENTUM = 0.5, 0.05
METHODS = {
    "SGD": lambda m: SGLD(m, LR / N, temperature=0.0, init_strategy=priors.init_to_unit_scales),
    "SGD with momentum": lambda m: SGHMC(m, LR_MOMENTUM / N, friction=FRICTION, temperature=0.0,
                                         init_strategy=priors.init_to_unit_scales),
    "SGLD": lambda m: SGLD(m, LR / N, init_strategy=priors.init_to_unit_scales),
    "SGHMC": lambda m: SGHMC(m, LR_MOMENTUM / N, friction=FRICTION,
                             init_strategy=priors.init_to_unit_scales),
}
SAMPLERS = ("SGLD", "SGHMC")
PER_EPOCH = 10  # draws kept per epoch


def run(name, data, epochs, seed):
    """The draws (``PER_EPOCH`` per epoch) of one method and the seconds it took."""
    X, y, _, _ = data
    model = partial(mlp_classifier, hidden=(100,), subsample_size=BATCH)
    steps_per_epoch = N // BATCH
    mcmc = MCMC(METHODS[name](model), num_warmup=0, num_samples=epochs * steps_per_epoch,
                thinning=steps_per_epoch // PER_EPOCH, progress_bar=False)
    start = time.perf_counter()
    mcmc.run(random.PRNGKey(seed), X, y, extra_fields=("diverging",))
    samples = jax.block_until_ready(mcmc.get_samples())
    diverging = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
    return samples, time.perf_counter() - start, diverging


def test_probabilities(samples, Xt, chunk=50):
    """Softmax probabilities of every draw on the test images, (draws, n_test, 10)."""
    model = partial(mlp_classifier, hidden=(100,), subsample_size=None)
    draws = len(next(iter(samples.values())))
    out = []
    for start in range(0, draws, chunk):
        part = {k: v[start:start + chunk] for k, v in samples.items()}
        logits = Predictive(model, part, return_sites=["logits"])(random.PRNGKey(0), Xt)
        out.append(np.asarray(jax.nn.softmax(logits["logits"], axis=-1)))
    return np.concatenate(out)


def error_curve(probs, yt, name, burn_in):
    """Test error after every epoch: the current iterate's (optimisers) or that of the
    predictive averaged over the draws since the end of ``burn_in`` epochs (samplers)."""
    yt = np.asarray(yt)
    epochs = len(probs) // PER_EPOCH
    errors = []
    for e in range(1, epochs + 1):
        last = e * PER_EPOCH
        if name in SAMPLERS and e > burn_in:
            p = probs[burn_in * PER_EPOCH:last].mean(0)
        else:
            p = probs[last - 1]
        errors.append(float(np.mean(p.argmax(-1) != yt)))
    return errors


def figure(curves, path, burn_in):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for (name, errs), style in zip(curves.items(), ("C0--", "C1--", "C2-", "C3-")):
        ax.plot(np.arange(1, len(errs) + 1), errs, style, lw=1.5, label=name)
    ax.axvline(burn_in, color="0.7", lw=0.8)
    ax.set_xlabel("epoch")
    ax.set_ylabel("test error (log scale)")
    ax.set_yscale("log")
    ax.set_title("MNIST, 784-100-10 ReLU network, minibatch 500")
    lo = min(min(e) for e in curves.values())
    ax.set_ylim(lo * 0.9, max(max(e) for e in curves.values()) * 1.1)
    ax.legend(frameon=False, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--burn-in", type=int, default=50,
                    help="epochs before the samplers average")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--figure", type=Path, default=None)
    ap.add_argument("--replot", action="store_true",
                    help="draw --figure from the results in --out (no runs)")
    args = ap.parse_args(argv)
    if args.replot:
        results = json.loads(args.out.read_text())
        curves = {name: results[name]["test_error"] for name in METHODS}
        figure(curves, args.figure, results["settings"]["burn_in"])
        return results
    X, y, Xt, yt = (jnp.asarray(a) for a in load_mnist(validation="drop"))
    assert X.shape[0] == N, X.shape
    curves, results = {}, {}
    for name in METHODS:
        samples, seconds, diverging = run(name, (X, y, Xt, yt), args.epochs, args.seed)
        probs = test_probabilities(samples, Xt)
        curves[name] = error_curve(probs, yt, name, args.burn_in)
        results[name] = dict(test_error=curves[name], final=curves[name][-1], seconds=seconds,
                             diverging=diverging)
        print(f"{name:18s} final test error {curves[name][-1]:.4f} ({seconds:.0f} s, "
              f"{diverging} rejected steps)", flush=True)
        jax.clear_caches()
        if args.out is not None:
            args.out.write_text(json.dumps(dict(settings=vars(args) | {"out": str(args.out),
                                                "figure": str(args.figure)}, **results),
                                           indent=1) + "\n")
    if args.figure is not None:
        figure(curves, args.figure, args.burn_in)
    return results


if __name__ == "__main__":
    main()
