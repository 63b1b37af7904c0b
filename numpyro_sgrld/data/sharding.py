r"""Data parallelism: one minibatch gradient computed on several devices.

The minibatch potential is a sum over the ``n`` drawn data points,

.. math::
    \hat U(\theta) = -\log p(\theta) - \frac{N}{n}\sum_{i \in B}\log p(y_i \mid \theta),

so with the index set :math:`B` split into equal shares :math:`B_1, \dots, B_K` (one per device)
its gradient is :math:`\nabla\hat U = -\nabla\log p(\theta) - \frac{N}{n}\sum_k\sum_{i\in B_k}
\nabla\log p(y_i\mid\theta)`: each device differentiates its share and the shares are summed
(an all-reduce). Nothing here writes that by hand: the kernels constrain the drawn indices to a
:class:`jax.sharding.NamedSharding` over a one-axis mesh and XLA's SPMD partitioner propagates
the split through ``X[idx]``, the likelihood and its gradient. The same code runs on the CPU
(``XLA_FLAGS=--xla_force_host_platform_device_count=K``), on the GPUs of one host, and across
hosts after ``jax.distributed.initialize()`` (``jax.devices()`` then lists every process's
devices).
"""

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from numpyro_sgrld.data.host_data import HostRows
from numpyro_sgrld.data.row_order import shuffled_rows
from numpyro_sgrld.data.sharded_data import ShardedRows, shard_rows

__all__ = ["HostRows", "ShardedRows", "data_mesh", "index_sharding", "check_divisible",
           "shard_rows", "shuffled_rows"]


def data_mesh(devices=None, axis_name="data"):
    """A one-axis :class:`~jax.sharding.Mesh` over ``devices`` (default: all ``jax.devices()``)."""
    devices = jax.devices() if devices is None else list(devices)
    if not devices:
        raise ValueError("`data_parallel` got an empty list of devices.")
    return Mesh(np.asarray(devices), (axis_name,))


def index_sharding(data_parallel):
    """The sharding of the minibatch indices for a kernel's ``data_parallel`` argument (``None``
    for one device)."""
    if data_parallel is None or data_parallel is False:
        return None
    if data_parallel is True:
        mesh = data_mesh()
    elif isinstance(data_parallel, Mesh):
        mesh = data_parallel
        if len(mesh.axis_names) != 1:
            raise ValueError(
                f"`data_parallel` needs a one-axis Mesh, got axes {mesh.axis_names}; build one "
                "with numpyro_sgrld.data.sharding.data_mesh(devices)."
            )
    elif isinstance(data_parallel, (list, tuple)):
        mesh = data_mesh(data_parallel)
    else:
        raise TypeError(
            "`data_parallel` must be None, True (all devices), a sequence of devices or a "
            f"one-axis jax.sharding.Mesh, got {data_parallel!r}."
        )
    if mesh.devices.size == 1:
        return None
    return NamedSharding(mesh, PartitionSpec(mesh.axis_names[0]))


def num_shards(sharding):
    return 1 if sharding is None else int(sharding.mesh.devices.size)


def check_divisible(plates, sharding):
    """Every subsample size must split evenly across the devices."""
    k = num_shards(sharding)
    for plate in plates:
        if plate.subsample_size % k:
            raise ValueError(
                f"Plate '{plate.name}' has subsample_size={plate.subsample_size}, which does not "
                f"split evenly across the {k} devices of `data_parallel`. Use a multiple of {k} "
                f"(e.g. {(plate.subsample_size // k + 1) * k})."
            )
    if k > 1 and not plates:
        raise ValueError(
            "`data_parallel` splits the minibatch of subsample plates, but the model has none: "
            "add numpyro.plate(..., subsample_size=n), or leave data_parallel=None."
        )
