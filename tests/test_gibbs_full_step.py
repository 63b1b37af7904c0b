"""Within Gibbs, the SG sites no exact draw reads step at the whole ``target_bias`` after
warm-up (``gibbs_bias.full_step``): the scaled metric's algebra, which sites are outside every
Gibbs site's Markov blanket, the rule's factor, and (slow) the law of such a site against its
closed form.

The statistical test's model: ``s2 ~ InvGamma(3, 2)`` (the Gibbs site), 40 children ``w_j ~ N(0,
s2)`` that no data touch (so the step aims at ``1.5 / sqrt(40)`` of ``target_bias`` and the
outside site steps about 4.2x farther) and ``b ~ N(0, 1)``, ``y_i ~ N(b, 1)`` (N = 50, minibatch
10) outside the blanket of ``s2``: ``b | y ~ N(sum(y) / (N + 1), 1 / (N + 1))`` exactly; the SG
step keeps that mean and inflates the variance by at most ``target_bias``. A factor applied to
the drift without its square root on the noise would leave ``b``'s sd about half the
posterior's.
"""

import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import bonferroni_z, moment_z_scores
from numpyro.infer import MCMC

import numpyro_sgrld as ns
from numpyro_sgrld.core.composition import site_scaled
from numpyro_sgrld.core.metrics import identity
from numpyro_sgrld.sampler import gibbs_bias, gibbs_start

N, BATCH, CHILDREN = 50, 10, 40
Y = np.asarray(jax.random.normal(jax.random.PRNGKey(3), (N,)) + 0.7)


def model(y):
    s2 = numpyro.sample("s2", dist.InverseGamma(3.0, 2.0))
    numpyro.sample("w", dist.Normal(0.0, jnp.sqrt(s2)).expand([CHILDREN]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("y", dist.Normal(b, 1.0), obs=y[idx])


def blanketed(y):
    tau = numpyro.sample("tau", dist.Gamma(2.0, 2.0))
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    w = numpyro.sample("w", dist.Normal(mu, tau).expand([5]).to_event(1))
    b = numpyro.sample("b", dist.Normal(0.0, 1.0))
    c = numpyro.sample("c", dist.Normal(b, 1.0))
    with numpyro.plate("data", y.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("y", dist.Normal(w.sum() + c, 1.0), obs=y[idx])


def test_a_site_scaled_metric_is_the_step_times_the_factor_on_its_sites():
    position = {"a": jnp.zeros(3), "b": jnp.zeros(2)}
    pre, _ = identity().update(position, identity().init(position), position)
    scaled = site_scaled(pre, {"b": jnp.asarray(4.0)})
    v = {"a": jnp.arange(1.0, 4.0), "b": jnp.asarray([1.0, -2.0])}
    drift, noise = scaled.drift(v), scaled.noise(v)
    np.testing.assert_allclose(drift["a"], v["a"])
    np.testing.assert_allclose(drift["b"], 4.0 * v["b"])
    np.testing.assert_allclose(noise["b"], 2.0 * v["b"])  # R R^T = D' = 4 on b
    u = {"a": jnp.asarray([0.5, 1.0, -1.0]), "b": jnp.asarray([3.0, 1.0])}
    inner = sum(jnp.vdot(noise[k], u[k]) for k in u)
    transposed = scaled.noise_transpose(u)
    assert float(inner) == pytest.approx(float(sum(jnp.vdot(v[k], transposed[k]) for k in v)))


def test_the_sites_outside_every_gibbs_sites_blanket_are_found():
    # tau's blanket: its children w and their other parent mu; b and c are read by no draw
    assert gibbs_start.outside_blankets(blanketed, ("tau",), (jnp.asarray(Y),), {}) == (
        "b", "c")
    assert gibbs_start.outside_blankets(blanketed, ("tau", "b"), (jnp.asarray(Y),), {}) == ()


def test_the_rule_scales_the_outside_sites_after_warm_up_only():
    rule = gibbs_bias.full_step(ns.SGLD(model), ("b",))
    warm = types.SimpleNamespace(num_warmup=100,
                                 step=types.SimpleNamespace(bias_share=jnp.asarray(0.25)))
    assert float(rule(99, warm)["b"]) == 1.0
    assert float(rule(100, warm)["b"]) == 4.0
    assert rule(100, None) is None
    assert gibbs_bias.full_step(ns.SGLD(model), ()) is None
    assert gibbs_bias.full_step(ns.SGLD(model, step_size=1e-3), ("b",)) is None  # no share
    assert gibbs_bias.full_step(ns.PSGLD(model), ("b",)) is None  # an adaptive metric


def test_sggibbs_sets_the_rule_for_its_own_draws():
    kernel = ns.SGGibbs(ns.SGLD(model), gibbs_sites=["s2"])
    kernel.init(jax.random.PRNGKey(0), 200, None, (jnp.asarray(Y),), {})
    assert kernel.inner_kernel.site_scale is not None


@pytest.mark.slow
@pytest.mark.parametrize("name", ["SGLD", "SGHMC", "BADODAB"])
def test_an_outside_site_stepping_farther_samples_its_closed_form_law(name):
    kernel = ns.SGGibbs(getattr(ns, name)(model), gibbs_sites=["s2"])
    mcmc = MCMC(kernel, num_warmup=2000, num_samples=20000,
                num_chains=4, chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), jnp.asarray(Y))
    assert kernel.inner_kernel.site_scale is not None
    own = ns.SGGibbs(getattr(ns, name)(model), lambda rng_key, gibbs_sites, hmc_sites: gibbs_sites,
                     ["s2"])  # a user's draw may read any site: no site steps farther
    own.init(jax.random.PRNGKey(0), 200, None, (jnp.asarray(Y),), {})
    assert own.inner_kernel.site_scale is None
    share = float(np.mean(mcmc.last_state.bias_share))
    assert share < 0.5  # the outside site steps at least twice as far as the children
    b = np.asarray(mcmc.get_samples(group_by_chain=True)["b"])[..., None]
    mean, sd = Y.sum() / (N + 1), np.sqrt(1.0 / (N + 1))
    # an SG step on a Gaussian keeps its mean; its variance lies within a factor
    # 1 + target_bias of the posterior's (the adaptation's bound, which the farther step keeps)
    z_mean, _ = moment_z_scores(b, np.asarray([mean]), np.asarray([sd]))
    _, z_low = moment_z_scores(b, np.asarray([mean]), np.asarray([sd]))
    _, z_high = moment_z_scores(b, np.asarray([mean]), np.asarray([sd * np.sqrt(1.1)]))
    z = bonferroni_z(3)
    assert abs(z_mean[0]) < z and z_low[0] > -z and z_high[0] < z, (z_mean, z_low, z_high)
