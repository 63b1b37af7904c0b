"""Lange et al. (2023) §4.2, Fig. 4.1: contextual bandits by Thompson sampling with a network.

Two problems: **Statlog (Shuttle)** (``../shared/data/bandits/shuttle.csv.gz``, 58,000 × 9, 7
classes; a context is a row with its features z-scored over the data set, the 7 actions are the
classes, reward 1 for the right one), one of the paper's four data sets — Mushroom, Covertype
and Census are not available offline — and, in their place, the synthetic **wheel bandit** of
Riquelme, Tucker & Snoek (2018, "Deep Bayesian Bandits Showdown", §4): contexts uniform on the
unit disc, 5 actions, action 0 pays N(1.2, 0.01²), the others N(1.0, 0.01²) except the one of the
context's quadrant, which pays N(50, 0.01²) when ‖x‖ > δ (δ = 0.95 here).

Every method fits a 2-hidden-layer ReLU network (50 units each) with one output per action by
the squared error of the reward of the chosen action, L2 penalty 1 (a N(0, 1/2) prior), and
acts greedily on its network at the round's context (Thompson sampling for the samplers, which
act on their current draw); after each round it takes ``--updates`` steps on minibatches of 32
drawn from the rounds so far (the potential is the minibatch squared error scaled to the
rounds so far, plus the penalty). The paper's settings: temperature 0.03; constant step (the
paper's learning rates: Statlog 3e-6; as h of this potential); pSGLD λ = 1e-3, α = 0.99; BNP
(ε₁, ε₂) = (1, 0.1) on Statlog (ρ = 0.99), the defaults (1e-2, 1e-4) on the wheel; dropout 50 %
with the prediction averaged over 5 dropout masks; ε-greedy with ε = 0.003 and the step
annealed by 0.999 per round; SGD and ε-greedy and dropout take plain gradient steps (no
noise). The samplers are the library's metrics (``metrics.rmsprop``, ``metrics.bnp``, the
identity) with ``integrators.langevin_step``; BNP reads the layers' inputs from the same forward
pass as the gradient (``hk.intercept_methods``, as ``random_haiku_module`` does).

    python benchmarks/papers/bnp_bandits.py --seeds 5 --out docs/results/bnp_bandits.json \
        --figure docs/images/bnp_bandits.png
"""

import argparse
import gzip
import json
import time
from pathlib import Path

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from jax import random

from numpyro_sgrld import metrics
from numpyro_sgrld.bridges.haiku import _layer_inputs
from numpyro_sgrld.core.integrators import langevin_step
from numpyro_sgrld.core.metrics import StepContext
from numpyro_sgrld.core.metrics.bnp import layer_inputs_name

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "bandits" / "shuttle.csv.gz"
ROUNDS, BATCH, HIDDEN, TEMPERATURE, L2 = 2000, 32, 50, 0.03, 1.0
METHODS = ("EpsGreedy", "SGD", "Dropout", "pSGLD", "BNP")
PER_DATUM = False  # --per-datum: the step is lr / (rounds so far), lr = --step


# ------------------------------------------------------------------------------ problems
def shuttle(seed, rounds):
    if not DATA.exists():
        raise SystemExit(f"Statlog (Shuttle) not found at {DATA}: the shared data folder is "
                         "needed for this problem (run with --problems wheel).")
    with gzip.open(DATA, "rt") as f:
        header = f.readline().strip().split(",")
        rows = [line.strip().split(",") for line in f]
    X = np.array([[float(v) for v in r[:-1]] for r in rows])
    names = sorted({r[-1] for r in rows})
    labels = np.array([names.index(r[-1]) for r in rows])
    X = (X - X.mean(0)) / X.std(0)
    order = np.random.default_rng(seed).permutation(len(labels))[:rounds]
    contexts = X[order]
    mean_rewards = np.eye(len(names))[labels[order]]  # expected reward of each action
    assert len(header) == 10
    return contexts, mean_rewards, mean_rewards


