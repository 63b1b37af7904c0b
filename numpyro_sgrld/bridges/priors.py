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
  ``parametrisation="centred"``: :math:`w_{\cdot j} \sim \mathcal N(0, (m\tau\lambda_j)^2)`,
  both scales declaring their exact conditionals given the weights (Makalic & Schmidt's
  auxiliaries, :func:`half_cauchy_draw`) and the global scale a joint move of both along the
  ridge :math:`\tau\lambda_j` fixed (:func:`unit_ridge_move`): :class:`~numpyro_sgrld.SGGibbs`
  makes them.
- :func:`gaussian`, ``scale="learnt"``: :math:`w \sim \mathcal N(0, \rho^{-1})` with one
  precision :math:`\rho \sim \Gamma(a, b)` per weight matrix and per bias vector (Chen, Fox &
  Guestrin 2014 use :math:`\Gamma(1, 1)` and Gibbs-update it), declaring its conjugate update
  (:func:`gamma_precision_draw`).
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
from numpyro_sgrld.sampler.conditionals import CONDITIONAL, Conditional, JointMove, slice_step

__all__ = ["HORSESHOE_SUFFIXES", "gamma_precision_draw", "gaussian", "half_cauchy_draw",
           "half_cauchy_scale_draw", "horseshoe", "he_scale", "init_to_unit_scales",
           "unit_ridge_move"]

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


def gaussian(scale="he", precision_prior=(1.0, 1.0)):
    """Independent Gaussian prior (see the module docstring); ``scale="learnt"``: one precision
    per weight matrix and per bias vector, site ``"{path}_precision"`` with the Gamma prior
    ``precision_prior`` (concentration, rate), whose exact update given the weights
    (:func:`gamma_precision_draw`) :class:`~numpyro_sgrld.SGGibbs` draws."""
    if scale == "learnt":
        a, b = precision_prior
        if not (a > 0 and b > 0):
            raise ValueError(
                f"`precision_prior` must be (concentration, rate), both > 0, got "
                f"{precision_prior!r}.")

        def learnt(path, shape):
            draw = Conditional(partial(gamma_precision_draw, weights=path,
                                       concentration=float(a), rate=float(b)))
            rho = numpyro.sample(f"{path}_precision", dist.Gamma(float(a), float(b)),
                                 infer={CONDITIONAL: draw})
            return dist.Normal(0.0, jax.lax.rsqrt(rho)).expand(shape).to_event(len(shape))

        return learnt
    _scale(scale, (1, 1))

    def prior(path, shape):
        return dist.Normal(0.0, _scale(scale, shape)).expand(shape).to_event(len(shape))

    return prior


def half_cauchy_draw(key, s, w, base, prior_scale=1.0):
    r"""An exact draw of half-Cauchy scales :math:`s_j \sim \mathrm{HalfCauchy}(A)` from
    their conditional given weights :math:`w \sim \mathcal N(0, (b\,s)^2)` (``base``
    :math:`b` broadcast against ``w``; each :math:`s_j` scales the weights of the trailing
    axes of ``w`` that ``s``'s shape leaves, e.g. one scale per output unit of a
    ``(fan_in, units)`` matrix, or one for all), through the inverse-gamma auxiliary of
    Makalic & Schmidt (2016), drawn afresh from its own conditional:

    .. math::
        \nu_j \mid s_j \sim \mathrm{IG}\big(1,\ A^{-2} + s_j^{-2}\big), \qquad
        s_j^2 \mid w, \nu_j \sim \mathrm{IG}\Big(\tfrac{k_j+1}{2},\
            \tfrac1{\nu_j} + \sum_i \tfrac{w_{ij}^2}{2b_{ij}^2}\Big),

    :math:`k_j` the number of weights :math:`s_j` scales: two exact Gibbs draws of
    :math:`(\nu, s)`, so the pair leaves
    :math:`p(s_j \mid w) \propto (1 + s_j^2/A^2)^{-1} s_j^{-k_j}
    e^{-\sum_i w_{ij}^2/(2b_{ij}^2s_j^2)}` invariant. No data enter."""
    s = jnp.asarray(s)
    dtype = jnp.result_type(s)
    key_nu, key_s = random.split(key)
    nu = (prior_scale**-2.0 + s**-2.0) / random.gamma(key_nu, 1.0, jnp.shape(s), dtype)
    ratio = (w / base) ** 2
    axes = tuple(range(ratio.ndim - s.ndim)) + tuple(
        ratio.ndim - s.ndim + i for i, n in enumerate(jnp.shape(s)) if n == 1)
    squares = jnp.reshape(jnp.sum(ratio, axis=axes, keepdims=True), jnp.shape(s))
    count = ratio.size // max(s.size, 1)
    rate = 1.0 / nu + squares / 2.0
    return jnp.sqrt(rate / random.gamma(key_s, (count + 1) / 2.0, jnp.shape(s), dtype))


def half_cauchy_scale_draw(key, s, sites, *, weights, base):
    r"""The layer-wise horseshoe's scale :math:`s \sim \mathrm{HalfCauchy}(1)` drawn exactly
    from its conditional given the weights :math:`w \sim \mathcal N(0, (b\,s)^2)` of the site
    ``weights`` (``sites[weights]``): :func:`half_cauchy_draw` with one scale for all. No data
    enter."""
    return half_cauchy_draw(key, s, sites[weights], base)


def _unit_local_draw(key, lam, sites, *, weights, tau, base):
    """The unit-wise horseshoe's local scales given the weights and the global scale."""
    return half_cauchy_draw(key, lam, sites[weights], base * sites[tau])


