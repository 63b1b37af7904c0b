r"""The verdict at the end of a run: can the kept draws be trusted?

:func:`verdict` judges the draws of a run by what a statistician checks first, and says what
to do where they fail:

- **mixing**: split :math:`\hat R` (Gelman et al. 2013, as ``numpyro.diagnostics``) at most
  :data:`MAX_RHAT` and bulk effective sample size at least :data:`MIN_ESS` in every coordinate
  of every latent site. Where a coordinate fails, the run is predicted to need
  :math:`\max(\mathrm{MIN\_ESS}/\mathrm{ESS}, (\hat R - 1)/0.01)` times as many steps (the
  ESS of a chain in stationarity grows linearly with its length, and :math:`\hat R - 1`
  shrinks about as its inverse; the prediction is a lower bound where the chains have not
  yet reached the posterior's bulk).
- **rejections after warm-up**: steps whose potential, gradient or state was not finite
  (``num_rejected``); a chain that rejects steps is not sampling the target.
- **chains that adapted different steps**: a ratio of the chains' adapted steps above
  :data:`MAX_STEP_SPREAD` (each chain's step holds the bias target where that chain was
  during warm-up, not where the others were).
- **the stationary bias accepted**: the adapted step's predicted inflation of the worst
  direction's variance, ``target_bias`` to first order (:mod:`numpyro_sgrld.adaptation`), and,
  for a kernel whose adaptive metric is not Γ-corrected, that its variances carry the metric's
  stationary bias (:mod:`numpyro_sgrld.correction`) and how to remove it.

:func:`check` runs it on a finished ``MCMC`` and warns. Every ``MCMC.run`` of a
stochastic-gradient kernel ends with it: on the kernels' own sampling loop
(:func:`numpyro_sgrld.enable_fast_sampling_loop`) from the kept draws, on NumPyro's loop from
streaming moments of every post-warm-up step (:mod:`numpyro_sgrld.monitor`).
"""

import warnings
from typing import NamedTuple

import jax
import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

from numpyro_sgrld._traits import trait
from numpyro_sgrld.correction import Lag

__all__ = ["BIASED", "MAX_RHAT", "MAX_STEP_SPREAD", "MIN_ESS", "Verdict", "biased", "check",
           "judgement", "verdict"]

#: The largest split R-hat a trusted run may have (Vehtari et al. 2021 recommend 1.01).
MAX_RHAT = 1.01

#: The smallest bulk effective sample size a trusted run may have, per coordinate (Vehtari et
#: al. 2021: 100 over all chains for a reliable R-hat and posterior means to ~0.1 sd).
MIN_ESS = 100

#: The largest ratio of the chains' adapted steps a trusted run may have: at the curvature
#: where the smallest step was measured, the largest inflates the variance by up to this
#: multiple of ``target_bias`` (4 x 10 % = 40 %, an sd 18 % too wide).
MAX_STEP_SPREAD = 4.0

#: At most this many coordinates are judged (evenly spaced over the flattened draws): the
#: ESS of each costs an FFT over the draws, which for a network of 10^5 weights would take
#: longer than the run.
MAX_COORDINATES = 2000


class Verdict(NamedTuple):
    """The judgement of a run's kept draws.

    - **trusted** – no problem found.
    - **max_rhat**, **min_ess** – the worst split R-hat and bulk ESS over the coordinates
      judged, with the **worst_site** of each (``(name, flat index)``).
    - **rejected** – steps rejected after warm-up (``None``: unknown).
    - **more_steps** – the factor by which the run is predicted to need more steps (1 when
      it mixes).
    - **problems** – one sentence per problem, each with what to do.
    - **notes** – what the run accepted by design (the step's predicted variance inflation,
      an uncorrected adaptive metric's bias), which holds also when it is trusted.
    """

    trusted: bool
    max_rhat: float
    min_ess: float
    worst_rhat_site: tuple
    worst_ess_site: tuple
    rejected: int | None
    more_steps: float
    problems: tuple
    notes: tuple

    def __str__(self):
        head = ("The draws pass the checks" if self.trusted else
                "The draws cannot be trusted")
        body = [f"{head}: max split R-hat {self.max_rhat:.3f} ({self.worst_rhat_site[0]}), "
                f"min bulk ESS {self.min_ess:.0f} ({self.worst_ess_site[0]})."]
        return " ".join(body + list(self.problems) + list(self.notes))


