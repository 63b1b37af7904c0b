r"""Priors for convolution kernels, used as ``prior=`` of
:func:`~numpyro_sgrld.bridges.haiku.random_haiku_module`.

:func:`correlated_normal` is the correlated normal prior of Fortuin et al. (2022, "Bayesian
neural network priors revisited", ICLR), as bnn_priors implements it (``ConvCorrelatedNormal``)
and Yu et al. (2023) use it for their ResNet-20 on CIFAR-10 (Table 3). For a kernel of shape
:math:`(k_1, \dots, k_s, c_{in}, c_{out})` (Haiku's layout; :math:`s = 2` for ``hk.Conv2D``),
every filter's :math:`P = k_1\cdots k_s` spatial weights, for every pair of input and output
channels independently, are

.. math::
    w_{\cdot, c, o} \sim \mathcal N\big(0, \Sigma\big), \qquad
    \Sigma_{ij} = \sigma^2 \exp\!\big(-d(p_i, p_j)/\ell\big),

:math:`p_i` the position of weight :math:`i` on the kernel's grid and :math:`d` the Euclidean
distance: the exponential (Matérn-1/2) kernel of the distance itself, not of its square,
although bnn_priors names the class ``SquaredExponentialNormal``. Neighbouring weights (distance
1) have correlation :math:`e^{-1/\ell}`, diagonal neighbours :math:`e^{-\sqrt 2/\ell}`. The
exponential kernel is positive definite for Euclidean distances in any dimension, so
:math:`\Sigma` has a Cholesky factor for every kernel shape and lengthscale.

**The sampled variable is the weight tensor itself**, with the exact multivariate-normal
log-density (:class:`ConvCorrelatedNormal`, a distribution whose event is the whole kernel).
A non-centred form (standard normals :math:`z`, weights :math:`w = Lz` as a deterministic
site) would have the same prior but would change what a stochastic-gradient sampler moves:
its drift and noise would act on :math:`z`, i.e. it would be preconditioned by
:math:`\Sigma` for free. Yu et al. (with bnn_priors) sample the weights :math:`w` and add the
prior's log-density, and that is what this module does, so the identity, RMSprop and Shampoo
metrics act on the same coordinates as theirs.

Scale :math:`\sigma`:

- ``scale="he"`` (default): :math:`\sigma = 1.41/\sqrt{\text{fan\_in}}`,
  :math:`\text{fan\_in} = k_1\cdots k_s\,c_{in}`, as for
  :func:`numpyro_sgrld.bridges.priors.gaussian`
  (so that without correlation the prior is the Gaussian one).
- ``scale="in_channels"``: :math:`\sigma = 1.41/\sqrt{c_{in}}`, what bnn_priors' code
  actually uses: its ``Conv2dPrior`` computes ``in_dim = in_channels * kernel_size**2`` but
  passes ``scaling_fn(std_w, in_channels)`` (a ``TODO`` there says to use ``in_dim``), so a
  3×3 kernel's prior standard deviation is 3 times the He one in Yu et al.'s runs.
- a number: that :math:`\sigma` for every kernel.

Every other parameter (dense weights, biases: every tensor with fewer than ``min_ndim`` axes,
3 by default) gets :func:`numpyro_sgrld.bridges.priors.gaussian` with the same ``scale``
(``"he"`` for ``"in_channels"``). A 1×1 kernel has one position: the correlated normal is then
the Gaussian :math:`\mathcal N(0, \sigma^2)`.
"""

import math

import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax import random
from jax.scipy.linalg import solve_triangular
from numpyro.distributions import constraints

from numpyro_sgrld.bridges import priors

__all__ = ["ConvCorrelatedNormal", "correlated_normal", "kernel_covariance", "kernel_distances"]

LOG_2PI = math.log(2.0 * math.pi)


def kernel_distances(kernel_shape):
    """Euclidean distances between the positions of a kernel grid of ``kernel_shape`` (e.g.
    ``(3, 3)``), a ``P x P`` array, positions in row-major (``reshape``) order."""
    grid = np.indices(tuple(kernel_shape)).reshape(len(kernel_shape), -1).T.astype(np.float64)
    return np.sqrt(np.sum((grid[:, None, :] - grid[None, :, :]) ** 2, axis=-1))


def kernel_covariance(kernel_shape, scale, lengthscale=1.0):
    r""":math:`\Sigma_{ij} = \sigma^2 \exp(-d_{ij}/\ell)` over the positions of a kernel grid
    (float64, ``P x P``)."""
    if not lengthscale > 0:
        raise ValueError(f"`lengthscale` must be > 0, got {lengthscale!r}.")
    return scale**2 * np.exp(-kernel_distances(kernel_shape) / lengthscale)


