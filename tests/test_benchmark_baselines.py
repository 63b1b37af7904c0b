"""The hand-written baselines of ``benchmarks/speed/speed.py`` compute what the library computes.

A speed ratio against a hand-written loop means something only if both do the same work; the
Shampoo comparison in particular supports the claim that ShampooSGLD's cost is the metric's
arithmetic, so its hand-written metric is checked here against :func:`numpyro_sgrld.core.metrics.
shampoo` on a common sequence of gradients.
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import load_benchmark
from jax import random

from numpyro_sgrld.core.metrics import StepContext, shampoo


@pytest.fixture(scope="module")
def speed():
    return load_benchmark("speed")


@pytest.mark.slow  # checks a benchmark baseline, not the library
def test_hand_written_shampoo_matches_the_library_metric(speed):
    # in float64: the drift factor P = L^(-1/2) of a vector block has a condition number up to
    # 1/sqrt(eps) = 1e4 (the ridge eps * lambda_max bounds it), so two float32 computations in
    # another order may differ by 1e4 float32 ulps; in float64 that is still below 1e-11
    with jax.enable_x64(True):
        _compare_shampoo(speed)


def _compare_shampoo(speed):
    # a weight split into 2 x 2 blocks of 128 x 100 and a vector in 2 blocks of 100, as in the
    # MLP; the benchmark's decay, eps, block size and interval: one root recomputation, at the
    # end (before it, the vector's 100 x 100 statistic has too few rank-one terms to be well
    # conditioned, and its inverse roots amplify rounding)
    position = {"w": jnp.zeros((256, 200), jnp.float64), "b": jnp.zeros(200, jnp.float64)}
    num_data, steps = 50.0, speed.SHAMPOO_INTERVAL
    metric = shampoo(speed.SHAMPOO_DECAY, speed.SHAMPOO_EPS, steps, speed.SHAMPOO_BLOCK)
    context = StepContext(num_data=num_data)

    @jax.jit
    def hand_update(stats, grad):
        return jax.tree.map(
            lambda s, g: tuple(
                speed.SHAMPOO_DECAY * f + (1 - speed.SHAMPOO_DECAY) * q
                for f, q in zip(s, speed._grams(speed._blocks(g / num_data)))
            ),
            stats,
            grad,
            is_leaf=speed._is_factors,
        )

    next_state = jax.jit(lambda grad, state: metric.update(grad, state, position, context)[1])
    _, stats, roots, precs, _ = speed._shampoo_init(position)
    state = metric.init(position)
    keys = random.split(random.PRNGKey(0), steps + 1)
    for t in range(steps):
        grad = speed._normal_like(keys[t], position)
        grad = {"w": grad["w"] * jnp.linspace(0.5, 3.0, 200), "b": grad["b"] + 1.0}
        if t < steps - 1:
            state = next_state(grad, state)
        else:  # the last update, with the recomputed roots, returns the preconditioner
            precond, state = metric.update(grad, state, position, context)
        stats = hand_update(stats, grad)
    roots, precs = speed._shampoo_roots(stats, roots, precs)  # the recomputation
    probe, xi = grad, speed._normal_like(keys[steps], position)
    for ours, factors, vector in (
        (precond.drift(probe), precs, probe),
        (precond.noise(xi), roots, xi),
    ):
        hand = jax.tree.map(
            lambda v, f: speed._apply(speed._blocks(v), f, v),
            vector,
            factors,
            is_leaf=speed._is_factors,
        )
        for name in position:
            # a real difference (a transposed block, a factor on the wrong side, a missed
            # decay) is of order one
            scale = float(jnp.max(jnp.abs(hand[name])))
            assert ours[name].dtype == jnp.float64
            np.testing.assert_allclose(ours[name], hand[name], atol=1e-9 * scale)
            # and the metric is far from the identity, so the comparison has teeth
            assert float(jnp.max(jnp.abs(ours[name] - vector[name]))) > 0.1 * scale


@pytest.mark.slow  # checks a benchmark table, not the library
def test_cost_breakdown_removes_what_it_says(speed):
    # each column drops work from the compiled step, so XLA's count must not grow column by
    # column, and dropping the finiteness checks (a sum over the new position) must lower it;
    # an equal count there would mean the same program was compiled again (e.g. a cached trace
    # that ignored the patched check). On logistic regression the potential's value costs
    # next to nothing: the gradient of logaddexp needs its value anyway. The check of the
    # proposal's potential is a forward pass: strictly more work.
    hand, step, unchecked, no_value, no_checks = (
        flops for flops, _ in speed.cost_breakdown(speed._logreg(), "SGLD")
    )
    assert step > unchecked >= no_value > no_checks > 0 and hand > 0
    assert all(t.count("| SGLD |") == 1 for t in speed.cost_tables(speed._logreg(), ["SGLD"]))


def test_tables_option_selects_the_measurements(speed):
    args = speed.argparse.Namespace(tables=["chains"], repeats=1, no_blackjax=True, no_chains=False)
    assert list(speed._tables("mlp", None, [], args)) == []  # chains are logreg-only
    with pytest.raises(SystemExit):
        speed.main(["--tables", "nonsense"])
