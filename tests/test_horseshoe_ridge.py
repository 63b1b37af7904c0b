"""The unit-wise horseshoe's joint move along its global-local ridge
(:func:`numpyro_sgrld.bridges.priors.unit_ridge_move`), which the centred form's global scale
declares beside its own draw: it must leave the scales' law invariant, alone and within the
declared sweep.

Exact law: chains started from independent joint prior draws of ``(tau, lam, w)`` stay
distributed as the prior under any update that leaves ``p(tau, lam | w)`` invariant, so after
a few sweeps ``log tau`` and each ``log lam_j`` follow the log of a half-Cauchy, the hyperbolic
secant law, ``P(log(s / A) <= x) = (2 / pi) arctan(e^x)``. Each marginal is tested by
Kolmogorov-Smirnov over the independent chains, with a Bonferroni bound over the
coordinates.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from conftest import FAMILY_LEVEL
from numpyro import handlers
from scipy import stats

from numpyro_sgrld import priors
from numpyro_sgrld.bridges.priors import unit_ridge_move
from numpyro_sgrld.sampler import conditionals

SHAPE, GLOBAL_SCALE, CHAINS, SWEEPS = (5, 4), 0.5, 20_000, 8


def model():
    prior = priors.horseshoe("unit", global_scale=GLOBAL_SCALE, parametrisation="centred")
    numpyro.sample("w", prior("w", SHAPE))


def prior_draws(key):
    trace = handlers.trace(handlers.seed(model, key)).get_trace()
    return {name: trace[name]["value"] for name in ("w_global", "w_local", "w")}


def p_values(draws):
    """KS p-values of ``log tau`` and each ``log lam_j`` against the hyperbolic secant law."""
    def cdf(x):
        return 2.0 / np.pi * np.arctan(np.exp(x))

    columns = [np.log(np.asarray(draws["w_global"]) / GLOBAL_SCALE)]
    columns += list(np.log(np.asarray(draws["w_local"])).T)
    return np.array([stats.kstest(c, cdf).pvalue for c in columns])


def declared(ridge=True):
    found = conditionals.declared_conditionals(model, jax.random.PRNGKey(0), (), {})
    return found if ridge else {k: c._replace(joint=None) for k, c in found.items()}


@pytest.mark.parametrize("update", ["ridge", pytest.param("sweep", marks=pytest.mark.slow)])
def test_the_ridge_move_leaves_the_horseshoes_scales_law_invariant(update):
    """The move alone, and the declared sweep (the global scale's draw, the move, the local
    scales' draw), ``SWEEPS`` times from exact draws: the marginals stay exact."""
    sweep = conditionals.declared_sweep(declared())

    def chain(key):
        start = prior_draws(key)
        scales = {k: start[k] for k in ("w_global", "w_local")}

        def one(scales, k):
            if update == "ridge":
                return unit_ridge_move(k, scales, tau="w_global", lam="w_local",
                                       global_scale=GLOBAL_SCALE), None
            return sweep(k, scales, {"w": start["w"]}), None

        return jax.lax.scan(one, scales, jax.random.split(jax.random.fold_in(key, 1),
                                                          SWEEPS))[0]

    draws = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.PRNGKey(3), CHAINS))
    p = p_values(draws)
    assert np.all(p > FAMILY_LEVEL / p.size), p


def test_the_ridge_move_keeps_every_product_and_runs_only_with_both_scales_swept():
    """The move changes ``tau`` and ``lam`` but no product ``tau lam_j`` (so no weight's
    density); a sweep that owns only the global scale does not make it (it would move a site
    the sweep does not own)."""
    draws = prior_draws(jax.random.PRNGKey(5))
    scales = {k: draws[k] for k in ("w_global", "w_local")}
    moved = unit_ridge_move(jax.random.PRNGKey(6), scales, tau="w_global", lam="w_local",
                            global_scale=GLOBAL_SCALE)
    assert not np.allclose(moved["w_global"], scales["w_global"])
    np.testing.assert_allclose(moved["w_global"] * moved["w_local"],
                               scales["w_global"] * scales["w_local"], rtol=1e-5)

    found = declared()
    assert found["w_global"].joint.sites == ("w_global", "w_local")
    alone = conditionals.declared_sweep({"w_global": found["w_global"]})
    key = jax.random.PRNGKey(7)
    out = alone(key, {"w_global": scales["w_global"]}, {"w": draws["w"], **scales})
    plain = found["w_global"].draw(jax.random.split(key, 1)[0], scales["w_global"], draws)
    np.testing.assert_array_equal(out["w_global"], plain)


@pytest.mark.slow  # 15 s: the half-Cauchy draws' Gamma samplers over 32,000 sweeps
def test_the_ridge_move_mixes_the_global_scale_given_the_weights():
    """Given a 30-16 layer's weights, the single-site draws cross the ridge by steps of about
    ``1 / sqrt(2 * 480)`` in ``log tau``; with the move, ``log tau``'s ESS over the same
    sweeps is many times larger (14,907 against 66 at this seed). Both chains' ESS from their
    own draws, 4 chains of 4,000 sweeps: the move's must exceed ten times the single-site
    draws'."""
    def layer():
        numpyro.sample("w", priors.horseshoe("unit", parametrisation="centred")("w", (30, 16)))

    trace = handlers.trace(handlers.seed(layer, 3)).get_trace()
    found = conditionals.declared_conditionals(layer, jax.random.PRNGKey(0), (), {})
    start = {k: trace[k]["value"] for k in found}
    ess = {}
    for name, conds in [("ridge", found),
                        ("single", {n: c._replace(joint=None) for n, c in found.items()})]:
        sweep = conditionals.declared_sweep(conds)

        def chain(key, sweep=sweep):
            def one(g, k):
                g = sweep(k, g, {"w": trace["w"]["value"]})
                return g, jnp.log(g["w_global"])

            return jax.lax.scan(one, start, jax.random.split(key, 4000))[1]

        draws = jax.jit(jax.vmap(chain))(jax.random.split(jax.random.PRNGKey(1), 4))
        ess[name] = float(numpyro.diagnostics.effective_sample_size(np.asarray(draws)))
    assert ess["ridge"] > 10 * ess["single"], ess
