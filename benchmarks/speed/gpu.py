"""Per-step cost on whatever accelerator JAX has (a GPU where there is one), every preset against
hand-written ``lax.scan`` loops, with compile time and the fixed cost of a repeated run.

    python benchmarks/speed/gpu.py --out gpu.jsonl --table gpu.md   # no section starts after 420 s
    python benchmarks/speed/gpu.py --quick --budget 1e9   # a check of the script, on a CPU

The method is ``speed.py``'s (its hand loops, problems and timing): for a contender and run
length T the wall time is t(T) = fixed + T * marginal; every repeat times each contender at T1
and T2 steps, contenders in a shuffled order; the **marginal cost per step** is
(min t(T2) - min t(T1)) / (T2 - T1). **Compile** is the first call's time (tracing, compiling
and one run of T1 steps) less the fastest t(T1); **fixed** is the fastest t(T1) less T1
marginal steps. Our kernels run through ``MCMC`` on the kernels' own sampling loop
(``jit_model_args=True``); at their **defaults** (``step_size=None``) each run also does
``--warmup`` warm-up steps, which cancel in the marginal cost and count in the fixed cost.

Sections, in this order (the first ones are what the acceptance reads), each written to
``--out`` as one JSON line per contender when it is done; a section does not start once
``--budget`` seconds have passed:

1. ``mlp100``: Yu et al.'s MLP 784-400-400-10 (N = 60,000 MNIST-shaped images, float32),
   minibatch 100: hand SGLD (twice: the run's own noise), SGHMC and pSGLD, and SGLD, SGHMC,
   PSGLD at their defaults and at a fixed step, SGLD at a fixed step without the proposal
   check;
2. ``group``: the same MLP, SGLD at a fixed step on the kernels' segment loop (a CPU's
   default, ``numpyro_sgrld.sampler.loop.GROUP = 0``) and on the grouped loop with 4, 16 (an
   accelerator's default) and 64 steps per group, with 16 and 2 or 4 steps per iteration of
   the group's loop (``UNROLL``), and the kernel's step in a hand-written ``lax.scan``
   (``speed.ours_in_scan``); SGLD at its defaults on the grouped loop and on the segment
   loop, each with the steps after warm-up compiled for that phase (``SETTLED = True``, an
   accelerator's default) and with the warm-up's branches kept in them: against hand SGLD,
   what the loop's host reads and the branches cost;
3. ``shampoo``: the same MLP: hand SGLD and Shampoo SGLD, ShampooSGLD at its defaults (roots
   every 100 steps, behind a branch), with ``update_interval=1`` (every step, no branch) and
   at a fixed step;
4. ``presets``: the same MLP, every other preset at its defaults;
5. ``mlp1000``: minibatch 1,000: hand SGLD, SGHMC, pSGLD; SGLD, SGHMC, PSGLD, ShampooSGLD;
6. ``conv``: a conv net (two 3×3 convolutions, 16 and 32 channels, stride 2, ReLU, a dense
   layer to 10 classes) on 28×28 images, minibatch 100: hand SGLD; SGLD, SGHMC, PSGLD;
7. ``chains``: 1, 4 and 16 vectorised SGLD chains on the MLP, minibatch 100 (fixed step).

Before them, ``first_run.py`` in a fresh process: the first ``MCMC.run``'s compilations by
program against the hand loop's first call (``--no-first-run`` skips it).

A marginal cost below the run's own noise shows as a negative or erratic number (the
defaults' warm-up is part of both run lengths): the table marks a marginal that is not
positive, and ``--repeats`` more repeats or longer runs fix it.
"""

import argparse
import json
import sys
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import lax, random
from numpyro.infer import MCMC, init_to_sample

sys.path.insert(0, str(Path(__file__).resolve().parent))
import speed  # noqa: E402

from numpyro_sgrld import fast_sampling_loop
from numpyro_sgrld.presets.table import KERNELS  # noqa: E402
from numpyro_sgrld.sampler import loop as _loop  # noqa: E402

HAND_OF = {"SGLD": "hand sgld", "SGHMC": "hand sghmc", "PSGLD": "hand psgld",
           "ShampooSGLD": "hand shampoo"}


