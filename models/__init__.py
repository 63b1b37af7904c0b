"""Reference models with their ground truths, and data loaders (``numpyro_sgrld.models``)."""
