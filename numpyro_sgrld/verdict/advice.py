r"""The sentences of the verdict (:mod:`numpyro_sgrld.verdict.judge`): what each problem means and
what to do about it, for this kernel and this model (a centred hierarchy to reparametrise, a
thermostat to settle, a Γ to correct, a network to judge in function space). The advice is
chosen by the pieces' traits (:class:`~numpyro_sgrld.core.correction.GammaBias`) and by what the
run measured, never by a kernel's name."""

import jax
import numpy as np

from numpyro_sgrld.core import equipartition
from numpyro_sgrld.core.correction import GammaBias
from numpyro_sgrld.core.traits import trait
from numpyro_sgrld.verdict.run import describe

__all__ = ["NETWORK_WARMUP", "NUTS_FASTER_BELOW_ROWS", "RELAXATIONS", "centred_sites",
           "cold_network_note", "data_sizes", "kernel_notes", "mixing_advice",
           "network_mixing_advice", "nuts_cost_note", "network_note", "network_readings",
           "reading_site", "site_name", "spread_reading", "temperature_problem", "thermostat_of",
           "thermostat_relaxation"]


def reading_site(name):
    """The site of an equipartition reading's name (``"w[3] (chain 1)"`` -> ``"w"``)."""
    return name.split(" (chain ")[0].split("[")[0]


def network_readings(departed, network, judged_name=None):
    """``(judged, cold)``: the departures of a network's readings (:func:`~numpyro_sgrld.
    equipartition.departures`) split. A network site's reading below the band, or the
    whole position's (every other site's own reading is judged), says the chain has not
    reached its mode's spread in some directions (a horseshoe's scales drift slowly): not
    converged, which the evaluation batch's mixing judges in function space, so it is a note.
    Every other departure, above the band (a step that inflates the law, which chains that
    agree on predictions do not reveal) or at another site, is judged. ``judged_name`` maps a
    reading's site, named as the kernel moves it (a network's weights decentred within
    Gibbs), to the name ``network`` holds."""
    name = judged_name or str
    cold = [d for d in departed if d[1] < 1
            and name(reading_site(d[0])) in network | {"all coordinates"}]
    return [d for d in departed if d not in cold], cold


def cold_network_note(cold, warmup_advice=None):
    """The note for a network's readings below the band. Where a composing kernel advises
    something else than a longer warm-up (``warmup_advice``: within Gibbs a longer warm-up
    moved the scales off, docs/benchmarks.md) the note advises no warm-up."""
    name, value, se = cold[0]
    more = f" and {len(cold) - 1} more" if len(cold) > 1 else ""
    gap = "" if warmup_advice else "; a longer warm-up narrows the gap"
    return (f"The network's equipartition readings are below the band at {name!r} "
            f"({value:.3f} ± {se:.3f}){more}: within its mode each chain is narrower than the "
            "posterior in some weight directions (a prior's scales drift slowly). Its "
            f"predictions are judged on the evaluation batch instead{gap}.")


#: The number of training rows below which full-batch NUTS reaches an exact ensemble (its own
#: floor) in less time than the presets' defaults reach its band (within twice the floor or
#: the floor plus 0.01 in total variation), on one core: the crossover measured on a 9-16-7
#: network at 1,000 and 10,000 rows, 140–530 rows by preset (docs/benchmarks.md, "Where
#: SG-MCMC beats NUTS on a network").
NUTS_FASTER_BELOW_ROWS = 250


def data_sizes(kernel):
    """``(N, n)``: the kernel's number of data rows and its smallest minibatch, or ``None``
    where the kernel has no subsampled plate; ``kernel``: a kernel or its
    :class:`~numpyro_sgrld.verdict.run.Run`."""
    run = describe(kernel)
    n = run.num_data
    sizes = [getattr(p, "subsample_size", None) for p in run.subsample_plates]
    if not n or not sizes or not all(sizes):
        return None
    return int(n), int(min(sizes))


#: The warm-up the advice gives a network whose chains have not mixed: on the networks of
#: ``benchmarks/references`` 12,000 warm-up steps instead of 2,000 brought every preset's
#: predictive on the 400-row classifier into the HMC reference's band (7 of 13 at 2,000) and
#: cut the distance on the UCI regression and digits networks by a fifth to two fifths, at
#: about the same wall time (docs/benchmarks.md, "A longer warm-up for networks").
NETWORK_WARMUP = 12_000


