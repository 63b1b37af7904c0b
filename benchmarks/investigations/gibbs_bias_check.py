"""The verdict's check of the Gibbs sites' bias within ``SGGibbs``
(``numpyro_sgrld.sampler.gibbs_bias_check``) as a classifier: for each run (4 vectorised chains
of 2,000 + ``--num-samples`` steps, seed 0), the global scale's mean error in reference sds
with its Monte Carlo error (ESS-based), the check's predicted shift of that coordinate with
its error, the largest predicted shift over every Gibbs coordinate, and what the verdict
said: ``bias`` where it named a Gibbs site's predicted shift, ``warned`` where it warned for
another reason, ``quiet`` else.

The runs: ``grid``, the eleven of ``gibbs_site_amplification.py`` (the prior-dominated
Gaussian regression with 9 and 36 children, German credit's sparse logistic regression and
its 60-predictor form, the random intercept); ``held-out``, runs the check was not built on:
the prior-dominated regression with 18 children (SGLD, SGHMC, BADODAB), with a tighter prior
on its scale (``Gamma(5, 5)``), with predictors five times as large (every child informed
about as much as its prior), SGLD at four times the default's step target on German credit,
the 200-predictor regression, the random intercept with SGHMC, and the 18-child regression
with SGLD again at the ``target_bias`` its default run's warning advised; ``momentum``: German
credit at ``target_bias=0.4`` with BAOAB, SGNHT and SGHMC, and BAOAB and SGHMC sweeping the
Gibbs sites every 4th (and BAOAB every 16th) step after warm-up; ``small-groups``: the random
intercept with 5 rows a group (500 rows, minibatch 50), where the data say little about each
intercept, at the defaults of SGLD, SGHMC and BADODAB, with the worst coordinate's error over
every site (``mu``, ``log sigma``, the intercepts, the slopes) against NUTS (on the
intercepts non-centred) as well. References:
``tau``'s exact posterior by quadrature, NUTS on the full data for the others (cached in
``docs/results``)::

    python benchmarks/investigations/gibbs_bias_check.py --set grid held-out
    python benchmarks/investigations/gibbs_bias_check.py --set momentum
    python benchmarks/investigations/gibbs_bias_check.py --set small-groups --with-means
    python benchmarks/investigations/gibbs_bias_check.py --set small-groups --minibatch 500
    python benchmarks/investigations/gibbs_bias_check.py --set small-groups --interweave-every none

``--with-means`` adds the prediction with the children's mean shifts as well (not in the
verdict; :func:`mean_part`).
"""

import argparse
import re
import sys
import warnings
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro.infer import MCMC

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "accuracy"))
sys.path.insert(0, str(ROOT / "benchmarks" / "investigations"))
import gibbs_prior_scale_bias as prior  # noqa: E402
import gibbs_random_intercept as intercept  # noqa: E402
import gibbs_scale_bias_width as width  # noqa: E402
import gibbs_site_amplification as amplification  # noqa: E402
import gibbs_sparse_logistic as sparse  # noqa: E402
from numpyro.handlers import reparam  # noqa: E402
from numpyro.infer import NUTS  # noqa: E402
from numpyro.infer.reparam import LocScaleReparam  # noqa: E402
from numpyro_sgrld.models import logistic_regression as lr  # noqa: E402
from reference_moments import cached_reference, errors, interweave_option  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402
from numpyro_sgrld.sampler import gibbs_bias_check  # noqa: E402


def prior_run(name, children, kernel="SGLD", gamma=(prior.A, prior.B), scale=prior.SCALE,
              **own):
    X, y = prior.data(children, scale=scale)
    model = partial(prior.model, prior=gamma)
    return (name, ns.SGGibbs(getattr(ns, kernel)(model, **own)),
            (jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)), "tau",
            prior.exact(X, y, gamma))


def held_out(cache):
    """``(name, kernel, args, scale site, (mean, sd) of its log)`` of the held-out runs."""
    for kernel in ("SGLD", "SGHMC", "BADODAB"):
        yield prior_run(f"prior, 18 children, {kernel}", 18, kernel)
    yield prior_run("prior Gamma(5, 5), 9 children, SGLD", 9, gamma=(5.0, 5.0))
    yield prior_run("prior, 9 informed children, SGLD", 9, scale=5 * prior.SCALE)
    X, y = (jnp.asarray(x) for x in lr.load_german_credit())
    ref = sparse.reference(X, y, cache)["log_tau"]
    model = partial(sparse.centred, subsample_size=100)
    yield ("German credit, SGLD, target_bias=0.4",
           ns.SGGibbs(ns.SGLD(model, target_bias=0.4)), (X, y), "tau",
           (float(ref["mean"][0]), float(ref["sd"][0])))
    X, y = width.data(200, 6)
    ref = width.reference(X, y, 4000, cache)["log_tau"]
    for kernel in ("SGLD", "BADODAB"):
        yield (f"200 predictors, {kernel}", ns.SGGibbs(getattr(ns, kernel)(model)), (X, y),
               "tau", (float(ref["mean"][0]), float(ref["sd"][0])))
    args = intercept.data()[:3]
    ref = intercept.reference(args, cache)["log_sigma"]
    yield ("random intercept, SGHMC",
           ns.SGGibbs(ns.SGHMC(partial(intercept.model, subsample_size=1000))), args,
           "sigma", (float(ref["mean"][0]), float(ref["sd"][0])))


