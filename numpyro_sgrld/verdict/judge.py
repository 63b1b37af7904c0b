r"""The verdict at the end of a run: can the kept draws be trusted?

:func:`verdict` judges the draws of a run by what a statistician checks first, and says what
to do where they fail:

- **mixing**: split :math:`\hat R` (Gelman et al. 2013, as ``numpyro.diagnostics``) and bulk
  effective sample size in every coordinate of every latent site. A coordinate fails where
  its :math:`\hat R` is above both :func:`max_rhat` (the accuracy promise) and
  :func:`rhat_noise` (what a mixed run of its ESS shows by chance, at a family error of 1 %
  over the coordinates, as the equipartition check), or where its ESS is below
  :data:`MIN_ESS`. Where a
  coordinate fails, the run is predicted to need
  :math:`\max(\mathrm{MIN\_ESS}/\mathrm{ESS}, (\hat R - 1)/(\text{bound} - 1))` times as
  many steps (the ESS of a chain in stationarity grows linearly with its length, and
  :math:`\hat R - 1` shrinks about as its inverse; the prediction is a lower bound where the
  chains have not yet reached the posterior's bulk). Where the draws do not change within a
  chain at some coordinates (:math:`\hat R` not finite), the chains stopped: that is named
  instead (:func:`stopped_problem`), since more steps do not move them.
- **rejections after warm-up**: steps whose potential, gradient or state was not finite
  (``num_rejected``); a chain that rejects steps is not sampling the target.
- **chains that adapted different steps**: a ratio of the chains' adapted steps above
  :data:`MAX_STEP_SPREAD` (each chain's step holds the bias target where that chain was
  during warm-up, not where the others were), where no equipartition readings say otherwise:
  with them, each chain's own readings judge whether its step inflated its law.
- **the posterior's spread**: the equipartition check (:mod:`numpyro_sgrld.core.equipartition`),
  every reading within :data:`~numpyro_sgrld.core.equipartition.BAND` or within its noise: a chain
  that mixes well but samples a law too wide or too narrow (a step too large, an adaptive
  metric's uncorrected Γ, a thermostat) fails here, whatever the kernel, and the advice fits
  the kernel. No kernel is warned about for what it is: only for what its run measured.
  A reading of :data:`RUNAWAY_READING` or more is the first problem named, before the
  chains' mixing.
- **the stationary bias accepted** (a note, not a warning): the adapted step's predicted
  inflation of the worst direction's variance, ``target_bias`` to first order
  (:mod:`numpyro_sgrld.warmup.adaptation`).

:func:`check` runs it on a finished ``MCMC`` and warns. Every ``MCMC.run`` of a
stochastic-gradient kernel ends with it: on the kernels' own sampling loop
(:func:`numpyro_sgrld.enable_fast_sampling_loop`) from the kept draws, on NumPyro's loop from
streaming moments of every post-warm-up step (:mod:`numpyro_sgrld.verdict.monitor`).
"""

import warnings
from typing import Any, NamedTuple

import jax
import numpy as np
from numpyro.diagnostics import effective_sample_size, split_gelman_rubin

from numpyro_sgrld.core import equipartition
from numpyro_sgrld.verdict import evaluation
from numpyro_sgrld.verdict.advice import (
    cold_network_note,
    kernel_notes,
    mixing_advice,
    network_mixing_advice,
    network_note,
    network_readings,
    site_name,
    temperature_problem,
    thermostat_of,
    thermostat_relaxation,
)
from numpyro_sgrld.verdict.run import describe
from numpyro_sgrld.verdict.step_rejections import median_step, step_rejection_problem

__all__ = ["temperatures_of", "MAX_RHAT", "MAX_STEP_SPREAD", "MEAN_ERROR", "MIN_ESS",
           "RUNAWAY_READING", "Verdict", "stopped_problem",
           "capped_ess", "check", "judgement", "leaves_by_chain", "max_rhat", "rhat_noise",
           "thermostat_of", "thermostat_relaxation", "verdict"]

#: The largest split R-hat a trusted run of one chain may have (Vehtari et al. 2021 recommend
#: 1.01); with more chains :func:`max_rhat`.
MAX_RHAT = 1.01

