"""XLA's count of one compiled step against the same update written by hand
(``benchmarks/speed/speed.py``'s hand-written loops), on an MLP whose model density is the
hand loop's formula term for term (``speed._mlp(formula=True)``), so that the count compares
what the kernel adds to the update: the potential's value at the step's start (it checks the
previous proposal), the finiteness sums, the gradient's norm and the selections that keep a
rejected proposal out of the chain. The count is deterministic: the measure for work too small
to time on a busy machine."""

from functools import partial

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
    assert kernel.algorithm.check_proposal
    state = kernel.init(random.PRNGKey(0), 0, None, args, {})
    # the update and its checks; the equipartition check's own cost is bounded below
    ours = _flops(lambda s: kernel.sample(s, args, {}), state._replace(equipartition=None))
    by_hand = _flops(lambda key: hand(1, key), random.PRNGKey(0))
    assert ours <= 1.05 * by_hand, (name, ours / by_hand)
    # the bound tells apart a step with one forward pass more (the potential at the proposal
    # on the step's own minibatch, as a check made at once would need)
    X, y = p["X"][:BATCH], p["y"][:BATCH]

    def hand_and_forward(key):
        new = hand(1, key)
        return new, p["loglik"](new if name == "SGLD" else new[0], X, y)

    assert _flops(hand_and_forward, random.PRNGKey(0)) > 1.05 * by_hand


def _logistic_25(X, y):
    import numpyro
    import numpyro.distributions as dist

    w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([25]).to_event(1))
    with numpyro.plate("data", X.shape[0], subsample_size=BATCH) as idx:
        numpyro.sample("y", dist.Bernoulli(logits=X[idx] @ w), obs=y[idx])


@pytest.mark.parametrize("problem", ["mlp", "logistic"])
def test_the_equipartition_check_adds_at_most_five_percent_to_a_step(speed, problem):
    """The check's sums (:mod:`numpyro_sgrld.core.equipartition`) against the same step without
    them: by layer on the MLP, coordinate by coordinate (its dearer form) on a logistic
    regression of German credit's size (25 weights, minibatch 100), at a given step and after
    warm-up at the defaults."""
    import jax.numpy as jnp

    import numpyro_sgrld as ns

    if problem == "mlp":
        p = speed._mlp(batch=BATCH, width=64, n_data=2_000, inputs=50, formula=True)
        args = (p["X"], p["y"])
        kernels = [speed._kernel(speed.KERNELS["SGLD"], p)]
    else:
        X = random.normal(random.PRNGKey(1), (1_000, 25))
        args = (X, (X[:, 0] > 0).astype(jnp.float32))
        kernels = [ns.SGLD(_logistic_25, step_size=1e-3), ns.SGLD(_logistic_25)]
    for kernel in kernels:
        state = kernel.init(random.PRNGKey(0), 200 if kernel.adapts_step_size else 0, None,
                            args, {})
        host = kernel.after_warmup(state) or kernel
        with_check = _flops(partial(host.sample, model_args=args, model_kwargs={}), state)
        without = _flops(partial(host.sample, model_args=args, model_kwargs={}),
                         state._replace(equipartition=None))
        assert without < with_check <= 1.05 * without, (problem, with_check / without)


def test_the_sampling_loop_adds_at_most_two_percent_to_a_step(speed):
    """One step of the kernels' grouped sampling loop (``_loop._loop_step``: the step, the
    selection that drops a group's surplus step, the state set aside when kept) against the
    step alone, at ``thinning=1`` (every step set aside)."""
    import jax.numpy as jnp

    from numpyro_sgrld.sampler import loop as _loop

    p = speed._mlp(batch=BATCH, width=64, n_data=2_000, inputs=50, formula=True)
    args = (p["X"], p["y"])
    kernel = speed._kernel(speed.KERNELS["SGLD"], p)
    state = kernel.init(random.PRNGKey(0), 0, None, args, {})
    val = (state, args, {})

    def body(v):
        return (kernel.sample(v[0], v[1], {}),) + tuple(v[1:])

    group, slots = _loop._group_sizes(state, 1, 16)
    pending = jax.tree.map(lambda x: jnp.zeros((slots,) + x.shape, x.dtype),
                           _loop._set_aside(state))
    carry = (jnp.int32(0), val, state.num_rejected, pending, jnp.full(slots, 8, jnp.int32),
             jnp.int32(0))
    in_loop = _flops(lambda j, c: _loop._loop_step(body, jnp.int32(100), jnp.int32(0),
                                                   jnp.int32(1), slots, j, c),
                     jnp.int32(3), carry)
    alone = _flops(body, val)
    assert alone < in_loop <= 1.02 * alone, in_loop / alone


def test_a_networks_function_space_reading_adds_at_most_five_percent_to_a_step():
    """On ``MCMC``'s own loop a network's kernel evaluates the log-likelihood of its
    evaluation batch every ``EVERY`` steps (:mod:`numpyro_sgrld.verdict.evaluation`): its flops over
    ``EVERY`` against one step's, on a Haiku MLP of the digits problem's shape (64-100-10,
    horseshoe priors, minibatch 100)."""
    import haiku as hk
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    import numpyro_sgrld as ns
    from numpyro_sgrld.bridges.haiku import random_haiku_module
    from numpyro_sgrld.bridges.priors import horseshoe
    from numpyro_sgrld.verdict.evaluation import EVERY

    net = hk.transform(lambda x: hk.nets.MLP([100, 10])(x))

    def model(X, y):
        f = random_haiku_module("net", net, (BATCH, 64), horseshoe("layer"))
        with numpyro.plate("data", X.shape[0], subsample_size=BATCH) as idx:
            numpyro.sample("y", dist.Categorical(logits=f(X[idx])), obs=y[idx])

    X = random.normal(random.PRNGKey(0), (1_000, 64))
    args = (X, (X[:, 0] > 0).astype(jnp.int32))
    kernel = ns.SGLD(model, step_size=1e-4)
    state = kernel.init(random.PRNGKey(0), 0, None, args, {})
    step = _flops(lambda s: kernel.sample(s, args, {}), state._replace(monitor=None))
    reading = _flops(lambda z: kernel.setup.evaluation(z, args, {}, constrained=False), state.z)
    assert reading / EVERY <= 0.05 * step, (reading, step)
