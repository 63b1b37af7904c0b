"""What a run's draws are read with: comparisons with a reference
(:mod:`~numpyro_sgrld.analysis.diagnostics`, :mod:`~numpyro_sgrld.analysis.distances`), ArviZ
``InferenceData`` (:mod:`~numpyro_sgrld.analysis.inference_data`), figures
(:mod:`~numpyro_sgrld.analysis.plots`), posterior predictive
(:mod:`~numpyro_sgrld.analysis.predictive`, :mod:`~numpyro_sgrld.analysis.function_space`),
streamed runs and checkpoints (:mod:`~numpyro_sgrld.analysis.streaming`,
:mod:`~numpyro_sgrld.analysis.accumulators`, :mod:`~numpyro_sgrld.analysis.checkpoint`), and
the baselines (:mod:`~numpyro_sgrld.analysis.baselines`)."""
