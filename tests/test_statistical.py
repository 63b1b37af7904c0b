"""Statistical tests against exact answers, with tolerances from Monte Carlo error.

Every comparison is a z-score: the estimate minus the answer, over the Monte Carlo standard
error (ArviZ's ESS-based MCSE of the chains' mean or sd, combined in quadrature with the
reference's own MCSE when the reference is a finite NUTS run). A test of d coordinates makes
2d comparisons (means and sds) and uses the Bonferroni threshold for a family-wise false-alarm
probability of 1e-3 (|z| < 3.89 for 10 comparisons, 4.26 for 50).

Stochastic-gradient chains have a real O(h) bias, so they are compared with the law the
*discretised* chain has, not with the posterior:

- SGLD on N(0, sigma^2) with exact gradients: variance sigma^2 / (1 - h / (2 sigma^2)).
- The conjugate regression (N = 2000, minibatches of 100 drawn with replacement): the drift is
  linear and the minibatch noise has a covariance quadratic in w, so the stationary mean is
  the posterior mean and the stationary covariance solves a discrete Lyapunov equation
  (``conftest.regression_sg_law``). At the steps used the discretisation and the minibatch
  noise widen the sds by about 4 % (the noise's share h Var[grad] / 2 dominates), about one
  standard error of these runs, so the prediction matters.
- German credit: the same Lyapunov prediction on the Laplace approximation at the mode gives
  the sds' inflation at h = 1e-4 (1.4-4.9 %); the NUTS reference's sds are multiplied by it.
"""

import warnings
from functools import partial

import numpy as np
import pytest
from conftest import assert_moments, bonferroni_z, mcse, moment_z_scores, regression_sg_law
from jax import random
from numpyro.infer import MCMC, NUTS, init_to_value
from numpyro_sgrld.models import gaussian
from numpyro_sgrld.models import linear_regression as lr
from numpyro_sgrld.models import logistic_regression as lg
from scipy.linalg import solve_discrete_lyapunov, sqrtm

from numpyro_sgrld import (
    PSGLD,
    SGHMC,
    SGLD,
    AdamSGLD,
    MongeSGLD,
    ShampooSGLD,
    WenzelSGLD,
    check,
    full_batch,
)


@pytest.mark.parametrize("step_size", [pytest.param(0.2, marks=pytest.mark.slow), 0.8])
def test_sgld_stationary_variance_is_that_of_the_discretised_chain(step_size):
    """The per-chain mean of x^2 over 1000 independent chains: its standard error is their
    spread over sqrt(1000). The variance inflation 1 / (1 - h / (2 sigma^2)) is 11 % at
    h = 0.8 (about 80 standard errors) and 2.6 % at h = 0.2 (about 12), so the continuous-time
    answer sigma^2 is rejected by the same 4-standard-error test. Both step sizes run the
    same code; the smaller one is in the slow set."""
    sigma, num_chains, num_samples, thinning = 2.0, 1000, 1000, 10
    mcmc = MCMC(
        SGLD(partial(gaussian.normal, sigma), step_size=step_size),
        num_warmup=int(20 * sigma**2 / step_size),  # contraction (1 - h/sigma^2)^t ~ e^-20
        num_samples=num_samples * thinning,
        thinning=thinning,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(0))
    x = np.asarray(mcmc.get_samples(group_by_chain=True)["theta"], np.float64)
    per_chain = (x**2).mean(axis=1)  # the mean is known to be 0
    estimate = per_chain.mean()
    se = per_chain.std(ddof=1) / np.sqrt(num_chains)
    expected = gaussian.sgld_stationary_variance(sigma, step_size)
    assert abs(estimate - expected) < 4 * se, (estimate, expected, se)
    # power: the continuous-time answer sigma^2 is rejected by the same test
    assert abs(estimate - sigma**2) > 4 * se


SUBSAMPLE = 100


@pytest.fixture(scope="module")
def regression():
    X, y, _ = lr.make_data(seed=0, num_data=2000, num_features=5)
    return X, y, lr.exact_posterior(X, y, prior_scale=1.0, noise_scale=0.5)


def _law(regression, step_size, **kw):
    """Mean and sds of the discretised chain's stationary law (``conftest.regression_sg_law``)."""
    X, y, _ = regression
    mean, cov, _ = regression_sg_law(X, y, SUBSAMPLE, step_size, **kw)
    return mean, np.sqrt(np.diag(cov))


