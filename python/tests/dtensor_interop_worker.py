"""One rank of the DTensor round trips of test_dtensor_interop.py: a gloo
process group on CPU (RANK / WORLD_SIZE from the launcher or mpirun,
MASTER_ADDR / MASTER_PORT from the test). Every case makes a real DTensor,
turns it into a ShardedTensor and back, and checks exactly:
- the ShardedTensor's shard of this rank is the DTensor's local tensor;
- ``ShardedTensor.full()`` and ``to_dtensor().full_tensor()`` are the
  original tensor (Partial: the reduction of the terms);
- ``to_dtensor`` of a ShardedTensor scattered by ShardX gives DTensor's own
  local shards (those of ``distribute_tensor``) and placements.
Prints ``ok <case>`` per case; any failure exits non-zero.

    python dtensor_interop_worker.py threads   # under the test's launcher
    mpirun -np 4 python dtensor_interop_worker.py mpi
"""

import os
import sys
import traceback

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.distributed.tensor import Partial as TP, Replicate as TR, Shard as TS
from torch.distributed.tensor.placement_types import _StridedShard as TSS

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from shardx import Mesh, ShardedTensor  # noqa: E402
from shardx.dtensor import DTensorInteropError  # noqa: E402

BACKEND = sys.argv[1]
RANK = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
WORLD = int(os.environ.get("WORLD_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1")))
FAILED = []


def case(name):
    def wrap(fn):
        def run(*args):
            label = f"{name}{args}" if args else name
            try:
                fn(*args)
                print(f"[ok] {label}", flush=True)
            except Exception:
                FAILED.append(label)
                print(f"FAIL {label} on rank {RANK}:\n{traceback.format_exc()}", flush=True)
        return run
    return wrap


def tensor(shape, seed, dtype=torch.float32):
    """Integer-valued (sums exact in any order), the same on every rank."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-8, 9, shape, generator=g)
    return x.to(dtype) if dtype != torch.bool else x > 0


def same(a, b, what):
    a = a.view(torch.int16) if a.dtype == torch.bfloat16 else a
    b = b.view(torch.int16) if b.dtype == torch.bfloat16 else b
    assert a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(a, b), \
        f"{what}: {a} != {b}"


def numpy_of(st_array, dtype):
    t = torch.from_numpy(np.array(st_array))
    return t.view(torch.bfloat16) if dtype == torch.bfloat16 else t


def my_rank(st):
    """This process's ShardX rank of ``st``'s mesh (its DeviceMesh coordinate)."""
    return RANK


def check_round_trip(dt, want, mesh=None):
    """dt -> ShardedTensor -> DTensor against ``want`` (the global value)."""
    st = ShardedTensor.from_dtensor(dt, mesh, backend=BACKEND)
    coord = dt.device_mesh.get_coordinate()
    rank = int(np.ravel_multi_index(coord, tuple(dt.device_mesh.mesh.shape)))
    same(numpy_of(st.local(rank), want.dtype), dt.to_local(), "ShardX's shard vs DTensor's local")
    same(numpy_of(st.full(), want.dtype), want, "from_dtensor(...).full()")
    back = st.to_dtensor(dt.device_mesh)
    assert tuple(back.placements) == tuple(dt.placements), (back.placements, dt.placements)
    same(back.to_local(), dt.to_local(), "to_dtensor's local")
    same(back.full_tensor(), want, "to_dtensor().full_tensor()")
    return st


def check_from_shardx(x, dmesh, placements):
    """ShardX's scatter of x -> DTensor: DTensor's own local shards."""
    from shardx.dtensor import placement_from_dtensor
    mesh = Mesh(tuple(dmesh.mesh.shape), dmesh.mesh_dim_names or ())
    st = ShardedTensor.from_torch(x, mesh, [placement_from_dtensor(p) for p in placements],
                                  backend=BACKEND)
    dt = st.to_dtensor(dmesh)
    same(dt.to_local(), distribute_tensor(x, dmesh, placements).to_local(), "local vs distribute_tensor")
    same(dt.full_tensor(), x, "to_dtensor().full_tensor()")


def local_indices(dmesh, shape, placements):
    """This rank's DTensor shard of a tensor of ``shape`` as indices per dim
    (shardx.dtensor's reading of DTensor's split; the cases check it
    against distribute_tensor and full_tensor)."""
    from shardx.dtensor import dtensor_dim_indices, placement_from_dtensor
    coord = dmesh.get_coordinate()
    pl = [placement_from_dtensor(p) for p in placements]
    return [torch.from_numpy(dtensor_dim_indices(n, d, tuple(dmesh.mesh.shape), coord, pl))
            for d, n in enumerate(shape)]


def from_local(dmesh, x_or_shape, placements, seed=None):
    """A DTensor made with DTensor.from_local: this rank's shard of ``x``,
    or (Partial) a seeded term of this rank's shard shape."""
    shape = tuple(x_or_shape.shape) if seed is None else tuple(x_or_shape)
    idx = local_indices(dmesh, shape, placements)
    if seed is None:
        local = x_or_shape[torch.meshgrid(*idx, indexing="ij")] if idx else x_or_shape
    else:
        local = tensor(tuple(len(i) for i in idx), seed * 100 + term_id(dmesh.get_coordinate(), placements))
    return DTensor.from_local(local.contiguous(), dmesh, placements, run_check=False,
                              shape=torch.Size(shape), stride=torch.empty(shape, device="meta").stride())