def _coordinates(draws_by_chain):
    """``(name, flat index, array (chains, draws))`` for the judged coordinates."""
    columns = []
    for name, x in draws_by_chain.items():
        x = np.asarray(x)
        if x.ndim < 2 or not np.issubdtype(x.dtype, np.floating):
            continue
        flat = x.reshape(x.shape[0], x.shape[1], -1)
        for j in range(flat.shape[2]):
            columns.append((name, j, flat[:, :, j]))
    if len(columns) > MAX_COORDINATES:
        keep = np.linspace(0, len(columns) - 1, MAX_COORDINATES).round().astype(int)
        columns = [columns[k] for k in np.unique(keep)]
    # judged in float64: float32 sums of tens of thousands of draws of a parameter whose mean
    # is many sds from 0 round off by a sizeable fraction of an sd
    return [(name, j, x.astype(np.float64)) for name, j, x in columns]


def verdict(draws_by_chain, rejected=None, num_steps=None, kernel=None, step_size=None):
    """The :class:`Verdict` of draws grouped by chain (a dict of arrays ``(chains, draws,
    ...)``, as ``mcmc.get_samples(group_by_chain=True)``); ``rejected``, the steps rejected
    after warm-up; ``num_steps``, the steps the draws came from (for the advice); ``kernel``
    and ``step_size`` (per chain) for the notes."""
    columns = _coordinates(draws_by_chain)
    rhats, esss = [], []
    for _, _, x in columns:
        if x.shape[1] < 4 or not np.all(np.isfinite(x)) or not np.ptp(x) > 0:
            rhats.append(np.inf)
            esss.append(0.0)
        else:
            rhats.append(float(split_gelman_rubin(x)))
            esss.append(float(effective_sample_size(x)))
    return judgement(rhats, esss, [(name, j) for name, j, _ in columns], rejected,
                     num_steps, kernel, step_size)


def judgement(rhats, esss, sites, rejected=None, num_steps=None, kernel=None,
              step_size=None):
    """The :class:`Verdict` from each judged coordinate's split R-hat and bulk ESS, with its
    ``sites`` (``(name, flat index)`` each); the other arguments as :func:`verdict`'s."""
    problems, notes = [], []
    max_rhat, min_ess = 1.0, np.inf
    rhat_site = ess_site = ("", 0)
    for r, e, site in zip(rhats, esss, sites):
        if not r <= max_rhat:
            max_rhat, rhat_site = float(r), site
        if not e >= min_ess:
            min_ess, ess_site = float(e), site
    columns = sites
    if not columns:
        min_ess = np.nan
    more = 1.0
    if columns and (max_rhat > MAX_RHAT or min_ess < MIN_ESS):
        # R-hat's excess over 1 shrinks about as 1/ESS (Vehtari et al. 2021)
        more = max(MIN_ESS / max(min_ess, 1.0),
                   (max_rhat - 1.0) / (MAX_RHAT - 1.0) if np.isfinite(max_rhat) else 10.0)
        steps = (f" (num_samples of at least {int(np.ceil(more * num_steps)):,})"
                 if num_steps else "")
        problems.append(
            f"The chains have not mixed: split R-hat {max_rhat:.3g} at {_site(rhat_site)} "
            f"(trusted: <= {MAX_RHAT}) and bulk ESS {min_ess:.0f} at {_site(ess_site)} "
            f"(trusted: >= {MIN_ESS}). Run about {more:.1f}x as many steps{steps}, or use "
            "more chains; where even that does not mix (a hierarchical model's funnel), a "
            "non-centred parametrisation of the scale parameters usually does "
            "(numpyro.infer.reparam.LocScaleReparam), or compare against NUTS on "
            "full_batch(model)."
        )
    if rejected:
        problems.append(
            f"{rejected} steps after warm-up were rejected (non-finite potential, gradient or "
            "state): the step is too large somewhere the chains went, or the model is not "
            "finite there. Give a smaller step_size, or a longer warm-up."
        )
    spread = _step_spread(kernel, step_size)
    if spread > MAX_STEP_SPREAD:
        problems.append(
            f"The chains adapted steps {spread:.1f}x apart: each chain's warm-up measured the "
            "curvature and gradient noise where it was, and the chains were in regions that "
            f"differ that much (a hierarchical model's funnel, or chains not yet in the bulk). "
            f"Where the chain with the smallest step measured, the largest step inflates the "
            f"variance by up to {spread:.0f}x the bias target. Use a longer num_warmup (the "
            "chains then adapt in the bulk), a non-centred parametrisation of the scales, or a "
            "smaller common step_size."
        )
    if kernel is not None:
        notes.extend(_notes(kernel, step_size))
    trusted = not problems and bool(columns)
    if not columns:
        problems.append("No floating-point draws to judge.")
    return Verdict(trusted, max_rhat, min_ess, rhat_site, ess_site, rejected, more,
                   tuple(problems), tuple(notes))