def _assert_can_fail(w, mean, sd):
    """Power: the same draws reject an answer whose means are 0.5 sd off, and one whose sds
    are 25 % wider (either is a wrong law a broken kernel could give)."""
    limit = bonferroni_z(2 * len(mean))
    z_mean, _ = moment_z_scores(w, mean + 0.5 * sd, sd)
    _, z_sd = moment_z_scores(w, mean, 1.25 * sd)
    assert np.abs(z_mean).max() > limit and np.abs(z_sd).max() > limit, (z_mean, z_sd)


def _run_regression(kernel, regression, num_samples=20000, num_warmup=2000, key=0):
    """4 vectorized chains after burn-in; the draws grouped by chain."""
    X, y, _ = regression
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(key), X, y)
    assert not mcmc.get_extra_fields()["diverging"].any()
    return np.asarray(mcmc.get_samples(group_by_chain=True)["w"], np.float64)


# SGLD at h = 1e-6 and SGHMC at h = 1e-7 mix in about 1/(h lambda) ~ 130 steps (lambda ~ 8000
# the posterior precision; SGHMC's friction 0.1 gives the same rate): 4 chains x 20,000 draws
# give ESS ~ 600 for the sds, an sd's relative MCSE of ~3 %, enough to resolve the 25 % error
# of `_assert_can_fail` at more than twice the threshold.
@pytest.mark.parametrize(
    "name, kernel, law",
    [
        ("sgld", lambda m: SGLD(m, step_size=1e-6), dict(step_size=1e-6)),
        pytest.param(
            "sghmc",
            lambda m: SGHMC(m, step_size=1e-7, friction=0.1),
            dict(step_size=1e-7, kind="sghmc", friction=0.1),
            marks=pytest.mark.slow,
        ),
    ],
    ids=["sgld", "sghmc"],
)
def test_subsampled_kernels_on_conjugate_regression(name, kernel, law, regression):
    """SGLD and SGHMC with minibatches against the discretised chain's exact stationary mean
    and sds (Lyapunov equation with the minibatch noise's covariance)."""
    w = _run_regression(kernel(partial(lr.model, subsample_size=SUBSAMPLE)), regression)
    mean, sd = _law(regression, **law)
    assert_moments(w, mean, sd)
    _assert_can_fail(w, mean, sd)


def test_nuts_on_full_batch_matches_closed_form(regression):
    """NUTS is exact: its draws against the closed-form posterior, ESS-based errors."""
    X, y, post = regression
    mcmc = MCMC(
        NUTS(full_batch(partial(lr.model, subsample_size=SUBSAMPLE))),
        num_warmup=500,
        num_samples=2000,
        progress_bar=False,
    )
    mcmc.run(random.PRNGKey(1), X, y)
    w = mcmc.get_samples(group_by_chain=True)["w"]
    assert_moments(w, post.mean, post.sd)
    _assert_can_fail(w, post.mean, post.sd)


def _laplace_sd_inflation(X, y, step_size, subsample_size):
    """Relative sd inflation of SGLD at ``step_size`` on the logistic regression, from the
    Lyapunov equation of the chain linearised at the mode (Hessian A, minibatch noise
    covariance B = N^2/n Cov_i[grad l_i] at the mode): sqrt(diag(Sigma_h) / diag(A^-1))."""
    from scipy.optimize import minimize

    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    N, d = X.shape

    def potential(w):
        z = X @ w
        return 0.5 * w @ w + np.sum(np.logaddexp(0.0, z) - y * z)

    def grad(w):
        return w + X.T @ (1 / (1 + np.exp(-X @ w)) - y)

    mode = minimize(potential, np.zeros(d), jac=grad, method="BFGS", options={"gtol": 1e-9}).x
    p = 1 / (1 + np.exp(-X @ mode))
    A = np.eye(d) + (X * (p * (1 - p))[:, None]).T @ X
    B = N**2 / subsample_size * np.cov((X * (p - y)[:, None]).T, bias=True)
    h = step_size
    cov = solve_discrete_lyapunov(np.eye(d) - h * A, 2 * h * np.eye(d) + h**2 * B)
    return np.sqrt(np.diag(cov) / np.diag(np.linalg.inv(A)))


