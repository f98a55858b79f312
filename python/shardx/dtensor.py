"""PyTorch DTensor in and out of ShardX, and DTensor parallel styles as
ShardX placements (docs/DTensor.md).

* ``from_dtensor(dt, mesh=None, backend="threads")`` /
  ``ShardedTensor.from_dtensor``: a ``ShardedTensor`` holding the DTensor's
  own local shards (Partial terms included, nothing reduced);
  ``to_dtensor(st, device_mesh=None)`` / ``ShardedTensor.to_dtensor``: the
  DTensor whose local shard on each process is that rank's ShardX shard.
  Placements map one to one (``Shard``, ``_StridedShard``, ``Replicate``,
  ``Partial`` sum/avg/max/min/prod); where DTensor's uneven split of a
  ``_StridedShard`` differs from ShardX's default sizes, the layout gets
  explicit sizes; a split no ShardX layout holds is an error.
* Process model. DTensor runs one rank per process. On a process backend of
  ShardX (``mpi``, ``nccl``) this process is one ShardX rank too: its local
  shard maps directly, no communication. On ``threads`` (and ``cuda``), one
  process holds every rank of the ShardX mesh: ``from_dtensor`` is a
  collective over the DeviceMesh that brings every rank's local shard to
  every process (an all-gather of shards, no reduction), and ``to_dtensor``
  takes this process's rank's shard (no communication).
* ``plan_from_parallel_styles(model, mesh, plan)``: the plan dict
  ``parallelize_module`` takes (``ColwiseParallel``, ``RowwiseParallel``,
  ``SequenceParallel``, ``PrepareModuleInput``, ``PrepareModuleOutput``,
  ``PrepareModuleInputOutput``; fqn patterns with wildcards) as parameter
  placements for ``TrainStep.placements`` and activation constraints
  (``shardx.constrain`` in forward hooks).
"""

from __future__ import annotations

import contextlib
import fnmatch
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import dtypes
from .placements import Mesh, Partial, Placement, PlacementError, Replicate, Shard, StridedShard

__all__ = ["DTensorInteropError", "ParallelPlan", "from_dtensor", "to_dtensor",
           "placement_from_dtensor", "placement_to_dtensor", "mesh_from_device_mesh",
           "plan_from_parallel_styles"]


class DTensorInteropError(ValueError):
    """A DTensor, DeviceMesh or parallel style that ShardX cannot take as it
    is (mesh shape or names, world, rank order, dtype, device, a placement
    or style option ShardX has no counterpart for)."""


# DTensor's Partial reduce ops (c10d names) -> ShardX's.
_REDUCE_FROM_TORCH = {"sum": "sum", "avg": "avg", "max": "max", "min": "min",
                      "product": "prod", "prod": "prod"}
_REDUCE_TO_TORCH = {"sum": "sum", "avg": "avg", "max": "max", "min": "min", "prod": "product"}


# ----------------------------------------------------------------------------
# Placements and meshes
# ----------------------------------------------------------------------------


def placement_from_dtensor(p) -> Placement:
    """The ShardX placement of a DTensor placement."""
    from torch.distributed.tensor import Partial as TPartial, Replicate as TReplicate, Shard as TShard
    from torch.distributed.tensor.placement_types import _StridedShard
    if isinstance(p, _StridedShard):
        return StridedShard(int(p.dim), int(p.split_factor))
    if type(p) is TShard:
        return Shard(int(p.dim))
    if type(p) is TReplicate:
        return Replicate()
    if type(p) is TPartial:
        op = str(p.reduce_op).lower()
        if op not in _REDUCE_FROM_TORCH:
            raise DTensorInteropError(f"DTensor placement {p!r}: ShardX has no Partial({op!r}); "
                                      f"it has {', '.join(_REDUCE_TO_TORCH.values())}")
        return Partial(_REDUCE_FROM_TORCH[op])
    raise DTensorInteropError(
        f"DTensor placement {p!r} ({type(p).__name__}) has no ShardX counterpart: ShardX has "
        "Shard, _StridedShard, Replicate and Partial(sum|avg|max|min|product); redistribute "
        "the DTensor to one of them first")


def placement_to_dtensor(p: Placement):
    """The DTensor placement of a ShardX placement."""
    from torch.distributed.tensor import Partial as TPartial, Replicate as TReplicate, Shard as TShard
    from torch.distributed.tensor.placement_types import _StridedShard
    if isinstance(p, StridedShard):
        return _StridedShard(p.dim, split_factor=p.split_factor)
    if isinstance(p, Shard):
        return TShard(p.dim)
    if isinstance(p, Partial):
        return TPartial(_REDUCE_TO_TORCH[p.op])
    if isinstance(p, Replicate):
        return TReplicate()
    raise DTensorInteropError(f"{p!r} is not a ShardX placement")