def term_id(coord, placements):
    """The seed of a rank's term: its coordinates on the non-Replicate axes
    (ranks along a Replicate axis hold the same data)."""
    return sum(int(c) * 10 ** a for a, (c, p) in enumerate(zip(coord, placements))
               if not isinstance(p, TR))


def partial_dtensor(dmesh, shape, placements, seed):
    """A DTensor whose rank terms differ, and its value: DTensor's own
    full_tensor(), checked against the reduction of the seeded terms where
    every placement is Partial or Replicate."""
    dt = from_local(dmesh, shape, placements, seed)
    value = dt.full_tensor()
    if all(isinstance(p, (TP, TR)) for p in placements):
        terms = {}
        for r in range(dmesh.mesh.numel()):
            c = tuple(int(v) for v in np.unravel_index(r, tuple(dmesh.mesh.shape)))
            terms[c] = tensor(shape, seed * 100 + term_id(c, placements))
        # Innermost axis first, as the terms nest in mesh order.
        for axis in reversed(range(dmesh.ndim)):
            p = placements[axis]
            groups = {}
            for c, t in terms.items():
                groups.setdefault(c[:axis] + (0,) + c[axis + 1:], []).append(t)
            if isinstance(p, TP):
                red = {"sum": lambda ts: sum(ts[1:], ts[0]),
                       "avg": lambda ts: sum(ts[1:], ts[0]) / len(ts),
                       "max": lambda ts: torch.stack(ts).amax(0),
                       "min": lambda ts: torch.stack(ts).amin(0)}[p.reduce_op]
                terms = {k: red(v) for k, v in groups.items()}
            else:
                terms = {k: v[0] for k, v in groups.items()}
        same(value, next(iter(terms.values())), "DTensor's full_tensor vs the reduced terms")
    return dt, value


