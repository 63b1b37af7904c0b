r"""Data sharded across devices and processes, not replicated: :class:`ShardedRows`.

A data set of :math:`N` rows is split into :math:`K` contiguous shares of :math:`N/K` rows,
one per device of a one-axis mesh (:func:`~numpyro_sgrld.data.sharding.data_mesh`), and each
process holds only the shares of its own devices (:func:`shard_rows`, which builds the global
array with ``jax.make_array_from_process_local_data``). The model is unchanged: it indexes the
rows with its plate's indices, ``X[idx]``.

**The minibatch is stratified**: :math:`n/K` indices drawn uniformly from each share
(:func:`stratified_indices`), the :math:`k`-th block of the index vector in the :math:`k`-th
share. The potential's estimator keeps the plate's :math:`N/n` scaling and stays unbiased:

.. math::
    \mathbb E\Big[\frac{N}{n}\sum_{k=1}^{K}\sum_{i\in B_k}\ell_i\Big]
    = \sum_{k=1}^{K}\frac{N}{n}\,\frac{n}{K}\,\frac{K}{N}\sum_{i\in S_k}\ell_i
    = \sum_{i=1}^{N}\ell_i,

for shares :math:`S_k` of :math:`N/K` rows and blocks :math:`B_k` of :math:`n/K` draws. Each
device gathers its block from its own share (:func:`jax.shard_map`: no row leaves its
device), the likelihood of the minibatch is computed where its rows are, and the sum over the
minibatch is the collective that XLA's SPMD partitioner inserts. A full-data pass (control
variates' centre, the data checks) indexes with ``arange(N)``, whose blocks are the shares
themselves: it too runs shard by shard. The set-up's runs of the model (its trace, the search
for initial values) index with :math:`\lfloor iN/n\rfloor`, :math:`i = 0..n-1`
(:func:`~numpyro_sgrld.data.subsample.spread_indices`), and a network's evaluation batch with
evenly spaced rows (:func:`~numpyro_sgrld.verdict.evaluation.evaluation_indices`): for
:math:`K` dividing :math:`n` and :math:`N`, their :math:`k`-th block of :math:`n/K` lies in
the :math:`k`-th share too.

The kernels only index with such vectors. An index outside its block's share cannot be
gathered locally: its row reads as NaN (integer rows: the type's minimum, which no count or
class label takes; boolean rows have no value to spare and rely on the float rows of the same
draw), so a potential computed from it is not finite and the kernels reject the step
(``diverging``), never using a wrong row; a model whose distributions validate their
arguments (NumPyro's default) would refuse it outright, which is why no pass of the kernel
reads outside the shares.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from numpyro_sgrld.data.subsample import uniform_indices

__all__ = ["ShardedRows", "plan", "shard_rows", "sharded_leaves", "strata_of",
           "stratified_indices"]


@jax.tree_util.register_pytree_node_class
class ShardedRows:
    """Rows split across the devices of a one-axis ``mesh`` (a global ``array`` sharded on
    its first axis): index it with a stratified index vector (:func:`stratified_indices`),
    ``rows[idx]``, as a model indexes its data. ``shape``, ``dtype``, ``ndim`` and ``len`` are
    the global array's."""

    def __init__(self, array, mesh):
        self.array, self.mesh = array, mesh

    @property
    def axis(self):
        return self.mesh.axis_names[0]

    @property
    def num_shards(self):
        return int(self.mesh.devices.size)

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype

    @property
    def ndim(self):
        return self.array.ndim

    def __len__(self):
        return self.array.shape[0]

    def __getitem__(self, idx):
        if isinstance(idx, tuple) or jnp.ndim(idx) != 1:
            raise TypeError(
                "ShardedRows is indexed by one vector of row indices, rows[idx] (the plate's "
                f"indices); got {idx!r}. Index the gathered rows further: rows[idx][:, j].")
        if jnp.shape(idx)[0] % self.num_shards:
            raise ValueError(
                f"ShardedRows split into {self.num_shards} shares is indexed by "
                f"{jnp.shape(idx)[0]} rows, which do not split into them: every plate's "
                f"subsample_size must be a multiple of {self.num_shards}.")
        rows = self.shape[0] // self.num_shards

        def local(block, index):
            start = jax.lax.axis_index(self.axis) * rows
            offset = index - start
            inside = (offset >= 0) & (offset < rows)
            gathered = block[jnp.clip(offset, 0, rows - 1)]
            mask = inside.reshape(inside.shape + (1,) * (gathered.ndim - 1))
            if jnp.issubdtype(gathered.dtype, jnp.inexact):
                return jnp.where(mask, gathered, jnp.nan)
            if jnp.issubdtype(gathered.dtype, jnp.integer):
                return jnp.where(mask, gathered, jnp.iinfo(gathered.dtype).min)
            return gathered  # booleans have no value to spare: the float rows poison the step

        spec = PartitionSpec(self.axis)
        return jax.shard_map(local, mesh=self.mesh, in_specs=(spec, spec), out_specs=spec)(
            self.array, jnp.asarray(idx))

    def tree_flatten(self):
        return (self.array,), self.mesh

    @classmethod
    def tree_unflatten(cls, mesh, children):
        return cls(children[0], mesh)

    def __repr__(self):
        return f"ShardedRows(shape={self.shape}, dtype={self.dtype}, shards={self.num_shards})"


