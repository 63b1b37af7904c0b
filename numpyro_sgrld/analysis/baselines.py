r"""Non-stochastic-gradient-MCMC baselines on the same NumPyro model, for ``sgrld compare``.

- **MALA**, the Metropolis-adjusted Langevin algorithm (:func:`mala_kernel`): NumPyro's
  ``HMC`` with one leapfrog step per proposal and the Metropolis–Hastings test, on the **full
  data** (``full_batch(model)``; one leapfrog step from a fresh momentum is the
  Langevin proposal :math:`\theta' = \theta - \tfrac{\epsilon^2}2\nabla U + \epsilon\xi`). Its
  step is adapted by NumPyro's dual averaging during warm-up to an acceptance rate of 0.574,
  MALA's optimum (Roberts & Rosenthal 1998). Exact (no bias) and full-data: the baseline that
  stochastic gradients trade exactness against.
- **Bayes by Backprop** (:func:`bayes_by_backprop`; Blundell et al. 2015): variational
  inference with a mean-field normal guide (NumPyro's ``AutoNormal``, in the unconstrained
  space) fitted by the reparametrised minibatch ELBO (``SVI`` with ``Trace_ELBO`` on the
  subsampled model, Adam, its rate decaying from 1e-2 to 1e-4). Its "draws" are independent
  draws of the fitted normal: its error against the reference is the mean-field
  approximation's (and the optimiser's), not Monte Carlo error.
- **Constant SGD as approximate inference** (:func:`constant_sgd`; Mandt, Hoffman & Blei 2017,
  "Stochastic gradient descent as approximate Bayesian inference", Theorem 1): the iterates of
  plain SGD at the constant learning rate that minimises the KL divergence between their
  stationary Gaussian and the posterior, :math:`\epsilon^* = 2\,(S/N)\,d/\mathrm{tr}(C)` for the
  mean loss :math:`-\frac1N\log p(\theta\mid x)`, :math:`S` the minibatch size and :math:`C` the
  covariance of one data point's gradient at the mode. On our potential :math:`U = N\times` the
  mean loss the step is :math:`h = \epsilon^*/N = 2Sd/(N^2\,\mathrm{tr}\,C)`. The mode comes
  from ``SVI`` with an ``AutoDelta`` guide (MAP); :math:`\mathrm{tr}\,C` from the spread of
  minibatch gradients there, :math:`\mathrm{tr}\,\mathrm{Cov}[\nabla\hat U_B] = (N^2/S)\,
  \mathrm{tr}\,C` (minibatches drawn with replacement). The iterates run as
  ``SGLD(model, h, temperature=0)``, started at the mode.
"""

import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.infer import HMC, MCMC, SVI, Trace_ELBO, init_to_value
from numpyro.infer.autoguide import AutoDelta, AutoNormal
from numpyro.optim import Adam

from numpyro_sgrld.data.subsample import draw_indices, find_subsample_plates, full_batch
from numpyro_sgrld.presets.table import SGLD
from numpyro_sgrld.sampler.potentials import minibatch_potential

__all__ = ["mala_kernel", "run_mala", "bayes_by_backprop", "constant_sgd", "mandt_step_size",
           "find_map", "MALA_EXTRA_FIELDS"]

#: MALA's optimal acceptance rate (Roberts & Rosenthal 1998), the dual-averaging target.
MALA_ACCEPT = 0.574

#: Extra fields recorded for the MALA baseline (ArviZ's names: diverging, step_size,
#: acceptance_rate, lp).
MALA_EXTRA_FIELDS = ("diverging", "adapt_state.step_size", "accept_prob", "potential_energy")


def mala_kernel(model, init_strategy=None):
    """The Metropolis-adjusted Langevin algorithm (MALA): NumPyro's ``HMC`` with one leapfrog
    step, on the full data, step adapted during warm-up, no mass matrix adaptation."""
    kwargs = {} if init_strategy is None else {"init_strategy": init_strategy}
    return HMC(full_batch(model), num_steps=1, trajectory_length=None, adapt_step_size=True,
               adapt_mass_matrix=False, target_accept_prob=MALA_ACCEPT, **kwargs)


def decaying(learning_rate, final_rate, num_steps):
    """Adam's learning rate decaying geometrically from ``learning_rate`` to ``final_rate``
    over ``num_steps``: a constant rate leaves the final iterate jittering by about the rate,
    which for a concentrated posterior is a posterior sd or more."""
    ratio = final_rate / learning_rate

    def schedule(i):
        return learning_rate * ratio ** (jnp.minimum(i, num_steps) / max(num_steps - 1, 1))

    return schedule


