"""The problems ``sgrld compare`` runs on: a subsampled model with its data, built on demand
(``PROBLEMS[name]()``), all from data that ship with the package or are generated."""

from functools import partial
from typing import Any, NamedTuple

from numpyro_sgrld.bridges.priors import init_to_unit_scales

__all__ = ["PROBLEMS", "NETWORK_PROBLEMS", "NETWORK_KERNELS", "Problem"]


class Problem(NamedTuple):
    """A model with its data."""

    description: str
    model: Any  # subsampled model
    args: tuple
    network: bool = False  # a network built with random_haiku_module (BNPSGLD applies)
    init_strategy: Any = None  # the SG kernels' init strategy (None: the kernels' default)
    name: str = "the model"  # what the report calls it


def _german_credit(subsample_size=100):
    from numpyro_sgrld.models import logistic_regression as lr

    X, y = lr.load_german_credit()
    return Problem(
        "Bayesian logistic regression on German credit (N = 1000, d = 25, w ~ N(0, I)), "
        f"minibatch {subsample_size}",
        partial(lr.model, subsample_size=subsample_size),
        (X, y),
        name="German credit",
    )


def _linear_regression(subsample_size=100):
    from numpyro_sgrld.models import linear_regression as lr

    X, y, _ = lr.make_data(seed=0, num_data=2000, num_features=5)
    return Problem(
        "Conjugate Bayesian linear regression (N = 2000, d = 5, synthetic), "
        f"minibatch {subsample_size}",
        partial(lr.model, subsample_size=subsample_size),
        (X, y),
        name="the linear regression",
    )


def _digits_mlp(subsample_size=100):
    from numpyro_sgrld.models import bnn

    X, y, _, _ = bnn.load_digits()
    return Problem(
        "Bayesian 64-16-10 ReLU MLP on scikit-learn's digits (N = 1438, Gaussian prior with He "
        f"scales, 1,210 parameters), minibatch {subsample_size}",
        partial(bnn.mlp_classifier, hidden=(16,), subsample_size=subsample_size),
        (X, y),
        network=True,
        init_strategy=init_to_unit_scales,
        name="the digits MLP",
    )


PROBLEMS = {
    "german_credit": _german_credit,
    "linear_regression": _linear_regression,
    "digits_mlp": _digits_mlp,
}
NETWORK_PROBLEMS = ("digits_mlp",)
#: Kernels that only apply to networks (a dense layer's inputs are what they read).
NETWORK_KERNELS = ("BNPSGLD",)