#: The project's accuracy promise for posterior means, in posterior sds: the bound of
#: :func:`max_rhat` keeps the chains' disagreement within it at two standard errors.
MEAN_ERROR = 0.15

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

#: An equipartition reading at least this far above 1 (draws about 3.2x the posterior's sd or
#: wider) leads the verdict's problems, before the chains' mixing: chains whose law is that
#: far off (a run away, a step far too large) are not mixed by more steps.
RUNAWAY_READING = 10.0


class Verdict(NamedTuple):
    """The judgement of a run's kept draws.

    - **trusted** – no problem found.
    - **max_rhat**, **min_ess** – the worst split R-hat and bulk ESS over the coordinates
      judged, with the **worst_site** of each (``(name, flat index)``).
    - **rejected** – steps rejected after warm-up (``None``: unknown).
    - **more_steps** – the factor by which the run is predicted to need more steps (1 when
      it mixes).
    - **problems** – one sentence per problem, each with what to do.
    - **notes** – what the run accepted by design (the adapted step's predicted variance
      inflation), which holds also when it is trusted.
    - **temperatures** – the equipartition check's readings
      (:class:`~numpyro_sgrld.core.equipartition.Temperatures`; ``None`` where the run has none).
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
    temperatures: Any = None

    def __str__(self):
        head = ("The draws pass the checks" if self.trusted else
                "The draws cannot be trusted")
        t = self.temperatures
        reading = ("" if t is None else
                   f", equipartition T = {t.overall:.3f} ± {t.overall_se:.3f}")
        body = [f"{head}: max split R-hat {self.max_rhat:.3f} ({self.worst_rhat_site[0]}), "
                f"min bulk ESS {np.floor(self.min_ess):.0f} ({self.worst_ess_site[0]}){reading}."]
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


def verdict(draws_by_chain, rejected=None, num_steps=None, kernel=None, step_size=None,
            temperatures=None, thermostat=None, network_sites=None, composed=None):
    """The :class:`Verdict` of draws grouped by chain (a dict of arrays ``(chains, draws,
    ...)``, as ``mcmc.get_samples(group_by_chain=True)``); ``rejected``, the steps rejected
    after warm-up; ``num_steps``, the steps the draws came from (for the advice); ``kernel``
    and ``step_size`` (per chain) for the notes; ``temperatures``, the run's equipartition
    readings (:func:`numpyro_sgrld.core.equipartition.summarize`); ``thermostat``, the chains'
    last thermostat values (:func:`thermostat_of`); ``network_sites``, the sites a network
    bridge sampled (judged in function space: their R-hat is information, and a site
    :data:`numpyro_sgrld.verdict.evaluation.NAME` of the draws, the log-likelihood of a fixed
    evaluation batch, is judged instead); ``composed``, what a composing kernel kept for its
    own check (:attr:`~numpyro_sgrld.verdict.run.Run.composed_check`)."""
    columns = _coordinates(draws_by_chain)
    rhats, esss, centring = [], [], []
    for _, _, x in columns:
        if x.shape[1] < 4 or not np.all(np.isfinite(x)) or not np.ptp(x) > 0:
            rhats.append(np.inf)
            esss.append(0.0)
            centring.append(np.nan)
        else:
            rhats.append(float(split_gelman_rubin(x)))
            esss.append(capped_ess(float(effective_sample_size(x)), x.size))
            centring.append(float(equipartition.centring_factor(
                x.mean(1)[:, None], x.var(1, ddof=1)[:, None])[0]) if x.shape[0] > 1
                else np.nan)
    chains = columns[0][2].shape[0] if columns else 1
    return judgement(rhats, esss, [(name, j) for name, j, _ in columns], rejected,
                     num_steps, kernel, step_size, temperatures, chains, thermostat,
                     network_sites, centring, composed)


def max_rhat(num_chains=1):
    r"""The largest split :math:`\hat R` a trusted run of ``num_chains`` chains may have.

    Split :math:`\hat R^2 - 1` is about the variance of the :math:`m = 2C` half-chains' means
    over the posterior variance; their disagreement puts an error of about
    :math:`\sigma\sqrt{(\hat R^2 - 1)/m}` into the pooled mean. Keeping that within the
    promise at two standard errors, :math:`\mathrm{MEAN\_ERROR}/2`, gives
    :math:`\hat R \le \sqrt{1 + m\,(\mathrm{MEAN\_ERROR}/2)^2}`: 1.022 for 4 chains, and never
    less than :data:`MAX_RHAT`."""
    m = 2 * max(int(num_chains or 1), 1)
    return max(MAX_RHAT, float(np.sqrt(1 + m * (MEAN_ERROR / 2) ** 2)))


def capped_ess(ess, total):
    r"""A bulk ESS estimate of ``total`` draws as ArviZ caps it: the autocorrelation time
    :math:`\hat\tau = \mathrm{total}/\mathrm{ESS}` at least :math:`1/\log_{10}(\mathrm{total})`.
    Geyer's initial sequence gives :math:`\hat\tau < 0` (a negative ESS) where lag-1
    autocorrelations are below :math:`-1/2`, as in an underdamped chain whose oscillations
    alias with the lags; that is read as the cap."""
    cap = total * np.log10(max(total, 10))
    ess = np.asarray(ess, np.float64)
    capped = np.where(np.isnan(ess) | ((ess > 0) & (ess <= cap)), ess, cap)
    return capped if capped.ndim else float(capped)


def rhat_noise(ess, num_chains=1, num_tests=1):
    r"""The split :math:`\hat R` that a mixed run of ``num_chains`` chains with bulk ESS
    ``ess`` exceeds by chance with probability :data:`~numpyro_sgrld.core.equipartition.
    FAMILY_ERROR` over ``num_tests`` coordinates (Bonferroni). The :math:`m = 2C` half-chains'
    means each have variance :math:`\sigma^2 m/\mathrm{ESS}`, so :math:`\hat R^2 - 1
    \approx (m/\mathrm{ESS})\,\chi^2_{m-1}/(m - 1)`."""
    from scipy.stats import chi2

    m = 2 * max(int(num_chains or 1), 1)
    q = chi2.ppf(1 - equipartition.FAMILY_ERROR / max(num_tests, 1), m - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.sqrt(1 + m * q / ((m - 1) * max(float(ess), 1e-12))))


def more_steps(more, steps, min_ess, num_chains):
    """The advice on the run's length: ``more`` times its steps (``steps``: the num_samples
    that makes, as text). The factor assumes the effective draws grow in proportion to the
    steps; below one effective draw per chain that is untested by the run (the chains may not
    yet have crossed the posterior once), so the factor is a floor: a unit-wise horseshoe
    network's scales read ESS 2 after 22,000 steps a chain and 4 after 202,000
    (docs/benchmarks.md)."""
    if min_ess >= num_chains:
        return f"Run about {more:.1f}x as many steps{steps}"
    return (f"Run at least {more:.1f}x as many steps{steps}, probably far more: with fewer "
            f"effective draws than chains ({np.floor(min_ess):.0f} of {num_chains}) the run "
            f"cannot tell how they grow with the steps")


def judgement(rhats, esss, sites, rejected=None, num_steps=None, kernel=None,
              step_size=None, temperatures=None, num_chains=1, thermostat=None,
              network_sites=None, centring=None, composed=None):
    """The :class:`Verdict` from each judged coordinate's split R-hat and bulk ESS, with its
    ``sites`` (``(name, flat index)`` each); ``centring``, each coordinate's
    :func:`~numpyro_sgrld.core.equipartition.centring_factor` (several chains); ``composed``,
    what a composing kernel kept, judged by its ``composed_check`` with the readings; the other
    arguments as :func:`verdict`'s (``kernel`` a kernel or its
    :class:`~numpyro_sgrld.verdict.run.Run`)."""
    run = describe(kernel)
    problems, notes = [], []
    network = frozenset(network_sites or ())
    centring = [np.nan] * len(sites) if centring is None else list(centring)
    if network:
        rows = list(zip(rhats, esss, sites, centring))
        weights = [row[:3] for row in rows if row[2][0] in network]
        kept = [row for row in rows if row[2][0] not in network]
        rhats, esss, sites, centring = ([list(x) for x in zip(*kept)] if kept
                                        else ([], [], [], []))
        notes.append(network_note(weights, num_chains,
                                   evaluation.NAME in {s[0] for s in sites}))
    max_rhat_, min_ess = -np.inf, np.inf
    rhat_site = ess_site = ("", 0)
    for r, e, site in zip(rhats, esss, sites):
        if not r <= max_rhat_:
            max_rhat_, rhat_site = float(r), site
        if not e >= min_ess:
            min_ess, ess_site = float(e), site
    columns = sites
    if not columns:
        max_rhat_ = min_ess = np.nan
    more = 1.0
    bound = max_rhat(num_chains)
    # a coordinate fails where its R-hat is beyond the promise's bound and beyond what a
    # mixed run of its ESS shows by chance, or where its ESS is below MIN_ESS
    rhat_fail = [(float(r), site, max(bound, rhat_noise(e, num_chains, len(sites))))
                 for r, e, site in zip(rhats, esss, sites)
                 if not r <= max(bound, rhat_noise(e, num_chains, len(sites)))]
    ess_fail = [(float(e), site) for e, site in zip(esss, sites) if not e >= MIN_ESS]
    if columns and (rhat_fail or ess_fail):
        worst_r = max(rhat_fail, key=lambda f: f[0], default=None)
        worst_e = min(ess_fail, key=lambda f: f[0], default=None)
        # R-hat's excess over 1 shrinks about as 1/ESS (Vehtari et al. 2021)
        more = max(MIN_ESS / max(worst_e[0], 1.0) if worst_e else 1.0,
                   ((worst_r[0] - 1.0) / (worst_r[2] - 1.0) if np.isfinite(worst_r[0])
                    else 10.0) if worst_r else 1.0)
        steps = (f" (num_samples of at least {int(np.ceil(more * num_steps)):,})"
                 if num_steps else "")
        failed = []
        if worst_r:
            failed.append(f"split R-hat {worst_r[0]:.3g} at {site_name(worst_r[1])} " + (
                f"(trusted: <= {worst_r[2]:.3f} with {num_chains} chain"
                f"{'s' if num_chains != 1 else ''} at its ESS)" if np.isfinite(worst_r[0])
                else "(the draws there do not change within a chain)"))
        if worst_e:
            failed.append(f"bulk ESS {np.floor(worst_e[0]):.0f} at {site_name(worst_e[1])} "
                          f"(trusted: >= {MIN_ESS})")
        # chains that stopped are named instead of their mixing: more steps do not move
        # them (where steps were rejected, the rejections below are why)
        stopped = [(r, site) for r, site in zip(rhats, sites) if not np.isfinite(r)]
        problems.append(
            stopped_problem(stopped, step_size, run) if stopped and not rejected else
            f"The chains have not mixed: {' and '.join(failed)}. "
            f"{more_steps(more, steps, min_ess, num_chains)}, or use more chains. "
            + (network_mixing_advice(num_chains, run) if network else mixing_advice(run))
        )
    if rejected:
        # a chosen step that froze the chains is named instead of their mixing: more steps
        # of a chain that does not move do not mix it
        frozen = step_rejection_problem(run, step_size, rejected, num_steps, num_chains)
        if frozen is not None:
            problems[:] = [frozen] + [p for p in problems
                                      if not p.startswith("The chains have not mixed")]
        else:
            problems.append(
                f"{rejected} steps after warm-up were rejected (non-finite potential, gradient "
                "or state): the step is too large somewhere the chains went, or the model is "
                "not finite there. Give a smaller step_size, or a longer warm-up."
            )
    temperatures = equipartition.decentred(
        temperatures, _centring(centring, esss, num_chains,
                                mixed=not rhat_fail and not ess_fail),
        _ess_per_chain(esss, num_chains))
    departed = [] if temperatures is None else equipartition.departures(temperatures)
    if network and departed:
        departed, cold = network_readings(departed, network, run.judged_name)
        if cold:
            notes.append(cold_network_note(cold, run.warmup_advice))
    spread = _step_spread(run, step_size)
    if spread > MAX_STEP_SPREAD and temperatures is not None and not departed:
        # measured: each chain's readings say whether its own step inflated its law
        notes.append(
            f"The chains adapted steps {spread:.1f}x apart: each chain's warm-up measured the "
            "curvature and gradient noise where it was, and each step is in the units of its "
            "own chain's learnt preconditioner, so the numbers are not comparable across "
            "chains. Each chain's own equipartition readings are within the band: every chain "
            "samples the posterior's spread at its step, and the chains differ in how far they "
            "move per step (ESS per step), not in the law they sample. To reuse a step, reuse "
            "its chain's learnt settings as a whole, not the number alone.")
    elif spread > MAX_STEP_SPREAD:
        problems.append(
            f"The chains adapted steps {spread:.1f}x apart: each chain's warm-up measured the "
            "curvature and gradient noise where it was, and the chains were in regions that "
            f"differ that much (a hierarchical model's funnel, or chains not yet in the bulk). "
            f"Where the chain with the smallest step measured, the largest step inflates the "
            f"variance by up to {spread:.0f}x the bias target. Use a longer num_warmup (the "
            "chains then adapt in the bulk), a non-centred parametrisation of the scales, or a "
            "smaller common step_size."
        )
    if departed:
        problem = temperature_problem(departed, temperatures, run,
                                      _duration(step_size, num_steps), thermostat)
        if max(value for _, value, _ in departed) >= RUNAWAY_READING:
            problems.insert(0, problem)  # more steps do not mix chains that ran away
        else:
            problems.append(problem)
    if run.composed_check is not None and composed is not None and not (rhat_fail or ess_fail):
        # judged on mixed chains only: unmixed moments say little, and more steps come first
        problems.extend(run.composed_check(composed, temperatures, run=run, bound=MEAN_ERROR))
    if run.given:
        notes.extend(kernel_notes(run, step_size))
    trusted = not problems and (bool(columns) or bool(network))
    if not columns and not network:
        problems.append("No floating-point draws to judge.")
    return Verdict(trusted, max_rhat_, min_ess, rhat_site, ess_site, rejected, more,
                   tuple(problems), tuple(notes), temperatures)


def stopped_problem(stopped, step_size, run):
    """The problem where the chains' draws do not change at all after warm-up at some
    coordinates (``stopped``: ``(split R-hat, site)`` of each, the R-hat not finite: no
    spread within a chain), with the chains' adapted ``step_size``."""
    r, site = stopped[0]
    others = (f" and {len(stopped) - 1:,} more coordinate{'s' if len(stopped) > 2 else ''}"
              if len(stopped) > 1 else "")
    h = median_step(step_size)
    at = "" if h is None else f" at a step of {h:.3g}"
    hint = f" {run.mixing_hint}." if run.mixing_hint else ""
    lead = (f"The chains stopped: after warm-up the draws at {site_name(site)}{others} do not "
            f"change within a chain (split R-hat {r:.3g}){at}. More steps do not move a chain "
            "that stopped: ")
    if run.adapts_step_size is False:  # a given step, or learnt settings' step
        return (f"{lead}its step moves nothing where it stands (a step too small for the "
                "values, or values beyond single precision). Give a larger step_size, or leave "
                f"step_size=None (the step is chosen in warm-up).{hint}")
    return (f"{lead}warm-up left it where its step moves nothing (a scale or weights run far "
            "from the posterior's bulk, saturated units, values beyond single precision). "
            "Look at the warm-up's draws (MCMC.warmup(..., collect_warmup=True)) for where it "
            f"went, and change what took it there or start it elsewhere (init_params).{hint}")


