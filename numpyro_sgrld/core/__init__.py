"""The step's pieces, knowing nothing of NumPyro: the helpers (argument checks, pytree
arithmetic, traits, schedules), the metrics (:mod:`~numpyro_sgrld.core.metrics`), the
integrators (:mod:`~numpyro_sgrld.core.integrators`), the gradient estimators
(:mod:`~numpyro_sgrld.core.gradients`), the Γ correction
(:mod:`~numpyro_sgrld.core.correction`), their composition into an
:class:`~numpyro_sgrld.core.algorithm.Algorithm` and its step, the chain's state and the
equipartition sums. The modules users import are also attributes of the package's top
(``numpyro_sgrld.metrics``, ``.integrators``, ``.gradients``, ``.correction``, ``.schedules``,
``.equipartition``)."""
