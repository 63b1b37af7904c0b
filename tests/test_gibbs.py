"""SG-MCMC within Gibbs (``SGGibbs``): a user's ``gibbs_fn``, as for NumPyro's ``HMCGibbs``,
alternating with any preset, on a conjugate model whose joint posterior is Gaussian in closed
form: ``mu ~ N(0, s0)``, ``x | mu ~ N(mu, 1)``, ``y_i | x ~ N(x, 1)`` with a subsampled data
plate; ``mu | x`` is a data-free Gibbs draw and ``x`` the SG kernel's site.

The means are exact whatever the step (an SG step on a Gaussian keeps its mean), and ``mu``'s
sd is set by its conditional (``Var[mu] = v + v^2 Var[x]``, ``v = s0^2 / (1 + s0^2)``): an SG
step's inflation of ``Var[x]`` (about 1 % of ``Var[x]``'s share here) moves it by far less than
its Monte Carlo error. Tolerances are ESS-based z-scores with a Bonferroni bound.
"""

import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import bonferroni_z, exact_log_tau, moment_z_scores, weakly_informed_regression
from numpyro.infer import MCMC, NUTS

import numpyro_sgrld as ns
from numpyro_sgrld.presets.table import KERNELS

N, BATCH, S0 = 50, 10, 2.0
Y = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (N,)) + 1.5)


def model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, S0))
    x = numpyro.sample("x", dist.Normal(mu, 1.0))
    with numpyro.plate("data", y.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("y", dist.Normal(x, 1.0), obs=y[idx])


def gibbs_fn(rng_key, gibbs_sites, hmc_sites):
    """``mu | x ~ N(v x, v)``, ``v = s0^2 / (1 + s0^2)``: no data."""
    v = S0**2 / (1 + S0**2)
    return {"mu": v * hmc_sites["x"] + jnp.sqrt(v) * jax.random.normal(rng_key)}


def exact():
    """The joint posterior of ``(mu, x)``: its mean and sds (a Gaussian's, from its
    precision matrix)."""
    precision = np.array([[1 / S0**2 + 1, -1.0], [-1.0, 1.0 + N]])
    cov = np.linalg.inv(precision)
    return cov @ np.array([0.0, Y.sum()]), np.sqrt(np.diag(cov))


def run(kernel, num_samples=4000, **options):
    mcmc = MCMC(ns.SGGibbs(kernel, gibbs_fn, ["mu"], **options), num_warmup=1000,
                num_samples=num_samples, num_chains=4, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), Y)
    return mcmc.get_samples(group_by_chain=True)


def check_joint(draws):
    """The means of ``mu`` and ``x`` and the sd of ``mu`` against the exact posterior."""
    mean, sd = exact()
    z_mu, z_mu_sd = moment_z_scores(np.asarray(draws["mu"])[..., None], mean[0], sd[0])
    z_x, _ = moment_z_scores(np.asarray(draws["x"])[..., None], mean[1], sd[1])
    z = np.concatenate([z_mu, z_mu_sd, z_x])
    assert np.all(np.abs(z) < bonferroni_z(z.size)), z


#: BNPSGLD's metric reads a network's layer inputs, which this model has none of
#: (tests/test_bnp.py runs it on networks)
PRESETS = sorted(set(KERNELS) - {"BNPSGLD"})


@pytest.mark.slow  # SGLD's at half length in the default run: tests/test_gibbs_settings.py
@pytest.mark.parametrize("name", PRESETS)
def test_a_users_gibbs_fn_works_with_every_preset(name):
    check_joint(run(KERNELS[name](model)))


def test_the_gibbs_sites_are_drawn_and_recorded_as_nuts_records_them():
    """One transition: the Gibbs site holds ``gibbs_fn``'s draw, the SG site moved on the model
    conditioned on it, and ``get_samples`` gives constrained values under the model's names."""
    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3), gibbs_fn, ["mu"], decentre=False)
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (Y,), {})
    new = jax.jit(lambda s: kernel.sample(s, (Y,), {}))(state)
    assert set(new.z) == {"mu", "x"}
    np.testing.assert_array_equal(new.z["x"], new.sg_state.z["x"])
    expected = gibbs_fn(jax.random.split(state.rng_key)[1], None, state.sg_state.z)["mu"]
    np.testing.assert_allclose(new.z["mu"], expected, rtol=1e-6)
    assert int(new.sg_state.i) == 1
    assert set(kernel.postprocess_fn((Y,), {})(new.z)) == {"mu", "x"}


def test_the_verdicts_advice_does_not_call_a_model_within_gibbs_non_centred():
    """The SG kernel sees the Gibbs sites as data: its model alone cannot say whether the
    hierarchy is centred (here it is: ``x``'s prior depends on ``mu``)."""
    from numpyro_sgrld.verdict.advice import centred_sites, mixing_advice

    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3), gibbs_fn, ["mu"])
    kernel.init(jax.random.PRNGKey(0), 10, None, (Y,), {})
    assert centred_sites(kernel.inner_kernel) is None
    assert "already non-centred" not in mixing_advice(kernel.inner_kernel)
    assert "SGGibbs(..., interweave_every=" in mixing_advice(kernel.inner_kernel)
    assert "LocScaleReparam" not in mixing_advice(kernel.inner_kernel)
    plain = ns.SGLD(model, step_size=1e-3)
    plain.init(jax.random.PRNGKey(0), 10, None, (Y,), {})
    assert centred_sites(plain) == {"x": ["mu"]}


def test_bad_input_is_refused_with_the_fix():
    with pytest.raises(TypeError, match="HMCGibbs"):
        ns.SGGibbs(NUTS(model), gibbs_fn, ["mu"])
    with pytest.raises(ValueError, match="non-empty list"):
        ns.SGGibbs(ns.SGLD(model), gibbs_fn, "mu")
    with pytest.raises(ValueError, match="gradients.minibatch"):
        ns.SGGibbs(ns.SGLD(model, control_variate="mode"), gibbs_fn, ["mu"])
    with pytest.raises(ValueError, match="'nope' is not a latent sample site"):
        ns.SGGibbs(ns.SGLD(model, step_size=1e-3), gibbs_fn, ["nope"]).init(
            jax.random.PRNGKey(0), 10, None, (Y,), {})
    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3), lambda **kw: {"x": 0.0}, ["mu"])
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (Y,), {})
    with pytest.raises(ValueError, match="exactly the Gibbs sites"):
        kernel.sample(state, (Y,), {})
    with pytest.raises(ValueError, match="gibbs_every"):
        ns.SGGibbs(ns.SGLD(model), gibbs_fn, ["mu"], gibbs_every=0)
    for bad in (0.5, 0, "sometimes", True):
        with pytest.raises(ValueError, match="`interweave_every` must be 'auto'"):
            ns.SGGibbs(ns.SGLD(model), gibbs_fn, ["mu"], interweave_every=bad)
    inner = ns.SGLD(model)
    ns.SGGibbs(inner, gibbs_fn, ["mu"])
    with pytest.raises(ValueError, match="already inside an SGGibbs"):
        ns.SGGibbs(inner, gibbs_fn, ["mu"])



def test_the_share_of_target_bias_falls_with_the_weakly_informed_children():
    """The count and the share on hand values: a child the data do not touch counts 1, one
    whose prior sd and curvature give sigma^2 F = 1 counts 1/2; the share is 1.5/sqrt(n),
    at most 1."""
    from numpyro_sgrld.sampler import gibbs_bias

    params = {"w": (jnp.zeros(4), jnp.array([1.0, 1.0, 1e3, jnp.inf]))}
    n = gibbs_bias.weakly_informed(params, {"w": jnp.array([0.0, 1.0, 1.0, 0.0])})
    np.testing.assert_allclose(n, 2.5, rtol=1e-5)
    np.testing.assert_allclose(gibbs_bias.share(jnp.array([1.0, 9.0, 36.0])),
                               [1.0, 0.5, 0.25], rtol=1e-6)


