"""DTensor as the oracle for layouts: which global indices each rank holds
under DTensor placements (PyTorch's own sharding code) and under a ShardX
layout (printed by shardx-opt --shardx-test-local-shards)."""

import re
import subprocess

import torch
from torch.distributed.tensor import Partial as TPartial, Replicate as TReplicate, Shard as TShard
from torch.distributed.tensor._utils import _get_shard_size_and_offsets
from torch.distributed.tensor.placement_types import _StridedShard

from shardx import Partial, Replicate, Shard, StridedShard
from shardx.artifact import find_tool


def to_torch(p):
    """A ShardX placement as DTensor's."""
    if isinstance(p, StridedShard):
        return _StridedShard(p.dim, split_factor=p.split_factor)
    if isinstance(p, Shard):
        return TShard(p.dim)
    if isinstance(p, Partial):
        return TPartial(p.op)
    return TReplicate()


def from_torch(p):
    """A DTensor placement as ShardX's."""
    if isinstance(p, _StridedShard):
        return StridedShard(p.dim, p.split_factor)
    if isinstance(p, TShard):
        return Shard(p.dim)
    if isinstance(p, TPartial):
        return Partial(p.reduce_op)
    return Replicate()


def dtensor_indices(global_shape, mesh_shape, coord, placements):
    """Per tensor dim, the global indices this rank holds (DTensor's code)."""
    idx = {}
    local = list(global_shape)
    for mesh_dim, p in enumerate(placements):
        if not isinstance(p, (TShard, _StridedShard)):
            continue
        size, offs = _get_shard_size_and_offsets(local[p.dim], mesh_shape[mesh_dim], coord[mesh_dim], p,
                                                 idx.get(p.dim), global_shape[p.dim], False)
        local[p.dim] = size
        idx[p.dim] = offs if size else torch.tensor([], dtype=torch.long)
    return [sorted(idx[d].tolist()) if d in idx else list(range(n)) for d, n in enumerate(global_shape)]


def shardx_indices(mesh, shape, layout):
    """Per rank coordinate, per dim, the global indices a tensor of `shape`
    in the layout attribute text `layout` holds."""
    text = mesh.op_text() + "\n" + (
        f"func.func @f(%x: {'tensor<' + 'x'.join(map(str, shape)) + 'xf32>'} "
        f"{{shardx.layout = {layout}}}) {{\n  return\n}}\n")
    proc = subprocess.run([find_tool("shardx-opt"), "-", "--shardx-test-local-shards", "-o", "/dev/null",
                           "--mlir-print-op-on-diagnostic=false"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    ranks = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"\s*rank \(([\d, ]+)\): (.*) -> ", line)
        if not m:
            continue
        coord = tuple(int(c) for c in m.group(1).split(","))
        dims = []
        for part in m.group(2).split(" x "):
            ids = []
            for a, b in re.findall(r"\[(\d+), (\d+)\)", part):
                ids += range(int(a), int(b))
            dims.append(sorted(ids))
        ranks[coord] = dims
    return ranks
