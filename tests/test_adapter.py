"""The NumPyro adapter: potentials, plates, batching, postprocessing, state handling."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import assert_moments, bonferroni_z, moment_z_scores
from jax import random
from numpyro.infer import MCMC, NUTS, Predictive, log_likelihood
from numpyro.infer.util import constrain_fn, log_density

from numpyro_sgrld import (
    PSGLD,
    SGHMC,
    SGLD,
    AdamSGLD,
    ShampooSGLD,
    find_subsample_plates,
    full_batch,
    minibatch_potential,
)
from numpyro_sgrld.core.tree import tree_all_finite
from numpyro_sgrld.data.subsample import draw_indices, init_batching
from numpyro_sgrld.sampler import parts


def _data(n=50, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X @ np.arange(1.0, d + 1) + rng.normal(size=n)).astype(np.float32)
    return X, y


def regression(X, y=None, subsample_size=10):
    w = numpyro.sample("w", dist.Normal(0, 1).expand([X.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        mu = numpyro.deterministic("mu", X[idx] @ w)
        numpyro.sample("y", dist.Normal(mu, sigma), obs=None if y is None else y[idx])


def test_minibatch_potential_matches_hand_computation():
    X, y = _data()
    N, n = X.shape[0], 10
    idx = jnp.array([3, 3, 7, 0, 49, 12, 5, 5, 5, 30])
    z = {"w": jnp.array([0.3, -0.2, 1.0]), "sigma": jnp.array(0.4)}  # unconstrained: log sigma
    sigma = np.exp(0.4)
    w = np.array([0.3, -0.2, 1.0])
    Xi, yi = X[np.asarray(idx)], y[np.asarray(idx)]
    loglik = dist.Normal(Xi @ w, sigma).log_prob(yi).sum()
    logprior = (
        dist.Normal(0, 1).log_prob(w).sum() + dist.HalfNormal(2.0).log_prob(sigma) + 0.4
    )  # + log|d sigma / d log sigma|
    expected = -(logprior + N / n * loglik)
    got = minibatch_potential(regression, (X, y))(z, {"data": idx})
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    # the kernel differentiates exactly this function
    kernel = SGLD(regression, step_size=1e-3)
    MCMC(kernel, num_warmup=0, num_samples=1, progress_bar=False).run(random.PRNGKey(0), X, y)
    target = parts.target(kernel.setup, kernel.model, None, None, (X, y), {}, kernel._draw)
    got_kernel, _ = target.potential(z, {"data": idx})
    np.testing.assert_allclose(got_kernel, expected, rtol=1e-5)


def test_recorded_potential_is_the_minibatch_estimate_of_the_step():
    X, y = _data()
    kernel = SGLD(regression, step_size=1e-3)
    state = kernel.init(random.PRNGKey(1), 0, None, (X, y), {})
    new = kernel.sample(state, (X, y), {})
    _, key_idx, _ = random.split(state.rng_key, 3)
    idx, _ = draw_indices(key_idx, kernel.subsample_plates, state.batch_state)
    expected = minibatch_potential(regression, (X, y))(state.z, idx)
    np.testing.assert_allclose(new.potential_energy, expected, rtol=1e-6)
    grad = jax.grad(minibatch_potential(regression, (X, y)))(state.z, idx)
    expected_norm = np.sqrt(sum(float(jnp.sum(g**2)) for g in jax.tree.leaves(grad)))
    np.testing.assert_allclose(new.grad_norm, expected_norm, rtol=1e-5)


def test_find_plates_several_and_nested():
    def model(a, b):
        s = numpyro.sample("s", dist.Normal())
        with numpyro.plate("groups", 40, subsample_size=8, dim=-2) as g:
            with numpyro.plate("items", 30, subsample_size=5, dim=-1) as i:
                numpyro.sample("x", dist.Normal(s, 1), obs=a[g][:, i])
        with numpyro.plate("other", 100, subsample_size=10) as k:
            numpyro.sample("y", dist.Normal(s, 1), obs=b[k])
        with numpyro.plate("full", 7):
            numpyro.sample("u", dist.Normal(s, 1), obs=jnp.zeros(7))

    a, b = jnp.ones((40, 30)), jnp.ones(100)
    plates = find_subsample_plates(model, (a, b))
    assert {(p.name, p.size, p.subsample_size) for p in plates} == {
        ("groups", 40, 8),
        ("items", 30, 5),
        ("other", 100, 10),
    }
    kernel = SGLD(model, step_size=1e-3)
    mcmc = MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False)
    mcmc.run(random.PRNGKey(0), a, b)
    assert kernel.num_data == 100
    assert SGLD(model, step_size=1e-3, num_data=7).num_data == 7

    # the scaling of nested plates: each factor N/n applies
    idx = {"groups": jnp.arange(8), "items": jnp.arange(5), "other": jnp.arange(10)}
    z = {"s": jnp.array(0.5)}
    expected = -(
        dist.Normal().log_prob(0.5)
        + (40 / 8) * (30 / 5) * dist.Normal(0.5, 1).log_prob(1.0) * 40
        + (100 / 10) * dist.Normal(0.5, 1).log_prob(1.0) * 10
        + dist.Normal(0.5, 1).log_prob(0.0) * 7
    )
    np.testing.assert_allclose(minibatch_potential(model, (a, b))(z, idx), expected, rtol=1e-5)


def test_num_data_is_one_without_plate():
    kernel = SGLD(lambda: numpyro.sample("x", dist.Normal()), step_size=0.1)
    MCMC(kernel, num_warmup=1, num_samples=1, progress_bar=False).run(random.PRNGKey(0))
    assert kernel.num_data == 1 and kernel.subsample_plates == ()


def test_epoch_batching_sweeps_without_replacement():
    X, y = _data(n=50)
    kernel = SGLD(partial(regression, subsample_size=10), step_size=1e-4, batching="epoch")
    state = kernel.init(random.PRNGKey(0), 0, None, (X, y), {})
    batch_state = state.batch_state
    seen = []
    for k in random.split(random.PRNGKey(1), 10):
        idx, batch_state = draw_indices(k, kernel.subsample_plates, batch_state)
        seen.append(np.asarray(idx["data"]))
    for epoch in (seen[:5], seen[5:]):
        np.testing.assert_array_equal(np.sort(np.concatenate(epoch)), np.arange(50))
    assert not np.array_equal(np.concatenate(seen[:5]), np.concatenate(seen[5:]))
    # the uneven case drops the remainder of each epoch and never repeats within one
    plates = find_subsample_plates(partial(regression, subsample_size=15), (X, y))
    batch_state = init_batching(random.PRNGKey(2), plates, "epoch")
    for k in random.split(random.PRNGKey(3), 3):
        idx, batch_state = draw_indices(k, plates, batch_state)
        seen.append(np.asarray(idx["data"]))
    assert len(np.unique(np.concatenate(seen[-3:]))) == 45


def test_replacement_batching_is_uniform():
    plates = find_subsample_plates(partial(regression, subsample_size=10), _data(n=50))
    idx, state = draw_indices(random.PRNGKey(0), plates, None)
    assert state is None and idx["data"].shape == (10,)
    draws = jax.vmap(lambda k: draw_indices(k, plates, None)[0]["data"])(
        random.split(random.PRNGKey(1), 5000)
    )
    counts = np.bincount(np.asarray(draws).ravel(), minlength=50)
    expected = 5000 * 10 / 50
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 49 + 4 * np.sqrt(2 * 49)  # chi-square with 49 dof, 4 sd


def test_full_batch_is_the_unscaled_full_data_model():
    X, y = _data()
    params = {"w": jnp.array([0.1, 0.2, 0.3]), "sigma": jnp.array(1.5)}
    got, tr = log_density(full_batch(regression), (X, y), {}, params)
    w = np.array([0.1, 0.2, 0.3])
    expected = (
        dist.Normal(0, 1).log_prob(w).sum()
        + dist.HalfNormal(2.0).log_prob(1.5)
        + dist.Normal(X @ w, 1.5).log_prob(y).sum()
    )
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert tr["mu"]["value"].shape == (50,)
    samples = {"w": jnp.ones((4, 3)), "sigma": jnp.ones(4)}
    assert Predictive(full_batch(regression), samples)(random.PRNGKey(0), X)["y"].shape == (4, 50)
    assert log_likelihood(full_batch(regression), samples, X, y)["y"].shape == (4, 50)


def test_postprocess_returns_constrained_values_and_full_data_deterministics():
    X, y = _data()
    mcmc = MCMC(SGLD(regression, step_size=1e-3), num_warmup=10, num_samples=20, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y, extra_fields=("z.w", "z.sigma"))
    samples = mcmc.get_samples()
    fields = mcmc.get_extra_fields()
    z = {"w": fields["z.w"], "sigma": fields["z.sigma"]}
    assert samples["w"].shape == (20, 3) and samples["mu"].shape == (20, 50)
    assert np.all(samples["sigma"] > 0)
    expected = jax.vmap(
        lambda u: constrain_fn(full_batch(regression), (X, y), {}, u, return_deterministic=True)
    )(z)
    for site in ("w", "sigma"):
        np.testing.assert_allclose(samples[site], expected[site], rtol=1e-6)
    # mu = X @ w is a float32 dot product of length d, summed in whatever order each compiled
    # program picks: each side is within d * eps * sum_j |x_j w_j| of the exact value, so
    # near-cancelling entries may differ by far more than rtol (Higham, Accuracy and
    # Stability, 3.1).
    bound = 2 * X.shape[1] * np.finfo(np.float32).eps * (np.abs(X) @ np.abs(samples["w"]).T).T
    assert np.all(np.abs(samples["mu"] - expected["mu"]) <= bound)
    # the same keys as NUTS on the full model
    nuts = MCMC(NUTS(full_batch(regression)), num_warmup=5, num_samples=5, progress_bar=False)
    nuts.run(random.PRNGKey(0), X, y)
    assert set(nuts.get_samples()) == set(samples)


def test_postprocess_without_deterministic_sites_does_not_replay_the_model():
    def model(y):
        sigma = numpyro.sample("sigma", dist.LogNormal(0, 1))
        with numpyro.plate("data", y.shape[0], subsample_size=5) as idx:
            numpyro.sample("y", dist.Normal(0, sigma), obs=y[idx])

    kernel = SGLD(model, step_size=1e-3)
    mcmc = MCMC(kernel, num_warmup=5, num_samples=5, progress_bar=False)
    mcmc.run(random.PRNGKey(0), jnp.ones(20), extra_fields=("z.sigma",))
    assert not kernel.setup.replay
    np.testing.assert_allclose(
        mcmc.get_samples()["sigma"], np.exp(mcmc.get_extra_fields()["z.sigma"]), rtol=1e-6
    )


def test_non_finite_steps_are_flagged_and_rejected():
    # exp(theta^4) grows so fast that a big step overflows: the chain must not move to inf/nan
    def model():
        theta = numpyro.sample("theta", dist.Normal(0, 1))
        numpyro.factor("wall", -jnp.exp(theta**2))

    mcmc = MCMC(SGLD(model, step_size=0.5), num_warmup=0, num_samples=200, progress_bar=False)
    mcmc.run(random.PRNGKey(0), extra_fields=("potential_energy",))
    theta = mcmc.get_samples()["theta"]
    diverging = mcmc.get_extra_fields()["diverging"]
    assert np.all(np.isfinite(theta))
    assert diverging.sum() > 0
    # a rejected step leaves the position unchanged
    moved = np.diff(np.asarray(theta)) != 0
    assert not np.any(moved[np.asarray(diverging)[1:]])


def _one_step(kernel, x0):
    state = kernel.init(random.PRNGKey(0), 0, {"x": jnp.array([x0], jnp.float32)}, (), {})
    return state, kernel.sample(state, (), {})


def test_rejected_steps_keep_a_finite_state_whatever_failed():
    # U(x) = -x: gradient -1, finite; from x = 3e38 a step of h = 1e38 overflows the position
    def uphill(z):
        return -jnp.sum(z["x"])

    # PSGLD's state is a moving average of the squared gradient: a usable gradient keeps it
    # finite, so a step rejected for its position alone keeps that statistic's update. The
    # overflowed proposal is held apart from the chain's position and rejected by the next
    # step, which goes back to it
    kernel = PSGLD(potential_fn=uphill, step_size=1e38)
    before, after = _one_step(kernel, 3e38)
    assert not bool(after.diverging) and after.z["x"][0] == np.float32(3e38)
    assert not np.isfinite(float(after.proposal["x"][0]))
    after = kernel.sample(after, (), {})
    assert bool(after.diverging) and after.z["x"][0] == np.float32(3e38)
    assert after.proposal["x"][0] == np.float32(3e38) and int(after.num_rejected) == 1
    assert int(after.sampler_state.metric.count) == 1
    np.testing.assert_allclose(after.sampler_state.metric.square_avg["x"], [0.01], rtol=1e-6)
    # Shampoo's state holds roots of an eigendecomposition: it is checked on every step (here
    # it stays finite) and kept with the step that proposed the rejected point
    kernel = ShampooSGLD(potential_fn=uphill, step_size=1e38)
    before, after = _one_step(kernel, 3e38)
    after = kernel.sample(after, (), {})
    assert bool(after.diverging) and after.z["x"][0] == np.float32(3e38)
    assert int(after.sampler_state.metric.count) == 1
    assert all(np.all(np.isfinite(x)) for x in jax.tree.leaves(after.sampler_state))

    # a gradient that is not finite rejects the step and leaves every state untouched
    def cliff(z):
        return -jnp.sum(jnp.sqrt(1.0 - z["x"] ** 2))  # NaN gradient for |x| > 1

    for kernel in (
        PSGLD(potential_fn=cliff, step_size=1e-2),
        AdamSGLD(potential_fn=cliff, step_size=1e-2),
        SGHMC(potential_fn=cliff, step_size=1e-2),
    ):
        before, after = _one_step(kernel, 2.0)
        assert bool(after.diverging) and not np.isfinite(float(after.grad_norm))
        assert float(after.z["x"][0]) == 2.0
        old_leaves, new_leaves = (jax.tree.leaves(s.sampler_state) for s in (before, after))
        for old, new in zip(old_leaves, new_leaves):
            np.testing.assert_array_equal(old, new)
    # and a usable step is accepted: its proposal becomes the position at the next step
    kernel = PSGLD(potential_fn=cliff, step_size=1e-4)
    before, after = _one_step(kernel, 0.5)
    assert not bool(after.diverging) and float(after.proposal["x"][0]) != 0.5
    again = kernel.sample(after, (), {})
    assert not bool(again.diverging) and again.z["x"][0] == after.proposal["x"][0]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_finiteness_check_catches_any_non_finite_entry(bad):
    # the check is a sum over all leaves: one bad entry anywhere, in any float dtype, is caught
    for dtype in (jnp.float32, jnp.float16, jnp.bfloat16):
        tree = {"a": jnp.ones((3, 4), dtype), "b": jnp.zeros(5, dtype), "n": jnp.int32(7)}
        assert bool(tree_all_finite(tree))
        for leaf, index in (("a", (2, 1)), ("b", 0)):
            broken = dict(tree, **{leaf: tree[leaf].at[index].set(bad)})
            assert not bool(tree_all_finite(broken))
    both = {"a": jnp.array([np.inf, -np.inf]), "b": jnp.array([np.nan])}
    assert not bool(tree_all_finite(both))
    # integer leaves are counters (always finite); an empty tree is finite
    assert bool(tree_all_finite({"n": jnp.arange(3)})) and bool(tree_all_finite({}))
    # narrow floats are summed in float32: 1,000 entries of 60,000 exceed float16's range
    # (65,504) as a sum but are finite
    assert bool(tree_all_finite(jnp.full(1000, 60000.0, jnp.float16)))


def test_extra_fields_and_thinning():
    X, y = _data()
    mcmc = MCMC(
        SGHMC(regression, step_size=1e-4),
        num_warmup=10,
        num_samples=40,
        thinning=4,
        progress_bar=False,
    )
    mcmc.run(
        random.PRNGKey(0),
        X,
        y,
        extra_fields=(
            "potential_energy", "grad_norm", "step_size", "sampler_state.integrator.momentum"
        ),
    )
    fields = mcmc.get_extra_fields()
    assert mcmc.get_samples()["w"].shape == (10, 3)
    assert fields["potential_energy"].shape == (10,)
    assert fields["diverging"].dtype == bool
    np.testing.assert_allclose(fields["step_size"], 1e-4)
    assert fields["sampler_state.integrator.momentum"]["w"].shape == (10, 3)
    assert np.all(fields["grad_norm"] > 0)


def test_init_params_and_init_strategy():
    from numpyro.infer import init_to_value

    X, y = _data()
    kernel = SGLD(regression, step_size=1e-12, init_strategy=init_to_value(values={"sigma": 2.0}))
    state = kernel.init(random.PRNGKey(0), 0, None, (X, y), {})
    np.testing.assert_allclose(state.z["sigma"], np.log(2.0), rtol=1e-6)
    init = {"w": jnp.array([1.0, 2.0, 3.0]), "sigma": jnp.array(0.0)}
    mcmc = MCMC(SGLD(regression, step_size=1e-12), num_warmup=0, num_samples=1, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y, init_params=init)
    np.testing.assert_allclose(mcmc.get_samples()["w"][0], [1.0, 2.0, 3.0], atol=1e-4)


def test_potential_fn_interface():
    """SGLD with exact gradients on N(0, I) through ``potential_fn``: the discretised chain's
    law is N(0, 1 / (1 - h/2)) exactly. Means and sds of both coordinates within the
    Bonferroni z (family-wise 1e-3 over 4 comparisons) of ArviZ's ESS-based MCSEs (ESS ~ 200
    for 2000 draws: the chain's autocorrelation time is ~ 2/h = 20 steps); the same draws
    reject sds 50 % wider (expected |z| ~ 9)."""
    def potential(z):
        return 0.5 * jnp.sum(z["x"] ** 2)

    mcmc = MCMC(
        SGLD(potential_fn=potential, step_size=0.1),
        num_warmup=100,  # contraction (1 - h)^100 ~ 3e-5 from the start at 0
        num_samples=2000,
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), init_params={"x": jnp.zeros(2)})
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["x"], np.float64)
    assert x.shape == (1, 2000, 2)
    sd = np.sqrt(1.0 / (1.0 - 0.1 / 2))
    assert_moments(x, 0.0, sd)
    _, z_sd = moment_z_scores(x, 0.0, 1.5 * sd)
    assert np.all(np.abs(z_sd) > bonferroni_z(4)), z_sd


def test_schedules_drive_the_step_size():
    from numpyro_sgrld import cyclical, polynomial_decay

    def model():
        numpyro.sample("x", dist.Normal())

    for schedule in (polynomial_decay(0.1, 1.0, 0.55), cyclical(0.1, num_steps=40, num_cycles=2)):
        mcmc = MCMC(
            SGLD(model, step_size=schedule), num_warmup=0, num_samples=40, progress_bar=False
        )
        mcmc.run(random.PRNGKey(0), extra_fields=("step_size", "i"))
        # a state holds its next step's size, the schedule at its counter i (NumPyro's
        # convention); both sides are float32, evaluated by differently fused programs: they
        # may differ by a few rounding errors of the largest intermediate, the initial step 0.1
        extra = mcmc.get_extra_fields()
        np.testing.assert_array_equal(extra["i"], np.arange(1, 41))
        np.testing.assert_allclose(
            extra["step_size"],
            schedule(jnp.arange(1, 41)),
            rtol=0,
            atol=4 * np.finfo(np.float32).eps * 0.1,
        )


def test_progress_bar_diagnostics_string():
    X, y = _data()
    kernel = SGLD(regression, step_size=1e-3)
    state = kernel.init(random.PRNGKey(0), 0, None, (X, y), {})
    text = kernel.get_diagnostics_str(kernel.sample(state, (X, y), {}))
    assert "h=1.00e-03" in text and "|grad|=" in text


@pytest.mark.slow  # compile-heavy: in the slow set, to keep the default run under 5 minutes
def test_control_variate_estimator_is_unbiased_and_exact_at_its_centre():
    from numpyro_sgrld.core.gradients import control_variate, control_variate_estimate

    X, y = _data(n=6)
    model = partial(regression, subsample_size=1)
    potential = minibatch_potential(model, (X, y))
    full = minibatch_potential(full_batch(model), (X, y))
    centre = {"w": jnp.array([0.5, 0.1, -0.3]), "sigma": jnp.array(-0.2)}
    z = {"w": jnp.array([0.3, -0.2, 1.0]), "sigma": jnp.array(0.4)}
    cv = control_variate(lambda c: full(c, {}), centre)
    exact_value, exact_grad = jax.value_and_grad(lambda c: full(c, {}))(z)
    values, grads = [], []
    for i in range(6):  # every minibatch of size 1, equally likely
        value, grad, _ = control_variate_estimate(potential, cv, z, {"data": jnp.array([i])})
        values.append(value)
        grads.append(grad)
        # at the centre every minibatch gives the exact full-data gradient
        _, at_centre, _ = control_variate_estimate(potential, cv, centre, {"data": jnp.array([i])})
        for k in z:
            np.testing.assert_allclose(at_centre[k], cv.grad[k], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.mean(values), exact_value, rtol=1e-5)
    for k in z:
        mean = np.mean([g[k] for g in grads], axis=0)
        np.testing.assert_allclose(mean, exact_grad[k], rtol=1e-4, atol=1e-4)


def test_control_variate_options():
    X, y = _data()
    model = partial(regression, subsample_size=10)
    with pytest.raises(ValueError, match="control_variate"):
        SGLD(model, step_size=1e-3, control_variate="map")
    with pytest.raises(ValueError, match="mode_steps"):
        SGLD(model, step_size=1e-3, control_variate="mode", mode_steps=0)
    with pytest.raises(ValueError, match="potential_fn"):
        SGLD(potential_fn=lambda z: 0.0, step_size=1e-3, control_variate="mode")
    with pytest.raises(ValueError, match="lacks the latent sites"):
        MCMC(SGLD(model, step_size=1e-3, control_variate={"w": jnp.zeros(3)}), num_warmup=0,
             num_samples=2, progress_bar=False).run(random.PRNGKey(0), X, y)
    # a given centre is used as is; the state carries it
    centre = {"w": jnp.array([1.0, 2.0, 3.0]), "sigma": jnp.array(0.0)}
    mcmc = MCMC(SGLD(model, step_size=1e-4, control_variate=centre), num_warmup=0,
                num_samples=2, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y)
    np.testing.assert_allclose(mcmc.last_state.control_variate.centre["w"], centre["w"])


def test_centre_distance_is_exact_for_a_gaussian_along_an_eigenvector():
    from numpyro_sgrld.core.gradients import centre_distance

    precision = jnp.array([4.0, 25.0, 0.5])
    mode = jnp.array([1.0, -2.0, 0.5])

    def potential(z):
        return 0.5 * jnp.sum(precision * (z["x"] - mode) ** 2)

    for axis, k in ((0, 3.0), (1, 0.25), (2, 7.0)):
        # k posterior sds from the mode along the axis-th eigenvector
        centre = {"x": mode.at[axis].add(k / jnp.sqrt(precision[axis]))}
        grad = jax.grad(potential)(centre)
        np.testing.assert_allclose(centre_distance(potential, centre, grad), k, rtol=1e-5)
    at_mode = {"x": mode}
    assert float(centre_distance(potential, at_mode, jax.grad(potential)(at_mode))) == 0.0
    # negative curvature along the gradient: no mode nearby in that direction
    concave = {"x": jnp.array([1.0])}
    grad = {"x": -2 * concave["x"]}
    assert np.isinf(centre_distance(lambda z: -jnp.sum(z["x"] ** 2), concave, grad))
    # a non-finite centre has no distance (NaN, reported by the kernel)
    nan = {"x": jnp.array([jnp.nan, 0.0, 0.0])}
    assert np.isnan(centre_distance(potential, nan, jax.grad(potential)(nan)))


def test_the_far_centre_warning_reads_the_estimated_distance():
    """The warning's rule on its own (the end-to-end run through MCMC is in the slow set):
    beyond sqrt(d) posterior sds, d the latent dimensions of one chain, and a non-finite
    distance, are reported; within sqrt(d) nothing is."""
    import warnings

    from numpyro_sgrld.core.gradients import ControlVariate, warn_if_far_centre

    centre = {"w": jnp.zeros((2, 3)), "sigma": jnp.zeros(2)}  # two chains, d = 4

    def cv(distance):
        return ControlVariate(centre, jnp.zeros(2), centre, jnp.asarray(distance))

    with pytest.warns(UserWarning, match=r"about 2\.5 posterior standard deviations.*d = 4"):
        warn_if_far_centre(cv([0.5, 2.5]))
    with pytest.warns(UserWarning, match="not finite"):
        warn_if_far_centre(cv([0.5, np.nan]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warn_if_far_centre(cv([1.9, 1.99]))


@pytest.mark.slow
def test_a_far_control_variate_centre_is_reported():
    import warnings

    X, y = _data(n=200)
    model = partial(regression, subsample_size=20)

    def run(centre, **kw):
        kernel = SGLD(model, step_size=1e-4, control_variate=centre, **kw)
        mcmc = MCMC(kernel, num_warmup=0, num_samples=2, num_chains=2,
                    chain_method="vectorized", progress_bar=False)
        mcmc.run(random.PRNGKey(0), X, y)
        return mcmc.last_state.control_variate.distance

    with pytest.warns(UserWarning, match="posterior standard deviations from the mode"):
        far = run({"w": jnp.array([5.0, -5.0, 5.0]), "sigma": jnp.array(0.0)})
    assert far.shape == (2,) and np.all(far > 2.0)  # sqrt(d), d = 4 latent dimensions
    with pytest.warns(UserWarning, match="increase `mode_steps`"):
        run("mode", mode_steps=1)
    # the mode search's centre is close (and reported as such): no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        near = run("mode")
    assert np.all(near < 2.0)


@pytest.mark.slow
def test_start_at_centre_starts_the_chain_at_the_control_variate_centre():
    import warnings

    X, y = _data(n=200)
    model = partial(regression, subsample_size=20)
    centre = {"w": jnp.array([0.5, -0.5, 0.2]), "sigma": jnp.array(0.1)}

    def first_state(cv, **kw):
        kernel = SGLD(model, step_size=1e-4, control_variate=cv, **kw)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # far-centre reports
            return kernel.init(random.PRNGKey(0), 0, None, (X, y), {})

    state = first_state(centre, start_at_centre=True)
    for k in centre:
        np.testing.assert_allclose(state.z[k], centre[k])
    # not asked for: the chain starts at the initial position, not at the centre
    assert not np.allclose(first_state(centre).z["w"], centre["w"])
    # the mode search's own centre, per chain
    kernel = SGLD(model, step_size=1e-4, control_variate="mode", start_at_centre=True)
    state = kernel.init(random.split(random.PRNGKey(1), 2), 0, None, (X, y), {})
    for k in state.z:
        np.testing.assert_array_equal(state.z[k], state.control_variate.centre[k])
    # a centre that is not finite is reported and not used as the start
    bad = {"w": jnp.array([jnp.nan, 0.0, 0.0]), "sigma": jnp.array(0.0)}
    kernel = SGLD(model, step_size=1e-4, control_variate=bad, start_at_centre=True)
    with pytest.warns(UserWarning, match="not finite"):
        state = kernel.init(random.PRNGKey(0), 0, None, (X, y), {})
    assert all(np.all(np.isfinite(v)) for v in state.z.values())


def test_start_at_centre_options():
    model = partial(regression, subsample_size=10)
    with pytest.raises(ValueError, match="control_variate='mode'"):
        SGLD(model, step_size=1e-3, start_at_centre=True)
    with pytest.raises(ValueError, match="True or False"):
        SGLD(model, step_size=1e-3, control_variate="mode", start_at_centre="yes")
