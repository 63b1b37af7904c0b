"""Where a step's time goes on an accelerator: a profiler trace and the optimised HLO of one
SGLD sampling loop, (a) the library's SGLD inside ``numpyro.infer.MCMC`` on the kernels' fast
loop, (b) on NumPyro's own ``fori_collect``, and (c) a hand-written ``lax.scan`` SGLD, on Yu et
al.'s 784-W-W-10 MLP (N = 60,000 MNIST-shaped images). Findings: docs/scaling.md.

    XLA_FLAGS="--xla_dump_to=$TMPDIR/probe_hlo --xla_dump_hlo_as_text" \
        PROBE_HLO_DIR=$TMPDIR/probe_hlo python benchmarks/speed/gpu_profile.py \
        OUT [T] [width] [batch]

Writes OUT/trace_<name>.json.gz (perfetto) right after each phase, OUT/summary.json after each
phase (overwritten), and OUT/hlo.tgz + OUT/xplane.tgz at the end.
"""

import collections
import glob
import gzip
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import lax, random
from numpyro.infer import MCMC, init_to_sample

import numpyro_sgrld as ns

OUT = sys.argv[1]
T = int(sys.argv[2]) if len(sys.argv) > 2 else 200
WIDTH = int(sys.argv[3]) if len(sys.argv) > 3 else 400
BATCH = int(sys.argv[4]) if len(sys.argv) > 4 else 100
N_DATA = int(os.environ.get("PROBE_N", 60_000))
PHASES = os.environ.get("PROBE_PHASES", "lib_fast,hand,lib_numpyro").split(",")
TRACE_ROOT = os.environ.get("PROBE_TRACE_ROOT", os.path.join(tempfile.gettempdir(), "probe_traces"))
HLO_DIR = os.environ.get("PROBE_HLO_DIR", os.path.join(tempfile.gettempdir(), "probe_hlo"))

N, D, C = N_DATA, 784, 10
SIZES = [D, WIDTH, WIDTH, C]
rng = np.random.default_rng(0)
X = jnp.asarray(rng.random((N, D), dtype=np.float32))
Y = jnp.asarray(rng.integers(0, C, N).astype(np.int32))
H = 1e-7


def forward(p, x):
    h = x
    for i in range(len(SIZES) - 1):
        h = h @ p[f"w{i}"] + p[f"b{i}"]
        if i < len(SIZES) - 2:
            h = jax.nn.relu(h)
    return h