def _centring(centring, esss, num_chains, mixed):
    r"""The factor that undoes each chain's centring on its own mean
    (:func:`~numpyro_sgrld.core.equipartition.decentred`): with several chains that agree (their
    R-hat within its noise and every ESS at least ``MIN_ESS``), the median of the
    coordinates' factors from the spread of the chains' means; with one chain,
    :math:`1/(1 - 1/\mathrm{ESS})` at its median ESS; with chains that disagree, none (the
    spread of their means is not the centring's, and their R-hat says so, or their ESS: at an
    ESS of a few the R-hat's noise bound passes chains far apart)."""
    finite = [c for c in centring if np.isfinite(c)]
    if num_chains > 1:
        return float(np.median(finite)) if finite and mixed else 1.0
    ess = _ess_per_chain(esss, 1)
    return 1.0 / (1.0 - 1.0 / ess) if ess is not None and ess > 2 else 1.0


def _ess_per_chain(esss, num_chains):
    """The chains' typical effective sample size: the median bulk ESS of the judged
    coordinates over the number of chains (``None`` without one)."""
    finite = [e for e in esss if np.isfinite(e) and e > 0]
    return float(np.median(finite)) / max(int(num_chains or 1), 1) if finite else None


def _step_spread(run, step_size):
    """The ratio of the largest to the smallest chain's adapted step (1 with a given step)."""
    if step_size is None or not run.adapts_step_size:
        return 1.0
    h = np.asarray(step_size, np.float64).ravel()
    h = h[np.isfinite(h) & (h > 0)]
    return float(h.max() / h.min()) if h.size > 1 else 1.0


