"""Tensors whose local shards live on the ranks between calls.

A ``ShardedTensor`` is a handle to a global tensor held as one local shard
per rank of a mesh, in the runtime's memory (the ``_shardx_rt`` binding,
``python/bindings``). ``shardx.compile``'s callables take and return them,
so parameters and optimizer state go from one step to the next without a
gather or scatter; ``.full()`` / ``.numpy()`` / ``.to_torch()`` assemble the
global tensor only when asked, ``.local(rank)`` is a read-only view of one
rank's buffer (no copy).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import sys
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from . import dtypes
# The MLIR element type name of a torch tensor's or numpy array's dtype.
from .dtypes import name_of as dtype_name
from .placements import Mesh, Partial, Placement, PlacementError, Replicate, Shard, StridedShard
from .placements import check_placements

_RT = None


def runtime():
    """The ``_shardx_rt`` extension module: the installed package's (``pip
    install .``, beside this file), else $SHARDX_BUILD/python's (else the
    repository's build/python)."""
    global _RT
    if _RT is not None:
        return _RT
    here = os.path.dirname(os.path.abspath(__file__))
    build = os.environ.get("SHARDX_BUILD", os.path.join(os.path.dirname(os.path.dirname(here)), "build"))
    # The build for this interpreter (a folder may hold builds for several
    # Pythons, e.g. one carried to a GPU host).
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    for folder in (here, os.path.join(build, "python")):
        names = os.listdir(folder) if os.path.isdir(folder) else []
        found = ["_shardx_rt" + x for x in suffixes if "_shardx_rt" + x in names]
        if found:
            break
    if not found:
        raise ImportError(f"the ShardX runtime binding (_shardx_rt) is not built in {folder} "
                          f"for this Python ({sys.version.split()[0]}): run bash scripts/test.sh "
                          "(or ninja -C build _shardx_rt)")
    spec = importlib.util.spec_from_file_location("_shardx_rt", os.path.join(folder, found[0]))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules.setdefault("_shardx_rt", module)
    module.set_error_types(DonatedError, RankError)
    _RT = module
    return module


class RankError(RuntimeError):
    """A run failed on a rank: ``rank`` is the rank whose own failure stopped
    the run (-1 when unknown) and ``cause`` what went wrong there."""

    def __init__(self, message: str):
        m = re.match(r"rank (\d+)(?: failed)?: (.*)", message, re.S)
        self.rank = int(m.group(1)) if m else -1
        self.cause = m.group(2) if m else message
        super().__init__(message)


class DonatedError(RuntimeError):
    """A ShardedTensor donated to a ``shardx.compile`` call was used again:
    its buffers now hold that call's output."""


def placement_tuples(placements: Sequence[Placement]):
    out = []
    for p in placements:
        if isinstance(p, Shard):
            out.append(("S", p.dim, 1, ""))
        elif isinstance(p, StridedShard):
            out.append(("SS", p.dim, p.split_factor, ""))
        elif isinstance(p, Partial):
            out.append(("P", -1, 1, p.op))
        else:
            out.append(("R", -1, 1, ""))
    return out


def _placements_of(tuples) -> Tuple[Placement, ...]:
    out = []
    for kind, dim, sf, op in tuples:
        out.append({"S": lambda: Shard(dim), "SS": lambda: StridedShard(dim, sf),
                    "P": lambda: Partial(op), "R": lambda: Replicate()}[kind]())
    return tuple(out)


def make_layout(mesh: Mesh, placements: Optional[Sequence[Placement]], shape: Sequence[int],
                what: str = "tensor"):
    """The runtime layout of ``placements`` for a tensor of ``shape`` (None:
    replicated); raises PlacementError when they do not fit."""
    if placements is None:
        return None
    placements = check_placements(mesh, placements, len(shape), what)
    try:
        return runtime().Layout.from_placements(placement_tuples(placements), list(mesh.shape),
                                                [int(s) for s in shape])
    except ValueError as e:
        raise PlacementError(f"{what}: {e}") from None


def layout_key(layout) -> str:
    """One string per distribution: replicated layouts (or none) are "R"."""
    return "R" if layout is None or layout.is_replicated else str(layout)


