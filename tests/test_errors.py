"""Bad input gets a clear error that names the problem and the fix."""

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
import pytest
from jax import random
from numpyro.infer import MCMC

from numpyro_sgrld import SGHMC, SGLD, polynomial_decay


def gaussian():
    numpyro.sample("x", dist.Normal())


def _run(kernel, *args):
    MCMC(kernel, num_warmup=1, num_samples=1, progress_bar=False).run(random.PRNGKey(0), *args)


def test_discrete_latent_site():
    def model():
        numpyro.sample("k", dist.Bernoulli(0.5))
        numpyro.sample("x", dist.Normal())

    with pytest.raises(ValueError, match="Latent site 'k' is discrete.*Marginalise"):
        _run(SGLD(model, step_size=0.1))


@pytest.mark.parametrize("bad", [0.0, -1e-3, float("nan"), float("inf"), "0.1", True])
def test_bad_step_size(bad):
    with pytest.raises(ValueError, match="step_size"):
        SGLD(gaussian, step_size=bad)


def test_schedule_with_non_positive_values():
    with pytest.raises(ValueError, match="schedule must return finite values > 0.*t = \\[100"):
        SGLD(gaussian, step_size=lambda t: 1e-3 * (100 - t))
    with pytest.raises(ValueError, match="polynomial_decay.a"):
        SGLD(gaussian, step_size=polynomial_decay(a=-1.0))
    with pytest.raises(ValueError, match="polynomial_decay.b"):
        SGLD(gaussian, step_size=polynomial_decay(a=1.0, b=0.0))


def test_subsample_larger_than_plate():
    def model(y):
        with numpyro.plate("data", 10, subsample_size=20) as idx:
            numpyro.sample("y", dist.Normal(), obs=y[idx])

    with pytest.raises(
        ValueError,
        match="Plate 'data' has subsample_size=20 larger than its "
        "size 10. Use a subsample_size of at most 10",
    ):
        _run(SGLD(model, step_size=0.1), jnp.zeros(10))


@pytest.mark.parametrize("friction", [0.0, -0.1, 1.5])
def test_friction_out_of_range(friction):
    with pytest.raises(ValueError, match=r"`friction` must be a finite number in \(0, 1\]"):
        SGHMC(gaussian, step_size=0.1, friction=friction)


@pytest.mark.parametrize("noise_estimate", [0.1, 0.5, -0.01])
def test_noise_estimate_not_below_friction(noise_estimate):
    with pytest.raises(ValueError, match="0 <= noise_estimate < friction|`noise_estimate` must"):
        SGHMC(gaussian, step_size=0.1, friction=0.1, noise_estimate=noise_estimate)


def test_potential_fn_without_init_params():
    with pytest.raises(ValueError, match="`init_params` must be given"):
        _run(SGLD(potential_fn=lambda z: jnp.sum(z**2), step_size=0.1))


def test_model_and_potential_fn_exclusive():
    with pytest.raises(ValueError, match="exactly one of `model` or `potential_fn`"):
        SGLD(gaussian, potential_fn=lambda z: z, step_size=0.1)
    with pytest.raises(ValueError, match="exactly one of `model` or `potential_fn`"):
        SGLD(step_size=0.1)


def test_unknown_batching():
    with pytest.raises(ValueError, match="Unknown batching='shuffle'.*'replacement'.*'epoch'"):
        SGLD(gaussian, step_size=0.1, batching="shuffle")


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"num_data": 0}, "num_data"),
        ({"initial_momentum": "big"}, "initial_momentum"),
        ({"resample_momentum_every": 0}, "resample_momentum_every"),
    ],
)
def test_other_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SGHMC(gaussian, step_size=0.1, **kwargs)


def test_no_valid_initial_parameters_is_an_error():
    def broken(X):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0))
        with numpyro.plate("data", X.shape[0], subsample_size=2):
            numpyro.factor("nan", jnp.nan * w)

    X = jnp.zeros((10, 1))
    for chains in (1, 2):
        mcmc = MCMC(SGLD(broken, step_size=1e-3), num_warmup=0, num_samples=5,
                    num_chains=chains, chain_method="vectorized", progress_bar=False)
        with pytest.raises(RuntimeError, match="valid initial parameters"):
            mcmc.run(random.PRNGKey(0), X)


def test_a_model_without_a_subsampled_plate_is_noted_at_set_up():
    """No plate with a subsample_size: a note that the kernel runs on the full data; a plate
    with subsample_size=N (the full data, chosen) or a subsampled one: no note."""
    import warnings

    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    from numpyro_sgrld import SGLD

    y = jnp.zeros(50)

    def model(y, subsample_size=-1):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        size = {} if subsample_size == -1 else {"subsample_size": subsample_size}
        with numpyro.plate("data", 50, **size) as idx:
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y[idx])

    with pytest.warns(UserWarning, match="no plate with a subsample_size.*full-data Langevin"):
        SGLD(model, step_size=1e-3).init(jax.random.PRNGKey(0), 10, None, (y,), {})
    for size in (50, 10):
        with warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)
            SGLD(model, step_size=1e-3).init(jax.random.PRNGKey(0), 10, None, (y,),
                                             {"subsample_size": size})


def test_the_full_data_note_within_gibbs_names_the_data_not_a_gibbs_site():
    """Within ``SGGibbs`` the Gibbs sites are observed in the SG kernel's conditioned model;
    the note on a model without minibatches names the observed data."""
    import jax

    import numpyro_sgrld as ns

    def schools(y):
        mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
        tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
        with numpyro.plate("J", 8):
            theta = numpyro.sample("theta", dist.Normal(mu, tau))
            numpyro.sample("obs", dist.Normal(theta, 10.0), obs=y)

    with pytest.warns(UserWarning, match="observes 'obs' but has no plate") as caught:
        ns.SGGibbs(SGLD(schools, step_size=1e-3)).init(
            jax.random.PRNGKey(0), 10, None, (jnp.arange(8.0),), {})
    assert not [w for w in caught if "observes 'mu'" in str(w.message)
                or "observes 'tau'" in str(w.message)]