def momentum(cache):
    """German credit at ``target_bias=0.4`` with the momentum kernels, sweeping every
    ``gibbs_every`` steps after warm-up."""
    X, y = (jnp.asarray(x) for x in lr.load_german_credit())
    ref = sparse.reference(X, y, cache)["log_tau"]
    model = partial(sparse.centred, subsample_size=100)
    for kernel, every in (("BAOAB", 1), ("BAOAB", 4), ("BAOAB", 16), ("SGNHT", 1),
                          ("SGHMC", 1), ("SGHMC", 4)):
        yield (f"German credit, {kernel}, target_bias=0.4, gibbs_every={every}",
               ns.SGGibbs(getattr(ns, kernel)(model, target_bias=0.4), gibbs_every=every),
               (X, y), "tau", (float(ref["mean"][0]), float(ref["sd"][0])))


SMALL_ROWS = 5  # rows a group in ``small-groups``


def small_groups(cache, minibatch=50, interweave_every="auto"):
    """The random intercept with :data:`SMALL_ROWS` rows a group, at the defaults (but
    ``interweave_every``), on minibatches of ``minibatch`` rows (500: all of them, exact
    gradients)."""
    group, x, y, _ = intercept.data()
    keep = np.flatnonzero(np.arange(x.shape[0]) % (x.shape[0] // intercept.GROUPS)
                          < SMALL_ROWS)
    args = (group[keep], x[keep], y[keep])
    # NUTS on the intercepts non-centred: on the centred funnel it reads log sigma's sd 15 %
    # narrow with no divergence (0.240 against 0.284)
    non_centred = reparam(intercept.model, config={"alpha": LocScaleReparam(0)})
    path = cache / f"gibbs_bias_check_intercept_{SMALL_ROWS}_rows_reference.npz"
    ref = cached_reference(
        path, lambda: intercept.run(NUTS(ns.full_batch(non_centred)), args, 1000, 4000,
                                    seed=1)[0], ("mu", "log_sigma", "alpha", "beta"))
    model = partial(intercept.model, subsample_size=minibatch)
    for kernel in ("SGLD", "SGHMC", "BADODAB"):
        yield (f"random intercept, {SMALL_ROWS} rows a group, minibatch {minibatch}, {kernel}"
               + ("" if interweave_every == "auto" else f", interweave_every={interweave_every}"),
               ns.SGGibbs(getattr(ns, kernel)(model), interweave_every=interweave_every), args,
               "sigma",
               (float(ref["log_sigma"]["mean"][0]), float(ref["log_sigma"]["sd"][0])), ref)


def grid(cache):
    for name, kernel, args, scale, _, reference in amplification.configurations(cache):
        yield name, kernel, args, scale, reference


def advised(problem):
    """The ``target_bias`` a warning advised, or ``None``."""
    found = re.search(r"target_bias=([0-9.e-]+) \(the shift", problem)
    return float(found.group(1)) if found else None


def mean_part(mcmc, kernel, groups):
    r"""Per decentred group, :math:`2\bar u_j \bar g_j` averaged over its elements: a
    child's mean shift :math:`\delta_j` (the mean of its gradient :math:`\bar g_j`, zero under
    the posterior, over its curvature, 1 in the decentred coordinates) times twice its mean
    :math:`\bar u_j`, the first-order growth of its reading :math:`u_j^2` beside the
    spread's :math:`\varepsilon_j`; :math:`\bar u` and :math:`\bar g` from different chains
    (their product's own noise has no mean then). Not in the verdict."""
    eq = jax.device_get(mcmc.last_state.sg_state.equipartition)
    count = np.asarray(eq.count, np.float64)[:, None]
    parts = []
    for site in (s + "_decentered" for s in kernel.decentred_sites):
        chains = count.shape[0]
        g = np.asarray(eq.gradient[site], np.float64).reshape(chains, -1) / count
        u = (np.asarray(eq.shift[site], np.float64).reshape(chains, -1) / count
             + np.asarray(eq.centre[site], np.float64).reshape(chains, -1))
        cross = (u.sum(0) * g.sum(0) - (u * g).sum(0)) / (chains * (chains - 1))
        parts.append(2 * cross)
    per_element = np.concatenate(parts)
    return per_element if len(groups) == per_element.size else np.array(
        [p.mean() for p in parts])


def judged(name, kernel, args, scale, reference, num_samples, every_site=None,
           with_means=False):
    """The row of one run, and the ``target_bias`` its warning advised (or ``None``);
    ``every_site``: a reference of every site, whose worst coordinate is added to the name;
    ``with_means``: the prediction with the children's mean shifts too (:func:`mean_part`:
    the scale's and the largest over the Gibbs coordinates) in a last column."""
    mean, sd = reference
    mcmc = MCMC(kernel, num_warmup=2000, num_samples=num_samples, num_chains=4,
                chain_method="vectorized", progress_bar=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mcmc.run(jax.random.PRNGKey(0), *args)
    said = " ".join(str(c.message) for c in caught if "cannot be trusted" in str(c.message))
    v = ns.check(mcmc, warn=False)
    names = kernel.inner_kernel.composed_check.keywords["gibbs_names"]
    groups = kernel.inner_kernel.composed_check.keywords["groups"]
    at = {n: k for k, n in enumerate(v.temperatures.names)}
    k = [at[g] for g in groups]
    shift, error = gibbs_bias_check.predicted_shifts(
        mcmc.last_state.sg_state.monitor.composed, np.asarray(v.temperatures.estimate)[k],
        np.asarray(v.temperatures.se)[k])
    i = names.index((scale, 0))
    draws = np.log(np.asarray(mcmc.get_samples(group_by_chain=True)[scale], np.float64))
    draws = draws.reshape(draws.shape[:2] + (-1,))[..., 0]
    ess = float(np.ravel(numpyro.diagnostics.effective_sample_size(draws))[0])
    err, se = (draws.mean() - mean) / sd, draws.std() / np.sqrt(ess) / sd
    verdict = ("bias" if "is predicted to sit" in said else "warned" if said else "quiet")
    if every_site is not None:
        worst = errors(intercept.judged(mcmc.get_samples(group_by_chain=True)), every_site)[0]
        name = f"{name} (worst of every coordinate {worst:.3f})"
    accurate = "yes" if abs(err) <= 0.15 else "no"
    row = (f"| {name} | {err:+.3f} ± {se:.3f} | {accurate} | {shift[i]:+.3f} ± {error[i]:.3f} "
           f"| {np.nanmax(np.abs(shift)):.3f} | {ess:.0f} | {verdict} |")
    if with_means:
        readings = np.asarray(v.temperatures.estimate)[k] + mean_part(mcmc, kernel, groups)
        both = gibbs_bias_check.predicted_shifts(
            mcmc.last_state.sg_state.monitor.composed, readings,
            np.asarray(v.temperatures.se)[k])[0]
        row += f" {both[i]:+.3f}, {np.nanmax(np.abs(both)):.3f} |"
    return row, advised(said)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", nargs="+", default=["grid", "held-out"],
                        choices=["grid", "held-out", "momentum", "small-groups"])
    parser.add_argument("--num-samples", type=int, default=40_000)
    parser.add_argument("--cache", type=Path, default=ROOT / "docs" / "results")
    parser.add_argument("--only", default=None, help="the runs whose name holds it")
    parser.add_argument("--minibatch", type=int, default=50,
                        help="small-groups: the minibatch's rows (500: the full data)")
    parser.add_argument("--interweave-every", type=interweave_option, default="auto",
                        help="small-groups: SGGibbs's interweave_every (auto, none or a number)")
    parser.add_argument("--with-means", action="store_true",
                        help="a last column: the prediction with the children's mean shifts")
    a = parser.parse_args()
    print("| run | log scale error (sd) ± se | within 0.15 | predicted shift ± se "
          "| largest predicted, any Gibbs coordinate | ESS log scale | verdict |"
          + (" with mean shifts: the scale, the largest |" if a.with_means else ""))
    print("|---|---|---|---|---|---|---|" + ("---|" if a.with_means else ""))
    for which in a.set:
        runs = {"grid": grid, "held-out": held_out, "momentum": momentum,
                "small-groups": partial(small_groups, minibatch=a.minibatch,
                                                interweave_every=a.interweave_every)}[which](a.cache)
        for name, kernel, args, scale, reference, *every_site in runs:
            if a.only is not None and a.only not in name:
                continue
            row, target = judged(f"{which}: {name}", kernel, args, scale, reference,
                                 a.num_samples, *(every_site or [None]), a.with_means)
            print(row, flush=True)
            if which == "held-out" and name.startswith("prior, 18 children, SGLD") and target:
                again = prior_run(f"prior, 18 children, SGLD, target_bias={target:.2g} "
                                  "(advised)", 18, target_bias=target)
                print(judged(f"{which}: {again[0]}", *again[1:], a.num_samples)[0],
                      flush=True)


if __name__ == "__main__":
    main()