def bayes_by_backprop(model, args, num_steps=20_000, learning_rate=1e-2, num_chains=4,
                      num_draws=1000, seed=0, init_scale=0.01, final_rate=1e-4):
    """Fit a mean-field normal guide by SVI on the (subsampled) model, Adam's rate decaying
    from ``learning_rate`` to ``final_rate`` (:func:`decaying`); returns ``(draws,
    info)``: ``draws`` ``{site: (num_chains, num_draws, ...)}`` independent draws of the fitted
    guide (constrained), ``info`` the final ELBO loss, its mean over the last tenth of the
    steps and the first tenth (a crude convergence check), and the seconds taken."""
    guide = AutoNormal(model, init_scale=init_scale)
    svi = SVI(model, guide, Adam(decaying(learning_rate, final_rate, num_steps)), Trace_ELBO())
    start = time.perf_counter()
    result = svi.run(random.PRNGKey(seed), num_steps, *args, progress_bar=False)
    losses = np.asarray(result.losses)
    draws = guide.sample_posterior(random.PRNGKey(seed + 1), result.params,
                                   sample_shape=(num_chains, num_draws))
    draws = jax.block_until_ready(draws)
    seconds = time.perf_counter() - start
    tenth = max(1, num_steps // 10)
    info = dict(loss_last_tenth=float(np.mean(losses[-tenth:])),
                loss_first_tenth=float(np.mean(losses[:tenth])), seconds=seconds,
                finite=bool(np.all(np.isfinite(losses[-tenth:]))))
    return {k: np.asarray(v) for k, v in draws.items()}, info


def find_map(model, args, num_steps=5000, learning_rate=1e-2, seed=0, final_rate=1e-4):
    """The posterior mode (constrained values), by SVI with an ``AutoDelta`` guide on the
    subsampled model (minibatch gradients, Adam with a decaying rate, :func:`decaying`)."""
    guide = AutoDelta(model)
    svi = SVI(model, guide, Adam(decaying(learning_rate, final_rate, num_steps)), Trace_ELBO())
    result = svi.run(random.PRNGKey(seed), num_steps, *args, progress_bar=False)
    return guide.median(result.params)


def mandt_step_size(model, args, z, num_batches=200, seed=0):
    r"""Mandt et al.'s KL-optimal constant step on our potential, :math:`h = 2Sd/(N^2
    \mathrm{tr}\,C)`, with :math:`\mathrm{tr}\,C = (S/N^2)\,\mathrm{tr}\,\mathrm{Cov}
    [\nabla\hat U_B(z)]` estimated from ``num_batches`` minibatch gradients at the
    unconstrained point ``z`` (the mode). ``S`` and ``N`` are those of the model's largest
    subsample plate (a model without one has no gradient noise: refused). Returns ``(h,
    trace_c)``."""
    plates = find_subsample_plates(model, args)
    if not plates:
        raise ValueError(
            "constant SGD as approximate inference (Mandt et al. 2017) needs a subsampled "
            "model: its learning rate is set by the minibatch gradient noise, and the model "
            "has no `numpyro.plate(..., subsample_size=n)` with n < N."
        )
    largest = max(plates, key=lambda p: p.size)
    N, S = largest.size, largest.subsample_size
    potential = minibatch_potential(model, args)

    def flat_grad(key):
        g = jax.grad(potential)(z, draw_indices(key, plates, None)[0])
        return jnp.concatenate([jnp.ravel(v) for v in jax.tree.leaves(g)])

    grads = np.asarray(jax.vmap(flat_grad)(random.split(random.PRNGKey(seed), num_batches)),
                       np.float64)
    trace_c = float(np.sum(np.var(grads, axis=0, ddof=1))) * S / N**2
    d = grads.shape[1]
    return 2.0 * S * d / (N**2 * trace_c), trace_c


def constant_sgd(model, args, num_map_steps=5000, seed=0, init_strategy=None):
    """Constant SGD's kernel: ``(kernel, h, trace_c)``, ``SGLD(model, h, temperature=0)``
    started at the MAP (:func:`find_map`) with Mandt et al.'s step (:func:`mandt_step_size`)."""
    mode = find_map(model, args, num_map_steps, seed=seed)
    start = init_to_value(values=mode)
    probe = SGLD(model, 1.0, temperature=0.0, init_strategy=start)
    state = probe.init(random.PRNGKey(seed), 0, None, args, {})
    h, trace_c = mandt_step_size(model, args, state.z, seed=seed)
    if not (np.isfinite(h) and h > 0):
        raise ValueError(
            f"constant SGD: the gradient-noise trace at the mode is {trace_c!r}, so Mandt et "
            "al.'s step is not a finite positive number; the model's minibatch gradients do "
            "not vary there."
        )
    return SGLD(model, h, temperature=0.0, init_strategy=start), h, trace_c


def run_mala(model, args, num_warmup, num_samples, thinning, num_chains, seed,
             init_strategy=None):
    """A plain run of :func:`mala_kernel` (vectorised chains); returns the ``MCMC``."""
    mcmc = MCMC(mala_kernel(model, init_strategy), num_warmup=num_warmup,
                num_samples=num_samples, thinning=thinning, num_chains=num_chains,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(random.PRNGKey(seed), *args, extra_fields=MALA_EXTRA_FIELDS)
    return mcmc


#: The same as :func:`mala_kernel`, :func:`run_mala` and :data:`MALA_EXTRA_FIELDS`, under the
#: name Langevin Monte Carlo (LMC).
lmc_kernel, run_lmc, LMC_EXTRA_FIELDS = mala_kernel, run_mala, MALA_EXTRA_FIELDS
