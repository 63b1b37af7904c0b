"""HMC references for the network problems of ``problems.py``, in function space.

For each problem, two independent ensembles of NUTS on ``full_batch(model)`` (every gradient
reads all the training rows), each ``--chains`` sequential chains x ``--draws`` kept draws
after ``--warmup`` steps, started by ``problems.INIT``. Each ensemble's test-set predictive
(class probabilities averaged over its draws, and over each chunk of draws; for a regressor
the quantiles of each point's predictive mixture) is stored in
``docs/results/references/<problem>.npz``; ensemble ``a`` is the reference, and the distance
between ``a`` and ``b`` is the floor: what two exact ensembles of the size a run is judged
with differ by. One JSON line per problem goes to ``docs/results/network_references.jsonl``
(replacing that problem's earlier line) (floor, agreement, NUTS's wall time per ensemble on
one core, divergences, mean leapfrog steps per draw).

Each ensemble runs in chunks of ``--chunk`` draws; its state (NumPyro's
``post_warmup_state``) and the running predictive are saved in ``--cache`` after the warm-up
and after every chunk, so a stopped run resumes where it stopped::

    taskset -c 1 python benchmarks/references/networks.py --problems cancer cancer_horseshoe
    taskset -c 1 python benchmarks/references/networks.py --problems concrete digits
    taskset -c 1 python benchmarks/references/networks.py --problems cancer_unit_horseshoe \
        --which a   # and b on core 0, then the record without --which

A horseshoe's scales (sites ending ``_global``, ``_local`` or ``_scale``) are also kept, as
their logarithms' draws by chain (``log_scale_<a|b>:<site>`` in the ``.npz``), for problems
whose reference is run after that was added (``cancer_unit_horseshoe``).

The shuttle problems (every NUTS gradient reads up to 50,000 rows; at 10,000 rows NUTS takes
about 350 leapfrog steps a draw) run smaller ensembles, so that each finishes in about an
hour of one core: 4 chains x 500 warm-up + 500 draws at 1,000 and 10,000 rows, 2 chains x
250 + 250 at 50,000. Each ensemble can run on its own core (``--which``); a last run without
``--which`` writes the record from the cache::

    taskset -c 1 python benchmarks/references/networks.py --problems shuttle_1000 \
        shuttle_10000 --warmup 500 --draws 500 --chunk 125 --which a   # and b on core 0
    taskset -c 1 python benchmarks/references/networks.py --problems shuttle --chains 2 \
        --warmup 250 --draws 250 --chunk 125 --which a                 # and b on core 0
    python benchmarks/references/networks.py --problems shuttle_1000 shuttle_10000 \
        --warmup 500 --draws 500 --chunk 125
    python benchmarks/references/networks.py --problems shuttle --chains 2 --warmup 250 \
        --draws 250 --chunk 125

Run it on one core (``taskset``; ``problems.py`` limits XLA's own threads to one) so the wall
times compare with the presets' (``presets.py``)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import argparse  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402

from numpyro_sgrld.analysis.predictive import (  # noqa: E402
    agreement,
    gaussian_mixture_quantiles,
    quantile_wasserstein2,
    total_variation,
)

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "results"
SEEDS = {"a": 1, "b": 2}
#: The sites whose draws (their logarithms, by chain) the reference keeps besides the
#: predictive: a horseshoe's scales.
SCALE_SITES = ("_global", "_local", "_scale")


def _save(path, obj):
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(obj, f)
    tmp.replace(path)


def ensemble(name, problem, which, a, cache):
    """One NUTS ensemble, resumable: ``{"probs"}`` or ``{"mean", "scale"}`` at the test
    points, with its seconds, divergences and leapfrog steps."""
    path = cache / f"{name}_{which}_{a.chains}x{a.warmup}+{a.draws}.pkl"
    done = pickle.load(open(path, "rb")) if path.exists() else None
    mcmc = MCMC(NUTS(problem["full"], init_strategy=P.INIT), num_warmup=a.warmup,
                num_samples=a.chunk, num_chains=a.chains, chain_method="sequential",
                progress_bar=False)
    if done is None:
        t = time.perf_counter()
        mcmc.warmup(jax.random.PRNGKey(SEEDS[which]), *problem["train"],
                    extra_fields=("num_steps", "diverging"))
        jax.block_until_ready(mcmc.post_warmup_state)
        done = dict(state=jax.device_get(mcmc.post_warmup_state), drawn=0, parts=[],
                    seconds=time.perf_counter() - t, warmup_seconds=time.perf_counter() - t,
                    divergences=0, steps=0)
        _save(path, done)
        print(f"{name}/{which}: warm-up {done['seconds']:.0f} s", flush=True)
    while done["drawn"] < a.draws:
        t = time.perf_counter()
        mcmc.post_warmup_state = done["state"]
        mcmc.run(done["state"].rng_key, *problem["train"],
                 extra_fields=("num_steps", "diverging"))
        samples = {k: v for k, v in mcmc.get_samples().items() if k.startswith(("net/", "sig"))}
        jax.block_until_ready(samples)
        scales = {k: np.log(np.asarray(v, np.float64))
                  for k, v in mcmc.get_samples(group_by_chain=True).items()
                  if k.endswith(SCALE_SITES)}
        extra = mcmc.get_extra_fields()
        seconds = time.perf_counter() - t
        pred = P.predictive(problem, samples)
        done.update(state=jax.device_get(mcmc.last_state), drawn=done["drawn"] + a.chunk,
                    seconds=done["seconds"] + seconds,
                    divergences=done["divergences"] + int(np.sum(extra["diverging"])),
                    steps=done["steps"] + int(np.sum(extra["num_steps"])))
        done["parts"].append({k: np.asarray(v, np.float32) for k, v in pred.items()})
        if scales:
            done.setdefault("log_scales", []).append(scales)
        _save(path, done)
        print(f"{name}/{which}: {done['drawn']} draws, {done['seconds']:.0f} s", flush=True)
    return done


def combine(problem, done):
    """The ensemble's predictive from its chunks: mean probabilities (chunks are of equal
    size), or all draws' means and scales."""
    parts = done["parts"]
    if problem["kind"] == "classifier":
        chunks = np.stack([p["probs"] for p in parts])
        return {"probs": chunks.mean(0), "chunk_probs": chunks}
    return {k: np.concatenate([p[k] for p in parts], 0) for k in ("mean", "scale")}


