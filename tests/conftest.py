import importlib.util
from pathlib import Path

import jax
import pytest
from numpyro_sgrld.models._data import DataNotFoundError

jax.config.update("jax_platform_name", "cpu")


@pytest.fixture(scope="session")
def german_credit():
    from numpyro_sgrld.models.logistic_regression import load_german_credit

    try:
        return load_german_credit()
    except DataNotFoundError as err:
        pytest.skip(f"German credit data not available: {err}")


@pytest.fixture(scope="session")
def uci_concrete():
    from numpyro_sgrld.models.uci import load_uci_split

    try:
        return load_uci_split("concrete", 0)
    except DataNotFoundError as err:
        pytest.skip(f"UCI data not available: {err}")


def load_benchmark(name):
    """The script ``benchmarks/<name>.py`` as a module; skips the test when it is not there
    (an installed package without the benchmarks)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    if not path.exists():
        pytest.skip(f"{path} is not there (an installed package without the benchmarks)")
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