_SESSIONS: Dict[Tuple[Tuple[int, ...], str], object] = {}
_EXCHANGES: list = []
BACKENDS = ("threads", "mpi", "cuda", "cuda-local", "nccl")
#: Backends whose ranks are processes: a ShardSet holds this process's
#: rank only, and gathering it is a collective.
PROCESS_BACKENDS = ("mpi", "nccl")


def _env_int(*names: str) -> Optional[int]:
    for name in names:
        text = os.environ.get(name)
        if text:
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"${name}={text!r} is not a whole number") from None
    return None


def _store_exchange(rank: int, world: int, timeout: float):
    """The bootstrap exchange of the nccl backend under ``torchrun``:
    PyTorch's TCPStore at $MASTER_ADDR:$MASTER_PORT (the agent's store when
    torchrun runs one, else rank 0 serves it, as ``init_method="env://"``
    does). Rank 0 publishes its bytes, the others wait for them."""
    import datetime
    host, port = os.environ["MASTER_ADDR"], _env_int("MASTER_PORT")
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    # An elastic restart keeps the agent's store: each attempt its own keys.
    run = os.environ.get("TORCHELASTIC_RUN_ID", "")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    stores = []

    def exchange(key: str, data: Optional[bytes]) -> Optional[bytes]:
        # The store is made at the first exchange, once the binding has
        # opened NCCL and the GPU (whose absence is the error to report);
        # a process group already initialized lends its own (it serves
        # MASTER_PORT).
        if not stores:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                stores.append(dist.distributed_c10d._get_default_store())
            else:
                stores.append(dist.TCPStore(host, port, world, is_master=(rank == 0 and not agent),
                                            timeout=datetime.timedelta(seconds=timeout),
                                            wait_for_workers=False))
        name = f"shardx/{run}/{attempt}/{key}"
        if data is not None:
            stores[0].set(name, data)
            return None
        return bytes(stores[0].get(name))
    return exchange


def _nccl_session(rt, mesh: Mesh, timeout: float = 60.0):
    """This process's rank of ``mesh`` on NCCL, one process per GPU. The
    launcher names the rank and world size: torchrun (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR/MASTER_PORT: the id goes through PyTorch's
    TCPStore), mpirun (OMPI_COMM_WORLD_*: through MPI), or SHARDX_RANK /
    SHARDX_WORLD_SIZE / SHARDX_STORE_DIR (a file store). A mesh of one needs
    no launcher. The GPU is the local rank's (LOCAL_RANK,
    OMPI_COMM_WORLD_LOCAL_RANK) modulo the devices."""
    rank = _env_int("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SHARDX_RANK")
    world = _env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SHARDX_WORLD_SIZE")
    if rank is None and world is None and mesh.size == 1:
        rank, world = 0, 1
    if rank is None or world is None:
        raise ValueError(f"backend 'nccl' runs one process per GPU: start {mesh.size} processes "
                         f"with torchrun --nproc-per-node {mesh.size} (or mpirun -np "
                         f"{mesh.size}); RANK and WORLD_SIZE are not set")
    if world != mesh.size:
        raise ValueError(f"backend 'nccl': the mesh {list(mesh.shape)} has {mesh.size} ranks but "
                         f"the launcher started {world} processes")
    if not 0 <= rank < world:
        raise ValueError(f"backend 'nccl': rank {rank} is outside a world of {world}")
    exchange = None
    if world == 1:
        def exchange(key, data):
            return data
    elif os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT"):
        exchange = _store_exchange(rank, world, timeout)
    s = rt.Session.nccl(list(mesh.shape), rank, world, exchange, timeout)
    # Rank 0's store serves the others until they have read: kept alive.
    _EXCHANGES.append(exchange)
    return s


