"""Convolutional Bayesian networks: the correlated normal prior on conv kernels, the conv net
and residual net models, and the samplers on them (tiny networks on tiny random images)."""

import functools
import itertools
import math
from functools import partial

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro import handlers
from numpyro.infer import MCMC
from numpyro_sgrld.models.cnn import ShiftedConv2D, cnn_classifier, resnet_classifier
from scipy import stats

from numpyro_sgrld import PSGLD, SGLD, ShampooSGLD, priors
from numpyro_sgrld.bridges.conv_priors import ConvCorrelatedNormal, correlated_normal
from numpyro_sgrld.core.metrics import shampoo
from numpyro_sgrld.core.metrics.shampoo import shampoo_block_shapes

IMAGE = (6, 6, 1)
N, BATCH = 24, 8


def _reference_covariance(kernel_shape, sigma, lengthscale):
    """sigma^2 exp(-|p_i - p_j| / l) over the row-major positions, written independently of
    the module: itertools positions and math.dist."""
    positions = list(itertools.product(*(range(k) for k in kernel_shape)))
    return np.array(
        [
            [sigma**2 * math.exp(-math.dist(p, q) / lengthscale) for q in positions]
            for p in positions
        ]
    )


def _trace(model, *args, **kwargs):
    return handlers.trace(handlers.seed(model, 0)).get_trace(*args, **kwargs)


def _data(seed=0, n=N):
    k1, k2 = random.split(random.PRNGKey(seed))
    X = random.uniform(k1, (n, math.prod(IMAGE)))
    y = random.randint(k2, (n,), 0, 10)
    return X, y


@pytest.mark.parametrize(
    "shape, lengthscale, scale, sigma",
    [
        ((2, 3, 2, 3), 1.0, "he", 1.41 / math.sqrt(2 * 3 * 2)),
        ((3, 3, 4, 2), 2.0, "in_channels", 1.41 / 2.0),
        ((3, 2, 1, 2), 0.5, 0.3, 0.3),
    ],
)
def test_log_density_is_scipys_multivariate_normal_summed_over_filters(
    shape, lengthscale, scale, sigma
):
    prior = correlated_normal(lengthscale=lengthscale, scale=scale)("net/conv/w", shape)
    assert isinstance(prior, ConvCorrelatedNormal)
    assert prior.event_shape == shape and prior.batch_shape == ()
    value = np.random.default_rng(0).normal(size=(4, *shape)) * sigma
    cov = _reference_covariance(shape[:2], sigma, lengthscale)
    mvn = stats.multivariate_normal(np.zeros(len(cov)), cov)
    expected = [
        sum(mvn.logpdf(v[:, :, c, o].reshape(-1)) for c in range(shape[2]) for o in range(shape[3]))
        for v in value
    ]
    got = prior.log_prob(jnp.asarray(value, jnp.float32))
    assert got.shape == (4,)
    np.testing.assert_allclose(got, expected, rtol=2e-5)


def test_draws_have_the_exponential_kernel_covariance():
    """Empirical covariances of prior draws against sigma^2 exp(-d / l), as z-scores.

    For zero-mean jointly Gaussian (x, y) with variance s^2 and correlation r, the mean of the
    n products x*y estimates the covariance s^2 r with standard error s^2 sqrt((1 + r^2) / n)
    (Isserlis: E[x^2 y^2] = s^4 (1 + 2 r^2)); |z| < 4.5 fails a correct prior with probability
    about 7e-6 per pair. Distances 1, sqrt 2 and 2 tell exp(-d) from exp(-d^2) (equal at
    d = 1 only): at sqrt 2 the correlations are 0.243 and 0.135, 17 standard errors apart."""
    shape, lengthscale = (3, 3, 8, 8), 1.0
    sigma = 1.41 / math.sqrt(3 * 3 * 8)
    draws = correlated_normal(lengthscale)("w", shape).sample(random.PRNGKey(1), (500,))
    filters = np.asarray(draws, np.float64).transpose(0, 3, 4, 1, 2).reshape(-1, 3, 3)
    n = filters.shape[0]
    pairs = [
        ((1, 1), (1, 1)),
        ((0, 0), (0, 1)),
        ((1, 1), (2, 1)),
        ((0, 0), (1, 1)),
        ((0, 0), (0, 2)),
    ]
    for p, q in pairs:
        rho = math.exp(-math.dist(p, q) / lengthscale)
        estimate = np.mean(filters[:, p[0], p[1]] * filters[:, q[0], q[1]])
        se = sigma**2 * math.sqrt((1 + rho**2) / n)
        z = (estimate - sigma**2 * rho) / se
        assert abs(z) < 4.5, (p, q, estimate / sigma**2, rho, z)
    # and the squared-distance kernel is rejected at sqrt(2)
    wrong = math.exp(-2 / lengthscale**2)
    estimate = np.mean(filters[:, 0, 0] * filters[:, 1, 1])
    assert abs(estimate - sigma**2 * wrong) / (sigma**2 * math.sqrt((1 + wrong**2) / n)) > 4.5


