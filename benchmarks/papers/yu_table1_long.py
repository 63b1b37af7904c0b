"""Yu et al. (2023) Table 1 at the paper's length: 784-W-W-10 on MNIST, 400 epochs, resumable.

Every run is a sequence of segments of ``--segment-epochs`` epochs. After each segment the
segment's kept draws (every ``--thinning``-th step after the burn-in) are evaluated on the
10,000 test images and added to the ensemble's running sum of predictive class probabilities,
then dropped; a row with the ensemble's test log-probability, accuracy and ECE so far (Yu et
al.'s Fig. 3) is appended to ``--out`` (JSON lines), and the chain's state and the running sum
are saved to ``--checkpoints/<run>.pkl``. Started again with the same arguments, a run
continues from its last saved segment (finished runs are skipped), so the script can be
stopped at any time.

Settings are Yu et al.'s (``ksnxr/SSGRLDNDM`` README and ``train_bnn.py``): batch 100, flat
learning rate, burn-in 1000 steps, thinning 100, the horseshoe as they implement it
(``priors.horseshoe("layer", parametrisation="softplus")``) or the Gaussian prior (scale
1.41/sqrt(fan_in), biases 1), He-initialised weights and PyTorch-initialised biases
(``priors.init_to_unit_scales``), their update variants (``--updates authors``: pSGLD without
bias correction, Wenzel's lagged refresh, Shampoo's fixed blocks, unpreconditioned vectors and
ridge in the statistic; ``tests/test_reference_updates.py``), and their best learning rates
at W = 400 with each prior (their Table 4; h = lr / 50,000; with the Gaussian prior Monge's
best alpha² is 0, i.e. identity, so it has no run of its own). Monge runs without a drift
safeguard. ``--samplers`` defaults to every sampler that has a learning rate for ``--prior``.

    python benchmarks/papers/yu_table1_long.py --samplers identity Monge --epochs 400
    python benchmarks/papers/yu_table1_long.py --prior gaussian --epochs 400
"""

import argparse
import json
import pickle
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import MCMC
from numpyro_sgrld.models.bnn import mlp_classifier
from numpyro_sgrld.models.mnist import load_mnist

from numpyro_sgrld import (
    BNPSGLD,
    PSGLD,
    SGLD,
    MongeSGLD,
    ShampooSGLD,
    WenzelSGLD,
    expected_calibration_error,
    fast_sampling_loop,
    predict_sites,
    priors,
)

NUM_TRAIN = 50_000
# Yu et al.'s learning rates at W = 400 (their Table 4), horseshoe prior; BNP (not in the
# paper) at identity's
LEARNING_RATES = {
    "identity": 0.25,
    "Wenzel": 0.75,
    "RMSprop": 5e-4,
    "Monge": 0.25,
    "Shampoo": 5e-3,
    "BNP": 0.25,
}
# ... and with the Gaussian prior ("Identity is optimal" for Monge there: alpha² = 0, so its
# row is identity's and it is not run; BNP at identity's rate)
GAUSSIAN_LEARNING_RATES = {
    "identity": 0.05,
    "Wenzel": 0.075,
    "RMSprop": 2.5e-4,
    "Shampoo": 2.5e-3,
    "BNP": 0.05,
}


def learning_rate(name, prior):
    """Yu et al.'s learning rate of sampler ``name`` at W = 400 with ``prior``."""
    rates = LEARNING_RATES if prior == "horseshoe" else GAUSSIAN_LEARNING_RATES
    if name not in rates:
        raise ValueError(
            f"Yu et al. give no learning rate for {name!r} with the {prior} prior (Monge's best "
            "alpha² there is 0, i.e. identity): run identity instead."
        )
    return rates[name]
AUTHORS = {
    "RMSprop": dict(bias_correction=False),
    "Wenzel": dict(lagged_refresh=True),
    "Shampoo": dict(block_split="fixed", precondition_vectors=False, ridge="statistic"),
}
KERNELS = {
    "identity": SGLD,
    "Wenzel": WenzelSGLD,
    "RMSprop": PSGLD,
    "Monge": partial(MongeSGLD, alpha2=1.25),
    "Shampoo": ShampooSGLD,
    "BNP": BNPSGLD,
}


