"""The equipartition check (:mod:`numpyro_sgrld.core.equipartition`): its readings against exact
values (iid and autocorrelated Gaussian draws; SGLD's discretised chain on a Gaussian target,
whose stationary variance is known in closed form), its Monte Carlo error against the spread
of replicates, its batches, and the verdict it drives."""

import contextlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from numpyro.infer import MCMC
from scipy.stats import t as student_t

import numpyro_sgrld as ns
from numpyro_sgrld.core import equipartition as eq


def _bound(t):
    """Four standard errors' worth of Student's t for the reading's ``batches``."""
    return float(student_t.ppf(1 - 3.2e-5, max(t.batches - 1, 1)))


def _run(draws, grads, start=0):
    """The sums after feeding ``draws`` and ``grads`` (``(steps, d)``) to :func:`eq.update`."""
    z = {"x": draws[0]}
    acc = eq.init(z, start)

    def body(acc, xs):
        i, x, g = xs
        return eq.update(acc, {"x": x}, {"x": g}, jnp.bool_(True), i)[0], None

    steps = jnp.arange(draws.shape[0], dtype=jnp.int32)
    return jax.lax.scan(body, acc, (steps, draws, grads))[0]


def _ar1(key, n, d, rho, scale):
    """``n`` steps of a stationary AR(1) chain in ``d`` independent coordinates, sds ``scale``."""
    noise = jax.random.normal(key, (n, d))
    x0 = noise[0]

    def body(x, e):
        x = rho * x + np.sqrt(1 - rho**2) * e
        return x, x

    return jax.lax.scan(body, x0, noise[1:])[1] * scale


@pytest.mark.parametrize("rho", [0.0, 0.95])
def test_readings_and_their_errors_agree_with_exact_values_over_replicates(rho):
    """Draws of N(m, diag(s^2)) inflated in variance by k, with minibatch-like gradients
    (the exact gradient plus independent noise): each coordinate reads k, and the batch-means
    errors match the spread of 200 replicates (a chi-square test of the z-scores)."""
    d, n, reps = 3, 8_000, 200
    scale = jnp.array([0.5, 1.0, 3.0])
    mean = jnp.array([1.0, -2.0, 10.0])
    k = jnp.array([1.0, 1.3, 0.8])

    def one(key):
        k1, k2 = jax.random.split(key)
        x = mean + _ar1(k1, n, d, rho, scale) * jnp.sqrt(k)
        g = (x - mean) / scale**2 + 2.0 / scale * jax.random.normal(k2, x.shape)
        return _run(x, g)

    accs = jax.device_get(jax.vmap(one)(jax.random.split(jax.random.PRNGKey(0), reps)))
    readings = [eq.summarize(jax.tree.map(lambda a, r=r: a[r], accs)) for r in range(reps)]
    est = np.asarray([t.estimate for t in readings])
    se = np.asarray([t.se for t in readings])
    # unbiased for k: the replicates' mean within 4 of its standard errors
    assert np.all(np.abs(est.mean(0) - np.asarray(k)) < 4 * est.std(0) / np.sqrt(reps))
    # the batch-means error is never smaller than the replicates' spread and at most sqrt(2)
    # times it (the centre's noise, equipartition's docstring): the ratio's own relative error
    # is 1/sqrt(2 (reps - 1)), and an sd estimated from R >= 8 batches is low by at most
    # 1/(4 (R - 1)) < 4 %
    ratio = se.mean(0) / est.std(0, ddof=1)
    tol = 4 / np.sqrt(2 * (reps - 1))
    assert np.all((ratio > 1 - tol - 0.04) & (ratio < np.sqrt(2) * (1 + tol))), ratio


def test_many_short_chains_read_their_law_once_the_centring_is_undone():
    """1000 stationary AR(1) chains of variance k = 1.44 on U = x^2/2, each about 10 effective
    draws long: centred on its own mean each reads k (1 - 1/ESS), about 10 % low (several of
    the pooled reading's standard errors); :func:`eq.decentred` by the spread of the chains'
    means (:func:`eq.centring_factor`) reads k within 4 of them, and a chain's own reading
    is not judged from batches of under :data:`eq.MIN_BATCH_ESS` effective draws each."""
    from numpyro.diagnostics import effective_sample_size

    chains, n, rho, k = 1000, 4_000, 0.995, 1.44

    def one(key):
        x = _ar1(key, n + 1, 1, rho, np.sqrt(k))
        return _run(x, x), x[:, 0]

    accs, xs = jax.device_get(jax.vmap(one)(jax.random.split(jax.random.PRNGKey(3), chains)))
    raw = eq.summarize(accs)
    xs = np.asarray(xs, np.float64)
    factor = eq.centring_factor(xs.mean(1)[:, None], xs.var(1, ddof=1)[:, None])[0]
    ess = float(effective_sample_size(xs[:, :, None])[0]) / chains
    fixed = eq.decentred(raw, factor, ess)
    assert (k - raw.overall) / raw.overall_se > 3  # the bias the centring leaves
    assert abs(fixed.overall - k) < 4 * fixed.overall_se
    assert all(np.isnan(c.overall_se) for c in fixed.chains)  # ~10 draws in >= 8 batches
    # long chains: nothing changes beyond a few per mille, and their own readings are judged
    long = eq.decentred(raw, 1.001, 1000.0)
    assert abs(long.overall / raw.overall - 1) < 0.002 and np.isfinite(long.chains[0].overall_se)


