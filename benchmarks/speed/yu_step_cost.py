"""Cost per step of each Table 1 sampler (Yu et al. 2023, appendix A.6), measured side by side.

The model and kernels are exactly those of ``benchmarks/papers/yu_table1_long.py`` (784-W-W-10 MLP
on
MNIST, their horseshoe, minibatch 100, their update variants and learning rates). Each sampler
runs through one ``MCMC`` object on the kernels' own sampling loop (data as arguments, one
kept draw per run); the marginal cost per step is (min t(T2) − min t(T1)) / (T2 − T1) over
``--repeats`` interleaved repeats (``benchmarks/speed/speed.py``'s ``measure``: interference from
other work only ever adds time, so the minima are the least disturbed runs). T1 and T2 are
multiples of Shampoo's 100-step recomputation interval, so its amortised cost is included.
XLA's flop and byte counts of one compiled step are the deterministic check (for Shampoo the
step with its recomputation branch, which XLA counts whether taken or not).

    python benchmarks/speed/yu_step_cost.py --out docs/results/yu_step_cost.json

The equal-compute columns of ``benchmarks/papers/yu_table1_report.py --costs`` use these ratios.
"""

import argparse
import json
import sys
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
from jax import random
from numpyro_sgrld.models.mnist import load_mnist
from speed import _min_marginal, _xla_cost, measure, ours

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "papers"))
from yu_table1_long import AUTHORS, KERNELS, LEARNING_RATES, NUM_TRAIN, build_model  # noqa: E402

from numpyro_sgrld import priors


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samplers", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    ap.add_argument("--prior", default="horseshoe", choices=["horseshoe", "gaussian"])
    ap.add_argument("--width", type=int, default=400)
    ap.add_argument("--t1", type=int, default=200)
    ap.add_argument("--t2", type=int, default=1200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON file for the report's --costs")
    args = ap.parse_args(argv)
    X, y, _, _ = load_mnist(validation="drop")
    X, y = jnp.asarray(X), jnp.asarray(y)  # one copy shared by every sampler
    model = build_model(args.width, args.prior, 100)
    problems = {}
    for name in args.samplers:
        kernel = partial(KERNELS[name], **AUTHORS.get(name, {}))
        problems[name] = dict(
            model=model,
            step=LEARNING_RATES[name] / NUM_TRAIN,
            init_strategy=priors.init_to_unit_scales,
            X=X,
            y=y,
            kernel=kernel,
        )
    contenders = {name: ours(p["kernel"], p) for name, p in problems.items()}
    runs = measure(contenders, args.t1, args.t2, args.repeats)
    t1, t2 = runs.pop("_lengths")
    rows = {}
    for name, p in problems.items():
        k = p["kernel"](p["model"], step_size=p["step"], init_strategy=p["init_strategy"])
        data = (p["X"], p["y"])
        state = k.init(random.PRNGKey(0), 0, None, data, {})
        flops, nbytes = _xla_cost(lambda s, k=k, data=data: k.sample(s, data, {}), state)
        rows[name] = dict(
            seconds_per_step=_min_marginal(runs[name], t1, t2),
            gflop_per_step=flops / 1e9,
            mb_accessed_per_step=nbytes / 1e6,
        )
    base = rows.get("identity", next(iter(rows.values())))
    print(
        f"784-{args.width}-{args.width}-10, {args.prior}, minibatch 100; T1={t1}, T2={t2}, "
        f"{args.repeats} repeats; jax {jax.__version__}, {jax.devices()[0].platform}"
    )
    print("| sampler | ms / step | × identity | XLA GFLOP / step | × identity | XLA MB / step |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['seconds_per_step'] * 1e3:.2f} "
            f"| {r['seconds_per_step'] / base['seconds_per_step']:.2f} "
            f"| {r['gflop_per_step']:.3f} | {r['gflop_per_step'] / base['gflop_per_step']:.2f} "
            f"| {r['mb_accessed_per_step']:.1f} |"
        )
    if args.out:
        meta = dict(width=args.width, prior=args.prior, t1=t1, t2=t2, repeats=args.repeats,
                    jax=jax.__version__)
        with open(args.out, "w") as f:
            json.dump(dict(settings=meta, samplers=rows), f, indent=1)


if __name__ == "__main__":
    main()