def wide(y):
    """``mu`` with 37 Gaussian children, the data on the first alone."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    x = numpyro.sample("x", dist.Normal(mu, 1.0).expand([37]).to_event(1))
    with numpyro.plate("data", y.shape[0], subsample_size=10) as idx:
        numpyro.sample("y", dist.Normal(x[0], 1.0), obs=y[idx])


def wide_gibbs_fn(rng_key, gibbs_sites, hmc_sites):  # mu | x ~ N(sum(x) / 38, 1 / 38)
    x = hmc_sites["x"]
    return {"mu": jnp.sum(x) / 38 + jax.random.normal(rng_key) / jnp.sqrt(38.0)}


@pytest.mark.slow
@pytest.mark.parametrize("chain_method", ["sequential", "vectorized"])
def test_an_adapted_step_within_gibbs_aims_at_the_share_its_children_set(chain_method):
    """Within Gibbs an adapted step aims at ``share(n)`` of the kernel's own ``target_bias``
    (which stays as given), ``n`` the children the data say little about: 36 untouched by
    the data and one whose curvature is ``N`` exactly, so ``n = 36 + 1/(1 + N)`` from the
    first step and the share 1.5/sqrt(n), about a quarter; the step frozen at the end of
    warm-up is that share of the target over the final window's mean estimate. A given step
    has no share; without decentred children the share is FIXED_SHARE."""
    from numpyro_sgrld.sampler import gibbs_bias

    kernel = ns.SGGibbs(ns.SGLD(wide), wide_gibbs_fn, ["mu"])
    assert kernel.inner_kernel.target_bias == ns.SGLD(wide).target_bias
    mcmc = MCMC(kernel, num_warmup=200, num_samples=10, num_chains=2,
                chain_method=chain_method, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), Y)
    state = mcmc.last_state
    children = 36 + 1 / (1 + N)
    np.testing.assert_allclose(state.children, children, rtol=1e-5)
    np.testing.assert_allclose(state.bias_share, 1.5 / np.sqrt(children), rtol=1e-5)
    adaptation = state.sg_state.adaptation
    estimate = np.asarray(adaptation.total) / np.asarray(adaptation.count)
    np.testing.assert_allclose(np.asarray(state.step_size) * estimate,
                               kernel.inner_kernel.target_bias * np.asarray(state.bias_share),
                               rtol=1e-4)
    given = ns.SGGibbs(ns.SGLD(wide, step_size=1e-3), wide_gibbs_fn, ["mu"])
    assert given.init(jax.random.PRNGKey(0), 10, None, (Y,), {}).bias_share is None
    plain = ns.SGGibbs(ns.SGLD(wide), wide_gibbs_fn, ["mu"], decentre=False)
    assert plain.init(jax.random.PRNGKey(0), 200, None, (Y,), {}).bias_share == (
        gibbs_bias.FIXED_SHARE)


def test_the_verdict_notes_what_it_cannot_see_within_gibbs():
    """The verdict of a run within Gibbs notes that the Gibbs sites read the SG step's bias
    amplified, what its prediction of their shift does not see, and how to check it (the
    given step's form); the adapted step's form names the target_bias."""
    from numpyro_sgrld.sampler.gibbs_bias import bias_hint

    mcmc = MCMC(ns.SGGibbs(ns.SGLD(model, step_size=1e-2), gibbs_fn, ["mu"],
                           control_variate=None),
                num_warmup=10, num_samples=50, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), Y)
    notes = " ".join(ns.check(mcmc, warn=False).notes)
    assert "Within Gibbs the Gibbs sites" in notes and "half the step_size" in notes
    assert "half the target_bias" in bias_hint(True)


def test_the_horseshoe_scale_update_leaves_its_conditional_invariant():
    """The layer-wise horseshoe scale's declared update (Makalic & Schmidt's auxiliary, drawn
    afresh) against ``p(s | w)`` on a log-scale grid: the mean and sd of ``log s`` over 4
    chains of the update alone, with ESS-based errors."""
    from numpyro_sgrld.bridges.priors import half_cauchy_scale_draw

    w, base = jnp.array([0.3, -0.1, 0.05, 0.4, -0.25, 0.02]), 0.5

    def chain(key, s):
        def one(s, k):
            s = half_cauchy_scale_draw(k, s, {"w": w}, weights="w", base=base)
            return s, jnp.log(s)

        return jax.lax.scan(one, s, jax.random.split(key, 5000))[1]

    logs = jax.vmap(chain)(jax.random.split(jax.random.PRNGKey(0), 4),
                           jnp.array([0.01, 0.3, 1.0, 30.0]))
    t = np.linspace(-12.0, 12.0, 400_001)  # log s: density p(s | w) * s
    log_density = (-np.log1p(np.exp(2 * t)) - w.size * t
                   - float(jnp.sum(w**2)) / (2 * base**2) * np.exp(-2 * t) + t)
    density = np.exp(log_density - log_density.max())
    density /= density.sum()
    mean = float((t * density).sum())
    sd = float(np.sqrt(((t - mean) ** 2 * density).sum()))
    z_mean, z_sd = moment_z_scores(np.asarray(logs)[..., None], mean, sd)
    z = np.concatenate([z_mean, z_sd])
    assert np.all(np.abs(z) < bonferroni_z(2)), z


def horseshoe_regression(X, y):
    from numpyro_sgrld import priors

    w = numpyro.sample("w", priors.horseshoe(scale=1.0)("w", (X.shape[1], 1)))
    with numpyro.plate("data", X.shape[0], subsample_size=50) as idx:
        numpyro.sample("y", dist.Normal((X[idx] @ w)[:, 0], 1.0), obs=y[idx])


def test_without_a_gibbs_fn_the_updates_the_priors_declare_run():
    """``SGGibbs(kernel)`` finds the horseshoe scale's declared update and draws it each step
    (the same draw as the update's own function with the sweep's key), given the weights at
    the chain's position; the SG kernel moves the weights non-centred, and the sweep holds the
    centred weights where they were."""
    from numpyro_sgrld.bridges.priors import half_cauchy_scale_draw
    from numpyro_sgrld.sampler.decentring import spread

    X = np.asarray(jax.random.normal(jax.random.PRNGKey(2), (200, 3)))
    y = X @ np.array([1.0, 0.0, -0.5])
    kernel = ns.SGGibbs(ns.SGLD(horseshoe_regression, step_size=1e-4), control_variate=None)
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (X, y), {})
    assert kernel.gibbs_sites == ("w_scale",) and kernel.decentred_sites == ("w",)
    state = jax.jit(lambda s: kernel.sample(s, (X, y), {}))(state)
    chain = state.sg_state.chain
    u = (chain.z if chain.proposal is None else chain.proposal)["w_decentered"]
    w = spread(state.z["w_scale"], state.curvature["w"]) * u  # w ~ N(0, s^2): loc 0, scale s
    np.testing.assert_allclose(state.z["w"], spread(state.z["w_scale"], state.curvature["w"])
                               * chain.z["w_decentered"], rtol=1e-6)
    gibbs, moved = jax.jit(lambda s: kernel.sweep(s, (X, y), {}))(state)
    key = jax.random.split(jax.random.split(state.rng_key)[1], 1)[0]
    expected = half_cauchy_scale_draw(key, state.z["w_scale"], {"w": w}, weights="w",
                                      base=1.0)
    np.testing.assert_allclose(gibbs["w_scale"], expected, rtol=1e-6)
    chain = moved.chain
    u_new = (chain.z if chain.proposal is None else chain.proposal)["w_decentered"]
    np.testing.assert_allclose(spread(gibbs["w_scale"], state.curvature["w"]) * u_new, w,
                               rtol=1e-5)
    assert set(kernel.postprocess_fn((X, y), {})(state.z)) == {"w", "w_scale"}


def plain_model(y):
    x = numpyro.sample("x", dist.Normal(0.0, 1.0))
    with numpyro.plate("data", y.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("y", dist.Normal(x, 1.0), obs=y[idx])


def test_without_a_gibbs_fn_the_data_free_sites_are_found_and_the_others_refused():
    """``mu``'s conditional involves no data (its one child is ``x``): found and slice-updated;
    ``x``'s involves the data: refused as a Gibbs site by name; a model without a data-free
    site is refused with the fix."""
    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3))
    kernel.init(jax.random.PRNGKey(0), 10, None, (Y,), {})
    assert kernel.gibbs_sites == ("mu",) and kernel.decentred_sites == ("x",)
    with pytest.raises(ValueError, match="'x' has no exact update"):
        ns.SGGibbs(ns.SGLD(model, step_size=1e-3), gibbs_sites=["x"]).init(
            jax.random.PRNGKey(0), 10, None, (Y,), {})
    with pytest.raises(ValueError, match="no latent site with an exact update"):
        ns.SGGibbs(ns.SGLD(plain_model, step_size=1e-3)).init(jax.random.PRNGKey(0), 10,
                                                                None, (Y,), {})


@pytest.mark.slow
def test_a_horseshoe_regressions_scale_matches_nuts_with_its_declared_update():
    """SGLD at its defaults within Gibbs on a horseshoe regression, the scale drawn by its
    declared update: the weights' means and ``log`` scale's mean and sd against NUTS on the
    full data, each side's ESS-based error in the z-score; the verdict, whose prediction of
    the Gibbs sites' shift (``gibbs_bias_check``) must then name none, names none."""
    from numpyro_sgrld import full_batch

    X = np.asarray(jax.random.normal(jax.random.PRNGKey(2), (200, 3)))
    y = X @ np.array([1.0, 0.0, -0.5]) + np.asarray(jax.random.normal(jax.random.PRNGKey(3),
                                                                       (200,)))
    runs = {}
    for name, kernel in (("nuts", NUTS(full_batch(horseshoe_regression))),
                         ("sg", ns.SGGibbs(ns.SGLD(horseshoe_regression)))):
        mcmc = MCMC(kernel, num_warmup=1000, num_samples=4000, num_chains=4,
                    chain_method="sequential", progress_bar=False)
        mcmc.run(jax.random.PRNGKey(0), X, y)
        draws = mcmc.get_samples(group_by_chain=True)
        runs[name] = (np.asarray(draws["w"])[..., 0], np.log(np.asarray(draws["w_scale"])))
        if name == "sg":
            problems = " ".join(ns.check(mcmc, warn=False).problems)
    from conftest import mcse

    z = []
    for (ref, got) in zip(runs["nuts"], runs["sg"]):
        ref = ref.reshape(ref.shape[:2] + (-1,))
        ref_mean_se, ref_sd_se = mcse(ref)
        z_mean, z_sd = moment_z_scores(got.reshape(got.shape[:2] + (-1,)),
                                       ref.mean(axis=(0, 1)), ref.std(axis=(0, 1)),
                                       ref_mean_se, ref_sd_se)
        z += list(z_mean) + (list(z_sd) if ref.shape[-1] == 1 else [])
    assert np.all(np.abs(z) < bonferroni_z(len(z))), z
    assert "is predicted to sit" not in problems, problems