def test_the_batches_merge_and_count_every_step_after_the_start():
    d, n, start = 2, 5_000, 700
    x = jax.random.normal(jax.random.PRNGKey(1), (n, d))
    acc = _run(x, x, start=start)
    counted = n - start
    assert int(acc.sums[:, -1].sum()) == int(acc.count) == counted
    filled = int(np.sum(np.asarray(acc.sums[:, -1]) > 0))
    assert eq.BATCHES // 2 <= filled <= eq.BATCHES
    length = eq.FIRST_LENGTH
    while counted // length > eq.BATCHES - 1:
        length *= 2
    assert int(acc.length) == length
    # full batches hold exactly `length` steps
    c = np.asarray(acc.sums[:, -1])
    assert np.all(c[:filled - 1] == length) and c[filled - 1] == int(acc.filled) or (
        int(acc.filled) == 0 and c[filled - 1] == length)
    # the centre is the first counted position; the totals are the counted steps' sums
    np.testing.assert_array_equal(acc.centre["x"], x[start])
    np.testing.assert_allclose(acc.shift["x"], (x[start:] - x[start]).sum(0), rtol=1e-4,
                               atol=1e-3)
    np.testing.assert_allclose(acc.gradient["x"], x[start:].sum(0), rtol=1e-4, atol=1e-3)
    # the batches' centred sums add up to the products about the run's mean
    t = eq.summarize(acc)
    exact = ((x[start:] - x[start:].mean(0)) * x[start:]).mean(0)
    np.testing.assert_allclose(t.estimate, exact, rtol=1e-4)


def test_groups_are_coordinates_for_small_positions_and_leaves_for_large_ones():
    small = {"a": jnp.zeros(3), "b": jnp.zeros(())}
    assert eq.group_names(small) == ("a[0]", "a[1]", "a[2]", "b")
    large = {"net": {"w1": jnp.zeros((20, 10)), "b1": jnp.zeros(10)}, "s": jnp.zeros(())}
    assert eq.group_names(large) == ("net/b1", "net/w1", "s")
    np.testing.assert_array_equal(eq.group_sizes(large), [10, 200, 1])


def test_departures_need_both_the_band_and_the_noise():
    t = eq.Temperatures(("a", "b", "c"), np.array([1.0, 1.5, 1.5]), np.array([0.01, 0.01, 0.5]),
                        1.2, 0.01, 1000, 40)
    assert [name for name, *_ in eq.departures(t)] == ["b"]
    cold = t._replace(estimate=np.array([0.5, 1.0, 1.0]), overall=0.9)
    assert [name for name, *_ in eq.departures(cold)] == ["a"]
    assert eq.critical_z(26) > eq.critical_z(1) > 2.5
    assert eq.critical_z(26, 9) > eq.critical_z(26, 40) > eq.critical_z(26)


def test_a_law_hundreds_of_times_too_wide_is_flagged_although_its_error_grows_with_it():
    """A reading of 95,879 ± 28,632 from 16 batches (a user's metric at a step 100x too large:
    sds 40-355x the posterior's) is 3.3 of its own errors from 1, within the Wald test's
    critical value; on the sd-ratio scale it is 6.7 errors away. A right run's noisy reading
    (18.6 ± 10.9, gradient noise on a chain whose sds are within 14 % of the posterior's) is
    not."""
    t = eq.Temperatures(("w[0]", "w[1]"), np.array([3.0e3, 9.5879e4]),
                        np.array([1.0e3, 2.8632e4]), 4.9e4, 1.5e4, 500, 16)
    z = eq.critical_z(3, 16)
    wald = np.abs(t.estimate - 1) / t.se
    assert np.all(wald < z)  # what the Wald test read: within noise
    assert np.all(eq.departure_z(t.estimate, t.se) > z)
    assert [name for name, *_ in eq.departures(t)] == ["w[1]", "all coordinates", "w[0]"]
    assert eq.departure_z(18.648, 10.902) < eq.critical_z(8, 16)
    # below 1 the Wald statistic is kept; at 1 the two agree to first order
    np.testing.assert_allclose(eq.departure_z([0.2, 1.0 + 1e-6], [0.1, 0.1]), [8.0, 1e-5],
                               rtol=1e-4)
    assert np.isnan(eq.departure_z([5.0], [np.nan])[0])


