"""Import traced PyTorch programs into MLIR (func/linalg/tensor/arith/math).

``trace(fn, example_args, ...)`` runs ``make_fx`` over ``fn`` (forward,
``torch.autograd.grad`` backward and the optimizer update all trace into one
aten graph), functionalizes it, decomposes it to a small set of aten ops and
emits one ``func.func`` whose arguments are the flattened tensor inputs and
whose results are the flattened tensor outputs. Placements become
``shardx.layout`` argument/result attributes on a ``shardx.mesh``.

Command line::

    python3 -m shardx.importer script.py:function -o out.mlir

where ``function`` takes no arguments and returns a ``TraceSpec`` (or the
keyword arguments of ``trace`` as a dict).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import operator
import os
import re
import sys
import unittest.mock
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._decomp import core_aten_decompositions, get_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from .placements import Mesh, Placement, PlacementError, check_placements, layout_text
from .constraint import parse_placements

aten = torch.ops.aten


class UnsupportedOpError(NotImplementedError):
    """An aten op (or a form of one) that the importer cannot express."""


class ImportError_(ValueError):
    """Bad arguments to ``trace``."""


# ----------------------------------------------------------------------------
# Types and constants
# ----------------------------------------------------------------------------

_ELEM = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
    torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32",
    torch.int16: "i16", torch.int8: "i8", torch.uint8: "i8", torch.bool: "i1",
}
_INT_VIEW = {torch.float32: torch.int32, torch.float64: torch.int64,
             torch.float16: torch.int16, torch.bfloat16: torch.int16}
_HEX_DIGITS = {torch.float32: 8, torch.float64: 16, torch.float16: 4, torch.bfloat16: 4}


def elem_type(dtype: torch.dtype) -> str:
    try:
        return _ELEM[dtype]
    except KeyError:
        raise UnsupportedOpError(f"dtype {dtype} is not supported") from None


def tensor_type(shape: Sequence[int], dtype: torch.dtype) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{elem_type(dtype)}>"


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def const_literal(value, dtype: torch.dtype) -> str:
    """Exact MLIR literal of python ``value`` converted as torch converts a
    scalar to ``dtype``."""
    if dtype == torch.bool:
        return "true" if bool(value) else "false"
    if is_float(dtype):
        bits = torch.tensor(float(value), dtype=dtype).view(_INT_VIEW[dtype]).item()
        nbits = 4 * _HEX_DIGITS[dtype]
        bits &= (1 << nbits) - 1
        return f"0x{bits:0{_HEX_DIGITS[dtype]}X}"
    return str(int(value))


@dataclass
class Value:
    """An SSA value of tensor type emitted for an FX node."""

    name: str
    shape: Tuple[int, ...]
    dtype: torch.dtype
    # The value this one is a reshape of (so reshaping back is free).
    reshape_of: Optional["Value"] = field(default=None, repr=False, compare=False)

    @property
    def type(self) -> str:
        return tensor_type(self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _amap(nd: int, exprs: Sequence[str]) -> str:
    dims = ", ".join(f"d{i}" for i in range(nd))
    return f"affine_map<({dims}) -> ({', '.join(exprs)})>"


# ----------------------------------------------------------------------------
# Scalar code inside linalg.generic bodies
# ----------------------------------------------------------------------------


class Body:
    """Emits the scalar region of a linalg.generic."""

    def __init__(self, em: "Emitter"):
        self.em = em
        self.lines: List[str] = []

    def v(self, text: str) -> str:
        name = self.em.fresh("s")
        self.lines.append(f"{name} = {text}")
        return name

    def const(self, value, dtype: torch.dtype) -> str:
        if dtype == torch.bool:
            return self.v(f"arith.constant {const_literal(value, dtype)}")
        return self.v(f"arith.constant {const_literal(value, dtype)} : {elem_type(dtype)}")

    def cast(self, x: str, src: torch.dtype, dst: torch.dtype) -> str:
        if src == dst:
            return x
        s, d = elem_type(src), elem_type(dst)
        if dst == torch.bool:
            if is_float(src):
                zero = self.const(0.0, src)
                return self.v(f"arith.cmpf une, {x}, {zero} : {s}")
            zero = self.const(0, src)
            return self.v(f"arith.cmpi ne, {x}, {zero} : {s}")
        if is_float(src) and is_float(dst):
            bs, bd = torch.finfo(src).bits, torch.finfo(dst).bits
            if bs == bd:  # f16 <-> bf16
                x = self.v(f"arith.extf {x} : {s} to f32")
                return self.v(f"arith.truncf {x} : f32 to {d}")
            op = "arith.extf" if bd > bs else "arith.truncf"
            return self.v(f"{op} {x} : {s} to {d}")
        if is_float(dst):
            op = "arith.uitofp" if src in (torch.bool, torch.uint8) else "arith.sitofp"
            return self.v(f"{op} {x} : {s} to {d}")
        if is_float(src):
            return self.v(f"arith.fptosi {x} : {s} to {d}")
        bs = 1 if src == torch.bool else torch.iinfo(src).bits
        bd = torch.iinfo(dst).bits
        if bs == bd:
            return x
        if bd > bs:
            op = "arith.extui" if src in (torch.bool, torch.uint8) else "arith.extsi"
            return self.v(f"{op} {x} : {s} to {d}")
        return self.v(f"arith.trunci {x} : {s} to {d}")

    # Arithmetic on values of one dtype ``t``.
    def binary(self, op: str, a: str, b: str, t: torch.dtype) -> str:
        e = elem_type(t)
        f = is_float(t)
        table = {
            "add": "arith.addf" if f else "arith.addi",
            "sub": "arith.subf" if f else "arith.subi",
            "mul": "arith.mulf" if f else "arith.muli",
            "div": "arith.divf" if f else "arith.divsi",
            "max": "arith.maximumf" if f else "arith.maxsi",
            "min": "arith.minimumf" if f else "arith.minsi",
            "and": "arith.andi", "or": "arith.ori", "xor": "arith.xori",
            "pow": "math.powf" if f else "math.ipowi",
        }
        return self.v(f"{table[op]} {a}, {b} : {e}")

    def unary(self, op: str, a: str, t: torch.dtype) -> str:
        e = elem_type(t)
        if op == "neg":
            if is_float(t):
                return self.v(f"arith.negf {a} : {e}")
            return self.binary("sub", self.const(0, t), a, t)
        if op == "reciprocal":
            return self.binary("div", self.const(1.0, t), a, t)
        if op == "sigmoid":
            one = self.const(1.0, t)
            ex = self.v(f"math.exp {self.unary('neg', a, t)} : {e}")
            return self.binary("div", one, self.binary("add", one, ex, t), t)
        if op == "relu":
            return self.binary("max", a, self.const(0, t), t)
        if op == "abs":
            return self.v(f"math.{'absf' if is_float(t) else 'absi'} {a} : {e}")
        if op == "not":
            return self.binary("xor", a, self.const(True, torch.bool), torch.bool)
        if op == "sign":
            zero = self.const(0.0, t)
            one = self.const(1.0, t)
            mone = self.const(-1.0, t)
            pos = self.v(f"arith.cmpf ogt, {a}, {zero} : {e}")
            neg = self.v(f"arith.cmpf olt, {a}, {zero} : {e}")
            r = self.v(f"arith.select {neg}, {mone}, {zero} : {e}")
            return self.v(f"arith.select {pos}, {one}, {r} : {e}")
        if not is_float(t):
            raise UnsupportedOpError(f"{op} on {t}")
        return self.v(f"math.{op} {a} : {e}")

    def compare(self, pred: str, a: str, b: str, t: torch.dtype) -> str:
        e = elem_type(t)
        if is_float(t):
            fp = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}[pred]
            return self.v(f"arith.cmpf {fp}, {a}, {b} : {e}")
        ip = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}[pred]
        return self.v(f"arith.cmpi {ip}, {a}, {b} : {e}")

    def select(self, c: str, a: str, b: str, t: torch.dtype) -> str:
        return self.v(f"arith.select {c}, {a}, {b} : {elem_type(t)}")


# ----------------------------------------------------------------------------
# The emitter
# ----------------------------------------------------------------------------


class Emitter:
    def __init__(self):
        self.lines: List[str] = []
        self.counter = 0
        # The location of the ops emitted now (an alias of ``locations``), and
        # each alias's definition: the user's source line, fused with the
        # train-step phase when the trace marks one.
        self.loc: Optional[str] = None
        self.locations: Dict[Tuple[Optional[str], Optional[str], int], str] = {}

    def set_location(self, position: Optional[Tuple[str, int]], phase: Optional[str]) -> None:
        """Emits the following ops at ``position`` (file, line) in ``phase``."""
        if position is None and phase is None:
            self.loc = None
            return
        file, line = position or (None, 0)
        key = (phase, file, line)
        if key not in self.locations:
            self.locations[key] = f"#loc{len(self.locations)}"
        self.loc = self.locations[key]

    def location_aliases(self) -> List[str]:
        """The definitions of the location aliases, for the end of the module."""
        out = []
        for (phase, file, line), alias in self.locations.items():
            escaped = (file or "").replace("\\", "\\\\").replace('"', '\\"')
            pos = f'"{escaped}":{line}:0' if file is not None else "unknown"
            out.append(f"{alias} = loc(fused<\"{phase}\">[{pos}])" if phase else f"{alias} = loc({pos})")
        return out

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def emit(self, text: str, prefix: str = "v") -> str:
        name = self.fresh(prefix)
        loc = f" loc({self.loc})" if self.loc else ""
        self.lines.append(f"{name} = {text}{loc}")
        return name

    # -- constants and factories ---------------------------------------------

    def scalar(self, value, dtype: torch.dtype) -> str:
        if dtype == torch.bool:
            return self.emit(f"arith.constant {const_literal(value, dtype)}", "c")
        return self.emit(f"arith.constant {const_literal(value, dtype)} : {elem_type(dtype)}", "c")

    def empty(self, shape, dtype) -> Value:
        t = tensor_type(shape, dtype)
        return Value(self.emit(f"tensor.empty() : {t}", "e"), tuple(shape), dtype)

    def full(self, shape, value, dtype) -> Value:
        e = self.empty(shape, dtype)
        c = self.scalar(value, dtype)
        name = self.emit(f"linalg.fill ins({c} : {elem_type(dtype)}) outs({e.name} : {e.type}) -> {e.type}")
        return Value(name, tuple(shape), dtype)

    # -- shapes ---------------------------------------------------------------

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        """tensor.collapse_shape then tensor.expand_shape by the groups of dims
        whose sizes multiply to the same product."""
        shape = tuple(int(s) for s in shape)
        if _prod(shape) != _prod(x.shape):
            raise UnsupportedOpError(f"reshape {x.shape} -> {shape}")
        if shape == x.shape:
            return x
        if x.reshape_of is not None and x.reshape_of.shape == shape:
            return x.reshape_of
        source = x.reshape_of or x
        groups = _reshape_groups(x.shape, shape)
        mid_shape = tuple(_prod(x.shape[i] for i in gi) for gi, _ in groups)
        cur = x
        if mid_shape != x.shape:
            reassoc = [gi for gi, _ in groups]
            t = tensor_type(mid_shape, x.dtype)
            name = self.emit(f"tensor.collapse_shape {x.name} {_reassoc(reassoc)} : {x.type} into {t}")
            cur = Value(name, mid_shape, x.dtype)
        if mid_shape != shape:
            reassoc = [go for _, go in groups]
            t = tensor_type(shape, x.dtype)
            sizes = ", ".join(map(str, shape))
            name = self.emit(f"tensor.expand_shape {cur.name} {_reassoc(reassoc)} output_shape [{sizes}] : {cur.type} into {t}")
            cur = Value(name, shape, x.dtype)
        cur.reshape_of = source
        return cur

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        perm = [p % x.rank for p in perm] if x.rank else []
        if list(perm) == list(range(x.rank)):
            return x
        shape = tuple(x.shape[p] for p in perm)
        e = self.empty(shape, x.dtype)
        name = self.emit(f"linalg.transpose ins({x.name} : {x.type}) outs({e.name} : {e.type}) permutation = [{', '.join(map(str, perm))}]")
        return Value(name, shape, x.dtype)

    def broadcast_to(self, x: Value, shape: Sequence[int]) -> Value:
        shape = tuple(shape)
        if x.shape == shape:
            return x
        off = len(shape) - x.rank
        keep = [i for i in range(x.rank) if not (x.shape[i] == 1 and shape[off + i] != 1)]
        for i in keep:
            if x.shape[i] != shape[off + i]:
                raise UnsupportedOpError(f"broadcast {x.shape} -> {shape}")
        src = self.reshape(x, [x.shape[i] for i in keep])
        kept_out = {off + i for i in keep}
        added = [d for d in range(len(shape)) if d not in kept_out]
        e = self.empty(shape, x.dtype)
        name = self.emit(f"linalg.broadcast ins({src.name} : {src.type}) outs({e.name} : {e.type}) dimensions = [{', '.join(map(str, added))}]")
        return Value(name, shape, x.dtype)

    def cast(self, x: Value, dtype: torch.dtype) -> Value:
        if x.dtype == dtype:
            return x
        return self.elementwise(x.shape, dtype, [x], lambda b, a: b.cast(a[0], x.dtype, dtype))

    # -- linalg.generic -------------------------------------------------------

    def generic(self, out_shape, out_dtype, inputs: List[Tuple[Value, List[str]]],
                iterators: List[str], out_exprs: List[str], body_fn, init: Optional[Value] = None) -> Value:
        """A linalg.generic with the given input maps; ``body_fn(body, args, out)``
        returns the yielded scalar."""
        nd = len(iterators)
        if init is None:
            init = self.empty(out_shape, out_dtype)
        b = Body(self)
        args = [self.fresh("a") for _ in inputs]
        out_arg = self.fresh("o")
        result = body_fn(b, args, out_arg)
        maps = [_amap(nd, ex) for _, ex in inputs] + [_amap(nd, out_exprs)]
        ins = ", ".join(v.name for v, _ in inputs)
        ins_t = ", ".join(v.type for v, _ in inputs)
        block_args = ", ".join(f"{a}: {elem_type(v.dtype)}" for a, (v, _) in zip(args, inputs))
        block_args = (block_args + ", " if block_args else "") + f"{out_arg}: {elem_type(out_dtype)}"
        its = ", ".join(f'"{i}"' for i in iterators)
        ins_part = f"ins({ins} : {ins_t}) " if inputs else ""
        text = [f"linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{its}]}} "
                f"{ins_part}outs({init.name} : {init.type}) {{",
                f"^bb0({block_args}):"]
        text += ["  " + l for l in b.lines]
        text.append(f"  linalg.yield {result} : {elem_type(out_dtype)}")
        text.append(f"}} -> {init.type}")
        name = self.emit("\n".join(text))
        return Value(name, tuple(out_shape), out_dtype)

    def elementwise(self, out_shape, out_dtype, operands: List[Any], fn) -> Value:
        """Elementwise op with numpy broadcasting; python scalars become
        constants in the body. ``fn(body, scalars)`` returns the result."""
        out_shape = tuple(out_shape)
        r = len(out_shape)
        inputs = []
        slots = []
        for o in operands:
            if isinstance(o, Value):
                off = r - o.rank
                keep = [i for i in range(o.rank) if not (o.shape[i] == 1 and out_shape[off + i] != 1)]
                src = self.reshape(o, [o.shape[i] for i in keep])
                slots.append(("t", len(inputs), o.dtype))
                inputs.append((src, [f"d{off + i}" for i in keep]))
            else:
                slots.append(("s", o, None))

        def body(b: Body, args, _out):
            vals = []
            for kind, ref, _ in slots:
                vals.append(args[ref] if kind == "t" else ref)
            return fn(b, vals)

        return self.generic(out_shape, out_dtype, inputs, ["parallel"] * r,
                            [f"d{i}" for i in range(r)], body)

    def reduce(self, x: Value, dims: Sequence[int], keepdim: bool, combine: str,
               init_value, dtype: Optional[torch.dtype] = None) -> Value:
        """Reduction of ``x`` over ``dims`` with ``combine`` (add/max/min/or)."""
        dtype = dtype or x.dtype
        dims = sorted({d % x.rank for d in dims}) if x.rank else []
        kept = [i for i in range(x.rank) if i not in dims]
        out_shape = tuple(x.shape[i] for i in kept)
        init = self.full(out_shape, init_value, dtype)
        its = ["reduction" if i in dims else "parallel" for i in range(x.rank)]

        def body(b: Body, args, out):
            a = b.cast(args[0], x.dtype, dtype)
            return b.binary(combine, a, out, dtype)

        res = self.generic(out_shape, dtype, [(x, [f"d{i}" for i in range(x.rank)])], its,
                           [f"d{i}" for i in kept], body, init=init)
        if keepdim:
            res = self.reshape(res, [1 if i in dims else x.shape[i] for i in range(x.rank)])
        return res

    def matmul(self, a: Value, b: Value, out_dtype) -> Value:
        if a.rank == 2:
            shape = (a.shape[0], b.shape[1])
            op = "linalg.matmul"
        else:
            shape = (a.shape[0], a.shape[1], b.shape[2])
            op = "linalg.batch_matmul"
        acc = self.full(shape, 0, out_dtype)
        name = self.emit(f"{op} ins({a.name}, {b.name} : {a.type}, {b.type}) outs({acc.name} : {acc.type}) -> {acc.type}")
        return Value(name, shape, out_dtype)

    def extract_slice(self, x: Value, offsets, sizes, strides) -> Value:
        t = tensor_type(sizes, x.dtype)
        j = lambda xs: ", ".join(map(str, xs))
        name = self.emit(f"tensor.extract_slice {x.name}[{j(offsets)}] [{j(sizes)}] [{j(strides)}] : {x.type} to {t}")
        return Value(name, tuple(sizes), x.dtype)


def _reassoc(groups) -> str:
    return "[" + ", ".join("[" + ", ".join(map(str, g)) + "]" for g in groups) + "]"


def _reshape_groups(src: Sequence[int], dst: Sequence[int]):
    """Pairs (src dims, dst dims) of consecutive groups with equal products.
    Unit dims join the group before them (or the first group)."""
    if len(src) == 0 or len(dst) == 0:
        return [(list(range(len(src))), list(range(len(dst))))]
    groups = []
    i = j = 0
    while i < len(src) or j < len(dst):
        gi, gj = [], []
        pi = pj = 1
        if i < len(src):
            gi.append(i); pi *= src[i]; i += 1
        if j < len(dst):
            gj.append(j); pj *= dst[j]; j += 1
        while pi != pj:
            if pi < pj and i < len(src):
                gi.append(i); pi *= src[i]; i += 1
            elif j < len(dst):
                gj.append(j); pj *= dst[j]; j += 1
            else:
                gi.append(i); pi *= src[i]; i += 1
        # Trailing unit dims belong to this group.
        while i < len(src) and src[i] == 1 and (j >= len(dst) or dst[j] != 1):
            gi.append(i); i += 1
        while j < len(dst) and dst[j] == 1 and (i >= len(src) or src[i] != 1):
            gj.append(j); j += 1
        if not gi or not gj:  # a leftover unit dim: merge into the previous group
            pgi, pgj = groups.pop()
            groups.append((pgi + gi, pgj + gj))
        else:
            groups.append((gi, gj))
    return groups


# ----------------------------------------------------------------------------
# aten op handlers
# ----------------------------------------------------------------------------

Handler = Callable[["Importer", torch.fx.Node, tuple, dict], Any]
HANDLERS: Dict[Any, Handler] = {}


def handles(*ops):
    def deco(fn):
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return deco


@handles(torch.ops.shardx.constrain.default)
def _constrain(imp: "Importer", node, args, kwargs):
    """``shardx.constrain(x, placements)``: a ``shardx.annotate`` on the
    trace's mesh (nothing without one)."""
    x, spelling = args
    if imp.mesh is None:
        return x
    placements = check_placements(imp.mesh, parse_placements(spelling), x.rank,
                                  f"shardx.constrain (from {_user_line(node)})")
    layout = layout_text(imp.mesh, placements)
    return Value(imp.em.emit(f"shardx.annotate {x.name} : {x.type} to {layout}"), x.shape, x.dtype)


