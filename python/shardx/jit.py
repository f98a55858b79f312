"""``shardx.compile``: a PyTorch function as a sharded callable (a JIT).

``compile(fn, mesh, in_placements, out_placements, donate=...)`` returns a
callable. Its first call traces ``fn`` (``shardx.trace``), compiles the
program with ``shardx-compile`` (propagation, reshards, per-rank code) and
loads the artifact; later calls whose inputs have the same shapes, dtypes
and layouts reuse it, and any change recompiles, logging the reason on the
``shardx.jit`` logger (like ``torch.compile``'s guards). Inputs are torch
tensors (scattered by ``in_placements``) or ``ShardedTensor``s (used where
they are, by their own layout); outputs are ``ShardedTensor``s, so a
training loop passes parameters and optimizer state from step to step
without leaving the ranks. The outputs paired with a donated argument
(same structure, shapes, dtypes and layouts) are written into its buffers
once every rank has succeeded, and its handles are invalidated
(``DonatedError`` on use), as JAX's ``donate_argnums``. ``backend="mpi"``
runs each rank as one process of ``mpirun``.

Artifacts are cached on disk (``$SHARDX_CACHE_DIR``, default
``~/.cache/shardx/jit``) under a hash of the program text, the layouts, the
target and the ShardX version; entries are written under a temporary name
and renamed, and an entry that fails its checksum or does not load is
rebuilt. The cache stays under ``$SHARDX_CACHE_MAX_MB`` (default 1024):
after each compile the least recently used entries are removed.
``cache_stats`` counts hits, misses, rebuilds and evictions.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .placements import Mesh, Placement, PlacementError
from .sharded_tensor import (RankError, ShardedTensor, dtype_name, layout_key, make_layout,
                             runtime, session)

log = logging.getLogger("shardx.jit")

VERSION = "0.1.0"
BACKENDS = ("threads", "mpi")
#: Backends the GPU runtime will serve; refused with a clear error until it
#: is there.
GPU_BACKENDS = ("cuda-local", "nccl")


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
    from .artifact import find_tool
    tool = find_tool("shardx-compile")
    st = os.stat(tool)
    return tool, f"{VERSION}+{st.st_size}-{st.st_mtime_ns}"


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_or_compile(mlir_text: str, layouts: Sequence[str], target: str):
    """The loaded artifact of ``mlir_text``, from the disk cache or compiled
    into it. Returns (artifact, key, path)."""
    rt = runtime()
    cache_max_bytes()  # a bad SHARDX_CACHE_MAX_MB fails before the compile
    tool, version = _compiler_identity()
    material = json.dumps({"program": mlir_text, "layouts": list(layouts), "target": target,
                           "version": version}, sort_keys=True)
    key = hashlib.sha256(material.encode()).hexdigest()[:32]
    folder = cache_dir()
    os.makedirs(folder, exist_ok=True)
    so, meta = os.path.join(folder, key + ".so"), os.path.join(folder, key + ".json")
    corrupt = False
    if os.path.exists(meta):
        try:
            with open(meta) as f:
                info = json.load(f)
            if info.get("key") != key or info.get("sha256") != _sha256(so):
                raise ValueError("checksum mismatch")
            artifact = rt.Artifact(so)
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
        proc = subprocess.run([tool, src, "-o", tmp_so], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"shardx-compile failed:\n{proc.stderr}")
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
    artifact = rt.Artifact(so)
    removed = evict(folder, keep=key)
    with _LOCK:
        cache_stats.evictions += len(removed)
    return artifact, key, so


def _flatten(x, leaves):
    """A fast pytree flatten of tuples, lists and dicts (torch's order: dict
    values in insertion order); the structure is a hashable spec."""
    t = type(x)
    if t is tuple or t is list:
        return (t, tuple([_flatten(v, leaves) for v in x]))
    if t is dict:
        return (dict, tuple(x), tuple([_flatten(v, leaves) for v in x.values()]))
    leaves.append(x)
    return None


def _unflatten(spec, it):
    if spec is None:
        return next(it)
    if spec[0] is dict:
        return {k: _unflatten(c, it) for k, c in zip(spec[1], spec[2])}
    return spec[0]([_unflatten(c, it) for c in spec[1]])


def _is_leaf(x) -> bool:
    return isinstance(x, ShardedTensor) or isinstance(x, np.ndarray) or hasattr(x, "detach")


class _Traced:
    """``fn`` as the importer sees it, recording the structure of its output."""

    def __init__(self, fn: Callable, name: str):
        self.fn = fn
        self.__name__ = name
        self.out_treedef = None
        if hasattr(fn, "loss_fn"):
            self.loss_fn = fn.loss_fn

    def __call__(self, *args):
        import torch.utils._pytree as pytree
        out = self.fn(*args)
        self.out_treedef = pytree.tree_structure(out)
        return out


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


class CompiledFunction(runtime().CompiledCall):
    """What ``shardx.compile`` returns; call it like ``fn``.

    A call goes (in C++, ``CompiledCall``) to the call plan of the entry the
    last call used, which checks every guard (structure, shapes, dtypes,
    layouts, mesh) and runs; ``_call_guarded`` (Python) takes the calls
    that fail a guard: it finds or compiles the right entry, logging why."""

    def __init__(self, fn: Callable, mesh: Mesh, in_placements, out_placements, backend: str,
                 donate, name: Optional[str]):
        super().__init__()
        self.fn = fn
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
        #: Why each compile after the first happened.
        self.recompile_reasons: List[str] = []
        self._session = session(self.mesh, backend)
        self._plan = None

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
                keys.append(a._key)
            else:
                shape = tuple(a.shape)
                layout = self._layouts.get((i, shape))
                if layout is None:
                    p = self.in_placements[i] if self.in_placements else None
                    layout = layout_key(make_layout(self.mesh, p, shape, f"input {i}"))
                    self._layouts[(i, shape)] = layout
                keys.append((shape, dtype_name(a), layout))
        return treedef, tuple(keys)

    def _reason(self, old, new) -> str:
        if old[0] != new[0]:
            return "the argument structure changed"
        for i, (a, b) in enumerate(zip(old[1], new[1])):
            if a[0] != b[0]:
                return f"input {i}: shape {list(a[0])} -> {list(b[0])}"
            if a[1] != b[1]:
                return f"input {i}: dtype {a[1]} -> {b[1]}"
            if a[2] != b[2]:
                return f"input {i}: layout {a[2]} -> {b[2]}"
        return "a new input signature"

    # -- compile ----------------------------------------------------------

    def _compile(self, args, flat, treedef) -> _Executable:
        import torch
        import torch.utils._pytree as pytree
        from .importer import trace

        # Placements were checked (PlacementError) by the guard, before this.
        in_pl, examples, layouts = [], [], []
        for i, a in enumerate(flat):
            if isinstance(a, ShardedTensor):
                p = a.placements
                if p is None:
                    raise PlacementError(
                        f"input {i}: its layout [{a.layout_text}] has no DTensor placements; "
                        "pass it as a torch tensor")
                examples.append(torch.zeros(a.shape, dtype=a.dtype))
            else:
                p = self.in_placements[i] if self.in_placements else None
                examples.append(a if isinstance(a, torch.Tensor) else torch.from_numpy(np.asarray(a)))
            layouts.append(make_layout(self.mesh, p, tuple(a.shape), f"input {i}"))
            in_pl.append(None if p is None else list(p))
        traced = _Traced(self.fn, self.name)
        example_args = pytree.tree_unflatten(examples, treedef)
        arg_attrs = self.fn.arg_attrs(example_args) if callable(getattr(self.fn, "arg_attrs", None)) else None
        text = trace(traced, example_args, self._trace_mesh, in_pl if self._trace_mesh else None,
                     self.out_placements, name=self.name,
                     arg_attrs=arg_attrs)
        artifact, key, path = load_or_compile(text, [layout_key(l) for l in layouts],
                                              f"cpu-{platform.machine()}-{self.backend}")
        entry = artifact.entry_points[0]
        donated = self._pair_donated(args, treedef, traced.out_treedef, layouts,
                                     artifact.outputs(entry))
        self.compiles += 1
        n_out = traced.out_treedef.num_leaves
        out_spec = _flatten(pytree.tree_unflatten(list(range(n_out)), traced.out_treedef), [])
        out_keys = [(tuple(o["global_shape"]), o["dtype"], layout_key(o["layout"]))
                    for o in artifact.outputs(entry)]
        donated_input_of = [-1] * n_out
        for i, o in donated:
            donated_input_of[o] = i
        plan = runtime().CallPlan(self._session, artifact, entry, _flatten(args, []), out_spec,
                                  out_keys, donated_input_of, ShardedTensor, self.mesh, self.name)
        return _Executable(artifact, entry, layouts, out_spec, out_keys, donated, key, path, plan)

    def _pair_donated(self, args, treedef, out_treedef, in_layouts, out_specs):
        """(flat input, flat output) pairs: each donated argument's leaves
        and the first top-level output of the same structure whose leaves
        have the same shapes, dtypes and layouts."""
        import torch.utils._pytree as pytree
        donate = self.donate
        if not donate:
            return []
        if isinstance(donate, int):
            donate = (donate,)
        explicit = dict(donate) if isinstance(donate, dict) else {a: None for a in donate}
        offsets, at = [], 0
        for a in args:
            offsets.append(at)
            at += len(pytree.tree_leaves(a))
        n_out = out_treedef.num_leaves
        dummy = pytree.tree_unflatten(list(range(n_out)), out_treedef)
        outs = dummy if isinstance(dummy, (tuple, list)) else (dummy,)
        out_offsets, at = [], 0
        for o in outs:
            out_offsets.append(at)
            at += len(pytree.tree_leaves(o))
        used, pairs = set(), []
        for argnum, want in explicit.items():
            if not 0 <= argnum < len(args):
                raise ValueError(f"donate: no argument {argnum}")
            sub = pytree.tree_structure(args[argnum])
            n = sub.num_leaves
            first = offsets[argnum]

            leaves = pytree.tree_leaves(args[argnum])

            def fits(k):
                if pytree.tree_structure(outs[k]) != sub:
                    return False
                for j in range(n):
                    spec = out_specs[out_offsets[k] + j]
                    a = leaves[j]
                    if (tuple(spec["global_shape"]) != tuple(a.shape)
                            or spec["dtype"] != (a._key[1] if isinstance(a, ShardedTensor)
                                                 else dtype_name(a))
                            or layout_key(spec["layout"]) != layout_key(in_layouts[first + j])):
                        return False
                return True
            candidates = [want] if want is not None else [k for k in range(len(outs)) if k not in used]
            match = next((k for k in candidates if fits(k)), None)
            if match is None:
                raise ValueError(f"donate: argument {argnum} matches no output of the same "
                                 "structure, shapes, dtypes and layouts")
            used.add(match)
            pairs += [(first + j, out_offsets[match] + j) for j in range(n)]
        return pairs

    # -- call -------------------------------------------------------------

    def _call_guarded(self, args):
        """Finds (or compiles, logging why) the entry whose guards the
        arguments pass, makes every leaf a ShardedTensor in the entry's
        layout, and runs it."""
        flat = []
        spec = _flatten(args, flat)
        if not all([type(a) is ShardedTensor or _is_leaf(a) for a in flat]):
            raise TypeError("shardx.compile: arguments must be tensors, ShardedTensors or numpy "
                            "arrays in tuples, lists and dicts")
        key = self._guard_key(flat, spec)
        exe = self._executables.get(key)
        if exe is None:
            if self._executables:
                reason = self._reason(self._last_key, key)
                self.recompile_reasons.append(reason)
                log.info("shardx.compile: recompiling %s because %s", self.name, reason)
            import torch.utils._pytree as pytree
            exe = self._compile(args, flat, pytree.tree_structure(args))
            self._executables[key] = exe
        self._last_key = key
        self._plan = exe.plan
        # Arrays the plan does not take as they are (not contiguous, on
        # another device, needing grad) are scattered here.
        leaves = []
        for a, layout, k in zip(flat, exe.in_layouts, key[1]):
            if not isinstance(a, ShardedTensor):
                array = a.detach().contiguous().cpu() if hasattr(a, "detach") else np.ascontiguousarray(a)
                a = ShardedTensor(self._session.scatter(array, dtype_name(array), layout),
                                  self.mesh, k)
            leaves.append(a)
        out = exe.plan(_unflatten(spec, iter(leaves)))
        if out is NotImplemented:
            raise RuntimeError(f"shardx.compile: the call plan of {self.name} refused arguments "
                               "its guards accepted (a ShardX bug)")
        return out


def compile(fn: Callable, mesh: Mesh, in_placements: Optional[Sequence[Optional[Sequence[Placement]]]] = None,
            out_placements: Optional[Sequence[Optional[Sequence[Placement]]]] = None,
            backend: str = "threads", donate=(), name: Optional[str] = None) -> CompiledFunction:
    """``fn`` compiled for ``mesh``: see the module documentation.

    ``in_placements`` / ``out_placements``: one entry per flattened input /
    output tensor (pytree order, as for ``shardx.trace``), ``None`` for
    replicated (inputs) or the propagated layout (outputs). ``donate``: the
    argument numbers whose ShardedTensors the call updates in place (each
    paired with the output of the same structure), or a dict argument ->
    output index. Bad placements raise ``PlacementError`` here or, where
    they need the input shapes, on the first call before tracing.
    """
    if backend in GPU_BACKENDS:
        raise ValueError(f"backend {backend!r} needs the ShardX GPU runtime, which this build "
                         "does not have; use 'threads' or 'mpi'")
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
    return CompiledFunction(fn, mesh, in_placements, out_placements, backend, donate, name)
