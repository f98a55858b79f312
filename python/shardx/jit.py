"""``shardx.compile``: a PyTorch function as a sharded callable (a JIT).

``compile(fn, mesh, in_placements, out_placements, donate=...)`` returns a
callable. Its first call traces ``fn`` (``shardx.trace``), compiles the
program with ``shardx-compile`` (propagation, reshards, per-rank code) and
loads the artifact; later calls whose inputs have the same shapes, dtypes
and layouts reuse it, and any change recompiles, logging the reason on the
``shardx.jit`` logger (like ``torch.compile``'s guards); so does a change
of what ``fn`` reads besides its arguments (globals, closure, module
attributes: ``env_guard``) and of what the trace can observe of a tensor
argument besides shape and dtype (strides, requires_grad, ...:
``_traits``). The parameters, buffers and tensors the trace reads besides
its arguments are inputs of the program (lifted, as ``torch.compile``
does), read at each call and guarded by identity and metadata, so an
optimizer step outside ``fn`` compiles nothing. Inputs are torch
tensors (scattered by ``in_placements``) or ``ShardedTensor``s (used where
they are, by their own layout); outputs are ``ShardedTensor``s, so a
training loop passes parameters and optimizer state from step to step
without leaving the ranks. The outputs paired with a donated argument
(same structure, shapes, dtypes and layouts) are written into its buffers
once every rank has succeeded, and its handles are invalidated
(``DonatedError`` on use), as JAX's ``donate_argnums``. ``backend="mpi"``
runs each rank as one process of ``mpirun``. ``backend="cuda"`` compiles
for NVIDIA GPUs (``shardx-compile --target=cuda``, the architecture from
``$SHARDX_GPU_CHIP``, default sm_90) and runs every rank as a thread of
this process on CUDA device 0 (the cuda-local communicator; development,
tests, one-GPU jobs); ``backend="nccl"`` runs one rank per process and GPU,
started by ``torchrun`` or ``mpirun`` (see ``sharded_tensor.session``).
On the GPU backends each call stages its inputs to the device and its
outputs back to host shards.

Artifacts are cached on disk (``$SHARDX_CACHE_DIR``, default
``~/.cache/shardx/jit``) under a hash of the program text, the layouts, the
target, the ShardX version and ``shardx-compile --print-build-id`` (the
compiler's build and the runtime archives artifacts link); entries are
written under a temporary name
and renamed, and an entry that fails its checksum or does not load is
rebuilt. The cache stays under ``$SHARDX_CACHE_MAX_MB`` (default 1024):
after each compile the least recently used entries are removed.
``cache_stats`` counts hits, misses, rebuilds and evictions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import platform
import re
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .artifact import ToolError, find_tool, raise_failed_check, run_compiler, run_tool
from .placements import Mesh, Placement, PlacementError
# The one pytree walk (pytree.py); its specs are the guard keys' structure
# and what CallPlan checks arguments against.
from .pytree import count_leaves as _count_leaves
from .pytree import difference as _spec_difference
from .pytree import flatten_into as _flatten
from .pytree import unflatten as _unflatten
from .sharded_tensor import (RankError, ShardedTensor, device_shards, dtype_name, layout_key,
                             make_layout, runtime, session)

log = logging.getLogger("shardx.jit")

VERSION = "0.1.0"
#: The backends of ``shardx.compile``; ``cuda-local`` is another name of
#: ``cuda`` (the communicator's).
BACKENDS = ("threads", "mpi", "cuda", "cuda-local", "nccl")
GPU_BACKENDS = ("cuda", "cuda-local", "nccl")


def gpu_chip() -> str:
    """The GPU architecture the GPU backends compile for:
    ``$SHARDX_GPU_CHIP`` (default sm_90, the H100 and H200)."""
    chip = os.environ.get("SHARDX_GPU_CHIP") or "sm_90"
    if not re.fullmatch(r"sm_\d+[a-z]?", chip):
        raise ValueError(f"SHARDX_GPU_CHIP={chip!r} is not a CUDA architecture like sm_90")
    return chip


def compile_target(backend: str) -> str:
    """The target string of a backend's artifacts (part of the cache key):
    ``cpu-<machine>-<backend>``, or ``cuda-<chip>`` for the GPU backends
    (cuda and nccl run the same artifact)."""
    if backend in GPU_BACKENDS:
        return f"cuda-{gpu_chip()}"
    return f"cpu-{platform.machine()}-{backend}"


#: shardx-compile's --recompute policies.
RECOMPUTE_POLICIES = ("none", "selective", "aggressive", "budget")


def _compiler_args(target: str) -> List[str]:
    """shardx-compile's options for a target string of ``compile_target``."""
    if target.startswith("cuda-"):
        return ["--target=cuda", f"--gpu-chip={target[len('cuda-'):]}"]
    return []


@dataclass
class CacheStats:
    """Disk cache counters of this process: ``hits`` (artifact loaded, no
    compile), ``misses`` (compiled), ``rebuilds`` (a corrupt entry compiled
    again; also counted in misses), ``evictions`` (entries removed to stay
    under the size cap)."""

    hits: int = 0
    misses: int = 0
    rebuilds: int = 0
    evictions: int = 0

    def reset(self):
        self.hits = self.misses = self.rebuilds = self.evictions = 0


cache_stats = CacheStats()
_LOCK = threading.Lock()


def cache_dir() -> str:
    return os.environ.get("SHARDX_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "shardx", "jit")


def _usable_cache_dir() -> str:
    """``cache_dir()``, created if missing; a ValueError naming
    ``SHARDX_CACHE_DIR`` where it cannot hold the cache."""
    folder = cache_dir()
    where = (f"SHARDX_CACHE_DIR={folder!r}" if os.environ.get("SHARDX_CACHE_DIR")
             else f"the compile cache {folder!r} (SHARDX_CACHE_DIR is not set)")
    try:
        os.makedirs(folder, exist_ok=True)
    except FileExistsError:
        raise ValueError(f"{where} is a file, not a directory; set SHARDX_CACHE_DIR to a "
                         "directory shardx.compile may write") from None
    except OSError as e:
        raise ValueError(f"{where} cannot be created ({e.strerror}); set SHARDX_CACHE_DIR to a "
                         "directory shardx.compile may write") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{where} is not writable; set SHARDX_CACHE_DIR to a directory "
                         "shardx.compile may write")
    return folder


def _remove_entry(folder: str, key: str) -> None:
    """Removes an entry's files (a corrupt one, before it is rebuilt)."""
    import shutil
    for suffix in _ENTRY_SUFFIXES:
        path = os.path.join(folder, key + suffix)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)


DEFAULT_CACHE_MAX_MB = 1024.0
_ENTRY_SUFFIXES = (".json", ".so", ".mlir")


def cache_max_bytes() -> int:
    """The size cap of the disk cache: ``$SHARDX_CACHE_MAX_MB`` (MiB, may
    be fractional; default 1024)."""
    text = os.environ.get("SHARDX_CACHE_MAX_MB")
    try:
        mb = DEFAULT_CACHE_MAX_MB if not text else float(text)
    except ValueError:
        raise ValueError(f"SHARDX_CACHE_MAX_MB={text!r} is not a number of MiB") from None
    if mb <= 0:
        raise ValueError(f"SHARDX_CACHE_MAX_MB={text!r} must be positive")
    return int(mb * (1 << 20))