def test_the_slice_step_leaves_skewed_wide_and_narrow_laws_invariant():
    """Chains of the slice step alone on a log-Gamma(2, 1) (skewed: mean digamma(2), variance
    trigamma(2)), N(0, 20^2) (wider than the first interval: stepping out) and N(0, 0.01^2)
    (narrower: shrinkage): means and sds within their ESS-based errors, 4 chains each."""
    from jax.scipy.special import digamma, polygamma

    from numpyro_sgrld.sampler.conditionals import slice_step

    targets = [(lambda x: 2.0 * x - jnp.exp(x), float(digamma(2.0)),
                float(jnp.sqrt(polygamma(1, 2.0)))),
               (lambda x: -0.5 * (x / 20.0) ** 2, 0.0, 20.0),
               (lambda x: -0.5 * (x / 0.01) ** 2, 0.0, 0.01)]
    z = []
    for logp, mean, sd in targets:
        def chain(key, x0, logp=logp):
            def one(x, k):
                x = slice_step(k, logp, x)
                return x, x

            return jax.lax.scan(one, x0, jax.random.split(key, 4000))[1]

        draws = jax.vmap(chain)(jax.random.split(jax.random.PRNGKey(3), 4),
                                jnp.array([-1.0, 0.0, 0.5, 1.0]) * sd + mean)
        z_mean, z_sd = moment_z_scores(np.asarray(draws)[..., None], mean, sd)
        z += [*z_mean, *z_sd]
    assert np.all(np.abs(z) < bonferroni_z(len(z))), z


def sparse_centred(X, y):
    d = X.shape[1]
    tau = numpyro.sample("tau", dist.Gamma(0.5, 0.5))
    lam = numpyro.sample("lam", dist.Gamma(0.5, 0.5).expand([d]).to_event(1))
    w = numpyro.sample("w", dist.Normal(0.0, tau * lam).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


def test_a_centred_hierarchys_scales_are_found_data_free_with_independent_elements():
    """The scales' factors are their own prior and the weights' (no data); the local scales'
    elements are conditionally independent given the weights (a diagonal Hessian), so they
    are updated all at once; the weights' conditional involves the data."""
    from numpyro_sgrld.sampler import conditionals

    X = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (100, 4)))
    y = (X[:, 0] > 0).astype(np.int32)
    found = conditionals.data_free_sites(sparse_centred, (X, y), {})
    assert sorted(found) == ["lam", "tau"]
    assert set(found["tau"].factors) == {"tau", "w"} and found["lam"].factors == ("lam", "w")
    values = {"tau": jnp.array(0.5), "lam": jnp.ones(4), "w": jnp.array([0.1, -0.2, 0.0, 1.0])}
    key = jax.random.PRNGKey(1)
    assert conditionals.independent_elements(sparse_centred, "lam", found["lam"], values,
                                             (X, y), {}, key)


def test_the_data_curvature_is_learnt_in_warm_up_and_frozen_after_it():
    """``x``'s data curvature in the Gaussian hierarchy is ``N`` exactly (every minibatch's
    Hessian is ``N/n * n``): the learnt ``F`` is ``N`` after warm-up and stays so."""
    mcmc = MCMC(ns.SGGibbs(ns.SGLD(model, step_size=1e-3), gibbs_fn, ["mu"]), num_warmup=50,
                num_samples=20, progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), Y)
    np.testing.assert_allclose(mcmc.last_state.curvature["x"], N, rtol=1e-4)