def session(mesh: Mesh, backend: str = "threads"):
    """The process's rank session of ``mesh``'s shape: ``threads`` (every
    rank a persistent thread of this process), ``mpi`` (this process is
    one rank of MPI_COMM_WORLD, under ``mpirun -np <mesh size>``),
    ``cuda`` (every rank a thread of this process on CUDA device 0, the
    cuda-local communicator) or ``nccl`` (this process is one rank, on its
    own GPU: see ``_nccl_session``)."""
    if backend == "cuda-local":
        backend = "cuda"
    s = _SESSIONS.get((mesh.shape, backend))
    if s is None:
        rt = runtime()
        if backend in ("cuda", "nccl"):
            _point_runtime_at_wheels()
        if backend == "threads":
            s = rt.Session(list(mesh.shape))
        elif backend == "cuda":
            s = rt.Session.cuda_local(list(mesh.shape))
        elif backend == "nccl":
            s = _nccl_session(rt, mesh)
        elif backend == "mpi":
            if not rt.has_mpi:
                raise ValueError("backend 'mpi': this ShardX build has no mpi backend "
                                 "(CMake found no MPI)")
            if not any(v in os.environ for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")):
                raise ValueError("backend 'mpi' runs under mpirun with one process per rank "
                                 f"(mpirun -np {mesh.size} python ...)")
            s = rt.Session.mpi(list(mesh.shape))
            if not any(b == "mpi" for _, b in _SESSIONS):
                import atexit
                atexit.register(_finalize_mpi)
        else:
            raise ValueError(f"unknown backend {backend!r}")
        _SESSIONS[(mesh.shape, backend)] = s
    return s


def cuda_device_index() -> int:
    """The CUDA device this process's GPU sessions run on, as PyTorch numbers
    it: ``$SHARDX_CUDA_DEVICE`` modulo the device count, as the runtime
    reads it (a launcher may number ranks past the GPUs of one host)."""
    import torch
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    ordinal = max(0, runtime().cuda_device_ordinal())
    return ordinal % count if count else ordinal


def device_shards(session, mesh: Mesh, t, layout):
    """The ShardSet of torch CUDA tensor ``t`` on a GPU session, without a
    trip through host memory: each rank's shard is a view of ``t`` where the
    layout allows (replicated, or one contiguous block per rank), else a
    copy made on the GPU; the runtime reads the memory in place (DLPack).
    None where the tensor cannot go this way (not a CUDA tensor, another
    GPU than the session's, a Partial layout, a CPU session): the caller
    stages it through the host."""
    if not getattr(session, "device_resident", False) or not getattr(t, "is_cuda", False):
        return None
    import torch
    if t.device.index != cuda_device_index():
        return None
    if layout is not None and not layout.is_replicated:
        placements = layout.placements(list(mesh.shape))
        if placements is None or any(p[0] == "P" for p in placements):
            return None
    t = t.detach()
    if t.dtype == torch.bool:
        return None
    t = t.contiguous()
    shape = tuple(t.shape)
    locals_ = []
    if layout is None or layout.is_replicated:
        locals_ = [t] * mesh.size
    else:
        for rank in range(mesh.size):
            coords = [int(c) for c in np.unravel_index(rank, mesh.shape)]
            if session.process_rank >= 0 and rank != session.process_rank:
                locals_.append(None)
                continue
            local = t
            for d, runs in enumerate(layout.local_runs(list(mesh.shape), list(shape), coords)):
                parts = [local.narrow(d, o, n) for o, n in runs]
                local = parts[0] if len(parts) == 1 else torch.cat(parts, d)
            locals_.append(local.contiguous())
    # The runtime's streams read the memory once the work PyTorch queued
    # for it is done.
    torch.cuda.current_stream(t.device).synchronize()
    return session.device_shards(locals_, dtype_name(t), layout, list(shape))


def _point_runtime_at_wheels() -> None:
    """Lets the GPU runtime (and the CUDA artifacts' copies of it) find
    cuBLAS and NCCL in this interpreter's PyTorch wheels (nvidia/*/lib),
    wherever its site-packages are: $SHARDX_SITE_PACKAGES, unless set."""
    import site
    if os.environ.get("SHARDX_SITE_PACKAGES"):
        return
    folders = list(site.getsitepackages()) + [site.getusersitepackages()]
    folders += [p for p in sys.path if p.endswith("-packages")]
    os.environ["SHARDX_SITE_PACKAGES"] = os.pathsep.join(dict.fromkeys(folders))


def _process_session(mesh: Mesh):
    """The session of this process's rank of ``mesh`` (mpi or nccl)."""
    for backend in PROCESS_BACKENDS:
        s = _SESSIONS.get((mesh.shape, backend))
        if s is not None:
            return s
    raise ValueError(f"no process session holds mesh {list(mesh.shape)}")


def _finalize_mpi():
    for (_, backend), s in _SESSIONS.items():
        if backend == "mpi":
            s.close()
    runtime().finalize_mpi()


class ShardedTensor:
    """A global tensor as resident local shards on the ranks of ``mesh``.

    Its three slots are the runtime's view of it (docs/Importer.md, "The
    call path"): ``shards``, the binding's ``ShardSet`` (the per-rank
    buffers), ``mesh`` and ``guard_key``, the ``(global shape, dtype name,
    layout key)`` that compiled calls are guarded by. A compiled call
    (``_shardx_rt.CallPlan``) reads ``shards`` of its inputs and makes its
    outputs by setting the three on a new instance, without running Python
    code."""

    __slots__ = ("shards", "mesh", "guard_key", "__weakref__")

    def __init__(self, shards, mesh: Mesh, key=None):
        self._set(shards, key)
        self.mesh = mesh

    def _set(self, shards, key=None):
        """Points the handle at ``shards``; ``key`` (global shape, dtype,
        layout key) when the caller knows it, else read from the shards."""
        self.shards = shards
        self.guard_key = key or (tuple(shards.global_shape), shards.dtype, layout_key(shards.layout))

    @staticmethod
    def from_torch(t, mesh: Mesh, placements: Optional[Sequence[Placement]] = None,
                   backend: str = "threads") -> "ShardedTensor":
        """Scatters a CPU tensor (or numpy array) over ``mesh`` by
        ``placements`` (default: replicated). A Partial placement puts the
        value on coordinate 0 of the axis and the identity elsewhere. With
        ``backend="mpi"`` every process passes the same tensor and keeps
        its own rank's shard."""
        array = t if isinstance(t, np.ndarray) else t.detach()
        shape = tuple(array.shape)
        layout = make_layout(mesh, placements, shape)
        if backend in ("cuda", "cuda-local", "nccl") and getattr(array, "is_cuda", False):
            shards = device_shards(session(mesh, backend), mesh, array, layout)
            if shards is not None:
                return ShardedTensor(shards, mesh)
        if isinstance(array, np.ndarray):
            array = np.ascontiguousarray(array)
        else:
            array = array.contiguous().cpu()
        shards = session(mesh, backend).scatter(array, dtype_name(array), layout)
        return ShardedTensor(shards, mesh)

    from_numpy = from_torch

    @staticmethod
    def from_locals(locals: Sequence, mesh: Mesh, placements=None, shape: Sequence[int] = (),
                    dtype: Optional[str] = None, backend: str = "threads") -> "ShardedTensor":
        """The tensor of global ``shape`` whose rank ``r`` holds
        ``locals[r]`` (numpy arrays or CPU torch tensors, each of its rank's
        local shape under ``placements``, a placement list or a runtime
        ``Layout``; None: replicated). One entry per rank of ``mesh``; under
        a process backend (mpi) only this process's entry is read and the
        others may be None, and a replicated tensor reads only its first
        held entry. ``dtype`` (an MLIR name such as "bf16") defaults to the
        arrays' own. The arrays are copied. The inverse of ``local`` and
        ``local_runs``: checkpoint loading builds shards this way without
        assembling the global tensor."""
        shape = tuple(int(s) for s in shape)
        layout = placements if isinstance(placements, runtime().Layout) \
            else make_layout(mesh, placements, shape)
        if layout is not None and layout.is_replicated:
            layout = None
        arrays = [None if a is None else (np.ascontiguousarray(a) if isinstance(a, np.ndarray)
                                         else a.detach().contiguous()) for a in locals]
        if dtype is None:
            first = next((a for a in arrays if a is not None), None)
            if first is None:
                raise ValueError("from_locals: no rank's shard is given")
            dtype = dtype_name(first)
        shards = session(mesh, backend).shards_of(arrays, dtype, layout, list(shape))
        return ShardedTensor(shards, mesh)

    @staticmethod
    def from_dtensor(dt, mesh: Optional[Mesh] = None, backend: str = "threads") -> "ShardedTensor":
        """The tensor holding DTensor ``dt``'s local shards (Partial terms
        included) on ``mesh`` (default: the DeviceMesh's shape and axis
        names). On ``threads`` a collective over the DeviceMesh (every
        process gets every rank's shard); on ``mpi``/``nccl`` this process's
        shard only. See ``shardx.dtensor`` and docs/DTensor.md."""
        from .dtensor import from_dtensor
        return from_dtensor(dt, mesh, backend)

    def to_dtensor(self, device_mesh=None):
        """The DTensor whose local shard on each process is its DeviceMesh
        coordinate's shard here (no communication); ``device_mesh`` defaults
        to a CPU mesh of this tensor's mesh over the torch.distributed
        world. See ``shardx.dtensor`` and docs/DTensor.md."""
        from .dtensor import to_dtensor
        return to_dtensor(self, device_mesh)

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.shards.global_shape)

    @property
    def dtype(self):
        return dtypes.torch_dtype(self.shards.dtype)

    @property
    def layout_text(self) -> str:
        """The canonical layout (``#shardx.layout`` body), "R" when replicated."""
        return self.guard_key[2]

    @property
    def placements(self) -> Optional[Tuple[Placement, ...]]:
        """DTensor placements of the layout (None when they cannot express it)."""
        layout = self.shards.layout
        if layout is None:
            return tuple(Replicate() for _ in self.mesh.shape)
        tuples = layout.placements(list(self.mesh.shape))
        return None if tuples is None else _placements_of(tuples)

    def local(self, rank: int) -> np.ndarray:
        """Rank ``rank``'s shard: a read-only view of its buffer (no copy).
        Under ``mpi``, only this process's rank."""
        return self.shards.local(rank)

    def local_runs(self, rank: int) -> Tuple[Tuple[Tuple[int, int], ...], ...]:
        """Which global indices rank ``rank``'s shard holds: per tensor dim,
        the (offset, size) runs of global indices in local order (one run
        unless the dim is strided; a Partial axis does not change them). The
        shard is their product: local block (i, j, ...) of run sizes is the
        global block at the runs' offsets."""
        layout = self.shards.layout
        shape = self.shape
        if layout is None or layout.is_replicated:
            return tuple(((0, n),) for n in shape)
        coords = np.unravel_index(rank, self.mesh.shape) if self.mesh.shape else ()
        runs = layout.local_runs(list(self.mesh.shape), list(shape), [int(c) for c in coords])
        return tuple(tuple((int(o), int(n)) for o, n in d) for d in runs)

    def full(self) -> np.ndarray:
        """The global tensor, gathered now (pending Partials reduced). Under
        ``mpi`` a collective: every process calls it. numpy has no
        bfloat16: a bf16 tensor's array (here and in ``local``) holds its
        bits as uint16; ``to_torch`` gives torch.bfloat16."""
        if self.shards.distributed:
            return _process_session(self.mesh).gather(self.shards)
        return self.shards.full()

    numpy = full

    @property
    def on_device(self) -> bool:
        """Whether the shards live in GPU memory: the results of a call on
        the ``cuda`` or ``nccl`` backend stay there between calls."""
        return self.shards.on_device

    def to_torch(self):
        """The global tensor as a torch tensor: a CUDA tensor on the
        session's GPU where the shards live in GPU memory (a copy on the
        device where one rank's shard is the whole tensor; else gathered on
        the host and copied in), else a CPU tensor."""
        import torch
        if self.shards.on_device and torch.cuda.is_available():
            device = torch.device("cuda", cuda_device_index())
            layout = self.shards.layout
            whole = layout is None or layout.is_replicated
            if whole and not self.shards.distributed:
                copy = self.shards.device_local(0, device.index).clone()
                # The clone is queued on PyTorch's stream: it must have read
                # the buffer before this tensor's shards can be freed and
                # their memory reused by the next call.
                torch.cuda.current_stream(device).synchronize()
                return copy
            return self._host_torch().to(device)
        return self._host_torch()

    def _host_torch(self):
        return dtypes.as_torch(self.full(), self.shards.dtype)

    def item(self):
        return self.full().item()

    def shares_buffer(self, other: "ShardedTensor", rank: int = 0) -> bool:
        return self.shards.buffer_address(rank) == other.shards.buffer_address(rank)

    def __repr__(self) -> str:
        return (f"ShardedTensor(shape={list(self.shape)}, dtype={self.shards.dtype}, "
                f"layout={self.layout_text}, mesh={self.mesh.shape})")
