"""The composition entry point: metric × integrator × gradient estimator.

Exact laws of composed kernels that no named kernel covers, the refusals of pieces that do not
fit, the auxiliary-value channel and the gradient oracle.
"""

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC
from scipy.linalg import solve_discrete_lyapunov

from numpyro_sgrld import (
    PSGLD,
    SGHMC,
    SGLD,
    SGMCMC,
    auxiliary,
    gradients,
    integrators,
    metrics,
)
from numpyro_sgrld.core.acceptance import Averages

# N(0, diag sigma^2) in three groups of REPLICAS independent coordinates each
SIGMA = np.array([0.5, 1.0, 2.0])
REPLICAS = 1000
Z_LEVEL = 4.0  # |z| < 4 for each of a handful of comparisons: family-wise level below 1e-3


def _gaussian(z):
    return 0.5 * jnp.sum((z["x"] / SIGMA) ** 2)


def _sghmc_law(k, friction, scale_noise):
    r"""Stationary covariance of (theta, v) for the linear chain
    v' = (1 - a) v - k theta + c xi, theta' = theta + v', c^2 = scale_noise, per coordinate."""
    A = np.array([[1.0 - k, 1.0 - friction], [-k, 1.0 - friction]])
    return solve_discrete_lyapunov(A, scale_noise * np.ones((2, 2)))


def _draws(kernel, field, num_warmup=500, num_samples=3000, thinning=5):
    mcmc = MCMC(kernel, num_warmup=num_warmup, num_samples=num_samples, thinning=thinning,
                progress_bar=False)
    mcmc.run(random.PRNGKey(0), init_params={"x": jnp.zeros((REPLICAS, 3))},
             extra_fields=(field,) if field else ())
    if field:
        return np.asarray(mcmc.get_extra_fields()[field]["x"], np.float64)
    return np.asarray(mcmc.get_samples()["x"], np.float64)


def _z_of_second_moment(draws, expected):
    """z-scores, per group, of the mean of x^2 (the mean of x is 0) against ``expected``:
    standard error sd(x^2) / sqrt(ESS), ESS over the replicas as independent chains."""
    z = []
    for j in range(3):
        sq = draws[:, :, j].T ** 2  # (chains = replicas, draws)
        ess = float(effective_sample_size(sq[:, :, None])[0])
        z.append((sq.mean() - expected[j]) / (sq.std() / np.sqrt(ess)))
    return np.array(z)


def _sghmc_expectations(h, friction, scale):
    k = h * scale / SIGMA**2
    laws = [_sghmc_law(kj, friction, 2 * friction * h * sj) for kj, sj in zip(k, scale)]
    return np.array([law[0, 0] for law in laws]), np.array([law[1, 1] for law in laws])


