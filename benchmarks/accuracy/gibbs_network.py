"""A unit-wise horseshoe MLP within Gibbs against its HMC reference: the breast-cancer
30-16-2 tanh network of ``benchmarks/references/problems.py`` (``cancer_unit_horseshoe``) with
``priors.horseshoe("unit", parametrisation="centred")`` on the first layer (a global and 16
per-unit half-Cauchy scales, drawn exactly given the weights), ``SGGibbs(K(model))`` at its
defaults, 4 sequential chains of 2,000 warm-up and 20,000 draws, minibatch 32.

Judged as the network presets are (``benchmarks/references/presets.py``): the test-set
predictive's total variation to NUTS's ensemble ``a`` and agreement of top classes, against
the floor (ensemble ``a`` to ``b``) and its band (``within_band``: TV at most twice the floor
or the floor plus 0.01, agreement at most 0.01 below the floor's; the test points whose top
class differs from ``a``'s beside the number the two ensembles' Monte Carlo errors alone
flip on average, ``beyond_noise``, the run's from its chains' ensembles); and the scales: each log
scale's mean error in reference sds and sd ratio, with the Monte Carlo errors of both runs
(ESS-based) and the distance between NUTS's two ensembles as the floor; and the same for each
draw's unit scales sorted (the scales' law up to relabelling the units, which a network's
symmetry leaves free: a chain that keeps its units' roles can still have it right). Needs the
reference
(``benchmarks/references/networks.py --problems cancer_unit_horseshoe``)::

    python benchmarks/record.py docs/results/gibbs_network.json -- \\
        python benchmarks/accuracy/gibbs_network.py --kernels SGLD SGHMC
    python benchmarks/record.py docs/results/gibbs_network_quarter.json -- \\
        python benchmarks/accuracy/gibbs_network.py --kernels SGLD --target-bias 0.05
    python benchmarks/record.py docs/results/gibbs_network_asked_seed1.json -- \\
        python benchmarks/accuracy/gibbs_network.py --kernels SGLD --num-samples 41000 --seed 1

(``--option NAME=VALUE`` passes a kernel option, ``--seed`` the run's key.)
"""

import argparse
import re
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "references"))
import problems as P  # noqa: E402  (first: it limits XLA to one thread before jax loads)

# isort: split

import jax  # noqa: E402
import numpy as np  # noqa: E402
import numpyro  # noqa: E402
from numpyro.infer import MCMC  # noqa: E402
from presets import beyond_noise, distances, reference  # noqa: E402
from reference_moments import interweave_label, interweave_option  # noqa: E402

import numpyro_sgrld as ns  # noqa: E402

NAME = "cancer_unit_horseshoe"


def moments(draws):
    """``(mean, sd, mean_se)`` per coordinate of ``(chains, draws, k)`` draws, the Monte Carlo
    error from the bulk ESS."""
    ess = np.asarray(numpyro.diagnostics.summary({"x": draws})["x"]["n_eff"])
    flat = draws.reshape(-1, draws.shape[-1])
    return flat.mean(0), flat.std(0), flat.std(0) / np.sqrt(ess), ess


def scale_errors(run, ref_a, ref_b):
    """Per log scale: the run's and ensemble ``b``'s mean errors against ``a`` (in ``a``'s
    sds) and the z-scores of the run's, with both runs' Monte Carlo errors."""
    out = {}
    for site, a in ref_a.items():
        r = run[site].reshape(run[site].shape[:2] + (-1,))
        a, b = a.reshape(a.shape[:2] + (-1,)), ref_b[site].reshape(a.shape[:2] + (-1,))
        (m, s, se, ess), (ma, sa, sea, _), (mb, sb, _, _) = moments(r), moments(a), moments(b)
        out[site] = dict(err=np.abs(m - ma) / sa, z=(m - ma) / np.sqrt(se**2 + sea**2),
                         ratio=s / sa, floor_err=np.abs(mb - ma) / sa, floor_ratio=sb / sa,
                         ess=ess)
    return out


def sorted_scales(draws):
    """Each draw's per-unit log scales in increasing order (``(chains, draws, units)``): the
    scales' law up to relabelling the units, which permuting a network's units leaves alone
    (a single scale, the global one, is its own)."""
    return {site: np.sort(v.reshape(v.shape[:2] + (-1,)), axis=-1) for site, v in draws.items()}


