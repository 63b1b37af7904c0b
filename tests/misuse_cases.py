"""Mistakes and faults a user makes, and what the library does with each.

Every case builds a small model or kernel the wrong way (or in an unusual but valid way), runs
it, and classifies the outcome:

- ``error``: a ``ValueError``/``TypeError``/``RuntimeError`` raised by numpyro_sgrld itself;
- ``crash``: any other exception (raised deep inside JAX, NumPyro or Haiku);
- ``ok``: it ran and the draws pass the case's check;
- ``flagged``: it ran, the draws are not usable, and the library said so (``diverging``, a
  warning, the ``num_rejected`` count);
- ``WRONG``: it ran, the draws fail the case's check, and nothing said so.

Each case states the outcome a user should get (``want``); ``tests/test_misuse.py`` runs
every case as a test (the cases that raise at set-up in the default run, the ones that sample
in the slow set). As a table::

    python tests/misuse_cases.py              # all cases, a Markdown table on stdout
    python tests/misuse_cases.py --only nan   # cases whose name contains "nan"

Run as a script it sets ``--xla_force_host_platform_device_count=2`` (for
``chain_method="parallel"``) before importing JAX. A few minutes on two CPU cores.
"""

import argparse
import os
import sys
import traceback
import warnings

if __name__ == "__main__":
    os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=2")

import haiku as hk  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402
from numpyro.infer.initialization import init_to_value  # noqa: E402

import numpyro_sgrld as sg  # noqa: E402

CASES = []


def case(want, group):
    def register(fn):
        CASES.append((fn.__name__, group, want, fn))
        return fn

    return register


class Wrong(Exception):
    """The run finished but its draws fail the case's check."""


class Flagged(Exception):
    """The run finished, its draws are not usable, and the library said so."""


def run(kernel, *args, num_warmup=200, num_samples=1000, thinning=1, key=0, **kw):
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        thinning=thinning,
        progress_bar=False,
        **{k: kw.pop(k) for k in ("num_chains", "chain_method") if k in kw},
    )
    extra = kw.pop("extra_fields", ())
    init_params = kw.pop("init_params", None)
    mcmc.run(
        jax.random.PRNGKey(key), *args, extra_fields=extra, init_params=init_params, **kw
    )
    return mcmc


def flagged(mcmc, caught):
    """Whether the library reported a problem: a warning, a diverging draw, a rejection."""
    extra = mcmc.get_extra_fields()
    if caught:
        return True
    if "diverging" in extra and bool(np.any(np.asarray(extra["diverging"]))):
        return True
    last = mcmc.last_state
    return bool(np.any(np.asarray(getattr(last, "num_rejected", 0)) > 0))


def check_normal(x, mean, sd, mcmc, caught, label="draws"):
    """Draws of N(mean, sd^2): mean within 5 MCSE-ish bands and sd within a factor 1.5."""
    x = np.asarray(x, float).ravel()
    ok = (
        np.all(np.isfinite(x))
        and abs(x.mean() - mean) < 0.5 * sd
        and 0.67 < x.std() / sd < 1.5
        and np.max(np.abs(x - mean)) < 8 * sd
    )
    if ok:
        return
    far = np.max(np.abs(x - mean))
    msg = f"{label}: mean {x.mean():.3g}, sd {x.std():.3g}, max |x - m| {far:.3g}"
    raise (Flagged if flagged(mcmc, caught) else Wrong)(msg)


# --------------------------------------------------------------------------- models
def normal01(scale=1.0):
    def model():
        numpyro.sample("theta", dist.Normal(0.0, scale))

    return model