def gibbs_every_5(method):
    """Two chains of ``gibbs_every=5``, interweaving every other step: their draws and
    rejection counts, and the kernel."""
    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-2), gibbs_fn, ["mu"], gibbs_every=5,
                        interweave_every=2)
    mcmc = MCMC(kernel, num_warmup=10, num_samples=40, num_chains=2, chain_method=method,
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), Y, extra_fields=("num_rejected",))
    return {**mcmc.get_samples(group_by_chain=True),
            **mcmc.get_extra_fields(group_by_chain=True)}, kernel


def test_the_gibbs_sites_stay_between_sweeps_and_the_verdict_judges_them():
    """With ``gibbs_every=5`` the Gibbs site changes only every fifth step after warm-up, in
    each of two vectorised chains; the verdict's judged coordinates include it."""
    with warnings.catch_warnings():  # the verdict on a run this short
        warnings.simplefilter("ignore")
        draws, kernel = gibbs_every_5("vectorized")
    for mu in np.asarray(draws["mu"]):
        changed = np.flatnonzero(np.diff(mu) != 0) + 1
        np.testing.assert_array_equal(changed, np.arange(5, 40, 5))
    assert ("mu", 0) in kernel.inner_kernel.run_info.names


@pytest.mark.slow
def test_vectorized_chains_draw_what_sequential_chains_draw():
    """Each vectorised chain runs the transitions of the chain started on its own with the
    same key (the warm-up, the sweeps every fifth step after it, the interweaving draw every
    other step, the control variates' centre): the same draws."""
    with warnings.catch_warnings():  # the verdict on a run this short
        warnings.simplefilter("ignore")
        vectorized, sequential = (gibbs_every_5(method)[0]
                                  for method in ("vectorized", "sequential"))
    assert set(vectorized) == {"mu", "x", "num_rejected"}
    for name, value in sequential.items():
        np.testing.assert_allclose(vectorized[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_the_verdict_judges_a_gibbs_site_that_barely_moves():
    """A ``gibbs_fn`` of tiny random-walk steps, two chains started far apart: what the
    verdict warns about, naming the site."""

    def stuck(rng_key, gibbs_sites, hmc_sites):  # a random walk of tiny steps
        return {"mu": gibbs_sites["mu"] + 1e-3 * jax.random.normal(rng_key)}

    stuck_kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-2), stuck, ["mu"],
                              control_variate=None)
    mcmc = MCMC(stuck_kernel, num_warmup=10, num_samples=200, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    with pytest.warns(UserWarning, match=r"cannot be trusted.*'mu'"):
        mcmc.run(jax.random.PRNGKey(0), Y, init_params={"mu": jnp.array([-3.0, 3.0])})


def test_the_unit_horseshoe_local_scales_update_leaves_each_conditional_invariant():
    """``half_cauchy_draw`` with one scale per output unit of a ``(3, 2)`` matrix, prior
    scale 0.5, a base that differs by row: each unit's ``log`` scale against its own
    conditional's density on a grid (4 chains, ESS-based errors)."""
    from numpyro_sgrld.bridges.priors import half_cauchy_draw

    w = jnp.array([[0.3, -0.02], [-0.1, 0.01], [0.05, 0.03]])
    base = jnp.array([[1.0], [0.5], [2.0]])
    prior_scale = 0.5

    def chain(key, s):
        def one(s, k):
            s = half_cauchy_draw(k, s, w, base, prior_scale)
            return s, jnp.log(s)

        return jax.lax.scan(one, s, jax.random.split(key, 5000))[1]

    logs = jax.vmap(chain)(jax.random.split(jax.random.PRNGKey(0), 4),
                           jnp.array([[0.01, 0.1], [0.3, 1.0], [1.0, 3.0], [30.0, 0.03]]))
    t = np.linspace(-14.0, 12.0, 400_001)
    z = []
    for j in range(2):
        squares = float(jnp.sum((w[:, j] / base[:, 0]) ** 2))
        log_density = (-np.log1p(np.exp(2 * t) / prior_scale**2) - 3 * t
                       - squares / 2 * np.exp(-2 * t) + t)
        density = np.exp(log_density - log_density.max())
        density /= density.sum()
        mean = float((t * density).sum())
        sd = float(np.sqrt(((t - mean) ** 2 * density).sum()))
        z_mean, z_sd = moment_z_scores(np.asarray(logs)[..., j:j + 1], mean, sd)
        z += [*z_mean, *z_sd]
    assert np.all(np.abs(z) < bonferroni_z(len(z))), z


def test_the_learnt_gaussian_precision_is_drawn_from_its_conjugate_conditional():
    """``gamma_precision_draw`` gives independent draws of ``Gamma(a + k/2, b + sum w^2 / 2)``:
    their mean and sd within their standard errors."""
    from numpyro_sgrld.bridges.priors import gamma_precision_draw

    w = jnp.array([0.3, -0.1, 0.05, 0.4, -0.25])
    a, b = 2.0, 0.5
    draws = jax.vmap(lambda k: gamma_precision_draw(k, jnp.array(1.0), {"w": w}, weights="w",
                                                    concentration=a, rate=b))(
        jax.random.split(jax.random.PRNGKey(0), 40_000))
    shape, rate = a + w.size / 2, b + float(jnp.sum(w**2)) / 2
    z_mean, z_sd = moment_z_scores(np.asarray(draws).reshape(4, -1, 1), shape / rate,
                                   np.sqrt(shape) / rate)
    assert np.all(np.abs(np.concatenate([z_mean, z_sd])) < bonferroni_z(2))


def _network(prior_kind="centred"):
    from numpyro_sgrld.models.bnn import mlp_classifier

    from numpyro_sgrld import priors

    def prior(path, shape):
        if len(shape) >= 2:
            return priors.horseshoe("unit", parametrisation=prior_kind)(path, shape)
        return priors.gaussian("learnt")(path, shape)

    X = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (60, 4)))
    y = (X[:, 0] > 0).astype(np.int32)
    return partial(mlp_classifier, hidden=(5,), num_classes=2, prior=prior,
                   subsample_size=20), (X, y)


def test_a_networks_centred_horseshoe_and_learnt_precisions_are_found():
    """On an MLP, ``SGGibbs(SGLD(model))`` finds the centred unit horseshoe's global and local
    scales and the learnt Gaussian's precisions (the biases') as Gibbs sites, and moves every
    weight and bias under them decentred."""
    from numpyro_sgrld.sampler.conditionals import automatic_conditionals
    from numpyro_sgrld.sampler.decentring import gaussian_children

    model, args = _network()
    found = automatic_conditionals(model, None, jax.random.PRNGKey(0), args, {})
    sites = set(found)
    assert len({s for s in sites if s.endswith("_global")}) == 2
    assert len({s for s in sites if s.endswith("_local")}) == 2
    assert len({s for s in sites if s.endswith("_precision")}) == 2
    assert len(sites) == 6  # the declared updates only: the weights' involve the data
    # two weight matrices, two bias vectors
    assert len(gaussian_children(model, tuple(sites), args, {})) == 4


@pytest.fixture(scope="module")
def network_start():
    """``(kernel, state, args)``: ``SGGibbs(SGLD)`` on :func:`_network`, initialised."""
    model, args = _network()
    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = kernel.init(jax.random.PRNGKey(0), 10, None, args, {})
    return kernel, state, args


