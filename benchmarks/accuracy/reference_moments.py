"""Reference moments cached on disk and a run's errors against them, for the benchmarks that
judge SG-MCMC within Gibbs against NUTS (``gibbs_sparse_logistic.py``,
``gibbs_random_intercept.py``)."""

import numpy as np
import numpyro

FIELDS = ("mean", "sd", "mean_se", "ess")


def cached_reference(path, draw, names):
    """``{name: {mean, sd, mean_se, ess}}`` per coordinate of each judged quantity, from the
    ``.npz`` at ``path``, computed first from ``draw()`` (``{name: (chains, draws, k)}``)
    where it is missing; ``mean_se`` is the ESS-based Monte Carlo error of the mean."""
    if not path.exists():
        out = {}
        for k, v in draw().items():
            ess = np.asarray(numpyro.diagnostics.summary({k: v})[k]["n_eff"])
            flat = v.reshape(-1, v.shape[-1])
            out[f"{k}__mean"], out[f"{k}__sd"] = flat.mean(0), flat.std(0)
            out[f"{k}__mean_se"] = flat.std(0) / np.sqrt(ess)
            out[f"{k}__ess"] = ess
        np.savez(path, **out)
    data = np.load(path)
    return {k: {f: data[f"{k}__{f}"] for f in FIELDS} for k in names}


def errors(draws, ref):
    """The largest |mean error| (reference sds) and the extreme sd ratios over every judged
    coordinate."""
    worst, ratios = 0.0, []
    for k, r in ref.items():
        flat = draws[k].reshape(-1, draws[k].shape[-1])
        worst = max(worst, float(np.max(np.abs(flat.mean(0) - r["mean"]) / r["sd"])))
        ratios += list(flat.std(0) / r["sd"])
    return worst, float(min(ratios)), float(max(ratios))


def interweave_option(text):
    """``--interweave-every``'s value: ``"auto"`` (SGGibbs's default), ``"none"`` (``None``)
    or a number of steps."""
    return None if text == "none" else text if text == "auto" else int(text)


def interweave_label(value):
    """The table's words for an ``interweave_every`` other than the default."""
    return "" if value == "auto" else f", interweave_every={value}"