@pytest.mark.parametrize(
    "composition",
    [pytest.param("identity", marks=pytest.mark.slow),
     pytest.param("diagonal", marks=pytest.mark.slow), "rmsprop"],
)
def test_momentum_integrator_with_any_metric_has_the_discretised_law(composition):
    r"""SGHMC's momentum step with a constant metric D on N(0, diag sigma^2), exact gradients:
    per coordinate (theta, v) is the linear chain v' = (1 - a) v - h D theta / sigma^2 +
    sqrt(2 a h D) xi, theta' = theta + v', whose stationary covariance solves a discrete
    Lyapunov equation exactly. Compared: E[theta^2] and E[v^2] in each group, z-scores with
    ESS-based standard errors. The discretisation bias (2 to 9 % of the variance here) is many
    standard errors, so a chain with the wrong law (posterior variance, D on the noise instead
    of D^{1/2}, D missing from the drift) fails.

    - ``identity``: the SGHMC preset (D = I);
    - ``diagonal``: ``metrics.diagonal(s)`` × ``integrators.sghmc``: SGHMC with mass D^{-1};
    - ``rmsprop``: ``metrics.rmsprop`` × ``integrators.sghmc`` with eps = lambda = 1e4 ≫
      sqrt(V) (at most 2 here): D = 1/(lambda + sqrt(V)) is 1e-4 to within 2e-4 relative, far
      below the Monte Carlo error, so the constant-D law applies.
    """
    friction = 0.1
    if composition == "identity":
        h, scale = 0.05, np.ones(3)
        kernel = SGHMC(potential_fn=_gaussian, step_size=h, friction=friction)
    elif composition == "diagonal":
        h, scale = 0.2, np.array([0.5, 1.0, 4.0])
        kernel = SGMCMC(potential_fn=_gaussian, step_size=h,
                        metric=metrics.diagonal({"x": jnp.asarray(scale, jnp.float32)}),
                        integrator=integrators.sghmc(friction=friction))
    else:
        h, scale = 2e3, np.full(3, 1e-4)
        kernel = SGMCMC(potential_fn=_gaussian, step_size=h,
                        metric=metrics.rmsprop(decay=0.99, eps=1e4),
                        integrator=integrators.sghmc(friction=friction))
    theta_var, v_var = _sghmc_expectations(h, friction, scale)
    assert np.max(np.abs(theta_var / SIGMA**2 - 1)) > 0.05  # the law is not the posterior's
    theta = _draws(kernel, None)
    momentum = _draws(kernel, "sampler_state.integrator.momentum")
    z_theta = _z_of_second_moment(theta, theta_var)
    z_v = _z_of_second_moment(momentum, v_var)
    assert np.all(np.abs(z_theta) < Z_LEVEL), (z_theta, theta_var)
    assert np.all(np.abs(z_v) < Z_LEVEL), (z_v, v_var)
    # and the posterior variance is rejected where the bias is largest
    assert np.max(np.abs(_z_of_second_moment(theta, SIGMA**2))) > Z_LEVEL


def test_langevin_with_a_constant_metric_has_the_discretised_law():
    r"""``metrics.diagonal(s)`` × ``integrators.langevin`` on N(0, diag sigma^2), exact
    gradients: theta' = (1 - k) theta + sqrt(2 h s) xi, k = h s / sigma^2, stationary variance
    sigma^2 / (1 - k/2) (SGLD's law with the step h s). z-tests with ESS-based errors."""
    h, scale = 0.2, np.array([0.5, 1.0, 4.0])
    kernel = SGMCMC(potential_fn=_gaussian, step_size=h,
                    metric=metrics.diagonal({"x": jnp.asarray(scale, jnp.float32)}))
    k = h * scale / SIGMA**2
    expected = SIGMA**2 / (1 - k / 2)
    theta = _draws(kernel, None, num_samples=1500)
    z = _z_of_second_moment(theta, expected)
    assert np.all(np.abs(z) < Z_LEVEL), (z, expected)
    assert np.max(np.abs(_z_of_second_moment(theta, SIGMA**2))) > Z_LEVEL


def test_presets_are_compositions():
    """A preset is the composition it names: same draws, bit for bit."""
    def model():
        numpyro.sample("x", dist.Normal(0.0, 1.0).expand([3]).to_event(1))

    def run(kernel):
        mcmc = MCMC(kernel, num_warmup=20, num_samples=30, progress_bar=False)
        mcmc.run(random.PRNGKey(3))
        return np.asarray(mcmc.get_samples()["x"])

    np.testing.assert_array_equal(
        run(SGHMC(model, 0.01, friction=0.2, resample_momentum_every=4)),
        run(SGMCMC(model, 0.01, metric=metrics.identity(),
                   integrator=integrators.sghmc(friction=0.2, resample_momentum_every=4))),
    )
    np.testing.assert_array_equal(run(SGLD(model, 0.01)), run(SGMCMC(model, 0.01)))


# ----------------------------------------------------------------------------- refusals
def _model():
    numpyro.sample("x", dist.Normal())


