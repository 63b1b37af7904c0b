r"""The large problem's reference posterior (:mod:`numpyro_sgrld.app.time_to_accuracy`):
importance sampling from the Laplace approximation of the logistic regression's posterior,
with the Pareto shape of its weights' tail and delta-method Monte Carlo errors, cached on disk
(:func:`numpyro_sgrld.core.cache.cache_dir`)."""

import hashlib
import time
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from numpyro_sgrld.core.cache import cache_dir

__all__ = ["Reference", "laplace_reference", "pareto_khat"]


class Reference(NamedTuple):
    """Per-coordinate posterior mean and sd with their Monte Carlo standard errors, how they
    were obtained, and what they cost."""

    mean: np.ndarray
    sd: np.ndarray
    mean_se: np.ndarray
    sd_se: np.ndarray
    khat: float  # Pareto shape of the importance weights' tail
    ess: float  # effective sample size of the weights
    num_draws: int
    seconds: float  # the computation's wall time (also when read from the cache)
    cached: bool  # whether this call read it from the cache




def _signs(y):
    return 2.0 * jnp.asarray(y, jnp.float32) - 1.0


@jax.jit
def _newton_terms(X, s, w):
    """Gradient and Hessian of :math:`U(w) = -\\sum_i \\log\\sigma(s_i x_i^\\top w) +
    |w|^2/2` (float32 products, summed in float32 blocks by XLA)."""
    eta = X @ w
    p = jax.nn.sigmoid(-s * eta)  # 1 - sigma(s eta)
    grad = -(X.T @ (s * p)) + w
    weight = p * (1.0 - p)
    hess = (X * weight[:, None]).T @ X + jnp.eye(X.shape[1], dtype=X.dtype)
    return grad, hess


def _mode(X, s, max_iter=50):
    """Newton's method on the full-data potential (float64 solves of float32 sums)."""
    w = np.zeros(X.shape[1])
    for _ in range(max_iter):
        grad, hess = (np.asarray(a, np.float64) for a in _newton_terms(X, s, jnp.asarray(w,
                                                                        jnp.float32)))
        step = np.linalg.solve(hess, grad)
        w = w - step
        if np.max(np.abs(step) * np.sqrt(np.diag(hess))) < 1e-4:
            break
    grad, hess = (np.asarray(a, np.float64) for a in _newton_terms(X, s, jnp.asarray(
        w, jnp.float32)))
    return w, hess


def _log_lik_change(X, s, mode, draws, block=65536):
    r""":math:`\log p(y\mid w_s) - \log p(y\mid\hat w)` for every draw, summed over blocks of
    rows: each term :math:`\log\sigma(s_i x_i^\top w_s) - \log\sigma(s_i x_i^\top\hat w)` is
    small, so float32 sums lose little."""
    n = X.shape[0]
    block = min(block, n)
    pad = (-n) % block
    Xp = jnp.pad(X, ((0, pad), (0, 0)))
    sp = jnp.pad(s, (0, pad))  # padded rows have s = 0: log σ(0) - log σ(0) = 0
    W = jnp.asarray(draws, jnp.float32).T
    m = jnp.asarray(mode, jnp.float32)

    @jax.jit
    def total(Xp, sp, W, m):
        def one(carry, xs):
            Xb, sb = xs
            eta = sb[:, None] * (Xb @ W)
            eta0 = (sb * (Xb @ m))[:, None]
            return carry + jnp.sum(jax.nn.log_sigmoid(eta) - jax.nn.log_sigmoid(eta0), 0), None

        blocks = (Xp.reshape(-1, block, Xp.shape[1]), sp.reshape(-1, block))
        return jax.lax.scan(one, jnp.zeros(W.shape[1], jnp.float32), blocks)[0]

    return np.asarray(total(Xp, sp, W, m), np.float64)


