"""No silent wrong answers: one test per class of mistake that used to run and return a wrong
posterior without a word, or crash deep inside JAX/NumPyro (tests/misuse_cases.py
has the full list of cases with their outcomes)."""

import warnings

import haiku as hk
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC
from numpyro.infer.initialization import init_to_value
from scipy import stats

from numpyro_sgrld import (
    PSGLD,
    SGHMC,
    SGLD,
    MongeSGLD,
    ShampooSGLD,
    fast_sampling_loop,
    full_batch,
    random_haiku_module,
    to_inference_data,
)


def _mcmc(kernel, *args, num_warmup=0, num_samples=100, thinning=1, num_chains=1, **kwargs):
    method = "vectorized" if num_chains > 1 else "sequential"
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        thinning=thinning,
        num_chains=num_chains,
        chain_method=method,
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0), *args, **kwargs)
    return mcmc


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)).astype(np.float32)
    y = (X @ np.array([1.0, -0.5, 0.25], np.float32) + 0.5 * rng.normal(size=n)).astype(
        np.float32
    )
    return X, y


def regression(subsample=50):
    def model(X, y=None, prior_scale=1.0):
        w = numpyro.sample("w", dist.Normal(0, prior_scale).expand([3]).to_event(1))
        with numpyro.plate("data", X.shape[0], subsample_size=subsample) as idx:
            numpyro.sample("y", dist.Normal(X[idx] @ w, 0.5), obs=None if y is None else y[idx])

    return model


def _variance_z(draws, variance):
    """z-score of the sample variance of n iid N(0, variance) draws (chi-square law)."""
    n = draws.size
    s2 = np.sum(np.asarray(draws, float) ** 2) / n
    return (s2 - variance) / (variance * np.sqrt(2.0 / n))


# --------------------------------------------------------------------------- 1. empty statistic
CHAINS = 4000
Z_MAX = 4.0  # |z| beyond 4 has probability 6e-5 under the exact law


def _first_steps(kernel, init):
    """The position after one step of CHAINS vectorized chains started at ``init``: the
    second draw (a proposal is recorded once the next step has checked it)."""
    mcmc = _mcmc(kernel, num_samples=2, num_chains=CHAINS, init_params=init)
    draws = np.asarray(mcmc.get_samples(group_by_chain=True)["t"])
    np.testing.assert_array_equal(draws[:, 0], np.asarray(init["t"]))
    return draws[:, 1].ravel()


def test_psgld_first_step_from_the_mode_follows_the_curvature():
    """Started at the mode of N(0, s^2) with exact gradients, PSGLD's first statistic is zero;
    the warm start puts alpha times the curvature 1/s^2 there instead (one Hutchinson probe is
    exact in 1-D), so the first step is N(0, 2 h D1), D1 = 1/(eps + sqrt(alpha)/s). The
    old metric used D = 1/eps = 1e8: a first draw hundreds of sds away."""
    s, h, decay = 0.1, 1e-3, 0.9
    kernel = PSGLD(
        potential_fn=lambda z: 0.5 * jnp.sum((z["t"] / s) ** 2), step_size=h, decay=decay
    )
    draws = _first_steps(kernel, {"t": jnp.zeros(CHAINS)})
    d1 = 1.0 / (1e-8 + np.sqrt(decay) / s)
    assert abs(_variance_z(draws, 2 * h * d1)) < Z_MAX


def test_psgld_empty_statistic_is_the_identity():
    """A coordinate with zero gradient and zero curvature (no information at all) moves as
    SGLD: N(0, 2h), not N(0, 2h/eps)."""
    kernel = PSGLD(potential_fn=lambda z: 0.0 * jnp.sum(z["t"]), step_size=1e-3, eps=0.0)
    draws = _first_steps(kernel, {"t": jnp.zeros(CHAINS)})
    assert abs(_variance_z(draws, 2 * 1e-3)) < Z_MAX


def test_shampoo_warm_start_at_the_mode():
    """ShampooSGLD with update_interval=1 started at the mode of N(0, s^2): the gradient is
    zero, but the statistic is warm-started from the curvature, L = alpha / s^2 (N = 1) at the
    first step, so the first step is N(0, 2h s / sqrt(alpha)), not (alpha eps)^(-1/2) times
    SGLD's."""
    s, h, decay = 0.1, 1e-3, 0.9
    kernel = ShampooSGLD(potential_fn=lambda z: 0.5 * jnp.sum((z["t"] / s) ** 2),
                         step_size=h, update_interval=1, decay=decay)
    draws = _first_steps(kernel, {"t": jnp.zeros(CHAINS)})
    assert abs(_variance_z(draws, 2 * h * s / np.sqrt(decay))) < Z_MAX


