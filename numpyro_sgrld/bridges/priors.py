r"""Priors for neural-network parameters, used as ``prior=`` of
:func:`~numpyro_sgrld.bridges.haiku.random_haiku_module`.

Each prior is a callable ``(path, shape)`` called inside the model; it returns a distribution for
the parameter (or, for non-centred forms, the parameter's value, sampling auxiliary sites
itself). Weights are parameters with two or more axes (fan-in = product of all but the last
axis); biases have one.

- :func:`gaussian`: :math:`w \sim \mathcal N(0, m^2)`, ``m = 1.41/sqrt(fan_in)`` for weights
  (He) and 1 for biases, as in Yu et al. (2023) — or a fixed scale.
- :func:`horseshoe`, ``form="layer"``: one half-Cauchy scale per weight matrix and per bias
  vector (Yu et al. 2023; bnn_priors), :math:`w \sim \mathcal N(0, (m\,s)^2)`,
  :math:`s \sim \mathrm{HalfCauchy}(1)`. Yu et al. parametrise :math:`m\,\mathrm{softplus}(\rho)`
  with a half-Cauchy on the product and no Jacobian; here the half-Cauchy is on :math:`s` and
  NumPyro's log transform supplies the Jacobian, so the scale's prior is exactly HalfCauchy(1).
  The scale declares its exact conditional given the weights, which involves no data
  (:func:`half_cauchy_scale_draw`): :class:`~numpyro_sgrld.SGGibbs` without a ``gibbs_fn``
  draws it from there each step.
- :func:`horseshoe`, ``form="layer", parametrisation="softplus"``: Yu et al.'s own
  (bnn_priors' ``Horseshoe``), to reproduce their numbers: an unconstrained site
  ``"{path}_rho"`` (flat), :math:`s = m\,\mathrm{softplus}(\rho)`, the factor
  :math:`\log\mathrm{HalfCauchy}(s; 1)` on the *product* and no Jacobian, biases included
  (bias scale 1). Without the Jacobian the density in :math:`\rho` does not vanish as
  :math:`\rho\to-\infty` with the weights shrinking to zero, so the joint is not a proper
  posterior; the samplers' short runs do not go there, but use the default for inference.
- :func:`horseshoe`, ``form="unit"``: per-unit local scales and a layer-wide global scale,
  non-centred (Ghosh, Yao & Doshi-Velez 2019): :math:`z \sim \mathcal N(0, 1)`,
  :math:`\lambda_j \sim \mathrm{HalfCauchy}(1)` per output unit,
  :math:`\tau \sim \mathrm{HalfCauchy}(\text{global\_scale})` per layer,
  :math:`w_{\cdot j} = m\,\tau\,\lambda_j\,z_{\cdot j}`; biases keep the Gaussian prior.
"""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax import random
from numpyro.distributions import constraints
from numpyro.infer import init_to_sample

from numpyro_sgrld.bridges.haiku import fan_in
from numpyro_sgrld.sampler.gibbs import CONDITIONAL, Conditional

__all__ = ["HORSESHOE_SUFFIXES", "gaussian", "half_cauchy_scale_draw", "horseshoe", "he_scale",
           "init_to_unit_scales"]

HORSESHOE_SUFFIXES = ("_scale", "_global", "_local")
SOFTPLUS_SUFFIX = "_rho"
# softplus^{-1}(1) = log(e - 1): the start of Yu et al.'s scale parameter (s = m)
UNIT_RHO = math.log(math.e - 1.0)

HE_GAIN = 1.41


def he_scale(shape):
    """Gaussian scale of Yu et al.: ``1.41 / sqrt(fan_in)`` for weights, 1 for biases."""
    return HE_GAIN / math.sqrt(fan_in(shape)) if len(shape) >= 2 else 1.0


def _scale(scale, shape):
    if scale == "he":
        return he_scale(shape)
    if isinstance(scale, (int, float)) and scale > 0:
        return float(scale)
    raise ValueError(f"`scale` must be 'he' or a number > 0, got {scale!r}.")


