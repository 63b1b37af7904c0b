"""The step's pieces, knowing nothing of NumPyro: the helpers (argument checks, pytree
arithmetic, traits, schedules), the metrics, the integrators, the gradient estimators, the Γ
correction, their composition into an :class:`~numpyro_sgrld.core._step.Algorithm` and its
step, the chain's state and the equipartition sums. Its public modules are re-exported at
``numpyro_sgrld.metrics``, ``.integrators``, ``.gradients``, ``.correction``, ``.schedules``
and ``.equipartition``."""