def test_shampoo_empty_statistic_is_the_identity():
    """A site with zero gradient and zero curvature (no information at all) moves as SGLD:
    N(0, 2h), not (alpha eps)^(-1/2) times wider."""
    kernel = ShampooSGLD(potential_fn=lambda z: 0.0 * jnp.sum(z["t"]), step_size=1e-3,
                         update_interval=1, decay=0.9)
    draws = _first_steps(kernel, {"t": jnp.zeros(CHAINS)})
    assert abs(_variance_z(draws, 2 * 1e-3)) < Z_MAX


def test_psgld_warm_start_with_a_large_data_set():
    """N^2 beyond the int32 range (N = 60,000, MNIST's size) in the warm start's scaling."""
    kernel = PSGLD(potential_fn=lambda z: 0.5 * jnp.sum(z["t"] ** 2), step_size=1e-3,
                   num_data=60_000)
    state = kernel.init(random.PRNGKey(0), 0, {"t": jnp.zeros(3)}, (), {})
    np.testing.assert_allclose(state.sampler_state.metric.floor["t"], 1.0 / 60_000.0**2, rtol=1e-6)


def test_psgld_from_the_map_on_full_data_stays_in_the_posterior():
    """``init_to_value`` at the exact MAP of a conjugate regression, full-data gradients: the
    chain must stay in the posterior bulk (it used to jump ~50 posterior sds and not come
    back within the run). Every draw within 6 posterior sds of the mean: a N(0, 1) draw is
    beyond 6 with probability 2e-9; even pSGLD's known bias (a wider law, phi * (eps + |t|))
    keeps its mass within 4 sds."""
    X, y = _data()
    prec = X.T.astype(float) @ X / 0.25 + np.eye(3)
    cov = np.linalg.inv(prec)
    mean = cov @ X.T.astype(float) @ y / 0.25
    init = init_to_value(values={"w": jnp.asarray(mean, jnp.float32)})
    kernel = PSGLD(full_batch(regression()), step_size=1e-4, decay=0.9, init_strategy=init)
    w = np.asarray(_mcmc(kernel, X, y, num_samples=2000).get_samples()["w"])
    assert np.max(np.abs(w - mean) / np.sqrt(np.diag(cov))) < 6


# --------------------------------------------------------------------------- 2. potential value
def test_no_draw_where_the_density_is_zero():
    """A factor wall (log density -inf for x <= 0, gradient finite): no recorded draw there,
    the rejected steps counted and flagged (it was 55 % of the draws, none flagged)."""

    def model():
        x = numpyro.sample("x", dist.Normal(0.0, 1.0))
        numpyro.factor("wall", jnp.where(x > 0, 0.0, -jnp.inf))

    kernel = SGLD(model, step_size=1e-2, init_strategy=init_to_value(values={"x": 1.0}))
    # the warning after the run comes from the kernels' own loop (the opt-in)
    with fast_sampling_loop(), pytest.warns(UserWarning, match="steps were rejected"):
        mcmc = _mcmc(kernel, num_samples=2000)
    x = np.asarray(mcmc.get_samples()["x"])
    assert np.all(x > 0)
    rejected = int(mcmc.last_state.num_rejected)
    assert rejected > 0 and rejected == int(np.sum(mcmc.get_extra_fields()["diverging"]))