def worst(err):
    """The largest mean error (sd), NUTS b's, the largest |z|, the sd ratios' range (and
    b's) and the smallest ESS of :func:`scale_errors`' rows."""
    ratios = np.concatenate([e["ratio"] for e in err.values()])
    floor_ratios = np.concatenate([e["floor_ratio"] for e in err.values()])
    return (max(float(np.max(e["err"])) for e in err.values()),
            max(float(np.max(e["floor_err"])) for e in err.values()),
            max(float(np.max(np.abs(e["z"]))) for e in err.values()),
            (ratios.min(), ratios.max()), (floor_ratios.min(), floor_ratios.max()),
            min(float(np.min(e["ess"])) for e in err.values()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", nargs="+", default=["SGLD"])
    parser.add_argument("--num-warmup", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-samples", type=int, default=20000)
    parser.add_argument("--interweave-every", type=interweave_option, default="auto",
                        help="SGGibbs's interweave_every: auto (its default), none or "
                             "a number of steps")
    parser.add_argument("--non-centred", action="store_true",
                        help="the plain kernel K(model) on the horseshoe as NUTS's reference "
                             "writes it (the library's default unit form, non-centred): no "
                             "Gibbs sites")
    parser.add_argument("--control-variate", default="auto", choices=["auto", "none"],
                        help="SGGibbs's control_variate: auto (its default: control variates "
                             "centred at a mode, where every chain starts) or none (each "
                             "chain starts at its own prior draw)")
    parser.add_argument("--chain-method", default="sequential",
                        choices=["sequential", "vectorized"])
    parser.add_argument("--option", nargs="*", default=[], metavar="NAME=VALUE",
                        help="the kernels' own options, numbers (e.g. friction=0.01)")
    parser.add_argument("--target-bias", type=float, default=None,
                        help="the SG kernel's target_bias (default: its default; within Gibbs "
                             "its step aims at a share of it)")
    a = parser.parse_args()
    problem = P.PROBLEMS[NAME]()
    ref, meta = reference(NAME)
    sites = sorted({k.split(":", 1)[1] for k in ref if k.startswith("log_scale_a:")})
    ref_a = {s: ref[f"log_scale_a:{s}"] for s in sites}
    ref_b = {s: ref[f"log_scale_b:{s}"] for s in sites}
    print(f"reference: NUTS, 2 ensembles of {meta['chains']} x {meta['draws']} draws "
          f"(non-centred); floor TV {meta['floor']['tv']:.4f}, agreement "
          f"{meta['floor']['agreement']:.3f}")
    print("| kernel | steps per chain | TV (floor) | agreement (floor's) | within the band "
          "| max log-scale mean err (sd; NUTS b) | max abs z | log-scale sd ratios (NUTS b) "
          "| min scale ESS | verdict | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    chains = 4
    thinning = max(1, a.num_samples * chains // (meta["chains"] * meta["draws"]))
    for name in a.kernels:
        own = {} if a.target_bias is None else {"target_bias": a.target_bias}
        own.update({k: float(v) for k, v in (o.split("=", 1) for o in a.option)})
        if a.non_centred:
            kernel = getattr(ns, name)(problem["model"], **own)
        else:
            kernel = ns.SGGibbs(getattr(ns, name)(problem["gibbs_model"], **own),
                                interweave_every=a.interweave_every,
                                control_variate=None if a.control_variate == "none" else "auto")
        option = ("" if a.non_centred else interweave_label(a.interweave_every)) + (
            f", target_bias={a.target_bias}" if a.target_bias is not None else "") + "".join(
            f", {o}" for o in a.option) + (
            ", control_variate=None" if a.control_variate == "none" else "")
        starts = None
        if a.chain_method == "vectorized":  # the chains' starts, as MCMC.run initialises them
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                starts = kernel.init(jax.random.split(jax.random.PRNGKey(a.seed), chains),
                                     a.num_warmup, None, problem["train"], {}).z
        mcmc = MCMC(kernel, num_warmup=a.num_warmup, num_samples=a.num_samples,
                    num_chains=chains, thinning=thinning, chain_method=a.chain_method,
                    progress_bar=False)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            mcmc.run(jax.random.PRNGKey(a.seed), *problem["train"])
            jax.block_until_ready(mcmc.get_samples())
            seconds = time.perf_counter() - start
        warned = [str(w.message) for w in caught if "cannot be trusted" in str(w.message)]
        by_chain = mcmc.get_samples(group_by_chain=True)
        judged_problem = problem if a.non_centred else {**problem, "full": problem["gibbs_full"]}
        parts = [P.predictive(judged_problem, {k: v[c] for k, v in by_chain.items()
                                               if k.startswith("net/")})["probs"]
                 for c in range(chains)]  # the chains' ensembles; theirs the run's
        pred = {"chain_probs": np.stack(parts), "probs": np.mean(parts, axis=0)}
        d = distances(problem, pred, ref)
        noise = beyond_noise(pred, ref)
        run = {s: np.log(np.asarray(by_chain[s], np.float64)) for s in sites}
        err = scale_errors(run, ref_a, ref_b)
        top, floor_top, z, ratios, floor_ratios, ess = worst(err)
        relabelled = scale_errors(sorted_scales(run), sorted_scales(ref_a),
                                  sorted_scales(ref_b))
        label = (f"{name}({'' if not option else option[2:]}) non-centred" if a.non_centred
                 else f"SGGibbs({name}{option}) [{', '.join(kernel.gibbs_sites)}]")
        print(f"| {label} "
              f"| {a.num_warmup + a.num_samples:,} | {d['distance']:.4f} ({d['floor']:.4f}) "
              f"| {d['agreement']:.3f} ({d['floor_agreement']:.3f}) "
              f"| {'yes' if d['close'] else 'no'} | {top:.3f} ({floor_top:.3f}) | {z:.1f} "
              f"| {ratios[0]:.2f}–{ratios[1]:.2f} "
              f"({floor_ratios[0]:.2f}–{floor_ratios[1]:.2f}) | {ess:.0f} "
              f"| {'warned' if warned else 'quiet'} | {seconds:.0f} |", flush=True)
        print(f"  test points whose top class differs from NUTS a's: {noise['flips']} (the two "
              f"ensembles' Monte Carlo errors alone flip {noise['expected_flips']:.1f} on "
              "average)")
        for site in sites:  # where each chain's single scales sit, against NUTS's law
            if run[site][0, 0].size == 1:
                a_ = ref_a[site]
                if starts is not None:
                    print(f"  {site}: each chain's log scale at its start "
                          f"{', '.join(f'{v:.2f}' for v in np.log(np.ravel(starts[site])))}")
                print(f"  {site}: each chain's mean log scale "
                      f"{', '.join(f'{m:.2f}' for m in run[site].reshape(chains, -1).mean(1))}"
                      f"; NUTS {a_.mean():.2f} (sd {a_.std():.2f})")
        for site in sites:  # each draw's unit scales sorted
            top, floor_top, z, ratios, floor_ratios, ess = worst({site: relabelled[site]})
            print(f"  {site} up to relabelling: max mean err {top:.3f} sd (NUTS b "
                  f"{floor_top:.3f}), max abs z {z:.1f}, sd ratios {ratios[0]:.2f}–"
                  f"{ratios[1]:.2f} (NUTS b {floor_ratios[0]:.2f}–{floor_ratios[1]:.2f}), "
                  f"min ESS {ess:.0f}")
        if not a.non_centred:
            if mcmc.last_state.centre is not None:
                kept = np.ravel(mcmc.last_state.centre.on)
                print(f"  each chain's control variates after warm-up: "
                      f"{', '.join('on' if o else 'off' for o in kept)}")
            print(f"  the step's share of target_bias "
                  f"{float(np.mean(mcmc.last_state.bias_share)):.3f} (weakly informed "
                  f"children {float(np.mean(mcmc.last_state.children)):.1f})")
        for w in warned:
            print(f"  verdict: {w}")
            advised = re.search(r"num_samples of at least ([0-9,]+)", w)
            if advised:
                print(f"  the verdict asks for num_samples >= {advised.group(1)}")


if __name__ == "__main__":
    main()
