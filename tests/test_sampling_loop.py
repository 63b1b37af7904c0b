"""The kernels' own sampling loop (``numpyro_sgrld.sampler.loop``, used by ``MCMC`` after
``enable_fast_sampling_loop()``): NumPyro's draws, postprocessing only on the kept steps, a
progress bar updated in chunks; other kernels untouched."""

import contextlib
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC, NUTS

import numpyro_sgrld
from numpyro_sgrld import PSGLD, SGHMC
from numpyro_sgrld.sampler import loop as _loop

N, D, BATCH = 400, 3, 20


def _data():
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(N, D)), jnp.float32)
    y = jnp.asarray(rng.random(N) < 0.5, jnp.int32)
    return X, y


def model(X, y, on_full_data=None):
    """Logistic regression with a positive scale and deterministic sites; ``on_full_data()``
    is called (from the compiled program) whenever the model runs on all ``N`` points."""
    w = numpyro.sample("w", dist.Normal(0, 1).expand([D]).to_event(1))
    s = numpyro.sample("s", dist.HalfNormal(1.0))
    numpyro.deterministic("ws", w * s)
    with numpyro.plate("data", N, subsample_size=BATCH) as idx:
        logits = X[idx] @ w
        if on_full_data is not None and logits.shape[0] == N:
            jax.debug.callback(on_full_data)
        numpyro.sample("y", dist.Bernoulli(logits=logits), obs=y[idx])


@pytest.fixture(params=[0, 16], ids=["segments", "groups-of-16"])
def group(request, monkeypatch):
    """Each of the kernels' two loops as a backend runs them: 0, the loop over kept draws (a
    CPU's, ``_loop.GROUP = 0``), and 16, the grouped loop with the steps after warm-up
    compiled for that phase (an accelerator's: ``GROUP = 16``, ``SETTLED = True``)."""
    monkeypatch.setattr(_loop, "GROUP", request.param)
    monkeypatch.setattr(_loop, "SETTLED", bool(request.param))
    monkeypatch.setattr(_loop, "_settled_bodies", type(_loop._settled_bodies)())
    return request.param


def _loop_of(loop):
    """``"sgrld"``: the opt-in on for the block; ``"numpyro"``: NumPyro's loop (no opt-in)."""
    return numpyro_sgrld.fast_sampling_loop() if loop == "sgrld" else contextlib.nullcontext()


def _draws(loop, kernel_cls=PSGLD, model_kwargs=None, step_size=1e-3, **mcmc_kwargs):
    X, y = _data()
    with _loop_of(loop):
        mcmc = MCMC(kernel_cls(model, step_size=step_size), **mcmc_kwargs)
        mcmc.progress_bar = mcmc_kwargs.get("progress_bar", True)  # NumPyro: off under CI/xdist
        mcmc.run(random.PRNGKey(3), X, y, extra_fields=("diverging", "potential_energy"),
                 **(model_kwargs or {}))
    # the verdict's streaming moments exist on NumPyro's loop only (the kernels' loop judges the
    # kept draws): the chain's state is the rest
    return (mcmc.get_samples(group_by_chain=True), mcmc.get_extra_fields(group_by_chain=True),
            mcmc.last_state._replace(monitor=None))