def evict(folder: str, keep: str = "") -> List[str]:
    """Removes least recently used entries (by their ``.json``'s mtime,
    which a hit refreshes) until the cache is under ``cache_max_bytes()``;
    never ``keep``. Entries being written (temporary names) are not
    counted. Processes take turns (an flock on ``.lock``); an entry's
    ``.json`` goes first, so no reader sees it complete once removal has
    begun, and a process that has the ``.so`` loaded keeps its mapping.
    Returns the removed keys."""
    import fcntl
    cap = cache_max_bytes()
    with open(os.path.join(folder, ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries, total = [], 0
        for name in os.listdir(folder):
            key, dot, suffix = name.partition(".")
            if suffix != "json" or not dot:
                continue
            try:
                used = os.stat(os.path.join(folder, name)).st_mtime_ns
                size = sum(os.stat(os.path.join(folder, key + s)).st_size
                           for s in _ENTRY_SUFFIXES if os.path.exists(os.path.join(folder, key + s)))
            except FileNotFoundError:
                continue
            entries.append((used, key, size))
            total += size
        removed = []
        for used, key, size in sorted(entries):
            if total <= cap:
                break
            if key == keep:
                continue
            for s in _ENTRY_SUFFIXES:
                try:
                    os.unlink(os.path.join(folder, key + s))
                except FileNotFoundError:
                    pass
            total -= size
            removed.append(key)
    if removed:
        log.info("shardx.compile: cache over %.1f MiB: evicted %d entries", cap / (1 << 20),
                 len(removed))
    return removed


def _compiler_identity() -> Tuple[str, str]:
    """The compiler and what identifies its artifacts: ShardX's version and
    ``shardx-compile --print-build-id`` (the tool's build and each runtime
    archive an artifact links, so that a rebuilt runtime compiles again;
    about 35 ms, asked at each cache lookup)."""
    tool = find_tool("shardx-compile")
    st = os.stat(tool)
    try:
        build = run_tool(tool, ["--print-build-id"], timeout=60).strip()
    except ToolError:
        build = ""
    # A tool without the option: its own size and time.
    build = build or f"{st.st_size}-{st.st_mtime_ns}"
    return tool, f"{VERSION}+{build}"


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def memory_profile(mlir_text: str, target: str = "cpu",
                   level: str = "buffers") -> List[Dict[str, Any]]:
    """The per-rank memory model (docs/Memory.md) of a traced program for a
    ``compile_target`` string, one dict per function as
    ``shardx-print-plan{memory-json=...}`` writes it. ``level="tensors"``
    models the local program (``shardx-opt --shardx-spmd``, collectives
    scheduled as shardx-compile schedules them for the CPU), as
    shardx-print-plan and the report do by default; ``"buffers"`` (CPU
    only, ``shardx-print-plan{memory-level=buffers}``) replays the
    allocations of that program after the CPU code generation's passes up
    to the deallocations, which is what the runtime allocates."""
    if level not in ("tensors", "buffers"):
        raise ValueError(f"memory_profile: level is 'tensors' or 'buffers', not {level!r}")
    cuda = target.startswith("cuda")
    if cuda and level == "buffers":
        raise ValueError("memory_profile: level='buffers' models the CPU code generation")
    opt = find_tool("shardx-opt")

    def run(args, text, what):
        return run_tool(opt, args, input=text, what=f"shardx-opt {what}")

    # Buffers as shardx-compile: the SPMD pipeline only for a program with
    # layouts (it inlines region calls, which the compiled program keeps).
    # Its text keeps the locations: they mark the inlined calls and the
    # checkpointed ops that code generation outlines and recomputes.
    if level == "tensors" or re.search(r"shardx\.layout|^\s*(%[^=]*=\s*)?\"?shardx\.(?!mesh\b)\w",
                 mlir_text, re.M):
        # As shardx-compile --target=cuda: no grouped-matmul row runs (their
        # row counts are read on the host).
        spmd = ("schedule-collectives=false grouped-row-runs=false" if cuda
                else "schedule-collectives=true")
        text = run([f"--shardx-spmd={spmd}",
                    "-mlir-print-debuginfo"], mlir_text, "--shardx-spmd")
    else:
        text = mlir_text
    fd, path = tempfile.mkstemp(prefix="shardx-memory.", suffix=".json")
    os.close(fd)
    try:
        run([f"--shardx-print-plan=memory-level={level} memory-json={path}", "-o", os.devnull],
            text, "--shardx-print-plan")
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


class MemoryBudgetError(ValueError):
    """``shardx.compile(..., memory_budget=...)``: no plan found fits the
    budget; the message gives the smallest modeled peak found."""


def auto_shard(mlir_text: str, memory_budget: int) -> str:
    """``mlir_text`` with layouts chosen by ``shardx-auto-shard`` for every
    argument that has none, so that the modeled peak per rank fits
    ``memory_budget`` bytes (docs/Memory.md, "Automatic sharding under a
    budget"); MemoryBudgetError when no plan found fits."""
    try:
        # With its locations: the phases, call and checkpoint marks that code
        # generation reads (recomputation, outlined layers).
        return run_tool("shardx-opt", [f"--shardx-auto-shard=memory-budget={int(memory_budget)}",
                                       "-mlir-print-debuginfo"],
                        input=mlir_text, what="shardx-opt --shardx-auto-shard")
    except ToolError as e:
        if "no plan fits the memory budget" in e.stderr:
            raise MemoryBudgetError(e.stderr.strip()) from None
        raise


def load_or_compile(mlir_text: str, layouts: Sequence[str], target: str,
                    timing: Optional[Dict[str, float]] = None, recompute: str = "none",
                    recompute_budget: Optional[int] = None,
                    meanwhile: Optional[Callable[[], None]] = None,
                    ring_attention_bytes=None, attention_piece_rows=None):
    """The loaded artifact of ``mlir_text``, from the disk cache or compiled
    into it. Returns (artifact, key, path); ``timing`` (if given) gets the
    seconds of the SPMD pipeline, code generation and loading. ``recompute``
    is shardx-compile's ``--recompute`` policy and ``recompute_budget`` its
    ``--recompute-budget`` (bytes per rank; both part of the key), and
    ``ring_attention_bytes`` its ``--ring-attention-bytes`` and
    ``attention_piece_rows`` its ``--attention-piece-rows`` (None: the
    compiler's default; part of the key otherwise).
    ``meanwhile`` is called while the compiler runs (not on a cache hit)."""
    timing = {} if timing is None else timing
    rt = runtime()
    cache_max_bytes()  # a bad SHARDX_CACHE_MAX_MB fails before the compile
    tool, version = _compiler_identity()
    fields = {"program": mlir_text, "layouts": list(layouts), "target": target,
              "version": version}
    if recompute != "none":
        fields["recompute"] = recompute
    if recompute_budget is not None:
        fields["recompute_budget"] = int(recompute_budget)
    if ring_attention_bytes is not None:
        fields["ring_attention_bytes"] = str(ring_attention_bytes)
    if attention_piece_rows is not None:
        fields["attention_piece_rows"] = int(attention_piece_rows)
    material = json.dumps(fields, sort_keys=True)
    key = hashlib.sha256(material.encode()).hexdigest()[:32]
    folder = _usable_cache_dir()
    so, meta = os.path.join(folder, key + ".so"), os.path.join(folder, key + ".json")
    corrupt = False
    if os.path.lexists(meta):
        try:
            with open(meta, "rb") as f:
                info = json.loads(f.read().decode())
            if not isinstance(info, dict):
                raise ValueError(f"its .json holds a {type(info).__name__}, not an object")
            if info.get("key") != key:
                raise ValueError(f"its .json names key {info.get('key')!r}")
            if not os.path.lexists(so):
                raise ValueError("its .so is missing")
            if info.get("sha256") != _sha256(so):
                raise ValueError("checksum mismatch")
            start = time.perf_counter()
            artifact = rt.Artifact(so)
            timing["load"] = time.perf_counter() - start
            with _LOCK:
                cache_stats.hits += 1
            log.debug("cache hit %s", so)
            try:
                os.utime(meta)  # last use, for the LRU eviction
            except FileNotFoundError:
                pass
            return artifact, key, so
        except FileNotFoundError:
            pass  # evicted by another process meanwhile: compiled again
        except (OSError, ValueError, RuntimeError) as e:
            corrupt = True
            log.warning("shardx.compile: cache entry %s is corrupt (%s); rebuilding", key, e)
            with open(os.path.join(folder, ".lock"), "a") as lock:
                import fcntl
                fcntl.flock(lock, fcntl.LOCK_EX)
                _remove_entry(folder, key)
    with _LOCK:
        cache_stats.misses += 1
        if corrupt:
            cache_stats.rebuilds += 1
    # Compile to private names, then rename: the .so first, the .json (with
    # the .so's checksum) last, so a reader never sees a half-written entry.
    fd, src = tempfile.mkstemp(prefix=key + ".", suffix=".mlir", dir=folder)
    with os.fdopen(fd, "w") as f:
        f.write(mlir_text)
    tmp_so = src[:-len(".mlir")] + ".so"
    try:
        args = _compiler_args(target) + ([f"--recompute={recompute}"]
                                         if recompute != "none" else [])
        if recompute_budget is not None:
            args.append(f"--recompute-budget={int(recompute_budget)}")
        if ring_attention_bytes is not None:
            args.append(f"--ring-attention-bytes={ring_attention_bytes}")
        if attention_piece_rows is not None:
            args.append(f"--attention-piece-rows={int(attention_piece_rows)}")
        run_compiler(src, tmp_so, args, timing, tool, meanwhile)
        digest = _sha256(tmp_so)
        os.replace(tmp_so, so)
        os.replace(src, os.path.join(folder, key + ".mlir"))
        fd, tmp_meta = tempfile.mkstemp(prefix=key + ".", suffix=".json", dir=folder)
        with os.fdopen(fd, "w") as f:
            json.dump({"key": key, "sha256": digest, "target": target, "version": version,
                       "layouts": list(layouts)}, f)
        os.replace(tmp_meta, meta)
    finally:
        for p in (src, tmp_so):
            if os.path.exists(p):
                os.unlink(p)
    start = time.perf_counter()
    artifact = rt.Artifact(so)
    timing["load"] = time.perf_counter() - start
    removed = evict(folder, keep=key)
    with _LOCK:
        cache_stats.evictions += len(removed)
    return artifact, key, so


def _is_leaf(x) -> bool:
    return isinstance(x, ShardedTensor) or isinstance(x, np.ndarray) or hasattr(x, "detach")


try:
    from numpy.lib.array_utils import byte_bounds as _byte_bounds  # numpy >= 2
except ImportError:  # numpy 1
    _byte_bounds = np.byte_bounds


def _memory(a):
    """(first byte, end byte, identity) of a leaf's memory; identity is the
    same exactly for the same tensor (one storage, offset, shape, strides
    and dtype). A ShardedTensor's memory is its shard set."""
    if isinstance(a, ShardedTensor):
        key = id(a.shards)
        return key, key + 1, ("sharded", key)
    if isinstance(a, np.ndarray):
        lo, hi = _byte_bounds(a)
        return lo, hi if a.size else lo, (lo, a.shape, a.strides, a.dtype.str)
    # The identity in numpy's terms (byte strides), so that a tensor and
    # its .numpy() are the same tensor.
    lo, size = a.data_ptr(), a.element_size()
    extent = sum((n - 1) * st for n, st in zip(a.shape, a.stride())) + 1 if a.numel() else 0
    try:
        kind = np.dtype(str(a.dtype).replace("torch.", "")).str
    except TypeError:
        kind = str(a.dtype)
    return lo, lo + extent * size, (lo, tuple(a.shape), tuple(st * size for st in a.stride()),
                                    kind)


def _partners(flat, leaves) -> Tuple[Tuple[int, Tuple[int, ...]], ...]:
    """For each leaf number in ``leaves``, the other leaves that are the same
    tensor. Raises ValueError where a leaf overlaps another without being
    the same tensor (a view of part of it, or another view of its memory):
    a program that writes one of them cannot be traced as eager runs it."""
    mem = [_memory(a) for a in flat]
    out = []
    for i in leaves:
        lo, hi, ident = mem[i]
        same = []
        for j, (lo2, hi2, ident2) in enumerate(mem):
            if j == i or not (lo < hi2 and lo2 < hi):
                continue
            if ident2 != ident:
                raise ValueError(
                    f"shardx.compile: input {i} is modified in place and shares memory with "
                    f"input {j}, a different view of it; the compiled program cannot write one "
                    "and read the other as eager does: pass separate tensors (clone one)")
            same.append(j)
        out.append((i, tuple(same)))
    return tuple(out)


def _describe_tensor(t) -> str:
    return f"a tensor {list(t.shape)} {dtype_name(t)}"


def _refuse_overlapping_lifted(name: str, lifted, written: int) -> None:
    """A ValueError where one of the first ``written`` lifted tensors (the
    ones the function writes in place) shares memory with another lifted
    tensor (a buffer and a view of it, both read): the trace made them two
    inputs, so a read of one after a write of the other would miss it."""
    mem = [_memory(t) for t in lifted]
    for k in range(written):
        lo, hi, _ = mem[k]
        for j, (lo2, hi2, _) in enumerate(mem):
            if j != k and lo < hi2 and lo2 < hi:
                raise ValueError(
                    f"shardx.compile: {name} writes in place {_describe_tensor(lifted[k])} it "
                    f"reads besides its arguments, and it shares memory with "
                    f"{_describe_tensor(lifted[j])} it also reads (a view of it, or a tensor "
                    "of the same storage); the compiled program cannot write one and read "
                    "the other as eager does: read one tensor, or clone one")


def _refuse_lifted_aliases(name: str, flat, exe) -> None:
    """A ValueError where an argument shares memory with a tensor the entry
    lifted (``_Executable.lifted``) and the function writes one of the two:
    the trace made them two tensors, so the program would read the other's
    old values (eager reads one memory)."""
    n = len(flat)
    lifted_written = {i - n for i in exe.mutated if i >= n}
    args_written = set(exe.writes)
    # The lifted tensors' memory is as traced (their guard holds the data
    # pointer, shape and strides): worked out once.
    mem = exe.__dict__.get("_lifted_memory")
    if mem is None:
        mem = exe.__dict__["_lifted_memory"] = [_memory(t) for t in exe.lifted]
    for i, a in enumerate(flat):
        if isinstance(a, ShardedTensor):
            continue  # its own shards: never a torch tensor's memory
        lo, hi, _ = _memory(a)
        for k, (lo2, hi2, _) in enumerate(mem):
            if lo < hi2 and lo2 < hi and (k in lifted_written or i in args_written):
                raise ValueError(
                    f"shardx.compile: input {i} of {name} shares memory with "
                    f"{_describe_tensor(exe.lifted[k])} the function reads besides its "
                    f"arguments (a module's parameter or buffer, a tensor it closes over), "
                    f"and the function writes {'that tensor' if k in lifted_written else 'the input'} "
                    "in place; the compiled program cannot write one and read the other as "
                    "eager does: pass a clone")


class _Traced:
    """``fn`` as the importer sees it: it takes the flattened tensors (the
    argument spec puts back the containers and Python values), returns its
    output's tensors (the spec of the output, with its Python values, is
    recorded) and then the new value of each input it modified in place
    (``mutated``: input numbers, one per distinct tensor; found through the
    tensors' version counters, as functionalization writes them back)."""

    def __init__(self, fn: Callable, name: str, in_spec, user_placements, out_placements,
                 write_placements):
        self.fn = fn
        self.__name__ = name
        self.in_spec = in_spec
        self.out_spec = None
        #: Every input whose version counter moved (all of a group traced
        #: as one tensor), and one per distinct tensor of those.
        self.written: List[int] = []
        self.mutated: List[int] = []
        self.n_user = 0
        self._user_pl = user_placements
        #: The list trace() reads once the graph is traced (None: no mesh):
        #: the user's output placements, then each written-back input's own.
        self._out_pl = out_placements
        self._write_pl = write_placements
        if hasattr(fn, "loss_fn"):
            self.loss_fn = fn.loss_fn

    def __call__(self, *tensors):
        import torch
        from .importer.values import ImportError_
        # (An inference tensor has no version counter; it cannot be written.)
        versions = [None if t.is_inference() else t._version for t in tensors]
        shapes = [(tuple(t.shape), t.stride()) for t in tensors]
        out = self.fn(*_unflatten(self.in_spec, iter(tensors)))
        leaves: List[Any] = []
        self.out_spec = _flatten(out, leaves)
        for i, t in enumerate(leaves):
            if not isinstance(t, torch.Tensor):
                raise ImportError_(f"output {i} of {self.__name__} is a {type(t).__name__}; "
                                   "shardx.compile returns tensors, None, bools, ints, floats "
                                   "and strings in tuples, named tuples, lists and dicts")
        self.n_user = len(leaves)
        seen, self.written, self.mutated = set(), [], []
        for i, t in enumerate(tensors):
            if versions[i] is None or t._version == versions[i]:
                continue
            if (tuple(t.shape), t.stride()) != shapes[i]:
                raise ImportError_(f"{self.__name__} changes the shape or strides of input {i} "
                                   f"in place ({list(shapes[i][0])} -> {list(t.shape)}); "
                                   "shardx.compile writes back values only")
            self.written.append(i)
            if id(t) not in seen:
                seen.add(id(t))
                self.mutated.append(i)
        if self._out_pl is not None:
            if self._user_pl is not None and len(self._user_pl) != self.n_user:
                raise PlacementError(f"{len(self._user_pl)} output placements for "
                                     f"{self.n_user} output tensors")
            # A written-back value keeps its input's layout (no reshard).
            self._out_pl[:] = list(self._user_pl or [None] * self.n_user) + [
                self._write_pl[i] for i in self.mutated]
        return tuple(leaves) + tuple(tensors[i] for i in self.mutated)


class MissingEntryError(RuntimeError):
    """A call needs an entry that cannot be compiled here: its arguments pass
    no guard of a function ``shardx.load`` made (which never compiles), or
    ``shardx.compile`` needs ``shardx-compile`` on a host that has none."""


def _compiler_missing() -> Optional[str]:
    """Why ``shardx-compile`` cannot be run here (None: it can)."""
    from .artifact import ArtifactError, find_tool
    try:
        find_tool("shardx-compile")
    except ArtifactError as e:
        return str(e)
    return None


def _alias(t):
    """What the C++ call path passes for a lifted tensor: a numpy array of
    its memory where it has one (a CPU tensor of a numpy dtype: the binding
    takes numpy arrays without torch's Python ``__dlpack__``, about 5 us a
    tensor), else the tensor detached; either way the same memory, so an
    update in place is read by the next call (other memory is a guard
    failure, ``env_guard._lifted_mark``)."""
    t = t.detach()
    if t.device.type == "cpu" and not t.is_conj() and not t.is_neg():
        try:
            return t.numpy()
        except (TypeError, RuntimeError):
            pass  # bfloat16 and other dtypes numpy lacks
    return t


def _plan_traits(traits) -> Optional[List[Any]]:
    """What the C++ plan checks of each argument where the guard key's
    ``traits`` are not plain but it still takes the argument (``CallPlan``'s
    ``leaf_traits``): ``(type, requires_grad, has_grad)`` of a contiguous
    leaf ``torch.Tensor`` or ``nn.Parameter`` on the CPU at offset 0 (a
    parameter passed as an argument), None for a plain one. None where some
    argument has other traits: that entry runs from Python."""
    if traits is None:
        return None
    import torch
    types = {"torch.Tensor": torch.Tensor, "torch.nn.parameter.Parameter": torch.nn.Parameter}
    out = []
    for t in traits:
        if t is None:
            out.append(None)
            continue
        kind, device, strides, offset, requires_grad, leaf, has_grad, inference, same = t
        if kind not in types or device != "cpu" or strides is not None or offset or not leaf \
                or inference or same is not None:
            return None
        out.append((types[kind], requires_grad, has_grad))
    return out


def _describe_key(key) -> str:
    """A guard key in words: "input 0: [8, 16] f32 R, input 1: ..."."""
    traits = key[2] if len(key) > 2 else None
    return ", ".join(f"input {i}: {list(shape)} {dtype} {layout}"
                     + (f" ({_traits_text(traits[i])})" if traits and traits[i] else "")
                     for i, (shape, dtype, layout) in enumerate(key[1])) or "no tensors"


def _contiguous_strides(shape) -> Tuple[int, ...]:
    strides, n = [], 1
    for size in reversed(shape):
        strides.append(n)
        n *= max(int(size), 1)
    return tuple(reversed(strides))


#: The fields of a tensor's traits (``_traits``, ``_key_traits``), in
#: order. ``same_as``: the first argument that is this very tensor object
#: (None: none is), as torch.compile's duplicate-input guards see it.
TRAIT_FIELDS = ("type", "device", "strides", "storage_offset", "requires_grad", "is_leaf",
                "has_grad", "is_inference", "same_as")
_TRAIT_PLAIN = ("torch.Tensor", "cpu", None, 0, False, True, False, False, None)


def _key_traits(flat, gpu: bool = False) -> Optional[Tuple[Any, ...]]:
    """The traits part of a guard key: each torch tensor or numpy
    argument's ``_traits``, and ``same_as`` where it is the same object as
    an earlier argument. The trace gives such arguments one tensor, as
    eager has them: a gradient taken inside the function with respect to
    one is through every use of it (traced as two tensors, through one),
    and an ``is`` test sees them equal. None where every argument is plain
    and distinct (what the C++ call path takes, ``CallPlan``). ``gpu``: the
    function runs on a GPU backend, where a CUDA tensor is as plain as a
    host one (``_traits``)."""
    traits, first = None, {}
    for i, a in enumerate(flat):
        if type(a) is ShardedTensor or isinstance(a, ShardedTensor):
            continue  # its shards: written aliasing is _partners' guard
        t = _traits(a, gpu)
        j = first.setdefault(id(a), i)
        if j != i:
            t = (t or _TRAIT_PLAIN)[:-1] + (j,)
        if t is not None:
            if traits is None:
                traits = [None] * len(flat)
            traits[i] = t
    return None if traits is None else tuple(traits)


def _traits(a, gpu: bool = False):
    """What a trace can observe of a torch tensor or numpy argument besides
    its shape and dtype (the guard key's), as ``torch.compile``'s
    TENSOR_MATCH guards it (Python type, device, strides, requires_grad,
    dispatch keys) plus the storage offset, leafness, whether ``.grad`` is
    set and inference mode: None for a plain tensor (``torch.Tensor`` on
    the CPU with the contiguous strides of its shape, offset 0, no grad
    required or set, not an inference tensor: what the C++ call path takes,
    ``CallPlan``), else a tuple of ``TRAIT_FIELDS`` (strides None where
    contiguous). With ``gpu`` (a GPU backend's function) a tensor on a GPU
    counts as on the CPU: the backend reads it in place where a host tensor
    is staged, and the trace runs on a host copy of either (``_example``),
    so an entry compiled ahead on a host without a GPU serves CUDA tensors
    too."""
    if type(a) is np.ndarray:
        size = a.itemsize
        strides = tuple(st // size for st in a.strides)
        if strides == _contiguous_strides(a.shape):
            return None
        return ("numpy.ndarray", "cpu", strides, 0, False, True, False, False, None)
    import torch
    if not isinstance(a, torch.Tensor):
        return (f"{type(a).__module__}.{type(a).__qualname__}",) + _TRAIT_PLAIN[1:]
    strides = a.stride()
    leaf = a.is_leaf
    traits = ("torch.Tensor" if type(a) is torch.Tensor
              else f"{type(a).__module__}.{type(a).__qualname__}",
              str(a.device) if a.device.type != "cpu" and not (gpu and a.device.type == "cuda")
              else "cpu",
              None if strides == _contiguous_strides(a.shape) else tuple(strides),
              a.storage_offset(), a.requires_grad, leaf,
              leaf and a.grad is not None, a.is_inference(), None)
    return None if traits == _TRAIT_PLAIN else traits


def _traits_text(t) -> str:
    if t is None:
        return "a plain contiguous tensor"
    return ", ".join(f"the same tensor as input {value}" if name == "same_as"
                     else f"{name} {value}" for name, value, plain in
                     zip(TRAIT_FIELDS, t, _TRAIT_PLAIN) if value != plain) or "plain"


def _example(a, gpu: bool = False):
    """The tensor the trace runs ``fn`` on for a torch argument ``a``: a
    copy (an in-place op must not change the caller's tensor) with what
    ``_traits`` guards as ``a`` has it: its strides and storage offset
    (over a copy of the storage ``a`` spans; ``clone`` made a slice
    contiguous and every offset 0), type (``nn.Parameter``; another
    subclass is a TypeError),
    ``requires_grad``, leafness (a non-leaf is a view of the copy), a
    ``.grad`` where ``a`` has one (the trace may test it; reading its
    values is refused, ``tracing._refuse_grad_reads``) and inference mode.
    With ``gpu`` (a GPU backend's function) a CUDA tensor's copy is on the
    host (``_traits``)."""
    import torch
    if type(a) is not torch.Tensor and not isinstance(a, torch.nn.Parameter):
        # The trace's fake tensors are plain: a subclass's type and its
        # __torch_function__ / __torch_dispatch__ overrides would be lost.
        raise TypeError(f"shardx.compile: an argument is a {type(a).__module__}."
                        f"{type(a).__qualname__}, a torch.Tensor subclass; shardx.compile "
                        "traces torch.Tensor and nn.Parameter arguments only: pass "
                        "t.as_subclass(torch.Tensor), or a ShardedTensor "
                        "(ShardedTensor.from_dtensor for a DTensor)")
    t = a.detach()
    device = torch.device("cpu") if gpu and t.device.type == "cuda" else t.device
    shape, strides, offset = tuple(t.shape), t.stride(), t.storage_offset()
    ctx = torch.inference_mode() if a.is_inference() else torch.no_grad()
    with ctx:
        if t.numel() == 0 or (offset == 0 and strides == _contiguous_strides(shape)):
            example = t.clone() if device == t.device else t.to(device, copy=True)
        else:
            extent = 1 + sum((n - 1) * st for n, st in zip(shape, strides))
            storage = torch.empty(offset + extent, dtype=t.dtype, device=device)
            storage[offset:].copy_(t.as_strided((extent,), (1,), offset))
            example = torch.empty(0, dtype=t.dtype, device=device).set_(
                storage.untyped_storage(), offset, shape, strides)
    if isinstance(a, torch.nn.Parameter):
        example = torch.nn.Parameter(example, requires_grad=a.requires_grad)
    else:
        if a.requires_grad:
            example.requires_grad_()
            if not a.is_leaf:
                with torch.enable_grad():
                    example = example.view(shape)
    if a.is_leaf and a.grad is not None:
        example.grad = torch.zeros_like(a.grad, device=device)
    return example


@dataclass
class _Executable:
    artifact: Any
    entry: str
    in_layouts: List[Any]
    out_spec: Any
    out_keys: List[Tuple]
    donated: List[Tuple[int, int]]  # (flat input, flat output)
    key: str
    path: str
    plan: Any  # _shardx_rt.CallPlan: guards, call and outputs in C++
    #: Inputs modified in place (one leaf per distinct tensor of the trace),
    #: whose new values are the program's last outputs, written back after
    #: each call.
    mutated: List[int]
    #: The inputs the function writes (as traced with every input a tensor
    #: of its own), and for each the inputs that are the same tensor in
    #: this entry: its aliasing guard (checked in Python; such entries
    #: never take the C++ path).
    writes: List[int]
    partners: Tuple
    #: Variants of this entry for other aliasings of the written inputs.
    variants: Dict[Any, "_Executable"]
    #: The program's index checks (exception name, message): its last
    #: output is the code of the first that failed (importer ``trace(...,
    #: index_checks=True)``); such entries never take the C++ path.
    checks: List[Tuple[str, str]] = field(default_factory=list)
    #: What the trace read besides the arguments (``env_guard``): closure,
    #: globals, module attributes and tensors, checked before each call
    #: (such entries never take the C++ path); None for a package's entry.
    env: Any = None
    #: Earlier entries of the same guard key, traced in another
    #: environment (``model.train()`` / ``model.eval()``), newest first.
    others: List["_Executable"] = field(default_factory=list)
    #: The caller's torch modes at the trace (``_call_mode``): a guard;
    #: None for a package's entry.
    mode: Any = None
    #: The tensors the trace read besides the arguments (parameters,
    #: buffers, tensors closed over) that are the program's last inputs
    #: (``trace(..., lift=...)``), read at each call; their identity and
    #: metadata are guarded (``env``), not their values.
    lifted: List[Any] = field(default_factory=list)
    #: Their aliases (the same memory: ``_alias``), which the C++ call path
    #: passes after the arguments (``CompiledCall._plan_extra``).
    extra: Any = None
    #: The random ops' seed (importer/rng.py): the last of ``extra`` (a 0-d
    #: int64 tensor or array), drawn anew from PyTorch's default generator
    #: before each call (``_draw_seed``); None where the program draws no
    #: random numbers. Such entries run from Python.
    seed: Any = None
    #: Whether the C++ call path may run it (its arguments' traits are
    #: plain, or ones ``CallPlan`` checks: ``_plan_traits``).
    fast: bool = True

    def plan_args(self, args):
        """The argument tree of the plan: ``args``, and the lifted tensors."""
        return (args, self.extra) if self.lifted else args


class CompiledFunction(runtime().CompiledCall):
    """What ``shardx.compile`` returns; call it like ``fn``.

    A call goes (in C++, ``CompiledCall``) to the call plan of the entry the
    last call used, which checks every guard (structure, shapes, dtypes,
    layouts, mesh) and runs; ``_call_guarded`` (Python) takes the calls
    that fail a guard: it finds or compiles the right entry, logging why."""

    def __init__(self, fn: Callable, mesh: Mesh, in_placements, out_placements, backend: str,
                 donate, name: Optional[str], recompute: str = "none",
                 memory_budget: Optional[int] = None,
                 recompute_budget: Optional[int] = None, ring_attention_bytes=None,
                 sequence_order=None, attention_piece_rows: Optional[int] = None):
        super().__init__()
        self.ring_attention_bytes = ring_attention_bytes
        self.sequence_order = sequence_order
        self.attention_piece_rows = attention_piece_rows
        self.fn = fn
        self.recompute = recompute
        self.recompute_budget = recompute_budget
        self.memory_budget = memory_budget
        self._trace_mesh = mesh
        self.mesh = mesh if mesh is not None else Mesh((1,), ("r",))
        self.in_placements = None if in_placements is None else list(in_placements)
        self.out_placements = None if out_placements is None else list(out_placements)
        self.backend = backend
        self.donate = donate
        self.name = name or getattr(fn, "__name__", None) or "main"
        if not self.name.isidentifier():
            self.name = "main"
        self._executables: Dict[Any, _Executable] = {}
        self._layouts: Dict[Any, str] = {}
        self._last_key = None
        #: Programs traced and compiled (or loaded) by this callable.
        self.compiles = 0
        #: Seconds of the first compile's steps (trace, import, dead code,
        #: spmd, codegen, load, total; spmd and codegen absent on a disk
        #: cache hit), and of the latest compile's.
        self.first_call_timing: Optional[Dict[str, float]] = None
        self.last_compile_timing: Optional[Dict[str, float]] = None
        #: Why each compile after the first happened.
        self.recompile_reasons: List[str] = []
        # A GPU backend's rank session is made at the first run, not here,
        # so that its function compiles (and exports) where no GPU is; the
        # others' here (a missing mpirun fails before any compile).
        self._session_obj = None if backend in GPU_BACKENDS else session(self.mesh, backend)
        self._plan = None
        self._plan_extra = None
        self._checked = None
        self._guarded = None
        # The C++ call path compares the caller's modes with the plan's.
        self._mode_fn = _call_mode
        self._plan_mode = None

    @property
    def _session(self):
        if self._session_obj is None:
            self._session_obj = session(self.mesh, self.backend)
        return self._session_obj

    # -- guards -----------------------------------------------------------

    def _guard_key(self, flat, treedef):
        if self.in_placements is not None and len(self.in_placements) != len(flat):
            raise PlacementError(f"{len(self.in_placements)} input placements for "
                                 f"{len(flat)} input tensors")
        keys = []
        for i, a in enumerate(flat):
            if type(a) is ShardedTensor or isinstance(a, ShardedTensor):
                if a.mesh is not self.mesh and a.mesh.shape != self.mesh.shape:
                    raise PlacementError(f"input {i} lives on mesh {a.mesh.shape}, "
                                         f"not {self.mesh.shape}")
                keys.append(a.guard_key)
            else:
                shape = tuple(a.shape)
                layout = self._layouts.get((i, shape))
                if layout is None:
                    p = self.in_placements[i] if self.in_placements else None
                    layout = layout_key(make_layout(self.mesh, p, shape, f"input {i}"))
                    self._layouts[(i, shape)] = layout
                keys.append((shape, dtype_name(a), layout))
        # What a trace can observe of a torch tensor or numpy argument
        # besides shape and dtype (strides, requires_grad, ...): a third
        # part of the key only where some input is not plain, so that the
        # common key (and a package's) stays (structure, tensors).
        traits = _key_traits(flat, self.backend in GPU_BACKENDS)
        if traits is not None:
            return treedef, tuple(keys), traits
        return treedef, tuple(keys)

    def _reason(self, old, new) -> str:
        if old[0] != new[0]:
            return _spec_difference(old[0], new[0]) or "the argument structure changed"
        for i, (a, b) in enumerate(zip(old[1], new[1])):
            if a[0] != b[0]:
                return f"input {i}: shape {list(a[0])} -> {list(b[0])}"
            if a[1] != b[1]:
                return f"input {i}: dtype {a[1]} -> {b[1]}"
            if a[2] != b[2]:
                return f"input {i}: layout {a[2]} -> {b[2]}"
        old_traits = old[2] if len(old) > 2 else (None,) * len(old[1])
        new_traits = new[2] if len(new) > 2 else (None,) * len(new[1])
        for i, (a, b) in enumerate(zip(old_traits, new_traits)):
            if a != b:
                return f"input {i}: {_traits_text(a)} -> {_traits_text(b)}"
        return "a new input signature"

    # -- packages (shardx.export / shardx.load, python/shardx/aot.py) -----

    def export(self, path) -> str:
        """Writes every entry compiled so far into the package ``path``
        (``shardx.export``); ``shardx.load(path)`` runs them where no
        compiler is."""
        from .aot import export
        return export(self, path)

    def load_package(self, path) -> int:
        """Adds the entries of a package this function's twin exported (same
        mesh, backend, input placements and donation); only what it lacks
        is compiled. Returns the number of entries added."""
        from .aot import seed
        return seed(self, path)

    def _nearest_key(self, key):
        """The entry a guard failure is explained against: the last call's,
        else one with the same argument structure, else any."""
        if self._last_key is not None:
            return self._last_key
        same = [k for k in self._executables if k[0] == key[0]]
        return (same or list(self._executables))[0]

    def _check_compilable(self, key, reason: Optional[str]) -> None:
        """Raises MissingEntryError where the entry for ``key`` cannot be
        compiled here: a loaded package's function (``fn`` None), or no
        ``shardx-compile`` on this host."""
        if self.fn is None:
            n = len(self._executables)
            where = getattr(self, "_package", None)
            raise MissingEntryError(
                f"shardx.load: {self.name!r} has no compiled entry for these arguments "
                f"({reason or _describe_key(key)}); the package"
                f"{'' if where is None else ' ' + repr(where)} holds {n} "
                f"entr{'y' if n == 1 else 'ies'}: compile it where shardx-compile is and "
                "export again")
        missing = _compiler_missing()
        if missing is not None:
            what = (f"a new entry ({reason})" if reason is not None
                    else f"its first call ({_describe_key(key)})")
            raise MissingEntryError(
                f"shardx.compile: {self.name!r} needs shardx-compile for {what}, and this host "
                f"has none ({missing}); compile it where shardx-compile is, export it "
                "(CompiledFunction.export) and shardx.load the package here")

    # -- compile ----------------------------------------------------------

    def _compile(self, args, flat, spec, partners=None, writes=None) -> _Executable:
        """Traces and compiles for these arguments. An argument that is the
        same object as an earlier one is traced as that one's tensor (the
        guard key's ``same_as``). ``partners`` (the entry's written inputs
        and the inputs that are the same memory) makes those one tensor too,
        as they are in the call; otherwise distinct arguments are traced as
        tensors of their own, so that a program that writes no input is
        right for any overlap of their memory."""
        import torch
        from .importer import trace
        from .placements import Replicate

        # Placements were checked (PlacementError) by the guard, before this.
        in_pl, examples, layouts = [], [], []
        # input -> the first input that is the same tensor: the same object
        # (``same_as``, guarded), or the same memory as a written input
        # (``partners``).
        share = {}
        key_traits = _key_traits(flat, self.backend in GPU_BACKENDS)
        for i, t in enumerate(key_traits or ()):
            if t is not None and t[-1] is not None:
                share[i] = t[-1]
        for i, same in partners or ():
            group = (i,) + same
            for j in group:
                if j != min(group):
                    share.setdefault(j, min(group))
        for i, a in enumerate(flat):
            if isinstance(a, ShardedTensor):
                p = a.placements
                if p is None:
                    raise PlacementError(
                        f"input {i}: its layout [{a.layout_text}] has no DTensor placements; "
                        "pass it as a torch tensor")
                example = torch.zeros(a.shape, dtype=a.dtype)
            else:
                p = self.in_placements[i] if self.in_placements else None
                t = a if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a))
                # Tracing runs the function: on a copy, never on the caller's
                # tensor (an in-place op would change it), with the traits
                # the guard key holds.
                example = _example(t, self.backend in GPU_BACKENDS)
            if i in share:
                example = examples[share[i]]
            examples.append(example)
            layouts.append(make_layout(self.mesh, p, tuple(a.shape), f"input {i}"))
            in_pl.append(None if p is None else list(p))
        rep = [Replicate()] * self.mesh.ndim
        out_pl = [] if self._trace_mesh else None
        traced = _Traced(self.fn, self.name, spec, self.out_placements, out_pl,
                         [p if p is not None else rep for p in in_pl])
        arg_attrs = None
        if callable(getattr(self.fn, "arg_attrs", None)):
            arg_attrs = self.fn.arg_attrs(_unflatten(spec, iter(examples)))
        # The program's symbol is prefixed: a function named like a C
        # library function (torch.floor, a user's `tanh`) collided with the
        # libm call its own math lowers to ("func.call op operand type
        # mismatch" from shardx-compile).
        from .importer import module as importer_module
        from .importer.attention import flash_precision, sequence_order
        start = time.perf_counter()
        # On a GPU, attention of bf16/f16 values at a fused kernel's
        # precision: its GEMMs on tensor cores (importer/attention.py).
        # The trace's garbage is collected while shardx-compile runs (or at
        # the block's end, where the artifact is cached).
        from . import env_guard  # torch's: not on a runtime-only host
        # What the trace read besides the arguments, as it is after the
        # trace (a cache the function fills on its first call counts);
        # the tensors among it that the graph reads are lifted to inputs
        # (``lift``: parameters, buffers, tensors it closes over), read at
        # each call and guarded by identity and metadata, not by value.
        # ``lift`` runs inside the trace (after its first pass, while the
        # regions' patches of modules are on), so the guarded snapshot is
        # taken again after it.
        def lift():
            return env_guard.snapshot(self.fn).tensor_ids()
        with importer_module.garbage_left_for_later() as later:
            with flash_precision(self.backend in GPU_BACKENDS), \
                    sequence_order(self.sequence_order):
                text = trace(traced, examples, self._trace_mesh,
                             in_pl if self._trace_mesh else None, out_pl,
                             name=f"jit_{self.name}", arg_attrs=arg_attrs, index_checks=True,
                             lift=lift)
            timing = dict(importer_module.last_timing)
            checks = list(importer_module.last_checks)
            lifted = list(importer_module.last_lifted)
            # The lifted tensors the function writes in place (BatchNorm's
            # running statistics): their new values are outputs after the
            # function's, copied into them after each call.
            lifted_written = [len(flat) + k for k in importer_module.last_lifted_written]
            if lifted_written:
                _refuse_overlapping_lifted(self.name, lifted, len(lifted_written))
            env = env_guard.snapshot(self.fn)
            if lifted:
                env.lift({id(t) for t in lifted})
                layouts += [make_layout(self.mesh, None, tuple(t.shape), "a lifted tensor")
                            for t in lifted]
            env = env or None
            mode = _call_mode()
            if self.memory_budget is not None:
                # The plan's layouts are the inputs' (the entry scatters them).
                t0 = time.perf_counter()
                text = auto_shard(text, self.memory_budget)
                timing["auto_shard"] = time.perf_counter() - t0
            mutated = traced.mutated + lifted_written
            if writes is None:
                # Traced with every input a tensor of its own: the inputs the
                # function writes, whatever the aliasing.
                writes = traced.written
                partners = _partners(flat, writes)
                if any(same for _, same in partners):
                    # Written inputs that are the same tensor as others: traced
                    # again as one tensor, as eager writes them.
                    return self._compile(args, flat, spec, partners, writes)
            artifact, key, path = load_or_compile(text, [layout_key(l) for l in layouts],
                                                  compile_target(self.backend), timing,
                                                  self.recompute, self.recompute_budget,
                                                  meanwhile=later.collect,
                                                  ring_attention_bytes=self.ring_attention_bytes,
                                                  attention_piece_rows=self.attention_piece_rows)
        timing["total"] = time.perf_counter() - start
        self.last_compile_timing = timing
        if self.first_call_timing is None:
            self.first_call_timing = timing
        log.info("shardx.compile: %s ready in %.2f s (%s)", self.name, timing["total"],
                 ", ".join(f"{k} {v:.2f} s" for k, v in timing.items() if k != "total"))
        entry = artifact.entry_points[0]
        outputs = artifact.outputs(entry)
        if self.memory_budget is not None:
            layouts = [spec["layout"] for spec in artifact.inputs(entry)]
        donated = self._pair_donated(args, traced.out_spec, layouts, outputs)
        self.compiles += 1
        out_spec = traced.out_spec
        if mutated:
            out_spec = (tuple, (out_spec, (tuple, (None,) * len(mutated))))
        if checks:
            out_spec = (tuple, (out_spec, None))
        out_keys = [(tuple(o["global_shape"]), o["dtype"], layout_key(o["layout"]))
                    for o in outputs]
        # The plan takes (arguments, lifted tensors).
        plan_spec = spec if not lifted else (tuple, (spec, (tuple, (None,) * len(lifted))))
        plan = self._make_plan(artifact, entry, plan_spec, out_spec, out_keys, donated, key_traits)
        extra = tuple(_alias(t) for t in lifted)
        seed = extra[-1] if importer_module.last_seed is not None else None
        return _Executable(artifact, entry, layouts, out_spec, out_keys, donated, key, path, plan,
                           mutated, writes, partners or (), {}, checks, env, mode=mode,
                           lifted=lifted, extra=extra, seed=seed,
                           fast=key_traits is None or _plan_traits(key_traits) is not None)

    def _make_plan(self, artifact, entry, spec, out_spec, out_keys, donated, traits=None):
        """The C++ call plan of an entry (compiled here, or loaded from a
        package by ``shardx.load``); ``traits``: its guard key's (None:
        plain arguments only)."""
        donated_input_of = [-1] * len(out_keys)
        for i, o in donated:
            donated_input_of[o] = i
        args = (artifact, entry, spec, out_spec, out_keys, donated_input_of, ShardedTensor,
                self.mesh, self.name, _plan_traits(traits) or [])
        if self._session_obj is None:
            # A GPU backend's session is made at the first run (an nccl
            # session needs its launcher and a GPU): so is the plan.
            return _LazyPlan(self, args)
        return runtime().CallPlan(self._session, *args)

    def _pair_donated(self, args, out_spec, in_layouts, out_specs):
        """(flat input, flat output) pairs: each donated argument's leaves
        and the first top-level output of the same structure whose leaves
        have the same shapes, dtypes and layouts."""
        donate = self.donate
        if isinstance(donate, int) and not isinstance(donate, bool):
            donate = (donate,)  # before the emptiness test: donate=0 is argument 0
        if not donate:
            return []
        explicit = dict(donate) if isinstance(donate, dict) else {a: None for a in donate}
        arg_specs, offsets, at = [], [], 0
        for a in args:
            leaves: List[Any] = []
            arg_specs.append(_flatten(a, leaves))
            offsets.append(at)
            at += len(leaves)
        outs = list(out_spec[1]) if out_spec is not None and out_spec[0] in (tuple, list) \
            else [out_spec]
        out_offsets, at = [], 0
        for o in outs:
            out_offsets.append(at)
            at += _count_leaves(o)
        used, pairs = set(), []
        for argnum, want in explicit.items():
            if not 0 <= argnum < len(args):
                raise ValueError(f"donate: no argument {argnum}")
            sub = arg_specs[argnum]
            first = offsets[argnum]
            leaves = []
            _flatten(args[argnum], leaves)
            n = len(leaves)

            def fits(k):
                if outs[k] != sub:
                    return False
                for j in range(n):
                    spec = out_specs[out_offsets[k] + j]
                    a = leaves[j]
                    if (tuple(spec["global_shape"]) != tuple(a.shape)
                            or spec["dtype"] != (a.guard_key[1] if isinstance(a, ShardedTensor)
                                                 else dtype_name(a))
                            or layout_key(spec["layout"]) != layout_key(in_layouts[first + j])):
                        return False
                return True
            candidates = [want] if want is not None else [k for k in range(len(outs)) if k not in used]
            match = next((k for k in candidates if 0 <= k < len(outs) and fits(k)), None)
            if match is None:
                raise ValueError(f"donate: argument {argnum} matches no output of the same "
                                 "structure, shapes, dtypes and layouts")
            used.add(match)
            pairs += [(first + j, out_offsets[match] + j) for j in range(n)]
        return pairs

    def _last_executable(self) -> "_Executable":
        """The entry the last call ran: its guard key's (a recompile for a
        changed environment replaces a key's entry in place, so the newest
        key is not always the one that ran), else the newest."""
        return self._executables.get(self._last_key) or list(self._executables.values())[-1]

    def memory_profile(self, level: str = "buffers") -> List[Dict[str, Any]]:
        """The compiler's model of each rank's memory in the program the
        last call ran (docs/Memory.md): one dict per function with the peak
        bytes, the op and location where it is reached, the bytes alive at
        the peak by role and the bytes alive at each op (``timeline``), as
        ``shardx-print-plan{memory-json=...}`` writes them; ``level`` as in
        ``shardx.jit.memory_profile``."""
        if not self._executables:
            raise RuntimeError(f"shardx.compile: {self.name} has no compiled program yet: "
                               "call it (or precompile) first")
        ex = self._last_executable()
        src = ex.path[:-len(".so")] + ".mlir"
        if not os.path.exists(src):
            raise RuntimeError(f"shardx.compile: {self.name}'s program text is not in the cache "
                               f"({src}): the memory model needs it")
        with open(src) as f:
            return memory_profile(f.read(), compile_target(self.backend), level)

    def precompile(self, *args) -> "CompiledFunction":
        """Traces and compiles the entry these arguments need, as a call
        would, without running it: a GPU backend's function is compiled
        (and exported) this way where no GPU is. Returns ``self``."""
        flat: List[Any] = []
        spec = _flatten(args, flat)
        key = self._guard_key(flat, spec)
        if key not in self._executables:
            reason = self._reason(self._nearest_key(key), key) if self._executables else None
            self._check_compilable(key, reason)
            if reason is not None:
                self.recompile_reasons.append(reason)
                log.info("shardx.compile: recompiling %s because %s", self.name, reason)
            self._executables[key] = self._compile(args, flat, spec)
            self._last_key = key
        return self

    # -- call -------------------------------------------------------------

    def _call_guarded(self, args):
        """Finds (or compiles, logging why) the entry whose guards the
        arguments pass, makes every leaf a ShardedTensor in the entry's
        layout, runs it and writes back the inputs it modifies."""
        guarded = self._guarded
        if guarded is not None and _misfit(guarded) is None:
            # An entry whose environment is guarded: its C++ plan once the
            # environment is as traced (NotImplemented: a guard failed).
            out = guarded.plan(guarded.plan_args(args))
            if out is not NotImplemented:
                if guarded.checks:
                    out, code = out
                    _raise_failed_check(guarded.checks, code, self._session)
                return out
        checked = self._checked
        if checked is not None and _misfit(checked) is None:
            # The C++ plan (it returns NotImplemented when a guard fails),
            # then the check.
            out = checked.plan(checked.plan_args(args))
            if out is not NotImplemented:
                out, code = out
                _raise_failed_check(checked.checks, code, self._session)
                return out
        flat = []
        spec = _flatten(args, flat)
        if not all([type(a) is ShardedTensor or _is_leaf(a) for a in flat]):
            bad = next(a for a in flat if not (type(a) is ShardedTensor or _is_leaf(a)))
            raise TypeError("shardx.compile: arguments must be tensors, ShardedTensors, numpy "
                            "arrays, None, bools, ints, floats or strings in tuples, named "
                            f"tuples, lists and dicts, not {type(bad).__name__}")
        key = self._guard_key(flat, spec)
        exe = self._executables.get(key)
        changed = None
        if exe is not None:
            changed = _misfit(exe)
            if changed is not None:
                # An earlier entry of this key whose environment and modes
                # are back (model.eval(), then model.train() again; no_grad
                # and then grad mode), else a new one.
                back = next((o for o in exe.others if _misfit(o) is None), None)
                if back is not None:
                    back.others = [exe] + [o for o in exe.others if o is not back]
                    exe.others = []
                    self._executables[key] = exe = back
                    changed = None
        if exe is None or changed is not None:
            reason = changed if changed is not None else (
                self._reason(self._nearest_key(key), key) if self._executables else None)
            self._check_compilable(key, reason)
            if reason is not None:
                self.recompile_reasons.append(reason)
                log.info("shardx.compile: recompiling %s because %s", self.name, reason)
            new = self._compile(args, flat, spec)
            if exe is not None:
                new.others = [exe] + exe.others
                exe.others = []
            self._executables[key] = exe = new
        if exe.writes:
            # The aliasing of the written inputs is a guard (a ValueError
            # where they overlap another input partly).
            partners = _partners(flat, exe.writes)
            if partners != exe.partners:
                variant = exe.variants.get(partners)
                if variant is not None and _misfit(variant) is not None:
                    variant = None  # traced in another environment: again
                if variant is None:
                    reason = (f"the inputs written in place alias others differently: "
                              f"{_alias_text(exe.partners)} -> {_alias_text(partners)}")
                    self._check_compilable(key, reason)
                    self.recompile_reasons.append(reason)
                    log.info("shardx.compile: recompiling %s because %s", self.name, reason)
                    variant = self._compile(args, flat, spec, partners, exe.writes)
                    exe.variants[partners] = variant
                exe = variant
        if exe.lifted and exe.mutated:
            # An argument that shares memory with a lifted tensor, one of
            # them written: traced as two tensors, so refused (ValueError).
            _refuse_lifted_aliases(self.name, flat, exe)
        self._last_key = key
        # An entry that writes inputs back runs from here (Python), every call.
        if isinstance(exe.plan, _LazyPlan):
            exe.plan = exe.plan.build()
        # The C++ plan takes plain tensors only (``_traits``): an entry
        # traced with another input's strides, requires_grad, ... runs from
        # here, so that a plain input goes to its own entry.
        # An entry that draws random numbers runs from here too: its seed is
        # drawn before each call.
        plain = exe.fast and exe.seed is None
        self._plan = None if exe.mutated or exe.checks or not plain else exe.plan
        self._plan_extra = exe.extra if exe.lifted else None
        # The C++ call path asks _mode_fn before the plan: the caller's
        # modes, and whether the environment is as traced.
        if exe.env is None:
            self._mode_fn, self._plan_mode = _call_mode, exe.mode
        else:
            self._mode_fn, self._plan_mode = functools.partial(_mode_and_env, exe.env), \
                (exe.mode, True)
        #: An entry with checks: its plan, tried first by the next call.
        self._checked = exe if exe.checks and not exe.mutated and exe.env is None and plain \
            else None
        #: An entry with checks and a guarded environment: likewise.
        self._guarded = exe if exe.env is not None and exe.checks and not exe.mutated and plain \
            else None
        # Arrays the plan does not take as they are (not contiguous, on
        # another device, needing grad) are scattered here.
        leaves = []
        lifted_keys = [(tuple(t.shape), dtype_name(t), layout_key(l))
                       for t, l in zip(exe.lifted, exe.in_layouts[len(flat):])]
        for j, (a, layout, k) in enumerate(zip(flat + exe.lifted, exe.in_layouts,
                                               list(key[1]) + lifted_keys)):
            if j >= len(flat) and isinstance(exe.extra[j - len(flat)], np.ndarray) and \
                    exe.extra[j - len(flat)].flags.c_contiguous:
                # A lifted tensor's alias, as the C++ call path passes it.
                leaves.append(exe.extra[j - len(flat)])
                continue
            if not isinstance(a, ShardedTensor):
                # A CUDA tensor on a GPU session is read in place (DLPack).
                shards = device_shards(self._session, self.mesh, a, layout)
                if shards is None:
                    array = a.detach().contiguous().cpu() if hasattr(a, "detach") \
                        else np.ascontiguousarray(a)
                    shards = self._session.scatter(array, dtype_name(array), layout)
                a = ShardedTensor(shards, self.mesh, k)
            leaves.append(a)
        it = iter(leaves)
        if exe.seed is not None:
            _draw_seed(exe.seed)
        out = exe.plan((_unflatten(spec, it), tuple(it)) if exe.lifted else _unflatten(spec, it))
        if out is NotImplemented:
            raise RuntimeError(f"shardx.compile: the call plan of {self.name} refused arguments "
                               "its guards accepted (a ShardX bug)")
        if exe.checks:
            out, code = out
            _raise_failed_check(exe.checks, code, self._session)
        if exe.mutated:
            out, written = out
            groups = [{i, *same} for i, same in exe.partners]
            targets, values = [], []
            for i, new in zip(exe.mutated, written):
                if i >= len(flat):  # a lifted tensor (a module's buffer)
                    targets.append(exe.lifted[i - len(flat)])
                    values.append(new)
                    continue
                targets.append(flat[i])
                values.append(new)
                # Another handle of the same shards follows too (a tensor
                # or array of the same memory has it already).
                for j in sorted(set().union(*[g for g in groups if i in g]) - {i}):
                    if isinstance(flat[j], ShardedTensor) and flat[j] is not flat[i]:
                        targets.append(flat[j])
                        values.append(new)
            _write_back(targets, values)
        return out


def draw_seed() -> int:
    """A seed for a call of a program with random ops (importer/rng.py),
    from PyTorch's default generator, as eager's random ops draw from it:
    ``torch.manual_seed`` makes a run repeatable. Where PyTorch cannot be
    imported (a runtime-only host running a package), from numpy's global
    generator (``np.random.seed``)."""
    try:
        import torch
    except ImportError:
        return int(np.random.randint(-2 ** 63, 2 ** 63 - 1, dtype=np.int64))
    return int(torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64))


