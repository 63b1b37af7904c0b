r"""The network reference problems: data, a model with a subsampled data plate as a user would
write it, and the test points whose predictive distribution is compared.

- ``cancer``: a 30-16-2 tanh MLP, the library's He-scaled Gaussian prior on every weight and
  bias (``priors.gaussian()``: sd :math:`\sqrt2/\sqrt{\text{fan-in}}`), on scikit-learn's
  breast-cancer data (standardised; 400 training rows, 169 test rows), minibatch 32.
- ``cancer_horseshoe``: the same network with a layer-wise horseshoe on the first layer's
  weights (``priors.horseshoe("layer")``).
- ``cancer_unit_horseshoe``: the same network with a unit-wise horseshoe on the first layer's
  weights (``priors.horseshoe("unit")``: a global and 16 per-unit half-Cauchy scales,
  non-centred for NUTS); ``gibbs_model`` and ``gibbs_full`` write it centred
  (``parametrisation="centred"``), as :class:`~numpyro_sgrld.SGGibbs` updates its scales
  (``benchmarks/accuracy/gibbs_network.py``). The two forms have the same posterior.
- ``concrete``: a UCI regression (``../shared/data/uci/concrete``, published split 0: 927
  training rows, 103 test rows, 8 features), one hidden layer of 50 ReLU units (the
  competition's UCI set-up), noise scale learnt, minibatch 32; judged by W2 per test point.
- ``digits``: the project's digits MLP with a horseshoe prior (``models.bnn``), 1,438
  training rows, 359 test rows, minibatch 100, with ``HIDDEN_DIGITS`` hidden units.
- ``shuttle``: Statlog (Shuttle) (``../shared/data/bandits``), a 9-16-7 tanh MLP with the
  He-scaled Gaussian prior, 50,000 training rows (``shuttle_1000`` and ``shuttle_10000``:
  the first 1,000 and 10,000 of them), 2,000 test rows, minibatch 500.

NUTS starts from ``INIT`` (``priors.init_to_unit_scales``); the presets from their default,
NumPyro's ``init_to_uniform``."""

import os

# the benchmarks time one core: XLA's own threads limited to one, before jax is imported
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                      "intra_op_parallelism_threads=1")

import gzip  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import haiku as hk  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
import numpyro.distributions as dist  # noqa: E402

from numpyro_sgrld import priors, random_haiku_module  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
HIDDEN_DIGITS = 16
F = np.float32


def _classifier(net, prior, X, y=None, subsample_size=None):
    apply = random_haiku_module("net", net, (1, X.shape[1]), prior)
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        logits = apply(X[idx])
        if y is None:
            numpyro.deterministic("logits", logits)
        numpyro.sample("y", dist.Categorical(logits=logits), obs=None if y is None else y[idx])


def _regressor(net, prior, X, y=None, subsample_size=None):
    apply = random_haiku_module("net", net, (1, X.shape[1]), prior)
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        mean = apply(X[idx])[..., 0]
        if y is None:
            numpyro.deterministic("mean", mean)
            numpyro.deterministic("scale", jnp.broadcast_to(sigma, mean.shape))
        numpyro.sample("y", dist.Normal(mean, sigma), obs=None if y is None else y[idx])


def _mlp(sizes, activation):
    return hk.transform(lambda x: hk.nets.MLP(sizes, activation=activation)(x))


def _first_layer_horseshoe(path, shape):
    if path.endswith("linear_0/w"):
        return priors.horseshoe("layer")(path, shape)
    return priors.gaussian()(path, shape)


def _first_layer_unit_horseshoe(parametrisation):
    def prior(path, shape):
        if path.endswith("linear_0/w"):
            return priors.horseshoe("unit", parametrisation=parametrisation)(path, shape)
        return priors.gaussian()(path, shape)

    return prior


def _split(X, y, n_train, n_test, seed=0):
    order = np.random.default_rng(seed).permutation(len(y))
    train, test = order[:n_train], order[n_train:n_train + n_test]
    mean, sd = X[train].mean(0), X[train].std(0)
    sd[sd == 0] = 1.0
    X = (X - mean) / sd
    return (jnp.asarray(X[train], F), jnp.asarray(y[train])), jnp.asarray(X[test], F), y[test]