def test_a_networks_decentred_weights_are_judged_as_a_networks(network_start):
    """Within Gibbs the weights under Gibbs-updated scales are moved decentred
    (``"{w}_decentered"``) and judged centred, under their own names: the verdict judges
    them as a network's (function space), not by their weight-space R-hat, under those names,
    both during the run and in ``check(mcmc)`` (``describe`` of ``SGGibbs``); their
    equipartition readings, named as the kernel moves them (decentred), below the band are a
    network's note, not a problem, as a plain kernel's network weights' are."""
    from numpyro_sgrld.sampler.decentring import SUFFIX
    from numpyro_sgrld.verdict.advice import cold_network_note, network_readings
    from numpyro_sgrld.verdict.run import describe

    kernel, state, _ = network_start
    assert kernel.decentred_sites
    assert "more steps after warm-up" in describe(kernel).warmup_advice  # draws after it
    for sites in (kernel.inner_kernel.network_sites, describe(kernel).network_sites):
        assert set(kernel.decentred_sites) <= sites, sites
        assert not any(s.endswith(SUFFIX) for s in sites), sites
        assert sites <= set(state.z), sites  # the names the draws are recorded under
    run = describe(kernel)
    weights = kernel.decentred_sites[0] + SUFFIX
    departed = [(weights, -4.2, 0.4), (f"{weights}[3] (chain 1)", 0.3, 0.05),
                (f"{weights} (chain 0)", 1.6, 0.1)]  # the last above the band: judged
    judged, cold = network_readings(departed, run.network_sites, run.judged_name)
    assert cold == departed[:2] and judged == departed[2:]
    # within Gibbs a longer warm-up moved the scales off: the note does not advise it
    assert "warm-up" not in cold_network_note(cold, run.warmup_advice)
    assert "longer warm-up" in cold_network_note(cold)


def test_a_networks_per_unit_scales_are_judged_up_to_relabelling(network_start):
    """The unit horseshoe's per-unit local scales (a network bridge's marked sites) are judged
    sorted, under ``"... (sorted)"``: permuting the units leaves what the verdict reads
    unchanged (chains holding the units in different orders draw from one law), while the
    global scale is judged as it is."""
    from numpyro_sgrld.sampler.run_verdict import SORTED

    kernel, state, args = network_start
    local = sorted(s for s in kernel.gibbs_sites if s.endswith("_local"))
    single = sorted(s for s in kernel.gibbs_sites if s.endswith("_global"))
    gibbs = {k: state.z[k] for k in kernel.gibbs_sites}
    kwargs = kernel._inner_kwargs({}, gibbs, state.curvature)
    judged = kernel.inner_kernel.judged_values(state.sg_state.z, args, kwargs)
    assert {s + SORTED for s in local} <= set(judged) and not set(local) & set(judged)
    assert set(single) <= set(judged)
    for s in local:
        np.testing.assert_allclose(judged[s + SORTED], np.sort(np.log(np.ravel(gibbs[s]))),
                                   rtol=1e-6)
    permuted = {**gibbs, **{s: gibbs[s][::-1] for s in local}}
    kwargs = kernel._inner_kwargs({}, permuted, state.curvature)
    again = kernel.inner_kernel.judged_values(state.sg_state.z, args, kwargs)
    for s in local:
        np.testing.assert_array_equal(again[s + SORTED], judged[s + SORTED])
        assert not np.array_equal(permuted[s], gibbs[s])


def test_a_networks_control_variates_are_turned_off_by_the_retest(network_start):
    """The SG kernel within Gibbs knows a network's sites, and the re-test turns a network's
    control variates off at the centre, where they cost no noise (the next test, slow: in
    the compiled step)."""
    from numpyro_sgrld.sampler import gibbs_warmup

    kernel, state, args = network_start
    assert kernel.control_variates and bool(state.centre.on)
    assert kernel.inner_kernel.network_sites
    gibbs = {k: state.z[k] for k in kernel.gibbs_sites}
    assert bool(kernel._warmup(gibbs_warmup.retest, args, {})(state, gibbs).centre.on)
    assert not bool(kernel._warmup(gibbs_warmup.retest, args, {}, network=True)(
        state, gibbs).centre.on)


@pytest.mark.slow
def test_a_networks_control_variates_are_off_once_warm_ups_approach_ends(network_start):
    """A network's chains start at the control variates' centre with them on and have them
    off from the re-test after warm-up's approach, wherever the chain is: its posterior lies
    far from the mode, and a chain that passed the test near the centre left the posterior
    later (``docs/gibbs.md``, control variates)."""
    from numpyro_sgrld.warmup.schedule import first_window_start

    kernel, state, args = network_start
    assert kernel.control_variates and bool(state.centre.on)
    step = jax.jit(lambda s: kernel.sample(s, args, {}))
    for _ in range(first_window_start(10)):
        state = step(state)
    assert bool(state.centre.on)  # the approach: on
    assert not bool(step(state).centre.on)


@pytest.mark.slow
def test_without_warm_up_a_networks_control_variates_are_off_from_the_first_step():
    """With ``num_warmup=0`` there is no approach and no retest after it: a network's chains
    have them off from the first step (another model's keep them, as before)."""
    model, args = _network()
    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = kernel.init(jax.random.PRNGKey(0), 0, None, args, {})
    assert bool(state.centre.on)
    assert not bool(jax.jit(lambda s: kernel.sample(s, args, {}))(state).centre.on)
    X, y = one_sided_data()
    other = ns.SGGibbs(ns.SGLD(scaled_logistic, step_size=1e-3))
    state = other.init(jax.random.PRNGKey(0), 0, None, (X, y), {})
    assert bool(jax.jit(lambda s: other.sample(s, (X, y), {}))(state).centre.on)


@pytest.mark.slow
def test_a_networks_gibbs_run_at_its_defaults_stays_finite():
    """A short run of the same network at SGLD's defaults: every draw finite, every site
    under its model name."""
    model, args = _network()
    kernel = ns.SGGibbs(ns.SGLD(model))
    mcmc = MCMC(kernel, num_warmup=200, num_samples=100, progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), *args)
    samples = mcmc.get_samples()
    assert all(np.all(np.isfinite(np.asarray(v))) for v in samples.values())
    assert set(kernel.decentred_sites) | set(kernel.gibbs_sites) <= set(samples)


def test_without_numpyros_dependency_tracing_the_declared_updates_still_run(monkeypatch):
    """Where NumPyro cannot trace a model's dependencies, ``SGGibbs`` says so and updates the
    sites whose priors declare an update, moving every site as written."""
    import numpyro.infer.inspect

    def fail(*args, **kwargs):
        raise TypeError("not traceable")

    monkeypatch.setattr(numpyro.infer.inspect, "get_dependencies", fail)
    X = np.asarray(jax.random.normal(jax.random.PRNGKey(2), (200, 3)))
    y = X @ np.array([1.0, 0.0, -0.5])
    kernel = ns.SGGibbs(ns.SGLD(horseshoe_regression, step_size=1e-4))
    with pytest.warns(UserWarning, match="could not trace"):
        kernel.init(jax.random.PRNGKey(0), 10, None, (X, y), {})
    assert kernel.gibbs_sites == ("w_scale",) and kernel.decentred_sites == ()


