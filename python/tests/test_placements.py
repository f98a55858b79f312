"""Placements written by the Python API mean in ShardX what they mean in
DTensor: each rank's shard printed by shardx-opt (C++ canonical form) is the
one DTensor's own sharding code gives for the same placements."""

import itertools
import subprocess

import pytest

import shardx
from dtensor_oracle import dtensor_indices, shardx_indices, to_torch
from shardx import Mesh, Partial, Replicate, Shard, StridedShard
from shardx.artifact import find_tool


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
    got = shardx_indices(mesh, shape, shardx.layout_text(mesh, placements, len(shape)))
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
