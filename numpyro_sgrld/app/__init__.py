"""The ``sgrld`` command: its problems, the comparison of every kernel with the reference,
the race to a stated accuracy, the report. Its public modules are re-exported at
``numpyro_sgrld.problems``, ``.compare``, ``.time_to_accuracy``, ``.report`` and
``.quickstart``."""