def _right_runs(reps, chains, n, rho, seed):
    """The readings of ``reps`` runs of ``chains`` stationary AR(1) chains on a Gaussian of
    sds 0.5, 1.75, 3 with minibatch-like gradients (the exact one plus independent noise),
    decentred as the verdict does: each run's draws sample the target exactly."""
    from numpyro_sgrld.verdict.judge import _centring

    scale = jnp.array([0.5, 1.75, 3.0])

    def one(key):
        k1, k2 = jax.random.split(key)
        x = _ar1(k1, n, 3, rho, scale)
        g = x / scale**2 + 2.0 / scale * jax.random.normal(k2, x.shape)
        return _run(x, g), x.mean(0), x.var(0, ddof=1)

    keys = jax.random.split(jax.random.PRNGKey(seed), reps * chains)
    accs, means, variances = jax.device_get(jax.vmap(one)(keys))
    ess = n * (1 - rho) / (1 + rho)  # each chain's, exactly
    for r in range(reps):
        part = slice(r * chains, (r + 1) * chains)
        acc = jax.tree.map(lambda a, p=part: a[p] if chains > 1 else a[p][0], accs)
        factors = eq.centring_factor(means[part], variances[part]) if chains > 1 else [np.nan]
        factor = _centring(list(factors), [ess * chains] * 3, chains, mixed=True)
        yield eq.decentred(eq.summarize(acc), factor, ess)


@pytest.mark.parametrize("chains, n, rho, reps", [
    (1, 2_000, 0.9, 1_000), pytest.param(4, 2_000, 0.95, 400, marks=pytest.mark.slow)])
def test_right_runs_are_flagged_no_more_often_than_the_family_error(chains, n, rho, reps):
    """Over replicated right runs of about 100 and 200 effective draws (the least a trusted
    run holds), the share whose readings (pooled and each chain's, every group and the
    overall one) are beyond :func:`eq.critical_z` by :func:`eq.departure_z` -- the band left
    out, so the noise test alone is counted -- is at most :data:`eq.FAMILY_ERROR`, up to its
    binomial error (one-sided, 1 %)."""
    flagged = 0
    for t in _right_runs(reps, chains, n, rho, seed=11):
        sets = [t] + [c for c in t.chains if c is not None]
        tests = len(sets) * (len(t.names) + 1)
        flagged += any(
            np.any(eq.departure_z(np.append(c.estimate, c.overall),
                                  np.append(c.se, c.overall_se)) > eq.critical_z(tests, c.batches))
            for c in sets)
    f = eq.FAMILY_ERROR
    assert flagged / reps <= f + 2.33 * np.sqrt(f * (1 - f) / reps), flagged


def _gaussian(scales):
    def model():
        numpyro.sample("x", dist.Normal(0.0, jnp.asarray(scales)).to_event(1))

    return model


@pytest.mark.parametrize("loop", ["numpyro", "own"])
def test_sgld_reads_its_discretised_chains_exact_temperature(loop):
    # 4 chains: about 40 batches, so that the errors are themselves well estimated
    r"""SGLD with exact gradients on :math:`N(0, \sigma^2)` has stationary variance
    :math:`\sigma^2/(1 - h/(2\sigma^2))`, so each coordinate reads
    :math:`1/(1 - h/(2\sigma^2))`; the verdict flags the coordinates outside the band and
    passes the others."""
    scales = np.array([0.5, 1.0, 2.0])
    h = 0.3
    exact = 1 / (1 - h / (2 * scales**2))  # 1.43, 1.18, 1.04
    mcmc = MCMC(ns.SGLD(_gaussian(scales), step_size=h), num_warmup=200, num_samples=20_000,
                num_chains=4, chain_method="vectorized", progress_bar=False)
    own = ns.fast_sampling_loop() if loop == "own" else contextlib.nullcontext()
    with own, pytest.warns(UserWarning, match="equipartition") as record:
        mcmc.run(jax.random.PRNGKey(0))
    t = ns.verdict.temperatures_of(mcmc.last_state)
    z = (t.estimate - exact) / t.se
    assert np.all(np.abs(z) < _bound(t)), (t.estimate, t.se, exact)
    assert t.steps == 4 * 20_000
    message = str(record[0].message)
    assert "'x[0]" in message and "smaller step_size" in message
    flagged = {name.split(" ")[0] for name, *_ in eq.departures(t)}
    assert "x[0]" in flagged and "x[1]" not in flagged and "x[2]" not in flagged
    # each chain is judged on its own too
    assert len(t.chains) == 4 and all(c.steps == 20_000 for c in t.chains)