def regression_data(n=200, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    w = np.array([1.0, -0.5, 0.25][:d], np.float32)
    y = (X @ w + 0.5 * rng.normal(size=n)).astype(np.float32)
    return X, y


def regression(subsample=50):
    def model(X, y=None, prior_scale=1.0):
        w = numpyro.sample("w", dist.Normal(0, prior_scale).expand([X.shape[1]]).to_event(1))
        with numpyro.plate("data", X.shape[0], subsample_size=subsample) as idx:
            numpyro.sample("y", dist.Normal(X[idx] @ w, 0.5), obs=None if y is None else y[idx])

    return model


def regression_posterior(X, y, prior_scale=1.0, noise=0.5):
    X, y = np.asarray(X, float), np.asarray(y, float)
    prec = X.T @ X / noise**2 + np.eye(X.shape[1]) / prior_scale**2
    cov = np.linalg.inv(prec)
    return cov @ X.T @ y / noise**2, np.sqrt(np.diag(cov))


def check_regression(mcmc, caught, X, y, **kw):
    w = np.asarray(mcmc.get_samples()["w"])
    mean, sd = regression_posterior(X, y, **kw)
    for j in range(w.shape[1]):
        check_normal(w[:, j], mean[j], sd[j], mcmc, caught, f"w[{j}]")


# --------------------------------------------------------------------------- 1. empty statistic
@case("ok", "1 statistic at zero")
def psgld_potential_fn_started_at_mode():
    k = sg.PSGLD(potential_fn=lambda z: 0.5 * jnp.sum((z["t"] / 0.1) ** 2), step_size=1e-3,
                 decay=0.9)
    m = run(k, init_params={"t": jnp.zeros(())}, num_warmup=2000, num_samples=4000)
    return m, lambda c: check_normal(m.get_samples()["t"], 0, 0.1, m, c)


@case("ok", "1 statistic at zero")
def psgld_init_to_value_at_map():
    X, y = regression_data()
    mean, _ = regression_posterior(X, y)
    model = sg.full_batch(regression())
    k = sg.PSGLD(model, step_size=1e-4, decay=0.9,
                 init_strategy=init_to_value(values={"w": jnp.asarray(mean, jnp.float32)}))
    m = run(k, jnp.asarray(X), jnp.asarray(y), num_warmup=2000, num_samples=4000)
    return m, lambda c: check_regression(m, c, X, y)


@case("ok", "1 statistic at zero")
def psgld_eps_zero_started_at_mode():
    k = sg.PSGLD(normal01(), step_size=1e-2, eps=0.0, decay=0.9,
                 init_strategy=init_to_value(values={"theta": 0.0}))
    m = run(k, num_warmup=2000, num_samples=4000)
    return m, lambda c: check_normal(m.get_samples()["theta"], 0, 1, m, c)


@case("ok", "1 statistic at zero")
def shampoo_interval_1_started_at_mode():
    k = sg.ShampooSGLD(normal01(0.1), step_size=1e-3, update_interval=1, decay=0.9,
                       init_strategy=init_to_value(values={"theta": 0.0}))
    m = run(k, num_warmup=2000, num_samples=4000)
    return m, lambda c: check_normal(m.get_samples()["theta"], 0, 0.1, m, c)


@case("ok", "1 statistic at zero")
def psgld_started_at_mode_of_dead_coordinate():
    # a coordinate whose gradient is exactly zero at the start (symmetric initial value)
    def model():
        numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([3]).to_event(1))

    k = sg.PSGLD(model, step_size=1e-2, decay=0.9,
                 init_strategy=init_to_value(values={"theta": jnp.array([0.0, 1.0, -1.0])}))
    m = run(k, num_warmup=2000, num_samples=4000)
    return m, lambda c: check_normal(m.get_samples()["theta"][:, 0], 0, 1, m, c)


# --------------------------------------------------------------------------- 2. potential value
@case("ok", "2 potential not finite")
def factor_wall():
    def model():
        x = numpyro.sample("x", dist.Normal(0.0, 1.0))
        numpyro.factor("wall", jnp.where(x > 0, 0.0, -jnp.inf))

    k = sg.SGLD(model, step_size=1e-2, init_strategy=init_to_value(values={"x": 1.0}))
    m = run(k, num_warmup=500, num_samples=4000)

    def check(c):
        x = np.asarray(m.get_samples()["x"])
        if np.mean(x <= 0) > 0:
            raise (Flagged if False else Wrong)(f"{np.mean(x <= 0):.0%} of draws where p = 0")
        check_normal(np.abs(x), np.sqrt(2 / np.pi), np.sqrt(1 - 2 / np.pi), m, c, "|x|")

    return m, check


@case("ok", "2 potential not finite")
def log_of_negative():
    def model():
        x = numpyro.sample("x", dist.Normal(2.0, 1.0))
        numpyro.factor("logx", jnp.log(x) - jnp.log(x))  # NaN for x < 0, gradient finite

    k = sg.SGLD(model, step_size=5e-2, init_strategy=init_to_value(values={"x": 2.0}))
    m = run(k, num_warmup=500, num_samples=4000)

    def check(c):
        x = np.asarray(m.get_samples()["x"])
        if np.mean(x < 0) > 0:
            raise Wrong(f"{np.mean(x < 0):.1%} of draws where the log density is NaN")

    return m, check