def run_threads_cases():
    assert WORLD == 6
    m1 = init_device_mesh("cpu", (6,), mesh_dim_names=("tp",))
    m23 = init_device_mesh("cpu", (2, 3), mesh_dim_names=("dp", "tp"))
    m32 = init_device_mesh("cpu", (3, 2), mesh_dim_names=("dp", "tp"))
    seed = [0]

    @case("dist")
    def dist_case(dmesh, shape, placements, dtype=torch.float32):
        seed[0] += 1
        x = tensor(shape, seed[0], dtype)
        dt = distribute_tensor(x, dmesh, placements)
        check_round_trip(dt, x)
        check_from_shardx(x, dmesh, placements)

    @case("from_local")
    def local_case(dmesh, shape, placements):
        seed[0] += 1
        x = tensor(shape, seed[0])
        dt = from_local(dmesh, x, placements)
        same(dt.full_tensor(), x, "DTensor's own full_tensor")
        check_round_trip(dt, x)

    @case("shuffled")
    def shuffled_case(dmesh, shape, placements):
        dt = from_local(dmesh, tensor(shape, 5), placements)
        expect(lambda: ShardedTensor.from_dtensor(dt), "no ShardX layout")

    @case("partial")
    def partial_case(dmesh, shape, placements):
        seed[0] += 1
        dt, value = partial_dtensor(dmesh, shape, placements, seed[0])
        check_round_trip(dt, value)

    # 1-D, even and uneven (7 rows over 6: trailing ranks short; 4 rows:
    # two ranks empty), every placement kind and several dtypes.
    for shape, pl in [((12, 4), [TS(0)]), ((7, 3), [TS(0)]), ((4, 5), [TS(0)]), ((3, 8), [TS(1)]),
                      ((5, 2), [TR()]), ((24, 2), [TSS(0, split_factor=2)]),
                      ((36,), [TSS(0, split_factor=3)])]:
        dist_case(m1, shape, pl)
    dist_case(m1, (7, 3), [TS(0)], torch.bfloat16)
    dist_case(m1, (7, 3), [TS(1)], torch.int64)
    dist_case(m1, (9,), [TS(0)], torch.bool)
    dist_case(m1, (5, 3), [TS(0)], torch.float64)
    for op in ("sum", "avg", "max", "min"):
        partial_case(m1, (5, 3), [TP(op)])
    # 2-D meshes, even and uneven, nested and strided splits.
    for dmesh in (m23, m32):
        for shape, pl in [((6, 6), [TS(0), TS(1)]), ((5, 7), [TS(0), TS(1)]), ((7, 2), [TS(0), TS(0)]),
                          ((5, 4), [TR(), TS(0)]), ((4, 5), [TS(1), TR()]), ((3, 3), [TR(), TR()]),
                          ((12, 2), [TSS(0, split_factor=dmesh.mesh.shape[1]), TS(0)])]:
            dist_case(dmesh, shape, pl)
        # distribute_tensor refuses uneven _StridedShard; FSDP2 over TP
        # makes such DTensors with from_local.
        # On 3x2, DTensor's split of 7 or 13 rows is a shuffle no ShardX
        # layout holds (and DTensor's own full_tensor() of it fails):
        # an error (test_dtensor_interop.py checks the sizes that are
        # contiguous, on 3-D meshes, against DTensor's split).
        for shape in ((7, 3), (13, 2), (2, 3)):
            pl = [TSS(0, split_factor=dmesh.mesh.shape[1]), TS(0)]
            if dmesh is m32 and shape != (2, 3):
                shuffled_case(dmesh, shape, pl)
            else:
                local_case(dmesh, shape, pl)
        for pl in ([TP("sum"), TS(0)], [TS(1), TP("max")], [TP("sum"), TP("sum")], [TP("avg"), TR()],
                   [TR(), TP("min")]):
            partial_case(dmesh, (5, 4), pl)
    # A DTensor on a 1-D sub-mesh of a 2-D mesh (parallelize_module's tp mesh).
    dist_case(m23["tp"], (7, 4), [TS(0)])
    partial_case(m32["tp"], (3, 4), [TP("sum")])

    @case("errors")
    def errors():
        x = tensor((6, 4), 7)
        dt = distribute_tensor(x, m23, [TS(0), TS(1)])
        expect(lambda: ShardedTensor.from_dtensor(dt, Mesh((3, 2), ("dp", "tp"))), "shape [2, 3]")
        expect(lambda: ShardedTensor.from_dtensor(dt, Mesh((2, 3), ("x", "y"))), "axes")
        expect(lambda: ShardedTensor.from_dtensor(
            from_local(m1, tensor((5, 3), 8), [TSS(0, split_factor=2)])), "no ShardX layout")
        expect(lambda: ShardedTensor.from_dtensor(
            distribute_tensor(torch.zeros(6, 2, dtype=torch.complex64), m1, [TS(0)])), "complex64")
        expect(lambda: ShardedTensor.from_dtensor(dt, backend="gpu9"), "unknown backend")
        st = ShardedTensor.from_dtensor(dt)
        expect(lambda: st.to_dtensor(m32), "shape")
        expect(lambda: ShardedTensor.from_torch(x, Mesh((4,))).to_dtensor(), "world 6")
        # Explicit sizes DTensor's torch.chunk does not give.
        uneven = ShardedTensor.from_locals([x[:5], x[5:]], Mesh((2,), ("tp",)), _sized((2,), (6, 4), [5, 1]),
                                           (6, 4))
        expect(lambda: uneven.to_dtensor(m32["tp"]), "no DTensor placements")
    errors()