def wheel(seed, rounds, delta=0.95):
    rng = np.random.default_rng(seed)
    r = np.sqrt(rng.uniform(size=rounds))
    phi = rng.uniform(0, 2 * np.pi, rounds)
    contexts = np.stack([r * np.cos(phi), r * np.sin(phi)], 1)
    mean = np.full((rounds, 5), 1.0)
    mean[:, 0] = 1.2
    quadrant = 1 + (contexts[:, 0] < 0) * 1 + (contexts[:, 1] < 0) * 2  # actions 1..4
    far = r > delta
    mean[far, quadrant[far]] = 50.0
    rewards = mean + 0.01 * rng.normal(size=mean.shape)
    return contexts, mean, rewards


PROBLEMS = {"shuttle": shuttle, "wheel": wheel}
SETTINGS = {  # per problem: the constant step h and BNP's (eps1, eps2)
    "shuttle": dict(step=3e-6, eps=(1.0, 0.1)),
    "wheel": dict(step=3e-6, eps=(1e-2, 1e-4)),
}


# ------------------------------------------------------------------------------ network
def _net(num_actions, dropout):
    def f(x, key=None):
        mlp = hk.nets.MLP([HIDDEN, HIDDEN, num_actions])
        if dropout and key is not None:
            return mlp(x, dropout_rate=0.5, rng=key)
        return mlp(x)

    return hk.without_apply_rng(hk.transform(f))


def _named(params):
    """Haiku params -> the flat site-named dict BNP expects (``net/mlp/linear_0/w``)."""
    return {f"net/{m.replace('~/', '')}/{p}": v for m, e in params.items() for p, v in e.items()}


def _haiku(flat):
    out = {}
    for name, v in flat.items():
        _, *module, p = name.split("/")
        out.setdefault("/~/".join(module), {})[p] = v
    return out


def _apply_recording(net, flat, x, key=None):
    """The network's output and ``{"layer_inputs:net/...": inputs}`` from the same pass."""
    inputs = {}

    def interceptor(next_fn, args, kwargs, context):
        x = _layer_inputs(context, args, kwargs)  # what random_haiku_module records
        if x is not None:
            inputs[layer_inputs_name("net/" + context.module.module_name.replace("~/", ""))] = x
        return next_fn(*args, **kwargs)

    with hk.intercept_methods(interceptor):
        out = net.apply(_haiku(flat), x, key) if key is not None else net.apply(_haiku(flat), x)
    return out, inputs