def _meta(node) -> torch.Tensor:
    val = node.meta.get("val")
    if val is None:
        raise UnsupportedOpError(f"{node.target}: no shape information")
    return val


def _out(node):
    v = _meta(node)
    return tuple(int(s) for s in v.shape), v.dtype


def _compute_dtype(args) -> torch.dtype:
    vals = [a for a in args if isinstance(a, (Value, int, float, bool))]
    probes = []
    for a in vals:
        if isinstance(a, Value):
            probes.append(torch.empty([1] * a.rank if a.rank else [], dtype=a.dtype))
        else:
            probes.append(a)
    if len(probes) == 1:
        return probes[0].dtype if isinstance(probes[0], torch.Tensor) else torch.tensor(probes[0]).dtype
    dt = torch.result_type(probes[0], probes[1])
    for p in probes[2:]:
        dt = torch.promote_types(dt, torch.result_type(torch.empty([], dtype=dt), p))
    return dt


def _ew(imp: "Importer", node, operands, fn, compute=None):
    """Elementwise op: operands are cast to ``compute`` (default: the result
    dtype), ``fn(body, vals, dtype)`` computes, the result is cast to the node's
    dtype."""
    shape, out_dtype = _out(node)
    compute = compute or out_dtype

    def body(b: Body, vals):
        cvals = []
        for o, v in zip(operands, vals):
            if isinstance(o, Value):
                cvals.append(b.cast(v, o.dtype, compute))
            else:
                cvals.append(b.const(o, compute))
        r = fn(b, cvals, compute)
        res_dtype = torch.bool if r[1] == "bool" else compute
        return b.cast(r[0], res_dtype, out_dtype)

    return imp.em.elementwise(shape, out_dtype, list(operands), body)


