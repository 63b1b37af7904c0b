"""Speed, measured side by side in one process: our kernels through ``numpyro.infer.MCMC``
against hand-written jitted ``lax.scan`` loops and BlackJAX on the same potential.

Problems (float32, minibatch indices drawn with ``random.randint`` every step):

- ``logreg``: Bayesian logistic regression, N = 50,000 synthetic points, d = 50, w ~ N(0, I),
  minibatch 500;
- ``mlp``: the 784-400-400-10 ReLU classifier of Yu et al. (Gaussian prior, He scales),
  N = 60,000 synthetic MNIST-shaped images, minibatch 100.

For a contender and run length T the wall time is t(T) = fixed + T * marginal. Every repeat
times each contender at T1 and T2 steps, contenders in a shuffled order, so all of them see the
same machine load. The **marginal cost per step** is (min t(T2) - min t(T1)) / (T2 - T1), the
minima over repeats (interference from other work only adds time); the tables give ratios of
those and, in brackets, the median over repeats of the per-repeat ratio
((t(T2) - t(T1)) / (T2 - T1) of the contender over that of the reference, measured moments
apart).

Contenders:

- ``hand SGLD`` (the reference), ``hand SGHMC``, ``hand pSGLD``, ``hand Monge``: the update
  written out directly in JAX (``jax.grad`` of the minibatch potential, a few ``tree.map``s);
- ``hand shampoo``: Shampoo SGLD (default decay, eps, interval and block layout) written out
  with einsums on each weight's stack of blocks, the roots by ``eigh`` every 100 steps under a
  ``lax.cond``: the arithmetic the metric needs, without the library's generic tensor code;
- ``hand sgld (again)``: the reference a second time, identical code: its ratio is the run's
  own noise;
- ``hand sgld+write``: hand SGLD that also writes its state into a one-row buffer under a
  ``lax.cond`` every step, as NumPyro's ``fori_collect`` records draws (thinned or not);
- ``BlackJAX sgld`` / ``BlackJAX sghmc`` (``jit`` + ``lax.scan`` over ``step``; SGHMC does
  ``num_integration_steps=10`` gradient steps on one minibatch per call, so T steps are T/10
  calls: the cost is per gradient step, but with a tenth of the index draws and gathers, and the
  last of the ten gradients is unused (BlackJAX returns the position only, which that gradient
  does not reach; XLA drops it). It is a different algorithm (the momentum is redrawn per call,
  the minibatch reused), listed for reference; with ``num_integration_steps=1`` no gradient
  would be used at all);
- our kernels: ``MCMC(kernel, num_samples=T, thinning=T, progress_bar=False,
  jit_model_args=True)`` inside ``fast_sampling_loop()`` (the kernels' own sampling loop,
  ``numpyro_sgrld.sampler.loop``); a repeated ``run`` with the same shapes reuses the compiled loop;
- ``SGLD (NumPyro's loop)``: the same SGLD run without the opt-in, on NumPyro's
  ``fori_collect``, which postprocesses and writes the state into its sample buffer under a
  ``lax.cond`` every step, thinned or not, and compiles its loop again on every run (its fixed
  cost includes that compilation);
- ``<kernel> (step in lax.scan)``: the basic kernels' ``init`` and ``sample`` driven by a
  jitted ``lax.scan``, as the hand loops are: the kernel's own cost without ``MCMC``.

Also measured: the **fixed cost** of a repeated ``MCMC.run`` (a 1-step run of an already used
``MCMC`` object: initialisation, dispatch and postprocessing), the throughput of 1, 4 and 16
vectorized SGLD chains (logreg), the cost of the per-step finiteness check alone (mlp) and XLA's
own cost analysis (floating-point operations, bytes accessed) of one step of each basic kernel
against the same update by hand, and where the kernels' extra goes (mlp; deterministic,
unlike the timings). ``--tables`` picks among these (default all).

    python benchmarks/speed/speed.py                       # both problems, ~45 min on 2 cores
    python benchmarks/speed/speed.py --problem logreg --repeats 5 --out logreg.md
    python benchmarks/speed/speed.py --problem mlp --tables cost   # XLA's count only, ~2 min
"""

import argparse
import contextlib
import random as pyrandom
import time
from functools import partial
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax import lax, random
from numpyro.distributions import constraints
from numpyro.infer import MCMC, init_to_sample
from numpyro_sgrld.models import bnn
from numpyro_sgrld.models import logistic_regression as lr

from numpyro_sgrld import (
    BADODAB,
    BAOAB,
    PSGLD,
    SGHMC,
    SGLD,
    SGNHT,
    AdamSGLD,
    CyclicalSGLD,
    MongeSGLD,
    ShampooSGLD,
    fast_sampling_loop,
    gradients,
    priors,
)
from numpyro_sgrld.core.metrics import shampoo_block_shapes
from numpyro_sgrld.core.tree import tree_normal

FRICTION, DECAY, EPS, ALPHA2, MONGE_DECAY = 0.1, 0.99, 1e-8, 1.0, 0.9
CYCLE = 1000  # the cyclical kernels' cycle length
# the underdamped integrators' time step in units of sqrt(2 h), the Langevin-equivalent: at 1
# SGNHT's thermostat heats up and its steps go non-finite on logreg (rejected), at 0.1 no
# kernel rejects a step
TIME_STEP_FACTOR = 0.1


# --------------------------------------------------------------------------- problems
def _logreg(seed=0):
    n_data, dim = 50_000, 50
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_data, dim)).astype(np.float32)
    w = rng.normal(size=dim).astype(np.float32) / np.sqrt(dim)
    y = (rng.random(n_data) < 1 / (1 + np.exp(-X @ w))).astype(np.int32)

    def logprior(params):
        return -0.5 * jnp.sum(params["w"] ** 2)

    def loglik(params, x, y):  # one data point, or a batch (summed)
        logits = x @ params["w"]
        return jnp.sum(y * logits - jnp.logaddexp(0.0, logits))

    return dict(
        name="logreg",
        title=f"Logistic regression, N = {n_data:,}, d = {dim}, minibatch 500",
        X=jnp.asarray(X),
        y=jnp.asarray(y),
        batch=500,
        step=1e-5,
        init={"w": jnp.zeros(dim)},
        logprior=logprior,
        loglik=loglik,
        model=partial(lr.model, subsample_size=500),
        init_strategy=None,
        t1=2_000,
        t2=12_000,
    )