def nuts_cost_note(kernel):
    r"""For a model of fewer than :data:`NUTS_FASTER_BELOW_ROWS` rows, where full-batch NUTS
    is the faster way to the posterior: each of its leapfrog steps reads the N rows, about
    :math:`N/n` of this kernel's steps, and on the networks measured its whole run to an
    exact ensemble took less time than these kernels' defaults. Empty otherwise."""
    sizes = data_sizes(kernel)
    if sizes is None or sizes[0] >= NUTS_FASTER_BELOW_ROWS:
        return ""
    n, batch = sizes
    return (f" With {n:,} rows (a full-data gradient costs about {max(n / batch, 1.0):.0f} "
            "of this kernel's steps), NUTS on full_batch(model) is exact and likely faster: "
            f"on the networks measured it was below about {NUTS_FASTER_BELOW_ROWS:,} rows "
            "(docs/choosing.md).")


def network_mixing_advice(num_chains, kernel=None):
    """What to do when a network's chains have not mixed on the evaluation batch (a
    composing kernel's ``warmup_advice`` in place of the longer warm-up)."""
    warmup = describe(kernel).warmup_advice or (
        f"a longer num_warmup (on the networks measured, {NETWORK_WARMUP:,} or more: "
        "docs/choosing.md), not more kept draws")
    return ("For a network: chains still drifting towards a better fit after warm-up (each "
            f"chain's first half reads lower than its second) need {warmup}; chains settled "
            "in modes that predict differently do not agree "
            "with more steps, and the predictive ensemble then needs more chains (its error "
            f"shrinks as 1/sqrt(chains); this run has {int(num_chains or 1)})."
            + nuts_cost_note(kernel))


def network_note(weights, num_chains, in_function_space):
    """The note for a network's weights (``(rhat, ess, site)`` rows): their R-hat as
    information, what the chains are judged on instead, and what widens the ensemble."""
    finite = [w for w in weights if np.isfinite(w[0])]
    worst = max(finite or weights, key=lambda w: w[0], default=None)
    head = ("" if worst is None else
            f"Weight-space split R-hat reaches {worst[0]:.3g} at {site_name(worst[2])}: "
            "information only (a network's posterior has many equivalent modes, permuted "
            "units and flipped signs, and each chain settles in its own). ")
    judged = ("The chains are judged on the log-likelihood of a fixed evaluation batch "
              "(function space) and on the equipartition readings per layer."
              if in_function_space else
              "The chains are judged on the equipartition readings per layer.")
    chains = int(num_chains or 1)
    ensemble = (f" The predictive ensemble averages {chains} chains' modes: more chains, not "
                "more steps, widen it." if chains > 1 else
                " The predictive ensemble holds one chain's mode: more chains, not more steps, "
                "widen it.")
    return head + judged + ensemble


def centred_sites(kernel):
    """``{site: [the latent sites its prior depends on]}`` for the latent sites of the
    kernel's model whose prior depends on other latent sites (a centred hierarchy, from
    ``numpyro.infer.inspect.get_dependencies`` on the last run's arguments); ``None`` when the
    model cannot be inspected, or when the kernel runs within Gibbs (its model conditioned on
    the Gibbs sites)."""
    run = describe(kernel)
    model, args = run.model, run.model_args
    if model is None or args is None:
        return None
    from numpyro.infer.hmc_gibbs import GIBBS_SITES_KWARG
    from numpyro.infer.inspect import get_dependencies

    if GIBBS_SITES_KWARG in (args[1] or {}):
        # a kernel within Gibbs (SGGibbs): the Gibbs sites it sees as data are latent sites
        # of the model, so its own model cannot say whether the hierarchy is centred
        return None

    try:
        prior = get_dependencies(model, args[0], args[1])["prior_dependencies"]
    except Exception:  # any model the inspection cannot trace: no model-specific advice
        return None
    latent = set(getattr(run.setup, "inv_transforms", None) or {})
    return {site: sorted(s for s in deps if s != site and s in latent)
            for site, deps in prior.items()
            if site in latent and any(s != site and s in latent for s in deps)}