def test_the_warning_counts_the_rejections_after_the_adaptations_warm_up():
    """With ``step_size=None`` the warm-up rejects steps as part of choosing the step (a rise
    too steep, here also the wall): the warning counts only the sampling steps' rejections,
    which the draws' ``diverging`` marks one by one (thinning 1), and says so."""
    import re

    def model():
        x = numpyro.sample("x", dist.Normal(0.0, 1.0))
        numpyro.factor("wall", jnp.where(x > 0, 0.0, -jnp.inf))

    kernel = SGLD(model, init_strategy=init_to_value(values={"x": 1.0}))
    with fast_sampling_loop(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = _mcmc(kernel, num_warmup=400, num_samples=2000, num_chains=2)
    messages = [str(w.message) for w in caught if "steps were rejected" in str(w.message)]
    assert len(messages) == 1
    found = re.match(r"(\d+) of (\d+) steps were rejected", messages[0])
    sampled = int(np.sum(mcmc.get_extra_fields()["diverging"]))
    assert int(found.group(2)) == 2 * 2000 and int(found.group(1)) == sampled > 0
    assert "after the step-size adaptation's 400 warm-up steps" in messages[0]
    # the warm-up's own rejections are there, in the state's count, and not in the warning
    assert int(np.sum(np.asarray(mcmc.last_state.num_rejected))) > sampled


def test_potential_fn_infinite_outside_a_box():
    pot = lambda z: jnp.where(jnp.abs(z["t"]) < 1, 0.5 * z["t"] ** 2, jnp.inf)  # noqa: E731
    with fast_sampling_loop(), pytest.warns(UserWarning, match="steps were rejected"):
        mcmc = _mcmc(SGLD(potential_fn=pot, step_size=1e-2), num_samples=2000,
                     init_params={"t": jnp.zeros(())})
    assert np.all(np.abs(np.asarray(mcmc.get_samples()["t"])) < 1)


# --------------------------------------------------------------------------- 3. local latents
def test_local_latent_in_subsample_plate_is_refused():
    def model(y):
        mu = numpyro.sample("mu", dist.Normal())
        with numpyro.plate("groups", y.shape[0], subsample_size=10) as idx:
            b = numpyro.sample("b", dist.Normal(mu, 1.0))
            numpyro.sample("y", dist.Normal(b, 1.0), obs=y[idx])

    with pytest.raises(ValueError, match="Latent site 'b' is inside the subsample plate 'groups'"):
        _mcmc(SGLD(model, step_size=1e-3), jnp.zeros(100))


def test_missing_observations_are_explained():
    X, _ = _data()
    with pytest.raises(ValueError, match="'y' is inside the subsample plate.*obs=None"):
        _mcmc(SGLD(regression(), step_size=1e-3), X)


# --------------------------------------------------------------------------- 4. subsample size
@pytest.mark.parametrize("size", [0, -5, 20.5])
def test_bad_subsample_size_is_refused(size):
    X, y = _data()
    with pytest.raises(ValueError, match=f"subsample_size={size}: it must be an integer"):
        _mcmc(SGLD(regression(size), step_size=1e-4), X, y)


# --------------------------------------------------------------------------- 5. num_data
def _num_data(model, *args):
    kernel = PSGLD(model, step_size=1e-4)
    kernel.init(random.PRNGKey(0), 0, None, args, {})
    return kernel.num_data


def test_num_data_is_continuous_in_the_subsample_size():
    X, y = _data()
    assert _num_data(regression(199), X, y) == _num_data(regression(200), X, y) == 200
    assert _num_data(full_batch(regression(50)), X, y) == 200


def test_num_data_without_plates_is_one():
    def model(y):
        mu = numpyro.sample("mu", dist.Normal())
        numpyro.sample("y", dist.Normal(mu, 1.0).expand([5]).to_event(1), obs=y)

    assert _num_data(model, jnp.zeros(5)) == 1


# --------------------------------------------------------------------------- 6. plate vs data
def test_plate_larger_than_the_data_is_refused():
    X, y = _data()

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("data", 400, subsample_size=50) as idx:
            numpyro.sample("y", dist.Normal(X[idx] @ w, 0.5), obs=y[idx])

    with pytest.raises(ValueError, match="indexes past the end of its data.*'data' \\(size 400\\)"):
        _mcmc(SGLD(model, step_size=1e-4), X, y)


def test_observation_that_broadcasts_is_refused():
    X, y = _data()
    with pytest.raises(ValueError, match="counted 50 times"):
        _mcmc(SGLD(regression(), step_size=1e-4), X, y[:, None])


# --------------------------------------------------------------------------- 7. NumPy data
@pytest.mark.slow  # compile-heavy: in the slow set, to keep the default run under 5 minutes
def test_numpy_data_with_a_keyword_argument_and_chains():
    X, y = _data()
    mcmc = _mcmc(SGLD(regression(), step_size=1e-4), X, y=y, prior_scale=1.0, num_samples=10)
    assert mcmc.get_samples()["w"].shape == (10, 3)
    seq = MCMC(SGLD(regression(), step_size=1e-4), num_warmup=0, num_samples=10, num_chains=2,
               chain_method="sequential", progress_bar=False)
    seq.run(random.PRNGKey(0), X, y, prior_scale=1.0)
    assert seq.get_samples(group_by_chain=True)["w"].shape == (2, 10, 3)


# --------------------------------------------------------------------------- 8. numbers
@pytest.mark.parametrize(
    "make",
    [
        lambda m: PSGLD(m, step_size=1e-2, decay=np.float32(0.95), num_data=np.int64(1)),
        lambda m: SGHMC(m, step_size=1e-2, friction=np.float32(0.1)),
        lambda m: SGLD(m, step_size=jnp.array(1e-2), temperature=jnp.array(1.0)),
        lambda m: MongeSGLD(m, step_size=np.float32(1e-2), alpha2=np.float64(0.5)),
        lambda m: ShampooSGLD(m, step_size=1e-2, update_interval=np.int64(10)),
        lambda m: SGLD(m, step_size=lambda t: 1e-2),
        lambda m: SGLD(m, step_size=lambda t: jnp.where(t < 100, 1e-2, 5e-3)),
    ],
)
def test_numpy_and_jax_scalars_are_numbers(make):
    def model():
        numpyro.sample("theta", dist.Normal())

    assert _mcmc(make(model), num_samples=5).get_samples()["theta"].shape == (5,)


def test_schedule_with_python_control_flow_is_explained():
    with pytest.raises(ValueError, match="cannot be traced.*jnp.where"):
        SGLD(lambda: None, step_size=lambda t: 1e-2 if t < 100 else 1e-3)


@pytest.mark.parametrize("bad", [True, np.float32(1.5), np.nan, "0.9"])
def test_decay_out_of_range_names_the_value(bad):
    with pytest.raises(ValueError, match="`decay` must be a finite number in \\[0, 1\\)"):
        PSGLD(lambda: None, step_size=1e-3, decay=bad)


# --------------------------------------------------------------------------- 9. init and fields
@pytest.mark.parametrize(
    "init, match",
    [
        ({"weights": jnp.zeros(3)}, "unknown: \\['weights'\\]; missing: \\['w'\\]"),
        ({"w": jnp.zeros(4)}, "`init_params\\['w'\\]` has shape \\(4,\\); the model needs"),
        ({"w": jnp.array([0.0, jnp.nan, 0.0])}, "'w' is not finite \\(first at index \\(1,\\)"),
    ],
)
def test_bad_init_params_name_the_site(init, match):
    X, y = _data()
    with pytest.raises(ValueError, match=match):
        _mcmc(SGLD(regression(), step_size=1e-4), X, y, init_params=init)


def test_init_params_need_a_chain_axis_for_vectorized_chains():
    X, y = _data()
    # 3 chains and a site of size 3: NumPyro's leading-axis check passes, ours does not
    with pytest.raises(ValueError, match="a leading axis of 3 for the vectorized chains"):
        _mcmc(SGLD(regression(), step_size=1e-4), X, y, num_chains=3,
              init_params={"w": jnp.zeros(3)})


def test_init_strategy_must_be_callable():
    with pytest.raises(ValueError, match="`init_strategy` must be a NumPyro init strategy"):
        SGLD(lambda: None, step_size=1e-3, init_strategy="uniform")


def test_unknown_extra_field_lists_the_state_fields():
    def model():
        numpyro.sample("theta", dist.Normal())

    with pytest.raises(ValueError, match="fields \\['i', 'z'.*num_rejected"):
        _mcmc(SGLD(model, step_size=1e-2), extra_fields=("accept_prob",))
    # a kernel field under its old path (before the state named metric and integrator)
    with pytest.raises(ValueError, match="SamplerState has no field 'momentum'.*'integrator'"):
        _mcmc(SGHMC(model, step_size=1e-2), extra_fields=("sampler_state.momentum",))


# --------------------------------------------------------------------------- 10. data
@pytest.mark.parametrize(
    "spoil, match",
    [
        (lambda X, y: y.__setitem__(117, np.nan), "first at 117 of plate 'data': its observed"),
        (lambda X, y: X.__setitem__((142, 1), np.inf), "first at 142 of plate 'data': a covariate"),
    ],
)
def test_non_finite_data_point_is_named(spoil, match):
    X, y = _data()
    spoil(X, y)
    with pytest.raises(ValueError, match=match):
        _mcmc(SGLD(regression(), step_size=1e-4), X, y)


def test_observation_outside_the_support_is_named():
    def model(y):
        rate = numpyro.sample("rate", dist.LogNormal())
        with numpyro.plate("data", y.shape[0], subsample_size=20) as idx:
            numpyro.sample("y", dist.Exponential(rate), obs=y[idx])

    y = np.abs(np.random.default_rng(0).normal(size=100)).astype(np.float32)
    y[63] = -1.0
    with pytest.raises(ValueError, match="first at 63 of plate 'data'"):
        _mcmc(SGLD(model, step_size=1e-4), y)


def test_nan_in_a_haiku_network_input_is_named():
    X, y = _data()
    X[105, 0] = np.nan
    net = hk.without_apply_rng(hk.transform(lambda x: hk.nets.MLP([4, 1])(x)))

    def model(X, y):
        f = random_haiku_module("net", net, (1, 3), dist.Normal(0, 1))
        with numpyro.plate("data", X.shape[0], subsample_size=50) as idx:
            numpyro.sample("y", dist.Normal(f(X[idx])[..., 0], 0.5), obs=y[idx])

    with pytest.raises(ValueError, match="first at 105 of plate 'data'"):
        _mcmc(SGLD(model, step_size=1e-5), X, y)


# --------------------------------------------------------------------------- rejected steps
def _stuck_model():
    # jnp.where's trap: the value is finite everywhere, the gradient NaN for x > 1. A chain
    # would be stuck there for good; each proposal beyond 1 is rejected instead (the next step
    # finds its gradient not finite) and the chain goes back
    x = numpyro.sample("x", dist.Normal(0.0, 1.0))
    numpyro.factor("f", jnp.where(x > 1, 0.0, 0.1 * jnp.sqrt(1.0 - x)))


def test_rejected_steps_are_counted_whatever_the_thinning():
    kernel = SGLD(_stuck_model, step_size=0.1, init_strategy=init_to_value(values={"x": 0.0}))
    mcmc = MCMC(kernel, num_warmup=0, num_samples=2000, thinning=100, progress_bar=False)
    # the warning and the per-window `diverging` come from the kernels' own loop (the opt-in)
    with fast_sampling_loop(), pytest.warns(UserWarning, match="steps were rejected"):
        mcmc.run(random.PRNGKey(0))
    extra = mcmc.get_extra_fields()
    counts = np.asarray(extra["num_rejected"])
    # the count is cumulative over every step, recorded or not
    assert counts[-1] == int(mcmc.last_state.num_rejected) > 20
    # each recorded draw's `diverging` says whether its thinning window had a rejection
    windows = np.diff(np.concatenate([[0], counts])) > 0
    np.testing.assert_array_equal(np.asarray(extra["diverging"]), windows)
    idata = to_inference_data(mcmc, log_likelihood=False)
    assert int(idata.sample_stats["num_rejected"].values[0, -1]) == counts[-1]
    assert "rejected=" in kernel.get_diagnostics_str(mcmc.last_state)


def test_print_summary_counts_divergences_with_thinning(capsys):
    # at h = 1 a proposal from x <= 1 lands beyond 1, and is rejected, about half the time:
    # a recorded step is flagged with that probability
    kernel = SGLD(_stuck_model, step_size=1.0, init_strategy=init_to_value(values={"x": 0.0}))
    mcmc = MCMC(kernel, num_warmup=0, num_samples=2000, thinning=100, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(random.PRNGKey(0))
    mcmc.print_summary()
    shown = int(capsys.readouterr().out.split("Number of divergences:")[1].split()[0])
    assert shown == int(np.sum(mcmc.get_extra_fields()["diverging"])) > 0


def test_no_warning_when_nothing_is_rejected():
    def model():
        numpyro.sample("theta", dist.Normal())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc = _mcmc(SGLD(model, step_size=1e-2), num_samples=200, thinning=10)
    assert not [w for w in caught if "rejected" in str(w.message)]
    assert int(mcmc.last_state.num_rejected) == 0


def test_first_step_law_has_the_right_power():
    """The chi-square z-score used above is calibrated: on exact N(0, v) draws it is a
    standard normal (here: 200 repetitions, its mean within 4 standard errors of 0)."""
    rng = np.random.default_rng(0)
    z = [_variance_z(rng.normal(0, np.sqrt(2.0), CHAINS), 2.0) for _ in range(200)]
    assert abs(np.mean(z)) < 4 / np.sqrt(200)
    assert stats.kstest(z, "norm").pvalue > 1e-4
