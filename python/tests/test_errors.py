"""Bad calls raise clear Python exceptions."""

import pytest
import torch

import shardx
from shardx import Mesh, Partial, Replicate, Shard, StridedShard


def test_placements_wrong_length():
    mesh = Mesh((2, 2), ("dp", "tp"))
    with pytest.raises(shardx.PlacementError, match="1 placements for a mesh with 2 axes"):
        shardx.trace(lambda x: x * 2, (torch.randn(4, 4),), mesh=mesh, in_placements=[[Shard(0)]])


def test_shard_dim_out_of_range():
    mesh = Mesh((2,), ("tp",))
    with pytest.raises(shardx.PlacementError, match=r"S\(2\) on mesh axis 'tp' is out of range"):
        shardx.trace(lambda x: x * 2, (torch.randn(4, 4),), mesh=mesh, in_placements=[[Shard(2)]])


def test_placements_count_mismatch():
    mesh = Mesh((2,), ("tp",))
    with pytest.raises(shardx.PlacementError, match="2 input placements for 1 input tensors"):
        shardx.trace(lambda x: x, (torch.randn(4),), mesh=mesh, in_placements=[[Shard(0)], [Replicate()]])


def test_bad_placement_values():
    with pytest.raises(shardx.PlacementError, match="Partial op"):
        Partial("mean")
    with pytest.raises(shardx.PlacementError, match="split_factor"):
        StridedShard(0, 0)
    with pytest.raises(shardx.PlacementError, match="axis names"):
        Mesh((2, 2), ("dp",))


def test_placements_without_mesh():
    with pytest.raises(shardx.PlacementError, match="without a mesh"):
        shardx.trace(lambda x: x, (torch.randn(4),), in_placements=[[Shard(0)]])


def test_unsupported_op_names_op_and_line():
    def f(x):
        return torch.special.bessel_j0(x)  # the user's line

    with pytest.raises(shardx.UnsupportedOpError) as info:
        shardx.trace(f, (torch.randn(4),))
    msg = str(info.value)
    assert "aten.special_bessel_j0" in msg
    assert "test_errors.py" in msg and "line" in msg


def test_non_tensor_input():
    with pytest.raises(shardx.TraceError, match="not a tensor"):
        shardx.trace(lambda x, n: x * n, (torch.randn(4), 3))