# ------------------------------------------------------------------------------ one run
def run(problem, method, seed, rounds, updates):
    contexts, mean, rewards = PROBLEMS[problem](seed, rounds)
    k = mean.shape[1]
    net = _net(k, method == "Dropout")
    key = random.PRNGKey(seed)
    flat = _named(net.init(key, jnp.zeros((1, contexts.shape[1]))))
    eps1, eps2 = SETTINGS[problem]["eps"]
    metric = {"pSGLD": metrics.rmsprop(0.99, 1e-3), "BNP": metrics.bnp(0.99, eps1, eps2)}.get(
        method, metrics.identity())
    noisy = method in ("pSGLD", "BNP")
    step0 = SETTINGS[problem]["step"]

    def potential(theta, xb, ab, rb, t, key):
        out, aux = _apply_recording(net, theta, xb, key if method == "Dropout" else None)
        err = jnp.take_along_axis(out, ab[:, None], 1)[:, 0] - rb
        scale = (t + 1) / xb.shape[0]
        l2 = L2 * sum(jnp.sum(v ** 2) for v in jax.tree.leaves(theta))
        return scale * jnp.sum(err ** 2) + l2, aux

    grad_fn = jax.grad(potential, has_aux=True)

    def act(theta, x, key):
        if method == "Dropout":
            keys = random.split(key, 5)
            outs = jax.vmap(lambda kk: net.apply(_haiku(theta), x[None], kk)[0])(keys)
            return jnp.argmax(outs.mean(0))
        greedy = jnp.argmax(net.apply(_haiku(theta), x[None])[0])
        if method == "EpsGreedy":
            k1, k2 = random.split(key)
            return jnp.where(random.uniform(k1) < 0.003, random.randint(k2, (), 0, k), greedy)
        return greedy

    X, A, R = jnp.asarray(contexts, jnp.float32), jnp.zeros(rounds, jnp.int32), jnp.zeros(rounds)
    rew = jnp.asarray(rewards, jnp.float32)

    def round_(carry, t):
        theta, mstate, A, R, key = carry
        key, k_act, k_up = random.split(key, 3)
        a = act(theta, X[t], k_act)
        A, R = A.at[t].set(a), R.at[t].set(rew[t, a])
        h = step0 * (0.999 ** t if method == "EpsGreedy" else 1.0)
        if PER_DATUM:  # the step on the mean loss: h = lr / (rounds so far)
            h = h / (t + 1)

        def update(c, kk):
            theta, mstate = c
            k_idx, k_drop, k_noise = random.split(kk, 3)
            idx = random.randint(k_idx, (BATCH,), 0, t + 1)
            g, aux = grad_fn(theta, X[idx], A[idx], R[idx], t, k_drop)
            pre, mstate = metric.update(g, mstate, theta, StepContext(num_data=t + 1, aux=aux))
            theta = langevin_step(k_noise, theta, g, pre, h, TEMPERATURE if noisy else 0.0)
            return (theta, mstate), None

        (theta, mstate), _ = jax.lax.scan(update, (theta, mstate), random.split(k_up, updates))
        return (theta, mstate, A, R, key), a

    carry = (flat, metric.init(flat), A, R, key)
    start = time.perf_counter()
    _, actions = jax.jit(lambda c: jax.lax.scan(round_, c, jnp.arange(rounds)))(carry)
    actions = np.asarray(actions)
    seconds = time.perf_counter() - start
    regret = mean.max(1) - mean[np.arange(rounds), actions]
    return np.cumsum(regret), seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=list(PROBLEMS))
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--step", type=float, default=None,
                    help="one constant step h for every method and problem (default: SETTINGS)")
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    ap.add_argument("--per-datum", action="store_true",
                    help="divide the step by the rounds so far (a learning rate on the mean "
                    "loss: the potential grows with the rounds, a constant step does not fit "
                    "every round)")
    ap.add_argument("--out", default="docs/results/bnp_bandits.json")
    ap.add_argument("--figure", default="docs/images/bnp_bandits.png")
    args = ap.parse_args()
    if args.step is not None:
        for v in SETTINGS.values():
            v["step"] = args.step
    global PER_DATUM
    PER_DATUM = args.per_datum
    results = {}
    for problem in args.problems:
        for method in args.methods:
            curves = []
            for seed in range(args.seeds):
                curve, seconds = run(problem, method, seed, args.rounds, args.updates)
                curves.append(curve)
                print(problem, method, seed, f"final regret {curve[-1]:.1f}",
                      f"{seconds:.1f}s", flush=True)
            curves = np.array(curves)
            results[f"{problem}/{method}"] = {
                "final_mean": float(curves[:, -1].mean()),
                "final_se": float(curves[:, -1].std(ddof=1) / np.sqrt(len(curves))),
                "curve_mean": curves.mean(0)[::10].tolist(),
            }
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"settings": vars(args), **results}, indent=1))
    figure(results, args)
    for key, r in results.items():
        print(f"| {key} | {r['final_mean']:.1f} ± {r['final_se']:.1f} |")


def figure(results, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(args.problems), figsize=(6 * len(args.problems), 4))
    axes = np.atleast_1d(axes)
    for ax, problem in zip(axes, args.problems):
        for method in args.methods:
            r = results[f"{problem}/{method}"]
            rounds = np.arange(len(r["curve_mean"])) * 10 + 1
            ax.plot(rounds, r["curve_mean"],
                    label=f"{method} ({r['final_mean']:.0f} ± {r['final_se']:.0f})")
        ax.set_title(f"{problem}: cumulative regret, mean of {args.seeds} seeds")
        ax.set_xlabel("round")
        ax.set_ylabel("cumulative regret")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.figure, dpi=90)


if __name__ == "__main__":
    main()
