"""Sharded checkpoints in PyTorch's DCP format, loadable onto any mesh.

``save_checkpoint(root, state, step=N)`` writes a pytree of ShardedTensors
(the ``params`` / ``state`` a ``shardx.compile`` training loop carries),
plain tensors and Python constants: each rank writes the chunks of its own
shards (a replicated chunk once, by one of its holders), in the on-disk
format of ``torch.distributed.checkpoint`` (DCP): a pickled ``.metadata``
(per tensor its chunks' global offsets and sizes, per chunk its file, byte
offset and length) and one ``__<rank>_0.distcp`` data file per writing
rank, written by DCP's own ``FileSystemWriter``. ``shardx.json`` adds what
DCP's format has no place for: the pytree, each tensor's ShardX layout and
mesh, and a CRC-32 per chunk and of ``.metadata``.

``load_checkpoint(path, mesh, placements)`` reads a checkpoint (ShardX's or
one ``dcp.save`` wrote from plain tensors or DTensors) onto ``mesh`` with
``placements``, which need not be the ones it was saved with: each target
rank reads, with DCP's ``FileSystemReader``, only the saved chunks that
overlap its own shard, and copies the overlaps into place (DCP's
resharding at load time, ``create_read_items_for_chunk_list``). No global
tensor is assembled.

A checkpoint is written into a temporary directory beside its final place,
files fsynced, then renamed into place; ``root/latest`` names the newest
and is replaced the same way. A save that dies half way leaves only a
``.tmp-*`` directory, which nothing loads. A checkpoint whose files are
missing, truncated or fail their checksums raises ``CheckpointError``.
See docs/Checkpoints.md.
"""

from __future__ import annotations

import concurrent.futures
import io
import itertools
import json
import logging
import math
import os
import pickle
import re
import shutil
import time
import uuid
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import dtypes
from . import sharded_tensor as _st
from .placements import Mesh, Placement
from .sharded_tensor import ShardedTensor, dtype_name, make_layout, runtime

log = logging.getLogger("shardx.checkpoint")