def _duration(step_size, num_steps):
    """The sampling phase's length in time units, :math:`h` × steps (``None``: unknown)."""
    if step_size is None or not num_steps:
        return None
    h = np.asarray(step_size, np.float64).ravel()
    h = h[np.isfinite(h) & (h > 0)]
    return float(np.median(h) * num_steps) if h.size else None


def check(mcmc, warn=True):
    """The :class:`Verdict` of a finished ``numpyro.infer.MCMC`` run of any kernel (warns
    with it when the draws cannot be trusted, and ``warn``). A stochastic-gradient kernel's
    run is judged by its equipartition readings too (:func:`temperatures_of`)."""
    draws = mcmc.get_samples(group_by_chain=True)
    state = mcmc.last_state
    run = describe(mcmc.sampler)
    rejected = None
    fields = {}
    try:
        fields = mcmc.get_extra_fields(group_by_chain=True)
    except (AttributeError, KeyError, TypeError):
        pass
    if "diverging" in fields:
        rejected = int(np.sum(np.asarray(fields["diverging"])))
    draws = with_evaluation(draws, run, constrained=True)
    v = verdict(draws, rejected, mcmc.num_samples, run,
                getattr(state, "step_size", None), temperatures_of(state, run),
                thermostat_of(state), run.network_sites,
                getattr(getattr(state, "monitor", None), "composed", None))
    if warn and not v.trusted:
        warnings.warn(str(v), UserWarning, stacklevel=2)
    return v


