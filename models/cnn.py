r"""Bayesian convolutional networks on Haiku, with a subsampled data plate: a small conv net and
a small residual net for 28×28 grey-scale images (MNIST).

Inputs arrive flat (``X`` is points × pixels, as :func:`~numpyro_sgrld.models.mnist.load_mnist`
returns them) and are reshaped to ``image_shape`` (height, width, channels) inside the network.
Every parameter is a NumPyro sample site ``"net/{module}/{w|b}"``
(:func:`~numpyro_sgrld.bridges.haiku.random_haiku_module`); the kernels are laid out
``(kh, kw, c_in, c_out)``. Use :func:`numpyro_sgrld.bridges.conv_priors.correlated_normal` as
``prior=`` for Fortuin et al.'s correlated normal prior on the kernels; the default is
:func:`numpyro_sgrld.bridges.priors.gaussian`.

**No batch normalisation.** Yu et al.'s ResNet-20 (from bnn_priors, after Wenzel et al. 2020)
normalises batches; its running means and variances are state updated by the forward pass, not
parameters with a prior, and in training mode the output for one image depends on the other
images of the minibatch, so the minibatch log-likelihood is no longer a sum of independent
terms scaled by :math:`N/n`. These networks are parameters only, so every sampler sees the
posterior of a plain likelihood.
"""

import math
from functools import partial

import haiku as hk
import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro import handlers

from numpyro_sgrld import priors
from numpyro_sgrld.bridges.haiku import random_haiku_module
from numpyro_sgrld.sampler.potentials import AUX_SITE

__all__ = ["cnn_classifier", "resnet_classifier"]

MNIST_SHAPE = (28, 28, 1)
CHUNK_SIZE = 1000
POOLS = ("max", "avg")


