"""Cyclical SG-MCMC (Zhang et al. 2020): no exploration-stage state among the draws, the cycle
and stage of each draw, the exploration stage noise-free on the schedule's steps, bad input."""

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import bonferroni_z
from jax import random
from numpyro.infer import MCMC

from numpyro_sgrld import CyclicalSGHMC, CyclicalSGLD, to_inference_data
from numpyro_sgrld.presets.table import CYCLE_LENGTH


def standard_normal():
    numpyro.sample("x", dist.Normal(0.0, 1.0))


@pytest.mark.parametrize(
    "kernel", [CyclicalSGLD, pytest.param(CyclicalSGHMC, marks=pytest.mark.slow)]
)
def test_draws_are_sampling_stage_states_with_their_cycle_and_stage(kernel):
    """L = 10, beta = 0.3 (E = 3): 23 draws are the sampling steps 3..9 of cycles 0, 1, 2 and
    3..4 of cycle 3, in order; the step counter counts every step."""
    k = kernel(standard_normal, 0.1, cycle_length=10, exploration=0.3)
    assert (k.cycle_length, k.exploration_steps) == (10, 3)
    mcmc = MCMC(k, num_warmup=0, num_samples=23, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(random.PRNGKey(0), init_params={"x": jnp.array([3.0, -3.0])},
             extra_fields=("i",))
    i = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["i"])
    cycle, stage = k.cycle_position(i)
    expected_stage = np.r_[np.tile(np.arange(3, 10), 3), [3, 4]]
    expected_cycle = np.r_[np.repeat(np.arange(3), 7), [3, 3]]
    for c in range(2):
        np.testing.assert_array_equal(stage[c], expected_stage)
        np.testing.assert_array_equal(cycle[c], expected_cycle)
    assert np.all(stage >= k.exploration_steps)  # no exploration state among the draws
    assert int(mcmc.last_state.i[0]) == 35  # 3 cycles of 10 steps, then 3 + 2
    idata = to_inference_data(mcmc)
    assert idata.posterior["x"].shape == (2, 23)


def test_the_exploration_stage_is_noise_free_gradient_descent_on_the_schedule():
    """From x0 on N(0, 1) with exact gradients, E = 4 exploration steps are deterministic:
    x_E = x0 prod_{k<E}(1 - h_k) with the cosine steps h_k. The first draw is one SGLD step from
    there, so (x_1 - (1 - h_E) x_E) / sqrt(2 h_E) is N(0, 1) across 4000 chains: its mean and
    variance are tested with z-scores. Had the exploration injected noise, the variance would
    be 1 + sum of the exploration steps' noise carried forward (about 1.6 times here)."""
    L, beta, h0, x0, chains = 20, 0.2, 0.2, 2.0, 4000
    k = CyclicalSGLD(standard_normal, h0, cycle_length=L, exploration=beta)
    E = k.exploration_steps
    h = 0.5 * h0 * (np.cos(np.pi * np.arange(L) / L) + 1)
    x_e = x0 * np.prod(1 - h[:E])
    mcmc = MCMC(k, num_warmup=0, num_samples=1, num_chains=chains, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(random.PRNGKey(1), init_params={"x": jnp.full(chains, x0)})
    x1 = np.asarray(mcmc.get_samples()["x"], np.float64)
    xi = (x1 - (1 - h[E]) * x_e) / np.sqrt(2 * h[E])
    z_mean = xi.mean() * np.sqrt(chains)
    z_var = (xi.var() - 1) / np.sqrt(2 / (chains - 1))
    limit = bonferroni_z(2)
    assert abs(z_mean) < limit and abs(z_var) < limit, (z_mean, z_var)
    noisy = 1 + sum(2 * h[j] * np.prod((1 - h[j + 1:E + 1]) ** 2) for j in range(E)) / (2 * h[E])
    assert (noisy - 1) / np.sqrt(2 / (chains - 1)) > 2 * limit  # the test can tell


def test_cyclical_bad_input():
    with pytest.raises(ValueError, match="`cycle_length` must be an integer >= 2"):
        CyclicalSGLD(standard_normal, 0.1, cycle_length=1)
    with pytest.raises(ValueError, match="`exploration` must be a finite number in"):
        CyclicalSGHMC(standard_normal, 0.1, cycle_length=10, exploration=1.0)
    with pytest.raises(ValueError, match="exploration=0.95 of cycle_length=10 leaves no sampling"):
        CyclicalSGLD(standard_normal, 0.1, cycle_length=10, exploration=0.95)
    with pytest.raises(ValueError, match=r"`step_size`.*or None to adapt it in warm-up: "
                       r"CyclicalSGHMC\(model\)"):
        CyclicalSGHMC(standard_normal, -0.1)
    assert CyclicalSGLD(standard_normal, 0.1).cycle_length == CYCLE_LENGTH


def test_by_default_the_cycles_begin_after_warm_up_at_the_adapted_peak():
    """CyclicalSGLD(model): warm-up adapts the step (a constant h0 after it), then draw j of
    step counter i has the step h0 (cos(pi k / L) + 1) / 2 with k = (i - 1 - W) mod L, only in
    the sampling stage (k >= E), and the NumPyro loop's verdict judges the draws (it counts
    transitions, not steps: a transition that starts a cycle runs E steps): its split R-hat
    is the draws' (:func:`numpyro_sgrld.check`)."""
    import warnings

    import jax

    from numpyro_sgrld import check

    W, L = 200, 40
    k = CyclicalSGLD(standard_normal, cycle_length=L)
    mcmc = MCMC(k, num_warmup=W, num_samples=2000, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(random.PRNGKey(0), extra_fields=("i", "step_size"))
        jax.effects_barrier()
    said = [str(w.message) for w in caught if "split R-hat" in str(w.message)]
    assert len(said) == 1, said
    v = check(mcmc, warn=False)
    assert f"max split R-hat {v.max_rhat:.3f}" in said[0]
    i = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["i"])
    h = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["step_size"])
    peak = np.asarray(mcmc.last_state.adaptation.step_size)
    cycle, stage = k.cycle_position(i)
    assert np.all(stage >= k.exploration_steps) and cycle[0, -1] == 2000 // (L // 2) - 1
    # the recorded step is the next step's: of counter i
    expected = peak[:, None] * 0.5 * (np.cos(np.pi * ((i - W) % L) / L) + 1)
    # float32 on both sides: a few rounding errors of the largest intermediate, the peak
    np.testing.assert_allclose(h, expected, rtol=0, atol=4 * np.finfo(np.float32).eps * peak.max())
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"])
    assert np.all(np.isfinite(x))
