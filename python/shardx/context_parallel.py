"""Context parallelism's causal load balancing: the zig-zag order.

Split in its rows' order over ``n`` ranks, a causal attention's sequence
gives rank ``n - 1`` about twice the mean work (its queries see every key)
and rank 0 little. torchtitan and PyTorch's ``context_parallel`` balance it
by reordering the sequence before the split ("head-tail", or zig-zag): the
``2n`` chunks of the sequence go to ranks so that rank ``r`` holds chunks
``r`` and ``2n - 1 - r``, whose causal work sums to the same for every rank.

In ShardX the reorder is the data's, as in PyTorch: the tensors whose rows
are sequence positions are reordered once (``zigzag``) and split with
``Shard(d)`` as before; the step is compiled under ``sequence_order``
(``shardx.compile(..., sequence_order=zigzag_order(length, n))``), which
makes every causal ``scaled_dot_product_attention`` mask by the positions
the rows hold. Anything else that reads positions (rotary angles from
``torch.arange``) must read the reordered positions instead, as PyTorch's
``context_parallel`` needs ``freqs_cis`` among its buffers. The ring
attention pass (docs/Rules.md, "Ring attention") reads the positions and
computes only the pieces of each block that the mask shows.

    order = zigzag_order(seq, ranks)
    step = shardx.compile(fn, mesh, in_placements, sequence_order=order)
    loss = step(zigzag(x, 1, ranks), zigzag(y, 1, ranks), order)
"""

from __future__ import annotations

import torch

from .importer.attention import sequence_order

__all__ = ["zigzag_order", "zigzag", "unzigzag", "sequence_order"]


def zigzag_order(length: int, ranks: int) -> torch.Tensor:
    """The positions a zig-zag split over ``ranks`` puts at each row: the
    ``2 * ranks`` chunks of ``length`` positions in the order 0, 2n-1, 1,
    2n-2, ..., so that ``Shard`` over ``ranks`` gives rank ``r`` chunks
    ``r`` and ``2n - 1 - r``. ``length`` must be a multiple of ``2 * ranks``."""
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"zigzag_order: ranks must be a positive int, got {ranks!r}")
    if isinstance(length, bool) or not isinstance(length, int) or length < 1 or \
            length % (2 * ranks):
        raise ValueError(f"zigzag_order: {length!r} positions do not split into "
                         f"2 x {ranks} equal chunks")
    chunk = length // (2 * ranks)
    chunks = []
    for r in range(ranks):
        chunks += [r, 2 * ranks - 1 - r]
    return torch.cat([torch.arange(c * chunk, (c + 1) * chunk) for c in chunks])


def zigzag(t: torch.Tensor, dim: int, ranks: int) -> torch.Tensor:
    """``t`` with its ``dim`` reordered as ``zigzag_order``: row ``i`` is
    ``t``'s row ``zigzag_order(...)[i]``."""
    return t.index_select(dim, zigzag_order(t.shape[dim], ranks).to(t.device))


def unzigzag(t: torch.Tensor, dim: int, ranks: int) -> torch.Tensor:
    """The inverse of ``zigzag``: ``t``'s rows back in their positions' order."""
    order = zigzag_order(t.shape[dim], ranks).to(t.device)
    return t.index_select(dim, torch.argsort(order))