@case("ok", "2 potential not finite")
def potential_fn_minus_inf_outside():
    pot = lambda z: jnp.where(jnp.abs(z["t"]) < 1, 0.5 * z["t"] ** 2, jnp.inf)  # noqa: E731
    k = sg.SGLD(potential_fn=pot, step_size=1e-2)
    m = run(k, init_params={"t": jnp.zeros(())}, num_samples=4000)

    def check(c):
        t = np.asarray(m.get_samples()["t"])
        if np.any(np.abs(t) >= 1):
            raise Wrong(f"{np.mean(np.abs(t) >= 1):.1%} of draws where the potential is inf")

    return m, check


# --------------------------------------------------------------------------- 3. local latents
@case("error", "3 local latent in subsample plate")
def local_latent_in_subsample_plate():
    def model(y):
        mu = numpyro.sample("mu", dist.Normal())
        with numpyro.plate("groups", y.shape[0], subsample_size=10) as idx:
            b = numpyro.sample("b", dist.Normal(mu, 1.0))
            numpyro.sample("y", dist.Normal(b, 1.0), obs=y[idx])

    return run(sg.SGLD(model, step_size=1e-3), jnp.zeros(100)), None


@case("error", "3 local latent in subsample plate")
def forgot_obs_in_subsample_plate():
    X, y = regression_data()
    return run(sg.SGLD(regression(), step_size=1e-4), jnp.asarray(X)), None


@case("error", "3 local latent in subsample plate")
def local_latent_in_nested_plate():
    def model(y):
        with numpyro.plate("rows", 100, subsample_size=10, dim=-2):
            with numpyro.plate("cols", 3):
                b = numpyro.sample("b", dist.Normal())
        numpyro.sample("y", dist.Normal(jnp.sum(b), 1.0), obs=y)

    return run(sg.SGLD(model, step_size=1e-3), jnp.zeros(())), None


# --------------------------------------------------------------------------- 4. subsample size
@case("error", "4 subsample size")
def subsample_size_zero():
    X, y = regression_data()
    return run(sg.SGLD(regression(0), step_size=1e-4), jnp.asarray(X), jnp.asarray(y)), None


@case("error", "4 subsample size")
def subsample_size_negative():
    X, y = regression_data()
    return run(sg.SGLD(regression(-5), step_size=1e-4), jnp.asarray(X), jnp.asarray(y)), None


@case("error", "4 subsample size")
def subsample_size_float():
    X, y = regression_data()
    return run(sg.SGLD(regression(20.5), step_size=1e-4), jnp.asarray(X), jnp.asarray(y)), None


@case("error", "4 subsample size")
def subsample_larger_than_plate():
    X, y = regression_data()
    return run(sg.SGLD(regression(500), step_size=1e-4), jnp.asarray(X), jnp.asarray(y)), None


# --------------------------------------------------------------------------- 5. num_data cliff
def _num_data_after_init(model, *args):
    k = sg.PSGLD(model, step_size=1e-4)
    k.init(jax.random.PRNGKey(0), 0, None, args, {})
    return k.num_data


@case("ok", "5 num_data")
def num_data_continuous_at_full_subsample():
    X, y = regression_data()
    a = _num_data_after_init(regression(199), jnp.asarray(X), jnp.asarray(y))
    b = _num_data_after_init(regression(200), jnp.asarray(X), jnp.asarray(y))

    def check(c):
        if a != b:
            raise Wrong(f"num_data {a} at subsample_size=199, {b} at 200")

    return None, check


@case("ok", "5 num_data")
def num_data_full_batch_model():
    X, y = regression_data()
    a = _num_data_after_init(regression(50), jnp.asarray(X), jnp.asarray(y))
    b = _num_data_after_init(sg.full_batch(regression(50)), jnp.asarray(X), jnp.asarray(y))

    def check(c):
        if a != b:
            raise Wrong(f"num_data {a} with minibatches, {b} on full_batch(model)")

    return None, check


