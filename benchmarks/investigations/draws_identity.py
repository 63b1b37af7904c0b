"""Bit-identical draws across a refactoring: every preset on German credit, at a fixed step on
NumPyro's loop and on the kernels' own loop, and at its defaults on the kernels' own loop
(2 vectorised chains, 300 warm-up steps, 200 draws each; about 7 minutes on 2 cores).

    python benchmarks/investigations/draws_identity.py save before.npz   # before the change
    python benchmarks/investigations/draws_identity.py check before.npz  # after it
    python benchmarks/investigations/draws_identity.py check before.npz 16  # the grouped loop
    python benchmarks/investigations/draws_identity.py check before.npz accelerator

A third argument sets the kernels' loop (``numpyro_sgrld.sampler.loop.GROUP``: 0 the segment loop, a
CPU's default; 16 the grouped loop); ``accelerator`` runs it as an accelerator does: the
grouped loop, and the steps after warm-up compiled for that phase (``_loop.SETTLED``).

``check`` lists the configurations whose draws differ in any bit (none: the change kept every
draw), and exits with status 1 when one does. It also checks that, at a fixed step, the two
loops give the same draws.
"""

import sys
import warnings

import jax
import numpy as np
from numpyro.infer import MCMC

from numpyro_sgrld import disable_fast_sampling_loop, enable_fast_sampling_loop
from numpyro_sgrld.app.problems import NETWORK_KERNELS, PROBLEMS
from numpyro_sgrld.presets.table import KERNELS


def draws():
    """``{"<preset>|<fixed or adapted>|<fast loop>": draws}``."""
    problem = PROBLEMS["german_credit"]()
    out = {}
    for fast in (False, True):
        (enable_fast_sampling_loop if fast else disable_fast_sampling_loop)()
        for name, kernel in KERNELS.items():
            if name in NETWORK_KERNELS:
                continue
            for label, kwargs in (("fixed", {"step_size": 1e-4}), ("adapted", {})):
                if label == "adapted" and not fast:
                    continue
                if name.startswith("Cyclical"):
                    kwargs = {**kwargs, "cycle_length": 50, "exploration": 0.5}
                mcmc = MCMC(kernel(problem.model, **kwargs), num_warmup=300, num_samples=200,
                            num_chains=2, chain_method="vectorized", progress_bar=False)
                mcmc.run(jax.random.PRNGKey(1), *problem.args)
                out[f"{name}|{label}|{fast}"] = np.asarray(mcmc.get_samples()["w"])
    disable_fast_sampling_loop()
    return out


def main(argv):
    if len(argv) not in (2, 3) or argv[0] not in ("save", "check"):
        sys.exit(__doc__)
    if len(argv) == 3:
        from numpyro_sgrld.sampler import loop as _loop

        if argv[2] == "accelerator":
            _loop.GROUP, _loop.SETTLED = _loop.ACCELERATOR_GROUP, True
        else:
            _loop.GROUP = int(argv[2])
    warnings.simplefilter("ignore")
    got = draws()
    loops = [k for k in got if k.endswith("|False")
             and not np.array_equal(got[k], got[k.replace("|False", "|True")])]
    if argv[0] == "save":
        np.savez(argv[1], **got)
        print(f"saved {len(got)} configurations to {argv[1]}")
    else:
        saved = np.load(argv[1])
        differ = [k for k in got if k not in saved or not np.array_equal(got[k], saved[k])]
        print(f"checked {len(got)} configurations; draws differ in: {differ or 'none'}")
        for k in differ:
            if k in saved and saved[k].shape == got[k].shape:
                gap = np.abs(got[k] - saved[k])
                print(f"  {k}: largest difference {gap.max():.3g} (draws' sd "
                      f"{saved[k].std():.3g}), {np.mean(gap > 0):.1%} of entries")
        if differ:
            sys.exit(1)
    if loops:
        sys.exit(f"the two loops give different draws at a fixed step: {loops}")


if __name__ == "__main__":
    main(sys.argv[1:])