def test_control_variates_within_gibbs_give_the_full_data_gradient_at_the_centre():
    """At the centre, the control-variate gradient of any minibatch is the full-data gradient
    (the correction is mapped into the decentred coordinate): the SG kernel's model with the
    correction on a random minibatch against the same model on all the data, without it."""
    from numpyro.infer.util import potential_energy

    from numpyro_sgrld.sampler import decentring
    from numpyro_sgrld.sampler import gibbs_control_variates as gcv

    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3), gibbs_fn, ["mu"],
                        control_variate="mode")
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (Y,), {})
    centre = state.centre
    gibbs = {"mu": state.z["mu"]}
    curvature = {"x": jnp.asarray(7.0)}  # any: the identity holds in every coordinate
    kwargs = kernel._inner_kwargs({}, gibbs, curvature, centre)
    (loc, scale), = decentring.loc_scale(model, ("x",), {**gibbs, "x": 0.0}, (Y,), {}).values()
    u0 = {"x_decentered": (centre.values["x"] - loc) / decentring.spread(scale, 7.0)}
    idx = {"data": jax.random.choice(jax.random.PRNGKey(5), N, (BATCH,), replace=False)}
    inner = kernel.inner_kernel.model
    minibatch_grad = jax.grad(lambda u: potential_energy(
        numpyro.handlers.substitute(inner, data=idx), (Y,), kwargs, u))(u0)
    plain_kwargs = {k: v for k, v in kwargs.items() if k != gcv.CV_KWARG}
    full_grad = jax.grad(lambda u: potential_energy(ns.full_batch(inner), (Y,), plain_kwargs,
                                                    u))(u0)
    np.testing.assert_allclose(minibatch_grad["x_decentered"], full_grad["x_decentered"],
                               rtol=1e-4)


def test_control_variates_within_gibbs_are_refused_where_the_likelihood_reads_a_gibbs_site():
    with pytest.raises(ValueError, match="control_variate"):
        ns.SGGibbs(ns.SGLD(model), gibbs_fn, ["mu"], control_variate="yes")
    auto = ns.SGGibbs(ns.SGLD(model, step_size=1e-3), lambda rng_key, gibbs_sites, hmc_sites: {
        "x": hmc_sites["mu"]}, ["x"])
    auto.init(jax.random.PRNGKey(0), 10, None, (Y,), {})
    assert auto.control_variates is False

    def x_given_rest(rng_key, gibbs_sites, hmc_sites):
        return {"x": hmc_sites["mu"]}

    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3), x_given_rest, ["x"],
                        control_variate="mode")
    with pytest.raises(ValueError, match="'y' depends on \\['x'\\]"):
        kernel.init(jax.random.PRNGKey(0), 10, None, (Y,), {})


def scaled_logistic(X, y=None):
    """A logistic regression whose weights' scale is a Gibbs site (found automatically)."""
    s = numpyro.sample("s", dist.HalfCauchy(1.0))
    w = numpyro.sample("w", dist.Normal(0.0, s).expand([X.shape[1]]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=None if y is None else y[idx])


@pytest.mark.parametrize("control_variate", ["auto", "mode"])
def test_chains_started_away_from_the_centre_keep_control_variates_only_where_they_pay(
        control_variate):
    """Two vectorised chains given their starts: near the mode the control variates cut the
    gradient's noise to under 5 % and stay on; far out (the logits saturated) they raise it
    more than tenfold and are off under "auto", kept under "mode" (required)."""
    X, y = one_sided_data()
    kernel = ns.SGGibbs(ns.SGLD(scaled_logistic, step_size=1e-3),
                        control_variate=control_variate)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    start = {"s": jnp.ones(2), "w": jnp.array([[10.0, 10.0], [40.0, 40.0]])}
    state = kernel.init(keys, 10, start, (X, y), {})
    assert kernel.gibbs_sites == ("s",)
    expected = [True, control_variate == "mode"]
    np.testing.assert_array_equal(np.asarray(state.centre.on), expected)


def one_sided_data():
    """Positive covariates, every label 1: the mode (the control variates' centre) has each
    weight near 10.5, and far beyond it every logit saturates, so the plain minibatch gradient
    there is almost 0 while the control variates carry the centre's noise."""
    return jnp.abs(jax.random.normal(jax.random.PRNGKey(1), (200, 2))), jnp.ones(200)


def test_the_control_variates_are_retested_where_the_chain_is():
    """The re-test after warm-up's approach reads the chain's position: a chain started at
    the centre has them on; at the centre they stay on; with the weights moved far out (the
    logits saturated) they are off."""
    from numpyro_sgrld.sampler import gibbs_warmup

    X, y = one_sided_data()
    kernel = ns.SGGibbs(ns.SGLD(scaled_logistic, step_size=1e-3))
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (X, y), {})
    assert bool(state.centre.on)  # started at the centre, not tested there
    gibbs = {"s": state.z["s"]}
    retest = kernel._warmup(gibbs_warmup.retest, (X, y), {})
    assert bool(retest(state, gibbs).centre.on)
    chain = state.sg_state.chain  # where the next step starts: its proposal (check_proposal)
    far = chain._replace(proposal={**chain.proposal,
                                   "w_decentered": jnp.array([40.0, 40.0]) / gibbs["s"]})
    assert not bool(retest(state._replace(sg_state=state.sg_state._replace(chain=far)),
                           gibbs).centre.on)


def test_warm_up_retests_the_control_variates_after_its_approach(monkeypatch):
    """Chains started at the centre keep their control variates there and have them decided
    again at warm-up's step ``num_warmup // 5``: with the decision made 'off', every chain
    ends with them off."""
    from numpyro_sgrld.sampler import gibbs_control_variates as gcv

    monkeypatch.setattr(gcv, "pays", lambda *args, **kwargs: jnp.zeros((), bool))
    X, y = one_sided_data()
    mcmc = MCMC(ns.SGGibbs(ns.SGLD(scaled_logistic, step_size=1e-3)), num_warmup=10,
                num_samples=2, num_chains=2, chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), X, y)
    np.testing.assert_array_equal(np.asarray(mcmc.last_state.centre.on), [False, False])


def signed_modes(y):
    """``th ~ N(0, s)``, ``y_i ~ N(th^2, 1)`` in 4 coordinates: the data set ``th^2`` near 4,
    so the posterior has 16 modes, one for each pattern of signs, ``s`` a Gibbs site."""
    s = numpyro.sample("s", dist.HalfNormal(5.0))
    th = numpyro.sample("th", dist.Normal(0.0, s).expand([4]).to_event(1))
    with numpyro.plate("data", y.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Normal(th ** 2, 1.0).to_event(1), obs=y[idx])


def test_each_chain_searches_its_own_centre_so_that_chains_in_other_modes_are_seen():
    """Each chain's control variates' centre is a mode searched from its own prior draw, and
    the chain starts there: on a posterior of 16 modes (:func:`signed_modes`) four chains find
    more than one (all four in one mode has probability 16^-3), and the verdict says the
    draws cannot be trusted. With one centre for every chain, every chain started in one
    mode and the run was quiet, its means at +-2 where the posterior's are 0."""
    y = np.asarray(jax.random.normal(jax.random.PRNGKey(3), (200, 4)) + 4.0)
    mcmc = MCMC(ns.SGGibbs(ns.SGLD(signed_modes)), num_warmup=200, num_samples=300,
                num_chains=4, chain_method="vectorized", progress_bar=False)
    with pytest.warns(UserWarning, match="cannot be trusted"):
        mcmc.run(jax.random.PRNGKey(0), y)
    signs = np.sign(np.asarray(mcmc.last_state.centre.values["th"]))
    assert len({tuple(row) for row in signs}) > 1, signs
    assert np.all(np.asarray(mcmc.last_state.centre.on))