def _mlp_params(key, sizes):
    params = {}
    for i, (m, k) in enumerate(zip(sizes[:-1], sizes[1:])):
        key, sub = random.split(key)
        params[f"w{i}"] = random.normal(sub, (m, k)) * np.sqrt(2.0 / m)
        params[f"b{i}"] = jnp.zeros(k)
    return params


def _mlp(seed=0, batch=100, width=400, n_data=60_000, inputs=784, formula=False):
    """Yu et al.'s MLP ``inputs``-``width``-``width``-10 on random MNIST-shaped data. The model
    is the Haiku BNN with He-scaled Gaussian priors (``bnn.mlp_classifier``), or with
    ``formula`` one whose density is the hand loops' ``logprior`` and ``loglik`` term for term
    (flat sites and a ``numpyro.factor``: no argument validation, no other prior code), for
    counts of what a kernel adds to the update."""
    sizes = (inputs, width, width, 10)
    rng = np.random.default_rng(seed)
    X = rng.random((n_data, inputs), dtype=np.float32)
    y = rng.integers(0, 10, n_data).astype(np.int32)
    init = _mlp_params(random.PRNGKey(1), sizes)
    scales = {k: float(priors.he_scale(v.shape)) for k, v in init.items()}

    def logprior(params):
        return sum(-0.5 * jnp.sum((params[k] / scales[k]) ** 2) for k in params)

    def net(params, x):
        for i in range(len(sizes) - 1):
            x = x @ params[f"w{i}"] + params[f"b{i}"]
            if i < len(sizes) - 2:
                x = jax.nn.relu(x)
        return x

    def loglik(params, x, y):
        logp = jax.nn.log_softmax(net(params, x))
        return jnp.sum(jax.nn.one_hot(y, sizes[-1]) * logp)

    def formula_model(X, y):
        params = {k: numpyro.sample(k, dist.ImproperUniform(constraints.real, (), v.shape))
                  for k, v in init.items()}
        numpyro.factor("prior", logprior(params))
        with numpyro.plate("data", X.shape[0], subsample_size=batch) as idx:
            numpyro.sample("y", dist.Categorical(logits=net(params, X[idx])), obs=y[idx])

    model = partial(bnn.mlp_classifier, hidden=(width, width), subsample_size=batch)
    return dict(
        name="mlp",
        title=f"MLP {inputs}-{width}-{width}-10, N = {n_data:,}, minibatch {batch}",
        X=jnp.asarray(X),
        y=jnp.asarray(y),
        batch=batch,
        step=1e-6,
        init=init,
        logprior=logprior,
        loglik=loglik,
        model=formula_model if formula else model,
        init_strategy=None if formula else init_to_sample,
        t1=100,
        t2=600,
    )


PROBLEMS = {"logreg": _logreg, "mlp": _mlp}


# --------------------------------------------------------------------------- hand-written loops
def _tree_dot(a, b):
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def _normal_like(key, tree):
    # one draw over all entries, as BlackJAX draws its noise (and the kernels do): faster on
    # XLA:CPU than one draw per leaf. The kernels' own function, so that the two draw the
    # same values the same way: its random bits are cut into the leaves before they become
    # normals (`jax.random.normal` of the flat vector, cut afterwards, gives the same values
    # but XLA's cost analysis counts the whole vector's conversion once per leaf)
    return tree_normal(key, tree)


SHAMPOO_DECAY, SHAMPOO_EPS, SHAMPOO_INTERVAL, SHAMPOO_BLOCK = 0.99, 1e-8, 100, 128


def _layout(shape):
    merged, block, counts = shampoo_block_shapes(shape, SHAMPOO_BLOCK)
    if len(merged) > 2 or any(c * b != d for d, b, c in zip(merged, block, counts)):
        raise ValueError(f"hand Shampoo handles matrices and vectors in equal blocks: {shape}")
    return merged, block, counts


def _blocks(x):
    """``x`` as a stack of its Shampoo blocks: (num_blocks, b1[, b2])."""
    merged, block, counts = _layout(x.shape)
    if len(merged) == 1:
        return x.reshape(counts[0], block[0])
    x = x.reshape(counts[0], block[0], counts[1], block[1])
    return x.transpose(0, 2, 1, 3).reshape(-1, *block)


def _unblocks(blocks, like):
    merged, block, counts = _layout(like.shape)
    if len(merged) == 1:
        return blocks.reshape(like.shape)
    x = blocks.reshape(counts[0], counts[1], *block).transpose(0, 2, 1, 3)
    return x.reshape(like.shape)


def _is_factors(t):
    return isinstance(t, tuple)


def _grams(b):
    if b.ndim == 2:  # vectors: one full-matrix factor
        return (jnp.einsum("ni,nj->nij", b, b),)
    return jnp.einsum("nij,nkj->nik", b, b), jnp.einsum("nji,njk->nik", b, b)


def _apply(b, factors, like):
    if b.ndim == 2:
        return _unblocks(jnp.einsum("nij,nj->ni", factors[0], b), like)
    return _unblocks(jnp.einsum("nij,njk,nkl->nil", factors[0], b, factors[1]), like)


def _shampoo_init(x0):
    def leaf(x):
        eye = tuple(
            jnp.broadcast_to(jnp.eye(m.shape[-1]), (m.shape[0],) + (m.shape[-1],) * 2)
            for m in _grams(_blocks(x))
        )
        return tuple(SHAMPOO_EPS * e for e in eye), eye, eye

    parts = [leaf(x) for x in jax.tree.leaves(x0)]
    treedef = jax.tree.structure(x0)
    stats, roots, precs = (treedef.unflatten([q[j] for q in parts]) for j in range(3))
    return x0, stats, roots, precs, jnp.zeros((), jnp.int32)