def _step_spread(kernel, step_size):
    """The ratio of the largest to the smallest chain's adapted step (1 with a given step)."""
    if step_size is None or not getattr(kernel, "adapts_step_size", False):
        return 1.0
    h = np.asarray(step_size, np.float64).ravel()
    h = h[np.isfinite(h) & (h > 0)]
    return float(h.max() / h.min()) if h.size > 1 else 1.0


def _site(site):
    name, j = site
    return f"{name!r}[{j}]"


#: Metrics that follow the gradients without a moving average (``decay``), whose Γ is not zero.
ADAPTIVE_METRICS = ("monge", "shampoo")

#: The words every note on a kernel's stationary bias carries (the loops warn on them).
BIASED = "stationary bias"


def biased(v):
    """Whether the :class:`Verdict` names a stationary bias the kernel does not correct."""
    return any(BIASED in n for n in v.notes)


def _notes(kernel, step_size):
    notes = []
    metric = getattr(kernel, "metric", None)
    integrator = getattr(kernel, "integrator", None)
    if (metric is not None and (trait(metric, Lag) is not None
                                or metric.name in ADAPTIVE_METRICS)
            and getattr(kernel, "correction", None) is None):
        notes.append(
            f"The metric {metric.name!r} adapts to the gradients and is not Γ-corrected: even "
            f"at small steps its draws follow p(θ)/D(θ), not the posterior ({BIASED}, "
            "docs/bias.md). Use correction='exact' (small models) or 'hutchinson', or a "
            "kernel with a constant preconditioner learnt in warm-up (SGLD, SGHMC)."
        )
    elif metric is not None and metric.name == "wenzel":
        notes.append(
            "The layer-wise metric 'wenzel' is refreshed from the gradients while sampling: "
            f"between refreshes it is constant, but its refreshes follow the chain, and no Γ "
            f"correction exists for it ({BIASED} unmeasured here, docs/bias.md). For exact "
            "variances use SGLD or SGHMC (a constant preconditioner learnt in warm-up)."
        )
    if integrator is not None and integrator.name == "adaptive_drift":
        notes.append(
            "The adaptive drift (AdamSGLD) changes the chain's stationary law and has no "
            f"Γ-type correction ({BIASED}, Rensmeyer & Niggemann 2023, docs/bias.md). For exact "
            "variances use SGLD or SGHMC (a constant preconditioner learnt in warm-up)."
        )
    if getattr(kernel, "adapts_step_size", False) and step_size is not None:
        bias = getattr(kernel, "target_bias", None)
        if bias is not None:
            notes.append(
                f"The adapted step (median {float(np.median(step_size)):.3g}) inflates the "
                f"worst direction's variance by about {100 * bias:.0f} % (target_bias="
                f"{bias}); a smaller target_bias is more exact and mixes more slowly."
            )
    return notes


def check(mcmc, warn=True):
    """The :class:`Verdict` of a finished ``numpyro.infer.MCMC`` run of any kernel (warns
    with it when the draws cannot be trusted or carry a stationary bias the kernel does not
    correct, and ``warn``)."""
    draws = mcmc.get_samples(group_by_chain=True)
    state = mcmc.last_state
    kernel = mcmc.sampler
    rejected = None
    fields = {}
    try:
        fields = mcmc.get_extra_fields(group_by_chain=True)
    except (AttributeError, KeyError, TypeError):
        pass
    if "diverging" in fields:
        rejected = int(np.sum(np.asarray(fields["diverging"])))
    v = verdict(draws, rejected, mcmc.num_samples, kernel,
                getattr(state, "step_size", None))
    if warn and (not v.trusted or biased(v)):
        warnings.warn(str(v), UserWarning, stacklevel=2)
    return v


def _leaves_by_chain(tree, chain_axis):
    """A dict of site arrays ``(chains, draws, ...)`` from collected draws whose chain axis
    is ``chain_axis`` (``None``: one chain)."""
    out = {}
    for name, x in (tree.items() if isinstance(tree, dict) else
                    enumerate(jax.tree.leaves(tree))):
        x = np.asarray(x)
        out[name] = x[None] if chain_axis is None else np.swapaxes(x, 0, chain_axis)
    return out
