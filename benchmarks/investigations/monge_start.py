"""Why MongeSGLD failed at W = 400: the chain's start, not the update.

Runs MongeSGLD (Yu et al.'s lr 0.25, alpha2 1.25, decay 0.9, no drift safeguard), Monge with
decay 0 (V the current gradient) and identity SGLD on the 784-W-W-10 MNIST network for
``--steps`` steps from two starts that differ only in the biases: drawn from their N(0, 1)
prior (``init_to_unit_scales(biases="prior")``, this library's start before) or uniform in
±1/sqrt(size) (PyTorch's default, which Yu et al. keep; now ``init_to_unit_scales``'s
default). Reports the per-datum gradient norm at the start
(one minibatch of 100), alpha2·|V|² after the first 10 steps (how far the metric is
from the identity), the first diverging step, and the test accuracy of the last state.

    python benchmarks/investigations/monge_start.py --width 400 --steps 2000
"""

import argparse
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld.models.bnn import mlp_classifier
from numpyro_sgrld.models.mnist import load_mnist

from numpyro_sgrld import SGLD, MongeSGLD, predict_sites, priors

NUM_TRAIN = 50_000
ALPHA2 = 1.25
THIN = 20


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--width", type=int, default=400)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--prior", default="horseshoe", choices=["horseshoe", "gaussian"])
    args = p.parse_args(argv)
    X, y, X_test, y_test = (jnp.asarray(a) for a in load_mnist(validation="drop"))
    prior = priors.horseshoe("layer") if args.prior == "horseshoe" else priors.gaussian()
    model = partial(mlp_classifier, hidden=(args.width,) * 2, prior=prior, subsample_size=100)
    print(
        f"| start (biases) | sampler | per-datum gradient norm at the start "
        f"| alpha2 |V|^2 at step 10 | first diverging step of {args.steps} | test accuracy |"
    )
    print("|---|---|---|---|---|---|")
    for biases in ("prior", "uniform"):
        init = partial(priors.init_to_unit_scales, biases=biases)
        for name in ("MongeSGLD", "MongeSGLD, decay 0", "SGLD"):
            if name == "SGLD":
                kernel = SGLD(model, 0.25 / NUM_TRAIN, init_strategy=init)
            else:
                decay = 0.0 if "decay 0" in name else 0.9
                kernel = MongeSGLD(
                    model, 0.25 / NUM_TRAIN, alpha2=ALPHA2, decay=decay, init_strategy=init
                )
            short = MCMC(kernel, num_warmup=0, num_samples=10, progress_bar=False)
            short.run(random.PRNGKey(0), X, y, extra_fields=("grad_norm",))
            # the first step's gradient is the start's (one minibatch of 100)
            gnorm = float(short.get_extra_fields()["grad_norm"][0]) / NUM_TRAIN
            strength = "—"
            if name.startswith("MongeSGLD"):
                avg = short.last_state.sampler_state.metric.avg
                sq = sum(float(jnp.sum(v**2)) for v in jax.tree.leaves(avg))
                strength = f"{ALPHA2 * sq:.3g}"
            # every THIN-th state kept; a diverged chain stays put and every later draw is
            # flagged, so the first flagged draw locates the divergence within THIN steps
            mcmc = MCMC(
                kernel, num_warmup=0, num_samples=args.steps, thinning=THIN, progress_bar=False
            )
            mcmc.run(random.PRNGKey(0), X, y, extra_fields=("diverging",))
            div = np.asarray(mcmc.get_extra_fields()["diverging"])
            first = f"<= {THIN * (int(np.argmax(div)) + 1)}" if div.any() else "none"
            last = {k: v[-1:] for k, v in mcmc.get_samples().items()}
            if div.any():
                acc = "—"
            else:
                logits = predict_sites(model, last, X_test, ["logits"], batch_size=2000)
                acc = f"{float(np.mean(logits['logits'][0].argmax(-1) == np.asarray(y_test))):.4f}"
            print(f"| {biases} | {name} | {gnorm:.3g} | {strength} | {first} | {acc} |", flush=True)


if __name__ == "__main__":
    main()
