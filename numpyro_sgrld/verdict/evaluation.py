r"""A network's chains judged in function space: the log-likelihood of a fixed evaluation
batch.

A network's posterior has many equivalent modes (permuted units, flipped signs), which do not
change what the network predicts. So the verdict judges the sites those symmetries relabel
(:data:`~numpyro_sgrld.sampler.setup.NETWORK`; a prior's single-valued scale is judged as any
latent site) on

.. math::  \ell(\theta) = \sum_{i \in B} \log p(y_i \mid x_i, \theta),

the log-likelihood of its observed sites on one fixed batch :math:`B` of every subsample
plate (``subsample_size`` evenly spaced rows, the same for every chain and every step): a
function of the draws that two chains agree on when they predict alike, whatever mode each
sits in. Its split :math:`\hat R` across chains says whether the chains agree on
predictions; its bulk ESS, whether each chain has explored its mode's predictions.

On ``MCMC``'s own loop the kernel evaluates :math:`\ell` every :data:`EVERY` post-warm-up
steps (two forward passes on :math:`B`; held in between); the kernels' own loop and
:func:`~numpyro_sgrld.verdict.judge.check` evaluate it at the kept draws (at most :data:`MAX_DRAWS`
per chain).
"""

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers
from numpyro.infer.util import constrain_fn

__all__ = ["EVERY", "MAX_DRAWS", "NAME", "evaluation_indices", "loglik_fn",
           "loglik_of_draws"]

#: The name the verdict gives the evaluation batch's log-likelihood, judged like a site.
NAME = "log-likelihood of the evaluation batch"

#: On ``MCMC``'s own loop, the evaluation batch's log-likelihood is evaluated every this many
#: post-warm-up steps: two forward passes on one minibatch per 32 steps, 1.1 % of a step's
#: flops on the digits problem's MLP (``tests/test_step_cost.py``).
EVERY = 32

#: At most this many kept draws per chain are evaluated after a run (evenly spaced).
MAX_DRAWS = 1000


def evaluation_indices(plates):
    r"""``{plate: indices}``: ``subsample_size`` evenly spaced rows of every subsample plate,
    :math:`\operatorname{round}(i(N-1)/(n-1))` for :math:`i = 0..n-1` (data sorted by class or
    by time are covered end to end). For rows sharded across devices
    (:class:`~numpyro_sgrld.data.sharding.ShardedRows`, :math:`K` shares, :math:`K` dividing
    :math:`n` and :math:`N \ge n`), the :math:`k`-th block of :math:`n/K` rows lies in the
    :math:`k`-th share, so every device reads its own: the block's first row is at least
    :math:`kN/K` (as :math:`n(N-1) \ge N(n-1)`), and its last, at :math:`i = (k+1)n/K - 1`,
    is below the next share's first by
    :math:`\big((1-m)N + mn - 1\big)/(n-1) \ge 1` with :math:`m = (k+1)/K \le 1`, so
    rounding keeps both in the share."""
    return {p.name: jnp.asarray(np.linspace(0, p.size - 1, p.subsample_size).round(),
                                jnp.int32) for p in plates}


def loglik_fn(model, plates):
    """``(params, model_args, model_kwargs, constrained) -> ℓ``: the summed log-density of
    ``model``'s observed sites on the evaluation batch (:func:`evaluation_indices`), at
    latent values ``params`` (constrained, or unconstrained with ``constrained=False``)."""
    fixed = handlers.substitute(model, data=evaluation_indices(plates))

    def loglik(params, model_args, model_kwargs, constrained=True):
        if not constrained:
            params = constrain_fn(fixed, model_args, model_kwargs, params)
        seeded = handlers.seed(handlers.substitute(fixed, data=params), rng_seed=0)
        tr = handlers.trace(seeded).get_trace(*model_args, **model_kwargs)
        terms = [jnp.sum(site["fn"].log_prob(site["value"])) for site in tr.values()
                 if site["type"] == "sample" and site.get("is_observed")]
        return sum(terms) if terms else jnp.zeros(())

    return loglik


def loglik_of_draws(loglik, draws, model_args, model_kwargs, constrained=True):
    """``(chains, kept)``: :func:`loglik_fn`'s ``loglik`` at draws grouped by chain (a dict
    of ``(chains, draws, ...)`` arrays), at most :data:`MAX_DRAWS` evenly spaced per chain."""
    draws = {k: np.asarray(v) for k, v in draws.items()}
    n = next(iter(draws.values())).shape[1]
    keep = np.unique(np.linspace(0, n - 1, min(n, MAX_DRAWS)).round().astype(int))
    draws = {k: v[:, keep] for k, v in draws.items()}

    def one(z):
        return loglik(z, model_args, model_kwargs, constrained)

    flat = jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), draws)
    values = jax.lax.map(jax.jit(one), flat, batch_size=64)
    return np.asarray(values, np.float64).reshape(-1, len(keep))