def _cancer(prior):
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    train, X_test, y_test = _split(X.astype(np.float64), y.astype(np.int32), 400, 169)
    model = partial(_classifier, _mlp([16, 2], jnp.tanh), prior)
    return dict(model=partial(model, subsample_size=32), full=model, train=train,
                X_test=X_test, y_test=y_test, kind="classifier")


def cancer():
    return _cancer(priors.gaussian())


def cancer_horseshoe():
    return _cancer(_first_layer_horseshoe)


def cancer_unit_horseshoe():
    centred = _cancer(_first_layer_unit_horseshoe("centred"))
    return {**_cancer(_first_layer_unit_horseshoe("log")), "gibbs_model": centred["model"],
            "gibbs_full": centred["full"]}


def concrete():
    from numpyro_sgrld.models.uci import load_uci_split

    split = load_uci_split("concrete", 0)
    model = partial(_regressor, _mlp([50, 1], jax.nn.relu), priors.gaussian())
    return dict(model=partial(model, subsample_size=32), full=model,
                train=(split.X_train, split.y_train), X_test=split.X_test,
                y_test=(np.asarray(split.y_test) - split.y_mean) / split.y_std,
                kind="regressor")


def digits():
    from numpyro_sgrld.models.bnn import load_digits

    X_train, y_train, X_test, y_test = load_digits()
    model = partial(_classifier, _mlp([HIDDEN_DIGITS, 10], jax.nn.relu),
                    priors.horseshoe("layer"))
    return dict(model=partial(model, subsample_size=100), full=model, train=(X_train, y_train),
                X_test=X_test, y_test=np.asarray(y_test), kind="classifier")


def _shuttle(n_train):
    path = DATA / "bandits" / "shuttle.csv.gz"
    if not path.exists():
        raise SystemExit(f"Statlog (Shuttle) not found at {path}: the shared data folder is "
                         "needed for the shuttle problems.")
    with gzip.open(path, "rt") as f:
        rows = [line.strip().split(",") for line in f.readlines()[1:]]
    X = np.array([[float(v) for v in r[:9]] for r in rows])
    names = sorted({r[9] for r in rows})
    y = np.array([names.index(r[9]) for r in rows], np.int32)
    (X_all, y_all), X_test, y_test = _split(X, y, 50_000, 2_000)
    train = (X_all[:n_train], y_all[:n_train])
    model = partial(_classifier, _mlp([16, 7], jnp.tanh), priors.gaussian())
    return dict(model=partial(model, subsample_size=min(500, n_train)), full=model,
                train=train, X_test=X_test, y_test=y_test, kind="classifier")


def shuttle():
    return _shuttle(50_000)


def shuttle_1000():
    return _shuttle(1_000)


def shuttle_10000():
    return _shuttle(10_000)


PROBLEMS = {f.__name__: f for f in (cancer, cancer_horseshoe, cancer_unit_horseshoe, concrete,
                                    digits, shuttle, shuttle_1000, shuttle_10000)}
INIT = priors.init_to_unit_scales


def predictive(problem, samples):
    """The test points' predictive: class probabilities averaged over the draws (points x
    classes), or for a regressor each draw's mean and noise scale (draws x points each)."""
    from numpyro_sgrld.analysis.predictive import predict_sites, predictive_probs

    if problem["kind"] == "classifier":
        return {"probs": predictive_probs(problem["full"], samples, problem["X_test"])}
    out = predict_sites(problem["full"], samples, problem["X_test"], ["mean", "scale"])
    return {"mean": out["mean"], "scale": out["scale"]}


def timed_run(mcmc, seed, problem):
    """``mcmc.run`` on the problem's training data from ``PRNGKey(seed)``, its warnings
    silenced and its draws ready: the wall time in seconds."""
    import time
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(seed), *problem["train"])
        jax.block_until_ready(mcmc.get_samples())
        return time.perf_counter() - start