def build_model(width, prior, batch):
    net_prior = (
        priors.horseshoe("layer", parametrisation="softplus")
        if prior == "horseshoe"
        else priors.gaussian()
    )
    return partial(mlp_classifier, hidden=(width, width), prior=net_prior, subsample_size=batch)


def build_kernel(name, model, updates, step_scale=1.0, alpha2=None, prior="horseshoe"):
    options = dict(AUTHORS.get(name, {})) if updates == "authors" else {}
    if alpha2 is not None and name == "Monge":
        options["alpha2"] = alpha2
    step = step_scale * learning_rate(name, prior) / NUM_TRAIN
    return KERNELS[name](model, step, init_strategy=priors.init_to_unit_scales, **options)


def ensemble_scores(prob_sum, count, y, num_bins=10):
    probs = prob_sum / count
    logp = np.log(np.maximum(probs, 1e-40))
    return {
        "log_prob": float(np.mean(logp[np.arange(y.size), y])),
        "accuracy": float(np.mean(probs.argmax(axis=1) == y)),
        "ece": float(expected_calibration_error(probs, y, num_bins)),
    }


def segment_prob_sum(model, samples, X_test):
    """Sum over the segment's draws of the predictive class probabilities (test x classes)."""
    total = np.zeros((X_test.shape[0], 10))
    num = len(next(iter(samples.values())))
    for start in range(0, num, 10):
        chunk = {k: v[start : start + 10] for k, v in samples.items()}
        logits = predict_sites(model, chunk, X_test, ["logits"], batch_size=2000)["logits"]
        total += np.asarray(jax.nn.softmax(logits, axis=-1).sum(axis=0), dtype=np.float64)
    return total


def run_name(args, name, seed):
    monge = f"_a{args.alpha2:g}" if (name == "Monge" and args.alpha2 is not None) else ""
    split = "" if getattr(args, "split", "classic") == "classic" else f"_{args.split}"
    return (
        f"{name}{monge}_{args.prior}_W{args.width}_{args.updates}_x{args.step_scale:g}"
        f"{split}_seed{seed}"
    )