def test_other_parameters_get_the_gaussian_prior_and_arguments_are_checked():
    prior = correlated_normal()
    for shape in [(5, 3), (7,)]:
        got, expected = prior("p", shape), priors.gaussian()("p", shape)
        assert got.event_shape == shape
        x = jnp.linspace(-1, 1, math.prod(shape)).reshape(shape)
        np.testing.assert_allclose(got.log_prob(x), expected.log_prob(x), rtol=1e-6)
    # a 1x1 kernel is the Gaussian N(0, sigma^2)
    x = jnp.linspace(-1, 1, 12).reshape(1, 1, 3, 4)
    np.testing.assert_allclose(
        prior("p", (1, 1, 3, 4)).log_prob(x),
        dist.Normal(0, 1.41 / math.sqrt(3)).log_prob(x).sum(),
        rtol=1e-6,
    )
    with pytest.raises(ValueError, match="lengthscale"):
        correlated_normal(lengthscale=0.0)
    with pytest.raises(ValueError, match="scale"):
        correlated_normal(scale="fan_out")
    with pytest.raises(ValueError, match="scale_tril"):
        ConvCorrelatedNormal(jnp.eye(4), (3, 3, 1, 1))


def _sites(model, *args, **kwargs):
    """``{site: (shape, distribution type or None)}`` of a seeded trace, abstractly
    (``jax.eval_shape``: nothing is compiled)."""
    kinds = {}

    def values():
        tr = _trace(model, *args, **kwargs)
        kinds.update({k: type(v["fn"]) for k, v in tr.items() if v["type"] == "sample"})
        return {k: v["value"] for k, v in tr.items() if v["type"] in ("sample", "deterministic")}

    shapes = jax.eval_shape(values)
    return {k: (v.shape, kinds.get(k)) for k, v in shapes.items()}


def test_models_have_the_expected_sites():
    X, y = _data()
    kw = dict(channels=(16, 32), image_shape=IMAGE, prior=correlated_normal(), subsample_size=BATCH)
    sites = _sites(cnn_classifier, X, y, **kw)
    assert sites.pop("y")[0] == (BATCH,) and "logits" not in sites
    assert {k: v[0] for k, v in sites.items()} == {
        "net/conv_0/w": (3, 3, 1, 16),
        "net/conv_0/b": (16,),
        "net/conv_1/w": (3, 3, 16, 32),
        "net/conv_1/b": (32,),
        "net/out/w": (1 * 1 * 32, 10),  # 6 -> 3 -> 1 pixel (VALID pooling), 32 channels
        "net/out/b": (10,),
    }
    assert sites["net/conv_1/w"][1] is ConvCorrelatedNormal
    assert sites["net/out/w"][1] is not ConvCorrelatedNormal

    sites = _sites(resnet_classifier, X, None, **kw)
    assert sites.pop("y")[0] == (BATCH,) and sites.pop("logits")[0] == (BATCH, 10)
    assert {k: v[0] for k, v in sites.items()} == {
        "net/stem/w": (3, 3, 1, 16),
        "net/stem/b": (16,),
        "net/block_0/conv_0/w": (3, 3, 16, 16),
        "net/block_0/conv_0/b": (16,),
        "net/block_0/conv_1/w": (3, 3, 16, 16),
        "net/block_0/conv_1/b": (16,),
        "net/block_1/conv_0/w": (3, 3, 16, 32),
        "net/block_1/conv_0/b": (32,),
        "net/block_1/conv_1/w": (3, 3, 32, 32),
        "net/block_1/conv_1/b": (32,),
        "net/block_1/shortcut/w": (1, 1, 16, 32),
        "net/block_1/shortcut/b": (32,),
        "net/out/w": (32, 10),
        "net/out/b": (10,),
    }
    with pytest.raises(ValueError, match="pixels"):
        cnn_classifier(X[:, :10], y, image_shape=IMAGE)
    with pytest.raises(ValueError, match="pool"):
        cnn_classifier(X, y, image_shape=IMAGE, pool="min")
    with pytest.raises(ValueError, match="conv"):
        resnet_classifier(X, y, image_shape=IMAGE, conv="fft")
    with pytest.raises(ValueError, match="chunk_size"):
        cnn_classifier(X, y, image_shape=IMAGE, chunk_size=0)


