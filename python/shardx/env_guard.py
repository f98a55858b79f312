"""What a compiled function took from outside its arguments, as guards.

``shardx.compile`` traces ``fn`` once per input signature, and the trace
bakes in what ``fn`` reads besides its arguments: Python values of its
closure and globals, a module's attributes (``training``, ``self.scale``)
and the tensors it closes over (a module's parameters and buffers become
the program's constants, values and all). ``torch.compile`` guards on
those; without guards a later call ran the stale program (a changed
global, ``model.eval()``, ``load_state_dict``, an optimizer step outside
the function: numbers other than eager's). ``snapshot(fn)`` walks what
``fn`` can reach (its closure, the globals its code names, a bound
``self`` or callable object's attributes, modules' parameters, buffers,
submodules and plain attributes, containers) and records each value's
identity (tensors: also the version counter, data pointer, shape and
strides; plain values: type and value). ``Environment.changed()`` says
what changed since, or None. The tensors ``shardx.compile`` lifts to
inputs of the program (``Environment.lift``: the ones the graph reads)
are guarded by identity and metadata instead of their values. The
methods of the user's classes are walked as functions (their globals and
closures). It over-approximates what the trace read
(anything reachable counts), so a change of a value the function never
reads compiles again too (with the reason logged), never a stale result.

Not walked: the code of PyTorch, NumPy, the standard library and ShardX
(their version covers them), the attributes of those libraries' objects
other than modules (a logger, an optimizer: by identity), classes (their
attributes are taken as fixed), and values deeper than ``MAX_DEPTH`` or past
``MAX_CHECKS`` (a function that reaches that much state is guarded on
the first ``MAX_CHECKS`` values found)."""

from __future__ import annotations

import functools
import math
import types
from typing import Any, List, Optional, Tuple

import torch

from .importer.region_cache import _code_names, _versioned

MAX_DEPTH = 8
MAX_CHECKS = 20000

_PLAIN = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device,
          torch.Size, torch.layout, torch.memory_format)

#: Bound methods and method wrappers: each attribute read makes a new one.
_BOUND = (types.MethodType, types.MethodWrapperType, types.BuiltinMethodType)

#: Attributes of an ``nn.Module`` that are not state its forward reads.
_MODULE_SKIP = frozenset((
    "_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks", "_non_persistent_buffers_set", "_is_full_backward_hook",
    "_compiled_call_impl"))


def _unchanged(now, then) -> bool:
    """Is ``now`` the value ``then`` was: the same object (a tensor also
    unmodified: its version counter and data), or an equal plain value of
    the same type (floats bit for bit, NaN equal to NaN)."""
    if now is then:
        return True
    if type(now) is type(then) and isinstance(then, _BOUND):
        # A fresh object at each attribute read (``module.__init__``,
        # ``obj.method``): the same method of the same object is unchanged.
        return now.__self__ is then.__self__ and now == then
    if type(now) is not type(then) or not isinstance(then, _PLAIN):
        return False
    if type(then) is float:
        return now.hex() == then.hex() or (math.isnan(now) and math.isnan(then))
    try:
        return bool(now == then)
    except Exception:  # noqa: BLE001 -- a value that does not compare
        return False


def _tensor_mark(v) -> Tuple:
    try:
        return v._version, v.data_ptr()
    except Exception:  # noqa: BLE001 -- a fake tensor left by the trace
        return v._version, None


#: The first element of a lifted tensor's mark (``Environment.lift``).
_LIFTED = "lifted"


def _lifted_mark(v) -> Tuple:
    """What a lifted tensor (an input of the program, read at each call) is
    guarded on: not its values, but what the trace and the call read of it
    besides them (its memory, dtype, shape, strides, requires_grad)."""
    try:
        ptr = v.data_ptr()
    except Exception:  # noqa: BLE001 -- a fake tensor
        ptr = None
    return _LIFTED, ptr, v.dtype, v.shape, v.stride(), v.requires_grad