def mixing_advice(kernel):
    """What to do where more steps may not be enough, for this kernel's model."""
    nuts = ("NUTS on full_batch(model) (exact, but every leapfrog step evaluates all the "
            "data{ratio}) or numpyro.infer.HMCECS (minibatches with an energy-conserving "
            "correction) on the same model")
    sizes, big = data_sizes(kernel), None
    if sizes is not None:
        big = sizes[0] / sizes[1]
    ratio = f": about {big:.0f}x this kernel's minibatch" if big and big > 1 else ""
    hint = describe(kernel).mixing_hint
    hint = hint(None) if callable(hint) else hint  # without the run's counts
    if hint is not None:
        return f"{hint}, or compare against {nuts.format(ratio=ratio)}."
    centred = centred_sites(kernel)
    if centred:
        site, parents = next(iter(centred.items()))
        name = describe(kernel).name or "SGLD"
        return (f"Where that does not mix: the prior of {site!r} depends on "
                f"{', '.join(repr(p) for p in parents)} (a centred hierarchy, whose funnel "
                "stochastic-gradient samplers cross slowly); numpyro_sgrld.SGGibbs("
                f"{name}(model)) draws such parents exactly given their children where that "
                "involves no data and moves the children partially non-centred "
                "(docs/gibbs.md), or a non-centred parametrisation usually mixes "
                f"(numpyro.handlers.reparam with config={{{site!r}: LocScaleReparam(0)}}), or "
                "compare against " + nuts.format(ratio=ratio) + ".")
    if centred is not None:
        return ("Where more steps do not help, no reparametrisation will either (the model is "
                "already non-centred: no latent site's prior depends on another): use "
                + nuts.format(ratio=ratio) + ".")
    return ("Where that does not mix (a hierarchical model's funnel), a non-centred "
            "parametrisation of the scales usually does (numpyro.infer.reparam."
            "LocScaleReparam), or compare against " + nuts.format(ratio=ratio) + ".")


def site_name(site):
    name, j = site
    return f"{name!r}[{j}]"


#: Integrators whose friction is a thermostat :math:`\xi` that must first reach its
#: equilibrium, and how many of its relaxation times a run must last to be past it
#: (:math:`e^{-5} < 1\,\%` of the initial offset left).
RELAXATIONS = 5.0


def thermostat_of(state):
    r"""The chains' thermostat values :math:`\xi` in a stochastic-gradient kernel's state
    (SGNHT's and BADODAB's), ``None`` for any other."""
    sampler_state = getattr(state, "sampler_state", None)
    xi = getattr(getattr(sampler_state, "integrator", None), "thermostat", None)
    return None if xi is None else np.atleast_1d(np.asarray(jax.device_get(xi), np.float64))


def thermostat_relaxation(thermostat, temperature=1.0):
    r"""The thermostat's relaxation time in time units (:math:`h` × steps): with the
    momentum at its equilibrium for the friction :math:`\xi`, the kinetic temperature is
    :math:`T\xi^*/\xi` (:math:`\xi^* = A + h\sigma^2/(2T)` the equilibrium that the injected
    and the gradient noise set), so :math:`\dot\xi = T(\xi^*/\xi - 1)`, which relaxes at
    the rate :math:`T/\xi^*`: the time is about :math:`\xi/T` at the chains' last
    :math:`\xi` (the largest), ``None`` without one."""
    if thermostat is None:
        return None
    xi = np.asarray(thermostat, np.float64)
    xi = xi[np.isfinite(xi)]
    return float(xi.max() / temperature) if xi.size else None


def temperature_problem(departed, t, kernel, duration=None, thermostat=None):
    """The sentence for readings outside the band (:func:`~numpyro_sgrld.core.equipartition.
    departures`), with what to do for this kernel."""
    name, value, se = departed[0]
    band = equipartition.BAND
    wide = value > 1
    more = f" and {len(departed) - 1} more" if len(departed) > 1 else ""
    head = (
        f"The chains do not sample the posterior's spread: the equipartition check "
        f"E[(θ-m)·∂U/∂θ] = 1 (T = {t.overall:.3f} ± {t.overall_se:.3f} over all coordinates) "
        f"reads {value:.3f} ± {se:.3f} at {name!r}{more} (trusted: within "
        f"[{band[0]:.2f}, {band[1]:.2f}], every sd within 15 %): {spread_reading(value)}"
    )
    return f"{head} {temperature_advice(kernel, wide, duration, thermostat)}"