@pytest.mark.parametrize(
    "kernel, stride, padding", [(3, 1, "SAME"), (3, 2, "SAME"), (1, 2, "SAME"), (3, 2, "VALID")]
)
def test_shifted_convolution_is_haikus(kernel, stride, padding):
    x = random.normal(random.PRNGKey(0), (2, 7, 6, 3))
    ref = hk.transform(lambda x: hk.Conv2D(4, kernel, stride, padding=padding, name="c")(x))
    ours = hk.transform(lambda x: ShiftedConv2D(4, kernel, stride, padding=padding, name="c")(x))
    params = ref.init(random.PRNGKey(1), x)
    assert jax.tree.map(jnp.shape, ours.init(random.PRNGKey(1), x)) == jax.tree.map(
        jnp.shape, params
    )
    params = jax.tree.map(lambda p: random.normal(random.PRNGKey(2), p.shape), params)
    np.testing.assert_allclose(ours.apply(params, None, x), ref.apply(params, None, x), atol=1e-5)


def test_logits_agree_across_convolutions_and_chunks():
    """(The residual net's strided and 1x1 convolutions: test_shifted_convolution_is_haikus.)"""
    model = cnn_classifier
    X, _ = _data(n=10)
    kw = dict(channels=(2, 3), image_shape=IMAGE)

    @partial(jax.jit, static_argnames=("conv", "chunk_size"))
    def logits(conv, chunk_size):
        seeded = handlers.seed(model, 1)  # the same parameters every time
        tr = handlers.trace(seeded).get_trace(X, None, conv=conv, chunk_size=chunk_size, **kw)
        return tr["logits"]["value"]

    ref = logits("xla", None)
    np.testing.assert_allclose(logits("slices", None), ref, atol=1e-5)
    np.testing.assert_allclose(logits("slices", 4), ref, atol=1e-5)  # chunks of 4, 4 and 2


KERNELS = {
    "SGLD": lambda m: SGLD(m, 1e-4, init_strategy=priors.init_to_unit_scales),
    "PSGLD": lambda m: PSGLD(m, 1e-6, init_strategy=priors.init_to_unit_scales),
    "ShampooSGLD": lambda m: ShampooSGLD(
        m, 1e-5, update_interval=2, init_strategy=priors.init_to_unit_scales
    ),
}
MODELS = {"cnn": cnn_classifier, "resnet": resnet_classifier}


@functools.cache
def _run(model, kernel):
    """Four minibatch steps of ``kernel`` on the MNIST-width network (16 and 32 channels) on
    6x6 images, from a prior draw; cached, so that the Shampoo test reads the state of the
    same run."""
    X, y = _data()
    model = partial(
        MODELS[model],
        channels=(16, 32),
        image_shape=IMAGE,
        prior=correlated_normal(),
        subsample_size=BATCH,
    )
    start = jax.jit(
        lambda: {
            k: v["value"]
            for k, v in _trace(model, X, y).items()
            if v["type"] == "sample" and k != "y"
        }
    )()
    mcmc = MCMC(KERNELS[kernel](model), num_warmup=0, num_samples=4, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y, init_params=start)
    return mcmc