def test_pieces_that_do_not_fit_are_refused_when_the_kernel_is_built():
    with pytest.raises(ValueError, match="integrator 'sghmc' cannot carry correction='exact'"):
        SGMCMC(_model, 0.1, metric=metrics.rmsprop(), integrator=integrators.sghmc(),
               correction="exact")
    with pytest.raises(ValueError, match="integrator 'adaptive_drift' cannot carry"):
        SGMCMC(_model, 0.1, metric=metrics.rmsprop(), integrator=integrators.adaptive_drift(),
               correction="hutchinson")
    with pytest.raises(ValueError, match="metric 'diagonal' cannot carry correction"):
        SGMCMC(_model, 0.1, metric=metrics.diagonal(2.0), correction="exact")
    with pytest.raises(ValueError, match="metric 'identity' cannot carry correction"):
        SGMCMC(_model, 0.1, correction="exact")
    with pytest.raises(TypeError, match="metric factory: call it"):
        SGMCMC(_model, 0.1, metric=metrics.rmsprop)
    with pytest.raises(TypeError, match="`integrator` must be"):
        SGMCMC(_model, 0.1, integrator="sghmc")
    with pytest.raises(TypeError, match="`gradient` must be"):
        SGMCMC(_model, 0.1, gradient="cv")
    with pytest.raises(ValueError, match="not both"):
        SGMCMC(_model, 0.1, gradient=gradients.minibatch(), control_variate="mode")
    with pytest.raises(ValueError, match="'control_variates'.*not available with `potential_fn`"):
        SGMCMC(potential_fn=_gaussian, step_size=0.1,
               gradient=gradients.control_variates("mode"))
    with pytest.raises(ValueError, match=r"`scale` of metrics.diagonal must be finite and > 0"):
        metrics.diagonal({"x": jnp.array([1.0, 0.0])})


class _SeenState(NamedTuple):
    seen: jnp.ndarray


def _aux_metric(name="inputs"):
    """A metric that records the auxiliary value ``name`` in its state (identity otherwise)."""

    def init(position):
        return _SeenState(jnp.zeros(4))

    def update(grad, state, position, context):
        precond, _ = metrics.identity().update(grad, (), position)
        return precond, _SeenState(context.aux[name])

    return metrics.Metric(init, update, name="aux", traits=(Averages(), metrics.Aux((name,))))


def _aux_model(X, subsample_size=4):
    w = numpyro.sample("w", dist.Normal())
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        auxiliary("inputs", X[idx] * w)
        numpyro.sample("y", dist.Normal(X[idx] * w, 1.0), obs=-X[idx])


def test_a_metric_reads_the_models_auxiliary_values_of_the_same_minibatch():
    """The metric sees ``X[idx] * w`` at the step's position and minibatch (drawn by the
    adapter): recorded in its state, it must equal the value recomputed from the recorded
    position and the indices drawn with the same key."""
    X = jnp.arange(10.0)
    kernel = SGMCMC(_aux_model, 1e-3, metric=_aux_metric())
    state = kernel.init(random.PRNGKey(0), 0, None, (X,), {})
    after = kernel.sample(state, (X,), {})
    from numpyro_sgrld.data.subsample import draw_indices

    _, key_idx, _ = random.split(state.rng_key, 3)
    idx, _ = draw_indices(key_idx, kernel.subsample_plates, state.batch_state)
    np.testing.assert_allclose(
        after.sampler_state.metric.seen, X[idx["data"]] * state.z["w"], rtol=1e-6
    )


def test_a_metric_needing_auxiliary_values_the_model_lacks_is_refused():
    with pytest.raises(ValueError, match=r"metric 'aux' reads the auxiliary values \['acts'\]"):
        MCMC(SGMCMC(_aux_model, 1e-3, metric=_aux_metric("acts")), num_warmup=1,
             num_samples=1, progress_bar=False).run(random.PRNGKey(0), jnp.arange(10.0))
    with pytest.raises(ValueError, match="a kernel built from `potential_fn` has none"):
        SGMCMC(potential_fn=_gaussian, step_size=0.1, metric=_aux_metric())


def test_auxiliary_sites_do_nothing_outside_the_kernels():
    from numpyro.infer import NUTS, Predictive

    X = jnp.arange(10.0)
    mcmc = MCMC(NUTS(_aux_model), num_warmup=20, num_samples=20, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, None)
    assert set(mcmc.get_samples()) == {"w"}
    assert "inputs" not in Predictive(_aux_model, num_samples=2)(random.PRNGKey(1), X, None)
    assert auxiliary("free", 3.0) == 3.0


