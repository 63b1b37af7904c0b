"""Traits: what a module other than the step reads from a metric or an integrator.

A :class:`~numpyro_sgrld.core.metrics.Metric` is ``init`` and ``update`` (what the step calls) and
an :class:`~numpyro_sgrld.core.integrators.Integrator` ``init`` and ``step``; everything else that
some other part of the library needs to know about one is a *trait*, a small ``NamedTuple``
in its ``traits`` tuple, declared by the module that reads it (or, where that module sits in a
higher layer, by the lowest module both can import) and absent where it does not apply:

==========================================  ===============================================
trait                                        read by
==========================================  ===============================================
:class:`numpyro_sgrld.core.correction.Lag`        the Γ correction (the statistic's decay, order)
:class:`numpyro_sgrld.core.correction.NoLag`      the Γ correction (why it does not apply)
``metrics.Averages``                         the acceptance policy (state finite with grad)
``metrics.Aux``                              model set-up; ``step_size=None`` (not whitened)
``metrics.WarmStart``                        the sampler's initialisation
``metrics.Restart``                          warm-up (a constant part it learns)
``metrics.AdaptsUntil``                      the kernel's ``init`` (a warm-up too short)
``integrators.BiasLaw``                      step-size adaptation (the bias law, a cap)
``integrators.StepHint``                     step-size adaptation (where there is no law)
``integrators.Rescale``                      warm-up (the state when the step changes)
``integrators.Settle``                       warm-up's end (a thermostat's equilibrium)
``integrators.Overdamp``                     warm-up's approach (a fresh momentum each step)
``integrators.NeedsConstantMetric``          the composition (only a constant metric)
``integrators.PendingKick``                  SG-MCMC within Gibbs (a closing kick carried)
``metrics.Constant``                         the composition; ``step_size=None`` (not whitened)
:class:`numpyro_sgrld.core.correction.GammaBias`  the verdict's advice (a Γ its adaptation leaves)
==========================================  ===============================================
"""

__all__ = ["trait"]


def trait(holder, kind):
    """The trait of type ``kind`` in ``holder.traits`` (a metric's or an integrator's), or
    ``None`` where it has none."""
    return next((t for t in holder.traits if isinstance(t, kind)), None)