def shard_rows(local_rows, mesh):
    """:class:`ShardedRows` from this process's share: ``local_rows`` are the rows of this
    process's devices of ``mesh`` (a one-axis :class:`~jax.sharding.Mesh`), in device order;
    every process passes its own, each the same number of rows per device. With one process
    ``local_rows`` is the whole data set, split across its devices."""
    if not isinstance(mesh, Mesh) or len(mesh.axis_names) != 1:
        raise ValueError(
            f"`mesh` must be a one-axis jax.sharding.Mesh, got {mesh!r}: build one with "
            "numpyro_sgrld.data.sharding.data_mesh().")
    local_rows = np.asarray(local_rows)
    local_devices = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
    if local_rows.ndim == 0 or local_rows.shape[0] % max(local_devices, 1):
        raise ValueError(
            f"This process holds {local_devices} device(s) of the mesh, so its rows must split "
            f"evenly across them: got {local_rows.shape[0] if local_rows.ndim else 0} rows. "
            "Give every device the same number of rows (drop or repeat a few).")
    sharding = NamedSharding(mesh, PartitionSpec(mesh.axis_names[0]))
    return ShardedRows(jax.make_array_from_process_local_data(sharding, local_rows), mesh)


def sharded_leaves(tree):
    """The :class:`ShardedRows` among the leaves of ``tree`` (model arguments)."""
    return [x for x in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, ShardedRows))
            if isinstance(x, ShardedRows)]


def strata_of(tree):
    """The number of shares of the :class:`ShardedRows` among the leaves of ``tree`` (model
    arguments; :func:`plan` holds them to one mesh), ``None`` without them."""
    sharded = sharded_leaves(tree)
    return sharded[0].num_shards if sharded else None


def stratified_indices(key, num_shards, subsample_size, size):
    """``subsample_size`` indices of ``0..size-1``: ``subsample_size / num_shards`` uniform
    draws from each of the ``num_shards`` contiguous shares of ``size / num_shards`` rows, the
    ``k``-th block from the ``k``-th share (one call of the bit generator)."""
    per_share, rows = subsample_size // num_shards, size // num_shards
    local = uniform_indices(key, (num_shards, per_share), rows)
    return (local + rows * jnp.arange(num_shards, dtype=jnp.int32)[:, None]).reshape(-1)


def plan(model_args, index_sharding, plates, batching):
    """``(index_sharding, strata)`` of a kernel whose model arguments hold :class:`ShardedRows`:
    the minibatch split over the data's mesh and drawn in ``strata`` shares (``None``
    without sharded data: the kernel's own ``index_sharding``, uniform draws). Refuses what
    cannot be stratified, naming the fix."""
    sharded = sharded_leaves(model_args)
    if not sharded:
        return index_sharding, None
    meshes = {id(x.mesh): x.mesh for x in sharded}
    if len(meshes) > 1:
        raise ValueError("The model's ShardedRows are split over different meshes: build them "
                         "all with shard_rows(..., mesh) on one mesh.")
    mesh = sharded[0].mesh
    if index_sharding is not None and index_sharding.mesh != mesh:
        raise ValueError("`data_parallel` names another mesh than the model's ShardedRows: "
                         "leave data_parallel=None (the data's mesh is used) or give that mesh.")
    if batching != "replacement":
        raise ValueError(f"batching={batching!r} is not available with ShardedRows: each step "
                         "draws its minibatch share by share, with replacement. Use "
                         "batching='replacement'.")
    k = int(mesh.devices.size)
    for plate in plates:
        if plate.size % k or plate.subsample_size % k:
            raise ValueError(
                f"Plate '{plate.name}' (size {plate.size}, subsample_size "
                f"{plate.subsample_size}) does not split into the {k} shares of the "
                f"ShardedRows: both must be multiples of {k}.")
    for x in sharded:
        if x.shape[0] not in {plate.size for plate in plates}:
            raise ValueError(
                f"ShardedRows of {x.shape[0]} rows is not the data of a subsample plate "
                f"(sizes {[p.size for p in plates]}): shard the rows a plate indexes.")
    return NamedSharding(mesh, PartitionSpec(mesh.axis_names[0])), k