def _conv(seed=0, batch=100, n_data=60_000):
    """The conv net's problem in ``speed.py``'s form (hand potential and NumPyro model)."""
    channels = (1, 16, 32)
    rng = np.random.default_rng(seed)
    X = rng.random((n_data, 784), dtype=np.float32)
    y = rng.integers(0, 10, n_data).astype(np.int32)
    shapes = {"c0": (3, 3, 1, 16), "c1": (3, 3, 16, 32), "d": (7 * 7 * 32, 10)}
    shapes.update({"bc0": (16,), "bc1": (32,), "bd": (10,)})
    scales = {k: (1.0 if k.startswith("b") else float(np.sqrt(2.0 / np.prod(v[:-1]))))
              for k, v in shapes.items()}

    def net(params, x):
        h = x.reshape(-1, 28, 28, 1)
        for i in range(len(channels) - 1):
            h = lax.conv_general_dilated(h, params[f"c{i}"], (2, 2), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
            h = jax.nn.relu(h + params[f"bc{i}"])
        return h.reshape(h.shape[0], -1) @ params["d"] + params["bd"]

    def logprior(params):
        return sum(-0.5 * jnp.sum((params[k] / scales[k]) ** 2) for k in params)

    def loglik(params, x, y):
        return jnp.sum(jax.nn.one_hot(y, 10) * jax.nn.log_softmax(net(params, x)))

    def model(X, y):
        params = {k: numpyro.sample(k, dist.Normal(0.0, scales[k]).expand(v).to_event(len(v)))
                  for k, v in shapes.items()}
        with numpyro.plate("data", X.shape[0], subsample_size=batch) as idx:
            numpyro.sample("y", dist.Categorical(logits=net(params, X[idx])), obs=y[idx])

    key = random.PRNGKey(1)
    init = {}
    for k, v in shapes.items():
        key, sub = random.split(key)
        init[k] = jnp.zeros(v) if k.startswith("b") else random.normal(sub, v) * scales[k]
    return dict(name="conv", title=f"conv net 28x28 -> 16 -> 32 -> 10, minibatch {batch}",
                X=jnp.asarray(X), y=jnp.asarray(y), batch=batch, step=1e-6, init=init,
                logprior=logprior, loglik=loglik, model=model, init_strategy=init_to_sample,
                t1=100, t2=600)


def defaults(name, p, warmup, num_chains=1, **options):
    """``run(T, key)``: preset ``name`` at its defaults (``step_size=None``; ``options``
    besides) through one ``MCMC`` object, ``warmup`` warm-up steps and T sampling steps (one
    draw kept)."""
    kw = {} if p["init_strategy"] is None else {"init_strategy": p["init_strategy"]}
    kw.update(options)
    mcmc = MCMC(KERNELS[name](p["model"], **kw), num_warmup=warmup, num_samples=1,
                num_chains=num_chains, chain_method="vectorized", progress_bar=False,
                jit_model_args=True)

    def run(t, key):
        mcmc.num_samples = mcmc.thinning = t
        mcmc._set_collection_params()
        with fast_sampling_loop():
            mcmc.run(key, p["X"], p["y"])
        return mcmc.get_samples()

    return run


def fixed(name, p, **kw):
    """``run(T, key)``: preset ``name`` at the problem's fixed step (``speed.ours``)."""
    return speed.ours(partial(KERNELS[name], **kw), p)


def with_loop(run, **settings):
    """``run`` with the kernels' loop set by ``settings`` (attributes of
    ``numpyro_sgrld.sampler.loop``: ``GROUP`` steps per iteration of its loop over steps, ``UNROLL``
    of them per iteration of a group's loop, ``SETTLED`` a step compiled for after warm-up)."""
    def configured(t, key):
        defaults = {name: getattr(_loop, name) for name in settings}
        for name, value in settings.items():
            setattr(_loop, name, value)
        try:
            return run(t, key)
        finally:
            for name, value in defaults.items():
                setattr(_loop, name, value)

    return configured


def _first_call(run, t):
    start = time.perf_counter()
    jax.block_until_ready(run(t, random.PRNGKey(0)))
    return time.perf_counter() - start


def section(name, p, contenders, repeats, hand="hand sgld"):
    """Time ``contenders`` (``{label: run}``) side by side: one dict per contender."""
    first = {label: _first_call(run, p["t1"]) for label, run in contenders.items()}
    samples = speed.measure(contenders, p["t1"], p["t2"], repeats)
    t1, t2 = samples["_lengths"]
    base = speed._min_marginal(samples[hand], t1, t2)
    rows = []
    for label in contenders:
        runs = samples[label]
        marginal = speed._min_marginal(runs, t1, t2)
        fastest_t1 = min(r[1] for r in runs)
        own = HAND_OF.get(label.split(" ")[0])
        rows.append(dict(
            section=name, problem=p["title"], device=jax.devices()[0].device_kind,
            contender=label, us_per_step=round(marginal * 1e6, 2),
            vs_hand_sgld=round(marginal / base, 3),
            vs_own_hand=(round(marginal / speed._min_marginal(samples[own], t1, t2), 3)
                         if own in samples and own != label else None),
            compile_s=round(first[label] - fastest_t1, 2),
            fixed_s=round(fastest_t1 - marginal * t1, 4)))
    return rows


def sections(quick, warmup):
    """``{name: build}`` in the documented order, ``build() -> (problem, {label: run})``;
    ``quick``: every section on a small problem (MLP 784-32-32-10, N = 2,000)."""
    main = ("SGLD", "SGHMC", "PSGLD", "ShampooSGLD")
    size = dict(width=32, n_data=2000) if quick else {}

    def mlp(batch):
        p = speed._mlp(batch=batch, **size)
        return {**p, "t1": 50, "t2": 250} if quick else p

    def mlp100():
        p = mlp(100)
        runs = {h: speed.hand_written(h.removeprefix("hand "), p)
                for h in ("hand sgld", "hand sghmc", "hand psgld")}
        runs["hand sgld (again)"] = speed.hand_written("sgld", p)
        for k in main[:3]:
            runs[f"{k} (defaults)"] = defaults(k, p, warmup)
            runs[f"{k} (fixed step)"] = fixed(k, p)
        runs["SGLD (fixed step, check_proposal=False)"] = fixed("SGLD", p,
                                                                check_proposal=False)
        return p, runs

    def group():
        p = mlp(100)
        runs = {"hand sgld": speed.hand_written("sgld", p),
                "SGLD (fixed step) in lax.scan": speed.ours_in_scan(KERNELS["SGLD"], p)}
        runs["SGLD (fixed step, segment loop)"] = with_loop(fixed("SGLD", p), GROUP=0)
        runs.update({f"SGLD (fixed step, {g} steps per group)":
                     with_loop(fixed("SGLD", p), GROUP=g) for g in (4, 16, 64)})
        runs.update({f"SGLD (fixed step, 16 steps per group, {u} per iteration)":
                     with_loop(fixed("SGLD", p), GROUP=16, UNROLL=u) for u in (2, 4)})
        for g, loop in ((16, "16 steps per group"), (0, "segment loop")):
            runs[f"SGLD (defaults, {loop})"] = with_loop(defaults("SGLD", p, warmup), GROUP=g,
                                                         SETTLED=True)
            runs[f"SGLD (defaults, {loop}, warm-up's branches after warm-up)"] = with_loop(
                defaults("SGLD", p, warmup), GROUP=g, SETTLED=False)
        return p, runs

    def shampoo():
        p = mlp(100)
        runs = {h: speed.hand_written(h.removeprefix("hand "), p)
                for h in ("hand sgld", "hand shampoo")}
        runs["ShampooSGLD (defaults)"] = defaults("ShampooSGLD", p, warmup)
        runs["ShampooSGLD (defaults, update_interval=1)"] = defaults(
            "ShampooSGLD", p, warmup, update_interval=1)
        runs["ShampooSGLD (fixed step)"] = fixed("ShampooSGLD", p)
        return p, runs

    def presets():
        p = mlp(100)
        runs = {"hand sgld": speed.hand_written("sgld", p)}
        runs.update({f"{k} (defaults)": defaults(k, p, warmup) for k in KERNELS
                     if k not in main})
        return p, runs

    def mlp1000():
        p = mlp(1000)
        runs = {h: speed.hand_written(h.removeprefix("hand "), p)
                for h in ("hand sgld", "hand sghmc", "hand psgld")}
        runs.update({f"{k} (defaults)": defaults(k, p, warmup) for k in main})
        return p, runs

    def conv():
        p = _conv(batch=100, **({"n_data": 2000} if quick else {}))
        p = {**p, "t1": 50, "t2": 250} if quick else p
        runs = {"hand sgld": speed.hand_written("sgld", p)}
        runs.update({f"{k} (defaults)": defaults(k, p, warmup) for k in main[:3]})
        return p, runs

    def chains():
        p = mlp(100)
        runs = {"hand sgld": speed.hand_written("sgld", p)}
        runs.update({f"SGLD ({c} chains)": speed.ours(KERNELS["SGLD"], p, num_chains=c)
                     for c in (1, 4, 16)})
        return p, runs

    return {"mlp100": mlp100, "group": group, "shampoo": shampoo, "presets": presets,
            "mlp1000": mlp1000, "conv": conv, "chains": chains}


def table(rows):
    lines = ["| section | contender | µs / step | × hand SGLD | × same update by hand "
             "| compile (s) | fixed (s) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        own = "" if r["vs_own_hand"] is None else f"{r['vs_own_hand']:.3f}"
        noise = "" if r["us_per_step"] > 0 else " (below the noise)"
        lines.append(f"| {r['section']} | {r['contender']}{noise} | {r['us_per_step']:.1f} | "
                     f"{r['vs_hand_sgld']:.3f} | {own} | {r['compile_s']:.1f} | "
                     f"{r['fixed_s']:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=200, help="warm-up steps at the defaults")
    ap.add_argument("--budget", type=float, default=420.0,
                    help="seconds after which no further section starts")
    ap.add_argument("--quick", action="store_true",
                    help="every section on a small MLP (784-32-32-10, N = 2,000) and short "
                    "runs: a check of the script, on a CPU too")
    ap.add_argument("--sections", nargs="+", default=None,
                    choices=["mlp100", "group", "shampoo", "presets", "mlp1000", "conv", "chains"],
                    help="run only these sections (default all, in the documented order)")
    ap.add_argument("--out", default=None, help="JSON lines, one per contender, as they come")
    ap.add_argument("--table", default=None, help="the Markdown table, at the end")
    ap.add_argument("--no-first-run", action="store_true",
                    help="skip first_run.py (the first run's compilations, in a fresh process)")
    args = ap.parse_args(argv)
    # before this process takes the accelerator: the fresh process needs it too
    first = "" if args.no_first_run else _first_run(args.quick)
    device = jax.devices()[0]
    print(f"device: {device.platform} {device.device_kind}; jax {jax.__version__}", flush=True)
    start, rows = time.perf_counter(), []
    for name, build in sections(args.quick, args.warmup).items():
        if args.sections is not None and name not in args.sections:
            continue
        if time.perf_counter() - start > args.budget:
            print(f"# {name}: not started (budget of {args.budget:.0f} s spent)", flush=True)
            continue
        p, runs = build()
        print(f"# {name}: {p['title']}, {len(runs)} contenders", flush=True)
        new = section(name, p, runs, args.repeats)
        for r in new:
            print(json.dumps(r), flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps(r) + "\n")
        rows.extend(new)
        jax.clear_caches()
    print(f"# done in {time.perf_counter() - start:.0f} s\n\n{table(rows)}", flush=True)
    if args.table:
        Path(args.table).write_text(
            f"{device.device_kind} ({device.platform}), jax {jax.__version__}\n\n"
            + table(rows) + "\n" + (f"\n{first}" if first else ""))


def _first_run(quick):
    """``first_run.py``'s report (the first ``MCMC.run``'s compilations against the hand
    loop's), run in a fresh process so that nothing is compiled before it; printed and
    returned."""
    import subprocess

    script = Path(__file__).resolve().parent / "first_run.py"
    done = subprocess.run([sys.executable, str(script)] + (["--quick"] if quick else []),
                          capture_output=True, text=True, timeout=300)
    report = done.stdout if done.returncode == 0 else f"first_run.py failed:\n{done.stderr}"
    print(report, flush=True)
    return report


if __name__ == "__main__":
    main()
