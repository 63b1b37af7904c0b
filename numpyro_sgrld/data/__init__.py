"""Where a kernel's minibatches come from: subsample plates and their draws
(:mod:`~numpyro_sgrld.data.subsample`), rows kept on the host and read per minibatch
(:mod:`~numpyro_sgrld.data.host_data`, :mod:`~numpyro_sgrld.data.row_order`,
:mod:`~numpyro_sgrld.data.row_reader`), rows sharded across devices and processes
(:mod:`~numpyro_sgrld.data.sharding`, :mod:`~numpyro_sgrld.data.sharded_data`), and the checks
of the data a model is given (:mod:`~numpyro_sgrld.data.checks`)."""