def test_a_right_run_is_quiet_and_one_chain_is_judged_too():
    scales = np.array([0.5, 1.0, 2.0])
    mcmc = MCMC(ns.SGLD(_gaussian(scales), step_size=0.05), num_warmup=200,
                num_samples=40_000, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), extra_fields=("configurational_temperature",))
    v = ns.check(mcmc, warn=False)
    t = v.temperatures
    assert v.trusted and not eq.departures(t)
    exact = 1 / (1 - 0.05 / (2 * scales**2))  # 1.11, 1.03, 1.01: in the band
    assert np.all(np.abs((t.estimate - exact) / t.se) < _bound(t))
    # the per-draw reading averages to the overall one
    per_draw = np.asarray(mcmc.get_extra_fields()["configurational_temperature"])
    assert abs(per_draw.mean() - t.overall) < 4 * t.overall_se


def test_minibatch_noise_is_read_as_the_discretised_chains_exact_law():
    r"""SGLD on :math:`y_j \sim N(\theta, 1)`, :math:`j \le N`, with minibatches of
    :math:`n` drawn with replacement: the gradient noise has the constant variance
    :math:`V = N^2 s_y^2/n` (:math:`s_y^2` the data's variance), so the chain's stationary
    variance is :math:`(1 + hV/2)/(\lambda(1 - h\lambda/2))` with :math:`\lambda = N + 1/10^2`,
    and the reading is :math:`(1 + hV/2)/(1 - h\lambda/2)`: the noise's own inflation, seen
    from the same noisy gradients (the minibatch is drawn independently of the position)."""
    num, n, h = 1000, 100, 8e-5
    y = jax.random.normal(jax.random.PRNGKey(3), (num,)) + 0.3

    def model(y):
        theta = numpyro.sample("theta", dist.Normal(0.0, 10.0))
        with numpyro.plate("data", num, subsample_size=n) as idx:
            numpyro.sample("y", dist.Normal(theta, 1.0), obs=y[idx])

    lam = num + 1 / 100.0
    exact = (1 + h * num**2 * float(jnp.var(y)) / n / 2) / (1 - h * lam / 2)  # 1.45
    mcmc = MCMC(ns.SGLD(model, step_size=h), num_warmup=500, num_samples=20_000,
                num_chains=4, chain_method="vectorized", progress_bar=False)
    with pytest.warns(UserWarning, match="equipartition"):
        mcmc.run(jax.random.PRNGKey(2), y)
    t = ns.verdict.temperatures_of(mcmc.last_state)
    assert abs(t.overall - exact) < _bound(t) * t.overall_se, (t.overall, t.overall_se, exact)
    draws = np.asarray(mcmc.get_samples()["theta"], np.float64)
    assert exact > eq.BAND[1] and np.var(draws) * lam > eq.BAND[1]


def test_the_readings_reach_arviz():
    from numpyro_sgrld.analysis import arviz_io as _arviz
    from numpyro_sgrld.analysis.inference_data import SG_EXTRA_FIELDS, to_inference_data

    scales = np.array([0.5, 1.0, 2.0])
    mcmc = MCMC(ns.SGLD(_gaussian(scales), step_size=0.3), num_warmup=100, num_samples=4_000,
                num_chains=2, chain_method="vectorized", progress_bar=False)
    with pytest.warns(UserWarning, match="equipartition"):
        mcmc.run(jax.random.PRNGKey(0), extra_fields=SG_EXTRA_FIELDS)
    idata = to_inference_data(mcmc)
    per_draw = np.asarray(idata.sample_stats["configurational_temperature"])
    group = _arviz.dataset(idata, "equipartition")
    per_chain = np.asarray(group["temperature"])
    assert per_draw.shape == (2, 4_000) and per_chain.shape == (2,)
    assert list(np.asarray(group["group"])) == ["x[0]", "x[1]", "x[2]"]
    assert np.asarray(group["reading"]).shape == np.asarray(group["reading_se"]).shape == (2, 3)
    # each chain's reading is its draws' own (the same steps, with thinning 1), moved from the
    # first draw's centre to the chain's mean by the module's identity
    acc = jax.device_get(mcmc.last_state.equipartition)
    n = np.asarray(acc.count, np.float64)
    centring = np.sum(np.asarray(acc.shift["x"], np.float64) / n[:, None]
                      * np.asarray(acc.gradient["x"], np.float64), 1) / (n * scales.size)
    np.testing.assert_allclose(per_draw.mean(1, dtype=np.float64) - centring, per_chain,
                               rtol=1e-4)
    exact = np.mean(1 / (1 - 0.3 / (2 * scales**2)))
    t = ns.verdict.temperatures_of(mcmc.last_state)
    assert abs(t.overall - exact) < _bound(t) * t.overall_se


