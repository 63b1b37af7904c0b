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