def pareto_khat(log_weights):
    r"""The shape :math:`\hat k` of a generalised Pareto distribution fitted to the largest
    importance weights (:math:`M = \min(S/5, 3\sqrt S)` of them, above the next largest), by
    Zhang & Stephens's (2009) estimator with Vehtari et al.'s (2024) weak prior towards 0.5.
    :math:`\hat k < 0.7`: the self-normalised estimates are reliable."""
    lw = np.sort(np.asarray(log_weights, np.float64))
    S = len(lw)
    M = int(min(0.2 * S, 3 * np.sqrt(S)))
    if M < 5:
        return float("nan")
    x = np.exp(lw[-M:] - lw[-M - 1]) - 1.0  # exceedances over the cutoff, relative
    x = np.sort(x)
    n = len(x)
    m = 30 + int(np.sqrt(n))
    b = 1.0 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))
    b = b / (3.0 * x[int(n / 4 + 0.5) - 1]) + 1.0 / x[-1]
    k = np.log1p(-b[:, None] * x).mean(axis=1)
    log_lik = n * (np.log(-b / k) - k - 1.0)
    weights = 1.0 / np.exp(log_lik - log_lik[:, None]).sum(axis=1)
    b_post = np.sum(b * weights)
    k_post = np.log1p(-b_post * x).mean()
    return float((n * k_post + 10 * 0.5) / (n + 10))


def reference_path(X, y, num_draws, seed, folder):
    h = hashlib.sha256()
    h.update(np.asarray(X.shape).tobytes())
    h.update(np.asarray(X[:: max(1, X.shape[0] // 1000)]).tobytes())
    h.update(np.asarray(y).tobytes())
    h.update(f"laplace-is/{num_draws}/{seed}".encode())
    folder = Path(folder) if folder is not None else cache_dir() / "reference"
    return folder / f"laplace-is-{h.hexdigest()[:20]}.npz"


def laplace_reference(X, y, num_draws=4000, seed=0, folder=None, refresh=False):
    """The reference posterior moments of the logistic regression (module docstring):
    importance sampling from the Laplace approximation, cached as an ``.npz`` file."""
    path = reference_path(X, y, num_draws, seed, folder)
    if path.exists() and not refresh:
        f = np.load(path)
        return Reference(f["mean"], f["sd"], f["mean_se"], f["sd_se"], float(f["khat"]),
                         float(f["ess"]), int(f["num_draws"]), float(f["seconds"]), True)
    start = time.perf_counter()
    s = _signs(y)
    mode, hess = _mode(X, s)
    cov = np.linalg.inv(hess)
    chol = np.linalg.cholesky(cov)
    z = np.random.default_rng(seed).standard_normal((num_draws, len(mode)))
    draws = mode + z @ chol.T
    # log p(w) - log q(w), up to a constant: the likelihood's change from the mode, the
    # prior's, and minus the Gaussian's
    dw = draws - mode
    log_w = (_log_lik_change(X, s, mode, draws)
             - 0.5 * np.sum(draws**2, 1) + 0.5 * np.sum(mode**2)
             + 0.5 * np.einsum("si,ij,sj->s", dw, hess, dw))
    log_w -= log_w.max()
    w = np.exp(log_w)
    w /= w.sum()
    mean = w @ draws
    centred = draws - mean
    var = w @ centred**2
    sd = np.sqrt(var)
    # delta-method standard errors of the ratio estimators
    mean_se = np.sqrt(np.sum(w[:, None] ** 2 * centred**2, 0))
    var_se = np.sqrt(np.sum(w[:, None] ** 2 * (centred**2 - var) ** 2, 0))
    sd_se = var_se / (2 * sd)
    ess = 1.0 / np.sum(w**2)
    khat = pareto_khat(log_w)
    seconds = time.perf_counter() - start
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npz")
    np.savez(tmp, mean=mean, sd=sd, mean_se=mean_se, sd_se=sd_se, khat=khat, ess=ess,
             num_draws=num_draws, seconds=seconds)
    tmp.replace(path)
    return Reference(mean, sd, mean_se, sd_se, khat, ess, num_draws, seconds, False)
