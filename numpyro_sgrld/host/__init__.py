"""The NumPyro host: :class:`~numpyro_sgrld.SGMCMC` (a ``numpyro.infer.mcmc.MCMCKernel``),
the model's set-up, subsample plates and minibatch draws, the named presets, cyclical stages,
the kernels' own sampling loop, and the verdict at a run's end. Its public modules are
re-exported at ``numpyro_sgrld.kernels``, ``.subsample``, ``.sharding``, ``.verdict`` and
``.monitor``."""