def with_evaluation(draws, kernel, constrained):
    """``draws`` (grouped by chain) with a network's evaluation batch log-likelihood at
    them as the site :data:`numpyro_sgrld.verdict.evaluation.NAME` (unchanged for any other
    kernel's model, or without the model's arguments); ``kernel``: a kernel or its
    :class:`~numpyro_sgrld.verdict.run.Run`."""
    run = describe(kernel)
    setup, args = run.setup, run.model_args
    loglik = getattr(setup, "evaluation", None)
    if loglik is None or args is None or not draws:
        return draws
    latent = {k: v for k, v in draws.items() if k in setup.inv_transforms}
    values = evaluation.loglik_of_draws(loglik, latent, args[0], args[1], constrained)
    return {**draws, evaluation.NAME: values}


def temperatures_of(state, kernel=None):
    """The equipartition readings (:func:`numpyro_sgrld.core.equipartition.summarize`) of a
    stochastic-gradient kernel's last state (chains stacked or one), ``None`` for any other
    state."""
    acc = getattr(state, "equipartition", None)
    if acc is None:
        return None
    return equipartition.summarize(jax.device_get(acc), describe(kernel).temperature)


def leaves_by_chain(tree, chain_axis):
    """A dict of site arrays ``(chains, draws, ...)`` from collected draws whose chain axis
    is ``chain_axis`` (``None``: one chain)."""
    out = {}
    for name, x in (tree.items() if isinstance(tree, dict) else
                    enumerate(jax.tree.leaves(tree))):
        x = np.asarray(x)
        out[name] = x[None] if chain_axis is None else np.swapaxes(x, 0, chain_axis)
    return out