FORMAT = "shardx-checkpoint"
FORMAT_VERSION = 1
#: The file beside DCP's ``.metadata`` with ShardX's own description.
INFO_FILE = "shardx.json"
METADATA_FILE = ".metadata"
#: The pointer to the newest step directory under a checkpoint root.
LATEST_FILE = "latest"
_STEP_DIR = re.compile(r"step-(\d+)\Z")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read: missing, unfinished,
    truncated or corrupt files, or a state or placement it cannot hold."""


# ---------------------------------------------------------------------------
# The state pytree: fully qualified names as DCP's flatten_state_dict makes
# them ("params.0", "state.exp_avg.1"), one walk for save and load.
# ---------------------------------------------------------------------------

_CONSTANTS = (type(None), bool, int, float, str)


def _is_tensor(x) -> bool:
    return isinstance(x, ShardedTensor) or isinstance(x, np.ndarray) or hasattr(x, "detach")


def _traversed(x) -> bool:
    """Whether a list or tuple is a node of the tree: DCP's rule for lists
    (flatten_state_dict looks into a list only when it holds a tensor, a
    dict or such a list; a list of constants is one object), and any list
    or tuple holding tensors (ShardX cannot pickle a ShardedTensor)."""
    return any(type(v) is dict or _is_tensor(v) or (type(v) in (list, tuple) and _traversed(v))
               for v in x)


def _encode(x):
    """A JSON node of a constant (nested lists and tuples of constants
    included; floats by their hex text, so -0.0, nan and inf survive)."""
    t = type(x)
    if t in (list, tuple):
        return {"const": [_encode(v) for v in x], "type": t.__name__}
    return {"const": x.hex() if t is float else x, "type": t.__name__}


def _const(node):
    t, value = node["type"], node["const"]
    if t in ("list", "tuple"):
        return (list if t == "list" else tuple)(_const(v) for v in value)
    if t == "float":
        return float.fromhex(value)
    return {"NoneType": lambda v: None, "bool": bool, "int": int, "str": str}[t](value)


def _walk(state) -> Tuple[dict, List[Tuple[str, tuple, Any]]]:
    """The JSON tree of ``state`` and its leaves as (fqn, path, value): dicts
    (string keys) and lists/tuples holding tensors or dicts are nodes;
    tensors, ShardedTensors and constants (None/bool/int/float/str, and
    lists/tuples of them) are leaves. The fqns are DCP's: the path's keys
    and indices joined by dots."""
    if type(state) is not dict:
        raise CheckpointError(f"the state to save must be a dict (a DCP state dict), got "
                              f"{type(state).__name__}")
    leaves: List[Tuple[str, tuple, Any]] = []
    seen: Dict[str, tuple] = {}

    def leaf(path, value):
        fqn = ".".join(map(str, path))
        if fqn in seen:
            raise CheckpointError(f"two entries of the state have the name {fqn!r} "
                                  f"(paths {seen[fqn]} and {path}): rename one")
        seen[fqn] = path
        leaves.append((fqn, path, value))
        return fqn

    def constant(path, x):
        if type(x) in (list, tuple):
            return all(constant(path, v) for v in x)
        if type(x) not in _CONSTANTS:
            raise CheckpointError(f"{'.'.join(map(str, path))}: cannot save a "
                                  f"{type(x).__name__} (tensors, ShardedTensors, dicts, lists, "
                                  "tuples and None/bool/int/float/str constants only)")
        return True

    def walk(path, x):
        t = type(x)
        if t is dict:
            for k in x:
                if type(k) is not str:
                    raise CheckpointError(f"dict keys of the state must be strings; "
                                          f"{'.'.join(map(str, path)) or 'the state'} has "
                                          f"key {k!r}")
            return {"dict": [[k, walk(path + (k,), v)] for k, v in x.items()]}
        if t in (list, tuple) and _traversed(x):
            return {t.__name__: [walk(path + (i,), v) for i, v in enumerate(x)]}
        if _is_tensor(x):
            return {"tensor": leaf(path, x)}
        constant(path, x)
        leaf(path, x)
        return _encode(x)
    return walk((), state), leaves


def _build(node, values: Dict[str, Any]):
    """The pytree of a JSON tree, tensors from ``values`` by fqn."""
    if "dict" in node:
        return {k: _build(c, values) for k, c in node["dict"]}
    if "list" in node:
        return [_build(c, values) for c in node["list"]]
    if "tuple" in node:
        return tuple(_build(c, values) for c in node["tuple"])
    if "tensor" in node:
        return values[node["tensor"]]
    return _const(node)


def _paths(node, path=()) -> Dict[str, tuple]:
    """fqn -> path of every tensor leaf of a JSON tree."""
    if "tensor" in node:
        return {node["tensor"]: path}
    for kind in ("dict", "list", "tuple"):
        if kind in node:
            children = node[kind] if kind == "dict" else list(enumerate(node[kind]))
            out: Dict[str, tuple] = {}
            for k, c in children:
                out.update(_paths(c, path + (k,)))
            return out
    return {}


def _tree_of_paths(paths: Dict[str, tuple]):
    """A JSON tree from DCP's planner_data (fqn -> path of str keys and int
    list indices, as flatten_state_dict writes it)."""
    root: dict = {}
    for fqn, path in paths.items():
        node = root
        for i, k in enumerate(path):
            last = i == len(path) - 1
            node = node.setdefault(k, fqn if last else {})
    def convert(x):
        if isinstance(x, str):
            return {"tensor": x}
        keys = list(x)
        if keys and all(isinstance(k, int) for k in keys) and sorted(keys) == list(range(len(keys))):
            return {"list": [convert(x[k]) for k in range(len(keys))]}
        return {"dict": [[str(k), convert(v)] for k, v in x.items()]}
    return convert(root)


# ---------------------------------------------------------------------------
# Chunks: a rank's shard is the product of its per-dim runs of global
# indices (ShardedTensor.local_runs); each product box is one DCP chunk.
# ---------------------------------------------------------------------------

def _boxes(runs) -> List[Tuple[Tuple[int, ...], Tuple[int, ...], Tuple[slice, ...]]]:
    """(global offsets, sizes, local slices) of each box of a rank's shard;
    empty boxes left out."""
    per_dim = []
    for dim_runs in runs:
        at, items = 0, []
        for offset, size in dim_runs:
            if size > 0:
                items.append((offset, size, slice(at, at + size)))
            at += size
        per_dim.append(items)
    out = []
    for combo in itertools.product(*per_dim):
        out.append((tuple(c[0] for c in combo), tuple(c[1] for c in combo),
                    tuple(c[2] for c in combo)))
    return out


def _mlir_dtype(torch_dtype) -> str:
    try:
        return dtypes.from_torch(torch_dtype)
    except TypeError:
        raise CheckpointError(f"ShardX has no dtype {torch_dtype}") from None


def _as_torch(array: np.ndarray, dtype: str):
    return dtypes.as_torch(np.array(array, copy=True), dtype)


def _layout_partials(layout) -> List[Optional[str]]:
    return [] if layout is None else json.loads(layout.to_json()).get("partials", [])


def _without_partials(layout):
    data = json.loads(layout.to_json())
    data["partials"] = [None] * len(data.get("partials", []))
    out = runtime().Layout.from_json(json.dumps(data))
    return None if out.is_replicated else out


def _process_backend(mesh: Mesh) -> Optional[str]:
    """The process backend (mpi, nccl) whose session holds ``mesh``."""
    for backend in _st.PROCESS_BACKENDS:
        if (mesh.shape, backend) in _st._SESSIONS:
            return backend
    return None


# ---------------------------------------------------------------------------
# The writing ranks: every rank in this process (threads, cuda), or this
# process's rank of a process world (mpi, nccl), whose collectives are
# ShardedTensor gathers.
# ---------------------------------------------------------------------------

class _Ranks:
    def __init__(self, size: int, mine: Sequence[int], mesh: Optional[Mesh] = None,
                 backend: Optional[str] = None):
        self.size = size
        self.mine = list(mine)
        self.mesh = mesh
        self.backend = backend

    @property
    def coordinator(self) -> bool:
        return 0 in self.mine

    def allgather(self, data: bytes) -> List[bytes]:
        """Every rank's bytes (a collective in a process world)."""
        if self.backend is None:
            return [data]
        from .placements import Shard
        n, me = self.size, self.mine[0]
        split = [Shard(0)] * len(self.mesh.shape)
        # One element per rank, in rank order: [S(0), S(0), ...] over the
        # whole mesh (nested splits, major axis first).
        mine = [None] * n
        mine[me] = np.array([len(data)], np.int64)
        lengths = ShardedTensor.from_locals(mine, self.mesh, split, (n,),
                                            backend=self.backend).full()
        # The bytes as 64-bit words (the gather's dtypes have no bytes).
        width = max(1, (int(lengths.max()) + 7) // 8)
        padded = data + bytes(width * 8 - len(data))
        mine[me] = np.frombuffer(padded, np.int64)
        everything = ShardedTensor.from_locals(mine, self.mesh, split, (n * width,),
                                               backend=self.backend).full().tobytes()
        return [everything[r * width * 8:r * width * 8 + int(lengths[r])] for r in range(n)]


def _ranks_of(tensors: Sequence[ShardedTensor]) -> _Ranks:
    sizes = {t.mesh.size for t in tensors}
    if len(sizes) > 1:
        raise CheckpointError(f"the state's ShardedTensors live on meshes of different sizes "
                              f"{sorted(sizes)}: save them separately")
    size = sizes.pop() if sizes else 1
    distributed = [t for t in tensors if t.shards.distributed]
    if not tensors and any(b in _st.PROCESS_BACKENDS for _, b in _st._SESSIONS):
        # Every process would act as the only rank and remove the others'
        # temporary directories.
        raise CheckpointError("under a process backend (mpi, nccl) the state must hold at "
                              "least one ShardedTensor: it tells each process its rank")
    if not distributed:
        return _Ranks(size, range(size))
    if len(distributed) != len(tensors):
        raise CheckpointError("the state mixes ShardedTensors of a process backend (mpi, nccl) "
                              "with ones whose ranks are all in this process")
    mesh = distributed[0].mesh
    backend = _process_backend(mesh)
    rank = _st._process_session(mesh).process_rank
    return _Ranks(size, [rank], mesh, backend)


# ---------------------------------------------------------------------------
# Saving
# ---------------------------------------------------------------------------

def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: str, data: bytes) -> None:
    tmp = os.path.join(os.path.dirname(path), f".tmp-{os.path.basename(path)}-{uuid.uuid4().hex}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(os.path.dirname(os.path.abspath(path)))


def _test_stall(stage: str, step: Optional[int]) -> None:
    """Test hook (tests of interrupted saves): with
    ``SHARDX_CHECKPOINT_TEST_STALL=<stage>[-<step>]:<file>``, a save (of
    that step) creates ``<file>`` at ``stage`` (data, metadata, publish,
    latest) and sleeps there, to be killed."""
    spec = os.environ.get("SHARDX_CHECKPOINT_TEST_STALL", "")
    want, _, marker = spec.partition(":")
    if marker and want in (stage, f"{stage}-{step}"):
        with open(marker, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)


class _Chunk:
    __slots__ = ("fqn", "offsets", "sizes", "owner", "data")

    def __init__(self, fqn, offsets, sizes, owner, data):
        self.fqn, self.offsets, self.sizes, self.owner, self.data = fqn, offsets, sizes, owner, data


def _plan_chunks(leaves, ranks: _Ranks):
    """Per tensor fqn (global shape, dtype, layout JSON or None, mesh shape)
    and every chunk with the rank that writes it: each distinct box once,
    by the holder with the fewest bytes so far (ties: the lowest rank);
    plain tensors, constants and reduced Partials by rank 0. Every process
    computes the same plan."""
    tensors: Dict[str, dict] = {}
    chunks: List[_Chunk] = []
    load = [0] * ranks.size
    for fqn, _, value in leaves:
        if not _is_tensor(value):
            chunks.append(_Chunk(fqn, None, None, 0, value))
            continue
        if not isinstance(value, ShardedTensor):
            array = value if isinstance(value, np.ndarray) else value.detach().cpu().contiguous()
            dtype = dtype_name(array)
            tensors[fqn] = dict(shape=list(array.shape), dtype=dtype, layout=None, mesh=None)
            chunks.append(_Chunk(fqn, (0,) * array.ndim, tuple(array.shape), 0,
                                 lambda array=array, dtype=dtype: _plain(array, dtype)))
            continue
        t = value
        dtype, shape, layout = t.shards.dtype, t.shape, t.shards.layout
        if layout is not None and any(_layout_partials(layout)):
            # A pending reduction is saved reduced (a collective under a
            # process backend): the layout without its Partial axes.
            reduced = t.full()
            layout = _without_partials(layout)
            backend = ranks.backend or "threads"
            t = ShardedTensor(_st.session(t.mesh, backend).scatter(
                np.ascontiguousarray(reduced), dtype, layout), t.mesh)
        tensors[fqn] = dict(shape=list(shape), dtype=dtype, mesh=list(t.mesh.shape),
                            layout=None if layout is None or layout.is_replicated
                            else layout.to_json())
        holders: Dict[Tuple[int, ...], Tuple[Tuple[int, ...], List[Tuple[int, Tuple[slice, ...]]]]] = {}
        for r in range(t.mesh.size):
            for offsets, sizes, slices in _boxes(t.local_runs(r)):
                holders.setdefault(offsets, (sizes, []))[1].append((r, slices))
        if not holders:  # an empty tensor: one empty chunk
            holders[(0,) * len(shape)] = (tuple(shape), [(0, tuple(slice(0, 0) for _ in shape))])
        itemsize = dtypes.get(dtype).bytes
        for offsets in sorted(holders):
            sizes, who = holders[offsets]
            nbytes = math.prod(sizes) * itemsize
            r, slices = min(who, key=lambda w: (load[w[0]], w[0]))
            load[r] += nbytes
            chunks.append(_Chunk(fqn, offsets, sizes, r,
                                 lambda t=t, r=r, slices=slices, dtype=dtype:
                                 _as_torch(t.local(r)[slices], dtype)))
    return tensors, chunks


def _plain(array, dtype):
    return _as_torch(array, dtype) if isinstance(array, np.ndarray) else array.clone()


def _write_items(chunks: Sequence[_Chunk], tensors: Dict[str, dict]):
    import torch
    from torch.distributed.checkpoint.metadata import (ChunkStorageMetadata, MetadataIndex,
                                                       TensorProperties)
    from torch.distributed.checkpoint.planner import (BytesIOWriteData, TensorWriteData,
                                                      WriteItem, WriteItemType)
    items = []
    for c in chunks:
        if c.offsets is None:
            items.append(WriteItem(index=MetadataIndex(c.fqn), type=WriteItemType.BYTE_IO,
                                   bytes_io_data=BytesIOWriteData(0)))
            continue
        info = tensors[c.fqn]
        items.append(WriteItem(
            index=MetadataIndex(c.fqn, c.offsets),
            type=WriteItemType.SHARD if info["layout"] else WriteItemType.TENSOR,
            tensor_data=TensorWriteData(
                chunk=ChunkStorageMetadata(offsets=torch.Size(c.offsets),
                                           sizes=torch.Size(c.sizes)),
                properties=TensorProperties(dtype=dtypes.torch_dtype(info["dtype"])),
                size=torch.Size(info["shape"]))))
    return items


def _save_planner(chunks: Sequence[_Chunk]):
    from torch.distributed.checkpoint.planner import SavePlan, SavePlanner

    class RankSavePlanner(SavePlanner):
        """One rank's part of a save: its chunks' data, made when the
        writer asks (one chunk copied at a time)."""

        def __init__(self):
            self.data = {(c.fqn, c.offsets): c.data for c in chunks}

        def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
            pass

        def create_local_plan(self):
            return SavePlan([])

        def create_global_plan(self, all_plans):
            return all_plans, None

        def finish_plan(self, new_plan):
            return new_plan

        def resolve_data(self, write_item):
            index = write_item.index
            offsets = None if index.offset is None else tuple(index.offset)
            data = self.data[(index.fqn, offsets)]
            if offsets is None:
                import torch
                buffer = io.BytesIO()
                torch.save(data, buffer)
                buffer.seek(0)
                return buffer
            return data()
    return RankSavePlanner()


def _writer(path: str, final: str):
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint.metadata import StorageMeta

    class Writer(FileSystemWriter):
        # .metadata names the published directory, not the temporary one.
        def storage_meta(self):
            return StorageMeta(checkpoint_id=final, save_id=self.save_id)
    return Writer(path, single_file_per_rank=True, sync_files=True, thread_count=1,
                  overwrite=False)


def _checksums(folder: str, results) -> List[list]:
    """[file, offset, length, crc32] of each written item, read back."""
    out = []
    by_file: Dict[str, list] = {}
    for r in results:
        by_file.setdefault(r.storage_data.relative_path, []).append(r.storage_data)
    for name, infos in by_file.items():
        with open(os.path.join(folder, name), "rb") as f:
            for s in sorted(infos, key=lambda s: s.offset):
                f.seek(s.offset)
                out.append([name, s.offset, s.length, zlib.crc32(f.read(s.length))])
    return out


def save_checkpoint(path: str, state: dict, step: Optional[int] = None,
                    keep: Optional[int] = None) -> str:
    """Saves ``state`` (a dict pytree of ShardedTensors, tensors and Python
    constants) as a DCP checkpoint and returns its directory.

    With ``step``, ``path`` is a checkpoint root: the checkpoint goes to
    ``path/step-<step, 8 digits>`` and ``path/latest`` is pointed at it
    (``keep``: how many of the newest step directories to keep; older ones
    are removed after the new one is published). Without, ``path`` is the
    checkpoint directory itself and must not exist.

    Each rank writes the chunks of its shards (a replicated chunk once);
    on the threads backend the ranks write in parallel threads, under a
    process backend (mpi) each process writes its rank's and every process
    calls this (a collective). A Partial tensor is saved reduced (its
    Partial axes become Replicate). The checkpoint appears complete or not
    at all (written under a temporary name, fsynced and renamed)."""
    tree, leaves = _walk(state)
    sharded = [v for _, _, v in leaves if isinstance(v, ShardedTensor)]
    ranks = _ranks_of(sharded)
    path = os.path.abspath(os.fspath(path))
    if step is not None:
        if int(step) != step or step < 0:
            raise CheckpointError(f"step must be a whole number >= 0, got {step!r}")
        root, final = path, os.path.join(path, f"step-{int(step):08d}")
    else:
        root, final = os.path.dirname(path), path
    if keep is not None and keep < 1:
        raise CheckpointError(f"keep must be at least 1, got {keep}")
    if os.path.exists(final):
        raise CheckpointError(f"{final} already exists: a checkpoint is never overwritten "
                              "(remove it, or save under another step)")

    # The temporary directory: made by rank 0, its name sent to the others.
    name = b""
    if ranks.coordinator:
        os.makedirs(root, exist_ok=True)
        base = os.path.basename(final)
        # What saves that died left behind (one saver per root at a time):
        # in a root, any step's directory and `latest`'s temporary file;
        # beside a lone checkpoint, that checkpoint's directories only.
        stale = re.compile(r"\.tmp-(step-\d+-[0-9a-f]{12}|latest-[0-9a-f]{32})\Z" if step is not None
                           else rf"\.tmp-{re.escape(base)}-[0-9a-f]{{12}}\Z")
        for old in os.listdir(root):
            if stale.match(old):
                left = os.path.join(root, old)
                if os.path.isdir(left) and not os.path.islink(left):
                    shutil.rmtree(left, ignore_errors=True)
                else:
                    os.unlink(left)
        name = f".tmp-{base}-{uuid.uuid4().hex[:12]}".encode()
        os.makedirs(os.path.join(root, name.decode()))
    tmp = os.path.join(root, ranks.allgather(name)[0].decode())

    tensors, chunks = _plan_chunks(leaves, ranks)
    from torch.distributed.checkpoint.planner import SavePlan
    per_rank = [[c for c in chunks if c.owner == r] for r in range(ranks.size)]
    writer = _writer(tmp, final)
    plans = writer.prepare_global_plan([SavePlan(_write_items(cs, tensors)) for cs in per_rank])

    def write(r):
        if not per_rank[r]:
            return [], []
        results = writer.write_data(plans[r], _save_planner(per_rank[r])).wait()
        return results, _checksums(tmp, results)
    mine = [r for r in ranks.mine if per_rank[r]]
    with concurrent.futures.ThreadPoolExecutor(max(1, min(len(mine), os.cpu_count() or 1, 8))) as pool:
        written = list(pool.map(write, mine))
    _test_stall("data", step)
    payload = pickle.dumps(([x for w in written for x in w[0]], [x for w in written for x in w[1]]))
    gathered = [pickle.loads(b) for b in ranks.allgather(payload)]
    if ranks.coordinator:
        results = [g[0] for g in gathered]
        crcs = [c for g in gathered for c in g[1]]
        _publish(tmp, final, root if step is not None else None, writer, tree, leaves, tensors,
                 chunks, results, crcs, ranks, step, keep)
    ranks.allgather(b"")  # nobody returns before the checkpoint is published
    return final


def _publish(tmp, final, root, writer, tree, leaves, tensors, chunks, results, crcs, ranks,
             step, keep):
    """Rank 0: DCP's .metadata (the plan's chunks, every rank's write
    results), shardx.json, then the rename into place and ``latest``."""
    import torch
    from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata,
                                                       Metadata, TensorProperties,
                                                       TensorStorageMetadata)
    md: Dict[str, Any] = {}
    for fqn, _, _ in leaves:
        info = tensors.get(fqn)
        md[fqn] = BytesStorageMetadata() if info is None else TensorStorageMetadata(
            properties=TensorProperties(dtype=dtypes.torch_dtype(info["dtype"])),
            size=torch.Size(info["shape"]), chunks=[])
    for c in chunks:
        if c.offsets is not None:
            md[c.fqn].chunks.append(ChunkStorageMetadata(offsets=torch.Size(c.offsets),
                                                         sizes=torch.Size(c.sizes)))
    metadata = Metadata(state_dict_metadata=md,
                        planner_data={fqn: path for fqn, path, _ in leaves})
    writer.finish(metadata, results)
    _test_stall("metadata", step)
    with open(os.path.join(tmp, METADATA_FILE), "rb") as f:
        meta_bytes = f.read()
    files: Dict[str, dict] = {}
    for name, offset, length, crc in crcs:
        files.setdefault(name, {"bytes": os.path.getsize(os.path.join(tmp, name)), "items": []})
        files[name]["items"].append([offset, length, crc])
    info = {"format": FORMAT, "version": FORMAT_VERSION, "step": step, "world": ranks.size,
            "tree": tree, "tensors": tensors, "files": files,
            "metadata": {"bytes": len(meta_bytes), "crc32": zlib.crc32(meta_bytes)}}
    _write_atomically(os.path.join(tmp, INFO_FILE), json.dumps(info, indent=1).encode())
    _fsync_dir(tmp)
    _test_stall("publish", step)
    os.rename(tmp, final)
    _fsync_dir(os.path.dirname(final))
    if root is None:
        return
    _test_stall("latest", step)
    _write_atomically(os.path.join(root, LATEST_FILE), (os.path.basename(final) + "\n").encode())
    if keep is not None:
        for _, name in sorted(_step_dirs(root), reverse=True)[keep:]:
            if os.path.join(root, name) != final:
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)