# --------------------------------------------------------------------------- 6. plate vs data
@case("error", "6 plate larger than data")
def plate_larger_than_data():
    X, y = regression_data()

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("data", 400, subsample_size=50) as idx:
            numpyro.sample("y", dist.Normal(X[idx] @ w, 0.5), obs=y[idx])

    return run(sg.SGLD(model, step_size=1e-4), jnp.asarray(X), jnp.asarray(y)), None


@case("error", "6 plate larger than data")
def plate_larger_than_data_subsample_helper():
    X, y = regression_data()

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("data", 400, subsample_size=50):
            Xb = numpyro.subsample(X, event_dim=1)
            yb = numpyro.subsample(y, event_dim=0)
            numpyro.sample("y", dist.Normal(Xb @ w, 0.5), obs=yb)

    return run(sg.SGLD(model, step_size=1e-4), jnp.asarray(X), jnp.asarray(y)), None


# --------------------------------------------------------------------------- 7. NumPy data
@case("ok", "7 NumPy data")
def numpy_data_with_keyword():
    X, y = regression_data()
    m = run(sg.SGLD(regression(), step_size=2e-4), X, y, prior_scale=1.0,
            num_warmup=1000, num_samples=4000)
    return m, lambda c: check_regression(m, c, X, y)


@case("ok", "7 NumPy data")
def numpy_data_parallel_chains():
    X, y = regression_data()
    m = run(sg.SGLD(regression(), step_size=2e-4), X, y, num_chains=2,
            chain_method="parallel", num_warmup=1000, num_samples=2000)
    return m, lambda c: check_regression(m, c, X, y)


@case("ok", "7 NumPy data")
def numpy_data_vectorized_chains():
    X, y = regression_data()
    m = run(sg.SGLD(regression(), step_size=2e-4), X, y, num_chains=2,
            chain_method="vectorized", num_warmup=1000, num_samples=2000)
    return m, lambda c: check_regression(m, c, X, y)


@case("ok", "7 NumPy data")
def numpy_data_sequential_chains_keyword():
    X, y = regression_data()
    m = run(sg.PSGLD(regression(), step_size=1e-5), X, y=y, prior_scale=1.0, num_chains=2,
            chain_method="sequential", num_warmup=1000, num_samples=2000)
    return m, lambda c: check_regression(m, c, X, y)


# --------------------------------------------------------------------------- 8. numbers
def _gauss_run(kernel):
    m = run(kernel, num_warmup=500, num_samples=4000)
    return m, lambda c: check_normal(m.get_samples()["theta"], 0, 1, m, c)


@case("ok", "8 NumPy/JAX scalars")
def decay_numpy_float32():
    return _gauss_run(sg.PSGLD(normal01(), step_size=1e-2, decay=np.float32(0.95)))


@case("ok", "8 NumPy/JAX scalars")
def num_data_numpy_int():
    return _gauss_run(sg.PSGLD(normal01(), step_size=1e-2, num_data=np.int64(1)))


@case("ok", "8 NumPy/JAX scalars")
def friction_numpy_float():
    return _gauss_run(sg.SGHMC(normal01(), step_size=1e-2, friction=np.float64(0.1)))


@case("ok", "8 NumPy/JAX scalars")
def temperature_jax_scalar():
    return _gauss_run(sg.SGLD(normal01(), step_size=1e-2, temperature=jnp.array(1.0)))


@case("ok", "8 NumPy/JAX scalars")
def step_size_jax_scalar():
    return _gauss_run(sg.SGLD(normal01(), step_size=jnp.array(1e-2)))


@case("ok", "8 NumPy/JAX scalars")
def alpha2_and_eps_numpy():
    # alpha2 small: the uncorrected Monge chain's bias, phi(1 + a theta^2), is then negligible
    return _gauss_run(sg.MongeSGLD(normal01(), step_size=1e-2, alpha2=np.float32(0.01),
                                   decay=np.float64(0.9)))


@case("ok", "8 NumPy/JAX scalars")
def update_interval_numpy_int():
    return _gauss_run(sg.ShampooSGLD(normal01(), step_size=1e-2, update_interval=np.int64(10)))


@case("ok", "8 NumPy/JAX scalars")
def schedule_returning_python_float():
    return _gauss_run(sg.SGLD(normal01(), step_size=lambda t: 1e-2))


@case("error", "8 NumPy/JAX scalars")
def schedule_with_python_if():
    return _gauss_run(sg.SGLD(normal01(), step_size=lambda t: 1e-2 if t < 100 else 5e-3))