@pytest.mark.slow
def test_sgld_on_german_credit_agrees_with_nuts(german_credit):
    """SGLD (minibatches of 100, h = 1e-4) against NUTS on the full data. The reference is a
    finite run: its MCSEs add to the SGLD draws' in quadrature. SGLD's known bias is put into
    the reference: its sds are multiplied by the inflation the Lyapunov equation of the chain
    linearised at the mode predicts (1.4-4.9 % here; the residual, non-Gaussian part of the
    bias is O(h) times a skewness-sized factor and was not resolved). The slowest direction
    mixes in ~750 steps, so 4 x 20,000 draws give an ESS of ~100 there."""
    X, y = german_credit
    model = partial(lg.model, subsample_size=100)
    nuts = MCMC(NUTS(full_batch(model)), num_warmup=500, num_samples=4000, progress_bar=False)
    nuts.run(random.PRNGKey(1), X, y)
    ref = np.asarray(nuts.get_samples(group_by_chain=True)["w"], np.float64)
    sgld = MCMC(
        SGLD(model, step_size=1e-4),
        num_warmup=2000,
        num_samples=20000,
        num_chains=4,
        chain_method="vectorized",
        progress_bar=False,
    )
    sgld.run(random.PRNGKey(0), X, y)
    w = np.asarray(sgld.get_samples(group_by_chain=True)["w"], np.float64)
    inflation = _laplace_sd_inflation(X, y, 1e-4, 100)
    ref_mean, ref_sd = ref.mean(axis=(0, 1)), ref.std(axis=(0, 1))
    ref_mean_se, ref_sd_se = mcse(ref)
    assert_moments(w, ref_mean, inflation * ref_sd, ref_mean_se, inflation * ref_sd_se)