def _sized(mesh_shape, shape, sizes):
    import json
    from shardx.sharded_tensor import runtime
    return runtime().Layout.from_json(json.dumps(
        {"dims": [{"dim": 0, "sizes": sizes, "splits": [[0, 1]]}], "partials": [None]}))


def expect(fn, text):
    try:
        fn()
    except DTensorInteropError as e:
        assert text in str(e), f"expected {text!r} in: {e}"
        return
    except (TypeError, ValueError) as e:
        assert text in str(e), f"expected {text!r} in: {e}"
        return
    raise AssertionError(f"no error (expected one with {text!r})")


def run_mpi_cases():
    # ShardX's mpi ranks are the processes: each maps its own shard.
    m4 = init_device_mesh("cpu", (4,), mesh_dim_names=("tp",))
    m22 = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))

    @case("mpi")
    def mpi_case(dmesh, shape, placements, seed):
        x = tensor(shape, seed)
        check_round_trip(distribute_tensor(x, dmesh, placements), x)
        check_from_shardx(x, dmesh, placements)

    mpi_case(m4, (7, 3), [TS(0)], 1)
    mpi_case(m4, (16,), [TSS(0, split_factor=2)], 2)
    mpi_case(m22, (5, 7), [TS(0), TS(1)], 3)
    mpi_case(m22, (8, 2), [TSS(0, split_factor=2), TS(0)], 4)
    mpi_case(m22, (3, 3), [TR(), TR()], 5)

    @case("mpi-partial")
    def mpi_partial(dmesh, placements, seed):
        dt, value = partial_dtensor(dmesh, (5, 3), placements, seed)
        check_round_trip(dt, value)

    mpi_partial(m4, [TP("sum")], 6)
    mpi_partial(m22, [TP("max"), TS(0)], 7)

    @case("mpi-rank-order")
    def rank_order():
        # A DeviceMesh that numbers the processes column-major: ranks 1
        # and 2 sit where ShardX has ranks 2 and 1.
        swapped = DeviceMesh("cpu", torch.tensor([[0, 2], [1, 3]]), mesh_dim_names=("dp", "tp"))
        dt = distribute_tensor(tensor((4, 4), 8), swapped, [TS(0), TS(1)])
        if RANK in (1, 2):
            expect(lambda: ShardedTensor.from_dtensor(dt, backend="mpi"), "number the ranks alike")
    rank_order()


if __name__ == "__main__":
    import datetime
    # A rank that fails before a collective the others are in ends the run
    # (with the failure printed) instead of hanging.
    dist.init_process_group("gloo", rank=RANK, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    try:
        (run_mpi_cases if BACKEND == "mpi" else run_threads_cases)()
    finally:
        dist.barrier()
        dist.destroy_process_group()
    if FAILED:
        print(f"rank {RANK}: {len(FAILED)} failed: {FAILED}", flush=True)
        sys.exit(1)
