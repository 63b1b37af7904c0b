"""A horseshoe network a user would write, judged against NUTS: a 13-16-3 tanh Haiku MLP on
scikit-learn's wine data (124 training rows, 54 test rows, minibatch 32), a layer-wise
horseshoe on the first layer's weights (``priors.horseshoe("layer")``), ``priors.gaussian()``
elsewhere, started with ``init_to_unit_scales``; every preset at its defaults (``K(model,
init_strategy=init_to_unit_scales)``), 4 vectorised chains, ``--warmup`` and ``--samples``
steps, against NUTS on ``full_batch(model)`` (4 chains, cached in ``--cache``).

Each row says whether the run warned, and whether the horseshoe scale (the one latent site a
permutation of units does not relabel) agrees with NUTS's: its log's mean within 0.15 NUTS sd
and its sd within 15 %, beyond noise as ``tests/test_verdict_grid.py`` counts it (the errors'
standard errors from both runs' bulk ESS). The test log-likelihood per point of the
predictive ensemble is reported with its error from the spread of the chains' own ensembles.
One JSON line per preset is appended to ``--out`` (a rerun skips the presets there)::

    python benchmarks/accuracy/wine_horseshoe.py --out docs/results/verdict_grid_c.jsonl
"""

import argparse
import json
import time
import warnings
from pathlib import Path

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.diagnostics import effective_sample_size
from numpyro.infer import MCMC, NUTS

import numpyro_sgrld as ns
from numpyro_sgrld import priors, random_haiku_module

PRESETS = ["SGLD", "SGHMC", "PSGLD", "MongeSGLD", "ShampooSGLD", "WenzelSGLD", "AdamSGLD",
           "BAOAB", "SGNHT", "BADODAB", "CyclicalSGLD", "CyclicalSGHMC", "BNPSGLD"]
SCALE = "net/mlp/linear_0/w_scale"
MAX_MEAN_ERROR, SD_RATIO, BEYOND = 0.15, (0.87, 1.15), 2.0


def data():
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X = (X - X.mean(0)) / X.std(0)
    train, test = order[:124], order[124:]
    f = np.float32
    return (jnp.asarray(X[train], f), jnp.asarray(y[train])), (jnp.asarray(X[test], f),
                                                               jnp.asarray(y[test]))


NET = hk.transform(lambda x: hk.nets.MLP([16, 3], activation=jnp.tanh)(x))


def prior(path, shape):
    if path.endswith("linear_0/w"):
        return priors.horseshoe("layer")(path, shape)
    return priors.gaussian()(path, shape)


def model(X, y=None, subsample_size=32):
    apply = random_haiku_module("net", NET, (1, X.shape[1]), prior)
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        logits = apply(X[idx])
        numpyro.deterministic("logits", logits)
        numpyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx])


def test_loglik(samples, X, y):
    """``(chains,)`` each chain's ensemble log predictive per test point, and the pooled one."""
    params = {k: v for k, v in samples.items() if k.startswith("net/") and "logits" not in k}

    def logp(p):
        out = numpyro.handlers.substitute(model, data=p)
        tr = numpyro.handlers.trace(numpyro.handlers.seed(out, 0)).get_trace(
            X, None, X.shape[0])
        return jax.nn.log_softmax(tr["logits"]["value"])[jnp.arange(len(y)), y]

    chains, draws = next(iter(params.values())).shape[:2]
    keep = np.unique(np.linspace(0, draws - 1, min(draws, 1000)).round().astype(int))
    flat = {k: v[:, keep].reshape(-1, *v.shape[2:]) for k, v in params.items()}
    lp = jax.lax.map(logp, flat, batch_size=100).reshape(chains, len(keep), -1)
    per_chain = jax.scipy.special.logsumexp(lp, 1) - np.log(len(keep))
    pooled = jax.scipy.special.logsumexp(lp.reshape(-1, lp.shape[-1]), 0) - np.log(lp.shape[0]
                                                                                    * len(keep))
    return np.asarray(per_chain.mean(1)), float(pooled.mean())