@case("ok", "8 NumPy/JAX scalars")
def schedule_with_jnp_where():
    return _gauss_run(sg.SGLD(normal01(), step_size=lambda t: jnp.where(t < 100, 1e-2, 5e-3)))


# --------------------------------------------------------------------------- 9. NumPyro's errors
@case("error", "9 init and fields")
def init_params_wrong_site_name():
    X, y = regression_data()
    return run(sg.SGLD(regression(), step_size=1e-4), jnp.asarray(X), jnp.asarray(y),
               init_params={"weights": jnp.zeros(3)}), None


@case("error", "9 init and fields")
def init_params_wrong_shape():
    X, y = regression_data()
    return run(sg.SGLD(regression(), step_size=1e-4), jnp.asarray(X), jnp.asarray(y),
               init_params={"w": jnp.zeros(4)}), None


@case("error", "9 init and fields")
def init_params_unbatched_for_vectorized_chains():
    X, y = regression_data()
    return run(sg.SGLD(regression(), step_size=1e-4), jnp.asarray(X), jnp.asarray(y),
               init_params={"w": jnp.zeros(3)}, num_chains=2, chain_method="vectorized"), None


@case("error", "9 init and fields")
def init_params_not_finite():
    X, y = regression_data()
    return run(sg.SGLD(regression(), step_size=1e-4), jnp.asarray(X), jnp.asarray(y),
               init_params={"w": jnp.array([0.0, jnp.nan, 0.0])}), None


@case("error", "9 init and fields")
def init_strategy_string():
    return _gauss_run(sg.SGLD(normal01(), step_size=1e-2, init_strategy="uniform"))


@case("error", "9 init and fields")
def unknown_extra_field():
    return run(sg.SGLD(normal01(), step_size=1e-2), extra_fields=("accept_prob",)), None


@case("error", "9 init and fields")
def potential_fn_init_params_unbatched_vectorized():
    k = sg.SGLD(potential_fn=lambda z: 0.5 * jnp.sum(z["t"] ** 2), step_size=1e-2)
    return run(k, init_params={"t": jnp.zeros(2)}, num_chains=3, chain_method="vectorized"), None


# --------------------------------------------------------------------------- 10. data
@case("error", "10 non-finite data")
def nan_in_one_observation():
    X, y = regression_data()
    y = y.copy()
    y[117] = np.nan
    return run(sg.SGLD(regression(), step_size=2e-4), jnp.asarray(X), jnp.asarray(y)), None


@case("error", "10 non-finite data")
def inf_in_one_covariate():
    X, y = regression_data()
    X = X.copy()
    X[142, 1] = np.inf
    return run(sg.SGLD(regression(), step_size=2e-4), jnp.asarray(X), jnp.asarray(y)), None


@case("error", "10 non-finite data")
def observation_outside_support():
    def model(y):
        rate = numpyro.sample("rate", dist.LogNormal())
        with numpyro.plate("data", y.shape[0], subsample_size=20) as idx:
            numpyro.sample("y", dist.Exponential(rate), obs=y[idx])

    y = np.abs(np.random.default_rng(0).normal(size=100)).astype(np.float32)
    y[63] = -1.0
    return run(sg.SGLD(model, step_size=1e-4), jnp.asarray(y)), None


@case("error", "10 non-finite data")
def nan_in_haiku_network_input():
    X, y = regression_data()
    X = X.copy()
    X[105, 0] = np.nan
    net = hk.transform(lambda x: hk.nets.MLP([8, 1])(x))

    def model(X, y):
        f = sg.random_haiku_module("net", net, (1, 3), dist.Normal(0, 1))
        with numpyro.plate("data", X.shape[0], subsample_size=50) as idx:
            numpyro.sample("y", dist.Normal(f(X[idx])[..., 0], 0.5), obs=y[idx])

    return run(sg.SGLD(model, step_size=1e-5), jnp.asarray(X), jnp.asarray(y)), None


@case("error", "10 non-finite data")
def class_label_out_of_range():
    X, _ = regression_data()
    labels = (np.arange(X.shape[0]) % 3).astype(np.int32)
    labels[77] = 3  # three classes: 0, 1, 2

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([3, 3]).to_event(2))
        with numpyro.plate("data", X.shape[0], subsample_size=50) as idx:
            numpyro.sample("y", dist.Categorical(logits=X[idx] @ w), obs=y[idx])

    return run(sg.SGLD(model, step_size=1e-4), jnp.asarray(X), jnp.asarray(labels)), None