def gaussian(scale="he"):
    """Independent Gaussian prior (see the module docstring)."""
    _scale(scale, (1, 1))

    def prior(path, shape):
        return dist.Normal(0.0, _scale(scale, shape)).expand(shape).to_event(len(shape))

    return prior


def half_cauchy_scale_draw(key, s, sites, *, weights, base):
    r"""An exact draw of a half-Cauchy scale :math:`s \sim \mathrm{HalfCauchy}(1)` from its
    conditional given the :math:`k` weights :math:`w \sim \mathcal N(0, (b\,s)^2)` of the site
    ``weights`` (``sites[weights]``), through the inverse-gamma auxiliary of Makalic & Schmidt
    (2016), drawn afresh from its own conditional:

    .. math::
        \nu \mid s \sim \mathrm{IG}\big(1,\ 1 + s^{-2}\big), \qquad
        s^2 \mid w, \nu \sim \mathrm{IG}\Big(\tfrac{k+1}{2},\
            \tfrac1\nu + \tfrac{\sum w^2}{2b^2}\Big),

    two exact Gibbs draws of :math:`(\nu, s)`, so the pair leaves
    :math:`p(s \mid w) \propto (1 + s^2)^{-1} s^{-k} e^{-\sum w^2/(2b^2s^2)}` invariant. No data
    enter."""
    w = sites[weights]
    key_nu, key_s = random.split(key)
    nu = (1.0 + 1.0 / s**2) / random.gamma(key_nu, 1.0, jnp.shape(s), jnp.result_type(s))
    rate = 1.0 / nu + jnp.sum(w**2) / (2.0 * base**2)
    shape = (jnp.size(w) + 1) / 2.0
    return jnp.sqrt(rate / random.gamma(key_s, shape, jnp.shape(s), jnp.result_type(s)))


def horseshoe(form="layer", scale="he", global_scale=1.0, parametrisation="log"):
    """Horseshoe prior, ``form="layer"`` or ``"unit"`` (see the module docstring).

    Auxiliary sites: ``"{path}_scale"`` (layer form); ``"{path}_global"``, ``"{path}_local"``
    and ``"{path}_raw"`` (unit form, weights only). ``parametrisation="softplus"`` (layer form
    only) is Yu et al.'s: a flat site ``"{path}_rho"``, the scale as the deterministic site
    ``"{path}_scale"``, no Jacobian (module docstring).
    """
    if form not in ("layer", "unit"):
        raise ValueError(f"Unknown horseshoe form {form!r}; use 'layer' or 'unit'.")
    if parametrisation not in ("log", "softplus"):
        raise ValueError(
            f"`parametrisation` must be 'log' (NumPyro's transform, with its Jacobian) or "
            f"'softplus' (Yu et al.'s, no Jacobian), got {parametrisation!r}."
        )
    if parametrisation == "softplus" and form != "layer":
        raise ValueError(
            "parametrisation='softplus' is Yu et al.'s layer-wise horseshoe: use form='layer'."
        )
    _scale(scale, (1, 1))
    if not (isinstance(global_scale, (int, float)) and global_scale > 0):
        raise ValueError(f"`global_scale` must be > 0, got {global_scale!r}.")

    def layer(path, shape):
        base = _scale(scale, shape)
        draw = Conditional(partial(half_cauchy_scale_draw, weights=path, base=base))
        s = numpyro.sample(f"{path}_scale", dist.HalfCauchy(1.0), infer={CONDITIONAL: draw})
        return dist.Normal(0.0, base * s).expand(shape).to_event(len(shape))

    def softplus_layer(path, shape):
        flat = dist.ImproperUniform(constraints.real, (), ())
        rho = numpyro.sample(f"{path}{SOFTPLUS_SUFFIX}", flat)
        s = _scale(scale, shape) * jax.nn.softplus(rho)
        numpyro.factor(f"{path}_scale_prior", dist.HalfCauchy(1.0).log_prob(s))
        numpyro.deterministic(f"{path}_scale", s)
        return dist.Normal(0.0, s).expand(shape).to_event(len(shape))

    def unit(path, shape):
        if len(shape) < 2:
            return dist.Normal(0.0, _scale(scale, shape)).expand(shape).to_event(len(shape))
        tau = numpyro.sample(f"{path}_global", dist.HalfCauchy(global_scale))
        lam = numpyro.sample(f"{path}_local", dist.HalfCauchy(1.0).expand(shape[-1:]).to_event(1))
        z = numpyro.sample(f"{path}_raw", dist.Normal(0.0, 1.0).expand(shape).to_event(len(shape)))
        return _scale(scale, shape) * tau * jnp.broadcast_to(lam, shape) * z

    if form == "unit":
        return unit
    return softplus_layer if parametrisation == "softplus" else layer