def test_a_second_init_on_other_data_searches_the_centres_on_them():
    """``init`` again with other data sets up again what was set up from the data: each
    chain's control variates' centre and its full-data gradient are a fresh kernel's (before,
    the first data's centre stayed, and its gradient biased every step of the second run);
    with the same data it keeps the compiled centre search (before, every ``init`` compiled
    it again: about 3 s on German credit, for each sequential chain and each repeated run)."""
    X, y = one_sided_data()
    other = 1 - y
    kernel = ns.SGGibbs(ns.SGLD(scaled_logistic, step_size=1e-3))
    kernel.init(jax.random.PRNGKey(0), 10, None, (X, y), {})
    first_search = kernel._centre_search
    again = kernel.init(jax.random.PRNGKey(1), 10, None, (X, other), {})
    fresh = ns.SGGibbs(ns.SGLD(scaled_logistic, step_size=1e-3)).init(
        jax.random.PRNGKey(1), 10, None, (X, other), {})
    for a, b in zip(jax.tree.leaves((again.centre, again.z)),
                    jax.tree.leaves((fresh.centre, fresh.z))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert np.all(np.asarray(again.centre.values["w"]) < 0)  # every label 0: weights negative
    # the same data again (a repeated run, or sequential chains): the compiled search is kept
    search = kernel._centre_search
    assert search is not first_search
    kernel.init(jax.random.PRNGKey(2), 10, None, (X, other), {})
    assert kernel._centre_search is search


def grouped(g, y, num_groups):
    """Group means ``a ~ N(mu, s)`` over ``num_groups`` groups, ``y_i ~ N(a[g_i], 1)``."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    s = numpyro.sample("s", dist.HalfNormal(2.0))
    with numpyro.plate("groups", num_groups):
        a = numpyro.sample("a", dist.Normal(mu, s))
    with numpyro.plate("data", y.shape[0], subsample_size=20) as idx:
        numpyro.sample("y", dist.Normal(a[g[idx]], 1.0), obs=y[idx])


@pytest.mark.slow
def test_a_second_init_on_data_of_other_shapes_sets_up_as_a_fresh_kernel():
    """``init`` again on data with another number of groups finds the Gibbs sites'
    conditionals again and starts where a fresh kernel starts (before, the first data's
    conditionals stayed and the second run failed with a broadcasting error naming shapes
    (20,) and (10,))."""
    def data(num_groups, seed):
        g = jax.random.randint(jax.random.PRNGKey(seed), (200,), 0, num_groups)
        return g, jax.random.normal(jax.random.PRNGKey(seed + 1), (200,)) + 3.0, num_groups

    kernel = ns.SGGibbs(ns.SGLD(grouped, step_size=1e-3))
    kernel.init(jax.random.PRNGKey(0), 10, None, data(20, 0), {})
    again = kernel.init(jax.random.PRNGKey(1), 10, None, data(10, 2), {})
    fresh = ns.SGGibbs(ns.SGLD(grouped, step_size=1e-3)).init(
        jax.random.PRNGKey(1), 10, None, data(10, 2), {})
    assert again.z["a"].shape == (10,)
    for a, b in zip(jax.tree.leaves((again.centre, again.z)),
                    jax.tree.leaves((fresh.centre, fresh.z))):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    kernel.sample(again, data(10, 2), {})  # the sweep's conditionals are the new data's


@pytest.mark.slow
def test_a_second_run_on_other_data_draws_what_a_fresh_kernel_draws():
    """``mcmc.run`` again with other data sets up again what was set up from the data: the
    control variates' centres (their full-data gradients), the non-centred draws. Before, the
    second run kept the first data's centre, and on a Gaussian likelihood that gradient gave
    back the first data's posterior exactly."""
    X, y = one_sided_data()
    other = 1 - np.asarray(y)
    runs = []
    for first in (y, None):
        mcmc = MCMC(ns.SGGibbs(ns.SGLD(scaled_logistic, step_size=1e-3)), num_warmup=20,
                    num_samples=50, progress_bar=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if first is not None:
                mcmc.run(jax.random.PRNGKey(0), X, first)
            mcmc.run(jax.random.PRNGKey(1), X, other)
        runs.append(np.asarray(mcmc.get_samples()["w"]))
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-5, atol=1e-6)
    assert np.all(runs[0] < 0)  # every label 0 now: the weights negative


def test_control_variates_at_the_centre_are_the_plain_gradients_where_off():
    """A chain whose control variates are off steps with the plain minibatch gradient: the
    SG kernel's model gives the same gradient as without the centre."""
    from numpy.testing import assert_allclose
    from numpyro.infer.util import potential_energy

    from numpyro_sgrld.sampler import gibbs_control_variates as gcv

    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3), gibbs_fn, ["mu"],
                        control_variate="mode")
    state = kernel.init(jax.random.PRNGKey(0), 10, None, (Y,), {})
    gibbs = {"mu": state.z["mu"]}
    curvature = {"x": jnp.asarray(3.0)}
    off = kernel._inner_kwargs({}, gibbs, curvature, state.centre._replace(on=jnp.array(False)))
    plain = {k: v for k, v in off.items() if k != gcv.CV_KWARG}
    idx = {"data": jax.random.choice(jax.random.PRNGKey(5), N, (BATCH,), replace=False)}
    inner = numpyro.handlers.substitute(kernel.inner_kernel.model, data=idx)
    u = {"x_decentered": jnp.asarray(0.7)}
    grads = [jax.grad(partial(lambda kw, u: potential_energy(inner, (Y,), kw, u), kw))(u)
             ["x_decentered"] for kw in (off, plain)]
    assert_allclose(grads[0], grads[1], rtol=1e-6)


@pytest.mark.slow
def test_control_variates_within_gibbs_sample_the_joint_posterior():
    """SGLD at its defaults within Gibbs with model-coordinate control variates, on the
    closed-form Gaussian hierarchy."""
    mcmc = MCMC(ns.SGGibbs(ns.SGLD(model), gibbs_fn, ["mu"], control_variate="mode"),
                num_warmup=1000, num_samples=4000, num_chains=4, chain_method="sequential",
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), Y)
    check_joint(mcmc.get_samples(group_by_chain=True))


def coupled(y):
    """``mu ~ N(0, I_2)``, ``x | mu ~ N(mu_1 + mu_2, 1)``, ``y_i | x ~ N(x, 1)``: ``mu``'s two
    elements are coupled through the data once ``x`` is non-centred."""
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
    x = numpyro.sample("x", dist.Normal(mu.sum(), 1.0))
    with numpyro.plate("data", y.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("y", dist.Normal(x, 1.0), obs=y[idx])


def test_the_non_centred_update_draws_from_its_closed_form_conditional():
    """Given ``x~ = x - mu_1 - mu_2`` the conditional of ``mu`` is Gaussian with precision
    ``I + N 1 1^T`` and mean ``cov 1 (sum(y) - N x~)`` (all the data): chains of the update
    alone (its elements in turn) match its means and sds within their ESS-based errors."""
    from numpyro.distributions import biject_to, constraints

    from numpyro_sgrld.sampler import interweaving

    nc_model = interweaving.non_centred_model(coupled, ("x",))
    draw = interweaving.non_centred_update(nc_model, "mu", biject_to(constraints.real_vector),
                                           (Y,), {})
    tilde = 0.3
    cov = np.linalg.inv(np.eye(2) + N * np.ones((2, 2)))
    mean = cov @ np.full(2, Y.sum() - N * tilde)

    def chain(key, mu0):
        def one(mu, k):
            mu = draw(k, {"mu": mu, "x_decentered": jnp.array(tilde)})
            return mu, mu

        return jax.lax.scan(one, mu0, jax.random.split(key, 3000))[1]

    starts = jnp.asarray(mean) + jnp.array([[-1.0, 1.0], [0.0, 0.0], [0.5, -0.5], [1.0, 0.2]])
    draws = np.asarray(jax.jit(jax.vmap(chain))(jax.random.split(jax.random.PRNGKey(5), 4),
                                                starts))
    z_mean, z_sd = moment_z_scores(draws, mean, np.sqrt(np.diag(cov)))
    z = np.concatenate([z_mean, z_sd])
    assert np.all(np.abs(z) < bonferroni_z(z.size)), z


def test_interweaving_runs_within_gibbs_on_its_steps():
    """``interweave_every=2``: the non-centred draw runs on every other step (``mu`` and ``x``
    move together there: ``x - mu`` is kept), the draws are finite."""
    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3), gibbs_fn, ["mu"], interweave_every=2)
    state = kernel.init(jax.random.PRNGKey(0), 0, None, (Y,), {})
    assert kernel.interwoven_sites == ("mu",)
    sweep = jax.jit(lambda s: kernel.sweep(s, (Y,), {}))
    gibbs, sg_state = sweep(state)  # step 0: interwoven
    x = float(kernel._recorded(state._replace(sg_state=sg_state), gibbs, (Y,), {})["x"])
    centred = float(gibbs_fn(jax.random.split(state.rng_key)[1], None,
                             {"x": state.z["x"]})["mu"])
    assert float(gibbs["mu"]) != centred  # moved again after the centred draw
    np.testing.assert_allclose(x - float(gibbs["mu"]), float(state.z["x"]) - centred,
                               rtol=1e-4, atol=1e-5)
    chain = state.sg_state.chain
    step_one = state._replace(sg_state=state.sg_state._replace(
        chain=chain._replace(i=chain.i + 1)))
    gibbs, _ = sweep(step_one)  # step 1: the centred draw only
    np.testing.assert_allclose(gibbs["mu"], centred, rtol=1e-6)


