"""The named kernels, presets of :class:`~numpyro_sgrld.SGMCMC`: one table
(:mod:`~numpyro_sgrld.presets.table`) and their docstrings
(:mod:`~numpyro_sgrld.presets.docs`, :mod:`~numpyro_sgrld.presets.momentum_docs`)."""
