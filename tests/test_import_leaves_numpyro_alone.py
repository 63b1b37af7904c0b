"""Importing numpyro_sgrld changes no attribute of NumPyro or JAX; the fast sampling loop is an
explicit, version-checked opt-in that changes one name, and only the loop of our kernels."""

import functools
import gc
import subprocess
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import numpyro.infer.mcmc
import pytest
from jax import random
from numpyro.infer import MCMC, NUTS

import numpyro_sgrld
from numpyro_sgrld.sampler import compat as _compat
from numpyro_sgrld.sampler import loop as _loop

# Run in a fresh interpreter: this process has imported numpyro_sgrld long ago. The snapshot is
# taken after JAX and NumPyro are imported and a computation has run (backends initialised), so
# what it sees is what importing numpyro_sgrld does, not what first use of JAX does.
_SNAPSHOT = r"""
import sys, types
import jax, jax.numpy as jnp, numpyro, numpyro.infer, numpyro.distributions, numpyro.util
import numpyro.infer.mcmc
jnp.zeros(3).block_until_ready()

def watched():
    return {n: m for n, m in list(sys.modules.items())
            if m is not None and (n.split(".")[0] in ("jax", "jaxlib")
                                  or n.split(".")[0] == "numpyro")}

before = {name: dict(vars(mod)) for name, mod in watched().items()}
import numpyro_sgrld  # noqa: F401
changed = []
for name, attrs in before.items():
    now = vars(sys.modules[name])
    for key, value in attrs.items():
        if key not in now:
            changed.append(f"{name}.{key} removed")
        elif now[key] is not value:
            changed.append(f"{name}.{key} replaced")
    for key in now.keys() - attrs.keys():
        if not isinstance(now[key], types.ModuleType):  # a newly imported submodule is fine
            changed.append(f"{name}.{key} added")
# the optional extras: random_nnx_module / random_eqx_module import flax.nnx and equinox when
# called. (Haiku, a dependency, imports flax.linen itself when Flax is installed.)
import numpyro_sgrld.bridges.equinox, numpyro_sgrld.bridges.nnx  # noqa: E401,F401
optional = sorted(n for n in sys.modules if n.split(".")[0] == "equinox"
                  or n == "flax.nnx" or n.startswith("flax.nnx."))
print("OPTIONAL:" + ";".join(optional))
print(len(before), "modules watched")
print("CHANGED:" + ";".join(sorted(changed)))
"""


def test_import_replaces_no_attribute_of_numpyro_or_jax():
    out = subprocess.run(
        [sys.executable, "-c", _SNAPSHOT], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    watched = int(out.stdout.split(" modules watched")[0].split()[-1])
    assert watched > 50, out.stdout  # numpyro.*, jax.*, jaxlib.* all seen
    changed = out.stdout.split("CHANGED:")[1].strip()
    assert changed == "", f"import numpyro_sgrld changed: {changed}"
    # flax.nnx and equinox are imported by random_nnx_module / random_eqx_module, not on import
    optional = out.stdout.split("OPTIONAL:")[1].splitlines()[0].strip()
    assert optional == "", f"import numpyro_sgrld (.nnx, .equinox too) imported {optional}"


def test_the_opt_in_changes_one_name_and_is_undone():
    numpyros = numpyro.infer.mcmc.fori_collect
    assert not _compat.fast_sampling_loop_enabled()
    with numpyro_sgrld.fast_sampling_loop():
        assert numpyro.infer.mcmc.fori_collect is _compat._fori_collect
        numpyro_sgrld.enable_fast_sampling_loop()  # idempotent
        with numpyro_sgrld.fast_sampling_loop():  # nested: still on afterwards
            pass
        assert _compat.fast_sampling_loop_enabled()
    assert numpyro.infer.mcmc.fori_collect is numpyros
    numpyro_sgrld.disable_fast_sampling_loop()  # off already: nothing to do
    assert numpyro.infer.mcmc.fori_collect is numpyros


def test_the_opt_in_refuses_another_numpyro_version(monkeypatch):
    monkeypatch.setattr(numpyro, "__version__", "0.23.0")
    with pytest.raises(RuntimeError, match=r"installed NumPyro is 0\.23\.0.*pip install"):
        numpyro_sgrld.enable_fast_sampling_loop()
    assert not _compat.fast_sampling_loop_enabled()


def test_the_opt_in_refuses_a_changed_fori_collect(monkeypatch):
    monkeypatch.setattr(numpyro.infer.mcmc, "fori_collect", lambda lower, upper, body_fun: 0)
    with pytest.raises(RuntimeError, match="does not call `numpyro.infer.mcmc.fori_collect`"):
        numpyro_sgrld.enable_fast_sampling_loop()


def test_disable_does_not_overwrite_a_later_replacement(monkeypatch):
    numpyros = numpyro.infer.mcmc.fori_collect
    numpyro_sgrld.enable_fast_sampling_loop()
    try:
        monkeypatch.setattr(numpyro.infer.mcmc, "fori_collect", numpyros)
        with pytest.raises(RuntimeError, match="replaced by numpyro.util.fori_collect"):
            numpyro_sgrld.disable_fast_sampling_loop()
    finally:
        monkeypatch.undo()
        numpyro_sgrld.disable_fast_sampling_loop()
    assert numpyro.infer.mcmc.fori_collect is numpyros


def _tracers_held_by(*roots):
    """Tracers reachable from ``roots`` without passing through a module or its namespace (so
    a function's globals are not followed into all of JAX)."""
    namespaces = {id(vars(m)) for m in list(sys.modules.values()) if m is not None}
    seen, stack, found = set(), list(roots), []
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, types.ModuleType) or id(obj) in namespaces:
            continue
        seen.add(id(obj))
        if isinstance(obj, jax.core.Tracer):
            found.append(obj)
            continue
        stack.extend(gc.get_referents(obj))
    return found


