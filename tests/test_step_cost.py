"""XLA's count of one compiled step against the same update written by hand
(``benchmarks/speed/speed.py``'s hand-written loops), on an MLP whose model density is the
hand loop's formula term for term (``speed._mlp(formula=True)``), so that the count compares
what the kernel adds to the update: the potential's value at the step's start (it checks the
previous proposal), the finiteness sums, the gradient's norm and the selections that keep a
rejected proposal out of the chain. The count is deterministic: the measure for work too small
to time on a busy machine."""

import jax
import pytest
from conftest import load_benchmark
from jax import random

BATCH = 100


@pytest.fixture(scope="module")
def speed():
    return load_benchmark("speed")


def _flops(fn, *args):
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]


@pytest.mark.parametrize("name", ["SGLD"] + [
    pytest.param(k, marks=pytest.mark.slow) for k in ("SGHMC", "PSGLD")])
def test_a_checked_step_costs_at_most_five_percent_more_than_the_update_by_hand(speed, name):
    p = speed._mlp(batch=BATCH, width=64, n_data=2_000, inputs=50, formula=True)
    args = (p["X"], p["y"])
    hand = speed.hand_written(speed.HAND[name].removeprefix("hand "), p)
    kernel = speed._kernel(speed.KERNELS[name], p)  # the benchmark's settings, proposal check on
    assert kernel._check_proposal
    state = kernel.init(random.PRNGKey(0), 0, None, args, {})
    ours = _flops(lambda s: kernel.sample(s, args, {}), state)
    by_hand = _flops(lambda key: hand(1, key), random.PRNGKey(0))
    assert ours <= 1.05 * by_hand, (name, ours / by_hand)
    # the bound tells apart a step with one forward pass more (the potential at the proposal
    # on the step's own minibatch, as a check made at once would need)
    X, y = p["X"][:BATCH], p["y"][:BATCH]

    def hand_and_forward(key):
        new = hand(1, key)
        return new, p["loglik"](new if name == "SGLD" else new[0], X, y)

    assert _flops(hand_and_forward, random.PRNGKey(0)) > 1.05 * by_hand
