r"""posteriordb's ``sblrc-blr``: Bayesian linear regression with published reference moments.

.. math::
    \beta \sim \mathcal N(0, 10^2 I_5), \quad \sigma \sim \mathrm{HalfNormal}(10), \quad
    y_i \mid \beta, \sigma \sim \mathcal N(x_i^\top\beta, \sigma^2), \qquad N = 100.

The data and the reference moments (long, checked Stan runs) come from the shared data folder
(:mod:`numpyro_sgrld.models._data`); :func:`load` raises
:class:`~numpyro_sgrld.models._data.DataNotFoundError` when it is absent.
"""

import json
import zipfile

import numpy as np
import numpyro
import numpyro.distributions as dist

from ._data import data_path

__all__ = ["model", "load"]


def model(X, y=None, subsample_size=None):
    """``beta ~ N(0, 10)`` (one per column of ``X``), ``sigma ~ HalfNormal(10)``,
    ``y ~ N(X beta, sigma)``."""
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([X.shape[1]]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))
    with numpyro.plate("data", X.shape[0], subsample_size=subsample_size) as idx:
        numpyro.sample("y", dist.Normal(X[idx] @ beta, sigma), obs=None if y is None else y[idx])


def load():
    """``X`` (100 x 5), ``y`` (100,) as float32 NumPy arrays and the reference moments
    ``{"beta": {"mean", "sd"}, "sigma": {"mean", "sd"}}`` (sd from posteriordb's first and
    second moments)."""
    folder = data_path("posteriordb", "sblrc-blr")
    with zipfile.ZipFile(folder / "data.json.zip") as zf:
        data = json.loads(zf.read(zf.namelist()[0]))
    mean = np.asarray(json.loads((folder / "mean_value.json").read_text())["mean_value"])
    square = json.loads((folder / "mean_squared_value.json").read_text())["mean_squared_value"]
    sd = np.sqrt(np.asarray(square) - mean**2)
    moments = {"beta": {"mean": mean[:5], "sd": sd[:5]}, "sigma": {"mean": mean[5], "sd": sd[5]}}
    return np.asarray(data["X"], np.float32), np.asarray(data["y"], np.float32), moments