def _our_state():
    """What numpyro_sgrld keeps between calls: the module-level values of its loop and opt-in."""
    return [v for m in (_compat, _loop) for v in vars(m).values()
            if not isinstance(v, (types.ModuleType, types.FunctionType, type))]


N, D = 200, 2


def _data():
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(N, D)), jnp.float32)
    return X, X @ jnp.array([1.0, -1.0]) + 0.1 * jnp.asarray(rng.normal(size=N), jnp.float32)


def _model(X, y):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([D]).to_event(1))
    numpyro.sample("y", dist.Normal(X @ w, 0.1), obs=y)


def test_nuts_inside_jit_leaves_no_tracer_in_our_state():
    # NumPyro itself keeps some tracers of a run inside jit alive (seen with NumPyro 0.22.0 and
    # no numpyro_sgrld at all); what is tested is that nothing of ours holds one
    X, y = _data()
    kernel = NUTS(_model)

    @jax.jit
    def draws(X, y):
        mcmc = MCMC(kernel, num_warmup=10, num_samples=10, progress_bar=False)
        mcmc.run(random.PRNGKey(0), X, y)
        return mcmc.get_samples()["w"]

    with numpyro_sgrld.fast_sampling_loop():
        w = draws(X, y)
    assert w.shape == (10, D) and np.all(np.isfinite(np.asarray(w)))
    assert _tracers_held_by(*_our_state()) == []


@pytest.mark.parametrize("progbar", [False, True])
def test_our_loop_inside_jit_caches_nothing(progbar):
    cached = dict(_loop._loops)

    @jax.jit
    def draws(scale):
        body = functools.partial(lambda x, scale: x + scale, scale=scale)  # closes over a tracer
        return _loop.collect(0, 10, body, jnp.zeros(2), progbar=progbar, thinning=5)

    np.testing.assert_array_equal(draws(jnp.float32(1.0))[:, 0], [5.0, 10.0])
    assert dict(_loop._loops) == cached
    assert _tracers_held_by(*_our_state()) == []
    # outside jit the same loop is cached (so the check above can fail)
    _loop.collect(0, 10, functools.partial(lambda x, s: x + s, s=1.0), jnp.zeros(2),
                  progbar=False)
    assert len(_loop._loops) == min(len(cached) + 1, _loop._MAX_LOOPS)


def test_nuts_gets_numpyros_function_with_the_same_arguments(monkeypatch):
    calls = []

    @functools.wraps(numpyro.util.fori_collect)
    def numpyros(*args, **kwargs):
        calls.append((args, kwargs))
        return numpyro.util.fori_collect(*args, **kwargs)

    X, y = _data()
    monkeypatch.setattr(numpyro.infer.mcmc, "fori_collect", numpyros)
    with numpyro_sgrld.fast_sampling_loop():
        MCMC(NUTS(_model), num_warmup=5, num_samples=5, progress_bar=False).run(
            random.PRNGKey(0), X, y
        )
    assert len(calls) == 1
    args, kwargs = calls[0]
    assert args[:2] == (5, 10) and kwargs["thinning"] == 1 and kwargs["progbar"] is False
    assert numpyro.infer.mcmc.fori_collect is numpyros  # put back as it was found


def test_the_command_line_opts_in_for_its_own_run_only(monkeypatch):
    from numpyro_sgrld.app import cli

    seen = []
    monkeypatch.setattr(cli, "_quickstart", lambda args: seen.append(
        _compat.fast_sampling_loop_enabled()))
    assert cli.main(["quickstart"]) == 0
    assert seen == [True] and not _compat.fast_sampling_loop_enabled()
    # on a NumPyro it was not tested with: a warning, and the job runs on NumPyro's loop
    monkeypatch.setattr(numpyro, "__version__", "0.23.0")
    with pytest.warns(UserWarning, match="installed NumPyro is 0.23.0.*Continuing"):
        assert cli.main(["quickstart"]) == 0
    assert seen == [True, False]