def _arith(op):
    def h(imp, node, args, kwargs):
        a, b = args[0], args[1]
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        if op == "div" and kwargs.get("rounding_mode") is not None:
            raise UnsupportedOpError(f"div with rounding_mode={kwargs['rounding_mode']}")

        def fn(body, v, t):
            y = v[1]
            if alpha != 1:
                y = body.binary("mul", y, body.const(alpha, t), t)
            return body.binary(op, v[0], y, t), None
        return _ew(imp, node, [a, b], fn)
    return h


for _op, _name in [(aten.add.Tensor, "add"), (aten.add.Scalar, "add"), (aten.sub.Tensor, "sub"),
                   (aten.sub.Scalar, "sub"), (aten.mul.Tensor, "mul"), (aten.mul.Scalar, "mul"),
                   (aten.div.Tensor, "div"), (aten.div.Scalar, "div"), (aten.maximum.default, "max"),
                   (aten.minimum.default, "min")]:
    HANDLERS[_op] = _arith(_name)


@handles(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(imp, node, args, kwargs):
    alpha = kwargs.get("alpha", 1)
    return _ew(imp, node, [args[0], args[1]],
               lambda b, v, t: (b.binary("sub", v[1], b.binary("mul", v[0], b.const(alpha, t), t), t), None))


def _unary(op):
    def h(imp, node, args, kwargs):
        return _ew(imp, node, [args[0]], lambda b, v, t: (b.unary(op, v[0], t), None))
    return h


for _op, _name in [(aten.neg.default, "neg"), (aten.exp.default, "exp"), (aten.log.default, "log"),
                   (aten.sqrt.default, "sqrt"), (aten.rsqrt.default, "rsqrt"),
                   (aten.reciprocal.default, "reciprocal"), (aten.abs.default, "abs"),
                   (aten.tanh.default, "tanh"), (aten.erf.default, "erf"),
                   (aten.sigmoid.default, "sigmoid"), (aten.relu.default, "relu"),
                   (aten.sin.default, "sin"), (aten.cos.default, "cos"),
                   (aten.expm1.default, "expm1"), (aten.log1p.default, "log1p"),
                   (aten.sign.default, "sign"), (aten.log2.default, "log2")]:
    HANDLERS[_op] = _unary(_name)


@handles(aten.logical_not.default, aten.bitwise_not.default)
def _not(imp, node, args, kwargs):
    x = args[0]
    if x.dtype != torch.bool and aten.bitwise_not.default == node.target:
        raise UnsupportedOpError("bitwise_not on integers")
    return _ew(imp, node, [x], lambda b, v, t: (b.unary("not", v[0], t), "bool"), compute=torch.bool)


def _logical(op):
    def h(imp, node, args, kwargs):
        shape, dtype = _out(node)
        if dtype != torch.bool and node.target in (aten.logical_and.default, aten.logical_or.default):
            raise UnsupportedOpError(str(node.target))
        t = torch.bool if dtype == torch.bool else dtype
        return _ew(imp, node, [args[0], args[1]], lambda b, v, tt: (b.binary(op, v[0], v[1], tt), None), compute=t)
    return h


HANDLERS[aten.bitwise_and.Tensor] = _logical("and")
HANDLERS[aten.bitwise_or.Tensor] = _logical("or")
HANDLERS[aten.logical_and.default] = _logical("and")
HANDLERS[aten.logical_or.default] = _logical("or")


def _cmp(pred):
    def h(imp, node, args, kwargs):
        a, b = args[0], args[1]
        t = _compute_dtype([a, b])
        return _ew(imp, node, [a, b], lambda bd, v, tt: (bd.compare(pred, v[0], v[1], tt), "bool"), compute=t)
    return h


for _pred in ["eq", "ne", "lt", "le", "gt", "ge"]:
    for _ov in ["Tensor", "Scalar"]:
        HANDLERS[getattr(getattr(aten, _pred), _ov)] = _cmp(_pred)


@handles(aten.where.self)
def _where(imp, node, args, kwargs):
    c, a, b = args
    t = _meta(node).dtype

    def fn(bd, v, tt):
        return bd.select(v[0], v[1], v[2], tt), None

    shape, out_dtype = _out(node)

    def body(bd: Body, vals):
        cond = vals[0] if isinstance(c, Value) else bd.const(c, torch.bool)
        if isinstance(c, Value) and c.dtype != torch.bool:
            cond = bd.cast(cond, c.dtype, torch.bool)
        x = bd.cast(vals[1], a.dtype, t) if isinstance(a, Value) else bd.const(a, t)
        y = bd.cast(vals[2], b.dtype, t) if isinstance(b, Value) else bd.const(b, t)
        return bd.select(cond, x, y, t)

    return imp.em.elementwise(shape, out_dtype, [c, a, b], body)


@handles(aten.pow.Tensor_Scalar)
def _pow_ts(imp, node, args, kwargs):
    x, e = args

    def fn(b, v, t):
        if e == 2:
            return b.binary("mul", v[0], v[0], t), None
        if e == 1:
            return v[0], None
        if e == 0.5 and is_float(t):
            return b.unary("sqrt", v[0], t), None
        if not is_float(t):
            return b.binary("pow", v[0], b.const(e, t), t), None
        return b.binary("pow", v[0], b.const(e, t), t), None
    return _ew(imp, node, [x], fn)


@handles(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(imp, node, args, kwargs):
    return _ew(imp, node, [args[0], args[1]], lambda b, v, t: (b.binary("pow", v[0], v[1], t), None))


@handles(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default)
def _clamp(imp, node, args, kwargs):
    x = args[0]
    if node.target == aten.clamp_min.default:
        lo, hi = args[1], None
    elif node.target == aten.clamp_max.default:
        lo, hi = None, args[1]
    else:
        lo = args[1] if len(args) > 1 else kwargs.get("min")
        hi = args[2] if len(args) > 2 else kwargs.get("max")

    def fn(b, v, t):
        r = v[0]
        if lo is not None:
            r = b.binary("max", r, b.const(lo, t), t)
        if hi is not None:
            r = b.binary("min", r, b.const(hi, t), t)
        return r, None
    return _ew(imp, node, [x], fn)


@handles(aten._to_copy.default, aten.clone.default, aten.alias.default, aten.detach.default,
         aten.lift_fresh_copy.default, aten.alias_copy.default, aten.detach_copy.default,
         aten.convert_element_type.default if hasattr(aten, "convert_element_type") else aten.clone.default)
def _copy_like(imp, node, args, kwargs):
    _, dtype = _out(node)
    return imp.em.cast(args[0], dtype)


@handles(aten.copy.default, aten.copy_.default)
def _copy(imp, node, args, kwargs):
    dst, src = args[0], args[1]
    out = imp.em.cast(imp.em.broadcast_to(src, dst.shape), dst.dtype)
    return out


# Foreach ops: list in, list out.

def _foreach(scalar_op):
    def h(imp, node, args, kwargs):
        outs = _meta(node)
        lists = [a for a in args if isinstance(a, list)]
        n = len(lists[0])
        res = []
        for i in range(n):
            sub_args = [a[i] if isinstance(a, list) else a for a in args]
            fake = _FakeNode(node, outs[i])
            res.append(HANDLERS[scalar_op](imp, fake, tuple(sub_args), kwargs))
        return res
    return h


class _FakeNode:
    def __init__(self, node, val):
        self.target = node.target
        self.meta = {"val": val, "stack_trace": node.meta.get("stack_trace")}


@handles(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(imp, node, args, kwargs):
    a, b, w = args
    return _ew(imp, node, [a, b, w], lambda bd, v, t: (
        bd.binary("add", v[0], bd.binary("mul", v[2], bd.binary("sub", v[1], v[0], t), t), t), None))


def _addc(op):
    """addcmul / addcdiv: a + value * (x op y)."""
    def h(imp, node, args, kwargs):
        a, x, y = args[:3]
        val = kwargs.get("value", args[3] if len(args) > 3 else 1)
        return _ew(imp, node, [a, x, y, val], lambda bd, v, t: (
            bd.binary("add", v[0], bd.binary("mul", v[3], bd.binary(op, v[1], v[2], t), t), t), None))
    return h


HANDLERS[aten.addcmul.default] = _addc("mul")
HANDLERS[aten.addcdiv.default] = _addc("div")


_FOREACH = {
    "_foreach_add": {"List": aten.add.Tensor, "Scalar": aten.add.Tensor, "Tensor": aten.add.Tensor},
    "_foreach_sub": {"List": aten.sub.Tensor, "Scalar": aten.sub.Tensor},
    "_foreach_mul": {"List": aten.mul.Tensor, "Scalar": aten.mul.Tensor, "Tensor": aten.mul.Tensor},
    "_foreach_div": {"List": aten.div.Tensor, "Scalar": aten.div.Tensor, "Tensor": aten.div.Tensor},
    "_foreach_addcmul": {"Scalar": aten.addcmul.default},
    "_foreach_addcdiv": {"Scalar": aten.addcdiv.default},
    "_foreach_lerp": {"Scalar": aten.lerp.Scalar, "List": aten.lerp.Tensor},
    "_foreach_neg": {"default": aten.neg.default},
    "_foreach_sqrt": {"default": aten.sqrt.default},
    "_foreach_reciprocal": {"default": aten.reciprocal.default},
    "_foreach_exp": {"default": aten.exp.default},
    "_foreach_abs": {"default": aten.abs.default},
    "_foreach_maximum": {"List": aten.maximum.default},
    "_foreach_pow": {"ScalarAndTensor": aten.pow.Scalar, "Scalar": aten.pow.Tensor_Scalar,
                     "List": aten.pow.Tensor_Tensor},
    "_foreach_copy": {"default": aten.copy.default},
}
for _name, _ovs in _FOREACH.items():
    for _ov, _scalar in _ovs.items():
        _packet = getattr(aten, _name, None)
        if _packet is not None and hasattr(_packet, _ov):
            HANDLERS[getattr(_packet, _ov)] = _foreach(_scalar)


# Reductions.

@handles(aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default,
         aten.amax.default, aten.amin.default, aten.any.dim, aten.any.default, aten.any.dims)
def _reduction(imp, node, args, kwargs):
    x = args[0]
    shape, dtype = _out(node)
    target = node.target
    if target in (aten.sum.default, aten.mean.default, aten.any.default):
        dims, keepdim = list(range(x.rank)), False
    else:
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        if dims is None or dims == []:
            dims = list(range(x.rank))
        if isinstance(dims, int):
            dims = [dims]
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if target in (aten.amax.default, aten.amin.default):
        combine = "max" if target == aten.amax.default else "min"
        init = -math.inf if combine == "max" else math.inf
        if not is_float(dtype):
            info = torch.iinfo(dtype)
            init = info.min if combine == "max" else info.max
        return imp.em.reduce(x, dims, keepdim, combine, init, dtype)
    if target in (aten.any.dim, aten.any.default, aten.any.dims):
        xb = imp.em.cast(x, torch.bool)
        return imp.em.reduce(xb, dims, keepdim, "or", False, torch.bool)
    s = imp.em.reduce(x, dims, keepdim, "add", 0, dtype)
    if target in (aten.mean.dim, aten.mean.default):
        count = _prod(x.shape[d % x.rank] for d in dims) if x.rank else 1
        s = imp.em.elementwise(s.shape, dtype, [s],
                               lambda b, v: b.binary("div", v[0], b.const(count, dtype), dtype))
    return s


@handles(aten.var_mean.correction, aten.var.correction)
def _var_mean(imp, node, args, kwargs):
    x = args[0]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    if dims is None:
        dims = list(range(x.rank))
    correction = kwargs.get("correction", 1)
    if correction is None:
        correction = 1
    keepdim = kwargs.get("keepdim", False)
    dtype = x.dtype
    count = _prod(x.shape[d % x.rank] for d in dims)
    mean_k = imp.em.reduce(x, dims, True, "add", 0, dtype)
    mean_k = imp.em.elementwise(mean_k.shape, dtype, [mean_k],
                                lambda b, v: b.binary("div", v[0], b.const(count, dtype), dtype))
    dev = imp.em.elementwise(x.shape, dtype, [x, mean_k], lambda b, v: (
        lambda d: b.binary("mul", d, d, dtype))(b.binary("sub", v[0], v[1], dtype)))
    var = imp.em.reduce(dev, dims, keepdim, "add", 0, dtype)
    denom = max(count - correction, 0)
    var = imp.em.elementwise(var.shape, dtype, [var],
                             lambda b, v: b.binary("div", v[0], b.const(denom, dtype), dtype))
    if node.target == aten.var.correction:
        return var
    mean = mean_k if keepdim else imp.em.reshape(mean_k, var.shape)
    return [var, mean]


# Matmuls.

@handles(aten.mm.default, aten.bmm.default)
def _mm(imp, node, args, kwargs):
    _, dtype = _out(node)
    return imp.em.matmul(args[0], args[1], dtype)


@handles(aten.addmm.default)
def _addmm(imp, node, args, kwargs):
    bias, a, b = args[:3]
    beta = kwargs.get("beta", 1)
    alpha = kwargs.get("alpha", 1)
    shape, dtype = _out(node)
    m = imp.em.matmul(a, b, dtype)

    def fn(bd, v, t):
        x = v[0] if alpha == 1 else bd.binary("mul", v[0], bd.const(alpha, t), t)
        y = v[1] if beta == 1 else bd.binary("mul", v[1], bd.const(beta, t), t)
        return bd.binary("add", x, y, t), None
    return _ew(imp, node, [m, bias], fn)


# Shapes.

@handles(aten.view.default, aten._unsafe_view.default, aten.view_copy.default, aten.reshape.default,
         aten.squeeze.dims, aten.squeeze.dim, aten.squeeze.default, aten.unsqueeze.default,
         aten.squeeze_copy.dims, aten.unsqueeze_copy.default, aten.flatten.using_ints)
def _view(imp, node, args, kwargs):
    shape, _ = _out(node)
    return imp.em.reshape(args[0], shape)


@handles(aten.permute.default, aten.permute_copy.default)
def _permute(imp, node, args, kwargs):
    return imp.em.transpose(args[0], args[1])


@handles(aten.t.default, aten.transpose.int, aten.t_copy.default, aten.transpose_copy.int)
def _t(imp, node, args, kwargs):
    x = args[0]
    if x.rank < 2:
        return x
    d0, d1 = (0, 1) if node.target in (aten.t.default, aten.t_copy.default) else (args[1] % x.rank, args[2] % x.rank)
    perm = list(range(x.rank))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return imp.em.transpose(x, perm)


@handles(aten.expand.default, aten.expand_copy.default)
def _expand(imp, node, args, kwargs):
    shape, _ = _out(node)
    return imp.em.broadcast_to(args[0], shape)


@handles(aten.slice.Tensor, aten.slice_copy.Tensor)
def _slice(imp, node, args, kwargs):
    x = args[0]
    dim = (args[1] if len(args) > 1 else 0) % x.rank
    start = args[2] if len(args) > 2 else None
    end = args[3] if len(args) > 3 else None
    step = args[4] if len(args) > 4 else 1
    n = x.shape[dim]
    start, end, step = slice(start, end, step).indices(n)
    size = len(range(start, end, step))
    offsets = [0] * x.rank
    sizes = list(x.shape)
    strides = [1] * x.rank
    offsets[dim], sizes[dim], strides[dim] = start, size, step
    return imp.em.extract_slice(x, offsets, sizes, strides)


@handles(aten.select.int, aten.select_copy.int)
def _select(imp, node, args, kwargs):
    x, dim, idx = args
    dim %= x.rank
    idx %= x.shape[dim]
    offsets = [0] * x.rank
    sizes = list(x.shape)
    offsets[dim], sizes[dim] = idx, 1
    s = imp.em.extract_slice(x, offsets, sizes, [1] * x.rank)
    shape, _ = _out(node)
    return imp.em.reshape(s, shape)


@handles(aten.split_with_sizes.default, aten.split.Tensor, aten.split_with_sizes_copy.default,
         aten.split_copy.Tensor)
def _split(imp, node, args, kwargs):
    x = args[0]
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % x.rank
    res = []
    off = 0
    for val in _meta(node):
        size = int(val.shape[dim])
        offsets = [0] * x.rank
        sizes = list(x.shape)
        offsets[dim], sizes[dim] = off, size
        res.append(imp.em.extract_slice(x, offsets, sizes, [1] * x.rank))
        off += size
    return res


@handles(aten.cat.default)
def _cat(imp, node, args, kwargs):
    shape, dtype = _out(node)
    dim = (args[1] if len(args) > 1 else kwargs.get("dim", 0)) % len(shape)
    # torch.cat skips empty tensors, including legacy 1-d ones of shape (0,).
    xs = [imp.em.cast(x, dtype) for x in args[0] if x.rank == len(shape) and x.shape[dim] > 0]
    if len(xs) == 1:
        return xs[0]
    t = tensor_type(shape, dtype)
    name = imp.em.emit(f"tensor.concat dim({dim}) {', '.join(x.name for x in xs)} : ({', '.join(x.type for x in xs)}) -> {t}")
    return Value(name, shape, dtype)


# Factories.

@handles(aten.full.default, aten.full_like.default, aten.zeros.default, aten.ones.default,
         aten.zeros_like.default, aten.ones_like.default, aten.scalar_tensor.default,
         aten.new_zeros.default, aten.new_ones.default, aten.new_full.default, aten.empty_like.default,
         aten.empty.memory_format)
def _full(imp, node, args, kwargs):
    shape, dtype = _out(node)
    t = node.target
    if t in (aten.full.default,):
        value = args[1]
    elif t in (aten.full_like.default,):
        value = args[1]
    elif t == aten.new_full.default:
        value = args[2]
    elif t == aten.scalar_tensor.default:
        value = args[0]
    elif t in (aten.ones.default, aten.ones_like.default, aten.new_ones.default):
        value = 1
    else:
        value = 0
    return imp.em.full(shape, value, dtype)


@handles(aten.arange.start_step, aten.arange.default, aten.arange.start)
def _arange(imp, node, args, kwargs):
    shape, dtype = _out(node)
    if node.target == aten.arange.default:
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else kwargs.get("step", 1)

    def body(b: Body, args_, out):
        i = b.v("linalg.index 0 : index")
        i64 = b.v(f"arith.index_cast {i} : index to i64")
        x = b.cast(i64, torch.int64, dtype)
        return b.binary("add", b.const(start, dtype), b.binary("mul", x, b.const(step, dtype), dtype), dtype)
    return imp.em.generic(shape, dtype, [], ["parallel"], ["d0"], body)


# Indexing.

def _extract(b: Body, src: Value, coords: List[str]) -> str:
    return b.v(f"tensor.extract {src.name}[{', '.join(coords)}] : {src.type}")


def _as_index(b: Body, v: str, dtype: torch.dtype) -> str:
    return b.v(f"arith.index_cast {v} : {elem_type(dtype)} to index")


@handles(aten.embedding.default)
def _embedding(imp, node, args, kwargs):
    w, idx = args[0], args[1]
    shape, dtype = _out(node)
    r = len(shape)

    def body(b: Body, a, out):
        row = _as_index(b, a[0], idx.dtype)
        col = b.v(f"linalg.index {r - 1} : index")
        return _extract(b, w, [row, col])
    return imp.em.generic(shape, dtype, [(idx, [f"d{i}" for i in range(r - 1)])], ["parallel"] * r,
                          [f"d{i}" for i in range(r)], body)


@handles(aten.gather.default)
def _gather(imp, node, args, kwargs):
    x, dim, idx = args[0], args[1] % args[0].rank, args[2]
    shape, dtype = _out(node)
    r = len(shape)

    def body(b: Body, a, out):
        coords = [b.v(f"linalg.index {i} : index") if i != dim else _as_index(b, a[0], idx.dtype)
                  for i in range(r)]
        return _extract(b, x, coords)
    return imp.em.generic(shape, dtype, [(idx, [f"d{i}" for i in range(r)])], ["parallel"] * r,
                          [f"d{i}" for i in range(r)], body)


@handles(aten.scatter.value, aten.scatter.src)
def _scatter(imp, node, args, kwargs):
    x, dim, idx, val = args[0], args[1] % args[0].rank, args[2], args[3]
    if kwargs.get("reduce") is not None:
        raise UnsupportedOpError("scatter with reduce")
    r = x.rank
    if idx.shape[dim] != 1 or any(idx.shape[i] != x.shape[i] for i in range(r) if i != dim):
        raise UnsupportedOpError("scatter whose index is not one element per row along dim "
                                 f"(index {list(idx.shape)}, self {list(x.shape)}, dim {dim})")
    idx_c = imp.em.reshape(idx, [s for i, s in enumerate(idx.shape) if i != dim])
    other = [f"d{i}" for i in range(r) if i != dim]
    inputs = [(x, [f"d{i}" for i in range(r)]), (idx_c, other)]
    if isinstance(val, Value):
        val_c = imp.em.reshape(val, [s for i, s in enumerate(val.shape) if i != dim]) \
            if val.shape[dim] == 1 else None
        if val_c is None:
            raise UnsupportedOpError("scatter.src with more than one source element per row")
        inputs.append((val_c, other))

    def body(b: Body, a, out):
        pos = b.v(f"linalg.index {dim} : index")
        target = _as_index(b, a[1], idx.dtype)
        hit = b.v(f"arith.cmpi eq, {pos}, {target} : index")
        v = b.cast(a[2], val.dtype, x.dtype) if isinstance(val, Value) else b.const(val, x.dtype)
        return b.select(hit, v, a[0], x.dtype)
    return imp.em.generic(x.shape, x.dtype, inputs, ["parallel"] * r, [f"d{i}" for i in range(r)], body)


@handles(aten.index_put.default, aten._unsafe_index_put.default)
def _index_put(imp, node, args, kwargs):
    x, indices, values = args[0], args[1], args[2]
    accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
    if not accumulate or len(indices) != 1 or indices[0] is None:
        raise UnsupportedOpError("index_put other than accumulating into dim 0 with one index tensor")
    idx = indices[0]
    k = idx.rank
    rest = x.rank - 1
    values = imp.em.broadcast_to(values, tuple(idx.shape) + tuple(x.shape[1:]))
    # Iteration space: (v, rest..., i...) with the index dims reduced: the
    # masked sum of values whose index equals v.
    nd = 1 + rest + k
    its = ["parallel"] * (1 + rest) + ["reduction"] * k
    out_exprs = [f"d{i}" for i in range(1 + rest)]
    idx_exprs = [f"d{1 + rest + i}" for i in range(k)]
    val_exprs = idx_exprs + [f"d{1 + i}" for i in range(rest)]

    def body(b: Body, a, out):
        v = b.v("linalg.index 0 : index")
        target = _as_index(b, a[0], idx.dtype)
        hit = b.v(f"arith.cmpi eq, {v}, {target} : index")
        zero = b.const(0, x.dtype)
        term = b.select(hit, b.cast(a[1], values.dtype, x.dtype), zero, x.dtype)
        return b.binary("add", out, term, x.dtype)
    return imp.em.generic(x.shape, x.dtype, [(idx, idx_exprs), (values, val_exprs)], its, out_exprs,
                          body, init=x)


# The model zoo's ops (convolutions, padding, scatters, integer division, ...).
from . import importer_nn  # noqa: E402,F401  (registers its handlers)


# ----------------------------------------------------------------------------
# Tracing
# ----------------------------------------------------------------------------


def decompositions():
    """The decomposition table: PyTorch's core aten set plus the composite ops
    that the importer spells out (GELU, LayerNorm, softmaxes, SiLU and their
    backward ops)."""
    table = dict(core_aten_decompositions())
    table.update(get_decompositions([
        aten.gelu, aten.gelu_backward, aten.native_layer_norm, aten.native_layer_norm_backward,
        aten._log_softmax, aten._softmax, aten._log_softmax_backward_data,
        aten._softmax_backward_data, aten.silu, aten.silu_backward, aten.embedding_dense_backward,
        aten.mse_loss, aten.mse_loss_backward, aten.nll_loss_forward, aten.nll_loss_backward,
        aten.tanh_backward, aten.sigmoid_backward, aten.threshold_backward,
        # The model zoo (shardx/zoo.py): batch norm, max pooling, unbind.
        aten.native_batch_norm, aten.native_batch_norm_backward, aten.max_pool2d_with_indices,
        aten.max_pool2d_with_indices_backward, aten.unbind_copy, aten.unbind,
    ]))
    return table


def _trace_graph(fn: Callable, flat_args: List[Any], treedef) -> torch.fx.GraphModule:
    """Traces ``fn`` to a functional aten graph over the flattened inputs."""
    from torch.func import functionalize
    from torch.fx import traceback as fx_traceback
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def flat_fn(*xs):
        return pytree.tree_leaves(fn(*pytree.tree_unflatten(list(xs), treedef)))

    # Source lines: FX keeps frames of forward() and of registered anchors.
    register = getattr(torch.fx.proxy, "_register_stack_trace_anchor", None)
    if register is not None:
        for anchor in (fn, getattr(fn, "loss_fn", None)):
            if anchor is not None and hasattr(anchor, "__code__"):
                register(anchor)
    # Pass 1 records autograd (backward is traced into the graph); the math
    # attention backend keeps attention in differentiable aten ops; optimizers
    # take their capturable (tensor step) path as under torch.compile.
    with contextlib.ExitStack() as stack:
        stack.enter_context(sdpa_kernel(SDPBackend.MATH))
        stack.enter_context(unittest.mock.patch("torch.compiler.is_compiling", return_value=True))
        # Recurrent layers as their aten cells, not oneDNN kernels.
        stack.enter_context(torch.backends.mkldnn.flags(enabled=False))
        with fx_traceback.preserve_node_meta():
            g0 = make_fx(flat_fn, record_stack_traces=True)(*flat_args)
        _backward_lines_from_forward(g0)
        # Pass 2 removes mutations and views and decomposes, keeping the
        # source locations of pass 1.
        detached = [a.detach() if isinstance(a, torch.Tensor) else a for a in flat_args]

        def run(*xs):
            return torch.fx.Interpreter(g0).run(*xs)
        with fx_traceback.preserve_node_meta():
            g = make_fx(functionalize(run, remove="mutations_and_views"),
                        decomposition_table=decompositions(), record_stack_traces=True)(*detached)
    return g


def _backward_lines_from_forward(g: torch.fx.GraphModule) -> None:
    """Gives each backward op without a stack trace the one of the forward op
    it differentiates (the same ``seq_nr``; ``train.link_backward_to_forward``
    sets it), as AOTAutograd's ``copy_fwd_metadata_to_bw_nodes`` does."""
    forward: Dict[int, str] = {}
    for node in g.graph.nodes:
        seq, trace = node.meta.get("seq_nr"), node.meta.get("stack_trace")
        if _phase(node) == "forward" and seq is not None and trace:
            forward.setdefault(seq, trace)
    for node in g.graph.nodes:
        seq = node.meta.get("seq_nr")
        if _phase(node) == "backward" and not node.meta.get("stack_trace") and seq in forward:
            node.meta["stack_trace"] = forward[seq]


def _phase(node) -> Optional[str]:
    """The train-step phase the node was traced in (``train.phase``)."""
    return (node.meta.get("custom") or {}).get("shardx.phase")


def _source_position(node) -> Optional[Tuple[str, int]]:
    """(file, line) of the node's user frame, the file as it is imported:
    relative to the longest ``sys.path`` entry it lies in (``torch/nn/...``,
    ``shardx/models.py``, a script's own name), so that the same program
    traces to the same text from any working directory."""
    m = re.match(r'\s*File "([^"]+)", line (\d+)', _user_line(node))
    if not m:
        return None
    path = os.path.abspath(m.group(1))
    roots = [os.path.abspath(p or ".") for p in sys.path]
    inside = [r for r in roots if path.startswith(r.rstrip(os.sep) + os.sep)]
    if inside:
        path = os.path.relpath(path, max(inside, key=len))
    return path, int(m.group(2))


def _user_line(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    lines = [l.strip() for l in trace.strip().splitlines() if l.strip().startswith("File ")]
    skip = ("/torch/", "/shardx/importer.py", "/shardx/train.py", "<eval_with_key>", "/unittest/", "/contextlib.py")
    for line in reversed(lines):
        if not any(s in line for s in skip):
            return line
    return lines[-1] if lines else "unknown location"


@dataclass
class TraceSpec:
    """What the command line traces: the arguments of ``trace``."""

    fn: Callable
    example_args: Sequence[Any]
    mesh: Optional[Mesh] = None
    in_placements: Optional[Sequence[Optional[Sequence[Placement]]]] = None
    out_placements: Optional[Sequence[Optional[Sequence[Placement]]]] = None
    name: Optional[str] = None
    arg_attrs: Optional[Sequence[Optional[Dict[str, str]]]] = None


class Importer:
    def __init__(self, graph: torch.fx.GraphModule, mesh: Optional[Mesh] = None):
        self.gm = graph
        self.mesh = mesh
        self.em = Emitter()
        self.env: Dict[torch.fx.Node, Any] = {}

    def run(self, inputs: List[Value]) -> List[Any]:
        placeholders = [n for n in self.gm.graph.nodes if n.op == "placeholder"]
        for node, val in zip(placeholders, inputs):
            self.env[node] = val
        outputs = None
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                outputs = pytree.tree_leaves(self._arg(node.args[0]))
                break
            if node.op == "get_attr":
                self.env[node] = self._constant(getattr(self.gm, node.target))
                continue
            if node.op != "call_function":
                raise UnsupportedOpError(f"FX node kind {node.op} ({node.target})")
            self.em.set_location(_source_position(node), _phase(node))
            self.env[node] = self._call(node)
        self.em.set_location(None, None)
        return outputs

    def _constant(self, t: torch.Tensor) -> Value:
        """A tensor constant of the traced program (closed-over tensors)."""
        t = t.detach().contiguous()
        shape = tuple(int(s) for s in t.shape)
        ty = tensor_type(shape, t.dtype)
        if t.dtype == torch.bool:
            vals = ", ".join("true" if b else "false" for b in t.flatten().tolist())
            lit = f"dense<[{vals}]>" if t.dim() else f"dense<{vals}>"
            if t.dim() > 1 or t.numel() == 0:
                return self.em.cast(self._constant(t.to(torch.int8)), torch.bool)
        else:
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            lit = f'dense<"0x{raw.hex().upper()}">'
        name = self.em.emit(f"arith.constant {lit} : {ty}", "cst")
        return Value(name, shape, t.dtype)

    def _arg(self, a):
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self._arg(x) for x in a) if isinstance(a, tuple) else [self._arg(x) for x in a]
        if isinstance(a, dict):
            return {k: self._arg(v) for k, v in a.items()}
        return a

    def _call(self, node):
        if node.target is operator.getitem:
            seq, i = node.args
            return self.env[seq][i]
        handler = HANDLERS.get(node.target)
        if handler is None:
            raise UnsupportedOpError(
                f"unsupported aten op {node.target} (from {_user_line(node)})")
        args = self._arg(node.args)
        kwargs = self._arg(dict(node.kwargs))
        try:
            return handler(self, node, args, kwargs)
        except UnsupportedOpError as e:
            raise UnsupportedOpError(f"unsupported form of {node.target}: {e} (from {_user_line(node)})") from None


def trace(fn: Callable, example_args: Sequence[Any], mesh: Optional[Mesh] = None,
          in_placements=None, out_placements=None, name: Optional[str] = None,
          arg_attrs=None) -> str:
    """Traces ``fn(*example_args)`` and returns the MLIR module text.

    ``in_placements`` / ``out_placements`` give one entry per flattened tensor
    input / output (pytree order): ``None`` for no layout, else one placement
    per mesh axis. ``arg_attrs`` gives one entry per flattened input: ``None``
    or a dict of further argument attributes, dialect-prefixed names (not
    ``shardx.``) to string values, e.g. ``{"torch.state": "exp_avg_sq"}``;
    by default ``fn.arg_attrs(example_args)`` where ``fn`` has that method
    (``TrainStep`` names its optimizer state). The result has one
    ``func.func`` named ``name`` (default: the function's name) plus the
    ``shardx.mesh`` when a mesh is given.
    """
    flat_args, treedef = pytree.tree_flatten(tuple(example_args))
    for i, a in enumerate(flat_args):
        if not isinstance(a, torch.Tensor):
            raise ImportError_(f"input {i} is a {type(a).__name__}, not a tensor; "
                               "close over non-tensor values instead of passing them")
    if (in_placements or out_placements) and mesh is None:
        raise PlacementError("placements given without a mesh")
    in_layouts = _layouts(mesh, in_placements, [tuple(a.shape) for a in flat_args], "input")
    if arg_attrs is None and callable(getattr(fn, "arg_attrs", None)):
        arg_attrs = fn.arg_attrs(example_args)
    extra_attrs = _arg_attrs(arg_attrs, len(flat_args))
    gm = _trace_graph(fn, flat_args, treedef)
    imp = Importer(gm, mesh)
    inputs = []
    for i, a in enumerate(flat_args):
        inputs.append(Value(f"%arg{i}", tuple(int(s) for s in a.shape), a.dtype))
    outputs = imp.run(inputs)
    _remove_dead_code(imp.em.lines, [o.name for o in outputs if isinstance(o, Value)])
    for i, o in enumerate(outputs):
        if not isinstance(o, Value):
            raise ImportError_(f"output {i} is not a tensor ({o!r})")
    out_layouts = _layouts(mesh, out_placements, [o.shape for o in outputs], "output")
    fname = name or getattr(fn, "__name__", "main")
    if not fname.isidentifier() or fname == "<lambda>":
        fname = "main"
    lines = []
    if mesh is not None:
        lines.append(mesh.op_text())
        lines.append("")
    args_text = []
    for i, v in enumerate(inputs):
        attrs = ([f"shardx.layout = {in_layouts[i]}"] if in_layouts[i] else []) + extra_attrs[i]
        attr = f" {{{', '.join(attrs)}}}" if attrs else ""
        args_text.append(f"    {v.name}: {v.type}{attr}")
    res_text = []
    for i, o in enumerate(outputs):
        attr = f" {{shardx.layout = {out_layouts[i]}}}" if out_layouts[i] else ""
        res_text.append(f"{o.type}{attr}")
    lines.append(f"func.func @{fname}(\n" + ",\n".join(args_text) + f")\n    -> ({', '.join(res_text)}) {{")
    for l in imp.em.lines:
        lines.append("\n".join("  " + x for x in l.split("\n")))
    lines.append(f"  return {', '.join(o.name for o in outputs)} : {', '.join(o.type for o in outputs)}")
    lines.append("}")
    lines += imp.em.location_aliases()
    return "\n".join(lines) + "\n"


def _remove_dead_code(lines: List[str], live: List[str]) -> None:
    """Drops emitted ops (all pure) whose result nothing uses."""
    import re
    defined = re.compile(r"^(%[A-Za-z_][\w]*) = ")
    while True:
        uses: Dict[str, int] = {}
        for line in lines:
            m = defined.match(line)
            body = line[m.end():] if m else line
            for name in re.findall(r"%[A-Za-z_][\w]*", body):
                uses[name] = uses.get(name, 0) + 1
        for name in live:
            uses[name] = uses.get(name, 0) + 1
        kept = [l for l in lines if not (defined.match(l) and defined.match(l).group(1) not in uses)]
        if len(kept) == len(lines):
            return
        lines[:] = kept


def _arg_attrs(arg_attrs, count: int) -> List[List[str]]:
    """Per input, the ``name = "value"`` texts of its extra attributes."""
    if arg_attrs is None:
        return [[] for _ in range(count)]
    arg_attrs = list(arg_attrs)
    if len(arg_attrs) != count:
        raise ImportError_(f"{len(arg_attrs)} argument attribute entries for {count} input tensors")
    res = []
    for i, attrs in enumerate(arg_attrs):
        texts = []
        for key, value in sorted((attrs or {}).items()):
            if "." not in key or key.startswith("shardx.") or not all(
                    part.isidentifier() for part in key.split(".")):
                raise ImportError_(f"input {i}: attribute name {key!r} must be dialect-prefixed "
                                   "(like torch.state) and not in the shardx dialect")
            if not isinstance(value, str):
                raise ImportError_(f"input {i}: attribute {key} must be a string, "
                                   f"not a {type(value).__name__}")
            escaped = value.replace("\\", "\\\\").replace('"', '\\"')
            texts.append(f'{key} = "{escaped}"')
        res.append(texts)
    return res


def _layouts(mesh, placements, shapes, what) -> List[Optional[str]]:
    if placements is None:
        return [None] * len(shapes)
    placements = list(placements)
    if len(placements) != len(shapes):
        raise PlacementError(f"{len(placements)} {what} placements for {len(shapes)} {what} tensors")
    res = []
    for i, (p, shape) in enumerate(zip(placements, shapes)):
        if p is None:
            res.append(None)
            continue
        if isinstance(p, Placement):
            raise PlacementError(f"{what} {i}: give a sequence of placements (one per mesh axis), not {p!r}")
        res.append(layout_text(mesh, check_placements(mesh, p, len(shape), f"{what} {i}")))
    return res


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------


def _load(target: str):
    if ":" not in target:
        raise SystemExit(f"error: expected script.py:function, got {target!r}")
    path, func = target.rsplit(":", 1)
    spec = importlib.util.spec_from_file_location("_shardx_user_script", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"error: cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, func):
        raise SystemExit(f"error: {path} has no function {func!r}")
    return getattr(mod, func)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m shardx.importer",
                                description="Trace a PyTorch program into a ShardX MLIR program.")
    p.add_argument("target", help="script.py:function; the function returns a TraceSpec or trace() kwargs")
    p.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    args = p.parse_args(argv)
    spec = _load(args.target)()
    try:
        if isinstance(spec, TraceSpec):
            text = trace(spec.fn, spec.example_args, spec.mesh, spec.in_placements,
                         spec.out_placements, spec.name, spec.arg_attrs)
        elif isinstance(spec, dict):
            text = trace(**spec)
        else:
            raise SystemExit("error: the function must return a shardx.TraceSpec or a dict of trace() arguments")
    except (UnsupportedOpError, PlacementError, ImportError_) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    # Run the package's module, so that TraceSpec is the class users import.
    from shardx.importer import main as _main
    sys.exit(_main())
