"""The NumPyro kernel: :class:`~numpyro_sgrld.sampler.kernel.SGMCMC` (a
``numpyro.infer.mcmc.MCMCKernel``) and what it uses: the model's set-up
(:mod:`~numpyro_sgrld.sampler.model`, :mod:`~numpyro_sgrld.sampler.setup`,
:mod:`~numpyro_sgrld.sampler.potentials`), functions of explicit values
(:mod:`~numpyro_sgrld.sampler.parts`), the kernels' own sampling loop
(:mod:`~numpyro_sgrld.sampler.loop`, :mod:`~numpyro_sgrld.sampler.compat`,
:mod:`~numpyro_sgrld.sampler.loop_report`) and the verdict armed and run at a run's end
(:mod:`~numpyro_sgrld.sampler.run_verdict`)."""
