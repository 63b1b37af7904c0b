"""Distances between predictive distributions (agreement, total variation, W2) and the
thermostat presets' adapted steps on a horseshoe network."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import load_benchmark
from numpyro.infer import MCMC
from scipy.special import ndtri

import numpyro_sgrld as ns
from numpyro_sgrld.analysis.predictive import (
    agreement,
    gaussian_mixture_quantiles,
    predictive_probs,
    quantile_wasserstein2,
    total_variation,
    wasserstein2,
    within_band,
)


def test_agreement_and_total_variation_by_hand():
    p = np.array([[0.9, 0.1], [0.4, 0.6], [0.5, 0.5]])
    q = np.array([[0.7, 0.3], [0.6, 0.4], [0.5, 0.5]])
    assert agreement(p, q) == pytest.approx(2 / 3)
    assert total_variation(p, q) == pytest.approx((0.2 + 0.2 + 0.0) / 3)
    assert total_variation(p, p) == 0.0
    with pytest.raises(ValueError, match="same shape"):
        total_variation(p, q[:2])


def test_wasserstein2_of_empirical_laws_by_hand():
    a = np.array([[0.0], [1.0]])
    assert wasserstein2(a, a + 3.0) == pytest.approx(3.0)
    # quantile functions 0 on (0, 1/2) and (0, 2/3): they differ by 1 on a width of 1/6
    assert wasserstein2(a, np.array([[0.0], [0.0], [1.0]])) == pytest.approx(np.sqrt(1 / 6))
    # order within a sample does not matter; points are averaged
    two = np.array([[1.0, 0.0], [0.0, 5.0]])
    assert wasserstein2(two, two[::-1] + np.array([0.0, 1.0])) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="same points"):
        wasserstein2(two, np.zeros((3, 3)))


def test_mixture_quantiles_of_one_gaussian_are_its_quantiles():
    """One component per point: the mixture's quantiles are mu + sigma z_k exactly, up to
    the CDF grid's linear interpolation (spacing 16 sigma / 4096 = 0.004 sigma)."""
    mean, scale = np.array([[0.0, 2.0]]), np.array([[1.0, 0.5]])
    q = gaussian_mixture_quantiles(mean, scale, num_levels=64)
    z = ndtri((np.arange(64) + 0.5) / 64)
    np.testing.assert_allclose(q, mean + scale * z[:, None], atol=0.004 * 0.5 * 8)
    # W2 between two Gaussians by the midpoint rule: sqrt(mean_k (dmu + dsigma z_k)^2)
    other = gaussian_mixture_quantiles(mean + 1.0, scale * 2.0, num_levels=64)
    expected = np.mean([np.sqrt(np.mean((1.0 + s * z) ** 2)) for s in (1.0, 0.5)])
    assert quantile_wasserstein2(q, other) == pytest.approx(expected, abs=0.004 * 8)


def test_a_mixture_of_draws_is_one_law_whatever_the_order_of_its_draws():
    rng = np.random.default_rng(0)
    mean, scale = rng.normal(size=(300, 4)), np.exp(rng.normal(size=(300, 1)) * 0.3)
    q = gaussian_mixture_quantiles(mean, scale)
    r = gaussian_mixture_quantiles(mean[::-1], scale[::-1])
    assert quantile_wasserstein2(q, r) < 1e-6


def test_within_band():
    band = within_band(0.005, 0.002)
    assert band.close and band.limit == pytest.approx(0.012) and band.ratio == pytest.approx(2.5)
    assert not within_band(0.05, 0.02).close  # above 2 x 0.02 and 0.02 + 0.01
    assert within_band(0.035, 0.02).close
    assert not within_band(0.005, 0.002, 0.97, 0.99).close  # agreement 2 points below


def _classifier(X, y=None):
    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([2, 3]).to_event(2))
    logits = X @ w
    if y is None:
        numpyro.deterministic("logits", logits)
    with numpyro.plate("data", X.shape[0]):
        numpyro.sample("y", dist.Categorical(logits=logits), obs=y)


def test_predictive_probs_average_the_draws_probabilities():
    X = jnp.array([[1.0, 0.0], [0.5, -2.0]])
    w = jax.random.normal(jax.random.PRNGKey(0), (7, 2, 3))
    probs = predictive_probs(_classifier, {"w": w}, X, batch_size=1)
    expected = jax.nn.softmax(jnp.einsum("pd,sdk->spk", X, w), -1).mean(0)
    np.testing.assert_allclose(probs, expected, rtol=1e-5)
    assert agreement(probs, np.asarray(expected)) == 1.0


def test_the_crossover_is_where_nuts_time_over_the_presets_crosses_one():
    crossing = load_benchmark("crossover").crossing
    sizes = [1_000, 10_000, 100_000]
    # NUTS 10x, 100x, 1000x s; the preset 100 s everywhere: ratio 0.1, 1, 10 -> N = 10,000
    cut = crossing(sizes, [10.0, 100.0, 1000.0], [100.0, 99.0, 100.0], [True] * 3)
    assert cut["above"] == 1_000 and cut["below"] == 10_000 and not cut["extrapolated"]
    np.testing.assert_allclose(cut["estimate"], 10 ** (3 + 1 / (1 + np.log10(100 / 99))),
                               rtol=1e-9)
    # faster at every size: below the smallest, along NUTS's slope (1 per decade): N = 100
    cut = crossing(sizes, [100.0, 1000.0, 10_000.0], [10.0] * 3, [True] * 3)
    assert cut["extrapolated"] and cut["below"] == 1_000
    np.testing.assert_allclose(cut["estimate"], 100.0, rtol=1e-9)
    # outside the band at the middle size: only a bracket, no estimate
    cut = crossing(sizes, [10.0, 1000.0, 10_000.0], [100.0, 10.0, 10.0], [True, False, True])
    assert (cut["above"], cut["below"], cut["estimate"]) == (10_000, 100_000, None)
    # slower or outside the band at the largest size: no crossover
    assert crossing(sizes, [10.0] * 3, [1.0, 1.0, 100.0], [True] * 3)["below"] is None
    assert crossing(sizes, [10.0] * 3, [1.0] * 3, [True, True, False])["below"] is None