def _draw_seed(seed) -> None:
    """Draws the random ops' seed of the next call (``draw_seed``) into
    ``seed``, a 0-d int64 tensor or numpy array: the memory the program
    reads."""
    value = draw_seed()
    if isinstance(seed, np.ndarray):
        seed[...] = value
    else:
        seed.fill_(value)


def _call_mode():
    """The caller's torch modes that change what a trace records: grad
    mode, and the autocast modes where any is on (``torch.compile`` guards
    both). A bool while no autocast is on, so that the C++ call path's
    comparison stays cheap."""
    import torch
    if not torch._C._is_any_autocast_enabled():
        return torch.is_grad_enabled()
    from .importer.regions import _autocast_state
    return (torch.is_grad_enabled(), _autocast_state())


def _mode_and_env(env):
    """``_call_mode()`` and whether ``env`` is as traced: what the C++ call
    path compares with an entry whose environment is guarded."""
    return _call_mode(), env.changed() is None


def _mode_text(mode) -> str:
    grad, autocast = mode if isinstance(mode, tuple) else (mode, "no autocast")
    return f"grad {'enabled' if grad else 'disabled'}, {autocast}"


def _misfit(exe) -> Optional[str]:
    """Why an entry does not fit this call besides its guard key: the
    caller's torch modes, or what the function reads (``env_guard``),
    changed since its trace; None where it fits."""
    if exe.mode is not None:
        mode = _call_mode()
        if mode != exe.mode:
            return f"the torch modes changed: {_mode_text(exe.mode)} -> {_mode_text(mode)}"
    return exe.env.changed() if exe.env is not None else None


