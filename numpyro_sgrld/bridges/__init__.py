"""Networks as NumPyro sites (Haiku, Flax NNX, Equinox) and the priors of their weights. Its
public modules are re-exported at ``numpyro_sgrld.haiku``, ``.nnx``, ``.equinox``, ``.priors``
and ``.conv_priors``."""
