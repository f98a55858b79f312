"""A persistent cache of traced regions (``regions``): a region traced once
is kept in memory and on disk, under ``$SHARDX_CACHE_DIR/regions`` (the
JIT's cache folder, default ``~/.cache/shardx/jit``), so that a later trace
of a step with the same layer, in this process or another, neither traces
it again nor runs its two ``make_fx`` passes. As inductor's FX graph cache
keys a graph, an entry's key is a hash of everything that shapes the
region's traced graph:

- the region's signature within the trace (``regions.call_region``): its
  identity, the structure of its arguments, every tensor operand's shape,
  strides, dtype and ``requires_grad``, plain arguments by value, grad mode
  and autocast modes; here also each operand's device, the default dtype
  and the train-step phase the call runs in;
- the code it runs (``code_digest``): the function's bytecode, constants,
  names and line table (the traced ops' source lines are part of the
  graph), its defaults and closure, and, recursively, the globals its code
  names (functions, classes and plain values; of a module only the
  attributes the code names); for a ModuleList child its classes' methods
  and its plain attributes;
- the versions of PyTorch and Python and a digest of ShardX's own Python
  sources (the tracing passes and the decomposition table).

Functions and classes of PyTorch, NumPy and the standard library are keyed
by name (the version covers them). A region whose code reads anything else
(a tensor or an object other than a plain value, function, class or
module) is not cached: it is traced as before. So is a graph with an op
the cache cannot name again (anything but ``torch.ops`` overloads and
``getitem``) or a tensor constant that is not a plain CPU tensor.

``SHARDX_REGION_CACHE=0`` turns the cache off (memory and disk);
``stats`` counts hits (``memory``, ``disk``), misses, regions not
cacheable, entries written and regions traced. The folder keeps the 4096 most recently
used entries.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import logging
import operator
import os
import pickle
import sys
import tempfile
import types
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch
import torch.fx
import torch.utils._pytree as pytree

log = logging.getLogger("shardx.importer")

#: Entries kept on disk (least recently used removed beyond it).
MAX_ENTRIES = 4096
_FORMAT = 1


@dataclass
class Stats:
    """Counters of this process: hits from ``memory`` and from ``disk``,
    ``misses``, regions not ``uncacheable``, entries ``stored``, and regions
    ``traced`` (with the cache on or off)."""

    memory: int = 0
    disk: int = 0
    misses: int = 0
    uncacheable: int = 0
    stored: int = 0
    traced: int = 0

    def reset(self):
        self.memory = self.disk = self.misses = self.uncacheable = self.stored = 0
        self.traced = 0


stats = Stats()
_MEMORY: Dict[str, Any] = {}


def enabled() -> bool:
    return os.environ.get("SHARDX_REGION_CACHE", "1") not in ("0", "false", "no", "off")


def folder() -> str:
    base = os.environ.get("SHARDX_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "shardx", "jit")
    return os.path.join(base, "regions")


class Uncacheable(Exception):
    """The region's code or graph cannot be keyed or stored soundly."""


# -- the key ------------------------------------------------------------------

_VERSIONED_ROOTS = {"torch", "functorch", "numpy", "typing_extensions", "sympy"}


def _versioned(module_name: Optional[str]) -> bool:
    """Is a module covered by a version in the key (PyTorch, NumPy, the
    standard library, ShardX's own sources)."""
    if not module_name:
        return False
    root = module_name.split(".", 1)[0]
    return root in _VERSIONED_ROOTS or root in sys.stdlib_module_names or root == "builtins" \
        or root == "shardx"


_ENVIRONMENT: Optional[str] = None


def _environment() -> str:
    """PyTorch's and Python's versions and a digest of ShardX's sources."""
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        h = hashlib.sha256()
        h.update(f"{torch.__version__}|{torch.version.git_version}|{sys.version}|".encode())
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        for path in sorted(glob.glob(os.path.join(root, "**", "*.py"), recursive=True)):
            h.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        _ENVIRONMENT = h.hexdigest()
    return _ENVIRONMENT