@pytest.mark.parametrize(
    "kw",
    [
        pytest.param(dict(num_warmup=7, num_samples=23, thinning=4, progress_bar=False),
                     marks=pytest.mark.slow),
        pytest.param(dict(num_warmup=7, num_samples=23, thinning=4, progress_bar=True),
                     marks=pytest.mark.slow),
        pytest.param(dict(num_warmup=0, num_samples=20, thinning=20, jit_model_args=True,
                          progress_bar=False), marks=pytest.mark.slow),
        pytest.param(dict(num_warmup=5, num_samples=20, thinning=3, num_chains=3,
                          chain_method="vectorized", progress_bar=True),
                     marks=pytest.mark.slow),
        pytest.param(dict(num_warmup=5, num_samples=9, thinning=2, num_chains=2,
                          chain_method="sequential", progress_bar=False),
                     marks=pytest.mark.slow),
        # the step adapted during warm-up (its lax.cond on the step counter) on both loops,
        # vectorised, thinned, with the progress bar (the default run's case)
        dict(num_warmup=200, num_samples=20, thinning=3, num_chains=2,
             chain_method="vectorized", progress_bar=True, step_size=None),
    ],
    ids=["warmup+thinning", "progress-bar", "one-draw", "vectorized", "sequential", "adapted"],
)
def test_same_draws_as_numpyros_loop(kw, group):
    kernel_cls = SGHMC if kw.get("chain_method") == "sequential" else PSGLD
    ours = _draws("sgrld", kernel_cls, **kw)
    theirs = _draws("numpyro", kernel_cls, **kw)
    assert jax.tree.structure(ours) == jax.tree.structure(theirs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        assert a.shape == b.shape
        # the segment loop: bit for bit. The grouped loop: the same chain up to rounding (its
        # step, compiled inside the group's loop, may round differently under the tests'
        # optimisation level 0; draws_identity.py checks it bit for bit at the default level;
        # a step or draw out of place differs by far more)
        if group and np.issubdtype(np.asarray(a).dtype, np.floating):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(a, b)
    assert np.ptp(np.asarray(ours[0]["w"])) > 0  # the chains moved
    if group and "step_size" in kw:  # adapted: the steps after warm-up had their own loop
        assert len(_loop._settled_bodies) == 1


@pytest.mark.slow  # compile-heavy: in the slow set, to keep the default run under 5 minutes
def test_postprocessing_runs_only_on_the_kept_steps(group):
    # deterministic sites are computed by replaying the model on all the data: NumPyro's loop
    # does it on every step and once more, eagerly, for the shapes of its sample buffers; the
    # segment loop once per kept draw (4), the grouped loop once per place set aside for a
    # kept draw in each group of 16 steps that keeps any (ceil(16 / thinning) places): with
    # thinning 16 once per kept draw (4 of 64 steps), with thinning 5 four times in each of the
    # 2 groups of 20 steps (4 draws). Both once more when the kernel is set up: the check of
    # every data point's log-density at the initial position
    counts = {}
    for thinning, steps in ((16, 64), (5, 20)):
        for loop in ("sgrld", "numpyro"):
            calls = []
            samples, _, _ = _draws(
                loop, num_warmup=0, num_samples=steps, thinning=thinning, progress_bar=False,
                model_kwargs={"on_full_data": partial(calls.append, 1)},
            )
            jax.effects_barrier()
            counts[loop, thinning] = len(calls)
            assert samples["ws"].shape == (1, 4, D)
    assert counts == {("sgrld", 16): 4 + 1, ("numpyro", 16): 65 + 1,
                      ("sgrld", 5): (4 if group == 0 else 2 * 4) + 1, ("numpyro", 5): 21 + 1}


def test_progress_bar_runs_one_compiled_call_per_update(monkeypatch):
    calls = []
    compiled = _loop._compiled

    def counting(*args, **kwargs):
        run = compiled(*args, **kwargs)
        return lambda *args: (calls.append(args[1] - args[0]), run(*args))[1]

    monkeypatch.setattr(_loop, "_compiled", counting)
    X, y = _data()
    mcmc = MCMC(PSGLD(model, step_size=1e-3), num_warmup=0, num_samples=100,
                progress_bar=True, progress_rate=30)
    mcmc.progress_bar = True  # NumPyro switches it off when CI or PYTEST_XDIST_WORKER is set
    with numpyro_sgrld.fast_sampling_loop():
        mcmc.run(random.PRNGKey(0), X, y)
    assert calls == [30, 30, 30, 10]
    assert mcmc.get_samples()["w"].shape == (100, D)


def test_other_kernels_keep_numpyros_loop(monkeypatch):
    used = []
    collect = _loop.collect
    monkeypatch.setattr(_loop, "collect", lambda *a, **k: (used.append(1), collect(*a, **k))[1])
    X, y = _data()

    def full(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([D]).to_event(1))
        numpyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

    def sg_run():
        MCMC(PSGLD(model, step_size=1e-3), num_warmup=0, num_samples=5, progress_bar=False).run(
            random.PRNGKey(0), X, y
        )

    with numpyro_sgrld.fast_sampling_loop():
        MCMC(NUTS(full), num_warmup=5, num_samples=5, progress_bar=False).run(
            random.PRNGKey(0), X, y
        )
        assert used == []
        sg_run()
        assert used == [1]
    sg_run()  # without the opt-in: NumPyro's loop
    assert used == [1]


def test_bad_arguments_are_named():
    body, init = (lambda x: x + 1), jnp.zeros(2)
    with pytest.raises(ValueError, match="thinning"):
        _loop.collect(0, 10, body, init, progbar=False, thinning=0)
    with pytest.raises(ValueError, match="lower <= upper"):
        _loop.collect(5, 3, body, init, progbar=False)
    with pytest.raises(ValueError, match="collection_size"):
        _loop.collect(0, 10, body, init, progbar=False, collection_size=4)


def test_collect_keeps_the_last_step_of_each_window(group):
    body, init = (lambda x: x + 1), jnp.zeros(2)
    # steps 0..9, lower 2, thinning 3: start = 2 + 8 % 3 = 4, windows 4-6 and 7-9, so the
    # states after steps 6 and 9 are kept; the same when run in chunks of 2 steps (progress bar)
    for progbar in (False, True):
        out, last = _loop.collect(2, 10, body, init, progbar=progbar, progress_rate=2,
                                  thinning=3, return_last_val=True)
        np.testing.assert_array_equal(out[:, 0], [7.0, 10.0])
        np.testing.assert_array_equal(last, [10.0, 10.0])
    # thinning 1: every step from `lower` on; a larger collection is zero-filled at the end
    out = _loop.collect(2, 5, body, init, progbar=False, collection_size=5)
    np.testing.assert_array_equal(out[:, 0], [3.0, 4.0, 5.0, 0.0, 0.0])
    # fewer steps than `thinning`: nothing kept, the state still advances
    out, last = _loop.collect(0, 4, body, init, progbar=False, thinning=5, return_last_val=True)
    assert out.shape == (0, 2)
    np.testing.assert_array_equal(last, [4.0, 4.0])


@pytest.mark.parametrize("unroll", [3, 16, 40])
def test_unrolled_groups_keep_the_same_steps(monkeypatch, unroll):
    """Several steps per iteration of a group's loop (``_loop.UNROLL``; 3 does not divide the
    16 steps, 40 is more than them): the same kept states as one step per iteration."""
    monkeypatch.setattr(_loop, "GROUP", 16)
    body, init = (lambda x: x + 1), jnp.zeros(2)
    expected = _loop.collect(3, 45, body, init, progbar=False, thinning=4)
    monkeypatch.setattr(_loop, "UNROLL", unroll)
    out = _loop.collect(3, 45, body, init, progbar=False, thinning=4)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(out[:, 0], np.arange(9.0, 46.0, 4.0))  # steps 8, 12, ..., 44
    monkeypatch.setattr(_loop, "UNROLL", 0)
    with pytest.raises(ValueError, match="UNROLL=0 must be a positive integer"):
        _loop.collect(3, 45, body, init, progbar=False, thinning=4)


def test_groups_set_aside_as_many_states_as_they_can_keep_within_the_memory_bound(monkeypatch):
    small = {"z": np.zeros(10, np.float32)}
    for thinning, slots in ((1, 16), (5, 4), (15, 2), (16, 1), (1000, 1)):
        assert _loop._group_sizes(small, thinning, 16) == (16, slots)
    assert _loop._group_sizes(small, 3, 0) == (0, 0)  # the segment loop
    # a state of 100 MiB: two fit in the 256 MiB set aside, so the groups hold two kept steps
    big = {"z": np.zeros(25 * 2**20, np.float32)}
    assert _loop._group_sizes(big, 1, 16) == (2, 2)
    assert _loop._group_sizes(big, 3, 16) == (6, 2)
    assert _loop._group_sizes(big, 10, 16) == (16, 2)
    # by default: the segment loop on a CPU, groups of 16 on an accelerator
    monkeypatch.setattr(_loop, "GROUP", None)
    assert _loop._steps_per_group() == (0 if jax.default_backend() == "cpu" else 16)
    monkeypatch.setattr(_loop, "GROUP", 4)
    assert _loop._steps_per_group() == 4
    # and the steps after warm-up compiled for that phase on an accelerator only
    monkeypatch.setattr(_loop, "SETTLED", None)
    assert _loop._settles() == (jax.default_backend() != "cpu")


# A user's run with the progress bar on, in a fresh interpreter without the variables under which
# NumPyro switches the bar off (CI, PYTEST_XDIST_WORKER); tqdm told to draw every update
# (TQDM_MININTERVAL=0) so what it shows does not depend on the machine's speed.
_WITH_BAR = r"""
import contextlib, io, json, sys
import jax.numpy as jnp, numpy as np, numpyro, numpyro.distributions as dist
from jax import random
from numpyro.infer import MCMC
import numpyro_sgrld
from numpyro_sgrld import SGLD

X = jnp.asarray(np.random.default_rng(0).normal(size=(300, 2)), jnp.float32)
y = X @ jnp.array([1.0, -1.0])

def model(X, y):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
    with numpyro.plate("data", 300, subsample_size=30) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ w, 0.5), obs=y[idx])

def run(progress_bar, opt_in):
    kernel = SGLD(model, step_size=1e-4)
    mcmc = MCMC(kernel, num_warmup=40, num_samples=60, thinning=3,
                progress_bar=progress_bar, progress_rate=25)
    bar = io.StringIO()
    loop = numpyro_sgrld.fast_sampling_loop() if opt_in else contextlib.nullcontext()
    with loop, contextlib.redirect_stderr(bar):
        mcmc.run(random.PRNGKey(1), X, y)
    return np.asarray(mcmc.get_samples()["w"]).tolist(), bar.getvalue()

out = {}
for name, bar, opt_in in [("ours", True, True), ("ours_off", False, True),
                          ("numpyro", True, False)]:
    out[name] = dict(zip(("draws", "bar"), run(bar, opt_in)))
print(json.dumps(out))
"""


@pytest.mark.slow
def test_progress_bar_shows_chunked_counts_and_leaves_the_draws_alone(tmp_path):
    import json
    import os
    import re
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER")}
    env["TQDM_MININTERVAL"] = "0"
    out = subprocess.run([sys.executable, "-c", _WITH_BAR], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    runs = json.loads(out.stdout.strip().splitlines()[-1])
    bar = runs["ours"]["bar"]
    # 100 steps (40 warm-up, 60 sampling) in compiled chunks of progress_rate = 25 steps: the bar
    # is drawn at 0, after each chunk, and once more when it closes
    counts = [int(c) for c in re.findall(r"(\d+)/100 \[", bar)]
    assert counts == [0, 25, 50, 75, 100, 100], bar
    # NumPyro's description of the phase, and the kernel's diagnostics string
    assert "warmup" in bar and "sample" in bar, bar
    assert "h=1.00e-04" in bar, bar
    assert runs["ours_off"]["bar"] == ""
    # the same 20 draws with the bar on, off, and on NumPyro's loop (no opt-in)
    draws = np.asarray(runs["ours"]["draws"])
    assert draws.shape == (20, 2) and np.ptp(draws) > 0
    np.testing.assert_array_equal(draws, runs["ours_off"]["draws"])
    np.testing.assert_array_equal(draws, runs["numpyro"]["draws"])
    # NumPyro's own bar counts the same 100 steps
    assert "100/100" in runs["numpyro"]["bar"]


def _computations(hlo):
    """``{name: text}`` of an HLO module's computations, and the name of its entry."""
    blocks, entry, name = {}, None, None
    for line in hlo.splitlines():
        head = line.split("(")[0].split()
        if line and not line[0].isspace() and "{" in line and head:
            name = head[-1] if head[0] != "ENTRY" else head[1]
            entry = name if head[0] == "ENTRY" else entry
            blocks[name] = ""
        elif name is not None:
            blocks[name] += line + "\n"
    return blocks, entry


def _loops_around(hlo, marker):
    """``[(trip count or None, whether a conditional is inside)]`` for each while loop of an
    optimized HLO module that runs the ops named ``marker`` (a ``jax.named_scope``) without
    being one of them: the loops around the step, not those inside it."""
    import re

    blocks, _ = _computations(hlo)
    blocks = {name.lstrip("%"): text for name, text in blocks.items()}

    def closure(name, seen):
        if name not in seen:
            seen.add(name)
            for ref in re.findall(r"%([\w.\-]+)", blocks.get(name, "")):
                if ref in blocks:
                    closure(ref, seen)
        return seen

    loops = []
    for text in blocks.values():
        for line in text.splitlines():
            if " while(" not in line or marker in line:
                continue
            inside = "".join(blocks[n] for n in closure(
                re.search(r"body=%([\w.\-]+)", line).group(1), set()))
            if marker in inside:
                count = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
                loops.append((int(count.group(1)) if count else None,
                              " conditional(" in inside))
    return loops


@pytest.mark.parametrize("kernel_cls", [numpyro_sgrld.SGLD] + [
    pytest.param(k, marks=pytest.mark.slow) for k in (SGHMC, PSGLD)])
def test_the_loop_over_steps_has_a_known_trip_count_and_no_branch(kernel_cls):
    """The optimized HLO (XLA:CPU) of the compiled sampling loops at a fixed step: the grouped
    loop (an accelerator's) runs the steps in a loop whose trip count XLA knows (16) with no
    ``conditional`` inside (on a GPU a loop of unknown trip count reads its condition on the
    host at every iteration, and a ``conditional`` its predicate); the segment loop (a CPU's)
    has no ``conditional`` inside any loop. The same program with a ``lax.cond`` per step in a
    loop of traced bounds is told apart. The step is traced once in each (compile time grows
    with every copy of it in the program). With two steps per iteration (``UNROLL``) the
    group's loop runs 8 times."""
    X, y = _data()
    kernel = kernel_cls(model, step_size=1e-3)
    state = kernel.init(random.PRNGKey(0), 0, None, (X, y), {})

    traced = []

    def body(s):
        traced.append(1)
        with jax.named_scope("the_sampling_step"):
            return kernel.sample(s, (X, y), {})

    def transform(s):
        return kernel.postprocess_fn((X, y), {})(s.z)

    collection = _loop._empty_collection(transform, state, 8)
    args = (np.int32(0), np.int32(40), state, collection, np.int32(0), np.int32(5),
            state.num_rejected)

    def loops(loop):
        hlo = jax.jit(partial(loop, body, transform)).lower(*args).compile().as_text()
        return _loops_around(hlo, "the_sampling_step")

    group, slots = _loop._group_sizes(state, 5, 16)
    assert (group, slots) == (16, 4)
    grouped = loops(lambda body, transform, *rest: _loop._grouped_loop(body, transform, group,
                                                                       slots, 1, *rest))
    assert (group, False) in grouped, grouped  # the steps: a loop of 16, no branch
    assert [c for c in grouped if c[0] is None] == [(None, True)]  # over groups; records
    assert len(traced) == 1
    segments = loops(_loop._segment_loop)
    assert segments and not any(branch for _, branch in segments), segments
    assert len(traced) == 2

    def per_step_branch(body, transform, lo, hi, val, collection, start, thinning, since):
        def step(i, carry):
            val, collection = carry
            val = body(val)
            kept = (i >= start) & ((i - start) % thinning == thinning - 1)
            return val, jax.lax.cond(kept, partial(_loop._record, transform),
                                     lambda c, *_: c, collection, val,
                                     (i - start) // thinning, since)

        return jax.lax.fori_loop(lo, hi, step, (val, collection))

    assert loops(per_step_branch) == [(None, True)]
    # two steps per iteration of the group's loop (``_loop.UNROLL = 2``): a loop of 8
    unrolled = loops(lambda body, transform, *rest: _loop._grouped_loop(body, transform, group,
                                                                        slots, 2, *rest))
    assert (group // 2, False) in unrolled, unrolled


@pytest.mark.parametrize("kernel_cls, kw, left", [(numpyro_sgrld.SGLD, {}, 0)] + [
    pytest.param(k, kw, left, marks=pytest.mark.slow) for k, kw, left in (
        (SGHMC, {}, 0), (PSGLD, {}, 0), (numpyro_sgrld.MongeSGLD, {}, 0),
        (numpyro_sgrld.ShampooSGLD, dict(update_interval=1), 0),
        (numpyro_sgrld.ShampooSGLD, {}, 1), (numpyro_sgrld.CyclicalSGLD, {}, 1))],
    ids=["SGLD", "SGHMC", "PSGLD", "MongeSGLD", "ShampooSGLD-every-step", "ShampooSGLD",
         "CyclicalSGLD"])
def test_after_warmup_the_default_step_has_no_branch(kernel_cls, kw, left):
    """At the defaults (``step_size=None``: the step adapted, the metric learnt, control
    variates switched on where they pay) a step has the warm-up's branches, resolved on a
    traced flag; the same kernel's transitions after warm-up (``after_warmup``, what the
    accelerator's loop runs then) compile without any ``conditional`` (optimized HLO,
    XLA:CPU), with the control variates on and off, and are the same object for the same
    state, also after the kernel is initialised again (so a repeated ``MCMC.run`` finds its
    compiled loop). Two branches are the algorithm's and stay (``left``): ShampooSGLD's root
    recomputation every ``update_interval`` steps (none with 1), and a cyclical preset's
    exploration stage at each cycle's start."""
    X, y = _data()
    kernel = kernel_cls(model, **kw)
    state = kernel.init(random.PRNGKey(0), 200, None, (X, y), {})

    def branches(sample, state):
        hlo = jax.jit(lambda s: sample(s, (X, y), {})).lower(state).compile().as_text()
        return hlo.count(" conditional(")

    assert branches(kernel.sample, state) >= 3  # the warm-up's: adapt, learn, switch
    for active in (False, True):
        s = state._replace(chain=state.chain._replace(
            gradient_state=state.gradient_state._replace(active=jnp.asarray(active))))
        phase = kernel.after_warmup(s)
        assert phase.gradient.name.endswith("(on)" if active else "(off)")
        assert branches(phase.sample, s) == left
        assert kernel.after_warmup(s) is phase
        # a repeated MCMC.run initialises the kernel again: its compiled loop is found again
        kernel.init(random.PRNGKey(1), 200, None, (X, y), {})
        assert kernel.after_warmup(s) is phase
    fixed = kernel_cls(model, step_size=1e-3, **kw)
    assert fixed.after_warmup(fixed.init(random.PRNGKey(0), 0, None, (X, y), {})) is None