def scale_summary(scale_by_chain):
    x = np.log(np.asarray(scale_by_chain, np.float64))
    ess = float(effective_sample_size(x[..., None])[0])
    s = np.exp(x.ravel())
    return {"log_mean": float(x.mean()), "log_sd": float(x.std()), "ess": ess,
            "median": float(np.median(s)), "q05": float(np.quantile(s, 0.05)),
            "q95": float(np.quantile(s, 0.95))}


def nuts_reference(cache, train):
    path = cache / "wine_horseshoe_reference.npz"
    if path.exists():
        r = np.load(path)
        return {k: r[k] for k in r.files}
    mcmc = MCMC(NUTS(ns.full_batch(model), init_strategy=priors.init_to_unit_scales),
                num_warmup=2000, num_samples=5000, num_chains=4, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(jax.random.PRNGKey(1), *train)
    s = mcmc.get_samples(group_by_chain=True)
    # the scale's draws whole; the weights' every 10th (the predictive reads at most 1,000)
    out = {k: np.asarray(v) if k == SCALE else np.asarray(v)[:, ::10]
           for k, v in s.items() if k.startswith("net/")}
    out["divergences"] = np.asarray(mcmc.get_extra_fields()["diverging"].sum())
    np.savez_compressed(path, **out)
    return out


def row(kernel_name, train, test, reference, warmup, samples):
    kernel = getattr(ns, kernel_name)(model, init_strategy=priors.init_to_unit_scales)
    mcmc = MCMC(kernel, num_warmup=warmup, num_samples=samples, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(0), *train)
        jax.block_until_ready(mcmc.get_samples())
    seconds = time.perf_counter() - t
    said = [str(w.message) for w in caught if "cannot be trusted" in str(w.message)]
    s = mcmc.get_samples(group_by_chain=True)
    ours, ref = scale_summary(s[SCALE]), scale_summary(reference[SCALE])
    err = abs(ours["log_mean"] - ref["log_mean"]) / ref["log_sd"]
    ratio = ours["log_sd"] / ref["log_sd"]
    per_chain, pooled = test_loglik(s, *test)
    accurate = err <= MAX_MEAN_ERROR and SD_RATIO[0] <= ratio <= SD_RATIO[1]
    return {"problem": "wine_horseshoe", "kernel": kernel_name, "chains": 4, "wrong": False,
            "warned": bool(said), "warning": said[0][:400] if said else "",
            "accurate": bool(accurate), "silent_failure": bool(not accurate and not said),
            "max_mean_error_sd": err, "sd_ratio_min": ratio, "sd_ratio_max": ratio,
            "mean_error_sd": [err], "sd_ratio": [ratio],
            # the error's standard errors use the smaller of the two runs' ESS
            "ess": [min(ours["ess"], ref["ess"])],
            "scale": ours, "scale_reference": ref,
            "test_loglik": pooled, "test_loglik_se": float(per_chain.std(ddof=1) / 2),
            "step_size": np.asarray(mcmc.last_state.step_size, np.float64).tolist(),
            "warmup": warmup, "samples": samples, "total_seconds": seconds}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kernels", nargs="+", default=PRESETS)
    p.add_argument("--warmup", type=int, default=2000)
    p.add_argument("--samples", type=int, default=20000)
    p.add_argument("--out", type=Path, default=Path("docs/results/verdict_grid_c.jsonl"))
    p.add_argument("--cache", type=Path, default=Path("docs/results"))
    a = p.parse_args()
    train, test = data()
    reference = nuts_reference(a.cache, train)
    per_chain, pooled = test_loglik(reference, *test)
    print(json.dumps({"reference": scale_summary(reference[SCALE]), "test_loglik": pooled,
                      "divergences": int(reference["divergences"])}), flush=True)
    done = set()
    if a.out.exists():
        done = {r["kernel"] for r in map(json.loads, a.out.read_text().splitlines())
                if r.get("problem") == "wine_horseshoe"}
    for k in a.kernels:
        if k in done:
            continue
        r = row(k, train, test, reference, a.warmup, a.samples)
        print(json.dumps(r), flush=True)
        with a.out.open("a") as f:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