def _raise_failed_check(checks, code, session) -> None:
    """Raises the error of the first check that failed in the step (its
    code, the program's last output, replicated: 0 when none did), as
    eager raises it. Nothing of the step is returned or written back;
    donated inputs stay donated (their buffers went to the step's
    outputs)."""
    if code.on_device:
        k = int(np.asarray(code.full()).reshape(()))
    else:  # this process's copy, read in place (no gather, no collective)
        k = int(code.local(max(session.process_rank, 0)).reshape(()))
    raise_failed_check(checks, k, "shardx.compile")


class _LazyPlan:
    """A call plan to make at its first use, when the rank session is."""

    def __init__(self, fn: "CompiledFunction", args):
        self.fn, self.args = fn, args

    def build(self):
        return runtime().CallPlan(self.fn._session, *self.args)


def _alias_text(partners) -> str:
    pairs = [f"{i}={j}" for i, same in partners for j in same]
    return "inputs " + ", ".join(pairs) if pairs else "none"


def _write_back(targets, values) -> None:
    """Gives each input the program modified its new value, as eager leaves
    it: a torch tensor or numpy array is copied into, a ShardedTensor
    points at the new shards."""
    for target, new in zip(targets, values):
        if isinstance(target, ShardedTensor):
            target._set(new.shards, new.guard_key)
        elif isinstance(target, np.ndarray):
            np.copyto(target, new.full())
        else:
            import torch
            with torch.no_grad():
                target.copy_(new.to_torch())