def _shampoo_roots(stats, roots, precs):
    """N = (L + eps lambda_max I)^(-1/(4k)) by eigh, P = N^2; one batched eigh after another
    (concurrent batched eighs can deadlock XLA:CPU's thread pool on two cores)."""
    del roots, precs
    token = jnp.zeros(())
    out_roots, out_precs = [], []
    for factors in jax.tree.leaves(stats, is_leaf=_is_factors):
        k, leaf_roots = len(factors), []
        for s in factors:
            s = s + 0 * jnp.where(jnp.isfinite(token), token, 0.0)
            w, q = jnp.linalg.eigh(s)
            w = jnp.maximum(w, 0.0)
            top = jnp.max(w, axis=-1, keepdims=True)
            root = jnp.maximum(w + SHAMPOO_EPS * top, jnp.finfo(w.dtype).tiny) ** (-1 / (4 * k))
            r = jnp.einsum("nij,nj,nkj->nik", q, root, q)
            token = jnp.sum(r[:, 0, 0])
            leaf_roots.append(r)
        out_roots.append(tuple(leaf_roots))
        out_precs.append(tuple(r @ r for r in leaf_roots))
    treedef = jax.tree.structure(stats, is_leaf=_is_factors)
    return treedef.unflatten(out_roots), treedef.unflatten(out_precs)


