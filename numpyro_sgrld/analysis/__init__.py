"""What a run's draws are read with: comparisons with a reference, distances, ArviZ
``InferenceData``, figures, posterior predictive, streamed runs and checkpoints, and the
baselines. Its public modules are re-exported at ``numpyro_sgrld.diagnostics``,
``.distances``, ``.inference_data``, ``.plots``, ``.predictive``, ``.streaming``,
``.accumulators``, ``.checkpoint`` and ``.baselines``."""