@pytest.mark.slow
def test_interweaving_within_gibbs_samples_the_joint_posterior():
    """The centred draw of ``mu`` (the user's ``gibbs_fn``), then every other step its
    non-centred draw given ``x - mu`` and all the data, then an SGLD step: the joint law."""
    kernel = ns.SGGibbs(ns.SGLD(model), gibbs_fn, ["mu"], interweave_every=2)
    mcmc = MCMC(kernel, num_warmup=1000, num_samples=4000, num_chains=4,
                chain_method="sequential", progress_bar=False)
    mcmc.run(jax.random.PRNGKey(0), Y)
    assert kernel.interwoven_sites == ("mu",)
    check_joint(mcmc.get_samples(group_by_chain=True))


def test_a_slice_step_from_outside_the_support_keeps_the_state():
    """Where the log density at the current state is not finite there is no slice to draw
    from: the state is kept (not replaced by any finite point of a wide interval)."""
    from numpyro_sgrld.sampler.conditionals import slice_step

    def logp(x):
        return jnp.where(x > 0, -x, -jnp.inf)

    keys = jax.random.split(jax.random.PRNGKey(0), 100)
    out = jax.vmap(lambda k: slice_step(k, logp, jnp.array(-1.0)))(keys)
    assert np.all(np.asarray(out) == -1.0)


def test_the_control_variates_centre_is_searched_with_the_children_non_centred():
    """The centre's mode is given in the model's own sites (``w`` centred, no
    ``w_decentered``), and the local scales of the weights the data do not inform (``y``
    depends on the first column only) are at the non-centred density's mode, near the
    log-prior's (``lam = 1``), not collapsing towards the centred density's unbounded point
    ``lam = w = 0`` (where a search in the centred coordinates ends, ``lam ~ 1e-3``)."""
    from numpyro_sgrld.sampler import gibbs_control_variates as gibbs_cv

    X = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (200, 4)))
    y = (X[:, 0] > 0).astype(np.int32)
    found = gibbs_cv.centre(sparse_centred, ("w",), jax.random.PRNGKey(2), (X, y), {},
                            children=("w",))
    assert set(found.mode) == {"tau", "lam", "w"} and set(found.values) == {"w"}
    lam = np.asarray(found.mode["lam"])
    assert np.all(lam[1:] > 0.1), lam
    assert np.all(np.isfinite(np.asarray(found.grad["w"])))


def test_the_data_curvature_is_learnt_exactly_where_a_scale_collapses():
    """Hutchinson's estimate of ``F`` for a child whose prior sd is 1e-6 (its prior curvature
    1e12): on a likelihood of independent coordinates the estimate is exact, ``F`` to single
    precision's relative error of ``F`` itself, not of ``1/sigma^2 + F`` (subtracting the
    prior's curvature from the whole Hessian's diagonal leaves an error of up to that
    number's resolution, 65,536: it gave 0 here)."""
    from numpyro_sgrld.sampler import decentring

    data = np.asarray(jax.random.normal(jax.random.PRNGKey(4), (40, 3)), np.float32)

    def collapsed(y):
        s = numpyro.sample("s", dist.HalfNormal(1.0))
        w = numpyro.sample("w", dist.Normal(0.0, s).expand([3]).to_event(1))
        with numpyro.plate("data", y.shape[0], subsample_size=10):
            numpyro.sample("y", dist.Normal(w, 0.5).to_event(1), obs=y[:10])

    values = {"s": jnp.float32(1e-6), "w": jnp.array([1e-6, -2e-6, 0.0], jnp.float32)}
    estimate = decentring.curvature_estimate(collapsed, ("w",), values,
                                             jax.random.PRNGKey(0), (data,), {})
    # 40 rows (10 scaled by 4) of N(w, 0.5^2): F = 40 / 0.25 per coordinate
    np.testing.assert_allclose(estimate["w"], np.full(3, 160.0), rtol=1e-5)


@pytest.mark.slow
def test_a_scale_held_by_its_prior_and_weakly_informed_children_matches_its_exact_law():
    """``log tau``'s mean and sd at the defaults against its exact posterior (given ``tau``,
    ``y ~ N(0, tau^2 X X^T + I)``: a quadrature over ``log tau``), z-scores from the draws'
    ESS-based errors. Drawn given its children alone the scale sits about 0.25 of its sd off
    (``test_gibbs_bias_check.py``); the default's interweaving also draws it given the
    children's non-centred values and all the data, which barely touch them."""
    rng = np.random.default_rng(0)
    X, y = 0.02 * rng.normal(size=(200, 9)), rng.normal(size=200)
    mean, sd = exact_log_tau(X, y)
    mcmc = MCMC(ns.SGGibbs(ns.SGLD(weakly_informed_regression)), num_warmup=2000,
                num_samples=20000, num_chains=4, chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcmc.run(jax.random.PRNGKey(0), jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32))
    draws = np.log(np.asarray(mcmc.get_samples(group_by_chain=True)["tau"], np.float64))
    z_mean, z_sd = moment_z_scores(draws[..., None], mean, sd)
    assert np.all(np.abs(np.concatenate([z_mean, z_sd])) < bonferroni_z(2))


def test_init_inside_a_jax_transformation_is_refused_naming_the_chain_methods_that_run():
    """``MCMC(chain_method="parallel")`` on several devices calls ``init`` inside ``pmap``,
    where the set-up's trace of the model met the values it had computed there and failed
    with JAX's ``UnexpectedTracerError``; refused first, naming the chain methods that run
    (here under ``vmap``, the same kind of trace)."""
    kernel = ns.SGGibbs(ns.SGLD(model, step_size=1e-3), gibbs_fn, ["mu"])
    with pytest.raises(ValueError, match="chain_method='vectorized'.*'sequential'"):
        jax.vmap(lambda k: kernel.init(k, 10, None, (Y,), {}).z)(
            jax.random.split(jax.random.PRNGKey(0), 2))