def hand_written(kind, p):
    """A jitted ``run(state, key, T)`` of ``kind`` in {sgld, sghmc, psgld, monge, shampoo,
    sgld+write}."""
    X, y, n, h = p["X"], p["y"], p["batch"], p["step"]
    N = X.shape[0]

    def potential(params, idx):
        return -p["logprior"](params) - N / n * p["loglik"](params, X[idx], y[idx])

    def grad(params, key):
        return jax.grad(potential)(params, random.randint(key, (n,), 0, N))

    def sgld(state, key):
        k1, k2 = random.split(key)
        g, xi = grad(state, k1), _normal_like(k2, state)
        return jax.tree.map(lambda x, g, e: x - h * g + jnp.sqrt(2 * h) * e, state, g, xi)

    def sghmc(state, key):
        (x, v), (k1, k2) = state, random.split(key)
        g, xi = grad(x, k1), _normal_like(k2, x)
        scale = jnp.sqrt(2 * FRICTION * h)
        v = jax.tree.map(lambda v, g, e: (1 - FRICTION) * v - h * g + scale * e, v, g, xi)
        return jax.tree.map(jnp.add, x, v), v

    def psgld(state, key):
        (x, sq, t), (k1, k2) = state, random.split(key)
        g, xi = grad(x, k1), _normal_like(k2, x)
        sq = jax.tree.map(lambda s, g: DECAY * s + (1 - DECAY) * (g / N) ** 2, sq, g)
        c = 1 / (1 - DECAY ** (t + 1.0))
        dg = jax.tree.map(lambda s: 1 / (EPS + jnp.sqrt(c * s)), sq)
        x = jax.tree.map(
            lambda x, d, g, e: x - h * d * g + jnp.sqrt(2 * h * d) * e, x, dg, g, xi
        )
        return x, sq, t + 1

    def monge(state, key):
        (x, v), (k1, k2) = state, random.split(key)
        g, xi = grad(x, k1), _normal_like(k2, x)
        v = jax.tree.map(lambda v, g: MONGE_DECAY * v + (1 - MONGE_DECAY) * g / N, v, g)
        s = _tree_dot(v, v)
        root = jnp.sqrt(1 + ALPHA2 * s)
        cd = ALPHA2 * _tree_dot(v, g) / (1 + ALPHA2 * s)
        cn = -ALPHA2 / (root * (1 + root)) * _tree_dot(v, xi)
        x = jax.tree.map(
            lambda x, g, e, v: x - h * (g - cd * v) + jnp.sqrt(2 * h) * (e + cn * v),
            x, g, xi, v,
        )
        return x, v

    def shampoo(state, key):
        # Shampoo SGLD (ALGORITHMS.md; defaults decay 0.99, eps 1e-8, interval 100, blocks of
        # at most 128 from `shampoo_block_shapes`, the library's layout policy), written out
        # with einsums on each leaf's stack of 2-D (or 1-D) blocks
        (x, stats, roots, precs, t), (k1, k2) = state, random.split(key)
        g, xi = grad(x, k1), _normal_like(k2, x)
        gb = jax.tree.map(lambda g: _blocks(g / N), g)
        stats = jax.tree.map(
            lambda s, b: tuple(
                SHAMPOO_DECAY * f + (1 - SHAMPOO_DECAY) * q for f, q in zip(s, _grams(b))
            ),
            stats, gb, is_leaf=_is_factors,
        )
        roots, precs = lax.cond(
            (t + 1) % SHAMPOO_INTERVAL == 0, _shampoo_roots, lambda s, r, p: (r, p),
            stats, roots, precs,
        )
        drift = jax.tree.map(lambda g, p: _apply(_blocks(g), p, g), g, precs, is_leaf=_is_factors)
        noise = jax.tree.map(lambda e, r: _apply(_blocks(e), r, e), xi, roots, is_leaf=_is_factors)
        x = jax.tree.map(lambda x, d, e: x - h * d + jnp.sqrt(2 * h) * e, x, drift, noise)
        return x, stats, roots, precs, t + 1

    def sgld_write(state, key):
        # SGLD, then the state written into a one-row sample buffer under a `lax.cond`, the
        # way NumPyro's `fori_collect` records a draw on every step (thinned or not)
        x, buffer, t = state
        x = sgld(x, key)
        buffer = jax.tree.map(
            lambda b, v: lax.cond(t >= 0, lambda b: b.at[0].set(v), lambda b: b, b), buffer, x
        )
        return x, buffer, t + 1

    th = TIME_STEP_FACTOR * np.sqrt(2 * h)  # the underdamped integrators' time step
    full_grad = jax.grad(lambda params: -p["logprior"](params) - p["loglik"](params, X, y))

    def baoab(state, key):
        # BAOAB, friction 1, the closing half kick merged into the next step's opening one
        (x, v, started), (k1, k2) = state, random.split(key)
        g, xi = grad(x, k1), _normal_like(k2, x)
        kick = jnp.where(started, th, 0.5 * th)
        v = jax.tree.map(lambda v, g: v - kick * g, v, g)
        x = jax.tree.map(lambda x, v: x + 0.5 * th * v, x, v)
        decay = jnp.exp(-th)
        v = jax.tree.map(lambda v, e: decay * v + jnp.sqrt(1 - decay**2) * e, v, xi)
        x = jax.tree.map(lambda x, v: x + 0.5 * th * v, x, v)
        return x, v, jnp.ones((), bool)

    def kinetic(v):
        leaves = jax.tree.leaves(v)
        return sum(jnp.sum(u * u) for u in leaves) / sum(u.size for u in leaves)

    def sgnht(state, key):
        # SGNHT, A = 1
        (x, v, z), (k1, k2) = state, random.split(key)
        g, xi = grad(x, k1), _normal_like(k2, x)
        v = jax.tree.map(lambda v, g, e: v - z * v * th - th * g + jnp.sqrt(2 * th) * e, v, g, xi)
        x = jax.tree.map(lambda x, v: x + th * v, x, v)
        return x, v, z + (kinetic(v) - 1.0) * th

    def badodab(state, key):
        # BADODAB, A = 1, mu = 1
        (x, v, z, started), (k1, k2) = state, random.split(key)
        g, xi = grad(x, k1), _normal_like(k2, x)
        kick = jnp.where(started, th, 0.5 * th)
        v = jax.tree.map(lambda v, g: v - kick * g, v, g)
        x = jax.tree.map(lambda x, v: x + 0.5 * th * v, x, v)
        z = z + 0.5 * th * (kinetic(v) - 1.0)
        spread = -jnp.expm1(-2 * z * th) / (2 * z)
        v = jax.tree.map(lambda v, e: jnp.exp(-z * th) * v + jnp.sqrt(2 * spread) * e, v, xi)
        z = z + 0.5 * th * (kinetic(v) - 1.0)
        x = jax.tree.map(lambda x, v: x + 0.5 * th * v, x, v)
        return x, v, z, jnp.ones((), bool)

    def csgld(state, key):
        # SGLD with the cyclical cosine step (cycle CYCLE, no exploration stage)
        (x, t), (k1, k2) = state, random.split(key)
        g, xi = grad(x, k1), _normal_like(k2, x)
        hk = 0.5 * h * (jnp.cos(jnp.pi * jnp.mod(t, CYCLE) / CYCLE) + 1)
        x = jax.tree.map(lambda x, g, e: x - hk * g + jnp.sqrt(2 * hk) * e, x, g, xi)
        return x, t + 1

    def svrg(state, key):
        # SGLD with the SVRG estimator, the anchor refreshed every epoch (N / n steps)
        (x, anchor, anchor_grad, t), (k1, k2) = state, random.split(key)
        anchor, anchor_grad = lax.cond(
            (t > 0) & (t % (N // n) == 0), lambda: (x, full_grad(x)),
            lambda: (anchor, anchor_grad),
        )
        idx = random.randint(k1, (n,), 0, N)
        g = jax.grad(potential)(x, idx)
        g0 = jax.grad(potential)(anchor, idx)
        g = jax.tree.map(lambda a, b, c: a - b + c, g, g0, anchor_grad)
        xi = _normal_like(k2, x)
        x = jax.tree.map(lambda x, g, e: x - h * g + jnp.sqrt(2 * h) * e, x, g, xi)
        return x, anchor, anchor_grad, t + 1

    zeros = partial(jax.tree.map, jnp.zeros_like)
    x0 = p["init"]
    step, initial = {  # the initial states built only for ``kind``
        "baoab": (baoab, lambda: (x0, zeros(x0), jnp.zeros((), bool))),
        "sgnht": (sgnht, lambda: (x0, zeros(x0), jnp.ones(()))),
        "badodab": (badodab, lambda: (x0, zeros(x0), jnp.ones(()), jnp.zeros((), bool))),
        "csgld": (csgld, lambda: (x0, jnp.zeros((), jnp.int32))),
        "svrg": (svrg, lambda: (x0, x0, full_grad(x0), jnp.zeros((), jnp.int32))),
        "sgld": (sgld, lambda: x0),
        "sghmc": (sghmc, lambda: (x0, zeros(x0))),
        "psgld": (psgld, lambda: (x0, zeros(x0), jnp.zeros(()))),
        "monge": (monge, lambda: (x0, zeros(x0))),
        "shampoo": (shampoo, lambda: _shampoo_init(x0)),
        "sgld+write": (
            sgld_write,
            lambda: (x0, jax.tree.map(lambda x: jnp.zeros((1,) + x.shape), x0),
                     jnp.zeros((), jnp.int32)),
        ),
    }[kind]
    state = initial()

    @partial(jax.jit, static_argnums=2)
    def run(state, key, num_steps):
        return lax.scan(lambda s, k: (step(s, k), None), state, random.split(key, num_steps))[0]

    return lambda t, key: run(state, key, t)


def blackjax_loop(kind, p, per_call=10):
    """BlackJAX ``sgld``/``sghmc`` driven by ``jit`` + ``lax.scan``: ``run(T, key)`` makes T
    gradient steps."""
    import blackjax
    from blackjax.sgmcmc.gradients import grad_estimator

    X, y, n = p["X"], p["y"], p["batch"]
    N = X.shape[0]
    estimator = grad_estimator(p["logprior"], lambda w, d: p["loglik"](w, *d), N)
    per_call = per_call if kind == "sghmc" else 1
    if kind == "sgld":
        algo = blackjax.sgld(estimator)
    else:
        algo = blackjax.sghmc(estimator, num_integration_steps=per_call, alpha=FRICTION)
    state0 = algo.init(p["init"])

    def step(state, key):
        k1, k2 = random.split(key)
        idx = random.randint(k1, (n,), 0, N)
        return algo.step(k2, state, (X[idx], y[idx]), p["step"]), None

    @partial(jax.jit, static_argnums=1)
    def run(key, num_calls):
        return lax.scan(step, state0, random.split(key, num_calls))[0]

    return lambda t, key: run(key, max(t // per_call, 1))


# --------------------------------------------------------------------------- our kernels
KERNELS = {
    "SGLD": SGLD,
    "SGHMC": partial(SGHMC, friction=FRICTION),
    "PSGLD": partial(PSGLD, decay=DECAY, eps=EPS),
    "MongeSGLD": partial(MongeSGLD, alpha2=ALPHA2, decay=MONGE_DECAY),
    "ShampooSGLD": ShampooSGLD,
    "ShampooSGLD (block 64)": partial(ShampooSGLD, block_size=64),
    "AdamSGLD": AdamSGLD,
    "PSGLD+Γ (Hutchinson)": partial(PSGLD, decay=DECAY, eps=EPS, correction="hutchinson"),
    "MongeSGLD+Γ (Hutchinson)": partial(
        MongeSGLD, alpha2=ALPHA2, decay=MONGE_DECAY, correction="hutchinson"
    ),
    # the correction as written, without the lagged form's response and taming
    "PSGLD+Γ (Hutchinson, instant)": partial(
        PSGLD, decay=DECAY, eps=EPS, correction="hutchinson", correction_form="instant"
    ),
    "MongeSGLD+Γ (Hutchinson, instant)": partial(
        MongeSGLD, alpha2=ALPHA2, decay=MONGE_DECAY, correction="hutchinson",
        correction_form="instant",
    ),
}


def _time_step(h):
    return TIME_STEP_FACTOR * np.sqrt(2 * h)


#: The samplers other libraries have, each against the same update by hand (``--tables
#: peers``); the underdamped integrators take the time step ``_time_step(h)``.
PEERS = {
    "BAOAB": ("baoab", lambda m, step_size, **kw: BAOAB(m, _time_step(step_size), **kw)),
    "SGNHT": ("sgnht", lambda m, step_size, **kw: SGNHT(m, _time_step(step_size), **kw)),
    "BADODAB": ("badodab",
                lambda m, step_size, **kw: BADODAB(m, _time_step(step_size), **kw)),
    "CyclicalSGLD (no exploration)": (
        "csgld", lambda m, step_size, **kw: CyclicalSGLD(m, step_size, cycle_length=CYCLE,
                                                         exploration=0.0, **kw)),
    "SGLD + SVRG": ("svrg", lambda m, step_size, **kw: SGLD(m, step_size,
                                                            gradient=gradients.svrg(), **kw)),
}


def _kernel(kernel, p):
    """The kernel on the problem's model, with its step size and init strategy."""
    kw = {} if p["init_strategy"] is None else {"init_strategy": p["init_strategy"]}
    return kernel(p["model"], step_size=p["step"], **kw)


def peers_tables(p, repeats):
    """The samplers other libraries have: each kernel through ``MCMC`` against the same update
    written by hand (marginal cost per step, interleaved repeats), and XLA's count of one step
    of each against the hand update (deterministic)."""
    contenders = {"hand sgld": hand_written("sgld", p)}
    for name, (hand, kernel) in PEERS.items():
        contenders[f"hand {hand}"] = hand_written(hand, p)
        contenders[name] = ours(kernel, p)
    print(f"{p['title']}: {len(contenders)} contenders", flush=True)
    samples = measure(contenders, p["t1"], p["t2"], repeats)
    lines = [
        _header(p, repeats),
        "| contender | marginal µs / step | vs hand SGLD | vs same update by hand "
        "| fixed cost of a repeated run (s) |",
        "|---|---|---|---|---|",
    ]
    for name in contenders:
        hand = f"hand {PEERS[name][0]}" if name in PEERS else None
        cells = [
            _marginal(samples, name),
            _fmt(_ratio(samples, name, "hand sgld")),
            _fmt(_ratio(samples, name, hand)) if hand else "",
            _fixed(samples, name) if name in PEERS else "",
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cost = [
        f"**XLA cost analysis of one step** ({p['title']}; deterministic):\n",
        "| kernel | GFLOP, by hand | GFLOP, kernel | ratio | MB accessed, by hand "
        "| MB accessed, kernel | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    args = (p["X"], p["y"])
    for name, (hand, make) in PEERS.items():
        run = hand_written(hand, p)
        kernel = _kernel(make, p)
        state = kernel.init(random.PRNGKey(0), 0, None, args, {})
        hf, hb = _xla_cost(partial(run, 1), random.PRNGKey(0))
        kf, kb = _xla_cost(partial(kernel.sample, model_args=args, model_kwargs={}), state)
        cost.append(f"| {name} | {hf / 1e9:.4f} | {kf / 1e9:.4f} | {kf / hf:.3f}× "
                    f"| {hb / 1e6:.2f} | {kb / 1e6:.2f} | {kb / hb:.3f}× |")
    return ["\n".join(lines), "\n".join(cost)]


def ours(kernel, p, num_chains=1, loop="sgrld"):
    """``run(T, key)`` through one ``MCMC`` object whose ``num_samples`` (= ``thinning``: one
    draw kept) is set per run, on the kernels' own sampling loop or (``loop="numpyro"``) on
    NumPyro's ``fori_collect``. One object per contender matters: the loops are cached per
    ``MCMC`` object (NumPyro's for the 8 most recently used; a ninth evicts the oldest, which
    then compiles again)."""
    mcmc = MCMC(
        _kernel(kernel, p),
        num_warmup=0,
        num_samples=1,
        num_chains=num_chains,
        chain_method="vectorized",
        progress_bar=False,
        jit_model_args=True,
    )

    def run(t, key):
        mcmc.num_samples = mcmc.thinning = t
        mcmc._set_collection_params()  # NumPyro reads these, set from num_samples at init
        with fast_sampling_loop() if loop == "sgrld" else contextlib.nullcontext():
            mcmc.run(key, p["X"], p["y"])
        return mcmc.get_samples()

    return run


def ours_in_scan(kernel, p):
    """``run(T, key)``: the kernel's own ``init`` and ``sample`` in a jitted ``lax.scan``, the
    way the hand-written loops run, without NumPyro's ``MCMC`` driver (which in addition writes
    the state into its sample buffer every step). Separates the kernel's cost from the
    driver's."""
    k = _kernel(kernel, p)
    args = (p["X"], p["y"])
    state = k.init(random.PRNGKey(0), 0, None, args, {})

    @partial(jax.jit, static_argnums=1)
    def run(state, num_steps):
        return lax.scan(lambda s, _: (k.sample(s, args, {}), None), state, length=num_steps)[0].z

    return lambda t, key: run(state._replace(rng_key=key), t)


# --------------------------------------------------------------------------- timing
def _timed(run, t, key):
    start = time.perf_counter()
    jax.block_until_ready(run(t, key))
    return time.perf_counter() - start


def measure(contenders, t1, t2, repeats, seed=0):
    """Per contender and repeat: (marginal s/step, t(T1), t(1 step), t(T2)); contenders
    interleaved."""
    for run in contenders.values():  # compile every run length once
        for t in (1, t1, t2):
            _timed(run, t, random.PRNGKey(0))
    order = list(contenders)
    shuffle = pyrandom.Random(seed)
    out = {name: [] for name in order}
    for r in range(repeats):
        shuffle.shuffle(order)
        for name in order:
            run, key = contenders[name], random.PRNGKey(r + 1)
            a, b, one = _timed(run, t1, key), _timed(run, t2, key), _timed(run, 1, key)
            out[name].append(((b - a) / (t2 - t1), a, one, b))
        print(f"  repeat {r + 1}/{repeats} done", flush=True)
    out["_lengths"] = (t1, t2)
    return out


def _min_marginal(runs, t1, t2):
    """Marginal cost from the least disturbed runs: (min t(T2) - min t(T1)) / (T2 - T1).
    Interference from other work on the machine only ever adds time."""
    return (min(r[3] for r in runs) - min(r[1] for r in runs)) / (t2 - t1)


def _ratio(samples, num, den):
    """``(ratio of min-based marginals, median of per-repeat ratios)``."""
    t1, t2 = samples["_lengths"]
    paired = np.median([a[0] / b[0] for a, b in zip(samples[num], samples[den])])
    return _min_marginal(samples[num], t1, t2) / _min_marginal(samples[den], t1, t2), paired


BASIC = ("SGLD", "SGHMC", "PSGLD", "MongeSGLD")
# the second table's kernels, each compared with the kernel it extends
VERSUS = {
    "ShampooSGLD": "SGLD",
    "ShampooSGLD (block 64)": "SGLD",
    "AdamSGLD": "SGLD",
    "PSGLD+Γ (Hutchinson)": "PSGLD",
    "MongeSGLD+Γ (Hutchinson)": "MongeSGLD",
}
HAND = {"SGLD": "hand sgld", "SGHMC": "hand sghmc", "PSGLD": "hand psgld",
        "MongeSGLD": "hand monge"}
IN_SCAN = "(step in lax.scan)"
NUMPYRO_LOOP = "SGLD (NumPyro's loop)"
AGAIN = "hand sgld (again)"
# what `--tables` selects: the speed tables (both problems), then mlp only: the finiteness
# check, the noise draw, XLA's cost count; logreg only: vectorized chains
TABLES = ("speed", "check", "noise", "cost", "chains", "gamma", "peers")
HAND.update({f"{k} {IN_SCAN}": v for k, v in HAND.items()})
HAND[NUMPYRO_LOOP] = "hand sgld"
HAND[AGAIN] = "hand sgld"
HAND["ShampooSGLD"] = "hand shampoo"


def _header(p, repeats):
    return (
        f"**{p['title']}**: run lengths {p['t1']} and {p['t2']} steps, {repeats} interleaved "
        "repeats. Marginal cost from the fastest runs, (min t(T2) − min t(T1)) / (T2 − T1); "
        "ratios of those, and in brackets the median over repeats of the per-repeat ratio.\n"
    )


def speed_tables(p, names, repeats, with_blackjax=True):
    """Two measurements (NumPyro keeps at most 8 MCMC objects' loops compiled): the basic
    kernels against hand-written loops and BlackJAX, then the others against the kernel they
    extend."""
    tables = []
    basic = [n for n in names if n in BASIC]
    if basic:
        contenders = {
            f"hand {k}": hand_written(k, p)
            for k in ("sgld", "sghmc", "psgld", "monge", "sgld+write")
        }
        # the reference twice: the ratio of two identical programs is this run's noise floor
        contenders[AGAIN] = hand_written("sgld", p)
        if with_blackjax:
            contenders["BlackJAX sgld"] = blackjax_loop("sgld", p)
            contenders["BlackJAX sghmc"] = blackjax_loop("sghmc", p, 10)
        contenders.update({n: ours(KERNELS[n], p) for n in basic})
        if "SGLD" in basic:
            contenders[NUMPYRO_LOOP] = ours(SGLD, p, loop="numpyro")
        contenders.update({f"{n} {IN_SCAN}": ours_in_scan(KERNELS[n], p) for n in basic})
        print(f"{p['title']}: {len(contenders)} contenders", flush=True)
        samples = measure(contenders, p["t1"], p["t2"], repeats)
        lines = [
            _header(p, repeats),
            "| contender | marginal µs / step | vs hand SGLD | vs same update by hand "
            "| vs BlackJAX | fixed cost of a repeated run (s) |",
            "|---|---|---|---|---|---|",
        ]
        for name in contenders:
            bj = {"SGLD": "BlackJAX sgld", "SGHMC": "BlackJAX sghmc"}.get(name)
            cells = [
                _marginal(samples, name),
                _fmt(_ratio(samples, name, "hand sgld")),
                _fmt(_ratio(samples, name, HAND[name])) if name in HAND else "",
                _fmt(_ratio(samples, name, bj)) if bj in samples else "",
                _fixed(samples, name) if name in KERNELS else "",
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        tables.append("\n".join(lines))
    extended = [n for n in names if n in VERSUS]
    if extended:
        base = sorted({VERSUS[n] for n in extended})
        contenders = {"hand sgld": hand_written("sgld", p)}
        if "ShampooSGLD" in extended:
            contenders["hand shampoo"] = hand_written("shampoo", p)
        contenders.update({n: ours(KERNELS[n], p) for n in base + extended})
        print(f"{p['title']}: {len(contenders)} contenders", flush=True)
        samples = measure(contenders, p["t1"], p["t2"], repeats)
        lines = [
            _header(p, repeats),
            "| contender | marginal µs / step | vs hand SGLD | vs the kernel it extends "
            "| vs same update by hand | fixed cost of a repeated run (s) |",
            "|---|---|---|---|---|---|",
        ]
        for name in contenders:
            hand = HAND.get(name)
            cells = [
                _marginal(samples, name),
                _fmt(_ratio(samples, name, "hand sgld")),
                f"{_fmt(_ratio(samples, name, VERSUS[name]))} {VERSUS[name]}"
                if name in VERSUS else "",
                _fmt(_ratio(samples, name, hand)) if hand in samples else "",
                _fixed(samples, name) if name in KERNELS else "",
            ]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        tables.append("\n".join(lines))
    return tables


def _marginal(samples, name):
    return f"{_min_marginal(samples[name], *samples['_lengths']) * 1e6:.1f}"


def _fixed(samples, name):
    return f"{np.median([s[2] for s in samples[name]]):.3f}"


def _fmt(r, scale=1):
    by_min, paired = (x * scale for x in r)
    return f"{by_min:.2f}× ({paired:.2f}×)"


def _fastest_per_call(contenders, args, repeats, calls):
    """Fastest of ``repeats`` interleaved batches of ``calls`` calls of each ``fn(*args)``, in
    seconds per call."""
    best = {}
    for fn in contenders.values():
        jax.block_until_ready(fn(*args))
    for _ in range(repeats):
        for name, fn in contenders.items():
            start = time.perf_counter()
            for _ in range(calls):
                out = fn(*args)
            jax.block_until_ready(out)
            best[name] = min(best.get(name, np.inf), (time.perf_counter() - start) / calls)
    return best


def _per_call_table(title, column, best):
    lines = [title + "\n", f"| {column} | µs per call |", "|---|---|"]
    return "\n".join(lines + [f"| {name} | {t * 1e6:.1f} |" for name, t in best.items()])


def check_table(p, repeats, calls=200):
    """Per-step finiteness check of the position, timed alone on the problem's parameters:
    the boolean reduction ``all(isfinite(x))`` per leaf against ``isfinite(sum of the leaf
    sums)`` (``numpyro_sgrld.core.tree.tree_all_finite``), and a copy of the parameters for scale;
    fastest of ``repeats`` interleaved batches of ``calls`` calls."""
    from numpyro_sgrld.core.tree import tree_all_finite

    def boolean(tree):
        return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))

    contenders = {
        "all(isfinite(x)) per leaf": jax.jit(boolean),
        "isfinite(sum of sums) (used)": jax.jit(tree_all_finite),
        "x + 1 (a pass over the parameters)": jax.jit(partial(jax.tree.map, lambda x: x + 1)),
    }
    x = p["init"]
    size = sum(v.size for v in jax.tree.leaves(x))
    title = (
        f"**Finiteness check alone** ({p['title']}, {size:,} parameters, fastest of {repeats} "
        f"batches of {calls} calls):"
    )
    return _per_call_table(title, "check", _fastest_per_call(contenders, (x,), repeats, calls))


def noise_table(p, repeats, calls=200):
    """The step's Gaussian noise, drawn alone on the problem's parameters: one draw per leaf
    (``random.split`` of the key, ``random.normal`` per leaf) against one draw over all
    entries cut into the leaves (``numpyro_sgrld.core.tree.tree_normal``); fastest of ``repeats``
    interleaved batches of ``calls`` calls."""
    from numpyro_sgrld.core.tree import tree_normal

    def per_leaf(key, tree):
        leaves, treedef = jax.tree.flatten(tree)
        keys = random.split(key, len(leaves))
        return treedef.unflatten([random.normal(k, x.shape, x.dtype) for k, x in zip(keys, leaves)])

    contenders = {
        "random.normal per leaf": jax.jit(per_leaf),
        "one draw over all entries (used)": jax.jit(tree_normal),
    }
    x = p["init"]
    title = (
        f"**Noise draw alone** ({p['title']}, {len(jax.tree.leaves(x))} leaves, fastest of "
        f"{repeats} batches of {calls} calls):"
    )
    best = _fastest_per_call(contenders, (random.PRNGKey(0), x), repeats, calls)
    return _per_call_table(title, "draw", best)


def _xla_cost(fn, *args):
    cost = jax.jit(fn).lower(*args).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    return cost["flops"], cost["bytes accessed"]


def _no_finiteness_checks(tree):
    return jnp.array(True)


def cost_breakdown(p, name):
    """XLA's (flops, bytes) of one step of kernel ``name``: by hand, the kernel's step, the
    step with ``check_proposal=False``, without the potential-energy value, and also without
    the finiteness checks (see :func:`cost_tables`)."""
    from numpyro_sgrld.core import acceptance as _acceptance

    args = (p["X"], p["y"])
    hand = hand_written(HAND[name].removeprefix("hand "), p)
    kernel = _kernel(KERNELS[name], p)
    state = kernel.init(random.PRNGKey(0), 0, None, args, {})

    def step(s):
        return kernel.sample(s, args, {})

    unchecked = _kernel(partial(KERNELS[name], check_proposal=False), p)
    unchecked_state = unchecked.init(random.PRNGKey(0), 0, None, args, {})

    def no_value(s):
        new = unchecked.sample(s, args, {})
        return new._replace(chain=new.chain._replace(potential_energy=jnp.zeros(())))

    costs = [
        _xla_cost(lambda key: hand(1, key), random.PRNGKey(0)),
        _xla_cost(step, state),
        _xla_cost(lambda s: unchecked.sample(s, args, {}), unchecked_state),
        _xla_cost(no_value, unchecked_state),
    ]
    with mock.patch.object(_acceptance, "tree_all_finite", _no_finiteness_checks):
        # a new function object: `jax.jit` would reuse the trace of `no_value`
        costs.append(_xla_cost(lambda s: no_value(s), unchecked_state))
    return costs


def cost_tables(p, names):
    """XLA's own cost analysis of one compiled step (``Compiled.cost_analysis()``: floating-point
    operations and bytes read and written, as XLA counts them), deterministic, so it separates
    what the kernels add per step from this machine's timing noise. Two tables from one count
    per kernel (:func:`cost_breakdown`): each basic kernel's ``sample`` against the same update
    by hand; and where the extra goes, each column against the update by hand: the kernel's
    step; the step with ``check_proposal=False`` (no potential at the proposal); the same
    without the potential-energy value (the field set to a constant, so XLA
    drops the computation: the hand loops compute only the gradient); and also without the
    finiteness checks of the new position and state (``tree_all_finite`` replaced by ``True``
    while tracing). The last two are not kernels anyone should run: they attribute the cost."""
    totals = [
        f"**XLA cost analysis of one step** ({p['title']}; deterministic):\n",
        "| kernel | GFLOP, by hand | GFLOP, kernel | ratio | MB accessed, by hand "
        "| MB accessed, kernel | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    parts = [
        f"**Where the extra arithmetic goes** ({p['title']}; XLA's count of one step, GFLOP and "
        "MB accessed each as a ratio to the same update by hand; deterministic):\n",
        "| kernel | kernel step | with check_proposal=False | without the potential-energy "
        "value | and without the finiteness checks |",
        "|---|---|---|---|---|",
    ]
    for name in [n for n in names if n in BASIC]:
        (h_flops, h_bytes), *cells = cost_breakdown(p, name)
        k_flops, k_bytes = cells[0]
        totals.append(
            f"| {name} | {h_flops / 1e9:.3f} | {k_flops / 1e9:.3f} | {k_flops / h_flops:.3f}× "
            f"| {h_bytes / 1e6:.1f} | {k_bytes / 1e6:.1f} | {k_bytes / h_bytes:.3f}× |"
        )
        parts.append(
            f"| {name} | "
            + " | ".join(f"{f / h_flops:.3f}× / {b / h_bytes:.3f}×" for f, b in cells)
            + " |"
        )
    return ["\n".join(totals), "\n".join(parts)]


def chains_table(p, repeats, counts=(1, 4, 16)):
    contenders = {f"{c} chains": ours(SGLD, p, num_chains=c) for c in counts}
    samples = measure(contenders, p["t1"], p["t2"], repeats)
    lines = [
        f"**Vectorized SGLD chains** ({p['title']}), `chain_method=\"vectorized\"`:\n",
        "| chains | marginal µs / step (all chains) | chain-steps / s | vs 1 chain |",
        "|---|---|---|---|",
    ]
    base = f"{counts[0]} chains"
    for c in counts:
        name = f"{c} chains"
        marginal = _min_marginal(samples[name], p["t1"], p["t2"])
        throughput = _ratio(samples, base, name)
        lines.append(
            f"| {c} | {marginal * 1e6:.1f} | {c / marginal:,.0f} | "
            f"{_fmt(throughput, c)} throughput |"
        )
    return "\n".join(lines)


def gamma_cost_table(p):
    """XLA's count of one step of the Hutchinson-corrected kernels, in the lagged form and as
    written, against the uncorrected kernel: what the lagged form's response and taming add."""
    args = (p["X"], p["y"])

    def flops_bytes(name):
        kernel = _kernel(KERNELS[name], p)
        state = kernel.init(random.PRNGKey(0), 0, None, args, {})
        return _xla_cost(lambda s: kernel.sample(s, args, {}), state)

    lines = [
        f"**XLA cost of one Γ-corrected step** ({p['title']}; deterministic; ratios to the "
        "uncorrected kernel):\n",
        "| kernel | GFLOP | ratio | MB accessed | ratio |",
        "|---|---|---|---|---|",
    ]
    for base in ("PSGLD", "MongeSGLD"):
        f0, b0 = flops_bytes(base)
        for name in (base, f"{base}+Γ (Hutchinson, instant)", f"{base}+Γ (Hutchinson)"):
            f, b = flops_bytes(name)
            lines.append(f"| {name} | {f / 1e9:.4f} | {f / f0:.3f}× | {b / 1e6:.2f} "
                         f"| {b / b0:.3f}× |")
    return "\n".join(lines)


def _tables(problem, p, names, args):
    """The tables ``--tables`` asks for on one problem, each computed when reached."""
    if "speed" in args.tables:
        yield from speed_tables(p, names, args.repeats, not args.no_blackjax)
    if problem == "mlp":
        if "check" in args.tables:
            yield check_table(p, args.repeats)
        if "noise" in args.tables:
            yield noise_table(p, args.repeats)
        if "cost" in args.tables:
            yield from cost_tables(p, names)
    if problem == "logreg" and "chains" in args.tables and not args.no_chains:
        yield chains_table(p, args.repeats)
    if "gamma" in args.tables:
        yield gamma_cost_table(p)
    if "peers" in args.tables:
        yield from peers_tables(p, args.repeats)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    ap.add_argument("--kernels", nargs="+", default=list(KERNELS), choices=list(KERNELS))
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-blackjax", action="store_true")
    ap.add_argument("--no-chains", action="store_true")
    ap.add_argument(
        "--tables",
        nargs="+",
        default=list(TABLES),
        choices=list(TABLES),
        help="which measurements to run (default all; `cost` is XLA's deterministic count, "
        "about two minutes on the MLP)",
    )
    ap.add_argument("--out", default=None, help="write the Markdown tables here")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    tables = [f"jax {jax.__version__}, {jax.devices()[0].platform}, float32\n"]
    for name in args.problem:
        p = PROBLEMS[name]()
        names = [k for k in args.kernels if name == "mlp" or "block 64" not in k]
        for table in _tables(name, p, names, args):
            print(table, flush=True)
            tables.append(table)
        jax.clear_caches()
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n\n".join(tables) + "\n")


if __name__ == "__main__":
    main()