# ----------------------------------------------------------------------------- the oracle
def _probing_integrator():
    """Langevin, but it also asks the oracle for the gradient at a far point (as a splitting
    scheme asks for an intermediate one) and keeps it in its state."""

    class ProbeState(NamedTuple):
        value: jnp.ndarray
        grad: jnp.ndarray

    def init(position, key, step_size, temperature):
        return ProbeState(jnp.zeros(()), jnp.zeros(()))

    def step(key, position, state, grad, precond, setting):
        step_size, temperature, _, oracle = setting
        value, far = oracle(jax.tree.map(lambda x: x + 100.0, position))
        new = integrators.langevin_step(key, position, grad, precond, step_size, temperature)
        return new, ProbeState(value, far["x"])

    return integrators.Integrator(init, step, name="probe")


def test_an_integrator_may_ask_the_oracle_without_changing_what_the_kernel_reports():
    """``potential_energy`` and ``grad_norm`` stay those of the step's start, and the oracle
    gives the same estimator at the asked point (U = x^2 / 2: value 5000 + 100 x, gradient
    x + 100)."""
    kernel = SGMCMC(potential_fn=lambda z: 0.5 * z["x"] ** 2, step_size=0.01,
                    integrator=_probing_integrator())
    state = kernel.init(random.PRNGKey(0), 0, {"x": jnp.array(1.5)}, (), {})
    after = kernel.sample(state, (), {})
    np.testing.assert_allclose(after.potential_energy, 0.5 * 1.5**2, rtol=1e-6)
    np.testing.assert_allclose(after.grad_norm, 1.5, rtol=1e-6)
    np.testing.assert_allclose(after.sampler_state.integrator.grad, 101.5, rtol=1e-6)
    np.testing.assert_allclose(after.sampler_state.integrator.value, 0.5 * 101.5**2, rtol=1e-6)