# --------------------------------------------------------------------------- also: stuck chains
@case("flagged", "also stuck chain")
def stuck_chain_thinned():
    # jnp.where's classic trap: finite value everywhere, NaN gradient for x > 1
    def model():
        x = numpyro.sample("x", dist.Normal(0.0, 1.0))
        numpyro.factor("f", jnp.where(x > 1, 0.0, 0.1 * jnp.sqrt(1.0 - x)))

    k = sg.SGLD(model, step_size=1e-1, init_strategy=init_to_value(values={"x": 0.0}))
    m = run(k, num_warmup=100, num_samples=100, thinning=100)

    def check(c):
        x = np.asarray(m.get_samples()["x"])
        if np.mean(x == x[-1]) > 0.5:
            raise (Flagged if flagged(m, c) else Wrong)(
                f"{np.mean(x == x[-1]):.0%} of draws at one point"
            )

    return m, check


@case("flagged", "also stuck chain")
def step_size_far_too_large():
    m = run(sg.SGLD(normal01(0.01), step_size=10.0), num_samples=500)
    return m, lambda c: check_normal(m.get_samples()["theta"], 0, 0.01, m, c)


# --------------------------------------------------------------------------- other mistakes
@case("error", "other")
def discrete_latent():
    def model():
        numpyro.sample("k", dist.Bernoulli(0.5))

    return run(sg.SGLD(model, step_size=1e-2)), None


@case("error", "other")
def model_without_latent_sites():
    def model(y):
        numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y)

    return run(sg.SGLD(model, step_size=1e-2), jnp.zeros(3)), None


@case("error", "other")
def observation_shape_broadcasts_inside_plate():
    X, y = regression_data()

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("data", X.shape[0], subsample_size=50) as idx:
            numpyro.sample("y", dist.Normal(X[idx] @ w, 0.5), obs=y[idx])

    return run(sg.SGLD(model, step_size=1e-4), jnp.asarray(X), jnp.asarray(y)[:, None]), None


@case("error", "other")
def wrong_number_of_features():
    X, y = regression_data()
    net = hk.transform(lambda x: hk.nets.MLP([8, 1])(x))

    def model(X, y):
        f = sg.random_haiku_module("net", net, (1, 4), dist.Normal(0, 1))
        with numpyro.plate("data", X.shape[0], subsample_size=50) as idx:
            numpyro.sample("y", dist.Normal(f(X[idx])[..., 0], 0.5), obs=y[idx])

    return run(sg.SGLD(model, step_size=1e-5), jnp.asarray(X), jnp.asarray(y)), None


@case("ok", "other")
def haiku_network_without_apply_rng():
    X, y = regression_data()
    net = hk.without_apply_rng(hk.transform(lambda x: hk.nets.MLP([4, 1])(x)))

    def model(X, y):
        f = sg.random_haiku_module("net", net, (1, 3), dist.Normal(0, 1))
        with numpyro.plate("data", X.shape[0], subsample_size=50) as idx:
            numpyro.sample("y", dist.Normal(f(X[idx])[..., 0], 0.5), obs=y[idx])

    return run(sg.SGLD(model, step_size=1e-5), jnp.asarray(X), jnp.asarray(y),
               num_samples=10), None


@case("error", "other")
def correction_on_sgld():
    return _gauss_run(sg.LangevinKernel(normal01(), 1e-2, metric=sg.metrics.identity(),
                                        correction="exact"))


@case("error", "other")
def unknown_correction_name():
    return _gauss_run(sg.PSGLD(normal01(), step_size=1e-2, correction="Exact"))


@case("error", "other")
def negative_temperature():
    return _gauss_run(sg.SGLD(normal01(), step_size=1e-2, temperature=-1.0))


@case("error", "other")
def num_data_zero():
    return _gauss_run(sg.PSGLD(normal01(), step_size=1e-2, num_data=0))


@case("error", "other")
def step_size_string():
    return _gauss_run(sg.SGLD(normal01(), step_size="1e-2"))


@case("error", "other")
def batching_typo():
    return _gauss_run(sg.SGLD(normal01(), step_size=1e-2, batching="epochs"))


