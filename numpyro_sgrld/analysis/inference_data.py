"""ArviZ ``InferenceData`` from SG-MCMC runs, and cached NUTS reference posteriors.

``arviz.from_numpyro`` does not fit subsampled models: it needs a random key for the plate, and
without ``log_likelihood`` it records one random minibatch as the observed data and the
minibatch potential as the log density. :func:`to_inference_data` evaluates the model on the
full data instead (:func:`numpyro_sgrld.full_batch`) and names the minibatch statistics for
what they are.
"""

import hashlib
import inspect
import json
import time
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from numpyro import handlers
from numpyro.infer import MCMC, NUTS

from numpyro_sgrld.analysis import arviz_io as _arviz
from numpyro_sgrld.core.cache import cache_dir
from numpyro_sgrld.core.equipartition import summarize
from numpyro_sgrld.data.subsample import full_batch
from numpyro_sgrld.sampler.kernel import SGMCMC

__all__ = [
    "adaptation",
    "equipartition_by_chain",
    "to_inference_data",
    "pointwise_log_likelihood",
    "observed_data",
    "reference_posterior",
    "reference_file",
    "reference_seconds",
    "add_reference",
    "REFERENCE_GROUP",
    "SG_EXTRA_FIELDS",
    "save_netcdf",
    "load_netcdf",
]

#: The InferenceData group that holds a reference posterior next to a sampler's draws.
REFERENCE_GROUP = "reference_posterior"

#: The per-step statistics of the SG kernels; pass ``extra_fields=SG_EXTRA_FIELDS`` to
#: ``MCMC.run`` to have all of them in ``sample_stats``.
SG_EXTRA_FIELDS = ("diverging", "num_rejected", "potential_energy", "grad_norm", "step_size",
                   "configurational_temperature")

# sample_stats names. SG kernels: the potential and gradient are minibatch estimates, so they
# do not get ArviZ's "lp" (a full-data log density).
_SG_STAT_NAMES = {
    "diverging": "diverging",
    "num_rejected": "num_rejected",
    "potential_energy": "minibatch_potential_energy",
    "grad_norm": "minibatch_grad_norm",
    "step_size": "step_size",
    "configurational_temperature": "configurational_temperature",
}
_HMC_STAT_NAMES = {
    "diverging": "diverging",
    "potential_energy": "lp",  # negated below
    "num_steps": "n_steps",
    "accept_prob": "acceptance_rate",
    "energy": "energy",
    "adapt_state.step_size": "step_size",
}

# Budget for one chunk of the pointwise log-likelihood: draws x data points.
_CHUNK_ELEMENTS = 2**18


def _trace_full(model, draw, args, kwargs):
    conditioned = handlers.substitute(handlers.seed(full_batch(model), 0), data=draw)
    return handlers.trace(conditioned).get_trace(*args, **kwargs)


def _observed_sites(trace):
    return {
        name: site
        for name, site in trace.items()
        if site["type"] == "sample" and site["is_observed"]
    }


def _flat_draws(samples):
    """``{site: (draws, ...)}`` from arrays with leading ``(chains, draws)``."""
    return {k: jnp.reshape(v, (-1,) + jnp.shape(v)[2:]) for k, v in samples.items()}