def spread_reading(value):
    """What an equipartition reading says of the draws' spread: about ``sqrt(value)`` times
    the posterior's sd where it is positive (a Gaussian's reading is the variance ratio); at
    or below 0 no ratio at all: at equilibrium every coordinate reads 1 whatever the
    posterior's shape (:mod:`numpyro_sgrld.core.equipartition`), so the chains are far from
    it there."""
    if value > 0:
        return (f"the draws are about {np.sqrt(value):.2f}x the posterior's sd "
                f"{'or wider ' if value > 1 else ''}in some directions.")
    return ("a reading at or below 0 gives no ratio of sds: at equilibrium every coordinate "
            "reads 1 whatever the posterior's shape, so the chains are far from it there "
            "(still on their way in, stuck, or drifting).")


def temperature_advice(kernel, wide, duration=None, thermostat=None):
    r"""What to do about a reading above (``wide``) or below 1, for this kernel (``duration``:
    the sampling phase's length in time units; ``thermostat``: the chains' last
    :math:`\xi`)."""
    run = describe(kernel)
    relaxation = thermostat_relaxation(thermostat, run.temperature)
    if duration is not None and relaxation is not None and duration < RELAXATIONS * relaxation:
        steps = duration and RELAXATIONS * relaxation / duration
        return (f"The thermostat ends at ξ = {relaxation:.3g} (it absorbs the gradient noise: "
                f"its equilibrium is A + hσ²/2), and it moves towards its equilibrium at a "
                f"rate of about T/ξ per time unit: it needs {RELAXATIONS:.0f} x "
                f"{relaxation:.3g} time units (step_size x steps) to settle and this run "
                f"sampled for {duration:.3g}; until it settles the positions are too "
                f"{'wide' if wide else 'narrow'}. Warm-up sets the thermostat from the heating "
                f"it measures in its second half, once the chains are past their way in: use "
                f"a longer num_warmup, step_size=None (a step chosen in warm-up), a friction "
                f"that is not a thermostat (SGHMC, BAOAB), or about {steps:.0f}x as many "
                f"sampling steps.")
    if not wide:
        return ("Below 1 the chains have not reached equilibrium in some directions (or a "
                "thermostat runs cold): use a longer num_warmup and more steps, or SGLD/SGHMC "
                "with step_size=None (the step is chosen in warm-up).")
    if not run.given:
        return "Use a smaller step_size."
    metric = run.metric
    advice = []
    if not run.adapts_step_size:
        advice.append("give a smaller step_size, or step_size=None to have it chosen in "
                      "warm-up for a stated bias (docs/step_size.md)")
    else:
        bias = run.target_bias
        advice.append(f"use a smaller target_bias (now {bias}; half of it about halves the "
                      "step's inflation)")
    gamma = [t for t in (trait(h, GammaBias) for h in (metric, run.integrator) if h is not None)
             if t is not None]
    if any(t.correctable for t in gamma) and run.correction is None:
        advice.append(f"the adaptive metric {metric.name!r} is not Γ-corrected, which "
                      "inflates the variances even at small steps: use correction='exact' "
                      "(small models; docs/bias.md)")
    if any(not t.correctable for t in gamma):
        advice.append("this kernel's adaptation has no Γ correction (docs/bias.md): SGLD or "
                      "SGHMC, whose preconditioner is learnt in warm-up and then constant, "
                      "sample the posterior itself")
    return "To fix it: " + "; or ".join(advice) + "."


def kernel_notes(kernel, step_size):
    """The notes on the kernel's own choices: the bias its adapted step allows, and what a
    kernel composing it adds (:attr:`~numpyro_sgrld.verdict.run.Run.bias_hint`)."""
    run = describe(kernel)
    notes = []
    if run.adapts_step_size and step_size is not None:
        bias = run.target_bias
        if bias is not None:
            share = " at most" if run.bias_hint else ""  # a composition's share of it, below
            notes.append(
                f"The adapted step (median {float(np.median(step_size)):.3g}) inflates the "
                f"worst direction's variance by{share} about {100 * bias:.0f} % (target_bias="
                f"{bias}); a smaller target_bias is more exact and mixes more slowly."
            )
    if run.bias_hint:
        notes.append(run.bias_hint)
    return notes