@pytest.mark.parametrize(
    "model, kernel",
    [
        pytest.param("cnn", "PSGLD", marks=pytest.mark.slow),
        pytest.param("cnn", "ShampooSGLD", marks=pytest.mark.slow),
        pytest.param("resnet", "SGLD", marks=pytest.mark.slow),
    ],
)
def test_samplers_take_finite_steps_on_conv_nets(model, kernel):
    mcmc = _run(model, kernel)
    samples = mcmc.get_samples()
    assert int(mcmc.last_state.num_rejected) == 0
    for name, value in samples.items():
        assert np.all(np.isfinite(value)), name
    w = samples["net/out/w"]
    assert w.shape[0] == 4 and np.any(w[-1] != w[0])  # the chain moved
    for name, value in mcmc.last_state.z.items():
        assert np.all(np.isfinite(value)), name


@pytest.mark.slow
def test_shampoo_factors_of_conv_kernels():
    """How Shampoo blocks the MNIST conv net's tensors (docs/conv_nets.md): size-1 axes
    dropped, axes merged while the product stays <= 128, larger axes split evenly."""
    assert shampoo_block_shapes((3, 3, 1, 16)) == ((9, 16), (9, 16), (1, 1))
    assert shampoo_block_shapes((3, 3, 16, 32)) == ((9, 16, 32), (9, 16, 32), (1, 1, 1))
    assert shampoo_block_shapes((1568, 10)) == ((1568, 10), (121, 10), (13, 1))
    assert shampoo_block_shapes((1, 1, 16, 32)) == ((16, 32), (16, 32), (1, 1))
    state = shampoo().init({"out": jnp.zeros((1568, 10))})
    assert [s.shape for s in state.stats["out"]] == [(13, 121, 121), (13, 10, 10)]

    # the state of ShampooSGLD on the conv net has those factors (6x6 images: 1 pixel x 32
    # channels before the output layer)
    metric = _run("cnn", "ShampooSGLD").last_state.sampler_state.metric
    factors = {k: [r.shape for r in v] for k, v in metric.roots.items()}
    assert {
        k: factors[k] for k in ("net/conv_0/w", "net/conv_1/w", "net/conv_1/b", "net/out/w")
    } == {
        "net/conv_0/w": [(1, 9, 9), (1, 16, 16)],
        "net/conv_1/w": [(1, 9, 9), (1, 16, 16), (1, 32, 32)],
        "net/conv_1/b": [(1, 32, 32)],
        "net/out/w": [(1, 32, 32), (1, 10, 10)],
    }
    # update_interval=2: the roots come from the statistics of step 2, not the identity
    assert not np.allclose(metric.roots["net/conv_1/w"][0][0], np.eye(9))

    # the residual net's kernels, 1x1 shortcut included (the metric's initial state)
    X, y = _data()
    sites = _sites(resnet_classifier, X, y, channels=(16, 32), image_shape=IMAGE)
    position = {k: jax.ShapeDtypeStruct(shape, jnp.float32) for k, (shape, _) in sites.items()}
    del position["y"]
    stats = jax.eval_shape(shampoo().init, position).stats
    assert {k: [s.shape for s in stats[k]] for k in position if k.endswith("/w")} == {
        "net/stem/w": [(1, 9, 9), (1, 16, 16)],
        "net/block_0/conv_0/w": [(1, 9, 9), (1, 16, 16), (1, 16, 16)],
        "net/block_0/conv_1/w": [(1, 9, 9), (1, 16, 16), (1, 16, 16)],
        "net/block_1/conv_0/w": [(1, 9, 9), (1, 16, 16), (1, 32, 32)],
        "net/block_1/conv_1/w": [(1, 9, 9), (1, 32, 32), (1, 32, 32)],
        "net/block_1/shortcut/w": [(1, 16, 16), (1, 32, 32)],
        "net/out/w": [(1, 32, 32), (1, 10, 10)],
    }
