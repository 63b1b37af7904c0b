"""Validation of numeric arguments: Python, NumPy and JAX scalars alike.

A user passes ``decay=np.float32(0.95)``, ``num_data=X.shape[0]`` (a Python int) or
``num_data=jnp.size(y)`` (a 0-d JAX array) and means the same number; all are accepted. Bools
are refused (``True`` is an ``int`` to Python, never a decay or a step count), and so are traced
values (a hyperparameter must be known when the kernel is built).
"""

import math
import numbers

import jax
import numpy as np

__all__ = ["real", "integer"]


def as_scalar(value):
    """``value`` as a Python number, or ``None`` when it is not a real scalar."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, jax.core.Tracer):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0:
        kind = np.asarray(value).dtype.kind
        if kind in "iu":
            return int(value)
        if kind == "f":
            return float(value)
    return None


def real(value, name, *, low=None, high=None, low_open=False, high_open=False, hint=""):
    """A finite real number in the given range, returned as a ``float``.

    ``low``/``high`` are the bounds (``None``: unbounded), ``*_open`` whether they are
    excluded. The error names the argument, the value, the range and ``hint``.
    """
    number = as_scalar(value)
    ok = number is not None and math.isfinite(number)
    if ok and low is not None:
        ok = number > low if low_open else number >= low
    if ok and high is not None:
        ok = number < high if high_open else number <= high
    if not ok:
        lo = "(" if low_open else "["
        hi = ")" if high_open else "]"
        span = f"{lo}{'-inf' if low is None else low}, {'inf' if high is None else high}{hi}"
        raise ValueError(
            f"`{name}` must be a finite number in {span}, got {value!r}"
            + (f" ({type(value).__name__})" if number is None and value is not None else "")
            + f".{(' ' + hint) if hint else ''}"
        )
    return float(number)


def integer(value, name, *, low=1, hint=""):
    """An integer ``>= low`` (Python, NumPy or 0-d JAX integer; not a bool or a float)."""
    number = as_scalar(value)
    if isinstance(number, float) or number is None or number < low:
        raise ValueError(
            f"`{name}` must be an integer >= {low}, got {value!r}"
            + (" (a float: write it as an int)" if isinstance(number, float) else "")
            + f".{(' ' + hint) if hint else ''}"
        )
    return int(number)


def field_names(state):
    """The names ``extra_fields`` can take from ``state``: its fields, and those of the
    ``NamedTuple`` fields it reads through (a ``chain``)."""
    inner = getattr(state, "chain", None)
    return list(getattr(inner, "_fields", ())) + list(state._fields)


def named_field_lookup(self, key):
    """``__getitem__`` of a state ``NamedTuple``: integer indices as usual; a string, which
    NumPyro's ``extra_fields`` look-up tries after ``getattr`` fails, is a field the state does
    not have: say which fields it has."""
    if isinstance(key, str):
        raise ValueError(
            f"The stochastic-gradient kernels' {type(self).__name__} has no field {key!r}: it "
            f"has the fields {field_names(self)}; `extra_fields` must name some of them (NUTS "
            "fields such as accept_prob, num_steps or adapt_state do not exist here; the "
            "kernel's own state is e.g. 'sampler_state.integrator.momentum' or "
            "'sampler_state.metric.square_avg')."
        )
    return tuple.__getitem__(self, key)


class FlagError(TypeError, ValueError):
    """A flag argument that is not ``True`` or ``False``: a ``TypeError`` (the wrong type) and,
    like the other argument checks here, a ``ValueError``."""


def flag(value, name):
    """``value`` as a ``bool`` when it is one (Python or NumPy); otherwise
    :class:`FlagError` naming the argument and the value."""
    if not isinstance(value, (bool, np.bool_)):
        raise FlagError(f"`{name}` must be True or False, got {value!r}.")
    return bool(value)


class ModelSetupError(ValueError):
    """A model, its arguments or its data cannot be sampled as given."""
