"""Layouts ShardX propagates are the ones PyTorch DTensor gives.

DTensor runs on a fake process group (one process, no communication):
- reshapes of sharded tensors: the layout shardx-propagate gives the result
  holds, on every rank, the indices DTensor's view rules give (StridedShard
  with DTensor's split factor included); where DTensor refuses (an uneven
  flatten), ShardX reshards first instead of keeping a wrong layout;
- FSDP2 on a tensor-parallel MLP: the placements fully_shard gives the
  parameters are the ones the FSDP x TP programs in test/Programs and
  examples/ declare (their schedule is checked in
  test/Dialect/ShardX/Transforms/Propagation/traced-programs.test)."""

import itertools
import re
import subprocess

import pytest
import torch
import torch.nn as nn

from dtensor_oracle import dtensor_indices, from_torch, shardx_indices, to_torch
from shardx import Mesh, Replicate as R, Shard as S, layout_text, trace
from shardx_dev import examples
from shardx.artifact import find_tool


def device_mesh(shape, names):
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh("cpu", shape, mesh_dim_names=names)


# (mesh shape, global shape, placements, new shape)
RESHAPES = [
    ((2, 2), (4, 6, 8), [S(0), S(1)], (24, 8)),      # [S(0), _StridedShard(0, 2)]
    ((2, 2), (4, 6, 8), [S(0), S(1)], (192,)),
    ((2, 2), (4, 6, 8), [S(1), S(0)], (24, 8)),      # [_StridedShard(0, 4), S(0)]
    ((2, 2), (4, 6, 8), [S(0), S(2)], (4, 48)),      # [S(0), _StridedShard(1, 6)]
    ((2, 2), (8, 6), [S(1), R()], (48,)),            # [_StridedShard(0, 8), R]
    ((2, 2), (24, 8), [S(0), R()], (4, 6, 8)),
    ((2, 2), (24, 8), [S(0), R()], (2, 12, 8)),
    ((2, 2), (24, 8), [R(), S(0)], (6, 4, 8)),
    ((2, 2), (24, 8), [S(0), S(0)], (4, 6, 8)),
    ((4,), (8, 6), [S(0)], (48,)),
    ((4,), (2, 8, 4), [S(1)], (16, 4)),
]


def propagated_result_layout(text):
    """(result layout text, number of redistributes) after propagation."""
    proc = subprocess.run([find_tool("shardx-opt"), "-", "--shardx-propagate", "--shardx-insert-reshards",
                           "--shardx-verify-layouts"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"\) -> \(?tensor<[^>]*> \{shardx\.layout = (#shardx\.layout<.*?>)\}", proc.stdout)
    assert m, proc.stdout
    return m.group(1), proc.stdout.count("shardx.redistribute")


@pytest.mark.parametrize("mesh_shape,shape,placements,new_shape", RESHAPES,
                         ids=[f"{'x'.join(map(str, m))}-{'x'.join(map(str, s))}-{p}-to-{'x'.join(map(str, n))}"
                              for m, s, p, n in RESHAPES])
def test_reshape_layout_matches_dtensor(fake_world_module, mesh_shape, shape, placements, new_shape):
    from torch.distributed.tensor import distribute_tensor
    names = ("dp", "tp")[:len(mesh_shape)] if len(mesh_shape) == 2 else ("tp",)
    dmesh = device_mesh(mesh_shape, names)
    x = torch.randn(shape)
    expected = distribute_tensor(x, dmesh, [to_torch(p) for p in placements]).reshape(new_shape).placements

    mesh = Mesh(mesh_shape, names)
    text = trace(lambda t: t.reshape(new_shape), [x], mesh, [placements], None, name="view")
    layout, reshards = propagated_result_layout(text)
    assert reshards == 0, f"{layout}: the reshape needed a reshard DTensor does not"
    got = shardx_indices(mesh, new_shape, layout)
    want_text = layout_text(mesh, [from_torch(p) for p in expected], len(new_shape))
    for coord in itertools.product(*[range(s) for s in mesh_shape]):
        assert got[coord] == dtensor_indices(new_shape, mesh_shape, coord, expected), \
            f"rank {coord}: ShardX {layout}, DTensor {expected} ({want_text})"


def test_uneven_flatten_reshards(fake_world_module):
    """DTensor refuses to flatten 3 rows split over 2 ranks; ShardX makes the
    rows whole first (never a wrong layout)."""
    from torch.distributed.tensor import distribute_tensor
    dmesh = device_mesh((2, 2), ("dp", "tp"))
    x = torch.randn(3, 4)
    with pytest.raises(Exception, match="unevenly sharded"):
        distribute_tensor(x, dmesh, [to_torch(S(0)), to_torch(R())]).reshape(12)
    mesh = Mesh((2, 2), ("dp", "tp"))
    text = trace(lambda t: t.reshape(12), [x], mesh, [[S(0), R()]], None, name="view")
    layout, reshards = propagated_result_layout(text)
    assert reshards == 1
    got = shardx_indices(mesh, (12,), layout)
    # Whatever layout the result has, every rank's indices are a valid
    # shard of the 12 elements: together they cover them.
    assert sorted(set(i for dims in got.values() for i in dims[0])) == list(range(12))


def test_fsdp2_tp_placements(fake_world_module):
    """fully_shard over dp on a ColwiseParallel/RowwiseParallel MLP gives the
    placements the FSDP x TP programs declare, fc1's _StridedShard(0, 2)
    included."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    dmesh = device_mesh((2, 2), ("dp", "tp"))
    module = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
    parallelize_module(module, dmesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(module, mesh=dmesh["dp"])
    got = {n: [from_torch(p) for p in param.placements] for n, param in module.named_parameters()}
    assert got == examples.FSDP_TP_PLACEMENTS