def _pool(x, kind):
    """2×2 pooling with stride 2 (``"max"`` or ``"avg"``) over the spatial axes of NHWC ``x``,
    VALID padding (an odd last row or column is dropped), as ``hk.max_pool`` / ``hk.avg_pool``
    with windows ``(1, 2, 2, 1)``. Written as a reshape and a reduction: XLA:CPU's gradient of
    ``reduce_window`` max (``select_and_scatter``) made a minibatch gradient of the default
    network 3 to 4 times slower."""
    n, height, width, c = x.shape
    x = x[:, : height - height % 2, : width - width % 2]
    windows = jnp.reshape(x, (n, height // 2, 2, width // 2, 2, c))
    return jnp.max(windows, axis=(2, 4)) if kind == "max" else jnp.mean(windows, axis=(2, 4))


def _same_padding(size, kernel, stride):
    """(low, high) zero padding of one spatial axis for SAME output ``ceil(size / stride)``, as
    XLA pads (the odd pixel at the high end)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class ShiftedConv2D(hk.Conv2D):
    r"""``hk.Conv2D`` (batched channels-last inputs, SAME or VALID padding, any stride, no
    dilation, groups or mask), computed as one matrix product of shifted, strided slices of the
    padded input with the kernel reshaped to :math:`(k_h k_w c_{in}) \times c_{out}`.

    The same parameters ``"w"`` :math:`(k_h, k_w, c_{in}, c_{out})` and ``"b"``, the same
    outputs as ``hk.Conv2D`` (to rounding), and an ``hk.ConvND`` for the bridges' layer-input
    recording. The reason is speed on CPU: inside a loop (``MCMC`` runs its steps in a
    ``lax.fori_loop``) XLA:CPU runs the convolutions of the gradient about 20 times slower
    than outside one (jax-ml/jax#12868); on a loaded 2-core machine a minibatch-100 gradient
    step of the default network took 233 ms inside ``lax.scan`` with
    ``lax.conv_general_dilated`` and 26 ms with slices (18 ms outside a loop). Slices and a
    matrix product have gradients made of pads, slices and matrix products, which loops do not
    slow down.
    """

    def __init__(self, output_channels, kernel_shape, stride=1, padding="SAME", name=None):
        if padding not in ("SAME", "VALID"):
            raise ValueError(f"`padding` must be 'SAME' or 'VALID', got {padding!r}.")
        super().__init__(output_channels, kernel_shape, stride=stride, padding=padding, name=name)

    def __call__(self, inputs):
        c_in = inputs.shape[-1]
        kh, kw = self.kernel_shape
        init = hk.initializers.TruncatedNormal(1.0 / math.sqrt(kh * kw * c_in))
        w = hk.get_parameter("w", (kh, kw, c_in, self.output_channels), inputs.dtype, init=init)
        out = _shifted_conv(inputs, w, self.stride, self.padding)
        if self.with_bias:
            out = out + hk.get_parameter("b", (self.output_channels,), inputs.dtype, jnp.zeros)
        return out


@partial(jax.jit, static_argnums=(2, 3))
def _shifted_conv(x, w, stride, padding):
    """The convolution of :class:`ShiftedConv2D` (one compiled program when run eagerly, as
    while a model is traced with concrete values, instead of one per slice)."""
    (kh, kw), (sh, sw) = w.shape[:2], stride
    height, width = x.shape[1:3]
    if padding == "SAME":
        pads = (_same_padding(height, kh, sh), _same_padding(width, kw, sw))
    else:
        pads = ((0, 0), (0, 0))
    x = jnp.pad(x, ((0, 0), *pads, (0, 0)))
    out_h = (x.shape[1] - kh) // sh + 1
    out_w = (x.shape[2] - kw) // sw + 1
    patches = jnp.concatenate(
        [
            x[:, i : i + sh * (out_h - 1) + 1 : sh, j : j + sw * (out_w - 1) + 1 : sw]
            for i in range(kh)
            for j in range(kw)
        ],
        axis=-1,
    )  # features in the order of w.reshape(-1, c_out): offsets, then input channels
    return patches @ jnp.reshape(w, (-1, w.shape[-1]))


CONVS = {"slices": ShiftedConv2D, "xla": hk.Conv2D}


def _conv(channels, name, kernel=3, stride=1, impl="slices"):
    return CONVS[impl](channels, kernel, stride=stride, padding="SAME", name=name)


def _images(x, image_shape):
    return jnp.reshape(x, (-1, *image_shape))


def _check(X, image_shape, conv, chunk_size, pool=None):
    if conv not in CONVS:
        raise ValueError(f"`conv` must be one of {tuple(CONVS)}, got {conv!r}.")
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size >= 1):
        raise ValueError(f"`chunk_size` must be an integer >= 1 or None, got {chunk_size!r}.")
    if X.shape[1] != math.prod(image_shape):
        raise ValueError(
            f"`X` has {X.shape[1]} features per point but `image_shape` {tuple(image_shape)} has "
            f"{math.prod(image_shape)} pixels."
        )
    if pool is not None and pool not in POOLS:
        raise ValueError(f"`pool` must be one of {POOLS}, got {pool!r}.")


def _convnet(channels, hidden, num_classes, pool, image_shape, conv):
    """conv 3×3 (SAME) → ReLU → 2×2 pool, per entry of ``channels``; flatten; ReLU dense layers
    of ``hidden`` units; a dense output layer."""

    def forward(x):
        h = _images(x, image_shape)
        for i, c in enumerate(channels):
            h = _pool(jax.nn.relu(_conv(c, f"conv_{i}", impl=conv)(h)), pool)
        h = jnp.reshape(h, (h.shape[0], -1))
        for i, units in enumerate(hidden):
            h = jax.nn.relu(hk.Linear(units, name=f"dense_{i}")(h))
        return hk.Linear(num_classes, name="out")(h)

    return hk.transform(forward)


class ResidualBlock(hk.Module):
    r"""Post-activation basic block without batch norm (He et al. 2016; the block of
    bnn_priors' ``google_resnet``): :math:`\mathrm{relu}(c_2(\mathrm{relu}(c_1(x))) + s(x))`,
    :math:`c_1` a 3×3 convolution with ``stride``, :math:`c_2` a 3×3 one, :math:`s` the
    identity when the shape is kept and a 1×1 convolution with ``stride`` otherwise."""

    def __init__(self, channels, stride=1, conv="slices", name=None):
        super().__init__(name=name)
        self.channels = channels
        self.stride = stride
        self.conv = conv

    def __call__(self, x):
        y = jax.nn.relu(_conv(self.channels, "conv_0", stride=self.stride, impl=self.conv)(x))
        y = _conv(self.channels, "conv_1", impl=self.conv)(y)
        if self.stride == 1 and x.shape[-1] == self.channels:
            shortcut = x
        else:
            shortcut = _conv(self.channels, "shortcut", 1, self.stride, self.conv)(x)
        return jax.nn.relu(y + shortcut)


def _resnet(channels, num_classes, image_shape, conv):
    """stem conv 3×3 → ReLU → 2×2 max pool; a residual block per entry of ``channels`` (the
    first keeps the stem's width and resolution with an identity shortcut, each later one
    halves the resolution with a 1×1 shortcut); global average pooling; a dense output layer."""

    def forward(x):
        h = _images(x, image_shape)
        h = _pool(jax.nn.relu(_conv(channels[0], "stem", impl=conv)(h)), "max")
        for i, c in enumerate(channels):
            h = ResidualBlock(c, stride=1 if i == 0 else 2, conv=conv, name=f"block_{i}")(h)
        h = jnp.mean(h, axis=(1, 2))
        return hk.Linear(num_classes, name="out")(h)

    return hk.transform(forward)


def _logits(apply, x, chunk_size):
    """``apply(x)``, over chunks of ``chunk_size`` images (``lax.map``) when ``x`` has more.

    Full-data passes (the kernels' check of the data at the initial position, prediction on a
    test set) then hold the activations of one chunk at a time, not of every image: on the
    50,000 MNIST training images the first layer alone would be 2.5 GB. Layer inputs are not
    recorded for chunked batches (the auxiliary sites are hidden): a metric that reads them
    (BNP) needs minibatches of at most ``chunk_size``."""
    n = x.shape[0]
    if chunk_size is None or n <= chunk_size:
        return apply(x)
    pad = -n % chunk_size
    chunks = jnp.reshape(jnp.pad(x, ((0, pad), (0, 0))), (-1, chunk_size, x.shape[1]))
    with handlers.block(hide_fn=lambda msg: msg["type"] == AUX_SITE):
        out = jax.lax.map(apply, chunks)
    return jnp.reshape(out, (-1, out.shape[-1]))[:n]


def _classify(apply, X, y, subsample_size, chunk_size):
    """The data plate of :func:`numpyro_sgrld.models.bnn.mlp_classifier`."""
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        logits = _logits(apply, X[idx], chunk_size)
        if y is None:
            numpyro.deterministic("logits", logits)
        numpyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx])


def cnn_classifier(
    X,
    y=None,
    *,
    channels=(16, 32),
    hidden=(),
    pool="max",
    num_classes=10,
    image_shape=MNIST_SHAPE,
    conv="slices",
    prior=None,
    subsample_size=None,
    chunk_size=CHUNK_SIZE,
):
    """Small conv net classifier, ``y ~ Categorical(logits=net(x))``: per entry of ``channels``
    a 3×3 convolution (SAME padding), ReLU and 2×2 ``pool`` (``"max"`` or ``"avg"``); then
    ReLU dense layers of ``hidden`` units and a dense output layer. The logits are recorded as
    the deterministic site ``"logits"`` when ``y`` is None (prediction), not while sampling.

    Sites: ``"net/conv_{i}/w"`` (3, 3, c_in, c_out), ``"net/conv_{i}/b"``,
    ``"net/dense_{i}/{w,b}"``, ``"net/out/w"`` (flattened features, classes), ``"net/out/b"``.
    On MNIST the default has 16 and 32 channels and 1568 × 10 output weights (20,490
    parameters in all). ``channels=(32, 64), hidden=(256,), pool="avg"`` is the Flax CNN of
    SGMCMCJax's MNIST example. ``conv``: ``"slices"`` (default, :class:`ShiftedConv2D`, fast
    inside sampling loops on CPU) or ``"xla"`` (``hk.Conv2D``); the same sites and function.
    Batches of more than ``chunk_size`` images (full-data passes) are evaluated a chunk at a
    time (``None``: all at once).
    """
    _check(X, image_shape, conv, chunk_size, pool)
    net = _convnet(tuple(channels), tuple(hidden), num_classes, pool, tuple(image_shape), conv)
    apply = random_haiku_module("net", net, (1, X.shape[1]), prior or priors.gaussian())
    _classify(apply, X, y, subsample_size, chunk_size)


def resnet_classifier(
    X,
    y=None,
    *,
    channels=(16, 32),
    num_classes=10,
    image_shape=MNIST_SHAPE,
    conv="slices",
    prior=None,
    subsample_size=None,
    chunk_size=CHUNK_SIZE,
):
    """Small residual net classifier, ``y ~ Categorical(logits=net(x))``: a 3×3 stem
    convolution with ``channels[0]`` outputs, ReLU and 2×2 max pooling; one
    :class:`ResidualBlock` per entry of ``channels`` (the first with an identity shortcut,
    each later one with stride 2 and a 1×1 shortcut); global average pooling; a dense output
    layer. No batch norm (module docstring). ``conv`` and ``chunk_size`` as in
    :func:`cnn_classifier`. The logits are the deterministic site ``"logits"`` when ``y`` is
    None.

    Sites: ``"net/stem/{w,b}"``, ``"net/block_{i}/conv_{0,1}/{w,b}"``,
    ``"net/block_{i}/shortcut/{w,b}"`` (1×1 kernels, blocks after the first),
    ``"net/out/{w,b}"``. On MNIST the default has 19,562 parameters.
    """
    _check(X, image_shape, conv, chunk_size)
    net = _resnet(tuple(channels), num_classes, tuple(image_shape), conv)
    apply = random_haiku_module("net", net, (1, X.shape[1]), prior or priors.gaussian())
    _classify(apply, X, y, subsample_size, chunk_size)
