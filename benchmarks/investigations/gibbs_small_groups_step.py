"""Whether the group scale's shift on the random intercept with 5 rows a group (the
``small-groups`` set of ``gibbs_bias_check.py``) is the SG step's: ``SGGibbs(SGLD(model,
step_size=h), interweave_every=...)`` on the full data (exact gradients), 4 vectorised
chains of 2,000 + ``40,000 * 0.016 / h`` steps (the same time in the step's units at every
``h``), seed 0; ``log sigma``'s mean and sd against NUTS's (on the intercepts non-centred,
the reference cached by ``gibbs_bias_check.py``), with the ESS-based error of the mean::

    python benchmarks/investigations/gibbs_small_groups_step.py --interweave-every none
    python benchmarks/investigations/gibbs_small_groups_step.py

A step bias falls with ``h``; a shift and a narrow sd that stay as ``h`` falls are the
chains' unvisited region.
"""

import argparse
import sys
import warnings
from functools import partial
from pathlib import Path

import jax
import numpy as np
import numpyro
from numpyro.infer import MCMC

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy"))
sys.path.insert(0, str(ROOT / "benchmarks" / "investigations"))
import gibbs_bias_check as check  # noqa: E402
import gibbs_random_intercept as intercept  # noqa: E402
from reference_moments import interweave_label, interweave_option  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=float, nargs="+", default=[0.016, 0.008, 0.004, 0.002])
    parser.add_argument("--interweave-every", type=interweave_option, default="auto")
    parser.add_argument("--cache", type=Path, default=ROOT / "docs" / "results")
    a = parser.parse_args()
    *_, args, _, (mean, sd), _ = next(check.small_groups(a.cache, minibatch=500))
    print(f"reference: NUTS log sigma mean {mean:.3f}, sd {sd:.3f}")
    print("| step_size | steps per chain | log sigma mean | error (sd) ± se | sd ratio | ESS |")
    print("|---|---|---|---|---|---|")
    model = partial(intercept.model, subsample_size=500)
    for h in a.steps:
        n = int(round(40_000 * 0.016 / h))
        kernel = ns.SGGibbs(ns.SGLD(model, step_size=h), interweave_every=a.interweave_every)
        mcmc = MCMC(kernel, num_warmup=2000, num_samples=n, num_chains=4,
                    chain_method="vectorized", progress_bar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mcmc.run(jax.random.PRNGKey(0), *args)
        draws = np.log(np.asarray(mcmc.get_samples(group_by_chain=True)["sigma"], np.float64))
        ess = float(numpyro.diagnostics.effective_sample_size(draws))
        print(f"| {h}{interweave_label(a.interweave_every)} | {2000 + n:,} | "
              f"{draws.mean():.3f} | {(draws.mean() - mean) / sd:+.3f} ± "
              f"{draws.std() / np.sqrt(ess) / sd:.3f} | {draws.std() / sd:.3f} | {ess:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
