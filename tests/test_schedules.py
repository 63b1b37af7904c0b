import jax.numpy as jnp
import numpy as np
import pytest

from numpyro_sgrld.core.schedules import as_schedule, constant, cyclical, polynomial_decay


def test_constant():
    s = as_schedule(0.25)
    assert isinstance(s, constant)
    np.testing.assert_allclose(s(jnp.arange(5)), 0.25)


def test_polynomial_decay_formula():
    s = polynomial_decay(a=0.5, b=10.0, gamma=0.55)
    t = np.arange(0, 1000, 7)
    np.testing.assert_allclose(s(jnp.asarray(t)), 0.5 * (10.0 + t) ** -0.55, rtol=1e-6)


def test_cyclical_formula_of_zhang_et_al():
    s = cyclical(step_size=0.1, num_steps=100, num_cycles=4)
    t = np.arange(100)
    expected = 0.05 * (np.cos(np.pi * np.mod(t, 25) / 25) + 1)
    np.testing.assert_allclose(s(jnp.asarray(t)), expected, rtol=1e-5)
    assert float(s(0)) == pytest.approx(0.1) and float(s(25)) == pytest.approx(0.1)
    assert np.all(np.asarray(s(jnp.asarray(t))) > 0)


def test_user_callable_is_probed():
    as_schedule(lambda t: 1e-3 / (1.0 + t))
    with pytest.raises(ValueError):
        as_schedule(lambda t: 1e-3 * jnp.cos(t))
    with pytest.raises(ValueError):
        as_schedule("fast")
