"""``shardx::random_bits`` (importer/rng.py: the random ops' generator) as
one ``linalg.generic``: SplitMix64 of each element's counter under the
seed, the counter from the element's row-major index in the whole tensor
(``linalg.index``, global after partitioning: a rank draws its own part of
the unsharded run's numbers)."""

from __future__ import annotations

import torch

from .. import rng
from ..body import Body
from ..registry import _out, handles


@handles(torch.ops.shardx.random_bits.default)
def _random_bits(imp, node, args, kwargs):
    seed, stream = args[0], args[1]
    shape, dtype = _out(node)
    r = len(shape)
    t = torch.int64

    def body(b: Body, a, out):
        c = lambda v: b.const(v, t)

        def shr(x, k):
            return b.v(f"arith.shrui {x}, {c(k)} : i64")
        # The row-major index, then the counter.
        index = c((stream << rng.STREAM_SHIFT) + 1)
        stride = 1
        for d in reversed(range(r)):
            i = b.v(f"arith.index_cast {b.v(f'linalg.index {d} : index')} : index to i64")
            index = b.binary("add", index, b.binary("mul", i, c(stride), t), t)
            stride *= shape[d]
        z = b.binary("add", a[0], b.binary("mul", index, c(rng._GOLDEN), t), t)
        z = b.binary("mul", b.binary("xor", z, shr(z, 30), t), c(rng._MIX1), t)
        z = b.binary("mul", b.binary("xor", z, shr(z, 27), t), c(rng._MIX2), t)
        return b.binary("xor", z, shr(z, 31), t)
    return imp.em.generic(shape, dtype, [(seed, [])], ["parallel"] * r,
                          [f"d{d}" for d in range(r)], body)