@case("ok", "other")
def epoch_batching_with_remainder():
    X, y = regression_data()
    m = run(sg.SGLD(regression(60), step_size=2e-4, batching="epoch"), X, y,
            num_warmup=1000, num_samples=4000)
    return m, lambda c: check_regression(m, c, X, y)


@case("ok", "other")
def python_list_data():
    def model(y):
        mu = numpyro.sample("mu", dist.Normal(0, 10))
        with numpyro.plate("data", len(y), subsample_size=5) as idx:
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=jnp.asarray(y)[idx])

    ys = [float(v) for v in np.random.default_rng(1).normal(size=20)]
    m = run(sg.SGLD(model, step_size=1e-3), ys, num_warmup=1000, num_samples=4000)
    post_sd = 1 / np.sqrt(20 + 1e-2)
    post_mean = np.sum(ys) / (20 + 1e-2)
    return m, lambda c: check_normal(m.get_samples()["mu"], post_mean, post_sd, m, c)


@case("ok", "7 NumPy data")
def numpy_data_with_jit_model_args():
    X, y = regression_data()
    mcmc = MCMC(sg.SGLD(regression(), step_size=2e-4), num_warmup=1000, num_samples=4000,
                jit_model_args=True, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, y)
    return mcmc, lambda c: check_regression(mcmc, c, X, y)


@case("ok", "other")
def vectorized_chains_with_progress_bar():
    X, y = regression_data()
    mcmc = MCMC(sg.SGLD(regression(), step_size=2e-4), num_warmup=100, num_samples=100,
                num_chains=2, chain_method="vectorized", progress_bar=True)
    mcmc.progress_bar = True
    mcmc.run(jax.random.PRNGKey(0), X, y)
    return mcmc, None


@case("error", "other")
def control_variate_with_potential_fn():
    k = sg.SGLD(potential_fn=lambda z: jnp.sum(z["t"] ** 2), step_size=1e-2,
                control_variate="mode")
    return run(k, init_params={"t": jnp.zeros(())}), None


@case("error", "other")
def control_variate_dict_missing_site():
    X, y = regression_data()
    k = sg.SGLD(regression(), step_size=1e-4, control_variate={"v": jnp.zeros(3)})
    return run(k, jnp.asarray(X), jnp.asarray(y)), None


# --------------------------------------------------------------------------- driver
def message_names_argument(e):
    """NumPyro's own checks that name the argument in backticks (e.g. on ``init_params``)."""
    return str(e).startswith("`")


def classify(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            mcmc, check = fn()
        except (Wrong, Flagged) as e:  # noqa: F841 (raised by the set-up itself)
            raise
        except Exception as e:  # noqa: BLE001
            frames = traceback.extract_tb(e.__traceback__)
            ours = any(
                "numpyro_sgrld" in f.filename and "misuse_cases.py" not in f.filename
                for f in frames[-1:]
            )
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            clear = isinstance(e, (ValueError, TypeError, RuntimeError)) and (
                ours or message_names_argument(e)
            )
            noted = any("numpyro_sgrld" in n for n in getattr(e, "__notes__", []))
            kind = "error" if clear or noted else "crash"
            return kind, f"{type(e).__name__}: {first[:160]}"
        relevant = [w for w in caught if "numpyro_sgrld" in str(w.filename) or
                    issubclass(w.category, UserWarning)]
        relevant = [w for w in relevant if "not enough devices" not in str(w.message)]
        try:
            if check is not None:
                check(bool(relevant))
        except Wrong as e:
            return "WRONG", str(e)
        except Flagged as e:
            note = str(relevant[0].message).splitlines()[0][:100] if relevant else "diverging"
            return "flagged", f"{e} ({note})"
        if relevant:
            return "ok", "warning: " + str(relevant[0].message).splitlines()[0][:120]
        return "ok", ""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args(argv)
    rows = []
    print("| # | class | case | want | got | detail |")
    print("|---|---|---|---|---|---|")
    for n, (name, group, want, fn) in enumerate(CASES, 1):
        if args.only not in name:
            continue
        got, detail = classify(fn)
        good = got == want or (want == "flagged" and got == "error")
        rows.append(good)
        mark = got if good else f"**{got}**"
        detail = detail.replace("|", "/").replace("\n", " ")
        print(f"| {n} | {group} | `{name}` | {want} | {mark} | {detail} |", flush=True)
    print(f"\n{sum(rows)} of {len(rows)} cases as wanted", flush=True)
    return 0 if all(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