@pytest.mark.slow
def test_shampoo_at_its_defaults_on_german_credit_stays_finite_and_agrees_with_nuts_or_warns(
        german_credit):
    """ShampooSGLD at its defaults (step adapted, metric learnt, Shampoo's statistic
    warm-started at init and at each restart in the learnt coordinates) with 300 warm-up steps:
    no step is rejected after warm-up and the draws stay where the posterior is (every
    coordinate within 10 of NUTS's sds of its mean), and the means agree with NUTS's within
    four combined standard errors (the draws' ESS-based ones and NUTS's) unless the run says it
    cannot be trusted. Without the warm start the metric was the identity for the 100 steps
    after each restart, the step was adapted for it, and after warm-up the first recomputation
    of the roots scaled the metric by orders of magnitude: this run diverged (draws of 1e18,
    139 of 400 steps rejected)."""
    from numpyro.diagnostics import effective_sample_size

    X, y = german_credit
    model = partial(lg.model, subsample_size=100)
    nuts = MCMC(NUTS(full_batch(model)), num_warmup=500, num_samples=4000, progress_bar=False)
    nuts.run(random.PRNGKey(1), X, y)
    ref = np.asarray(nuts.get_samples()["w"], np.float64)
    shampoo = MCMC(ShampooSGLD(model), num_warmup=300, num_samples=2000, num_chains=2,
                   chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        shampoo.run(random.PRNGKey(0), X, y)
    warned = any("cannot be trusted" in str(w.message) for w in caught)
    assert int(np.sum(shampoo.last_state.num_rejected)) == 0
    w = np.asarray(shampoo.get_samples(group_by_chain=True)["w"], np.float64)
    draws = w.reshape(-1, w.shape[-1])
    assert np.all(np.abs(draws - ref.mean(0)) < 10 * ref.std(0))
    if not warned:
        se = np.sqrt(draws.var(0) / effective_sample_size(w)
                     + ref.var(0) / effective_sample_size(ref[None]))
        z = (draws.mean(0) - ref.mean(0)) / se
        assert np.all(np.abs(z) < 4), z


# Adaptive kernels. They start at the closed-form mean: this checks the stationary law, not
# the transient (with eps = 1e-8 pSGLD and Shampoo creep while gradients are large, and Monge
# with alpha2 ~ 1 barely moves along the gradient far from the mode). Steps are chosen so the
# preconditioned step D*h is about SGLD's 1e-6: near the posterior the per-datum minibatch
# gradient is ~0.2 per coordinate, so RMSprop/Shampoo's D is ~5.
ADAPTIVE = {
    "psgld": lambda m, i: PSGLD(m, step_size=2e-7, init_strategy=i),
    "psgld-hutchinson": lambda m, i: PSGLD(
        m, step_size=1e-6, eps=0.1, correction="hutchinson", init_strategy=i
    ),
    "monge": lambda m, i: MongeSGLD(m, step_size=1e-6, alpha2=0.05, init_strategy=i),
    "monge-hutchinson": lambda m, i: MongeSGLD(
        m, step_size=1e-6, alpha2=0.05, correction="hutchinson", init_strategy=i
    ),
    "shampoo": lambda m, i: ShampooSGLD(m, step_size=2e-7, init_strategy=i),
    "wenzel": lambda m, i: WenzelSGLD(m, step_size=1e-6, init_strategy=i),
    "adam": lambda m, i: AdamSGLD(m, step_size=1e-6, init_strategy=i),
}


def _adaptive_law(name, regression):
    """The stationary law predicted for an adaptive kernel: the preconditioned discretised
    chain with its metric frozen at the value its statistic averages to near the posterior.
    E[g g'] of the per-datum gradient is (A Sigma A + E[B]) / N^2 (B the minibatch noise's
    covariance, which dominates: the gradient statistic barely depends on w, so the metric is
    nearly constant and the Γ drift nearly 0).

    - PSGLD: D = diag(1 / (eps + sqrt(E[g^2]))). Shampoo (a 5-vector: one block, k = 1):
      D = E[g g']^(-1/2). Wenzel: one site, so D = 1 (SGLD). Monge with alpha2 = 0.05: D = I
      up to alpha2 |V|^2 ~ 1e-3 (V, the moving average of g, is nearly 0). AdamSGLD: the drift
      is (I + a diag(1/sqrt(E[grad^2]))) grad U (m / sqrt(V) tracks grad U / its rms: the
      minibatch noise dominates V), the injected noise SGLD's.
    - Neglected: the statistics' fluctuations around their means (moving averages over 10-1000
      steps: a few per cent on D, second order on the law), the Hutchinson estimate's noise
      (about 1/400 of the minibatch noise's variance here), Monge's alpha2 |V|^2. Each moves
      the predicted sds by well under 1 %, against MCSEs of about 3 %.
    """
    X, y, post = regression
    h = {"psgld": 2e-7, "psgld-hutchinson": 1e-6, "shampoo": 2e-7}.get(name, 1e-6)
    N = X.shape[0]
    A = np.linalg.inv(post.cov)
    _, _, B = regression_sg_law(X, y, SUBSAMPLE, h)
    second = (A + B) / N**2  # E[g g'] of the per-datum gradient g = grad U-hat / N
    if name.startswith("psgld"):
        eps = 0.1 if name == "psgld-hutchinson" else 1e-8
        return _law(regression, h, drift=np.diag(1 / (eps + np.sqrt(np.diag(second)))))
    if name == "shampoo":
        return _law(regression, h, drift=np.real(np.linalg.inv(sqrtm(second))))
    if name == "adam":
        drift = np.eye(len(A)) + np.diag(1 / np.sqrt(np.diag(A + B)))
        return _law(regression, h, drift=drift, noise=np.eye(len(A)), grad_noise=np.eye(len(A)))
    return _law(regression, h)


@pytest.mark.parametrize(
    "name",
    [
        n if n == "psgld" else pytest.param(n, marks=pytest.mark.slow)
        for n in sorted(ADAPTIVE)
    ],
)
def test_adaptive_kernels_on_conjugate_regression(name, regression):
    """Each adaptive kernel against the stationary law predicted by `_adaptive_law` (mean
    exact, sds 4 % wider than the posterior's for the noise-dominated metrics here). The run
    costs about as much as compiling it, so the length stays; the Hutchinson-corrected twins
    are in the slow set (the corrected kernels' stationary law is in the default run through
    ``tests/test_bias.py``)."""
    _, _, post = regression
    init = init_to_value(values={"w": post.mean.astype(np.float32)})
    w = _run_regression(
        ADAPTIVE[name](partial(lr.model, subsample_size=SUBSAMPLE), init), regression
    )
    mean, sd = _adaptive_law(name, regression)
    assert_moments(w, mean, sd)


@pytest.mark.slow
def test_control_variates_allow_a_larger_step(regression):
    """At h = 2e-5 (20x the plain SGLD step above) the plain minibatch gradient's noise widens
    the sampled sds by 70 % (h Var[grad] / 2 = 1.6 relative to the injected variance); the
    control-variate estimator centred at a mode found by Adam leaves only
    Cov_i[grad l_i(w) - grad l_i(mode)], and the discretisation's own 4 %. Both runs against
    their predicted laws (``regression_sg_law``, the control variate's centred at the exact
    mode: Adam's is within 1e-3 posterior sds of it, which changes the noise by less); and the
    plain run's sds resolved wider than the posterior's. h = 2e-5 mixes in ~8 steps: 4 chains x
    5000 draws give ESS ~ 2000."""
    X, y, post = regression
    model = partial(lr.model, subsample_size=SUBSAMPLE)

    def draws(**kw):
        return _run_regression(
            SGLD(model, step_size=2e-5, **kw), regression, num_samples=5000, num_warmup=1000,
            key=1,
        )

    assert_moments(draws(control_variate="mode"), *_law(regression, 2e-5, control_variate=True))
    plain = draws()
    assert_moments(plain, *_law(regression, 2e-5))
    _, z_sd = moment_z_scores(plain, post.mean, post.sd)
    assert np.all(z_sd > bonferroni_z(len(z_sd))), z_sd



def _logistic_laplace(X, y):
    """The mode of the logistic regression with a N(0, I) prior (Newton, float64) and the
    per-datum curvatures p(1 - p) there."""
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    w = np.zeros(X.shape[1])
    for _ in range(25):
        p = 1 / (1 + np.exp(-X @ w))
        step = np.linalg.solve(np.eye(X.shape[1]) + (X * (p * (1 - p))[:, None]).T @ X,
                               w + X.T @ (p - y))
        w = w - step
        if np.abs(step).max() < 1e-12:
            break
    p = 1 / (1 + np.exp(-X @ w))
    return w, p * (1 - p)


def _centred_sg_law(X, curvature, subsample_size, step_size, drift):
    r"""Stationary covariance of preconditioned SGLD with control variates centred at the mode,
    on the Gaussian (Laplace) approximation of a GLM whose per-datum Hessians are
    :math:`c_i x_i x_i^\top`: the drift is :math:`PA(w - \hat w)` and the centred gradient's
    noise :math:`(N^2/n)\,\mathrm{Cov}_i[c_i x_i x_i^\top (w - \hat w)]`, whose mean over the
    chain's law is :math:`(N^2/n)(\overline{c^2 (x^\top\Sigma x) x x^\top} - \bar H\Sigma\bar H)`;
    the covariance solves the discrete Lyapunov equation with it (a fixed point, as in
    ``conftest.regression_sg_law``)."""
    X = np.asarray(X, np.float64)
    N, d = X.shape
    A = np.eye(d) + (X * curvature[:, None]).T @ X
    H_bar = (A - np.eye(d)) / N
    P, h, n = np.asarray(drift, np.float64), step_size, subsample_size
    cov = np.linalg.inv(A)
    for _ in range(50):
        quad = np.einsum("ij,jk,ik->i", X, cov, X)
        B = N**2 / n * ((X * (curvature**2 * quad)[:, None]).T @ X / N - H_bar @ cov @ H_bar)
        new = solve_discrete_lyapunov(np.eye(d) - h * P @ A, 2 * h * P + h**2 * P @ B @ P.T)
        if np.allclose(new, cov, rtol=1e-12, atol=0):
            break
        cov = new
    return new


@pytest.mark.slow
def test_default_sgld_samples_the_discretised_law_where_a_minibatch_is_a_hundred_thousandth():
    """``SGLD(model)`` at its defaults (adapted step, learnt dense metric, control variates
    switched on in warm-up) on a logistic regression of N = 10^6 rows, 5 features and
    minibatches of 10 (N/n = 10^5), 1,000 warm-up steps, 20,000 draws. Reference: the
    Laplace approximation at the mode (at this N the posterior departs from it by about
    N^(-1/2) of its sd, Bernstein-von Mises: 0.001 sd, far below these runs' Monte Carlo error),
    with the discretised chain's covariance at the adapted step and metric
    (``_centred_sg_law``; the control variates' centre's offset from the mode adds to the noise
    only at second order). A minibatch method needs about N/n steps to find the mode to within
    a posterior sd; the warm-up gets there through the control variates' full-data passes,
    and the run is trusted by its own verdict (a chain still far from the mode mixes so slowly
    that its moments' standard errors would hide the error: the verdict's ESS does not)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1_000_000, 5)).astype(np.float32)
    w_true = rng.normal(size=5) / np.sqrt(5)
    y = (rng.random(X.shape[0]) < 1 / (1 + np.exp(-X @ w_true))).astype(np.float32)
    model = partial(lg.model, subsample_size=10)
    mcmc = MCMC(SGLD(model), num_warmup=1000, num_samples=20000, progress_bar=False)
    mcmc.run(random.PRNGKey(0), X, y)
    w = np.asarray(mcmc.get_samples(group_by_chain=True)["w"], np.float64)
    state = mcmc.last_state
    factor = np.asarray(state.sampler_state.metric.factor, np.float64)
    mode, curvature = _logistic_laplace(X, y)
    cov = _centred_sg_law(X, curvature, 10, float(state.step_size), factor @ factor.T)
    assert_moments(w, mode, np.sqrt(np.diag(cov)))
    verdict = check(mcmc, warn=False)  # and the run says it can be trusted
    assert verdict.trusted, verdict.problems
