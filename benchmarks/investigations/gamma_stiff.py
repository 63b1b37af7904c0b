"""The Γ-corrected pSGLD at the paper's own eps = 1e-8 on theta ~ Normal(0, 1).

Rensmeyer & Niggemann's setting (decay 0.9, 500 chains, exact gradients) with ``eps`` 1e-8
instead of the figure's 1: near theta = 0 the metric D = 1/(eps + |theta|) is singular. Rows:
uncorrected, the correction as written (``correction_form="instant"``) and the lagged, tamed
default, at h = 1e-3 (40,000 steps) and h = 1e-4 (220,000 steps, the paper's).

    python benchmarks/investigations/gamma_stiff.py --out docs/results/gamma_stiff.jsonl

Prints a markdown table: sd of the draws, L1 distance to N(0, 1) (histogram, bin width 0.1),
largest |theta|, diverging draws.
"""

import argparse

import numpy as np
from jax import random
from numpyro.infer import MCMC, init_to_sample
from numpyro_sgrld.models.gaussian import standard_normal

from numpyro_sgrld import PSGLD
from numpyro_sgrld.analysis.diagnostics import histogram_l1

SETTINGS = [(1e-3, 40_000), (1e-4, 220_000)]
VARIANTS = [
    ("none", None, "lagged"),
    ("instant", "exact", "instant"),
    ("lagged", "exact", "lagged"),
]


def run(step_size, steps, correction, form, chains, seed=0):
    kernel = PSGLD(standard_normal, step_size=step_size, decay=0.9, eps=1e-8,
                   correction=correction, correction_form=form, init_strategy=init_to_sample)
    mcmc = MCMC(kernel, num_warmup=steps // 10, num_samples=steps, thinning=steps // 2000,
                num_chains=chains, chain_method="vectorized", progress_bar=False)
    mcmc.run(random.PRNGKey(seed))
    x = np.asarray(mcmc.get_samples()["theta"])
    diverging = int(np.asarray(mcmc.get_extra_fields()["diverging"]).sum())
    x = x[np.isfinite(x)]
    density = lambda t: np.exp(-t * t / 2) / np.sqrt(2 * np.pi)  # noqa: E731
    return dict(sd=x.std(), l1=histogram_l1(x, density), max=np.abs(x).max(), div=diverging)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chains", type=int, default=500)
    ap.add_argument("--out", default=None, help="a JSONL record, one row per line of the table")
    args = ap.parse_args(argv)
    print("| h | steps | Γ | sd (1 exact) | L1 to N(0, 1) | max abs theta | diverging |")
    print("|---|---|---|---|---|---|---|")
    for h, steps in SETTINGS:
        for name, correction, form in VARIANTS:
            r = run(h, steps, correction, form, args.chains)
            print(f"| {h:g} | {steps:,} | {name} | {r['sd']:.3f} | {r['l1']:.3f} "
                  f"| {r['max']:.1f} | {r['div']} |", flush=True)
            if args.out:
                import json

                row = {"step_size": h, "steps": steps, "correction": name,
                       "chains": args.chains, **{k: float(v) for k, v in r.items()}}
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