def mesh_from_device_mesh(device_mesh, mesh: Optional[Mesh] = None) -> Mesh:
    """The ShardX mesh of a DeviceMesh (its shape, and its mesh_dim_names as
    the axis names); with ``mesh``, checks that the two agree and returns
    ``mesh``."""
    shape = tuple(int(s) for s in device_mesh.mesh.shape)
    names = tuple(device_mesh.mesh_dim_names or ())
    if mesh is None:
        return Mesh(shape, names)
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a shardx.Mesh, got {type(mesh).__name__}")
    if tuple(mesh.shape) != shape:
        raise DTensorInteropError(f"the DeviceMesh has shape {list(shape)} but the ShardX mesh "
                                  f"{list(mesh.shape)}: they must be the same")
    if names and tuple(mesh.axis_names) != names and not _default_names(mesh):
        raise DTensorInteropError(f"the DeviceMesh's axes are {list(names)} but the ShardX mesh's "
                                  f"{list(mesh.axis_names)}: name them alike")
    return mesh


def _default_names(mesh: Mesh) -> bool:
    return tuple(mesh.axis_names) == tuple(f"a{i}" for i in range(mesh.ndim))


def _rank_of(coord: Sequence[int], shape: Sequence[int]) -> int:
    """Row-major rank of mesh coordinates (ShardX's rank order)."""
    r = 0
    for c, n in zip(coord, shape):
        r = r * n + int(c)
    return r


def _coordinate(device_mesh) -> Tuple[int, ...]:
    import torch.distributed as dist
    coord = device_mesh.get_coordinate()
    if coord is None:
        raise DTensorInteropError(f"process rank {dist.get_rank()} is not in the DeviceMesh "
                                  f"{device_mesh.mesh.tolist()}")
    return tuple(int(c) for c in coord)


# ----------------------------------------------------------------------------
# Which indices each rank holds
# ----------------------------------------------------------------------------