def test_the_control_variate_oracle_is_shifted_like_the_estimate():
    """With control variates the oracle's gradient at z is grad U_B(z) + grad U(c) -
    grad U_B(c): on a potential whose minibatch gradient equals the full one (one data point
    per plate, N = 1) that is the exact gradient at z."""
    def model(y):
        x = numpyro.sample("x", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", 1, subsample_size=1) as idx:
            numpyro.sample("y", dist.Normal(x, 1.0), obs=y[idx])

    y = jnp.array([2.0])
    kernel = SGMCMC(model, 0.01, integrator=_probing_integrator(),
                    control_variate={"x": jnp.array(0.3)})
    state = kernel.init(random.PRNGKey(0), 0, {"x": jnp.array(1.0)}, (y,), {})
    after = kernel.sample(state, (y,), {})
    far = 101.0  # x + 100
    np.testing.assert_allclose(after.sampler_state.integrator.grad, far + (far - 2.0), rtol=1e-5)


# ----------------------------------------------------------------------------- transforms
# a metric whose state is updated under lax.cond (the other pairs in the slow set)
PIECES = [pytest.param("shampoo", "langevin", marks=pytest.mark.slow),
          pytest.param("monge", "sghmc", marks=pytest.mark.slow),
          pytest.param("wenzel", "langevin", marks=pytest.mark.slow),
          pytest.param("rmsprop", "adaptive_drift", marks=pytest.mark.slow)]


def _piece(name):
    return {
        "identity": metrics.identity,
        "diagonal": lambda: metrics.diagonal(0.5),
        "rmsprop": metrics.rmsprop,
        "monge": metrics.monge,
        "shampoo": lambda: metrics.shampoo(eps=0.1, update_interval=1),  # well conditioned
        "wenzel": lambda: metrics.wenzel(update_interval=2),
        "langevin": integrators.langevin,
        "sghmc": lambda: integrators.sghmc(resample_momentum_every=2),
        "adaptive_drift": integrators.adaptive_drift,
    }[name]()


@pytest.mark.parametrize("metric_name, integrator_name", PIECES)
def test_states_cross_jit_vmap_and_shard_map(metric_name, integrator_name):
    """Two steps of metric × integrator, as pure functions of NamedTuple states: the same
    numbers under ``jit``, batched by ``vmap`` and inside ``shard_map`` (a one-axis mesh of the
    available devices, states replicated)."""
    from jax.sharding import Mesh, PartitionSpec

    metric, integrator = _piece(metric_name), _piece(integrator_name)
    position = {"w": jnp.linspace(-1.0, 1.0, 6).reshape(2, 3), "b": jnp.array(0.3)}

    def two_steps(key, position):
        m_state = metric.init(position)
        i_state = integrator.init(position, key, 0.01, 1.0)
        for step in range(2):
            grad = jax.tree.map(lambda x: 3.0 * x + 1.0, position)
            context = metrics.StepContext(num_data=10, steps_per_epoch=2, step=step)
            precond, m_state = metric.update(grad, m_state, position, context)
            key, key_step = random.split(key)
            position, i_state = integrator.step(key_step, position, i_state, grad, precond,
                                                integrators.StepSetting(0.01, 1.0, context))
        return position, m_state, i_state

    key = random.PRNGKey(0)
    plain = jax.jit(two_steps)(key, position)
    keys = jnp.stack([key, random.PRNGKey(1)])
    batched = jax.vmap(two_steps, in_axes=(0, None))(keys, position)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    sharded = jax.shard_map(two_steps, mesh=mesh, in_specs=(PartitionSpec(), PartitionSpec()),
                            out_specs=PartitionSpec())(key, position)
    for other in (jax.tree.map(lambda x: x[0], batched), sharded):
        for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(other), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def _normal_model():
    numpyro.sample("x", dist.Normal(0.0, 1.0).expand([3]).to_event(1))


def _short_draws(kernel, **kw):
    """Short runs: the verdict's warning that they cannot be trusted is expected."""
    mcmc = MCMC(kernel, num_warmup=kw.get("num_warmup", 20), num_samples=30, progress_bar=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The draws cannot be trusted")
        mcmc.run(random.PRNGKey(4))
    return np.asarray(mcmc.get_samples()["x"]), mcmc.last_state


def test_an_algorithm_value_gives_the_draws_of_its_pieces():
    """``SGMCMC(model, algorithm=compose(...))`` is the kernel of the same pieces given one by
    one, Γ included, and the preset it names."""
    from numpyro_sgrld import SGMCMC, compose, correction

    algorithm = compose(metrics.rmsprop(), integrators.langevin(),
                        correction=correction.hutchinson())
    by_value, _ = _short_draws(SGMCMC(_normal_model, 1e-3, algorithm=algorithm))
    by_pieces, _ = _short_draws(SGMCMC(_normal_model, 1e-3, metric=metrics.rmsprop(),
                                 integrator=integrators.langevin(), correction="hutchinson"))
    np.testing.assert_array_equal(by_value, by_pieces)
    preset, _ = _short_draws(PSGLD(_normal_model, 1e-3, correction="hutchinson"))
    np.testing.assert_array_equal(by_value, preset)


def test_an_algorithm_is_refused_with_the_pieces_it_holds():
    from numpyro_sgrld import SGMCMC, compose

    algorithm = compose(metrics.identity(), integrators.langevin())
    with pytest.raises(ValueError, match="`algorithm=` already holds `metric`, `temperature`"):
        SGMCMC(_normal_model, algorithm=algorithm, metric=metrics.identity(), temperature=1.0)
    with pytest.raises(TypeError, match="`algorithm` must be a numpyro_sgrld.Algorithm"):
        SGMCMC(_normal_model, algorithm=(metrics.identity(), integrators.langevin()))
    with pytest.raises(ValueError, match="integrator 'sghmc' cannot carry correction='exact'"):
        compose(metrics.rmsprop(), integrators.sghmc(friction=0.1), correction="exact")
    with pytest.raises(ValueError, match="Unknown correction_form='late'"):
        compose(metrics.rmsprop(), integrators.langevin(),
                correction=__import__("numpyro_sgrld").correction.exact("late"))


def test_the_step_takes_its_step_size_as_an_input_and_its_state_holds_no_warm_up():
    """The algorithm's state has no warm-up, host, diagnostics or step-size field; the host's
    record holds it as one part of one tree beside the warm-up's state and the next step's size
    (no copy per transition), and the step uses whatever step size it is given."""
    from numpyro_sgrld import ChainState, SGState, compose
    from numpyro_sgrld.core.gradients import Target
    from numpyro_sgrld.warmup import WarmupState

    assert not {"warmup", "adaptation", "monitor", "batch_state", "rng_key", "equipartition",
                "configurational_temperature", "step_size"} & set(ChainState._fields)
    assert not set(ChainState._fields) & set(SGState._fields)
    _, state = _short_draws(SGLD(_normal_model), num_warmup=200)
    assert isinstance(state, SGState) and isinstance(state.warmup, WarmupState)
    assert isinstance(state.chain, ChainState)
    assert state.adaptation is state.warmup.step and state.z is state.chain.z

    algorithm = compose(metrics.identity(), integrators.langevin(), temperature=0.0)
    target = Target(lambda z, idx: (0.5 * jnp.sum(z["x"] ** 2), {}), None,
                    lambda key, batch_state: ({}, batch_state))
    start = algorithm.begin(random.PRNGKey(0), {"x": jnp.ones(3)}, target, {})
    chain = algorithm.init(start, target, jnp.asarray(0.1), False)
    for h in (0.1, 0.5):  # gradient descent at T = 0: x <- (1 - h) x
        new, info = algorithm.step(chain, random.PRNGKey(1), target, {}, jnp.asarray(h))
        np.testing.assert_allclose(new.z["x"], (1 - h) * np.ones(3), rtol=1e-6)
        assert bool(info.accepted)


def _adagrad(eps=1e-8):
    """docs/composition.md's new metric, from public names alone."""
    from numpyro_sgrld import metrics as m

    class AdagradState(NamedTuple):
        sum_sq: object

    def init(position):
        return AdagradState(jax.tree.map(jnp.zeros_like, position))

    def update(grad, state, position, context=None):
        n = m.step_context(context).num_data
        sum_sq = jax.tree.map(lambda s, g: s + (g / n) ** 2, state.sum_sq, grad)
        d = jax.tree.map(lambda s: 1.0 / (eps + jnp.sqrt(s)), sum_sq)
        return m.Preconditioner(
            drift=lambda v: jax.tree.map(jnp.multiply, d, v),
            noise=lambda v: jax.tree.map(lambda di, vi: jnp.sqrt(di) * vi, d, v),
        ), AdagradState(sum_sq)

    return m.Metric(init, update, name="adagrad", traits=(m.Averages(),))


def test_step_size_none_applies_one_rule_to_a_users_metric_and_a_presets():
    """With ``step_size=None`` a metric given to ``SGMCMC`` is composed as a preset's is: an
    adaptive one in learnt coordinates (``SGMCMC(metric=rmsprop())`` is ``PSGLD``, draw for
    draw; a new metric written from docs/composition.md is whitened the same way), a constant
    one, one reading auxiliary values or one whitened already as given; with a given step
    every metric as given."""
    from numpyro_sgrld import PSGLD, SGMCMC, trait

    mine, _ = _short_draws(SGMCMC(_normal_model, metric=metrics.rmsprop()), num_warmup=200)
    preset, _ = _short_draws(PSGLD(_normal_model), num_warmup=200)
    np.testing.assert_array_equal(mine, preset)

    kernel = SGMCMC(_normal_model, metric=_adagrad())
    assert trait(kernel.metric, metrics.Restart) is not None and kernel.metric.name == "adagrad"
    draws, state = _short_draws(kernel, num_warmup=200)
    assert np.all(np.isfinite(draws)) and np.all(np.asarray(state.step_size) > 0)
    assert trait(SGMCMC(_normal_model, 0.1, metric=_adagrad()).metric, metrics.Restart) is None

    for given in (metrics.diagonal(0.5), metrics.bnp(), metrics.whitened(metrics.rmsprop())):
        assert SGMCMC(_normal_model, metric=given).metric is given
