"""The ``sgrld`` command (:mod:`~numpyro_sgrld.app.cli`): its problems
(:mod:`~numpyro_sgrld.app.problems`), the comparison of every kernel with the reference
(:mod:`~numpyro_sgrld.app.compare`), the race to a stated accuracy
(:mod:`~numpyro_sgrld.app.time_to_accuracy`), the report (:mod:`~numpyro_sgrld.app.report`)
and the quick start (:mod:`~numpyro_sgrld.app.quickstart`)."""