def test_a_network_below_the_crossover_is_pointed_to_nuts_with_its_cost():
    from types import SimpleNamespace

    from numpyro_sgrld.verdict.advice import NUTS_FASTER_BELOW_ROWS, network_mixing_advice

    def kernel(rows, batch):
        return SimpleNamespace(num_data=rows,
                               subsample_plates=[SimpleNamespace(subsample_size=batch)])

    small = network_mixing_advice(4, kernel(NUTS_FASTER_BELOW_ROWS // 2, 32))
    assert "NUTS on full_batch(model)" in small
    assert f"about {NUTS_FASTER_BELOW_ROWS / 64:.0f} of this kernel" in small
    assert "docs/choosing.md" in small
    for large in (kernel(NUTS_FASTER_BELOW_ROWS, 32), SimpleNamespace(num_data=10),
                  None):
        assert "NUTS" not in network_mixing_advice(4, large)


def test_a_network_that_has_not_mixed_is_told_the_warmup_measured_on_networks():
    from numpyro_sgrld.verdict.advice import NETWORK_WARMUP, network_mixing_advice

    advice = network_mixing_advice(4)
    assert f"num_warmup (on the networks measured, {NETWORK_WARMUP:,} or more" in advice
    assert "this run has 4" in advice


def _gaussian(y=None):
    numpyro.sample("x", dist.Normal(0.0, 1.0).expand([3]).to_event(1))


@pytest.mark.parametrize("integrator", ["baoab", "sgnht", "badodab"])
def test_warmups_approach_redraws_the_momentum_from_its_equilibrium(integrator):
    """In warm-up's approach the momentum is redrawn after every step, from its law at the
    temperature (BAOAB's velocity in the metric's geometry: variance T D; the thermostats'
    whitened momentum: T), the thermostat at its start; after the approach it is carried."""
    from types import SimpleNamespace
    from typing import NamedTuple

    from numpyro_sgrld import integrators
    from numpyro_sgrld.warmup.steps import overdamped

    class Chain(NamedTuple):
        i: jnp.ndarray
        sampler_state: SimpleNamespace

    class Sampler(NamedTuple):
        integrator: object

    integ = getattr(integrators, integrator)()
    n, temperature, d = 20_000, 0.5, 4.0
    state = integ.init({"x": jnp.zeros(n)}, jax.random.PRNGKey(0), 0.1, temperature)
    moved = jax.tree.map(lambda x: x + 1, state)
    root = SimpleNamespace(noise=lambda t: jax.tree.map(lambda x: np.sqrt(d) * x, t))
    algorithm = SimpleNamespace(sampler=SimpleNamespace(integrator=integ),
                                temperature=temperature)
    for i in (1, 40, 41):
        out = overdamped(algorithm, Chain(jnp.asarray(i), Sampler(moved)), root,
                         jax.random.PRNGKey(i), 40).sampler_state.integrator
        momentum = np.asarray(jax.tree.leaves(out)[0])
        if i > 40:
            for a, b in zip(jax.tree.leaves(out), jax.tree.leaves(moved)):
                np.testing.assert_array_equal(a, b)
            continue
        for a, b in zip(jax.tree.leaves(out)[1:], jax.tree.leaves(state)[1:]):
            np.testing.assert_array_equal(a, b)  # no half kick pending, thermostat at A
        variance = temperature * (d if integrator == "baoab" else 1.0)
        # the sample variance's standard error is sqrt(2/n) of the variance
        assert abs(momentum.var() / variance - 1) < 4 * np.sqrt(2 / n)
        assert abs(momentum.mean()) < 4 * np.sqrt(variance / n)


def _horseshoe_digits():
    from numpyro_sgrld.models.bnn import load_digits, mlp_classifier

    X, y, _, _ = load_digits()
    model = partial(mlp_classifier, hidden=(16,), prior=ns.priors.horseshoe("layer"),
                    subsample_size=100)
    return model, (X, y)


@pytest.mark.slow
@pytest.mark.parametrize("kernel", ["BAOAB", "SGNHT", "BADODAB"])
def test_thermostat_presets_adapt_steps_of_one_size_on_a_horseshoe_network(kernel):
    """A 64-16-10 horseshoe MLP on digits from NumPyro's default start (weights in (-2, 2)):
    every chain's adapted step within 10x of the others'. A momentum carried through the
    layer scale's funnel in the approach threw the scale out to 1e8, where the learnt
    preconditioner reached 1e11 and every later step was rejected down to 1e-38."""
    model, data = _horseshoe_digits()
    mcmc = MCMC(getattr(ns, kernel)(model), num_warmup=1000, num_samples=1, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    mcmc.warmup(jax.random.PRNGKey(0), *data)
    steps = np.asarray(mcmc.post_warmup_state.step_size)
    assert np.all(np.isfinite(steps)) and steps.max() / steps.min() < 10, steps
