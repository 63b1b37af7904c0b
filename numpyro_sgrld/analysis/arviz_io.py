"""ArviZ 0.23 and ArviZ 1.x behind one set of helpers.

ArviZ 1.x (the ``arviz`` meta-package over ``arviz-base``, ``arviz-stats`` and
``arviz-plots``; Python >= 3.12) replaces ``arviz.InferenceData`` by xarray's ``DataTree``:
the same groups (``posterior``, ``sample_stats``, ...) as child nodes, ``from_dict`` taking one
dict of groups, no ``add_groups``/``concat``, statistics on a ``DataTree`` returning a
``DataTree``, and plots returning a ``PlotCollection`` instead of matplotlib axes. Everything in
the package that builds or reads ArviZ objects goes through here, so a user gets the object
their ArviZ works with: an ``InferenceData`` on ArviZ 0.x, a ``DataTree`` on ArviZ 1.x.
"""

import warnings

import numpy as np

__all__ = [
    "arviz",
    "major_version",
    "is_datatree",
    "number",
    "mcse",
    "ess",
    "rhat",
    "escape",
    "unescape",
    "site_name",
    "from_dict",
    "from_datasets",
    "from_netcdf",
    "group_names",
    "dataset",
    "set_group",
    "concat_draws",
    "stat_values",
    "figure_of",
]


def arviz():
    """The ``arviz`` module (imported on first use: it is slow to import)."""
    import arviz as az

    return az


def major_version():
    """ArviZ's major version (0 or 1)."""
    version = arviz().__version__
    return int("".join(c for c in version.split(".")[0] if c.isdigit()) or 0)


def is_datatree():
    """Whether the installed ArviZ works on xarray ``DataTree`` (ArviZ >= 1)."""
    return major_version() >= 1


def number(value):
    """A one-element result (a 0-d array, a shape-(1,) array, a NumPy scalar) as a Python
    float. ``float()`` of a shape-(1,) array is an error from NumPy 2.5 on."""
    return float(np.asarray(value, dtype=np.float64).reshape(()))


def mcse(draws, method="mean"):
    """ArviZ's ESS-based Monte Carlo standard error of ``draws`` (chain, draw), as a float."""
    return number(arviz().mcse(np.asarray(draws), method=method))


def ess(draws, method="bulk"):
    """ArviZ's effective sample size of ``draws`` (chain, draw), as a float."""
    return number(arviz().ess(np.asarray(draws), method=method))


def rhat(draws):
    """ArviZ's rank-normalised split R-hat of ``draws`` (chain, draw), as a float."""
    return number(arviz().rhat(np.asarray(draws)))


def escape(name):
    """A site name as a variable name of a ``DataTree`` (ArviZ 1.x) and of a NetCDF file:
    ``/`` (a network's ``"net/mlp/linear_0/w"``; a path separator to both) written as
    ``%2F``, and ``%`` as ``%25``."""
    return name.replace("%", "%25").replace("/", "%2F")


def unescape(name):
    """The site name of a variable name written by :func:`escape`."""
    return name.replace("%2F", "/").replace("%25", "%")


def site_name(name):
    """The site name of a variable of what :func:`from_dict` built: unescaped on ArviZ 1.x."""
    return unescape(name) if is_datatree() and isinstance(name, str) else name


def from_dict(**groups):
    """``{group: {name: array}}`` (groups that are ``None`` left out) as what the installed
    ArviZ works with: ``arviz.from_dict(**groups)`` on 0.x, ``arviz.from_dict(groups)`` (a
    ``DataTree``) on 1.x, whose variable names cannot hold ``/``: there the names are
    :func:`escape`-d (as in the NetCDF files), and :func:`site_name` gives them back. Arrays of
    the sampled groups lead with ``(chain, draw)``."""
    groups = {k: v for k, v in groups.items() if v is not None}
    az = arviz()
    if is_datatree():
        return az.from_dict(
            {g: {escape(k): v for k, v in data.items()} for g, data in groups.items()}
        )
    return az.from_dict(**groups)