def pointwise_log_likelihood(model, samples, *model_args, batch_size=None, **model_kwargs):
    r"""Full-data pointwise log-likelihood :math:`\log p(y_i \mid \theta_s)` of every observed
    site, for every draw ``s`` of ``samples`` (a dict of constrained values with one leading
    draw dimension).

    Subsample plates are switched off (:func:`numpyro_sgrld.full_batch`), so each observed site
    gives one column per data point, not per minibatch element. Draws go through the model in
    chunks of ``batch_size`` (default: about :math:`2^{18}` draws x data points per chunk), so
    memory stays bounded for many draws of a large data set.

    Returns ``{site: array (draws, *batch_shape)}``.
    """
    num_draws = len(next(iter(samples.values())))
    first = jax.tree.map(lambda v: v[0], samples)
    sizes = {
        name: max(1, int(np.prod(jnp.shape(site["fn"].log_prob(site["value"])))))
        for name, site in _observed_sites(
            _trace_full(model, first, model_args, model_kwargs)
        ).items()
    }
    if not sizes:
        raise ValueError("The model has no observed sample sites: there is no likelihood.")
    if batch_size is None:
        batch_size = max(1, _CHUNK_ELEMENTS // sum(sizes.values()))
    if not (isinstance(batch_size, int) and batch_size >= 1):
        raise ValueError(f"`batch_size` must be a positive integer, got {batch_size!r}.")

    @jax.jit
    def chunk(draws):
        def one(draw):
            trace = _trace_full(model, draw, model_args, model_kwargs)
            return {n: s["fn"].log_prob(s["value"]) for n, s in _observed_sites(trace).items()}

        return jax.vmap(one)(draws)

    parts = []
    for start in range(0, num_draws, batch_size):
        draws = {k: v[start : start + batch_size] for k, v in samples.items()}
        parts.append(jax.tree.map(np.asarray, chunk(draws)))
    return {name: np.concatenate([p[name] for p in parts]) for name in sizes}


def observed_data(model, samples, *model_args, **model_kwargs):
    """The full observed data of every observed site (one model evaluation at the first draw
    of ``samples``, subsampling switched off)."""
    first = jax.tree.map(lambda v: v[0], samples)
    trace = _trace_full(model, first, model_args, model_kwargs)
    return {name: np.asarray(site["value"]) for name, site in _observed_sites(trace).items()}


def sample_stats_of(mcmc):
    extra = mcmc.get_extra_fields(group_by_chain=True)
    names = _SG_STAT_NAMES if isinstance(mcmc.sampler, SGMCMC) else _HMC_STAT_NAMES
    stats = {}
    for field, value in extra.items():
        value = np.asarray(value)
        if field == mcmc.sampler.sample_field or value.ndim < 2:
            continue
        name = names.get(field, field.replace(".", "_"))
        stats[name] = -value if name == "lp" else value
    adapted = adaptation(mcmc)
    if adapted and stats:
        shape = next(iter(stats.values())).shape[:2]
        inflation = np.broadcast_to(adapted["predicted_variance_inflation"][:, None], shape)
        stats["predicted_variance_inflation"] = np.array(inflation)
    return stats


def equipartition_by_chain(mcmc):
    """Each chain's equipartition readings after warm-up (:mod:`numpyro_sgrld.core.equipartition`:
    1 for a chain that samples the posterior's spread): ``{"temperature": (chains,),
    "reading": (chains, K), "reading_se": (chains, K)}`` and ``"group"``, the K names
    (coordinates or layers); ``None`` for another kernel or before any step was counted.
    :func:`to_inference_data` stores them in its group ``"equipartition"``."""
    state = getattr(mcmc, "last_state", None)
    acc = getattr(state, "equipartition", None)
    if not isinstance(mcmc.sampler, SGMCMC) or acc is None:
        return None
    pooled = summarize(jax.device_get(acc), mcmc.sampler.temperature)
    readings = [pooled] if pooled is None or not pooled.chains else list(pooled.chains)
    if any(t is None for t in readings):
        return None
    return {"temperature": np.asarray([t.overall for t in readings]),
            "reading": np.stack([t.estimate for t in readings]),
            "reading_se": np.stack([t.se for t in readings]),
            "group": np.asarray(readings[0].names)}


def adaptation(mcmc):
    r"""What the warm-up of a finished stochastic-gradient run chose, per chain (a dict of
    arrays with a leading chain axis; empty for a given step size or another kernel):

    - ``step_size`` – the adapted step :math:`h`;
    - ``predicted_variance_inflation`` – :math:`h\bar\mu`, the worst direction's predicted
      relative inflation of the stationary variance at that step (:math:`\bar\mu` the
      final window's mean Rayleigh quotient, :mod:`numpyro_sgrld.warmup.adaptation`):
      ``target_bias`` unless the stability cap made the step smaller;
    - ``preconditioner_<site>`` – the constant diagonal preconditioner learnt in warm-up
      (:func:`~numpyro_sgrld.core.metrics.learnt_diagonal`), where the kernel learns one.

    :func:`to_inference_data` stores them in its group ``"adaptation"`` and the inflation in
    ``sample_stats`` too."""
    state = getattr(mcmc, "last_state", None)
    if not isinstance(mcmc.sampler, SGMCMC) or getattr(state, "adaptation", None) is None:
        return {}
    a = state.adaptation
    step = np.atleast_1d(np.asarray(state.step_size, np.float64))
    count = np.atleast_1d(np.asarray(a.count, np.float64))
    mean = np.atleast_1d(np.asarray(a.total, np.float64)) / np.maximum(count, 1)
    out = {"step_size": step,
           "predicted_variance_inflation": np.where(count > 0, step * mean, np.nan)}
    metric = getattr(state.sampler_state, "metric", None)
    scale = getattr(metric, "scale", None)
    if isinstance(scale, dict):
        for site, value in scale.items():
            value = np.asarray(value)
            out[f"preconditioner_{site}"] = value if np.ndim(state.i) == 1 else value[None]
    return out


def add_reference(idata, reference):
    """``idata`` with the reference posterior stored beside its posterior, in the group
    ``"reference_posterior"`` (:data:`REFERENCE_GROUP`), so that ArviZ users can compare the
    two with their own tools (``az.summary(idata, group="reference_posterior")``,
    ``az.plot_dist``, ...) and the pair travels in one NetCDF file.

    ``reference``: an InferenceData (its posterior, e.g. :func:`reference_posterior`), a
    finished ``MCMC``, or a dict of draws with a leading ``(chain, draw)``. The reference's
    chains and draws keep their own sizes. Returns ``idata`` (modified in place).
    """
    if hasattr(reference, "posterior"):
        dataset = _arviz.dataset(reference, "posterior")
    else:
        grouped = (
            reference.get_samples(group_by_chain=True)
            if hasattr(reference, "get_samples")
            else reference
        )
        if not isinstance(grouped, dict) or not grouped:
            raise TypeError(
                "`reference` must be an InferenceData, a finished MCMC or a dict of draws with "
                f"a leading (chain, draw); got {type(reference).__name__}."
            )
        dataset = _arviz.dataset(
            _arviz.from_dict(posterior={k: np.asarray(v) for k, v in grouped.items()}),
            "posterior",
        )
    missing = set(idata.posterior.data_vars) - set(dataset.data_vars)
    if missing == set(idata.posterior.data_vars):
        raise ValueError(
            f"The reference has none of the posterior's variables ({sorted(missing)}); it has "
            f"{sorted(dataset.data_vars)}."
        )
    return _arviz.set_group(idata, REFERENCE_GROUP, dataset)


def to_inference_data(
    mcmc, *model_args, log_likelihood=True, batch_size=None, reference=None, **model_kwargs
):
    """An :class:`arviz.InferenceData` (ArviZ 0.x) or xarray ``DataTree`` (ArviZ 1.x, whose
    functions take it in place of ``InferenceData``; same groups) of a finished ``MCMC`` run on
    a model.

    - ``posterior``: the constrained draws (and deterministic sites), grouped by chain.
    - ``sample_stats``: the recorded extra fields. For the SG kernels the minibatch estimates
      are named as such (``minibatch_potential_energy``, ``minibatch_grad_norm``; there is no
      ``lp``), plus ``step_size``, ``diverging`` (with ``thinning``: a rejected step since
      the previous draw) and ``num_rejected`` (the chain's cumulative count of rejected
      steps, always recorded); run with
      ``extra_fields=SG_EXTRA_FIELDS`` to record them all. For NUTS/HMC the usual ArviZ names
      (``lp``, ``diverging``, ``n_steps``, ``acceptance_rate``, ``energy``, ``step_size``).
    - ``log_likelihood``: the **full-data** pointwise log-likelihood of every observed site
      (:func:`pointwise_log_likelihood`, chunked), unless ``log_likelihood=False``.
    - ``observed_data``: the full observed data.

    - ``reference_posterior`` (with ``reference=``, draws of the exact posterior such as
      :func:`reference_posterior`): the reference beside the draws (:func:`add_reference`).
    - ``adaptation`` (a stochastic-gradient kernel with ``step_size=None``): per chain, the
      adapted step, its predicted variance inflation and the learnt preconditioner
      (:func:`adaptation`); the inflation is in ``sample_stats`` too.
    - ``equipartition`` (a stochastic-gradient kernel): per chain, the equipartition check's
      overall reading ``temperature`` and, per coordinate or layer (``group``), ``reading``
      and ``reading_se`` (:func:`equipartition_by_chain`; 1 where a chain samples the
      posterior's spread).

    ``model_args`` / ``model_kwargs`` are those given to ``MCMC.run``. Works for the SG
    kernels here and for NumPyro's kernels on ``full_batch(model)`` (or any model). Then
    ``az.summary``, ``az.plot_trace``, ``az.loo`` and friends work as usual.
    """
    model = getattr(mcmc.sampler, "model", None)
    if model is None:
        raise ValueError(
            "to_inference_data needs a kernel built on a model (kernel(model, ...)); with a "
            "`potential_fn` there is no likelihood or data to record. Use "
            "arviz.from_dict(posterior=mcmc.get_samples(group_by_chain=True)) instead."
        )
    grouped = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    flat = _flat_draws(grouped)
    observed = _observed_sites(
        _trace_full(model, jax.tree.map(lambda v: v[0], flat), model_args, model_kwargs)
    )
    posterior = {k: v for k, v in grouped.items() if k not in observed}
    groups = {"posterior": posterior, "sample_stats": sample_stats_of(mcmc)}
    if observed:
        groups["observed_data"] = observed_data(model, flat, *model_args, **model_kwargs)
        if log_likelihood:
            num_chains = next(iter(grouped.values())).shape[0]
            loglik = pointwise_log_likelihood(
                model, flat, *model_args, batch_size=batch_size, **model_kwargs
            )
            groups["log_likelihood"] = {
                k: v.reshape((num_chains, -1) + v.shape[1:]) for k, v in loglik.items()
            }
    idata = _arviz.from_dict(**groups)
    adapted = adaptation(mcmc)
    if adapted:
        import xarray as xr

        if _arviz.is_datatree():  # no "/" in a DataTree's names
            adapted = {_escape(k): v for k, v in adapted.items()}
        dataset = xr.Dataset({k: (("chain", *[f"{k}_dim_{j}" for j in range(np.ndim(v) - 1)]),
                                  np.asarray(v)) for k, v in adapted.items()})
        _arviz.set_group(idata, "adaptation", dataset)
    readings = equipartition_by_chain(mcmc)
    if readings is not None:
        import xarray as xr

        group = readings.pop("group")
        dataset = xr.Dataset({k: (("chain",) if v.ndim == 1 else ("chain", "group"), v)
                              for k, v in readings.items()}, coords={"group": group})
        _arviz.set_group(idata, "equipartition", dataset)
    return idata if reference is None else add_reference(idata, reference)


def _fingerprint(obj, h, seen=None):
    """Feed a stable description of ``obj`` (arrays by content) into the hash ``h``."""
    seen = set() if seen is None else seen
    if callable(obj) and not isinstance(obj, (np.ndarray, jax.Array)):
        if id(obj) in seen:  # recursive closures
            h.update(b"<seen>")
            return
        seen.add(id(obj))
    if isinstance(obj, partial):
        _fingerprint(obj.func, h, seen)
        _fingerprint(obj.args, h, seen)
        _fingerprint(sorted(obj.keywords.items()), h, seen)
    elif callable(obj) and hasattr(obj, "__code__"):
        h.update(f"{obj.__module__}.{obj.__qualname__}".encode())
        try:
            h.update(inspect.getsource(obj).encode())
        except (OSError, TypeError):
            h.update(obj.__code__.co_code)
        # what a closure captured and its defaults are part of the model too
        _fingerprint(obj.__defaults__ or (), h, seen)
        _fingerprint(sorted((obj.__kwdefaults__ or {}).items()), h, seen)
        for cell in obj.__closure__ or ():
            try:
                _fingerprint(cell.cell_contents, h, seen)
            except ValueError:  # an empty cell
                pass
    elif isinstance(obj, (list, tuple)):
        h.update(b"[")
        for item in obj:
            _fingerprint(item, h, seen)
        h.update(b"]")
    elif isinstance(obj, dict):
        _fingerprint(sorted(obj.items(), key=lambda kv: repr(kv[0])), h, seen)
    elif isinstance(obj, (np.ndarray, jax.Array)):
        a = np.asarray(obj)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(np.ascontiguousarray(a).tobytes())
    else:
        h.update(repr(obj).encode())


def reference_key(model, *model_args, **settings):
    """The cache key of a reference posterior: a hash of the model (its code, bound arguments,
    defaults and closure contents), the data (by content) and the NUTS settings. Objects
    without a stable description (their ``repr`` shows a memory address) change the key from
    one process to the next: the reference is then recomputed, never reused wrongly."""
    h = hashlib.sha256()
    _fingerprint(model, h)
    _fingerprint(model_args, h)
    _fingerprint(settings, h)
    h.update(numpyro.__version__.encode())
    return h.hexdigest()[:20]


def reference_file(model, *model_args, num_samples=2000, num_warmup=1000, num_chains=4,
                   seed=0, folder=None, **model_kwargs):
    """The cache file of :func:`reference_posterior` with these arguments (it exists once the
    reference has been computed)."""
    settings = dict(num_samples=num_samples, num_warmup=num_warmup, num_chains=num_chains,
                    seed=seed, model_kwargs=model_kwargs)
    folder = Path(folder) if folder is not None else cache_dir() / "reference"
    return folder / f"reference-{reference_key(model, *model_args, **settings)}.nc"


def reference_seconds(idata):
    """The wall time the reference run took when it was computed (``nan`` if not recorded)."""
    try:
        attrs = _arviz.dataset(idata, "posterior").attrs
        return float(json.loads(attrs["reference"]).get("seconds", float("nan")))
    except (KeyError, TypeError, ValueError):
        return float("nan")


def reference_posterior(
    model,
    *model_args,
    num_samples=2000,
    num_warmup=1000,
    num_chains=4,
    seed=0,
    folder=None,
    refresh=False,
    progress_bar=False,
    **model_kwargs,
):
    """Ground truth by NUTS on the full data: ``MCMC(NUTS(full_batch(model)), ...)``, as
    :class:`arviz.InferenceData` (a ``DataTree`` on ArviZ 1.x: posterior, sample_stats,
    observed_data).

    The result is cached as a NetCDF file ``reference-<key>.nc`` in ``folder`` (default
    ``<cache>/reference``, see :func:`numpyro_sgrld.core.cache.cache_dir`), keyed by the model's
    code and bound arguments, the data and the settings (:func:`reference_key`), and read back
    on later calls; ``refresh=True`` reruns it. Chains run one after another, or in parallel
    when there are enough devices.
    """

    settings = dict(
        num_samples=num_samples,
        num_warmup=num_warmup,
        num_chains=num_chains,
        seed=seed,
        model_kwargs=model_kwargs,
    )
    path = reference_file(model, *model_args, folder=folder, **settings)
    if path.exists() and not refresh:
        return load_netcdf(path)
    start = time.perf_counter()
    method = "parallel" if jax.local_device_count() >= num_chains else "sequential"
    mcmc = MCMC(
        NUTS(full_batch(model)),
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=method,
        progress_bar=progress_bar,
    )
    mcmc.run(
        jax.random.PRNGKey(seed),
        *model_args,
        extra_fields=("diverging", "potential_energy", "num_steps", "accept_prob"),
        **model_kwargs,
    )
    idata = to_inference_data(mcmc, *model_args, log_likelihood=False, **model_kwargs)
    idata.posterior.attrs["reference"] = json.dumps(
        {
            "sampler": "NUTS(full_batch(model))",
            **{k: v for k, v in settings.items() if k != "model_kwargs"},
            "seconds": time.perf_counter() - start,
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.nc")
    save_netcdf(idata, tmp)
    tmp.replace(path)
    return idata


def _renamed(idata, fn):
    groups = {}
    for group in _arviz.group_names(idata):
        ds = _arviz.dataset(idata, group)
        names = [*ds.data_vars, *ds.dims]
        mapping = {n: fn(n) for n in names if isinstance(n, str) and fn(n) != n}
        groups[group] = ds.rename(mapping) if mapping else ds
    return _arviz.from_datasets(groups)


_escape = _arviz.escape
_unescape = _arviz.unescape


def save_netcdf(idata, path):
    """``idata.to_netcdf(path)``, with the ``/`` of site names (a network's
    ``"net/mlp/linear_0/w"``, which netCDF reads as a group path) written as ``%2F``;
    :func:`load_netcdf` restores them. (On ArviZ 1.x the names of a ``DataTree`` are escaped
    already: the file is the same.)"""
    if _arviz.is_datatree():
        return idata.to_netcdf(str(path))
    return _renamed(idata, _escape).to_netcdf(str(path))


def load_netcdf(path, lazy=True):
    """``arviz.from_netcdf(path)`` with the site names :func:`save_netcdf` escaped restored:
    an ``InferenceData`` on ArviZ 0.x, a ``DataTree`` on ArviZ 1.x. ``lazy=True`` reads values
    when they are used (the file stays open); ``lazy=False`` reads everything now and closes
    the file. On ArviZ 1.x the names stay escaped (a ``DataTree`` cannot hold ``/``)."""
    if _arviz.is_datatree():
        return _arviz.from_netcdf(path, lazy=lazy)
    return _renamed(_arviz.from_netcdf(path, lazy=lazy), _unescape)
