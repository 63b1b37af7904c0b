"""Whether a run's draws can be trusted: the verdict at a run's end
(:mod:`~numpyro_sgrld.verdict.judge`: R-hat, ESS, the equipartition check, a network's
evaluation batch), the advice it gives (:mod:`~numpyro_sgrld.verdict.advice`), the run it
judges as one value (:mod:`~numpyro_sgrld.verdict.run`), the streaming moments of a run
NumPyro's loop drives (:mod:`~numpyro_sgrld.verdict.monitor`), a network's evaluation batch
(:mod:`~numpyro_sgrld.verdict.evaluation`) and the warning for rejected steps
(:mod:`~numpyro_sgrld.verdict.step_rejections`)."""