def _unit_global_draw(key, tau, sites, *, weights, lam, base, global_scale):
    """The unit-wise horseshoe's global scale given the weights and the local scales."""
    return half_cauchy_draw(key, tau, sites[weights], base * sites[lam], global_scale)


def unit_ridge_move(key, sites, *, tau, lam, global_scale=1.0):
    r"""The unit-wise horseshoe's global scale :math:`\tau \sim \mathrm{HalfCauchy}(A)` and
    its :math:`J` local scales :math:`\lambda_j \sim \mathrm{HalfCauchy}(1)` (the sites
    ``tau`` and ``lam``) moved together along the ridge that leaves every product
    :math:`\tau\lambda_j`, hence the weights' density, unchanged:
    :math:`(\log\tau, \log\lambda) \to (\log\tau + s, \log\lambda - s)`, a translation
    (unit Jacobian), with :math:`s` updated by a slice step from 0 on its conditional on that
    line,

    .. math::
        \log f(s) = -\log\big(1 + \tau^2 e^{2s}/A^2\big)
            - \sum_j \log\big(1 + \lambda_j^2 e^{-2s}\big) + (1 - J)\,s,

    the priors in log coordinates, with their Jacobians (Liu & Sabatti 2000's generalised
    Gibbs step for the group of translations). The single-site draws cross this ridge slowly:
    given the weights and the other scales, :math:`\log\tau`'s conditional has an sd of
    about :math:`1/\sqrt{2k}` for :math:`k` weights (0.03 for a 30-16 layer), where its
    posterior's is of order 1. No weights and no data enter."""
    t, lam_ = sites[tau], sites[lam]
    log_t, log_lam = jnp.log(t), jnp.log(lam_)
    units = jnp.size(lam_)

    def logp(s):
        return (-jnp.logaddexp(0.0, 2.0 * (log_t + s - math.log(global_scale)))
                - jnp.sum(jnp.logaddexp(0.0, 2.0 * (log_lam - s))) + (1.0 - units) * s)

    s = slice_step(key, logp, jnp.zeros((), jnp.result_type(t)))
    return {tau: t * jnp.exp(s), lam: lam_ * jnp.exp(-s)}


def gamma_precision_draw(key, precision, sites, *, weights, concentration, rate):
    r"""An exact draw of a Gaussian prior's precision :math:`\rho \sim \Gamma(a, b)` from its
    conditional given the :math:`k` weights :math:`w \sim \mathcal N(0, \rho^{-1})` of the site
    ``weights``, conjugate: :math:`\rho \mid w \sim \Gamma\big(a + k/2,\ b + \sum w^2/2\big)`
    (the update Chen, Fox & Guestrin 2014 alternate with SGHMC). No data enter."""
    w = sites[weights]
    dtype = jnp.result_type(precision)
    shape = concentration + jnp.size(w) / 2.0
    return random.gamma(key, shape, jnp.shape(precision), dtype) / (rate + jnp.sum(w**2) / 2.0)


def horseshoe(form="layer", scale="he", global_scale=1.0, parametrisation="log"):
    """Horseshoe prior, ``form="layer"`` or ``"unit"`` (see the module docstring).

    Auxiliary sites: ``"{path}_scale"`` (layer form); ``"{path}_global"``, ``"{path}_local"``
    and ``"{path}_raw"`` (unit form, weights only). ``parametrisation="softplus"`` (layer form
    only) is Yu et al.'s: a flat site ``"{path}_rho"``, the scale as the deterministic site
    ``"{path}_scale"``, no Jacobian (module docstring). ``parametrisation="centred"`` (unit
    form only): ``w ~ N(0, (m tau lam_j)^2)`` with no ``"{path}_raw"`` site, both scales
    declaring their exact updates given the weights (:func:`half_cauchy_draw`), which
    :class:`~numpyro_sgrld.SGGibbs` draws.
    """
    if form not in ("layer", "unit"):
        raise ValueError(f"Unknown horseshoe form {form!r}; use 'layer' or 'unit'.")
    if parametrisation not in ("log", "softplus", "centred"):
        raise ValueError(
            f"`parametrisation` must be 'log' (NumPyro's transform, with its Jacobian), "
            f"'softplus' (Yu et al.'s, no Jacobian) or, for form='unit', 'centred', got "
            f"{parametrisation!r}."
        )
    if parametrisation == "centred" and form != "unit":
        raise ValueError(
            "parametrisation='centred' is the unit-wise horseshoe's (the layer form is centred "
            "already): use form='unit'.")
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

    def centred_unit(path, shape):
        if len(shape) < 2:
            return dist.Normal(0.0, _scale(scale, shape)).expand(shape).to_event(len(shape))
        base = _scale(scale, shape)
        tau_name, lam_name = f"{path}_global", f"{path}_local"
        ridge = JointMove((tau_name, lam_name), partial(
            unit_ridge_move, tau=tau_name, lam=lam_name, global_scale=global_scale))
        global_draw = Conditional(partial(_unit_global_draw, weights=path, lam=lam_name,
                                          base=base, global_scale=global_scale), ridge)
        local_draw = Conditional(partial(_unit_local_draw, weights=path, tau=tau_name,
                                         base=base))
        tau = numpyro.sample(tau_name, dist.HalfCauchy(global_scale),
                             infer={CONDITIONAL: global_draw})
        lam = numpyro.sample(lam_name, dist.HalfCauchy(1.0).expand(shape[-1:]).to_event(1),
                             infer={CONDITIONAL: local_draw})
        return dist.Normal(0.0, base * tau * jnp.broadcast_to(lam, shape)).to_event(len(shape))

    if form == "unit":
        return centred_unit if parametrisation == "centred" else unit
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
