"""XLA's count of one compiled step against the same update written by hand
(``benchmarks/speed/speed.py``'s hand-written loops), on a model whose density is the hand
loop's formula term for term, so that the count compares what the kernel adds to the update:
the potential's value at the step's start (it checks the previous proposal), the finiteness
sums, the gradient's norm and the selections that keep a rejected step out of the chain. The
count is deterministic: the measure for work too small to time on a busy machine."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest
from conftest import load_benchmark
from jax import random
from numpyro.distributions import constraints

SIZES = (50, 64, 64, 10)
N_DATA, BATCH = 2_000, 100


@pytest.fixture(scope="module")
def speed():
    return load_benchmark("speed")


def _net(params, x):
    for i in range(len(SIZES) - 1):
        x = x @ params[f"w{i}"] + params[f"b{i}"]
        if i < len(SIZES) - 2:
            x = jax.nn.relu(x)
    return x


def _logprior(params):
    return sum(-0.5 * jnp.sum(params[k] ** 2) for k in params)


def _loglik(params, x, y):
    return jnp.sum(jax.nn.one_hot(y, SIZES[-1]) * jax.nn.log_softmax(_net(params, x)))


def _shapes():
    shapes = {}
    for i, (m, k) in enumerate(zip(SIZES[:-1], SIZES[1:])):
        shapes[f"w{i}"], shapes[f"b{i}"] = (m, k), (k,)
    return shapes


def _model(X, y):
    params = {k: numpyro.sample(k, dist.ImproperUniform(constraints.real, (), s))
              for k, s in _shapes().items()}
    numpyro.factor("prior", _logprior(params))
    with numpyro.plate("data", X.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("y", dist.Categorical(logits=_net(params, X[idx])), obs=y[idx])


def _problem():
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.normal(size=(N_DATA, SIZES[0])), jnp.float32)
    y = jnp.asarray(rng.integers(0, SIZES[-1], N_DATA), jnp.int32)
    init = {k: jnp.asarray(0.1 * rng.normal(size=s), jnp.float32) for k, s in _shapes().items()}
    return dict(X=X, y=y, batch=BATCH, step=1e-5, init=init, logprior=_logprior,
                loglik=_loglik, model=_model, init_strategy=None)


def _flops(fn, *args):
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    return (cost[0] if isinstance(cost, list) else cost)["flops"]


@pytest.mark.parametrize("name", ["SGLD"] + [
    pytest.param(k, marks=pytest.mark.slow) for k in ("SGHMC", "PSGLD")])
def test_a_checked_step_costs_at_most_five_percent_more_than_the_update_by_hand(speed, name):
    p = _problem()
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
