"""Lange et al. (2023) Figs. 4.3 and 4.4 on an MNIST MLP: the empirical Fisher's condition
number per dense layer (BNP vs SGLD) and calibration (ECE, MCE, reliability diagrams) of BNP,
pSGLD and SGLD.

The network is Yu et al.'s 784-400-400-10 ReLU MLP with a Gaussian prior (He scales), minibatch
100, 50,000 training images; each sampler runs ``--epochs`` epochs (burn-in ``--burn-in``
steps, thinning ``--thinning``) through ``MCMC`` at the step sizes of
``benchmarks/papers/yu_table1.py`` (h = lr / N: SGLD 0.25, pSGLD 5e-4, BNP 0.25 with the paper's
defaults ρ = 0.99, ε₁ = 1e-2, ε₂ = 1e-4).

**Calibration** (Fig. 4.4): the ensemble of the kept draws on the 10,000 test images, ECE and MCE
with 10 equal-width bins (Naeini et al. 2015), and a reliability diagram per sampler.

**Fisher condition number** (Fig. 4.3): the paper averages :math:`V = \\bar g\\,\\bar g^\\top`
(:math:`\\bar g` the minibatch-mean gradient) online over the iterations, for one output unit's
parameters :math:`(b_i, w_{\\cdot i})` of a layer. Here, at each kept draw of a sampler,
``--fisher-batches`` minibatch gradients (batch 100) are averaged as outer products, for output
unit 0 of each dense layer; for BNP the gradient is taken in its preconditioned coordinates,
:math:`R^\\top\\bar g` with :math:`RR^\\top` BNP's metric (the statistics of the layer's inputs
at that draw on 1,000 training images): the Fisher that BNP's Langevin step sees. Input pixels
that are constant over the training set (zero gradient in every direction) are left out of the
first layer for both. The condition number is the ratio of the largest to the smallest
eigenvalue.

    python benchmarks/papers/bnp_mnist.py --epochs 10 --out docs/results/bnp_mnist.json \
        --figure docs/images/bnp_calibration.png
    python benchmarks/papers/bnp_mnist.py --conv --epochs 10 \
        --out docs/results/bnp_mnist_conv.json \
        --figure docs/images/bnp_calibration_conv.png

``--conv``: a small conv net instead (3×3 convolutions of 8 and 16 channels, stride 2, then a
dense layer), whose convolutions BNP preconditions on their patches; the Fisher is then per
output channel 0 of each convolution (its bias and its 3·3·c_in kernel entries), as the paper
computes it for ResNet-20's convolutions.
"""

import argparse
import json
import time
from functools import partial
from pathlib import Path

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld.models.bnn import mlp_classifier
from numpyro_sgrld.models.mnist import load_mnist

from numpyro_sgrld import (
    BNPSGLD,
    PSGLD,
    SGLD,
    classification_metrics,
    metrics,
    priors,
    random_haiku_module,
)
from numpyro_sgrld.analysis.plots import plot_reliability, pyplot
from numpyro_sgrld.core.metrics import StepContext
from numpyro_sgrld.sampler.potentials import minibatch_potential_with_aux

N = 50_000
SAMPLERS = {
    "SGLD": partial(SGLD, step_size=0.25 / N),
    "pSGLD": partial(PSGLD, step_size=5e-4 / N),
    "BNP": partial(BNPSGLD, step_size=0.25 / N),
}
def _conv_net(x):
    x = jnp.reshape(x, (-1, 28, 28, 1))
    x = jax.nn.relu(hk.Conv2D(8, 3, stride=2, name="conv_0")(x))
    x = jax.nn.relu(hk.Conv2D(16, 3, stride=2, name="conv_1")(x))
    return hk.Linear(10, name="linear")(jnp.reshape(x, (x.shape[0], -1)))


CONV = hk.transform(_conv_net)


def conv_classifier(X, y=None, *, subsample_size=None):
    """A small conv net on MNIST: 3×3 convolutions of 8 and 16 channels (stride 2, ReLU),
    then a dense layer to the 10 logits; Gaussian prior with He scales."""
    apply = random_haiku_module("net", CONV, (1, X.shape[1]), priors.gaussian())
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        logits = apply(X[idx])
        if y is None:
            numpyro.deterministic("logits", logits)
        numpyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx])


def _model(conv, width, batch):
    if conv:
        return partial(conv_classifier, subsample_size=batch)
    return partial(mlp_classifier, hidden=(width, width), subsample_size=batch)


