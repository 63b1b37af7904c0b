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
