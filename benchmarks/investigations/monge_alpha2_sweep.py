"""MongeSGLD's α² on two scales: single adapted runs of ``step_size_adaptation.py`` with a
fixed α² on sblrc-blr, and with ``alpha2="auto"`` at strengths κ on German credit and diamonds
(4 vectorised chains, 10,000 warm-up and 200,000 sampling steps, seed 0). Prints one Markdown
table of each run's total error (``step_size_adaptation.py``'s measure) with its standard
error, R-hat and ESS:

    python benchmarks/investigations/monge_alpha2_sweep.py
"""

import importlib
import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "accuracy"))
import step_size_adaptation as s  # noqa: E402

from numpyro_sgrld import MongeSGLD  # noqa: E402

# the module (``numpyro_sgrld.core.metrics.monge`` the attribute is the metric's function)
monge = importlib.import_module("numpyro_sgrld.core.metrics.monge")

RUNS = (
    [("sblrc-blr", f"alpha2 = {a:g}", a, None) for a in (1.0, 1e-2, 1e-4, 1e-6)]
    + [("german_credit", f"auto, kappa = {k:g}", "auto", k) for k in (0.03, 0.1, 1.0)]
    + [("diamonds", "auto, kappa = 1", "auto", 1.0)]
)


def main():
    default = monge.AUTO_STRENGTH
    print("| problem | alpha2 | total error | ± se | max R-hat | min ESS | divergent |")
    print("|---|---|---|---|---|---|---|")
    for problem, label, alpha2, kappa in RUNS:
        monge.AUTO_STRENGTH = default if kappa is None else kappa
        s.KERNELS["M"] = partial(MongeSGLD, alpha2=alpha2)
        row = s.run_one(s.PROBLEMS[problem](), "M", None, 10_000, 200_000, 4, 0)
        se = row.get("total_se", float("nan"))
        print(f"| {problem} | {label} | {row['total']:.4g} | {se:.2g} | "
              f"{row.get('max_rhat', float('nan')):.3f} | {row.get('min_ess', float('nan')):.0f} "
              f"| {row['divergent']} |", flush=True)
    monge.AUTO_STRENGTH = default


if __name__ == "__main__":
    main()