class ConvCorrelatedNormal(dist.Distribution):
    r"""Zero-mean correlated normal over a whole convolution kernel of ``shape``
    :math:`(k_1, \dots, k_s, c_{in}, c_{out})`: every one of the :math:`c_{in} c_{out}` filters
    is, independently, :math:`\mathcal N(0, LL^\top)` over its :math:`P = k_1\cdots k_s`
    positions (row-major order).

    The event shape is ``shape`` (no batch), so the sample site has exactly the parameter's
    shape and a sampler moves the weights themselves.

    .. math::
        \log p(w) = -\tfrac12 \sum_{c,o} \|L^{-1} w_{\cdot,c,o}\|^2
                    - c_{in}c_{out}\Big(\sum_i \log L_{ii} + \tfrac P2 \log 2\pi\Big).

    :param scale_tril: :math:`L`, the ``P x P`` lower Cholesky factor of the positions'
        covariance.
    :param shape: the kernel's shape; ``prod(shape[:-2]) == P``.
    """

    arg_constraints = {"scale_tril": constraints.lower_cholesky}
    reparametrized_params = ["scale_tril"]
    pytree_data_fields = ("scale_tril", "_inverse_tril")
    pytree_aux_fields = ("_kernel_shape",)

    def __init__(self, scale_tril, shape, *, validate_args=None):
        shape = tuple(int(s) for s in shape)
        if len(shape) < 3:
            raise ValueError(f"`shape` must be a kernel (spatial axes, c_in, c_out), got {shape}.")
        positions = math.prod(shape[:-2])
        if jnp.shape(scale_tril) != (positions, positions):
            raise ValueError(
                f"`scale_tril` must be {positions} x {positions} for a kernel of shape {shape}, "
                f"got {jnp.shape(scale_tril)}."
            )
        self.scale_tril = jnp.asarray(scale_tril)
        eye = jnp.eye(positions, dtype=self.scale_tril.dtype)
        self._inverse_tril = solve_triangular(self.scale_tril, eye, lower=True)
        self._kernel_shape = shape
        super().__init__(batch_shape=(), event_shape=shape, validate_args=validate_args)

    @constraints.dependent_property(is_discrete=False, event_dim=None)
    def support(self):
        return constraints.independent(constraints.real, len(self._kernel_shape))

    def _filters(self, value):
        """``value`` (..., *kernel, c_in, c_out) as filters (..., c_in, c_out, P)."""
        lead = jnp.shape(value)[: jnp.ndim(value) - len(self._kernel_shape)]
        flat = jnp.reshape(value, lead + (-1,) + self._kernel_shape[-2:])
        return jnp.moveaxis(flat, -3, -1)

    def _kernels(self, filters):
        """Filters (..., c_in, c_out, P) back to kernels (..., *kernel, c_in, c_out)."""
        lead = jnp.shape(filters)[:-3]
        moved = jnp.moveaxis(filters, -1, -3)
        return jnp.reshape(moved, lead + self._kernel_shape)

    def sample(self, key, sample_shape=()):
        c_in, c_out = self._kernel_shape[-2:]
        positions = self.scale_tril.shape[0]
        z = random.normal(key, tuple(sample_shape) + (c_in, c_out, positions))
        return self._kernels(z @ self.scale_tril.T)

    def log_prob(self, value):
        z = self._filters(value) @ self._inverse_tril.T
        positions = self.scale_tril.shape[0]
        half_log_det = jnp.sum(jnp.log(jnp.diagonal(self.scale_tril)))
        filters = self._kernel_shape[-2] * self._kernel_shape[-1]
        return -0.5 * jnp.sum(z**2, axis=(-3, -2, -1)) - filters * (
            half_log_det + 0.5 * positions * LOG_2PI
        )

    @property
    def mean(self):
        return jnp.zeros(self._kernel_shape)

    @property
    def variance(self):
        diag = jnp.sum(self.scale_tril**2, axis=-1)
        return jnp.broadcast_to(
            jnp.reshape(diag, self._kernel_shape[:-2] + (1, 1)), self._kernel_shape
        )


def _conv_scale(scale, shape):
    """:math:`\\sigma` of a kernel of ``shape`` (see the module docstring)."""
    if scale == "he":
        return priors.he_scale(shape)
    if scale == "in_channels":
        return priors.HE_GAIN / math.sqrt(shape[-2])
    if isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale > 0:
        return float(scale)
    raise ValueError(f"`scale` must be 'he', 'in_channels' or a number > 0, got {scale!r}.")


def correlated_normal(lengthscale=1.0, scale="he", min_ndim=3):
    r"""The correlated normal prior of Fortuin et al. (2022) on convolution kernels, the
    Gaussian prior on every other parameter (see the module docstring).

    :param lengthscale: :math:`\ell > 0` (bnn_priors' default 1, which Yu et al. keep).
    :param scale: ``"he"`` (default), ``"in_channels"`` (bnn_priors' code) or a number.
    :param min_ndim: parameters with at least this many axes are kernels
        :math:`(k_1, \dots, k_s, c_{in}, c_{out})` (default 3: 1-D, 2-D and 3-D convolutions);
        fewer axes get the Gaussian prior.
    :return: a prior callable ``(path, shape) -> Distribution``.

    Example::

        >>> from numpyro_sgrld.bridges.conv_priors import correlated_normal
        >>> prior = correlated_normal()
        >>> prior("net/conv2_d/w", (3, 3, 1, 16)).event_shape
        (3, 3, 1, 16)
    """
    kernel_covariance((1,), 1.0, lengthscale)  # checks lengthscale
    _conv_scale(scale, (3, 3, 1, 1))  # checks scale
    if not (isinstance(min_ndim, int) and min_ndim >= 3):
        raise ValueError(f"`min_ndim` must be an integer >= 3, got {min_ndim!r}.")
    gaussian = priors.gaussian("he" if scale == "in_channels" else scale)

    def prior(path, shape):
        shape = tuple(shape)
        if len(shape) < min_ndim:
            return gaussian(path, shape)
        cov = kernel_covariance(shape[:-2], _conv_scale(scale, shape), lengthscale)
        scale_tril = jnp.asarray(np.linalg.cholesky(cov), jnp.result_type(float))
        return ConvCorrelatedNormal(scale_tril, shape)

    return prior