def _code_names(code: types.CodeType, names: set) -> None:
    names.update(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _code_names(c, names)


def _code_text(code: types.CodeType) -> str:
    consts = [_code_text(c) if isinstance(c, types.CodeType) else f"{type(c).__name__}:{c!r}"
              for c in code.co_consts]
    return repr((code.co_code.hex(), consts, code.co_names, code.co_varnames, code.co_freevars,
                 code.co_cellvars, code.co_flags, code.co_argcount, code.co_kwonlyargcount,
                 code.co_posonlyargcount, code.co_filename, code.co_firstlineno,
                 code.co_linetable.hex(), code.co_qualname if hasattr(code, "co_qualname")
                 else code.co_name))


def _plain(v) -> bool:
    if v is None or isinstance(v, (bool, int, float, complex, str, bytes, torch.dtype,
                                   torch.device, torch.Size, torch.layout, torch.memory_format)):
        return True
    if isinstance(v, (tuple, list, frozenset, set)):
        return all(_plain(x) for x in v)
    if isinstance(v, dict):
        return all(_plain(k) and _plain(x) for k, x in v.items())
    return False


class _Digest:
    def __init__(self):
        self.h = hashlib.sha256()
        self.seen: Dict[int, int] = {}

    def put(self, text: str) -> None:
        self.h.update(text.encode())
        self.h.update(b"\0")

    def value(self, v, names=None, depth=0) -> None:
        """Adds what ``v`` contributes to a trace; Uncacheable where it
        cannot say. ``names``: the attribute names the code reading ``v``
        uses (for a module value)."""
        if depth > 24:
            raise Uncacheable("code too deep to key")
        if _plain(v):
            self.put(f"{type(v).__name__}:{v!r}")
            return
        if id(v) in self.seen:
            self.put(f"seen:{self.seen[id(v)]}")
            return
        self.seen[id(v)] = len(self.seen)
        if isinstance(v, types.ModuleType):
            self.put(f"module:{v.__name__}")
            if not _versioned(v.__name__):
                for n in sorted(names or ()):
                    if hasattr(v, n):
                        self.put(f"attr:{n}")
                        self.value(getattr(v, n), names, depth + 1)
            return
        if isinstance(v, (types.MethodType,)):
            self.put("method")
            self.value(v.__func__, names, depth + 1)
            self.value(v.__self__, names, depth + 1)
            return
        if isinstance(v, (staticmethod, classmethod)):
            self.put(type(v).__name__)
            self.value(v.__func__, names, depth + 1)
            return
        if isinstance(v, property):
            for f in (v.fget, v.fset, v.fdel):
                self.value(f, names, depth + 1)
            return
        if isinstance(v, types.FunctionType):
            self.function(v, depth)
            return
        if isinstance(v, (types.BuiltinFunctionType, types.BuiltinMethodType)) or \
                isinstance(v, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            owner = getattr(v, "__module__", None) or type(getattr(v, "__self__", None)).__module__
            if not _versioned(owner) and not isinstance(v, torch._ops.OpOverloadPacket):
                raise Uncacheable(f"builtin {v!r} of {owner}")
            self.put(f"builtin:{owner}.{getattr(v, '__qualname__', repr(v))}")
            return
        if isinstance(v, type):
            self.cls(v, depth)
            return
        if isinstance(v, torch.nn.Module):
            self.module(v, depth)
            return
        if isinstance(v, functools.partial):
            self.put("partial")
            self.value(v.func, names, depth + 1)
            self.value(v.args, names, depth + 1)
            self.value(dict(v.keywords), names, depth + 1)
            return
        if isinstance(v, (tuple, list)):
            self.put(f"{type(v).__name__}:{len(v)}")
            for x in v:
                self.value(x, names, depth + 1)
            return
        if isinstance(v, dict):
            self.put(f"dict:{len(v)}")
            for k, x in v.items():
                if not _plain(k):
                    raise Uncacheable("a dict with keys that are not plain values")
                self.put(repr(k))
                self.value(x, names, depth + 1)
            return
        if type(v).__module__ and _versioned(type(v).__module__) and \
                type(v).__name__ in ("finfo", "iinfo"):
            self.put(repr(v))
            return
        raise Uncacheable(f"the code reads a {type(v).__module__}.{type(v).__qualname__}")

    def function(self, fn: types.FunctionType, depth: int) -> None:
        mod = getattr(fn, "__module__", None)
        self.put(f"function:{mod}.{fn.__qualname__}")
        cells = fn.__closure__ or ()
        if not _versioned(mod):
            code = fn.__code__
            self.put(_code_text(code))
            self.value(fn.__defaults__, None, depth + 1)
            self.value(fn.__kwdefaults__, None, depth + 1)
            names: set = set()
            _code_names(code, names)
            for n in sorted(names):
                if n in fn.__globals__:
                    self.put(f"global:{n}")
                    self.value(fn.__globals__[n], names, depth + 1)
        if _versioned(mod) and mod.split(".", 1)[0] != "shardx":
            cells = ()  # a library's own closures: its version covers them
        for i, cell in enumerate(cells):
            self.put(f"cell:{i}")
            try:
                contents = cell.cell_contents
            except ValueError:
                self.put("empty")
                continue
            names = set()
            if not _versioned(mod):
                _code_names(fn.__code__, names)
            self.value(contents, names, depth + 1)

    def cls(self, c: type, depth: int) -> None:
        self.put(f"class:{c.__module__}.{c.__qualname__}")
        for k in c.__mro__:
            if _versioned(k.__module__):
                self.put(f"base:{k.__module__}.{k.__qualname__}")
                continue
            self.put(f"own:{k.__module__}.{k.__qualname__}")
            for name, attr in sorted(vars(k).items()):
                if name.startswith("__") and name.endswith("__") and name not in (
                        "__call__", "__getattr__", "__getattribute__"):
                    continue
                self.put(f"member:{name}")
                self.value(attr, None, depth + 1)

    def module(self, m: torch.nn.Module, depth: int) -> None:
        from .regions import _module_fingerprint
        fingerprint = _module_fingerprint(m)
        if fingerprint is None:
            raise Uncacheable("a module with hooks or attributes that are not plain values")
        self.put(fingerprint)
        for sub in m.modules():
            self.cls(type(sub), depth + 1)


def code_digest(code: Any) -> str:
    """The hash of what ``code`` (a function, a module, a class) runs when
    traced; Uncacheable where it reads something the hash cannot cover."""
    d = _Digest()
    d.value(code)
    return d.h.hexdigest()


def key(code: Any, signature: str, operands, extra: str) -> str:
    """A region's key: its code, its signature in the trace, the operands'
    devices, the default dtype, ``extra`` (the trace's phase) and the
    environment. Raises Uncacheable."""
    h = hashlib.sha256()
    for part in (_environment(), code_digest(code), signature,
                 ",".join(str(t.device) for t in operands), str(torch.get_default_dtype()),
                 extra, str(_FORMAT)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


# -- graphs as plain data -----------------------------------------------------

class _Ref:
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


_LEAVES = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout,
           torch.memory_format)


def _dump_arg(a, index):
    if isinstance(a, torch.fx.Node):
        return ("n", index[a])
    if isinstance(a, tuple):
        return ("t", [_dump_arg(x, index) for x in a])
    if isinstance(a, list):
        return ("l", [_dump_arg(x, index) for x in a])
    if isinstance(a, dict):
        return ("d", [(k, _dump_arg(x, index)) for k, x in a.items()])
    if isinstance(a, slice):
        return ("s", [_dump_arg(x, index) for x in (a.start, a.stop, a.step)])
    if isinstance(a, _LEAVES):
        return ("v", a)
    raise Uncacheable(f"an argument of type {type(a).__name__}")


def _load_arg(a, nodes):
    tag, v = a
    if tag == "n":
        return nodes[v]
    if tag == "t":
        return tuple(_load_arg(x, nodes) for x in v)
    if tag == "l":
        return [_load_arg(x, nodes) for x in v]
    if tag == "d":
        return {k: _load_arg(x, nodes) for k, x in v}
    if tag == "s":
        return slice(*[_load_arg(x, nodes) for x in v])
    return v


def _dump_val(v):
    if isinstance(v, torch.Tensor):
        if isinstance(v, torch.SymInt) or any(not isinstance(s, int) for s in v.shape):
            raise Uncacheable("a symbolic shape")
        return ("T", tuple(v.shape), tuple(v.stride()), v.dtype)
    if isinstance(v, (list, tuple)):
        return ("L" if isinstance(v, list) else "U", [_dump_val(x) for x in v])
    if isinstance(v, (type(None), bool, int, float)):
        return ("v", v)
    raise Uncacheable(f"a traced value of type {type(v).__name__}")


_FAKE_MODE = None


def _fake_mode():
    global _FAKE_MODE
    if _FAKE_MODE is None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        _FAKE_MODE = FakeTensorMode(allow_non_fake_inputs=True)
    return _FAKE_MODE


@contextlib.contextmanager
def _making_vals():
    """The context ``_load_val`` runs in: no proxy mode (a lookup happens
    inside the step's trace) and no fake mode (the meta tensors are made
    directly)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing
    with disable_proxy_modes_tracing(), unset_fake_temporarily():
        yield


def _load_val(v):
    """A traced value again: a tensor as a fake CPU tensor of its shape,
    strides and dtype (as the trace left it; no memory), made as the fake
    mode makes ``empty_strided``'s result (a meta tensor, wrapped) without
    a dispatch through the mode (0.1 s of a warm 32-layer trace of
    bench/compile_latency_bench.py's GPT, 476 values). Runs within
    ``_making_vals``."""
    tag, rest = v[0], v[1:]
    if tag == "T":
        from torch._subclasses.fake_tensor import FakeTensor
        shape, stride, dtype = rest
        return FakeTensor(_fake_mode(),
                          torch.empty_strided(shape, stride, dtype=dtype, device="meta"),
                          _CPU)
    if tag in ("L", "U"):
        items = [_load_val(x) for x in rest[0]]
        return items if tag == "L" else tuple(items)
    return rest[0]


_CPU = torch.device("cpu")


def _target_name(t) -> tuple:
    if isinstance(t, torch._ops.OpOverload):
        return ("op", t.namespace, t._opname, t._overloadname)
    if t is operator.getitem:
        return ("getitem",)
    raise Uncacheable(f"an op {t!r} the cache cannot name")


def _target(name: tuple):
    if name[0] == "getitem":
        return operator.getitem
    _, ns, op, overload = name
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def _dump_graph(gm: Optional[torch.fx.GraphModule]):
    if gm is None:
        return None
    index: Dict[torch.fx.Node, int] = {}
    nodes, consts = [], {}
    for n in gm.graph.nodes:
        if n.op == "call_function":
            target = _target_name(n.target)
        elif n.op == "get_attr":
            t = getattr(gm, n.target)
            if type(t) is not torch.Tensor and type(t) is not torch.nn.Parameter or \
                    t.device.type != "cpu":
                raise Uncacheable(f"a constant of type {type(t).__name__}")
            consts[n.target] = t.detach().clone()
            target = n.target
        elif n.op in ("placeholder", "output"):
            target = n.target
        else:
            raise Uncacheable(f"a {n.op} node")
        meta = {}
        for k in ("stack_trace", "seq_nr", "custom"):
            if k in n.meta and n.meta[k] is not None:
                if not _plain(n.meta[k]):
                    raise Uncacheable(f"node metadata {k}")
                meta[k] = n.meta[k]
        if "val" in n.meta:
            meta["val"] = _dump_val(n.meta["val"])
        nodes.append((n.op, n.name, target, _dump_arg(tuple(n.args), index),
                      _dump_arg(dict(n.kwargs), index), meta))
        index[n] = len(index)
    return {"nodes": nodes, "consts": consts}


def _load_graph(data) -> Optional[torch.fx.GraphModule]:
    if data is None:
        return None
    g = torch.fx.Graph()
    made: List[torch.fx.Node] = []
    with _making_vals():
        for op, name, target, args, kwargs, meta in data["nodes"]:
            args, kwargs = _load_arg(args, made), _load_arg(kwargs, made)
            if op == "call_function":
                target = _target(target)
            n = g.create_node(op, target, args, kwargs, name)
            n.meta = {k: (_load_val(v) if k == "val" else v) for k, v in meta.items()}
            made.append(n)
    root = torch.nn.Module()
    for k, t in data["consts"].items():
        root.register_buffer(k, t)
    return torch.fx.GraphModule(root, g)


def _dump(region) -> bytes:
    record = {"format": _FORMAT, "forward": _dump_graph(region.forward),
              "backward": _dump_graph(region.backward), "num_outputs": region.num_outputs,
              "out_spec": pytree.treespec_dumps(region.out_spec),
              "grad_mask": list(region.grad_mask), "tangent_mask": list(region.tangent_mask),
              "seconds": region.seconds}
    try:
        return pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    except (TypeError, AttributeError, pickle.PicklingError) as e:
        raise Uncacheable(f"the graph does not pickle ({e})") from None


def _load(blob: bytes, key: str, name: str):
    from .regions import Region
    record = pickle.loads(blob)
    if record.get("format") != _FORMAT:
        raise ValueError("another format")
    return Region(key, name, _load_graph(record["forward"]), record["num_outputs"],
                  pytree.treespec_loads(record["out_spec"]), _load_graph(record["backward"]),
                  record["grad_mask"], record["tangent_mask"], record["seconds"])


# -- lookups --------------------------------------------------------------------

def lookup(cache_key: str, key: str, name: str):
    """The cached region of ``cache_key`` as ``key``/``name`` of this trace,
    or None."""
    import dataclasses
    r = _MEMORY.get(cache_key)
    if r is not None:
        stats.memory += 1
        return dataclasses.replace(r, key=key, name=name)
    path = os.path.join(folder(), cache_key + ".pt")
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError:
        stats.misses += 1
        return None
    try:
        r = _load(blob, key, name)
    except Exception as e:  # noqa: BLE001 -- a damaged entry is traced again
        log.warning("region cache: entry %s does not load (%s: %s); tracing again", path,
                    type(e).__name__, e)
        stats.misses += 1
        return None
    try:
        os.utime(path)  # last use, for the LRU trim
    except OSError:
        pass
    _MEMORY[cache_key] = r
    stats.disk += 1
    return r


def store(cache_key: str, region) -> None:
    """Keeps ``region`` under ``cache_key`` in memory and on disk (a region
    that cannot be stored is only counted)."""
    try:
        blob = _dump(region)
    except Uncacheable as e:
        stats.uncacheable += 1
        log.info("region cache: %s not cached (%s)", region.name, e)
        return
    _MEMORY[cache_key] = region
    where = folder()
    try:
        os.makedirs(where, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=cache_key + ".", suffix=".tmp", dir=where)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, os.path.join(where, cache_key + ".pt"))
        stats.stored += 1
        _trim(where)
    except OSError as e:
        log.info("region cache: cannot write %s (%s)", where, e)


def _trim(where: str) -> None:
    entries = [e for e in os.scandir(where) if e.name.endswith(".pt")]
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda e: e.stat().st_mtime_ns)
    for e in entries[:len(entries) - MAX_ENTRIES]:
        try:
            os.unlink(e.path)
        except OSError:
            pass
