"""The streamed run's file (:mod:`numpyro_sgrld.analysis.streaming`): one NetCDF-4 file in ArviZ's
layout whose ``draw`` dimension is unlimited, created with the first segment, appended to with
each next one, cut back to the draws a checkpoint counts, and its recorded settings."""

import json

import numpy as np

from numpyro_sgrld.analysis import arviz_io as _arviz
from numpyro_sgrld.analysis.arviz_io import escape

__all__ = ["FILE_ATTRIBUTE", "GROUPS", "CHUNK_BYTES", "file_plan", "file_draws",
           "segment_datasets", "create", "append", "truncate"]

#: The file's root attribute that marks it as a streamed run (the run's settings, as JSON).
FILE_ATTRIBUTE = "numpyro_sgrld_streaming"
#: The groups written: the draws and their sample statistics.
GROUPS = ("posterior", "sample_stats")
#: HDF5 chunks: one chain, as many draws as fit in about this many bytes (at least one draw).
CHUNK_BYTES = 2**20


def file_plan(path):
    """The settings recorded in the streamed file ``path``, or ``None`` when it has none."""
    import h5netcdf

    try:
        with h5netcdf.File(path, "r") as f:
            recorded = f.attrs.get(FILE_ATTRIBUTE)
    except OSError:  # not an HDF5 file
        return None
    return None if recorded is None else json.loads(recorded)


def file_draws(path):
    """The number of draws per chain in the streamed file ``path``."""
    import h5netcdf

    with h5netcdf.File(path, "r") as f:
        return int(f[GROUPS[0]].dimensions["draw"].size)


def segment_datasets(posterior, stats):
    """``{group: xarray.Dataset}`` as ``to_inference_data`` builds them, names escaped."""
    idata = _arviz.from_dict(posterior=posterior, sample_stats=stats or None)
    datasets = {}
    for group in GROUPS:
        if group in _arviz.group_names(idata):
            ds = _arviz.dataset(idata, group)
            names = [*ds.data_vars, *ds.dims]
            if _arviz.is_datatree():  # escaped already by from_dict
                names = []
            mapping = {n: escape(n) for n in names if escape(n) != n}
            datasets[group] = ds.rename(mapping) if mapping else ds
    return datasets


def chunk_draws(bytes_per_draw, segment_draws):
    """Draws per HDF5 chunk: the largest divisor of ``segment_draws`` (so that appends write
    whole chunks) whose chunk stays within :data:`CHUNK_BYTES`, at least 1."""
    fits = max(1, CHUNK_BYTES // max(1, bytes_per_draw))
    return max(d for d in range(1, min(fits, segment_draws) + 1) if segment_draws % d == 0)


def encoding(ds, segment_draws):
    encoding = {}
    for name, da in ds.data_vars.items():
        per_draw = int(np.prod(da.shape[2:], dtype=np.int64)) * da.dtype.itemsize
        encoding[name] = {
            "chunksizes": (1, chunk_draws(per_draw, segment_draws), *da.shape[2:]),
        }
    return encoding


def create(path, datasets, plan):
    """Write the first segment as a new file (to a temporary name, then renamed)."""
    import xarray as xr

    partial = path.with_name(path.name + ".partial")
    xr.Dataset(attrs={FILE_ATTRIBUTE: json.dumps(plan._asdict())}).to_netcdf(
        partial, mode="w", engine="h5netcdf"
    )
    for group, ds in datasets.items():
        ds.to_netcdf(
            partial,
            mode="a",
            group=group,
            engine="h5netcdf",
            unlimited_dims=["draw"],
            encoding=encoding(ds, plan.segment_draws),
        )
    partial.replace(path)


def encoded(da, var):
    """``da``'s values as the file stores them (xarray's encoding: booleans as int8)."""
    from xarray.conventions import encode_cf_variable

    values = np.asarray(encode_cf_variable(da.variable).values)
    if values.dtype != var.dtype or values.shape[2:] != var.shape[2:]:
        raise ValueError(
            f"The segment's {da.name!r} is {values.dtype}{values.shape[2:]} per draw; the file "
            f"stores {var.dtype}{var.shape[2:]}: the file holds another model's run."
        )
    return values


def append(path, datasets):
    """Append one segment's draws along the unlimited ``draw`` dimension of each group."""
    import h5netcdf

    with h5netcdf.File(path, "a") as f:
        for group, ds in datasets.items():
            g = f[group]
            in_file = {n for n, v in g.variables.items() if n != "draw" and "draw" in v.dimensions}
            if in_file != set(ds.data_vars):
                raise ValueError(
                    f"The segment's {group} variables {sorted(ds.data_vars)} differ from the "
                    f"file's {sorted(in_file)}: the file holds another model's run."
                )
            start = g.dimensions["draw"].size
            stop = start + ds.sizes["draw"]
            g.resize_dimension("draw", stop)
            g.variables["draw"][start:stop] = np.arange(start, stop)
            for name, da in ds.data_vars.items():
                var = g.variables[name]
                var[:, start:stop] = encoded(da, var)


def truncate(path, num_draws):
    """Cut every group of the file back to its first ``num_draws`` draws."""
    import h5netcdf

    with h5netcdf.File(path, "a") as f:
        for group in GROUPS:
            if group in f.groups and f[group].dimensions["draw"].size != num_draws:
                f[group].resize_dimension("draw", num_draws)