# ---------------------------------------------------------------------------
# Finding and checking a checkpoint
# ---------------------------------------------------------------------------

def _step_dirs(root: str) -> List[Tuple[int, str]]:
    out = []
    for name in os.listdir(root):
        m = _STEP_DIR.match(name)
        if m and os.path.isfile(os.path.join(root, name, METADATA_FILE)):
            out.append((int(m.group(1)), name))
    return out


def latest_checkpoint(root: str) -> Optional[str]:
    """The directory of the newest complete checkpoint under ``root``, or None
    when there is none: the one ``root/latest`` names, or a newer ``step-*``
    directory with a ``.metadata`` (a saver that died after publishing its
    step and before updating ``latest``; a published directory is complete,
    written under a temporary name and renamed), or the newest such
    directory when ``latest`` names one that is gone."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        return None
    steps = _step_dirs(root)
    newest = max(steps) if steps else None
    pointer = os.path.join(root, LATEST_FILE)
    if os.path.exists(pointer):
        with open(pointer) as f:
            name = f.read().strip()
        m = _STEP_DIR.match(name)
        if not m:
            raise CheckpointError(f"{pointer} names {name!r}, not a step-<n> directory")
        if os.path.isfile(os.path.join(root, name, METADATA_FILE)):
            if newest is None or newest[0] <= int(m.group(1)):
                return os.path.join(root, name)
            log.warning("%s names %s, but %s is newer and complete (a save that stopped "
                        "before updating latest): using it", pointer, name, newest[1])
        else:
            log.warning("%s names %s, which is missing; using the newest complete step "
                        "directory", pointer, name)
    return os.path.join(root, newest[1]) if newest else None


def _checkpoint_dir(path: str, step: Optional[int]) -> str:
    path = os.fspath(path)
    if step is not None:
        path = os.path.join(path, f"step-{int(step):08d}")
        if not os.path.isdir(path):
            raise CheckpointError(f"no checkpoint of step {step}: {path} does not exist")
    if not os.path.isdir(path):
        raise CheckpointError(f"no checkpoint at {path}: it does not exist")
    if os.path.basename(os.path.normpath(path)).startswith(".tmp-"):
        raise CheckpointError(f"{path} is an unfinished save (a .tmp- directory): not loadable")
    if os.path.isfile(os.path.join(path, METADATA_FILE)):
        return path
    found = latest_checkpoint(path)
    if found is None:
        if os.path.exists(os.path.join(path, INFO_FILE)) or any(
                n.endswith(".distcp") for n in os.listdir(path)):
            raise CheckpointError(f"{path} has no {METADATA_FILE}: an unfinished or damaged "
                                  "checkpoint")
        raise CheckpointError(f"no checkpoint at {path}: neither a {METADATA_FILE} nor a "
                              f"'{LATEST_FILE}' or complete step-<n> directory")
    return found


def _read_metadata(folder: str, info: Optional[dict]):
    path = os.path.join(folder, METADATA_FILE)
    with open(path, "rb") as f:
        data = f.read()
    if info is not None:
        want = info.get("metadata", {})
        if len(data) != want.get("bytes") or zlib.crc32(data) != want.get("crc32"):
            raise CheckpointError(f"{path} is corrupt: {len(data)} bytes with CRC-32 "
                                  f"{zlib.crc32(data):#010x}, {INFO_FILE} recorded "
                                  f"{want.get('bytes')} bytes with {want.get('crc32', 0):#010x}")
    try:
        from torch.distributed.checkpoint.metadata import Metadata
        md = pickle.loads(data)
    except Exception as e:
        raise CheckpointError(f"{path} is corrupt: cannot unpickle it ({type(e).__name__}: {e})") \
            from None
    if not isinstance(md, Metadata) or not isinstance(md.state_dict_metadata, dict) \
            or not isinstance(md.storage_data, dict):
        raise CheckpointError(f"{path} is not DCP checkpoint metadata")
    return md


def _read_info(folder: str) -> Optional[dict]:
    path = os.path.join(folder, INFO_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            info = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} is corrupt: {e}") from None
    if not isinstance(info, dict) or info.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a ShardX checkpoint description")
    if info.get("version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} has format version {info.get('version')}; this ShardX "
                              f"reads version {FORMAT_VERSION}")
    return info


def _check_files(folder: str, md, info: Optional[dict]) -> Dict[Tuple[str, int], Tuple[int, int]]:
    """Every data file is there and long enough for its items (and, for a
    ShardX checkpoint, of its recorded size); returns the recorded
    (file, offset) -> (length, crc32)."""
    ends: Dict[str, int] = {}
    for sinfo in md.storage_data.values():
        ends[sinfo.relative_path] = max(ends.get(sinfo.relative_path, 0),
                                        sinfo.offset + sinfo.length)
    for name, end in ends.items():
        path = os.path.join(folder, name)
        if os.path.basename(name) != name or not os.path.isfile(path):
            raise CheckpointError(f"{path} is missing: the checkpoint is incomplete")
        size = os.path.getsize(path)
        want = info["files"].get(name, {}).get("bytes") if info else None
        if size < end or (want is not None and size != want):
            raise CheckpointError(f"{path} is truncated or damaged: {size} bytes, expected "
                                  f"{want if want is not None else f'at least {end}'}")
    crcs = {}
    if info:
        for name, entry in info["files"].items():
            for offset, length, crc in entry["items"]:
                crcs[(name, offset)] = (length, crc)
    return crcs


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------

def _is_spec(x) -> bool:
    """A placement list (one per mesh axis), a runtime Layout, or None."""
    if x is None or isinstance(x, runtime().Layout):
        return True
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(p, Placement) for p in x)


_MISSING = object()


def _lookup(template, path, fqn):
    """The placements ``template`` gives the tensor at ``path``: a spec
    applies to everything under it, dicts and lists are followed by key and
    index (a dict may also name the fqn); a missing entry is _MISSING."""
    node = template
    for i, k in enumerate(path):
        if _is_spec(node):
            return node
        if isinstance(node, dict):
            rest = ".".join(map(str, path[i:]))
            if k in node:
                node = node[k]
            elif str(k) in node:
                node = node[str(k)]
            elif rest in node:
                return node[rest]
            else:
                return _MISSING
        elif isinstance(node, (list, tuple)) and isinstance(k, int) and k < len(node):
            node = node[k]
        else:
            return _MISSING
    return node if _is_spec(node) else _MISSING


def _target_layouts(mesh: Mesh, placements, entries: Dict[str, Any], paths: Dict[str, tuple],
                    info: Optional[dict]):
    """fqn -> runtime layout (None: replicated) for every saved tensor."""
    flat = None
    if isinstance(placements, (list, tuple)) and not _is_spec(placements):
        if not all(_is_spec(p) for p in placements) or len(placements) != len(entries):
            raise CheckpointError(f"placements: a list must give one placement list (or None) "
                                  f"per tensor of the checkpoint, in its order "
                                  f"({len(entries)}: {list(entries)})")
        flat = dict(zip(entries, placements))
    out = {}
    for fqn, entry in entries.items():
        shape = tuple(entry.size)
        saved = (info or {}).get("tensors", {}).get(fqn)
        if callable(placements) and not isinstance(placements, runtime().Layout):
            spec = placements(fqn, shape)
        elif flat is not None:
            spec = flat[fqn]
        elif placements is not None:
            spec = _lookup(placements, paths.get(fqn, (fqn,)), fqn)
            if spec is _MISSING:
                spec = None  # not named: replicated
        elif mesh.size == 1 or saved is None or saved["layout"] is None:
            spec = None
        elif saved["mesh"] == list(mesh.shape):
            spec = runtime().Layout.from_json(saved["layout"])
        else:
            raise CheckpointError(
                f"{fqn} was saved sharded on a mesh {saved['mesh']}; the target mesh "
                f"{list(mesh.shape)} needs placements (load_checkpoint(..., placements=...))")
        if not _is_spec(spec):
            raise CheckpointError(f"placements for {fqn}: expected a list of placements, a "
                                  f"Layout or None, got {spec!r}")
        if isinstance(spec, runtime().Layout):
            try:
                spec.local_runs(list(mesh.shape), list(shape), [0] * len(mesh.shape))
            except ValueError as e:
                raise CheckpointError(f"{fqn}: the layout [{spec}] does not fit shape "
                                      f"{list(shape)} on mesh {list(mesh.shape)}: {e}") from None
            layout = spec
        else:
            layout = make_layout(mesh, spec, shape, what=fqn)
        if layout is not None and any(_layout_partials(layout)):
            raise CheckpointError(f"{fqn}: cannot load into a Partial placement (a checkpoint "
                                  "holds reduced values); load it Replicate or Shard")
        out[fqn] = None if layout is None or layout.is_replicated else layout
    return out


def _load_planner(views: Dict[str, List[Any]], values: Dict[str, Any]):
    from torch.distributed.checkpoint.planner import LoadPlanner

    class RankLoadPlanner(LoadPlanner):
        """One target rank's reads: each read item's overlap is copied into
        its local box (``views[fqn][local chunk index]``)."""

        def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
            pass

        def create_local_plan(self):
            raise NotImplementedError

        def create_global_plan(self, global_plan):
            return global_plan

        def finish_plan(self, central_plan):
            return central_plan

        def load_bytes(self, read_item, value):
            import torch
            fqn = read_item.dest_index.fqn
            try:
                values[fqn] = torch.load(value, weights_only=True)
            except Exception as e:
                raise CheckpointError(f"{fqn}: cannot load the saved object safely "
                                      f"({type(e).__name__}: {e})") from None

        def resolve_tensor(self, read_item):
            box = views[read_item.dest_index.fqn][read_item.dest_index.index]
            for d, (o, n) in enumerate(zip(read_item.dest_offsets, read_item.lengths)):
                box = box.narrow(d, o, n)
            return box

        def commit_tensor(self, read_item, tensor):
            pass
    return RankLoadPlanner()


def _reader(folder: str, crcs: Dict[Tuple[str, int], Tuple[int, int]], check: bool):
    from torch.distributed.checkpoint import FileSystemReader

    class Reader(FileSystemReader):
        """DCP's reader, each item's bytes read whole and checked against
        its CRC-32 (ShardX checkpoints) before DCP deserializes them."""

        def _slice_file(self, file, sinfo):
            file.seek(sinfo.offset)
            data = file.read(sinfo.length)
            where = f"{os.path.join(folder, sinfo.relative_path)} at byte {sinfo.offset}"
            if len(data) != sinfo.length:
                raise CheckpointError(f"{where}: truncated ({len(data)} of {sinfo.length} bytes)")
            if check:
                want = crcs.get((sinfo.relative_path, sinfo.offset))
                if want is None or want[0] != sinfo.length or zlib.crc32(data) != want[1]:
                    raise CheckpointError(f"{where}: the chunk fails its CRC-32 check: the "
                                          "checkpoint is corrupt")
            return io.BytesIO(data)
    return Reader(folder)


def load_checkpoint(path: str, mesh: Mesh, placements=None, backend: str = "threads",
                    step: Optional[int] = None):
    """Loads a checkpoint onto ``mesh`` and returns its state: tensors as
    ShardedTensors on ``backend`` laid out by ``placements``, constants as
    saved.

    ``path``: a checkpoint directory (one with ``.metadata``: ShardX's or
    any DCP checkpoint), or a root that ``save_checkpoint(..., step=...)``
    wrote (its ``latest``, or ``step``'s directory).

    ``placements`` (per tensor: a list of placements, one per mesh axis, a
    runtime Layout, or None for replicated):
      - None: as saved where ``mesh`` has the saved mesh's shape (or is one
        rank); else an error asking for placements;
      - a pytree like the saved state (a placement list applies to the
        whole subtree under it; entries not named load replicated); a dict
        may also name a tensor by its fqn ("params.0");
      - a flat list, one entry per saved tensor in the checkpoint's order;
      - a callable ``(fqn, shape) -> placements``.

    Each target rank reads only the saved chunks that overlap its shard;
    under a process backend (mpi) each process reads its rank's (every
    process calls this)."""
    import torch
    from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata,
                                                       MetadataIndex, TensorStorageMetadata)
    from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem
    from torch.distributed.checkpoint.planner_helpers import create_read_items_for_chunk_list

    folder = _checkpoint_dir(path, step)
    info = _read_info(folder)
    md = _read_metadata(folder, info)
    crcs = _check_files(folder, md, info)
    if info is not None:
        tree = info["tree"]
    elif isinstance(md.planner_data, dict) and all(isinstance(p, tuple)
                                                   for p in md.planner_data.values()):
        tree = _tree_of_paths({k: md.planner_data.get(k, (k,)) for k in md.state_dict_metadata})
    else:
        tree = {"dict": [[k, {"tensor": k}] for k in md.state_dict_metadata]}
    paths = _paths(tree)
    missing = set(paths) - set(md.state_dict_metadata)
    if missing:
        raise CheckpointError(f"{folder}: {INFO_FILE} names entries {sorted(missing)} that "
                              f"{METADATA_FILE} lacks: the checkpoint is damaged")
    entries = {k: v for k, v in md.state_dict_metadata.items()
               if isinstance(v, TensorStorageMetadata) and k in paths}
    layouts = _target_layouts(mesh, placements, entries, paths, info)

    # The target ranks this process builds: all (threads) or its own.
    s = _st.session(mesh, backend)
    held = [r for r in range(mesh.size) if s.process_rank < 0 or r == s.process_rank]
    rank_plans: Dict[int, Tuple[list, Dict[str, list]]] = {r: ([], {}) for r in held}
    locals_: Dict[str, List[Any]] = {}
    for fqn, entry in entries.items():
        shape, dtype = tuple(entry.size), entry.properties.dtype
        name = _mlir_dtype(dtype)
        _check_tiling(fqn, entry, folder)
        layout = layouts[fqn]
        coords = list(itertools.product(*[range(n) for n in mesh.shape]))
        arrays: List[Any] = [None] * mesh.size
        built: Dict[tuple, Any] = {}
        for r in held:
            if layout is None:
                runs = tuple(((0, n),) for n in shape)
            else:
                runs = tuple(tuple(tuple(x) for x in d) for d in
                             layout.local_runs(list(mesh.shape), list(shape), list(coords[r])))
            if runs in built:  # another rank holds the same box: read once
                arrays[r] = built[runs]
                continue
            local = torch.empty([sum(n for _, n in d) for d in runs], dtype=dtype)
            boxes = _boxes(runs)
            chunks = [ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(n))
                      for o, n, _ in boxes]
            items = create_read_items_for_chunk_list(fqn, entry, chunks)
            for i, (offsets, sizes, _) in enumerate(boxes):
                got = sum(math.prod(it.lengths) for it in items if it.dest_index.index == i)
                if got != math.prod(sizes):
                    raise CheckpointError(f"{folder}: the saved chunks of {fqn} cover {got} of the "
                                          f"{math.prod(sizes)} elements at {list(offsets)} "
                                          f"(size {list(sizes)}): the checkpoint is incomplete")
            rank_plans[r][0].extend(items)
            rank_plans[r][1][fqn] = [local[sl] for _, _, sl in boxes]
            arrays[r] = built[runs] = local
            if layout is None:
                break  # replicated: one buffer for every rank
        locals_[fqn] = (arrays, name, layout, shape)
    values: Dict[str, Any] = {}
    byte_items = [ReadItem(type=LoadItemType.BYTE_IO, dest_index=MetadataIndex(k),
                           dest_offsets=torch.Size((0,)), storage_index=MetadataIndex(k),
                           storage_offsets=torch.Size((0,)), lengths=torch.Size((0,)))
                  for k, v in md.state_dict_metadata.items()
                  if isinstance(v, BytesStorageMetadata) and k in paths and info is None]
    if byte_items:
        rank_plans.setdefault(held[0], ([], {}))[0].extend(byte_items)

    reader = _reader(folder, crcs, info is not None)
    reader.set_up_storage_reader(md, is_coordinator=True)
    for items, _ in rank_plans.values():
        for it in items:
            if it.storage_index not in md.storage_data:
                raise CheckpointError(f"{folder}: {METADATA_FILE} has no storage entry for "
                                      f"{it.storage_index.fqn} at {list(it.storage_index.offset or [])}")

    def read(r):
        items, views = rank_plans[r]
        if items:
            try:
                reader.read_data(LoadPlan(items), _load_planner(views, values)).wait()
            except CheckpointError:
                raise
            except Exception as e:
                raise CheckpointError(f"{folder}: reading rank {r}'s chunks failed: "
                                      f"{type(e).__name__}: {e}") from e
    with concurrent.futures.ThreadPoolExecutor(max(1, min(len(rank_plans), os.cpu_count() or 1,
                                                          8))) as pool:
        list(pool.map(read, list(rank_plans)))

    for fqn, (arrays, name, layout, shape) in locals_.items():
        values[fqn] = ShardedTensor.from_locals(arrays, mesh, layout, shape, dtype=name,
                                                backend=backend)
    return _build(tree, values)


def _check_tiling(fqn: str, entry, folder: str) -> None:
    """The saved chunks lie inside the tensor and their volumes add up to
    it (DCP writes each element once)."""
    shape = tuple(entry.size)
    total = 0
    for c in entry.chunks:
        if len(c.offsets) != len(shape) or len(c.sizes) != len(shape) or any(
                o < 0 or n < 0 or o + n > s for o, n, s in zip(c.offsets, c.sizes, shape)):
            raise CheckpointError(f"{folder}: a saved chunk of {fqn} (offsets {list(c.offsets)}, "
                                  f"sizes {list(c.sizes)}) lies outside its shape {list(shape)}")
        total += math.prod(c.sizes)
    if total != math.prod(shape):
        raise CheckpointError(f"{folder}: the saved chunks of {fqn} hold {total} elements, its "
                              f"shape {list(shape)} has {math.prod(shape)}: the checkpoint is "
                              "incomplete or damaged")