def _mark_now(v, mark) -> Tuple:
    if mark[0] is _LIFTED:
        return _lifted_mark(v) if isinstance(v, torch.Tensor) else ()
    return _tensor_mark(v)


def _describe(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"a tensor {list(v.shape)} {str(v.dtype).replace('torch.', '')}"
    if isinstance(v, _PLAIN):
        text = repr(v)
        return text if len(text) <= 40 else text[:37] + "..."
    return f"a {type(v).__name__}"


_MISSING = object()


class Environment:
    """The values a compiled entry's trace could read besides its
    arguments. Each slot is where a value lives (a dict entry: globals,
    an object's ``__dict__``, a module's parameters; a closure cell; a
    container's length), the value then, and for a tensor its version
    counter and data pointer; ``where`` says it in words (``global SCALE``,
    ``Net.training``)."""

    def __init__(self):
        #: (dict, key, value, tensor mark or None, where)
        self.entries: List[Tuple[dict, Any, Any, Any, str]] = []
        #: (cell, value, tensor mark or None, where)
        self.cells: List[Tuple[Any, Any, Any, str]] = []
        #: (object, attribute, value, tensor mark or None, where): a Python
        #: module's attributes the code names
        self.attrs: List[Tuple[Any, str, Any, Any, str]] = []
        #: (list, dict or an object's __dict__, length, what it is in words)
        self.lengths: List[Tuple[Any, int, str]] = []
        self._seen = set()

    def tensor_ids(self) -> set:
        """The ids of the tensors the slots hold (what ``lift`` may take)."""
        return {id(v) for _, _, v, mark, _ in self.entries if mark is not None} | \
            {id(v) for _, v, mark, _ in self.cells if mark is not None} | \
            {id(v) for _, _, v, mark, _ in self.attrs if mark is not None}

    def lift(self, ids) -> None:
        """The tensors of ``ids`` are the program's inputs, read at each
        call (``shardx.compile`` lifts the parameters, buffers and tensors
        the trace read): guarded by identity, memory, dtype, shape, strides
        and requires_grad (``_lifted_mark``), not by their values."""
        self.entries = [(d, k, v, _lifted_mark(v) if mark is not None and id(v) in ids
                         else mark, where) for d, k, v, mark, where in self.entries]
        self.cells = [(c, v, _lifted_mark(v) if mark is not None and id(v) in ids else mark,
                       where) for c, v, mark, where in self.cells]
        self.attrs = [(o, n, v, _lifted_mark(v) if mark is not None and id(v) in ids else mark,
                       where) for o, n, v, mark, where in self.attrs]

    def __len__(self) -> int:
        return len(self.entries) + len(self.cells) + len(self.attrs) + len(self.lengths)

    def __bool__(self) -> bool:
        return len(self) > 0

    def changed(self) -> Optional[str]:
        """The first value that differs from the snapshot, in words, or
        None. Each slot is a lookup and an identity test while nothing
        changed (about 0.1 us)."""
        for d, k, then, mark, where in self.entries:
            now = d.get(k, _MISSING)
            if now is not then or (mark is not None and _mark_now(now, mark) != mark):
                if not _unchanged(now, then) or mark is not None:
                    return _why(where, now, then, mark)
        for cell, then, mark, where in self.cells:
            try:
                now = cell.cell_contents
            except ValueError:
                now = _MISSING
            if now is not then or (mark is not None and _mark_now(now, mark) != mark):
                if not _unchanged(now, then) or mark is not None:
                    return _why(where, now, then, mark)
        for obj, name, then, mark, where in self.attrs:
            now = getattr(obj, name, _MISSING)
            if now is not then or (mark is not None and _mark_now(now, mark) != mark):
                if not _unchanged(now, then) or mark is not None:
                    return _why(where, now, then, mark)
        for c, n, where in self.lengths:
            if len(c) != n:
                return f"{where} changed: {n} -> {len(c)}"
        return None

    # -- the walk -------------------------------------------------------------

    def _value(self, value, where: str, depth: int, names=None):
        """The mark of a slot's value (None but for a tensor), after
        walking what the value reaches; False where it is not guarded."""
        if len(self) >= MAX_CHECKS or _library(value):
            return False  # PyTorch's, NumPy's, Python's own: fixed for the process
        self.walk(value, where, depth + 1, names)
        return _tensor_mark(value) if isinstance(value, torch.Tensor) else None

    def _entry(self, d: dict, key, where: str, depth: int, names=None) -> None:
        value = d[key]
        mark = self._value(value, where, depth, names)
        if mark is not False:
            self.entries.append((d, key, value, mark, where))

    def walk(self, v, where: str, depth: int = 0, names=None) -> None:
        if depth > MAX_DEPTH or isinstance(v, _PLAIN) or isinstance(v, torch.Tensor) or \
                isinstance(v, type) or _library(v):
            return
        if id(v) in self._seen:
            return
        self._seen.add(id(v))
        if isinstance(v, types.MethodType):
            self.walk(v.__func__, where, depth + 1)
            self.walk(v.__self__, where, depth + 1)
        elif isinstance(v, types.FunctionType):
            self._function(v, where, depth)
        elif isinstance(v, functools.partial):
            # Its function and arguments are fixed; what they reach is not.
            for i, x in enumerate((v.func, *v.args, *v.keywords.values())):
                self.walk(x, f"{where}'s argument {i}" if i else where, depth + 1)
        elif isinstance(v, types.ModuleType):
            for n in sorted(names or ()):
                if hasattr(v, n):
                    value = getattr(v, n)
                    mark = self._value(value, f"{where}.{n}", depth, names)
                    if mark is not False:
                        self.attrs.append((v, n, value, mark, f"{where}.{n}"))
        elif isinstance(v, (list, tuple)):
            if isinstance(v, list):
                self.lengths.append((v, len(v), f"the length of {where}"))
            items = _Items(v)
            for i, x in enumerate(v[:256]):
                if isinstance(v, list) or isinstance(x, torch.Tensor):
                    # A list's element may be replaced; a tensor's data may
                    # change in a tuple too.
                    mark = self._value(x, f"{where}[{i}]", depth)
                    if mark is not False:
                        self.entries.append((items, i, x, mark, f"{where}[{i}]"))
                else:
                    self.walk(x, f"{where}[{i}]", depth + 1)
        elif isinstance(v, dict):
            self.lengths.append((v, len(v), f"the length of {where}"))
            for i, k in enumerate(list(v)):
                if i >= 256:
                    break
                if isinstance(k, _PLAIN):
                    self._entry(v, k, f"{where}[{k!r}]", depth)
        elif isinstance(v, torch.nn.Module):
            self._object(v, where, depth, _MODULE_SKIP)
        elif isinstance(getattr(v, "__dict__", None), dict) and _user_class(type(v)):
            self._object(v, where, depth, ())

    def _object(self, obj, where: str, depth: int, skip) -> None:
        d = obj.__dict__
        # An attribute set later may hide a class attribute the trace read.
        self.lengths.append((d, len(d), f"the number of attributes of {where}"))
        for name in list(d):
            if name in skip or name.startswith("__"):
                continue
            value = d[name]
            if name in ("_parameters", "_buffers", "_modules") and isinstance(value, dict):
                # A module's own state, each entry by its name (model.l.weight).
                for k in list(value):
                    self._entry(value, k, f"{where}.{k}", depth)
                continue
            self._entry(d, name, f"{where}.{name}", depth)
        self._methods(type(obj), depth)

    def _methods(self, cls: type, depth: int) -> None:
        """The globals and closures of the methods of a user's class and its
        user bases (``forward`` reading a global tensor or number); the class
        attributes themselves are taken as fixed."""
        for c in cls.__mro__:
            if c is object or not _user_class(c) or _versioned(getattr(c, "__module__", None)) \
                    or id(c) in self._seen:
                continue
            self._seen.add(id(c))
            for name, attr in list(vars(c).items()):
                if isinstance(attr, (staticmethod, classmethod)):
                    attr = attr.__func__
                elif isinstance(attr, property):
                    attr = attr.fget
                if isinstance(attr, types.FunctionType) and id(attr) not in self._seen:
                    self._seen.add(id(attr))
                    self._function(attr, f"{c.__name__}.{name}", depth + 1)

    def _function(self, fn: types.FunctionType, where: str, depth: int) -> None:
        if _versioned(getattr(fn, "__module__", None)):
            return
        code = fn.__code__
        for i, cell in enumerate(fn.__closure__ or ()):
            name = code.co_freevars[i] if i < len(code.co_freevars) else str(i)
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            label = f"{_name(fn)}'s closure variable {name}"
            mark = self._value(value, label, depth)
            if mark is not False:
                self.cells.append((cell, value, mark, label))
        names: set = set()
        _code_names(code, names)
        globs = fn.__globals__
        for n in sorted(names):
            if n in globs:
                self._entry(globs, n, f"global {n}", depth, names)
        for d in (fn.__defaults__ or ()):
            self.walk(d, f"{_name(fn)}'s default", depth + 1)


class _Items:
    """A list's or tuple's elements as a dict's ``get``."""

    __slots__ = ("c",)

    def __init__(self, c):
        self.c = c

    def get(self, i, default):
        return self.c[i] if i < len(self.c) else default


def _why(where: str, now, then, mark) -> str:
    if now is _MISSING:
        return f"{where} was deleted"
    if now is then and mark is not None and mark[0] is _LIFTED:
        return (f"{where} ({_describe(now)}) has other memory, dtype, shape, strides or "
                "requires_grad")
    if now is then:
        return f"{where} ({_describe(now)}) was modified in place"
    if isinstance(now, torch.Tensor) and isinstance(then, torch.Tensor):
        return f"{where} was replaced by another tensor ({_describe(now)})"
    return f"{where} changed: {_describe(then)} -> {_describe(now)}"


def _name(fn) -> str:
    if isinstance(fn, functools.partial):
        return f"partial({_name(fn.func)})"
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "the function")


