"""Networks as NumPyro sites (:mod:`~numpyro_sgrld.bridges.haiku`,
:mod:`~numpyro_sgrld.bridges.nnx` for Flax NNX, :mod:`~numpyro_sgrld.bridges.equinox`) and the
priors of their weights (:mod:`~numpyro_sgrld.bridges.priors`,
:mod:`~numpyro_sgrld.bridges.conv_priors`)."""
