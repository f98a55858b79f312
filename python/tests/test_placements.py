"""Placements written by the Python API mean in ShardX what they mean in
DTensor: each rank's shard printed by shardx-opt (C++ canonical form) is the
one DTensor's own sharding code gives for the same placements."""

import itertools
import re
import subprocess

import pytest
import torch
from torch.distributed.tensor import Partial as TPartial, Replicate as TReplicate, Shard as TShard
from torch.distributed.tensor._utils import _get_shard_size_and_offsets
from torch.distributed.tensor.placement_types import _StridedShard

import shardx
from shardx import Mesh, Partial, Replicate, Shard, StridedShard
from shardx.artifact import find_tool


def to_torch(p):
    if isinstance(p, StridedShard):
        return _StridedShard(p.dim, split_factor=p.split_factor)
    if isinstance(p, Shard):
        return TShard(p.dim)
    if isinstance(p, Partial):
        return TPartial(p.op)
    return TReplicate()


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


def shardx_indices(mesh, shape, placements):
    text = mesh.op_text() + "\n" + (
        f"func.func @f(%x: {'tensor<' + 'x'.join(map(str, shape)) + 'xf32>'} "
        f"{{shardx.layout = {shardx.layout_text(mesh, placements, len(shape))}}}) {{\n  return\n}}\n")
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


CASES = [
    ((4,), (7, 3), [Shard(0)]),
    ((2, 2), (5, 3), [Shard(0), Shard(0)]),
    ((2, 2), (8, 4), [StridedShard(0, 2), Shard(0)]),
    ((2, 2), (12, 4), [StridedShard(0, 2), Shard(0)]),
    ((2, 3), (12, 5), [StridedShard(0, 3), Shard(0)]),
    ((2, 2), (6, 4), [Shard(1), Shard(0)]),
    ((2, 2), (8, 6), [Partial("sum"), Shard(1)]),
    ((2, 2, 2), (16, 4), [StridedShard(0, 4), Shard(0), Shard(0)]),
    ((2, 2, 2), (8, 8), [Shard(0), Replicate(), Shard(1)]),
    ((3,), (4,), [Shard(0)]),
]


@pytest.mark.parametrize("mesh_shape,shape,placements", CASES,
                         ids=[f"{'x'.join(map(str, m))}-{'x'.join(map(str, s))}-{p}" for m, s, p in CASES])
def test_local_shards_match_dtensor(mesh_shape, shape, placements):
    mesh = Mesh(mesh_shape)
    got = shardx_indices(mesh, shape, placements)
    tp = [to_torch(p) for p in placements]
    assert len(got) == mesh.size
    for coord in itertools.product(*[range(s) for s in mesh_shape]):
        assert got[coord] == dtensor_indices(shape, mesh_shape, coord, tp), coord


def test_canonical_round_trip():
    """Two spellings of one layout print as one canonical attribute."""
    mesh = Mesh((2, 2), ("dp", "tp"))
    a = shardx.layout_text(mesh, [StridedShard(0, 2), Shard(0)], 2)
    text = (mesh.op_text() + f"\nfunc.func @f(%x: tensor<8x8xf32> {{shardx.layout = {a}}}) {{\n  return\n}}\n")
    out = subprocess.run([find_tool("shardx-opt"), "-"], input=text, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "#shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}>" in out.stdout


def test_mesh_op_text():
    assert Mesh((2, 4), ("dp", "tp")).op_text() == 'shardx.mesh @mesh(shape = 2x4, axes = ["dp", "tp"])'
