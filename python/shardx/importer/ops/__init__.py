"""The aten op handlers, one module per op family. Importing this package
registers every handler in ``HANDLERS`` (``..registry``).

- ``elementwise``: arithmetic, unary math, comparisons, casts, division modes
- ``reductions``: sums, means, max/min (with index), variance, cumsum, sorts
- ``linalg``: matmuls and 2-d convolutions (forward and backward)
- ``grouped``: ``_grouped_mm`` (dropless experts), ``bincount``, ``histc``
- ``moe_ops``: transformers' ``grouped_mm`` experts: its fallback grouped
  matmul custom ops, index_put without accumulation (the inverse permutation)
- ``pooling``: 2-d max and average pooling (forward and backward)
- ``shape``: views, permutes, broadcasts, slices, concat, padding, factories
- ``indexing``: embedding, gather, index, scatter, index_put
- ``optimizer``: ``_foreach_*`` lists, lerp, addcmul/addcdiv
- ``sharding``: ``shardx.constrain``
- ``attention``: ``shardx::attention`` and its gradient (the composite ops)
- ``adaptive_pool``: adaptive average and max pooling of any output size
- ``upsample``: ``F.interpolate``'s nearest backward and bilinear (ATen's tables)
- ``random``: ``shardx::random_bits``, the random ops' generator (importer/rng.py)
"""

from . import (adaptive_pool, attention, elementwise, grouped, indexing, linalg, moe_ops, optimizer, pooling,  # noqa: F401
               random, reductions, shape, sharding, upsample)
