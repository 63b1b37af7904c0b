"""The main job's work outside the samplers, timed piece by piece from a finished report
folder: per German credit row, what the parent process does when a kernel's run arrives
(NetCDF, the comparison with the reference, the energy distance, the KSD), and the figures.

    sgrld --out REPORT                                   # or any finished report folder
    python benchmarks/speed/main_job_parts.py REPORT

Runs at any commit since the report's layout was fixed: where the package has no
``diagnostics.score_function`` the KSD's scores come from ``diagnostics.model_scores`` on
every row, as the parent computed them then.
"""

import sys
import tempfile
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np

from numpyro_sgrld import diagnostics, plots
from numpyro_sgrld.analysis.inference_data import save_netcdf
from numpyro_sgrld.app.compare import ACCURATE_MEAN, ACCURATE_SD, _latent_only, _pooled
from numpyro_sgrld.app.problems import PROBLEMS


def _scores(problem):
    make = getattr(diagnostics, "score_function", None)
    if make is not None:
        return make(problem.model, *problem.args)
    return lambda draws: diagnostics.model_scores(problem.model, draws, *problem.args)


def _row(idata, ref, ref_pooled, problem, scores, scratch):
    save_netcdf(idata, scratch / "row.nc")
    diagnostics.compare_to_reference(idata, ref)
    draws = _latent_only(idata, problem.model, problem.args)
    diagnostics.energy_distance(_pooled(draws), ref_pooled)
    n = len(next(iter(draws.values())))
    idx = np.linspace(0, n - 1, min(n, 1000)).astype(int)
    x, s = scores({k: v[idx] for k, v in draws.items()})
    diagnostics.kernel_stein_discrepancy(x, s)


def main(report):
    warnings.simplefilter("ignore")
    report = Path(report)
    problem = PROBLEMS["german_credit"]()
    ref = az.from_netcdf(report / "reference.nc")
    runs = {p.stem: az.from_netcdf(p) for p in sorted(report.glob("*.nc"))
            if p.stem != "reference"}
    scores = _scores(problem)
    ref_pooled = _pooled(_latent_only(ref, problem.model, problem.args))
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        times = []
        for name, idata in runs.items():
            start = time.perf_counter()
            _row(idata, ref, ref_pooled, problem, scores, scratch)
            times.append(time.perf_counter() - start)
            print(f"row {name}: {times[-1]:.2f} s")
        print(f"rows: {sum(times):.1f} s in all, {np.median(times):.2f} s median")
        tables = {k: diagnostics.compare_to_reference(v, ref) for k, v in runs.items()}
        start = time.perf_counter()
        plots.plot_errors(tables, ACCURATE_MEAN, ACCURATE_SD, path=scratch / "errors.png")
        print(f"errors.png: {time.perf_counter() - start:.2f} s")
        params = list(next(iter(tables.values())).index[:8])
        start = time.perf_counter()
        plots.plot_marginals(runs, ref, params=params, path=scratch / "marginals.png")
        print(f"marginals.png: {time.perf_counter() - start:.2f} s")
        start = time.perf_counter()
        for name, idata in runs.items():
            plots.plot_trace_rank(idata, params=params[:4], title=name,
                                  path=scratch / f"trace_{name}.png")
        print(f"trace plots: {time.perf_counter() - start:.2f} s for {len(runs)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "sgrld-report")