def _library(v) -> bool:
    """A value of a library whose state does not change between calls:
    modules, functions, classes and builtins of PyTorch, NumPy, the
    standard library and ShardX."""
    if isinstance(v, types.ModuleType):
        return _versioned(v.__name__)
    if isinstance(v, (types.BuiltinFunctionType, types.BuiltinMethodType, types.FunctionType,
                      type, torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return _versioned(getattr(v, "__module__", None)) or \
            isinstance(v, (torch._ops.OpOverload, torch._ops.OpOverloadPacket))
    return False


def _user_class(c: type) -> bool:
    """Are an instance's attributes walked: those of the user's classes
    and of ``shardx.train.TrainStep`` (its module, loss and
    hyperparameters); a library's objects (a logger, an optimizer, a
    ``CompiledFunction``, whose state changes with each compile) count by
    identity."""
    from .train import TrainStep
    return not _versioned(getattr(c, "__module__", None)) or issubclass(c, TrainStep)


def snapshot(fn) -> Environment:
    """The environment of ``fn`` as it is now (see the module doc)."""
    env = Environment()
    if isinstance(fn, torch.nn.Module):
        env.walk(fn, _module_name(fn))
    elif isinstance(fn, types.MethodType) and isinstance(fn.__self__, torch.nn.Module):
        env.walk(fn.__func__, _name(fn))
        env.walk(fn.__self__, _module_name(fn.__self__))
    elif isinstance(fn, (types.FunctionType, types.MethodType, functools.partial)):
        env.walk(fn, _name(fn))
    elif hasattr(fn, "__dict__"):  # a callable object (shardx.train.TrainStep)
        env.walk(fn, type(fn).__name__)
        call = getattr(type(fn), "__call__", None)
        if isinstance(call, types.FunctionType):
            env.walk(call, _name(call))
    return env


def _module_name(m) -> str:
    return type(m).__name__
