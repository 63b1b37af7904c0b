"""What the presets of :mod:`numpyro_sgrld.kernels` share: their docstrings' common
parameters and example (the coordinates an adaptive metric works in are chosen in
:mod:`numpyro_sgrld.warmup.choices`)."""

__all__ = ["COMMON", "example"]

#: The parameters every preset shares, for its docstring.
COMMON = """    :param model: NumPyro model (or ``potential_fn=``).
    :param step_size: :math:`h`, float > 0 or a schedule (:mod:`numpyro_sgrld.schedules`).
    :param kwargs: ``temperature``, ``num_data``, ``batching``, ``init_strategy``,
        ``potential_fn``, ``data_parallel``, ``gradient``, ``control_variate``, ``mode_steps``,
        ``start_at_centre``, ``check_proposal`` (see :class:`~numpyro_sgrld.SGMCMC`)."""


def example(name, args):
    """The docstring example of preset ``name`` built with ``args``."""
    return f"""
    Example::

        >>> import jax, numpyro, numpyro.distributions as dist
        >>> from numpyro.infer import MCMC
        >>> from numpyro_sgrld import {name}
        >>> def model():
        ...     numpyro.sample("theta", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
        >>> mcmc = MCMC({name}(model, {args}), num_warmup=100, num_samples=200,
        ...             progress_bar=False)
        >>> mcmc.run(jax.random.PRNGKey(0))
        >>> mcmc.get_samples()["theta"].shape
        (200, 3)
    """