@pytest.mark.slow
@pytest.mark.parametrize("fast_loop", [False, True])
def test_many_short_chains_of_psgld_without_gamma_warn_and_with_it_are_quiet(fast_loop):
    """Rensmeyer & Niggemann's pSGLD (eps = 1, decay 0.9, h = 1e-3) on N(0, 1): 400 chains
    of 40,000 steps, each about 10 effective draws long. Without Γ the law is
    φ(θ)(1 + |θ|)-shaped, variance 1.44 (sd 1.2): the verdict warns; with the exact Γ it
    samples N(0, 1) and the verdict is quiet (each chain centred on its own mean read the
    first at 1.28, inside the band, before :func:`eq.decentred`)."""
    from numpyro.infer import init_to_sample
    from numpyro_sgrld.models.gaussian import standard_normal

    found = {}
    for correction in (None, "exact"):
        kernel = ns.PSGLD(standard_normal, decay=0.9, eps=1.0, correction=correction,
                          step_size=1e-3, init_strategy=init_to_sample)
        mcmc = MCMC(kernel, num_warmup=5000, num_samples=40000, thinning=20, num_chains=400,
                    chain_method="vectorized", progress_bar=False)
        loop = ns.fast_sampling_loop() if fast_loop else contextlib.nullcontext()
        with loop, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mcmc.run(jax.random.PRNGKey(0))
        x = np.asarray(mcmc.get_samples()["theta"])
        found[correction] = ([str(w.message) for w in caught if "cannot be trusted" in
                              str(w.message)], float(np.mean(x**2)))
    warned, second = found[None]
    assert second > 1.3 and warned and "equipartition" in warned[0]
    quiet, second = found["exact"]
    assert abs(second - 1) < 0.1 and not quiet


def test_a_run_thousands_of_times_too_wide_warns():
    """PSGLD at a given step far too large on a regression whose columns are scaled 1 and 10,
    one short chain (300 + 500 steps): its sds are thousands of times the exact posterior's,
    and its readings, whose batch-means errors grow with them, are judged on the log scale."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1000, 2)) * np.array([1.0, 10.0])
    y = X @ np.array([0.5, -0.2]) + rng.normal(size=1000)
    sd = np.sqrt(np.diag(np.linalg.inv(X.T @ X + np.eye(2))))
    X, y = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)

    def model(X, y):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
        with numpyro.plate("data", 1000, subsample_size=100) as idx:
            numpyro.sample("y", dist.Normal(X[idx] @ w, 1.0), obs=y[idx])

    mcmc = MCMC(ns.PSGLD(model, 0.1), num_warmup=300, num_samples=500, progress_bar=False)
    with pytest.warns(UserWarning, match="cannot be trusted"):
        mcmc.run(jax.random.PRNGKey(0), X, y)
    assert np.all(np.asarray(mcmc.get_samples()["w"]).std(0) > 100 * sd)
    v = ns.check(mcmc, warn=False)
    assert not v.trusted and v.temperatures.overall > 1e3
    assert any("equipartition" in p for p in v.problems)


def test_a_reading_at_or_below_zero_gives_no_ratio_of_sds():
    """A reading of ``v > 0`` says the draws are about ``sqrt(v)`` times the posterior's sd;
    one at or below 0 (every coordinate reads 1 at equilibrium, whatever the law) says the
    chains are far from equilibrium and gives no ratio (not "0.00x")."""
    from numpyro_sgrld.verdict.advice import spread_reading

    assert "about 0.50x the posterior's sd in" in spread_reading(0.25)
    assert "about 2.00x the posterior's sd or wider" in spread_reading(4.0)
    for value in (0.0, -0.3):
        text = spread_reading(value)
        assert "x the posterior's sd" not in text and "far from it" in text, text
