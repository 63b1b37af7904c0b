r"""Priors for neural-network parameters, used as ``prior=`` of
:func:`~numpyro_sgrld.haiku.random_haiku_module`.

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
- :func:`horseshoe`, ``form="unit"``: per-unit local scales and a layer-wide global scale,
  non-centred (Ghosh, Yao & Doshi-Velez 2019): :math:`z \sim \mathcal N(0, 1)`,
  :math:`\lambda_j \sim \mathrm{HalfCauchy}(1)` per output unit,
  :math:`\tau \sim \mathrm{HalfCauchy}(\text{global\_scale})` per layer,
  :math:`w_{\cdot j} = m\,\tau\,\lambda_j\,z_{\cdot j}`; biases keep the Gaussian prior.
"""

import math
from functools import partial

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.infer import init_to_sample

from numpyro_sgrld.haiku import fan_in

__all__ = ["gaussian", "horseshoe", "he_scale", "init_to_unit_scales"]

HORSESHOE_SUFFIXES = ("_scale", "_global", "_local")

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


def horseshoe(form="layer", scale="he", global_scale=1.0):
    """Horseshoe prior, ``form="layer"`` or ``"unit"`` (see the module docstring).

    Auxiliary sites: ``"{path}_scale"`` (layer form); ``"{path}_global"``, ``"{path}_local"``
    and ``"{path}_raw"`` (unit form, weights only).
    """
    if form not in ("layer", "unit"):
        raise ValueError(f"Unknown horseshoe form {form!r}; use 'layer' or 'unit'.")
    _scale(scale, (1, 1))
    if not (isinstance(global_scale, (int, float)) and global_scale > 0):
        raise ValueError(f"`global_scale` must be > 0, got {global_scale!r}.")

    def layer(path, shape):
        s = numpyro.sample(f"{path}_scale", dist.HalfCauchy(1.0))
        return dist.Normal(0.0, _scale(scale, shape) * s).expand(shape).to_event(len(shape))

    def unit(path, shape):
        if len(shape) < 2:
            return dist.Normal(0.0, _scale(scale, shape)).expand(shape).to_event(len(shape))
        tau = numpyro.sample(f"{path}_global", dist.HalfCauchy(global_scale))
        lam = numpyro.sample(f"{path}_local", dist.HalfCauchy(1.0).expand(shape[-1:]).to_event(1))
        z = numpyro.sample(f"{path}_raw", dist.Normal(0.0, 1.0).expand(shape).to_event(len(shape)))
        return _scale(scale, shape) * tau * jnp.broadcast_to(lam, shape) * z

    return layer if form == "layer" else unit


def _init_to_unit_scales(site=None, suffixes=HORSESHOE_SUFFIXES):
    if site is None:
        return partial(_init_to_unit_scales, suffixes=suffixes)
    if site["type"] == "sample" and not site["is_observed"] and site["name"].endswith(suffixes):
        return jnp.ones(site["fn"].shape(), jnp.result_type(float))
    return init_to_sample(site)


def init_to_unit_scales(site=None, suffixes=HORSESHOE_SUFFIXES):
    """NumPyro init strategy for networks with these priors: every horseshoe scale (sites named
    ``*_scale``, ``*_global``, ``*_local``, or ``suffixes``) starts at 1, and every other site is
    a prior draw given those scales, so the weights start He-scaled, as Yu et al. initialise.

    Use it as ``init_strategy=init_to_unit_scales`` (NumPyro's default ``init_to_uniform`` puts
    every weight in (-2, 2), and ``init_to_sample`` may draw a huge half-Cauchy scale).
    """
    return _init_to_unit_scales(site, tuple(suffixes))