BIAS_NAMES = ("b", "bias")


def _is_bias(site, bias_names):
    value_shape = site["fn"].shape()
    return len(value_shape) == 1 and site["name"].rsplit("/", 1)[-1] in bias_names


def _init_to_unit_scales(site=None, suffixes=HORSESHOE_SUFFIXES, biases="uniform"):
    if site is None:
        return partial(_init_to_unit_scales, suffixes=suffixes, biases=biases)
    if site["type"] != "sample" or site["is_observed"]:
        return init_to_sample(site)
    if site["name"].endswith(suffixes):
        return jnp.ones(site["fn"].shape(), jnp.result_type(float))
    if site["name"].endswith(SOFTPLUS_SUFFIX):
        return jnp.full(site["fn"].shape(), UNIT_RHO, jnp.result_type(float))
    if biases == "uniform" and _is_bias(site, BIAS_NAMES):
        (size,) = site["fn"].shape()
        bound = 1.0 / math.sqrt(size)
        sample_shape = site["kwargs"].get("sample_shape", ())
        return dist.Uniform(-bound, bound)(
            rng_key=site["kwargs"].get("rng_key"), sample_shape=sample_shape + (size,)
        )
    return init_to_sample(site)


def init_to_unit_scales(site=None, suffixes=HORSESHOE_SUFFIXES, biases="uniform"):
    r"""NumPyro init strategy for networks with these priors, Yu et al.'s (2023) start
    (bnn_priors' ``he_initialize``): every horseshoe scale (sites named ``*_scale``,
    ``*_global``, ``*_local``, or ``suffixes``; ``*_rho`` of the softplus parametrisation at
    :math:`\mathrm{softplus}^{-1}(1)`) starts at 1, the weights are a prior draw given
    those scales (He-scaled, :math:`\mathcal N(0, 1.41^2/\text{fan\_in})` under the default
    scale), and every bias (a vector site whose name ends in ``/b`` or ``/bias``) starts
    uniform in :math:`\pm 1/\sqrt{\text{size}}` (PyTorch's default, which Yu et al. keep).
    ``biases="prior"`` draws the biases from their prior instead (:math:`\mathcal N(0, 1)`
    under the default scale).

    Use it as ``init_strategy=init_to_unit_scales`` (NumPyro's default ``init_to_uniform`` puts
    every weight in (-2, 2), and ``init_to_sample`` may draw a huge half-Cauchy scale).

    **Why the biases matter**: on a 784-400-400-10 MNIST network, biases drawn from
    :math:`\mathcal N(0, 1)` start the chain where the per-datum gradient norm is about 11
    (1.7 from Yu et al.'s start). The Monge metric at Yu et al.'s learning rate then fails
    there within ~15 steps (``docs/benchmarks.md``, "Why Monge failed at W = 400").
    """
    if biases not in ("uniform", "prior"):
        raise ValueError(f"`biases` must be 'uniform' or 'prior', got {biases!r}.")
    return _init_to_unit_scales(site, tuple(suffixes), biases)