def floor_of(problem, pa, pb):
    if problem["kind"] == "classifier":
        return dict(tv=total_variation(pa["probs"], pb["probs"]),
                    agreement=agreement(pa["probs"], pb["probs"]))
    return dict(w2=quantile_wasserstein2(pa["quantiles"], pb["quantiles"]))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--problems", nargs="+", default=list(P.PROBLEMS))
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--chunk", type=int, default=250)
    parser.add_argument("--cache", type=Path, default=ROOT / "benchmarks" / "references" /
                        ".cache")
    parser.add_argument("--out", type=Path, default=OUT / "network_references.jsonl")
    parser.add_argument("--which", choices=sorted(SEEDS),
                        help="run only this ensemble (e.g. the two on two cores at once); the "
                        "record is written by a run that finds both in the cache")
    a = parser.parse_args()
    a.cache.mkdir(parents=True, exist_ok=True)
    (OUT / "references").mkdir(exist_ok=True)
    for name in a.problems:
        problem = P.PROBLEMS[name]()
        if a.which:
            ensemble(name, problem, a.which, a, a.cache)
            continue
        runs = {w: ensemble(name, problem, w, a, a.cache) for w in SEEDS}
        preds = {w: combine(problem, d) for w, d in runs.items()}
        if problem["kind"] == "regressor":
            for p in preds.values():
                p["quantiles"] = gaussian_mixture_quantiles(p.pop("mean"), p.pop("scale"))
        scales = {f"log_scale_{w}:{site}": np.concatenate([c[site] for c in d["log_scales"]], 1)
                  for w, d in runs.items() for site in (d.get("log_scales") or [{}])[0]}
        np.savez_compressed(OUT / "references" / f"{name}.npz",
                            **{f"{k}_{w}": v for w, p in preds.items() for k, v in p.items()},
                            **scales, y_test=np.asarray(problem["y_test"]))
        draws = a.chains * a.draws
        row = dict(problem=name, kind=problem["kind"], rows=int(problem["train"][0].shape[0]),
                   test_points=int(problem["X_test"].shape[0]),
                   parameters=int(sum(np.size(v) for v in runs["a"]["state"].z.values())
                                  // a.chains),
                   chains=a.chains, warmup=a.warmup, draws=a.draws,
                   floor=floor_of(problem, preds["a"], preds["b"]),
                   seconds={w: d["seconds"] for w, d in runs.items()},
                   warmup_seconds={w: d["warmup_seconds"] for w, d in runs.items()},
                   divergences={w: d["divergences"] for w, d in runs.items()},
                   mean_steps={w: d["steps"] / draws for w, d in runs.items()})
        kept = [line for line in (open(a.out) if a.out.exists() else [])
                if json.loads(line)["problem"] != name]
        a.out.write_text("".join(kept) + json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
