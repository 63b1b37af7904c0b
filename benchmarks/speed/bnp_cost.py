"""BNP-SGLD's cost per step against SGLD and pSGLD on the 784-400-400-10 MLP.

The problem is ``benchmarks/speed/speed.py``'s ``mlp`` (N = 60,000 synthetic MNIST-shaped images,
minibatch 100, Gaussian prior with He scales, the network built with ``random_haiku_module``, so
BNP reads each ``hk.Linear``'s inputs from the gradient's own forward pass). Each kernel runs
through ``MCMC`` on the kernels' own sampling loop; the marginal cost per step is
(min t(T2) − min t(T1)) / (T2 − T1) over ``--repeats`` interleaved repeats (speed.py's
``measure``), and XLA's flop and byte counts of one compiled step are the deterministic check.

    python benchmarks/speed/bnp_cost.py --repeats 5
"""

import argparse

import jax
from jax import random
from speed import _kernel, _min_marginal, _mlp, _xla_cost, measure, ours

from numpyro_sgrld import BNPSGLD, PSGLD, SGLD

KERNELS = {"SGLD": SGLD, "PSGLD": PSGLD, "BNPSGLD": BNPSGLD}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    p = _mlp()
    runs = measure({n: ours(k, p) for n, k in KERNELS.items()}, p["t1"], p["t2"], args.repeats)
    t1, t2 = runs.pop("_lengths")
    marginal = {n: _min_marginal(r, t1, t2) for n, r in runs.items()}
    data = (p["X"], p["y"])
    print(f"{p['title']}; jax {jax.__version__}, {jax.devices()[0].platform}")
    print("| kernel | µs/step | ratio to SGLD | XLA GFLOP/step | XLA MB accessed/step |")
    print("|---|---|---|---|---|")
    for name, kernel in KERNELS.items():
        k = _kernel(kernel, p)
        state = k.init(random.PRNGKey(0), 0, None, data, {})
        flops, nbytes = _xla_cost(lambda s, k=k: k.sample(s, data, {}), state)
        print(f"| {name} | {marginal[name] * 1e6:.0f} | {marginal[name] / marginal['SGLD']:.2f} "
              f"| {flops / 1e9:.3f} | {nbytes / 1e6:.1f} |")


if __name__ == "__main__":
    main()