def _chunks(idx: np.ndarray, n: int) -> List[np.ndarray]:
    """torch.chunk's pieces of ``idx`` (ceil-sized, trailing ones short or
    empty)."""
    size = len(idx)
    c = -(-size // n) if size else 0
    return [idx[min(j * c, size):min((j + 1) * c, size)] for j in range(n)]


def dtensor_dim_indices(length: int, dim: int, mesh_shape: Sequence[int], coord: Sequence[int],
                        placements: Sequence[Placement]) -> np.ndarray:
    """The global indices of tensor dim ``dim`` (of size ``length``) that
    DTensor's rank ``coord`` holds, in local order. Placements apply in mesh
    order, each to the piece the previous ones left: ``Shard`` is
    ``torch.chunk``; ``_StridedShard(d, sf)`` on an axis of size n chunks the
    piece into sf parts, chunks each part into n and keeps the rank's chunk
    of each part (for even sizes: blocks j, j + n, ...). This is DTensor's
    own split (python/tests/test_dtensor_interop.py checks it against real
    DTensors)."""
    idx = np.arange(length, dtype=np.int64)
    for axis, p in enumerate(placements):
        if isinstance(p, StridedShard) and p.dim == dim:
            parts = [_chunks(part, mesh_shape[axis])[coord[axis]] for part in _chunks(idx, p.split_factor)]
            idx = np.concatenate(parts) if parts else idx[:0]
        elif isinstance(p, Shard) and p.dim == dim:
            idx = _chunks(idx, mesh_shape[axis])[coord[axis]]
    return idx


def _shardx_dim_indices(layout, mesh_shape, shape, coord) -> List[np.ndarray]:
    """Per dim, the global indices ShardX's rank ``coord`` holds."""
    runs = layout.local_runs(list(mesh_shape), list(shape), list(coord))
    return [np.concatenate([np.arange(o, o + n, dtype=np.int64) for o, n in d])
            if d else np.zeros(0, np.int64) for d in runs]


def _all_coords(shape):
    return [tuple(int(c) for c in np.unravel_index(r, shape)) for r in range(int(np.prod(shape)))]


def _mismatch(layout, mesh: Mesh, placements, shape) -> Optional[str]:
    """None when ``layout`` holds on every rank the indices DTensor's
    ``placements`` give, else where it does not."""
    for coord in _all_coords(mesh.shape):
        got = _shardx_dim_indices(layout, mesh.shape, shape, coord)
        for d, n in enumerate(shape):
            want = dtensor_dim_indices(n, d, mesh.shape, coord, placements)
            if not np.array_equal(got[d], want):
                return (f"rank {coord} holds indices {want.tolist()} of dim {d} in DTensor, "
                        f"{got[d].tolist()} in ShardX")
    return None


def layout_of(mesh: Mesh, placements: Sequence[Placement], shape: Sequence[int]):
    """The runtime layout whose every rank holds what DTensor's rank holds
    under ``placements`` (None: replicated). ShardX's default meaning is
    DTensor's except for ``_StridedShard`` on uneven dims: there the layout
    gets explicit sizes when DTensor's pieces are contiguous runs in the
    order of the dim's splits; where they are not (a plain stride that does
    not divide the dim, DTensor's shuffle of a reorder) no layout holds
    them: a DTensorInteropError."""
    import json
    from .placements import check_placements
    from .sharded_tensor import runtime
    shape = tuple(int(s) for s in shape)
    placements = check_placements(mesh, placements, len(shape), "DTensor")
    rt = runtime()
    tuples = _placement_tuples(placements)
    if all(isinstance(p, (Replicate, Partial)) for p in placements):
        layout = rt.Layout.from_placements(tuples, list(mesh.shape), list(shape))
        return None if layout.is_replicated else layout
    strided = any(isinstance(p, StridedShard) for p in placements)
    layout, error = None, ""
    try:
        layout = rt.Layout.from_placements(tuples, list(mesh.shape), list(shape))
    except ValueError as e:
        error = str(e)
    if layout is not None and (not strided or _mismatch(layout, mesh, placements, shape) is None):
        return layout
    what = (f"DTensor placements {_spell(placements)} on shape {list(shape)} over mesh "
            f"{list(mesh.shape)}")
    if layout is None:
        raise DTensorInteropError(
            f"{what}: no ShardX layout holds DTensor's shards ({error}); DTensor's split of a "
            "_StridedShard whose blocks do not divide the dim is neither a strided nor a "
            "contiguous split: redistribute the DTensor (e.g. to Shard) first")
    # DTensor's uneven _StridedShard where the split factor reorders the
    # dim's splits: explicit sizes, when its pieces are contiguous runs in
    # the order of the dim's splits (major to minor).
    j = json.loads(layout.to_json())
    ok = True
    for entry in j["dims"]:
        d = entry["dim"]
        axes = [a for a, _ in entry["splits"]]
        if any(stride != 1 for _, stride in entry["splits"]):
            ok = False
            break
        sizes, nxt = [], 0
        for sub in _all_coords([mesh.shape[a] for a in axes]):
            coord = [0] * mesh.ndim
            for a, c in zip(axes, sub):
                coord[a] = c
            want = dtensor_dim_indices(shape[d], d, mesh.shape, coord, placements)
            if not np.array_equal(want, np.arange(nxt, nxt + len(want))):
                ok = False
                break
            sizes.append(len(want))
            nxt += len(want)
        if not ok:
            break
        entry["sizes"] = sizes
    if ok:
        sized = rt.Layout.from_json(json.dumps(j))
        if _mismatch(sized, mesh, placements, shape) is None:
            return sized
    raise DTensorInteropError(
        f"{what}: no ShardX layout holds DTensor's shards ("
        f"{_mismatch(layout, mesh, placements, shape)}, and they are not contiguous pieces): "
        "redistribute the DTensor (e.g. to Shard) first")


def _spell(placements) -> str:
    return "[" + ", ".join(p.spelling() for p in placements) + "]"


def _placement_tuples(placements):
    from .sharded_tensor import placement_tuples
    return placement_tuples(placements)


def dtensor_placements_of(st) -> Tuple[Placement, ...]:
    """The DTensor placements (ShardX spelling) whose shards are the ones
    ``st`` holds on every rank; an error when DTensor has none (explicit
    sizes that are not DTensor's split)."""
    import json
    from .sharded_tensor import _placements_of, runtime
    layout = st.shards.layout
    mesh = st.mesh
    if layout is None or layout.is_replicated:
        return tuple(Replicate() for _ in mesh.shape)
    tuples = layout.placements(list(mesh.shape))
    if tuples is not None and not any(t[0] == "SS" for t in tuples):
        # Shard / Replicate / Partial: the same split in both (torch.chunk,
        # nested in mesh order).
        return _placements_of(tuples)
    if tuples is None:
        # Explicit sizes: the placements of the same splits without them,
        # if DTensor's split of those gives these sizes.
        j = json.loads(layout.to_json())
        for entry in j["dims"]:
            entry["sizes"] = []
        try:
            tuples = runtime().Layout.from_json(json.dumps(j)).placements(list(mesh.shape))
        except ValueError:
            tuples = None
    placements = None if tuples is None else _placements_of(tuples)
    why = "DTensor placements cannot express its split order or strides"
    if placements is not None:
        bad = _mismatch(layout, mesh, placements, st.shape)
        if bad is None:
            return placements
        why = f"with {_spell(placements)}, {bad}"
    raise DTensorInteropError(
        f"the ShardedTensor's layout [{st.layout_text}] has no DTensor placements ({why}); "
        "DTensor splits by torch.chunk: redistribute it in ShardX first")


# ----------------------------------------------------------------------------
# DTensor <-> ShardedTensor
# ----------------------------------------------------------------------------


def _dtype_of(t) -> str:
    try:
        return dtypes.name_of(t)
    except TypeError:
        raise DTensorInteropError(
            f"dtype {t.dtype} has no ShardX counterpart; ShardX holds "
            f"{', '.join(dtypes.torch_names())}") from None


def _mesh_group(device_mesh):
    """The process group spanning every rank of ``device_mesh``."""
    import torch.distributed as dist
    if device_mesh.ndim == 1:
        return device_mesh.get_group(0)
    ranks = device_mesh.mesh.flatten().tolist()
    if sorted(ranks) == list(range(dist.get_world_size())):
        return None  # the default group
    raise DTensorInteropError(
        f"backend 'threads' gathers every rank's shard over the DeviceMesh, but the "
        f"{device_mesh.ndim}-D mesh {device_mesh.mesh.tolist()} spans only part of the world of "
        f"{dist.get_world_size()}: pass a 1-D DeviceMesh or one over the whole world")


def _gather_locals(dt, device_mesh, local, layout, mesh: Mesh, shape) -> list:
    """Every rank's local shard of ``dt``, in ShardX rank order: an
    all-gather of the shards' bytes over the DeviceMesh's ranks."""
    import torch
    import torch.distributed as dist
    coords = _all_coords(mesh.shape)
    shapes = [tuple(shape) if layout is None else
              tuple(int(s) for s in layout.local_shape(list(mesh.shape), list(shape), list(c)))
              for c in coords]
    group = _mesh_group(device_mesh)
    device = local.device if device_mesh.device_type != "cpu" else torch.device("cpu")
    # Every rank learns whether any shard is off before the gather: a rank
    # that raised alone would leave the others in the all-gather until the
    # process group's timeout.
    want = shapes[_rank_of(_coordinate(device_mesh), mesh.shape)]
    bad = torch.tensor([int(tuple(local.shape) != want)], dtype=torch.int64, device=device)
    dist.all_reduce(bad, op=dist.ReduceOp.MAX, group=group)
    if tuple(local.shape) != want:
        raise DTensorInteropError(
            f"this rank's local shard has shape {list(local.shape)}, but its placements give "
            f"{list(want)}")
    if int(bad.item()):
        raise DTensorInteropError("another rank's local shard does not have the shape its "
                                  "placements give (see that rank's error)")
    itemsize = local.element_size()
    width = max(int(np.prod(s)) for s in shapes) * itemsize
    mine = torch.zeros(width, dtype=torch.uint8, device=device)
    flat = local.contiguous().reshape(-1).view(torch.uint8)
    mine[:flat.numel()] = flat.to(device)
    got = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(got, mine, group=group)
    group_ranks = dist.get_process_group_ranks(group) if group is not None else \
        list(range(dist.get_world_size()))
    mesh_ranks = device_mesh.mesh.flatten().tolist()  # ShardX rank order
    out = []
    for r, s in enumerate(shapes):
        buf = got[group_ranks.index(mesh_ranks[r])].cpu()
        n = int(np.prod(s)) * itemsize
        out.append(buf[:n].view(local.dtype).reshape(s))
    return out


def from_dtensor(dt, mesh: Optional[Mesh] = None, backend: str = "threads"):
    """The ``ShardedTensor`` holding ``dt``'s local shards on the ranks of
    ``mesh`` (default: the DeviceMesh's shape and axis names). Collective
    over the DeviceMesh on ``threads``/``cuda`` (every process gets every
    rank's shard); none on ``mpi``/``nccl`` (this process's shard only, its
    ShardX rank must be its DeviceMesh coordinate's)."""
    import torch
    from torch.distributed.tensor import DTensor
    from .sharded_tensor import BACKENDS, PROCESS_BACKENDS, ShardedTensor, session
    if not isinstance(dt, DTensor):
        raise TypeError(f"from_dtensor takes a DTensor, got {type(dt).__name__}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    device_mesh = dt.device_mesh
    mesh = mesh_from_device_mesh(device_mesh, mesh)
    if dt.device.type == "meta":
        raise DTensorInteropError("the DTensor is on the meta device: it has no data to take")
    dtype = _dtype_of(dt)
    placements = tuple(placement_from_dtensor(p) for p in dt.placements)
    shape = tuple(int(s) for s in dt.shape)
    layout = layout_of(mesh, placements, shape)
    coord = _coordinate(device_mesh)
    local = dt.to_local()
    if hasattr(local, "wait"):
        local = local.wait()
    local = local.detach()
    rank = _rank_of(coord, mesh.shape)
    if backend in PROCESS_BACKENDS:
        s = session(mesh, backend)
        if s.process_rank != rank:
            raise DTensorInteropError(
                f"this process is ShardX rank {s.process_rank} of the {backend} world but holds "
                f"DeviceMesh coordinate {list(coord)} (ShardX rank {rank}): start the processes "
                "so that both number the ranks alike (DeviceMesh row-major over ranks 0..N-1)")
        locals_ = [None] * mesh.size
        locals_[rank] = local.cpu()
    elif layout is None:
        locals_ = [local.cpu()] + [None] * (mesh.size - 1)
    else:
        locals_ = _gather_locals(dt, device_mesh, local, layout, mesh, shape)
    try:
        return ShardedTensor.from_locals(locals_, mesh, layout, shape, dtype, backend)
    except ValueError as e:
        raise DTensorInteropError(f"from_dtensor: {e}") from None


def _default_device_mesh(mesh: Mesh):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    if not (dist.is_available() and dist.is_initialized()):
        raise DTensorInteropError(
            f"to_dtensor needs torch.distributed initialized with {mesh.size} processes "
            f"(torchrun --nproc-per-node {mesh.size}, or init_process_group('gloo', ...)), "
            "or a device_mesh")
    if dist.get_world_size() != mesh.size:
        raise DTensorInteropError(
            f"the mesh {list(mesh.shape)} has {mesh.size} ranks but the torch.distributed world "
            f"{dist.get_world_size()}: pass a device_mesh of that shape")
    return init_device_mesh("cpu", mesh.shape, mesh_dim_names=mesh.axis_names)


def to_dtensor(st, device_mesh=None):
    """The DTensor of ``st`` on ``device_mesh`` (default: a CPU DeviceMesh
    of ``st``'s mesh over the whole torch.distributed world). Each process's
    local shard is its DeviceMesh coordinate's ShardX shard (Partial terms
    as they are); no communication. On ``threads`` every process must hold
    the same ShardedTensor (made from the same tensor or DTensor)."""
    import torch
    from torch.distributed.tensor import DTensor
    from .sharded_tensor import _process_session
    mesh = st.mesh
    if device_mesh is None:
        device_mesh = _default_device_mesh(mesh)
    mesh_from_device_mesh(device_mesh, mesh)
    if device_mesh.device_type == "meta":
        raise DTensorInteropError("the DeviceMesh is on the meta device: a DTensor there has no data")
    placements = dtensor_placements_of(st)
    coord = _coordinate(device_mesh)
    rank = _rank_of(coord, mesh.shape)
    if st.shards.distributed:
        s = _process_session(mesh)
        if s.process_rank != rank:
            raise DTensorInteropError(
                f"this process is ShardX rank {s.process_rank} but holds DeviceMesh coordinate "
                f"{list(coord)} (ShardX rank {rank}): number the ranks alike")
    local = dtypes.as_torch(np.array(st.local(rank)), st.shards.dtype).to(device_mesh.device_type)
    shape = torch.Size(st.shape)
    stride = torch.empty(shape, device="meta").stride()
    return DTensor.from_local(local, device_mesh, [placement_to_dtensor(p) for p in placements],
                              run_check=False, shape=shape, stride=stride)


# ----------------------------------------------------------------------------
# Parallel styles -> placements
# ----------------------------------------------------------------------------


@dataclass
class Constraint:
    """An activation layout a style implies: input ``index`` (an int, or a
    keyword name) or output ``index`` of module ``fqn`` goes through
    ``chain`` (tensor-parallel placements: as it arrives, then as wanted)."""

    fqn: str
    kind: str  # "input" | "output"
    index: Union[int, str]
    chain: Tuple[Placement, ...]
    style: str


@dataclass
class ParallelPlan:
    """What a ``parallelize_module`` plan means in ShardX: ``params`` (by
    fqn, one placement per mesh axis) for ``TrainStep.placements``, and
    ``constraints`` on module inputs and outputs, applied while tracing by
    ``install`` (forward hooks calling ``shardx.constrain``)."""

    mesh: Mesh
    tp_axis: int
    params: Dict[str, List[Placement]]
    constraints: List[Constraint] = field(default_factory=list)
    batch: Dict[str, Placement] = field(default_factory=dict)

    def activation(self, tp: Placement, ndim: int) -> List[Placement]:
        """An activation's placements: ``tp`` on the tensor-parallel axis,
        the batch placement (default Replicate) on the others."""
        out = []
        for a, name in enumerate(self.mesh.axis_names):
            p = tp if a == self.tp_axis else self.batch.get(name, Replicate())
            if isinstance(p, Shard) and p.dim < 0:
                p = Shard(p.dim + ndim)
            out.append(p)
        return out

    def batch_placements(self) -> List[Placement]:
        """The placements of a model input (tokens, features) or target:
        the batch placements, Replicate on the tensor-parallel axis."""
        return self.activation(Replicate(), 0)

    def placements(self, step, inputs: Union[int, Sequence[Any]] = 1, target: Any = None):
        """``step.placements(...)`` (a ``TrainStep`` of the planned model)
        with the plan's parameter placements; ``inputs`` (a list of
        placements, or how many inputs) and ``target`` default to
        ``batch_placements()``."""
        if isinstance(inputs, int):
            inputs = [self.batch_placements()] * inputs
        return step.placements(self.mesh, self.params, inputs,
                               self.batch_placements() if target is None else target)

    def install(self, module):
        """Registers the forward hooks that constrain the planned inputs and
        outputs (identity in eager; ``shardx.annotate`` when traced).
        Returns a handle whose ``remove()`` takes them off."""
        from .constraint import constrain
        handles = []

        def pin(x, chain):
            if not hasattr(x, "ndim"):
                return x
            for tp in chain:
                x = constrain(x, self.activation(tp, x.ndim))
            return x

        by_module: Dict[str, List[Constraint]] = {}
        for c in self.constraints:
            by_module.setdefault(c.fqn, []).append(c)
        for fqn, cs in by_module.items():
            mod = module.get_submodule(fqn) if fqn else module
            ins = [c for c in cs if c.kind == "input"]
            outs = [c for c in cs if c.kind == "output"]
            if ins:
                def pre(m, args, kwargs, ins=ins):
                    args = list(args)
                    kwargs = dict(kwargs)
                    for c in ins:
                        if isinstance(c.index, int):
                            if c.index < len(args):
                                args[c.index] = pin(args[c.index], c.chain)
                        elif c.index in kwargs:
                            kwargs[c.index] = pin(kwargs[c.index], c.chain)
                    return tuple(args), kwargs
                handles.append(mod.register_forward_pre_hook(pre, with_kwargs=True))
            if outs:
                def post(m, args, out, outs=outs):
                    if isinstance(out, tuple):
                        out = list(out)
                        for c in outs:
                            if c.index < len(out):
                                out[c.index] = pin(out[c.index], c.chain)
                        return tuple(out)
                    for c in outs:
                        if c.index == 0:
                            out = pin(out, c.chain)
                    return out
                handles.append(mod.register_forward_hook(post))
        return _Handles(handles)

    @contextlib.contextmanager
    def constrained(self, module):
        """``install`` for the duration of a ``with`` block."""
        h = self.install(module)
        try:
            yield self
        finally:
            h.remove()


class _Handles:
    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def _style_layout(p, fqn: str, style: str, option: str) -> Placement:
    """A style's layout option (a DTensor Shard or Replicate) as ShardX's."""
    from torch.distributed.tensor import Replicate as TReplicate, Shard as TShard
    if type(p) is TShard:
        return Shard(int(p.dim))
    if type(p) is TReplicate:
        return Replicate()
    raise DTensorInteropError(
        f"{fqn or '<root>'}: {style}({option}={p!r}): ShardX takes Shard or Replicate activation "
        "layouts in a plan")


def _resolve(module, pattern: str) -> List[str]:
    """The fqns of the submodules ``pattern`` names, as parallelize_module
    resolves it (each dot-separated token an fnmatch pattern on the child
    names; "" the module itself)."""
    if pattern == "":
        return [""]
    out = []
    token, _, rest = pattern.partition(".")
    matched = [(n, c) for n, c in module.named_children() if fnmatch.fnmatch(n, token)]
    for name, child in matched:
        for sub in (_resolve(child, rest) if rest else [""]):
            out.append(name + ("." + sub if sub else ""))
    return out


def plan_from_parallel_styles(model, mesh, plan, tp_axis: Union[int, str, None] = None,
                              batch: Optional[Mapping[str, Placement]] = None) -> ParallelPlan:
    """The ShardX placements of a ``parallelize_module`` plan.

    ``mesh``: a ``shardx.Mesh`` or a ``DeviceMesh`` (the tensor-parallel
    mesh parallelize_module takes, or an N-D one); ``tp_axis`` (name or
    index): the axis the styles apply on (default: the only axis, else the
    one named "tp"). ``plan``: a ParallelStyle, a dict {fqn pattern: style}
    as parallelize_module takes it, or a list of (module pattern, plan)
    pairs for plans applied to submodules (torchtitan applies its layer
    plan to each ``layers.*``). ``batch``: placements of activations on the
    other axes, e.g. ``{"dp": Shard(0)}`` (default Replicate); parameters
    are Replicate there."""
    import torch.nn as nn
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   PrepareModuleInputOutput, PrepareModuleOutput,
                                                   RowwiseParallel, SequenceParallel)
    from torch.distributed.tensor.parallel.style import ParallelStyle
    if not isinstance(mesh, Mesh):
        mesh = mesh_from_device_mesh(mesh)
    if tp_axis is None:
        if mesh.ndim == 1:
            tp_axis = 0
        elif "tp" in mesh.axis_names:
            tp_axis = mesh.axis_names.index("tp")
        else:
            raise DTensorInteropError(f"the mesh has axes {list(mesh.axis_names)}: name the axis the "
                                      "styles apply on (tp_axis=...)")
    elif isinstance(tp_axis, str):
        if tp_axis not in mesh.axis_names:
            raise DTensorInteropError(f"tp_axis {tp_axis!r} is not an axis of the mesh "
                                      f"{list(mesh.axis_names)}")
        tp_axis = mesh.axis_names.index(tp_axis)
    elif not 0 <= tp_axis < mesh.ndim:
        raise DTensorInteropError(f"tp_axis {tp_axis} is out of range for a mesh with {mesh.ndim} axes")
    batch = dict(batch or {})
    for name, p in batch.items():
        if name not in mesh.axis_names or mesh.axis_names.index(name) == tp_axis:
            raise DTensorInteropError(f"batch placement on {name!r}: not a data axis of the mesh "
                                      f"{list(mesh.axis_names)} (tp axis "
                                      f"{mesh.axis_names[tp_axis]!r})")
        if not isinstance(p, Placement):
            raise DTensorInteropError(f"batch placement on {name!r}: {p!r} is not a ShardX placement")
    out = ParallelPlan(mesh, tp_axis, {}, [], batch)
    owner: Dict[int, Tuple[str, List[Placement]]] = {}

    def param(fqn, name, p, style):
        full = f"{fqn}.{name}" if fqn else name
        place = [Replicate()] * mesh.ndim
        place[tp_axis] = p
        module = model.get_submodule(fqn) if fqn else model
        t = getattr(module, name)
        if id(t) in owner and owner[id(t)][1] != place:
            raise DTensorInteropError(
                f"{full}: {style} places it {_spell(place)} but it is the tensor of "
                f"{owner[id(t)][0]}, placed {_spell(owner[id(t)][1])}")
        owner[id(t)] = (full, place)
        # TrainStep names a shared parameter by its first name.
        first = next(n for n, q in model.named_parameters() if q is t)
        out.params[first] = place

    def add(fqn, kind, index, chain, style):
        out.constraints.append(Constraint(fqn, kind, index, tuple(chain), style))

    def apply(fqn, style):
        module = model.get_submodule(fqn) if fqn else model
        where = fqn or "<root>"
        name = type(style).__name__
        if type(style) in (ColwiseParallel, RowwiseParallel):
            if not isinstance(module, (nn.Linear, nn.Embedding)):
                raise DTensorInteropError(f"{where}: {name} applies to nn.Linear and nn.Embedding, "
                                          f"not {type(module).__name__}")
            if len(style.input_layouts) != 1 or len(style.output_layouts) != 1:
                raise DTensorInteropError(f"{where}: {name} takes one input and one output layout")
            given = _style_layout(style.input_layouts[0], fqn, name, "input_layouts")
            output = _style_layout(style.output_layouts[0], fqn, name, "output_layouts")
            emb = isinstance(module, nn.Embedding)
            if type(style) is ColwiseParallel:
                # y = x W^T + b: W, b split on the output features (an
                # embedding: on its columns); x whole, y split on the last dim.
                for n, _ in module.named_parameters(recurse=False):
                    param(fqn, n, Shard(1) if emb else Shard(0), name)
                desired = Replicate()
            else:
                # Linear: W split on the input features, b whole; x split on
                # the last dim, y a pending sum. Embedding: rows split, ids whole.
                param(fqn, "weight", Shard(0) if emb else Shard(1), name)
                if not emb and module.bias is not None:
                    param(fqn, "bias", Replicate(), name)
                desired = Replicate() if emb else Shard(-1)
            add(fqn, "input", 0, [given] if given == desired else [given, desired], name)
            add(fqn, "output", 0, [output], name)
        elif type(style) is SequenceParallel:
            seq = _style_layout(style.sequence_sharding[0], fqn, name, "sequence_dim")
            for n, _ in module.named_parameters(recurse=True):
                param(fqn, n, Replicate(), name)
            add(fqn, "input", 0, [seq], name)
            add(fqn, "output", 0, [seq], name)
        elif type(style) in (PrepareModuleInput, PrepareModuleInputOutput):
            s = style.prepare_module_input if type(style) is PrepareModuleInputOutput else style
            if s.input_layouts is not None:
                for i, (a, b) in enumerate(zip(s.input_layouts, s.desired_input_layouts)):
                    add_pair(fqn, "input", i, a, b, name)
            for k, a in s.input_kwarg_layouts.items():
                if k not in s.desired_input_kwarg_layouts:
                    raise DTensorInteropError(f"{where}: {name}: input_kwarg_layouts[{k!r}] has no "
                                              "desired_input_kwarg_layouts entry")
                b = s.desired_input_kwarg_layouts[k]
                if a is None:
                    continue
                a = _style_layout(a, fqn, name, f"input_kwarg_layouts[{k!r}]")
                b = _style_layout(b, fqn, name, f"desired_input_kwarg_layouts[{k!r}]")
                add(fqn, "input", k, [a] if a == b else [a, b], name)
            if type(style) is PrepareModuleInputOutput:
                apply_output(fqn, style.prepare_module_output, name)
        elif type(style) is PrepareModuleOutput:
            apply_output(fqn, style, name)
        else:
            raise DTensorInteropError(
                f"{where}: ShardX does not know the parallel style {name}; it takes ColwiseParallel, "
                "RowwiseParallel, SequenceParallel, PrepareModuleInput, PrepareModuleOutput and "
                "PrepareModuleInputOutput")

    def apply_output(fqn, s, name):
        for i, (a, b) in enumerate(zip(s.output_layouts, s.desired_output_layouts)):
            add_pair(fqn, "output", i, a, b, name)

    def add_pair(fqn, kind, i, a, b, name):
        """A layout as it arrives (`a`) and as the style wants it (`b`)."""
        if a is None:
            return
        if b is None:
            raise DTensorInteropError(f"{fqn or '<root>'}: {name}(desired_{kind}_layouts[{i}]=None) "
                                      f"for {kind} layout {a!r}")
        a = _style_layout(a, fqn, name, f"{kind}_layouts[{i}]")
        b = _style_layout(b, fqn, name, f"desired_{kind}_layouts[{i}]")
        add(fqn, kind, i, [a] if a == b else [a, b], name)

    def walk(prefix, sub_plan):
        base = model.get_submodule(prefix) if prefix else model
        if isinstance(sub_plan, ParallelStyle):
            sub_plan = {"": sub_plan}
        if not isinstance(sub_plan, dict):
            raise TypeError(f"a plan is a ParallelStyle or a dict of them, got {type(sub_plan).__name__}")
        for pattern, style in sub_plan.items():
            if not isinstance(style, ParallelStyle):
                raise DTensorInteropError(f"plan key {pattern!r}: {style!r} is not a ParallelStyle")
            fqns = _resolve(base, pattern)
            if not fqns:
                # parallelize_module warns and skips such keys.
                warnings.warn(f"parallel plan key {pattern!r} matches no submodule of "
                              f"{prefix or 'the model'}; skipping it", stacklevel=3)
            for f in fqns:
                apply(".".join(x for x in (prefix, f) if x), style)

    if isinstance(plan, (list, tuple)):
        for entry in plan:
            if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str)):
                raise TypeError("a list plan holds (module pattern, plan) pairs")
            prefixes = _resolve(model, entry[0])
            if not prefixes:
                warnings.warn(f"module pattern {entry[0]!r} matches no submodule; skipping it",
                              stacklevel=2)
            for prefix in prefixes:
                walk(prefix, entry[1])
    else:
        walk("", plan)
    return out