def run(args, name, seed, data, out):
    X_train, y_train, X_test, y_test = data
    tag = run_name(args, name, seed)
    ckpt = Path(args.checkpoints) / f"{tag}.pkl"
    steps_per_epoch = NUM_TRAIN // args.batch
    seg_steps = args.segment_epochs * steps_per_epoch
    total_segments = args.epochs // args.segment_epochs
    model = build_model(args.width, args.prior, args.batch)
    kernel = build_kernel(name, model, args.updates, args.step_scale, args.alpha2, args.prior)
    saved = pickle.load(open(ckpt, "rb")) if ckpt.exists() else None
    if saved is not None and saved["segment"] >= total_segments:
        print(f"{tag}: done ({saved['segment']} segments)")
        return
    # jit_model_args: the data are arguments of one compiled program reused by every segment;
    # without it each segment compiles anew with the 157 MB training set baked in as a
    # constant, and the executables pile up (~0.3 GB per segment).
    common = dict(thinning=args.thinning, progress_bar=False, jit_model_args=True)
    first = MCMC(kernel, num_warmup=args.burn_in, num_samples=seg_steps - args.burn_in, **common)
    later = MCMC(kernel, num_warmup=0, num_samples=seg_steps, **common)
    if saved is None:
        saved = dict(segment=0, prob_sum=np.zeros((len(y_test), 10)), draws=0, diverging=0)
    y_np = np.asarray(y_test)
    while saved["segment"] < total_segments:
        start = time.perf_counter()
        # our sampling loop: the same draws as NumPyro's loop (tests/test_sampling_loop.py),
        # without NumPyro's recompiling of its loop on every segment's run (3.5 s per
        # segment on this MLP; the cost per step is the same: docs/yu2023.md)
        with fast_sampling_loop():
            if saved["segment"] == 0:
                mcmc = first
                mcmc.run(random.PRNGKey(seed), X_train, y_train, extra_fields=("diverging",))
            else:
                mcmc = later
                state = jax.tree.map(jnp.asarray, saved["state"])
                mcmc.post_warmup_state = state
                mcmc.run(state.rng_key, X_train, y_train, extra_fields=("diverging",))
        samples = mcmc.get_samples()
        jax.block_until_ready(samples)
        sampled = time.perf_counter() - start
        diverging = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
        num = len(next(iter(samples.values())))
        saved["prob_sum"] = saved["prob_sum"] + segment_prob_sum(model, samples, X_test)
        saved["draws"] += num
        saved["diverging"] += diverging
        saved["segment"] += 1
        saved["state"] = jax.tree.map(np.asarray, mcmc.last_state)
        row = dict(
            run=tag,
            sampler=name,
            split=args.split,
            prior=args.prior,
            width=args.width,
            updates=args.updates,
            seed=seed,
            lr=learning_rate(name, args.prior) * args.step_scale,
            alpha2=(1.25 if args.alpha2 is None else args.alpha2) if name == "Monge" else None,
            epoch=saved["segment"] * args.segment_epochs,
            steps=saved["segment"] * seg_steps,
            draws=saved["draws"],
            diverging_draws=saved["diverging"],
            seconds_sampling=round(sampled, 2),
            seconds_total=round(time.perf_counter() - start, 2),
            **ensemble_scores(saved["prob_sum"], saved["draws"], y_np),
        )
        del samples, mcmc
        partial_path = ckpt.with_name(ckpt.name + ".partial")
        with open(partial_path, "wb") as f:
            pickle.dump(saved, f)
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
        partial_path.replace(ckpt)
        print(json.dumps(row), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samplers", nargs="+", default=None, choices=list(KERNELS),
                   help="default: every sampler with a learning rate for --prior")
    p.add_argument("--prior", default="horseshoe", choices=["horseshoe", "gaussian"])
    p.add_argument("--width", type=int, default=400)
    p.add_argument("--epochs", type=int, default=400)
    p.add_argument("--segment-epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--burn-in", type=int, default=1000)
    p.add_argument("--thinning", type=int, default=100)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--updates", default="authors", choices=["authors", "ours"])
    p.add_argument("--step-scale", type=float, default=1.0)
    p.add_argument(
        "--alpha2", type=float, default=None, help="Monge's alpha^2 (default 1.25, Yu et al.'s)"
    )
    p.add_argument("--split", default="classic", choices=["classic", "yu2023"],
                   help="which 50,000 training images: MNIST's first (classic) or those of "
                   "Yu et al.'s code (a seeded random 10,000 held out)")
    p.add_argument("--out", default="docs/results/yu_table1_long.jsonl")
    p.add_argument("--checkpoints", default="yu_table1_checkpoints")
    args = p.parse_args(argv)
    if args.epochs % args.segment_epochs:
        p.error("--epochs must be a multiple of --segment-epochs")
    seg_steps = args.segment_epochs * (NUM_TRAIN // args.batch)
    if seg_steps <= args.burn_in:
        p.error("a segment must be longer than the burn-in")
    if args.samplers is None:
        rates = LEARNING_RATES if args.prior == "horseshoe" else GAUSSIAN_LEARNING_RATES
        args.samplers = [name for name in KERNELS if name in rates]
    for name in args.samplers:
        try:
            learning_rate(name, args.prior)
        except ValueError as e:
            p.error(str(e))
    Path(args.checkpoints).mkdir(parents=True, exist_ok=True)
    X_train, y_train, X_test, y_test = load_mnist(validation="drop", split=args.split)
    data = tuple(jnp.asarray(a) for a in (X_train, y_train, X_test, y_test))
    for seed in args.seeds:
        for name in args.samplers:
            run(args, name, seed, data, args.out)


if __name__ == "__main__":
    main()
