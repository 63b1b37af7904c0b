"""Flax NNX and Equinox networks with priors (random_nnx_module, random_eqx_module): site names
and shapes, prior densities by hand (Equinox's (out, in) weights included), the network called
with given parameters, the inputs recorded for BNP, SGLD and BNP-SGLD runs, and bad input.

Each library is an optional extra; its tests are skipped when it is not installed."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from numpyro.infer import MCMC, Predictive
from numpyro.infer.util import log_density
from scipy import stats

from numpyro_sgrld import BNPSGLD, SGLD, metrics, priors
from numpyro_sgrld.core.metrics import StepContext
from numpyro_sgrld.core.metrics.bnp import layer_inputs_name

D_IN, HIDDEN, D_OUT = 3, 4, 2


def _nnx():
    return pytest.importorskip(
        "flax.nnx", reason="Flax is an optional extra: pip install 'numpyro-sgrld[flax]'"
    )


def _eqx():
    return pytest.importorskip(
        "equinox", reason="Equinox is an optional extra: pip install 'numpyro-sgrld[equinox]'"
    )


class NNX:
    """A 3-4-2 ReLU MLP in Flax NNX, its layer paths, and the network called with given sites."""

    layers = ("layers/0", "layers/2")
    native_leaves = ("kernel", "bias")  # the parameters' own names (``w``, ``b`` as sites)

    def __init__(self):
        self.nnx = _nnx()
        from numpyro_sgrld.bridges.nnx import random_nnx_module

        self.random_module = random_nnx_module

    def mlp(self):
        nnx, rngs = self.nnx, self.nnx.Rngs(0)
        return nnx.Sequential(
            nnx.Linear(D_IN, HIDDEN, rngs=rngs), nnx.relu, nnx.Linear(HIDDEN, D_OUT, rngs=rngs)
        )

    def call_with(self, net, values, X):
        """``net`` (a copy) with its parameters set to the site values, called on ``X``."""
        net = self.nnx.clone(net)
        for layer, path in zip((net.layers[0], net.layers[2]), self.layers):
            layer.kernel[...] = values[f"net/{path}/w"]
            layer.bias[...] = values[f"net/{path}/b"]
        return net(X)


class EQX:
    """The same MLP in Equinox (``eqx.nn.MLP``)."""

    layers = ("layers/0", "layers/1")
    native_leaves = ("weight", "bias")

    def __init__(self):
        self.eqx = _eqx()
        from numpyro_sgrld.bridges.equinox import random_eqx_module

        self.random_module = random_eqx_module

    def mlp(self):
        return self.eqx.nn.MLP(D_IN, D_OUT, HIDDEN, 1, activation=jax.nn.relu,
                               key=random.PRNGKey(0))

    def call_with(self, net, values, X):
        """``net`` with Equinox weights ``w.T`` (the sites are (in, out)), mapped over ``X``."""
        new = [values[f"net/{p}/{leaf}"] for p in self.layers for leaf in ("w", "b")]
        new = [v.T if i % 2 == 0 else v for i, v in enumerate(new)]
        net = self.eqx.tree_at(
            lambda m: [m.layers[0].weight, m.layers[0].bias, m.layers[1].weight,
                       m.layers[1].bias], net, new)
        return jax.vmap(net)(X)


@pytest.fixture(params=["nnx", "eqx"])
def lib(request):
    return NNX() if request.param == "nnx" else EQX()


def _data(n=6, seed=0):
    rng = np.random.default_rng(seed)
    X = jnp.asarray(rng.normal(size=(n, D_IN)), jnp.float32)
    return X, X[:, 0] - 2.0 * X[:, 1]


def _forward(values, X, layers):
    """The MLP by hand, from the sites (weights (in, out))."""
    (l0, l1), v = layers, values
    h = jax.nn.relu(X @ v[f"net/{l0}/w"] + v[f"net/{l0}/b"])
    return h, h @ v[f"net/{l1}/w"] + v[f"net/{l1}/b"]


def _model(lib, net, prior):
    def model(X):
        return numpyro.deterministic("out", lib.random_module("net", net, prior)(X))

    return model


def _trace(model, *args):
    return handlers.trace(handlers.seed(model, 0)).get_trace(*args)


def _sites(tr):
    return {k: s["value"] for k, s in tr.items() if s["type"] == "sample"}


def _base(fn):
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn


def test_sites_are_named_by_path_shaped_in_out_and_used_by_the_network(lib):
    net = lib.mlp()
    X, _ = _data()
    tr = _trace(_model(lib, net, dist.Normal(0, 1)), X)
    l0, l1 = lib.layers
    values = _sites(tr)
    assert {k: v.shape for k, v in values.items()} == {
        f"net/{l0}/w": (D_IN, HIDDEN), f"net/{l0}/b": (HIDDEN,),
        f"net/{l1}/w": (HIDDEN, D_OUT), f"net/{l1}/b": (D_OUT,),
    }
    h, out = _forward(values, X, lib.layers)
    np.testing.assert_allclose(tr["out"]["value"], out, rtol=1e-5, atol=1e-6)
    # each dense layer's inputs, from the same pass, under the names BNP reads
    aux = {k: s["value"] for k, s in tr.items() if s["type"] == "auxiliary"}
    assert set(aux) == {layer_inputs_name(f"net/{l0}"), layer_inputs_name(f"net/{l1}")}
    np.testing.assert_allclose(aux[layer_inputs_name(f"net/{l0}")], X)
    np.testing.assert_allclose(aux[layer_inputs_name(f"net/{l1}")], h, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("form", [pytest.param("gaussian", marks=pytest.mark.slow), "horseshoe"])
def test_prior_log_density_by_hand(lib, form):
    prior = priors.gaussian() if form == "gaussian" else priors.horseshoe("layer")
    model = _model(lib, lib.mlp(), prior)
    X, _ = _data()
    values = _sites(_trace(model, X))
    fan_in = dict(zip(lib.layers, (D_IN, HIDDEN)))  # from the architecture, not the shapes
    expected = 0.0
    for site, value in values.items():
        value = np.asarray(value, np.float64)
        if site.endswith("_scale"):
            expected += stats.halfcauchy.logpdf(value)
            continue
        layer, leaf = site[len("net/"):].rsplit("/", 1)
        m = 1.41 / np.sqrt(fan_in[layer]) if leaf == "w" else 1.0
        s = values[f"{site}_scale"] if form == "horseshoe" else 1.0
        expected += stats.norm.logpdf(value, scale=m * float(s)).sum()
    assert sum(k.endswith("_scale") for k in values) == (4 if form == "horseshoe" else 0)
    got, _ = log_density(model, (X,), {}, values)
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_an_equinox_linear_784_to_400_gets_the_he_scale_of_its_784_inputs():
    eqx = _eqx()
    from numpyro_sgrld.bridges.equinox import random_eqx_module

    linear = eqx.nn.Linear(784, 400, key=random.PRNGKey(0))
    assert linear.weight.shape == (400, 784)  # Equinox: (out, in)
    tr = _trace(lambda: random_eqx_module("net", linear, priors.gaussian()))
    assert tr["net/w"]["value"].shape == (784, 400)
    assert _base(tr["net/w"]["fn"]).scale == pytest.approx(1.41 / np.sqrt(784))
    assert _base(tr["net/b"]["fn"]).scale == 1.0
    w = np.asarray(tr["net/w"]["value"], np.float64)
    got, _ = log_density(lambda: random_eqx_module("net", linear, priors.gaussian()), (), {},
                         _sites(tr))
    expected = (stats.norm.logpdf(w, scale=1.41 / np.sqrt(784)).sum()
                + stats.norm.logpdf(np.asarray(tr["net/b"]["value"])).sum())
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def test_an_equinox_convolution_has_the_hwio_layout_and_its_fan_in():
    eqx = _eqx()
    from numpyro_sgrld.bridges.equinox import (
        conv_weight_from_site,
        conv_weight_to_site,
        random_eqx_module,
    )

    conv = eqx.nn.Conv2d(3, 5, (2, 4), key=random.PRNGKey(0))  # weight (5, 3, 2, 4)
    x = random.normal(random.PRNGKey(1), (2, 3, 6, 7))  # batch of (channels, height, width)

    def model(x):
        return numpyro.deterministic("out", random_eqx_module("c", conv, priors.gaussian())(x))

    tr = _trace(model, x)
    w, b = tr["c/w"]["value"], tr["c/b"]["value"]
    assert w.shape == (2, 4, 3, 5) and b.shape == (5,)
    assert _base(tr["c/w"]["fn"]).scale == pytest.approx(1.41 / np.sqrt(2 * 4 * 3))
    assert _base(tr["c/b"]["fn"]).scale == 1.0
    # the site is an HWIO kernel: XLA's convolution with it is the network's output
    expected = jax.lax.conv_general_dilated(
        x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "HWIO", "NCHW")
    ) + b[None, :, None, None]
    np.testing.assert_allclose(tr["out"]["value"], expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(conv_weight_to_site(conv_weight_from_site(w)), w)


def _conv_net(kind, padding):
    """A 3 -> 5 channel convolution with a (2, 4) kernel, stride (1, 2), and a batch of two
    6 × 7 inputs in the library's layout; ``padding``: "zeros" (1 on each side) or
    "circular"."""
    x = random.normal(random.PRNGKey(1), (2, 6, 7, 3))  # channels last
    if kind == "nnx":
        nnx = _nnx()
        from numpyro_sgrld.bridges.nnx import random_nnx_module

        pad = 1 if padding == "zeros" else "CIRCULAR"
        conv = nnx.Conv(3, 5, (2, 4), strides=(1, 2), padding=pad, rngs=nnx.Rngs(0))
        return lambda: random_nnx_module("c", conv, priors.gaussian()), x, lambda y: y
    eqx = _eqx()
    from numpyro_sgrld.bridges.equinox import random_eqx_module

    conv = eqx.nn.Conv2d(3, 5, (2, 4), stride=(1, 2), padding=1,
                         padding_mode="ZEROS" if padding == "zeros" else "CIRCULAR",
                         key=random.PRNGKey(0))
    to_last = lambda y: jnp.moveaxis(y, 1, -1)  # noqa: E731
    return (lambda: random_eqx_module("c", conv, priors.gaussian()),
            jnp.moveaxis(x, -1, 1), to_last)


@pytest.mark.parametrize("padding", ["zeros", "circular"])
@pytest.mark.parametrize("kind", ["nnx", "eqx"])
def test_a_convolution_records_its_patches_for_bnp(kind, padding):
    """Each call records the patches of a convolution's input (rows = batch × output
    positions, columns in the order of the HWIO site ``w.reshape(-1, c_out)``): the patches
    times the site's kernel, plus the bias, are the layer's output; BNP's statistics of the
    layer are those of the patches."""
    make, x, channels_last = _conv_net(kind, padding)

    def model(x):
        return numpyro.deterministic("out", make()(x))

    tr = _trace(model, x)
    w, b = tr["c/w"]["value"], tr["c/b"]["value"]
    patches = tr[layer_inputs_name("c")]["value"]
    out = channels_last(tr["out"]["value"])
    assert patches.shape == (out.size // 5, 2 * 4 * 3)
    np.testing.assert_allclose(patches @ w.reshape(-1, 5) + b, out.reshape(-1, 5), rtol=1e-5,
                               atol=1e-5)
    rho = 0.9
    position = _sites(tr)
    aux = {k: s["value"] for k, s in tr.items() if s["type"] == "auxiliary"}
    metric = metrics.bnp(rho)
    _, state = metric.update(position, metric.init(position), position, StepContext(aux=aux))
    np.testing.assert_allclose(state.mean["c"], (1 - rho) * patches.mean(0), rtol=1e-5,
                               atol=1e-6)


def test_predictive_and_substitute_give_the_network_called_with_those_parameters(lib):
    net = lib.mlp()
    X, _ = _data()
    model = _model(lib, net, priors.horseshoe("layer"))
    rng = np.random.default_rng(1)
    shapes = {k: v.shape for k, v in _sites(_trace(model, X)).items()}
    draws = {k: jnp.asarray(rng.normal(size=(3, *s)), jnp.float32) for k, s in shapes.items()}
    draws = {k: jnp.abs(v) if k.endswith("_scale") else v for k, v in draws.items()}
    out = Predictive(model, posterior_samples=draws, return_sites=["out"])(
        random.PRNGKey(0), X)["out"]
    for i in range(3):
        values = {k: v[i] for k, v in draws.items()}
        expected = lib.call_with(net, values, X)
        np.testing.assert_allclose(out[i], expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(out[i], _forward(values, X, lib.layers)[1], rtol=1e-5,
                                   atol=1e-5)
        substituted = handlers.seed(handlers.substitute(model, data=values), 0)(X)
        np.testing.assert_allclose(substituted, expected, rtol=1e-5, atol=1e-5)


def _libs():
    """The installed libraries' MLPs (the MCMC tests put all of them in one model: compiling a
    kernel's loop is most of a short run's time)."""
    libs = []
    for make in (NNX, EQX):
        try:
            libs.append(make())
        except pytest.skip.Exception:
            pass
    if not libs:
        pytest.skip("neither Flax nor Equinox is installed: pip install 'numpyro-sgrld[test]'")
    return libs


def _regression(batch):
    """``y ~ N(sum of the installed libraries' MLPs (first output), 0.5)``, a subsampled plate;
    each library's network is named after it (``"nnx/layers/0/w"``, ``"eqx/layers/0/w"``)."""
    libs = _libs()
    nets = [(type(lib).__name__.lower(), lib, lib.mlp()) for lib in libs]

    def model(X, y):
        fs = [lib.random_module(name, net, priors.gaussian()) for name, lib, net in nets]
        with numpyro.plate("data", X.shape[0], subsample_size=batch) as idx:
            mean = sum(f(X[idx])[:, 0] for f in fs)
            numpyro.sample("y", dist.Normal(mean, 0.5), obs=y[idx])

    layers = {f"{name}/{p}" for name, lib, _ in nets for p in lib.layers}
    return model, layers


def _start(model, X, y):
    """Initial values, ``priors.init_to_unit_scales``'s (the Gaussian prior's sites are
    unconstrained): given to ``MCMC.run``, they spare the kernel its compiled search for a
    valid start."""
    seeded = handlers.seed(model, 0)
    tr = handlers.trace(
        handlers.substitute(seeded, substitute_fn=priors.init_to_unit_scales)
    ).get_trace(X, y)
    return {k: s["value"] for k, s in tr.items() if s["type"] == "sample" and not s["is_observed"]}


@pytest.mark.slow
def test_sgld_with_a_subsampled_plate_gives_finite_draws_for_every_site():
    X, y = _data(40)
    model, layers = _regression(batch=8)
    mcmc = MCMC(SGLD(model, step_size=1e-4), num_warmup=0, num_samples=10, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y, init_params=_start(model, X, y))
    samples = mcmc.get_samples()
    weights = {f"{layer}/{leaf}" for layer in layers for leaf in ("w", "b")}
    assert set(samples) == weights
    for name, draws in samples.items():
        assert np.all(np.isfinite(draws)), name
        assert np.ptp(np.asarray(draws), axis=0).max() > 0, name  # the chain moves


def test_bnp_reads_the_recorded_inputs_of_every_dense_layer(lib):
    net = lib.mlp()
    X, _ = _data(40)
    tr = _trace(_model(lib, net, priors.gaussian()), X)
    position = _sites(tr)
    aux = {k: s["value"] for k, s in tr.items() if s["type"] == "auxiliary"}
    rho = 0.9
    metric = metrics.bnp(rho)
    _, state = metric.update(position, metric.init(position), position, StepContext(aux=aux))
    h, _ = _forward(position, X, lib.layers)
    l0, l1 = lib.layers
    assert set(state.mean) == {f"net/{l0}", f"net/{l1}"}
    np.testing.assert_allclose(state.mean[f"net/{l0}"], (1 - rho) * X.mean(0), rtol=1e-5)
    np.testing.assert_allclose(state.var[f"net/{l0}"], rho + (1 - rho) * X.var(0), rtol=1e-5)
    np.testing.assert_allclose(state.mean[f"net/{l1}"], (1 - rho) * h.mean(0), rtol=1e-4,
                               atol=1e-6)


@pytest.mark.slow
def test_bnpsgld_runs_on_the_networks_with_a_subsampled_plate():
    X, y = _data(40)
    model, layers = _regression(batch=8)
    mcmc = MCMC(BNPSGLD(model, step_size=1e-4), num_warmup=0, num_samples=10,
                progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y, init_params=_start(model, X, y))
    assert all(np.isfinite(v).all() for v in mcmc.get_samples().values())
    means = mcmc.last_state.sampler_state.metric.mean
    assert set(means) == layers
    for layer in layers:  # updated from the recorded inputs
        assert np.abs(np.asarray(means[layer])).max() > 0, layer


def test_dict_priors_by_site_or_module_path_and_a_missing_entry_lists_the_paths(lib):
    l0, l1 = lib.layers
    native = lib.native_leaves
    prior = {
        f"net/{l0}/w": dist.Normal(0, 2.0),
        f"{l0}/{native[1]}": dist.Laplace(),
        f"{l1}/{native[0]}": dist.Normal(0, 3.0),
        f"net/{l1}/b": dist.Normal(),
    }
    X, _ = _data()
    tr = _trace(_model(lib, lib.mlp(), prior), X)
    assert _base(tr[f"net/{l0}/w"]["fn"]).scale == 2.0
    assert isinstance(_base(tr[f"net/{l0}/b"]["fn"]), dist.Laplace)
    assert _base(tr[f"net/{l1}/w"]["fn"]).scale == 3.0
    del prior[f"{l0}/{native[1]}"]
    with pytest.raises(KeyError, match=rf"No prior for parameter 'net/{l0}/b' .*"
                       rf"The parameters are: 'net/{l0}/.*'{l0}/{native[0]}'"):
        _trace(_model(lib, lib.mlp(), prior), X)


def test_bad_input_is_refused_with_the_fix():
    nnx, eqx = _nnx(), _eqx()
    from numpyro_sgrld.bridges.equinox import random_eqx_module
    from numpyro_sgrld.bridges.nnx import random_nnx_module

    nnx_net, eqx_net = NNX().mlp(), EQX().mlp()
    cases = [
        (lambda: random_nnx_module("net", eqx_net, dist.Normal()), TypeError,
         "`module` must be an nnx.Module instance.*got MLP.*random_eqx_module"),
        (lambda: random_nnx_module("net", nnx.Linear, dist.Normal()), TypeError,
         "got the class Linear: construct it first"),
        (lambda: random_eqx_module("net", nnx_net, dist.Normal()), TypeError,
         "`module` must be an eqx.Module instance.*got Sequential.*random_nnx_module"),
        (lambda: random_eqx_module("net", eqx.nn.Linear, dist.Normal()), TypeError,
         "got the class Linear: construct it first"),
        (lambda: random_eqx_module("", eqx_net, dist.Normal()), ValueError,
         "`name` must be a non-empty string"),
        (lambda: random_eqx_module("net", eqx_net, dist.Normal(), batched="yes"), TypeError,
         "`batched` must be True or False, got 'yes'"),
        (lambda: random_nnx_module("net", nnx_net, "normal"), TypeError,
         "`prior` must be a numpyro Distribution.*got str"),
    ]
    for fn, error, match in cases:
        with pytest.raises(error, match=match):
            handlers.seed(fn, 0)()


def test_nnx_batch_statistics_are_a_mutable_site_and_the_module_is_left_alone():
    nnx = _nnx()
    from numpyro_sgrld.bridges.nnx import random_nnx_module

    net = nnx.Sequential(nnx.Linear(D_IN, HIDDEN, rngs=nnx.Rngs(0)),
                         nnx.BatchNorm(HIDDEN, momentum=0.9, rngs=nnx.Rngs(0)))
    kernel = np.asarray(net.layers[0].kernel[...])
    X, _ = _data()

    def model(X):
        return random_nnx_module("net", net, dist.Normal(0, 1))(X)

    tr = _trace(model, X)
    assert tr["net$state"]["type"] == "mutable"
    assert set(_sites(tr)) == {"net/layers/0/w", "net/layers/0/b", "net/layers/1/scale",
                               "net/layers/1/bias"}
    h = X @ tr["net/layers/0/w"]["value"] + tr["net/layers/0/b"]["value"]
    state = tr["net$state"]["value"]["state"]
    np.testing.assert_allclose(state["layers/1/mean"], 0.1 * h.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state["layers/1/var"], 0.9 + 0.1 * h.var(0), rtol=1e-5)
    np.testing.assert_array_equal(net.layers[0].kernel[...], kernel)  # the module: untouched
    np.testing.assert_array_equal(net.layers[1].mean[...], 0.0)


def test_equinox_layers_keep_their_attributes_and_unbatched_calls_record_one_row():
    eqx = _eqx()
    from numpyro_sgrld.bridges.equinox import random_eqx_module

    class Tied(eqx.Module):
        lin: eqx.nn.Linear

        def __call__(self, x):  # reads the layer's weight besides calling it
            return self.lin(x) @ self.lin.weight

    net = Tied(eqx.nn.Linear(D_IN, HIDDEN, key=random.PRNGKey(0)))
    x = jnp.arange(1.0, 1.0 + D_IN)

    def model(x):
        return numpyro.deterministic(
            "out", random_eqx_module("net", net, dist.Normal(), batched=False)(x))

    tr = _trace(model, x)
    w, b = tr["net/lin/w"]["value"], tr["net/lin/b"]["value"]  # w: (in, out)
    np.testing.assert_allclose(tr["out"]["value"], (x @ w + b) @ w.T, rtol=1e-5)
    np.testing.assert_allclose(tr[layer_inputs_name("net/lin")]["value"], x[None])


def _remat_net(lib):
    """A net whose first dense layer runs inside ``jax.checkpoint`` (a transformation of the
    network's own), the second outside it."""
    if isinstance(lib, NNX):
        nnx = lib.nnx

        class Remat(nnx.Module):
            def __init__(self, rngs):
                self.inner = nnx.Linear(D_IN, HIDDEN, rngs=rngs)
                self.outer = nnx.Linear(HIDDEN, D_OUT, rngs=rngs)

            def __call__(self, x):
                return self.outer(jax.checkpoint(lambda x: self.inner(x))(x))

        return Remat(nnx.Rngs(0))
    eqx = lib.eqx

    class Remat(eqx.Module):
        inner: eqx.nn.Linear
        outer: eqx.nn.Linear

        def __call__(self, x):
            return self.outer(jax.checkpoint(lambda x: self.inner(x))(x))

    k1, k2 = random.split(random.PRNGKey(0))
    return Remat(eqx.nn.Linear(D_IN, HIDDEN, key=k1), eqx.nn.Linear(HIDDEN, D_OUT, key=k2))


def test_a_layer_inside_a_transformation_of_the_network_is_not_recorded(lib):
    model = _model(lib, _remat_net(lib), dist.Normal())
    X, _ = _data()

    def run(X):
        tr = handlers.trace(handlers.seed(model, 0)).get_trace(X)
        return {k: s["value"] for k, s in tr.items() if s["type"] != "mutable"}

    out = jax.jit(run)(X)  # an inner layer's inputs recorded would be a leaked tracer
    h = X @ out["net/inner/w"] + out["net/inner/b"]
    np.testing.assert_allclose(out["out"], h @ out["net/outer/w"] + out["net/outer/b"],
                               rtol=1e-5, atol=1e-5)
    assert {k for k in out if k.startswith("layer_inputs:")} == {"layer_inputs:net/outer"}
    np.testing.assert_allclose(out["layer_inputs:net/outer"], h, rtol=1e-5, atol=1e-5)


def test_a_missing_extra_says_how_to_install_it(monkeypatch):
    from numpyro_sgrld.bridges.equinox import random_eqx_module
    from numpyro_sgrld.bridges.nnx import random_nnx_module

    monkeypatch.setitem(sys.modules, "flax", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "equinox", None)
    with pytest.raises(ImportError, match=r'pip install "numpyro-sgrld\[flax\]"'):
        random_nnx_module("net", object(), dist.Normal())
    with pytest.raises(ImportError, match=r'pip install "numpyro-sgrld\[equinox\]"'):
        random_eqx_module("net", object(), dist.Normal())


def test_a_masked_nnx_convolution_applies_its_mask_and_is_not_recorded():
    """An ``nnx.Conv`` with a ``mask`` (a plain array attribute, kept in the state site) runs
    with the mask applied to the sampled kernel; BNP does not precondition it (its recorded
    patches would pair with the unmasked kernel)."""
    nnx = _nnx()
    from numpyro_sgrld.bridges.nnx import random_nnx_module

    mask = jnp.ones((2, 2, 3, 5)).at[0, 0].set(0.0)
    conv = nnx.Conv(3, 5, (2, 2), mask=mask, rngs=nnx.Rngs(0))
    x = random.normal(random.PRNGKey(0), (2, 4, 4, 3))

    def model(x):
        return numpyro.deterministic("out", random_nnx_module("c", conv, priors.gaussian())(x))

    tr = _trace(model, x)
    w, b = tr["c/w"]["value"], tr["c/b"]["value"]
    expected = jax.lax.conv_general_dilated(
        x, w * mask, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) + b
    np.testing.assert_allclose(tr["out"]["value"], expected, rtol=1e-5, atol=1e-5)
    assert not any(k.startswith("layer_inputs:") for k in tr)