def run(name, data, width, epochs, burn_in, thinning, seed, conv=False):
    X, y, Xt, yt = data
    model = _model(conv, width, 100)
    steps = epochs * (N // 100)
    mcmc = MCMC(SAMPLERS[name](model, init_strategy=priors.init_to_unit_scales),
                num_warmup=burn_in, num_samples=steps - burn_in, thinning=thinning,
                progress_bar=False)
    start = time.perf_counter()
    mcmc.run(random.PRNGKey(seed), X, y, extra_fields=("diverging",))
    samples = mcmc.get_samples()
    seconds = time.perf_counter() - start
    out = classification_metrics(model, samples, Xt, yt, batch_size=2000)
    out["seconds"] = seconds
    out["diverging"] = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
    return model, samples, out


def fisher_condition(model, stats_model, samples, X, y, bnp, batches, seed, live):
    """Per layer: the condition number of the average of ḡḡᵀ for output unit 0's (b, w), over
    its numerical range (eigenvalues above ``1e-10`` times the largest, in float64: a hidden
    unit that is dead at every draw has an exactly zero gradient)."""
    potential = jax.jit(minibatch_potential_with_aux(model, (X, y)))
    stats = jax.jit(minibatch_potential_with_aux(stats_model, (X, y)))
    grad = jax.jit(jax.grad(lambda z, idx: potential(z, idx)[0]))
    metric = metrics.bnp(0.0)
    rng = np.random.default_rng(seed)
    layers = sorted(k[:-2] for k in samples if k.endswith("/w"))
    sums = {p: 0.0 for p in layers}
    draws = len(next(iter(samples.values())))
    for s in range(draws):
        z = {k: v[s] for k, v in samples.items()}
        pre = None
        if bnp:
            _, aux = stats(z, {"data": jnp.asarray(rng.choice(N, 1000, replace=False))})
            pre, _ = metric.update(z, metric.init(z), z, StepContext(aux=aux))
        for _ in range(batches):
            idx = {"data": jnp.asarray(rng.choice(N, 100, replace=False))}
            g = jax.tree.map(lambda a: a / N, grad(z, idx))
            if bnp:
                g = pre.noise_transpose(g)
            for p in layers:
                w = np.reshape(np.asarray(g[p + "/w"]), (-1, g[p + "/w"].shape[-1]))
                v = np.concatenate([np.asarray(g[p + "/b"][:1]), w[:, 0]]).astype(np.float64)
                if live is not None and p == "net/mlp/linear_0":
                    v = v[np.concatenate([[True], live])]
                sums[p] = sums[p] + np.outer(v, v)
    out = {}
    for p in layers:
        eig = np.linalg.eigvalsh(sums[p] / (draws * batches))
        kept = eig[eig > 1e-10 * eig[-1]]
        out[p] = {"condition": float(kept[-1] / kept[0]), "dim": int(eig.size),
                  "rank": int(kept.size), "largest": float(kept[-1]),
                  "smallest": float(kept[0])}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--burn-in", type=int, default=1000)
    ap.add_argument("--thinning", type=int, default=100)
    ap.add_argument("--fisher-batches", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--conv", action="store_true",
                    help="the small conv net (conv_classifier) instead of the MLP")
    ap.add_argument("--out", default="docs/results/bnp_mnist.json")
    ap.add_argument("--figure", default="docs/images/bnp_calibration.png")
    args = ap.parse_args()
    X, y, Xt, yt = (jnp.asarray(a) for a in load_mnist(validation="drop"))
    live = np.asarray(X.var(0) > 0)
    results, probs = {}, {}
    for name in SAMPLERS:
        model, samples, out = run(name, (X, y, Xt, yt), args.width, args.epochs, args.burn_in,
                                  args.thinning, args.seed, args.conv)
        probs[name] = out.pop("probs")
        if name in ("SGLD", "BNP"):
            stats_model = _model(args.conv, args.width, 1000)
            out["fisher"] = fisher_condition(model, stats_model, samples, X, y, name == "BNP",
                                             args.fisher_batches, args.seed,
                                             None if args.conv else live)
        results[name] = out
        print(name, json.dumps(out), flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"settings": vars(args), **results}, indent=1))
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 4))
    for ax, name in zip(axes, ("BNP", "pSGLD", "SGLD")):
        net = "conv net" if args.conv else f"784-{args.width}-{args.width}-10"
        plot_reliability(probs[name], np.asarray(yt), ax=ax,
                         title=f"{name}: MNIST {net}, {args.epochs} epochs")
    fig.tight_layout()
    fig.savefig(args.figure, dpi=90)


if __name__ == "__main__":
    main()