def from_datasets(datasets):
    """``{group: xarray.Dataset}`` as an ``InferenceData`` (0.x) or a ``DataTree`` (1.x)."""
    if is_datatree():
        import xarray as xr

        return xr.DataTree.from_dict(dict(datasets))
    with warnings.catch_warnings():  # groups outside ArviZ's schema (ours) are wanted
        warnings.simplefilter("ignore", UserWarning)
        return arviz().InferenceData(**datasets)


def from_netcdf(path, lazy=True):
    """``arviz.from_netcdf(path)``: values read when used (``lazy``, the file kept open) or
    all now (the file closed). ArviZ 1.x's is ``xarray.open_datatree``; 0.x's reads
    ``rcParams["data.load"]``."""
    az = arviz()
    if is_datatree():
        tree = az.from_netcdf(str(path))
        if lazy:
            return tree
        with tree:
            return tree.load()
    with az.rc_context({"data.load": "lazy" if lazy else "eager"}):
        return az.from_netcdf(str(path))


def group_names(idata):
    """The names of ``idata``'s groups (``["posterior", "sample_stats", ...]``)."""
    groups = getattr(idata, "groups", None)
    if callable(groups):  # InferenceData
        return list(groups())
    return list(idata.children)  # DataTree


def dataset(idata, group):
    """The group ``group`` of ``idata`` as an ``xarray.Dataset``."""
    node = idata[group] if group in group_names(idata) else getattr(idata, group)
    return node.to_dataset() if hasattr(node, "to_dataset") and hasattr(node, "children") else node


def set_group(idata, group, data):
    """Put the ``xarray.Dataset`` ``data`` into ``idata`` as ``group`` (replacing one of that
    name), in place; returns ``idata``."""
    if callable(getattr(idata, "groups", None)):  # InferenceData
        with warnings.catch_warnings():  # a group outside ArviZ's schema, ours by design
            warnings.simplefilter("ignore", UserWarning)
            if group in idata.groups():
                del idata[group]
            idata.add_groups({group: data})
    else:
        idata[group] = data
    return idata


def concat_draws(parts):
    """Runs of the same chains one after another (``parts``, each an ``InferenceData`` or a
    ``DataTree`` with the same groups) joined along ``draw``, draws renumbered; a group without
    draws (the warm-up's ``adaptation``, the same in every continued run, and the
    ``equipartition`` readings, which the last run's state holds for all of them) is the last
    run's (``arviz.concat`` refuses it)."""
    if len(parts) == 1:
        return parts[0]
    import xarray as xr

    joined = {}
    for group in group_names(parts[0]):
        sets = [dataset(p, group) for p in parts]
        if "draw" in sets[0].dims:
            ds = xr.concat(sets, dim="draw", join="outer")
            ds = ds.assign_coords(draw=np.arange(ds.sizes["draw"]))
        else:
            ds = sets[-1]
        joined[group] = ds
    return from_datasets(joined)


def stat_values(result):
    """Every value of an ArviZ statistic over a group (``az.ess(idata)``, ``az.rhat(idata)``:
    a ``Dataset`` on 0.x, a ``DataTree`` on 1.x) as one flat NumPy array."""
    if hasattr(result, "children") and hasattr(result, "to_dataset"):
        result = result.to_dataset()
    return np.concatenate([np.ravel(np.asarray(v)) for v in result.data_vars.values()])


def figure_of(plotted):
    """The matplotlib figure of what an ArviZ plot returned: axes (0.x) or a
    ``PlotCollection`` (1.x, its ``viz`` holding the figure as ``figure`` or ``chart``)."""
    viz = getattr(plotted, "viz", None)
    if viz is not None:
        for name in ("figure", "chart"):
            if name in getattr(viz, "data_vars", ()):
                return viz[name].item()
        raise TypeError(f"No figure in the PlotCollection's viz (variables {list(viz.data_vars)})")
    return np.ravel(plotted)[0].figure