def compile(fn: Callable, mesh: Mesh, in_placements: Optional[Sequence[Optional[Sequence[Placement]]]] = None,
            out_placements: Optional[Sequence[Optional[Sequence[Placement]]]] = None,
            backend: str = "threads", donate=(), name: Optional[str] = None,
            recompute: str = "none", memory_budget: Optional[int] = None,
            recompute_budget: Optional[int] = None,
            ring_attention_bytes=None, sequence_order=None,
            attention_piece_rows: Optional[int] = None) -> CompiledFunction:
    """``fn`` compiled for ``mesh``: see the module documentation.

    ``in_placements`` / ``out_placements``: one entry per flattened input /
    output tensor (pytree order, as for ``shardx.trace``), ``None`` for
    replicated (inputs) or the propagated layout (outputs). ``donate``: the
    argument numbers whose ShardedTensors the call updates in place (each
    paired with the output of the same structure), or a dict argument ->
    output index. Bad placements raise ``PlacementError`` here or, where
    they need the input shapes, on the first call before tracing.
    ``recompute``: activation recomputation, ``"none"``, ``"selective"``
    (elementwise forward values computed again before their first backward
    reader; matmul and reduction results kept) or ``"aggressive"`` (also
    matmuls whose inputs the backward keeps anyway) or ``"budget"`` with
    ``recompute_budget`` (bytes per rank: the fewest of ``"aggressive"``'s
    copies that bring the modeled activation peak within it, as torchtitan's
    memory-budget checkpointing, with bytes instead of a fraction); the
    results are bit for bit those of ``"none"`` (docs/Compiler.md,
    "Activation recomputation").
    ``memory_budget``: bytes per rank; the inputs without placements get
    the layouts ``shardx-auto-shard`` chooses so that the modeled step time
    is smallest and the modeled peak fits (docs/Memory.md, "Automatic
    sharding under a budget"); ``MemoryBudgetError`` when no plan fits.
    ``ring_attention_bytes``: an attention whose keys and values are
    all-gathered along a split sequence runs as ring attention where the
    gathered keys and values would take at least this many bytes per rank
    (an int; ``"never"``; None: shardx-compile's default, 32 MiB;
    docs/Rules.md, "Ring attention").
    ``sequence_order``: the position each row of a causal attention's
    sequence holds, for data reordered to balance context parallelism
    (``shardx.context_parallel.zigzag_order``; None: the rows' order):
    every causal ``scaled_dot_product_attention`` masks by these positions,
    and its ring computes only the quarters of each block the mask shows
    (docs/Rules.md, "Zig-zag load balancing").
    ``attention_piece_rows``: an unsharded causal attention (its queries
    and keys at torch.arange's positions) runs by the pieces its mask
    shows, of at least this many rows, at most 8 a side (None: the
    compiler's default, 128; 0: whole; docs/Rules.md, "Causal attention in
    pieces").
    """
    if recompute not in RECOMPUTE_POLICIES:
        raise ValueError(f"recompute={recompute!r} is not a policy; one of "
                         f"{', '.join(RECOMPUTE_POLICIES)}")
    if (recompute == "budget") != (recompute_budget is not None):
        raise ValueError('recompute="budget" and recompute_budget= (bytes per rank) go '
                         "together")
    if recompute_budget is not None and (isinstance(recompute_budget, bool) or
                                         not isinstance(recompute_budget, int) or
                                         recompute_budget < 0):
        raise ValueError(f"recompute_budget={recompute_budget!r}: expected a non-negative "
                         "int (bytes per rank)")
    if ring_attention_bytes is not None and ring_attention_bytes != "never" and (
            isinstance(ring_attention_bytes, bool) or not isinstance(ring_attention_bytes, int)
            or ring_attention_bytes < 0):
        raise ValueError(f"ring_attention_bytes={ring_attention_bytes!r}: expected a "
                         'non-negative int (bytes per rank), "never" or None')
    if attention_piece_rows is not None and (isinstance(attention_piece_rows, bool) or
                                             not isinstance(attention_piece_rows, int) or
                                             attention_piece_rows < 0):
        raise ValueError(f"attention_piece_rows={attention_piece_rows!r}: expected a "
                         "non-negative int (rows; 0: whole) or None")
    if backend == "cuda-local":
        backend = "cuda"
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported by shardx.compile; "
                         f"supported: {', '.join(BACKENDS)}")
    if mesh is None:
        # An unsharded program on one rank.
        if any(p is not None for p in list(in_placements or []) + list(out_placements or [])):
            raise PlacementError("placements given without a mesh")
    elif not isinstance(mesh, Mesh):
        raise PlacementError(f"mesh must be a shardx.Mesh, got {mesh!r}")
    for what, pls in (("input", in_placements), ("output", out_placements)):
        for i, p in enumerate(pls or []):
            if p is None:
                continue
            if isinstance(p, Placement) or len(p) != mesh.ndim or not all(
                    isinstance(x, Placement) for x in p):
                raise PlacementError(f"{what} {i}: expected {mesh.ndim} placements (one per mesh "
                                     f"axis {', '.join(mesh.axis_names)}), got {p!r}")
    if memory_budget is not None and (mesh is None or int(memory_budget) <= 0):
        raise ValueError("memory_budget needs a mesh and a positive number of bytes per rank")
    if sequence_order is not None:
        from .importer.attention import normalized_order
        sequence_order = normalized_order(sequence_order)
    return CompiledFunction(fn, mesh, in_placements, out_placements, backend, donate, name,
                            recompute, memory_budget, recompute_budget, ring_attention_bytes,
                            sequence_order, attention_piece_rows)