def model(X, Y):
    p = {}
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        p[f"w{i}"] = numpyro.sample(
            f"w{i}", dist.Normal(0, 1 / np.sqrt(a)).expand([a, b]).to_event(2)
        )
        p[f"b{i}"] = numpyro.sample(f"b{i}", dist.Normal(0, 1).expand([b]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("y", dist.Categorical(logits=forward(p, X[idx])), obs=Y[idx])


def potential(p, idx, X, Y):
    lp = 0.0
    for i, a in enumerate(SIZES[:-1]):
        lp += jnp.sum(dist.Normal(0, 1 / np.sqrt(a)).log_prob(p[f"w{i}"]))
        lp += jnp.sum(dist.Normal(0, 1).log_prob(p[f"b{i}"]))
    logits = forward(p, X[idx])
    ll = jnp.sum(jax.nn.log_softmax(logits)[jnp.arange(idx.shape[0]), Y[idx]])
    return -(lp + N / idx.shape[0] * ll)


def init_p(key):
    p = {}
    for i, (a, b) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        key, k = random.split(key)
        p[f"w{i}"] = random.normal(k, (a, b)) / np.sqrt(a)
        p[f"b{i}"] = jnp.zeros(b)
    return p


def hand_sgld(T):
    @jax.jit
    def run(key, p, X, Y):
        def step(p, k):
            k1, k2 = random.split(k)
            idx = random.randint(k1, (BATCH,), 0, N)
            g = jax.grad(potential)(p, idx, X, Y)
            leaves, tree = jax.tree.flatten(p)
            ks = random.split(k2, len(leaves))
            noise = jax.tree.unflatten(
                tree, [random.normal(kk, leaf.shape) for kk, leaf in zip(ks, leaves)]
            )
            p = jax.tree.map(lambda x, gg, z: x - H * gg + jnp.sqrt(2 * H) * z, p, g, noise)
            return p, None

        p, _ = lax.scan(step, p, random.split(key, T))
        return p

    p0 = init_p(random.PRNGKey(1))
    return lambda key: run(key, p0, X, Y)


def lib_sgld(T):
    kernel = ns.SGLD(model, step_size=H, init_strategy=init_to_sample)
    mcmc = MCMC(
        kernel, num_warmup=0, num_samples=T, thinning=T, progress_bar=False, jit_model_args=True
    )

    def go(key):
        mcmc.run(key, X, Y)
        return mcmc.get_samples()

    return go


def block(x):
    jax.tree.map(lambda a: a.block_until_ready(), x)


# ---------------------------------------------------------------- trace summary
MAIN_MODULE = re.compile(r"sample_loop|jit_run|fori_collect")


def summarize_trace(path, steps):
    """Event counts from a perfetto trace.json.gz: per process/thread name, the number of
    events and the top names; per step for the device streams and the CUDA API thread(s)."""
    with gzip.open(path, "rt") as f:
        tr = json.load(f)
    evs = tr["traceEvents"] if isinstance(tr, dict) else tr
    pname, tname = {}, {}
    for e in evs:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pname[e["pid"]] = e["args"].get("name", "")
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            tname[(e["pid"], e["tid"])] = e["args"].get("name", "")
    groups = collections.defaultdict(collections.Counter)
    dur = collections.defaultdict(float)
    span = {}
    for e in evs:
        if e.get("ph") != "X":
            continue
        key = f"{pname.get(e['pid'], e['pid'])} | {tname.get((e['pid'], e['tid']), e['tid'])}"
        groups[key][e.get("name", "?")] += 1
        dur[key] += float(e.get("dur", 0))
        ts = float(e.get("ts", 0))
        lo, hi = span.get(key, (ts, ts))
        span[key] = (min(lo, ts), max(hi, ts + float(e.get("dur", 0))))
    out = {}
    # the main loop's execution window: device/op events tagged with its hlo_module
    mods = collections.Counter()
    win = None
    for e in evs:
        m = (e.get("args") or {}).get("hlo_module")
        if e.get("ph") == "X" and m:
            mods[m] += 1
            if MAIN_MODULE.search(m):
                ts, d = float(e.get("ts", 0)), float(e.get("dur", 0))
                win = (ts, ts + d) if win is None else (min(win[0], ts), max(win[1], ts + d))
    out["_hlo_modules"] = {m: [c, round(c / steps, 2)] for m, c in mods.most_common(15)}
    if win is not None:
        out["_main_window_us"] = round(win[1] - win[0], 1)
        out["_main_window_us_per_step"] = round((win[1] - win[0]) / steps, 2)
        inwin = collections.defaultdict(collections.Counter)
        for e in evs:
            if e.get("ph") != "X":
                continue
            ts = float(e.get("ts", 0))
            if win[0] <= ts <= win[1]:
                key = (
                    f"{pname.get(e['pid'], e['pid'])} | {tname.get((e['pid'], e['tid']), e['tid'])}"
                )
                inwin[key][e.get("name", "?")] += 1
        out["_in_main_window"] = {
            k: {
                "events": sum(c.values()),
                "per_step": round(sum(c.values()) / steps, 2),
                "top": [(n, v, round(v / steps, 2)) for n, v in c.most_common(30)],
            }
            for k, c in sorted(inwin.items(), key=lambda kv: -sum(kv[1].values()))
        }
    for key, cnt in sorted(groups.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(cnt.values())
        out[key] = {
            "events": total,
            "per_step": round(total / steps, 2),
            "busy_us": round(dur[key], 1),
            "span_us": round(span[key][1] - span[key][0], 1),
            "top": [(n, c, round(c / steps, 2)) for n, c in cnt.most_common(25)],
        }
    return out


# ---------------------------------------------------------------- HLO summary
OPC = re.compile(r"([a-z][a-z0-9\-]*)\(")
INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
COMP = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")


def parse_hlo(text):
    comps, cur, entry = {}, None, None
    for line in text.splitlines():
        if cur is None:
            m = COMP.match(line)
            if m and not line.startswith(" "):
                cur = m.group(2)
                comps[cur] = []
                if m.group(1):
                    entry = cur
            continue
        if line.strip() == "}":
            cur = None
            continue
        m = INSTR.match(line)
        if m:
            rhs = m.group(2)
            # skip the shape: tuple shapes start with '(' and contain no opcode
            o = None
            for mm in OPC.finditer(rhs):
                if mm.start() == 0 or rhs[mm.start() - 1] in " )}]":
                    o = mm.group(1)
                    break
            comps[cur].append((m.group(1), o or "?", rhs))
    return comps, entry


def called(rhs, opcode):
    names = []
    for k in ("body", "condition", "true_computation", "false_computation", "to_apply"):
        m = re.search(rf"\b{k}=%?([\w.\-]+)", rhs)
        if m:
            names.append((k, m.group(1)))
    m = re.search(r"branch_computations=\{([^}]*)\}", rhs)
    if m:
        names += [("branch", n.strip().lstrip("%")) for n in m.group(1).split(",")]
    if opcode == "fusion":
        m = re.search(r"\bcalls=%?([\w.\-]+)", rhs)
        if m:
            names.append(("fused", m.group(1)))
    return names


INTERESTING = (
    "while",
    "conditional",
    "fusion",
    "custom-call",
    "copy",
    "dynamic-update-slice",
    "dynamic-slice",
    "all-reduce",
    "send",
    "recv",
    "infeed",
    "outfeed",
    "rng",
    "rng-bit-generator",
    "sort",
    "call",
    "gather",
    "scatter",
    "reduce",
    "dot",
    "convolution",
    "async-start",
    "async-done",
    "copy-start",
    "copy-done",
)


def describe(comps, name, depth=0, seen=None):
    """Op counts of one computation, the whiles/conditionals in it described recursively."""
    seen = seen if seen is not None else set()
    if name in seen or name not in comps:
        return {"name": name}
    seen.add(name)
    cnt = collections.Counter(o for _, o, _ in comps[name])
    d = {
        "name": name,
        "n_instr": len(comps[name]),
        "ops": {
            k: v
            for k, v in cnt.most_common()
            if k not in ("parameter", "get-tuple-element", "tuple", "constant", "bitcast")
        },
    }
    kids = []
    for iname, o, rhs in comps[name]:
        if o in ("while", "conditional", "call", "async-start"):
            sub = {"instr": iname, "op": o}
            tc = re.search(r"known_trip_count[^0-9]*([0-9]+)", rhs)
            if tc:
                sub["known_trip_count"] = int(tc.group(1))
            for role, c in called(rhs, o):
                if role != "fused" and depth < 6:
                    sub[role] = describe(comps, c, depth + 1, seen)
            kids.append(sub)
    if kids:
        d["control"] = kids
    return d


def digest(comps, name, depth=0):
    """Flat counts for one computation, following call/while/conditional; strings per nested
    control op: ``while[trip=N|?](body: ...)``, ``cond(k branches: ...)``."""
    if name not in comps or depth > 8:
        return ""
    cnt = collections.Counter()
    parts = []
    for _iname, o, rhs in comps[name]:
        if o in ("parameter", "get-tuple-element", "tuple", "constant", "bitcast"):
            continue
        cnt[o] += 1
        cs = dict(called(rhs, o))
        if o == "call" and "to_apply" in cs:
            parts.append(digest(comps, cs["to_apply"], depth + 1))
        elif o == "while":
            tc = re.search(r"known_trip_count[^0-9]*([0-9]+)", rhs)
            parts.append(
                f"while[trip={tc.group(1) if tc else '?'}]("
                + digest(comps, cs.get("body", ""), depth + 1)
                + ")"
            )
        elif o == "conditional":
            br = [
                c
                for r, c in called(rhs, o)
                if r in ("branch", "true_computation", "false_computation")
            ]
            parts.append(
                f"cond({len(br)} br: " + " | ".join(digest(comps, b, depth + 1) for b in br) + ")"
            )
    head = ",".join(f"{k}:{v}" for k, v in cnt.most_common() if k not in ("call",))
    return head + ("; " + "; ".join(x for x in parts if x) if parts else "")


def summarize_hlo(path):
    text = open(path).read()
    comps, entry = parse_hlo(text)
    return {
        "file": os.path.basename(path),
        "n_computations": len(comps),
        "digest": digest(comps, entry) if entry else None,
        "entry": describe(comps, entry) if entry else None,
    }


# ---------------------------------------------------------------- phases
summary = {
    "T": T,
    "width": WIDTH,
    "batch": BATCH,
    "N": N,
    "device": str(jax.devices()[0]),
    "jax": jax.__version__,
    "numpyro": numpyro.__version__,
    "phases": {},
}


def save_summary():
    with open(os.path.join(OUT, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=str)


def phase(name, make):
    print(f"## phase {name}", flush=True)
    info = {}
    t0 = time.perf_counter()
    f = make(T)
    block(f(random.PRNGKey(0)))
    info["first_call_s"] = round(time.perf_counter() - t0, 3)
    times = []
    for r in range(0 if name == "lib_numpyro" else 3):
        t0 = time.perf_counter()
        block(f(random.PRNGKey(r + 1)))
        times.append(time.perf_counter() - t0)
    info["repeat_call_s"] = [round(t, 4) for t in times]
    if times:
        info["repeat_us_per_step_incl_fixed"] = round(min(times) / T * 1e6, 2)
    print(json.dumps({name: info}), flush=True)
    tdir = os.path.join(TRACE_ROOT, name)
    shutil.rmtree(tdir, ignore_errors=True)
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0 if name == "lib_numpyro" else 1
    jax.profiler.start_trace(tdir, create_perfetto_trace=True, profiler_options=opts)
    t0 = time.perf_counter()
    block(f(random.PRNGKey(7)))
    info["traced_call_s"] = round(time.perf_counter() - t0, 4)
    jax.profiler.stop_trace()
    pf = glob.glob(os.path.join(tdir, "**", "*perfetto_trace.json.gz"), recursive=True)
    if pf:
        shutil.copy(pf[0], os.path.join(OUT, f"trace_{name}.json.gz"))
        try:
            info["trace"] = summarize_trace(pf[0], T)
        except Exception as e:  # noqa: BLE001
            info["trace_error"] = repr(e)
    else:
        info["trace_error"] = "no perfetto trace file: " + repr(
            glob.glob(os.path.join(tdir, "**"), recursive=True)
        )
    summary["phases"][name] = info
    save_summary()
    tr = info.get("trace", {})
    for k in ("_hlo_modules", "_main_window_us", "_main_window_us_per_step"):
        print(f"   {k}: {tr.get(k)}", flush=True)
    for key, v in tr.get("_in_main_window", {}).items():
        print(
            f"   [main window] {key}: {v['events']} ({v['per_step']}/step); top {v['top'][:12]}",
            flush=True,
        )
    for key, v in [kv for kv in tr.items() if not kv[0].startswith("_")][:8]:
        print(
            f"   {key}: {v['events']} events ({v['per_step']}/step), busy {v['busy_us']:.0f} us, "
            f"span {v['span_us']:.0f} us; top {v['top'][:6]}",
            flush=True,
        )


makers = {"lib_fast": lib_sgld, "hand": hand_sgld, "lib_numpyro": lib_sgld}
for name in PHASES:
    try:
        if name == "lib_fast":
            with ns.fast_sampling_loop():
                phase(name, makers[name])
        else:
            phase(name, makers[name])
    except Exception as e:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        summary["phases"][name] = {"error": repr(e)}
        save_summary()

# ---------------------------------------------------------------- HLO files
try:
    files = sorted(glob.glob(os.path.join(HLO_DIR, "*after_optimizations.txt")))
    chosen, seen_kinds = [], set()
    for p in files:
        txt = open(p).read()
        base = os.path.basename(p)
        kind = next((k for k in ("sample_loop", "jit_run.", "fori_collect") if k in base), None)
        if kind and kind not in seen_kinds:
            seen_kinds.add(kind)
            chosen.append(p)
    extra = []
    for p in chosen:
        stem = os.path.basename(p).split(".")[0]  # module_XXXX
        extra += [
            q
            for q in glob.glob(os.path.join(HLO_DIR, stem + ".*"))
            if (
                "thunk" in q
                or "before_optimizations.txt" in q
                or "buffer-assignment" in q
                or "memory-usage" in q
            )
        ]
    summary["hlo_all_modules"] = [os.path.basename(p) for p in files]
    summary["hlo"] = {}
    for p in chosen:
        try:
            summary["hlo"][os.path.basename(p)] = summarize_hlo(p)
        except Exception as e:  # noqa: BLE001
            summary["hlo"][os.path.basename(p)] = {"error": repr(e)}
    save_summary()
    with tarfile.open(os.path.join(OUT, "hlo.tgz"), "w:gz") as tf:
        for p in sorted(set(chosen + extra)):
            if os.path.getsize(p) < 20_000_000:
                tf.add(p, arcname="hlo/" + os.path.basename(p))
    print("## HLO modules kept:", [os.path.basename(p) for p in chosen], flush=True)
    for k, v in summary["hlo"].items():
        print("##", k, "digest:", str(v.get("digest"))[:2500], flush=True)
except Exception:  # noqa: BLE001
    import traceback

    traceback.print_exc()

try:
    xp = glob.glob(os.path.join(TRACE_ROOT, "**", "*.xplane.pb"), recursive=True)
    with tarfile.open(os.path.join(OUT, "xplane.tgz"), "w:gz") as tf:
        for p in xp:
            if os.path.getsize(p) < 30_000_000:
                tf.add(p, arcname=os.path.relpath(p, TRACE_ROOT))
except Exception as e:  # noqa: BLE001
    print("xplane tar failed", repr(e))
print("## probe done", flush=True)
