"""The MLIR text builder: fresh SSA names, location aliases, and the tensor
ops every handler composes (constants, fills, reshapes, transposes,
broadcasts, casts, ``linalg.generic``, reductions, matmuls, slices)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .body import Body
from .values import (UnsupportedOpError, Value, _amap, _prod, const_literal, elem_type,
                     string_literal, tensor_type)


@dataclass
class Op:
    """One op of the function body: its result (``%v12``, or ``%v12:2`` for
    two results), its text after ``=`` (regions included) and its location
    alias (``#loc3``), if any."""

    result: str
    text: str
    loc: Optional[str] = None

    def render(self, loc: Optional[str] = None) -> str:
        """The op's text, at ``loc`` instead of its own location if given."""
        loc = loc or self.loc
        return f"{self.result} = {self.text}" + (f" loc({loc})" if loc else "")


class Emitter:
    """The ops of one function body, in program order: each op a fresh SSA
    name (``%v12``, ``%e3`` for ``tensor.empty``, ``%c4`` for constants) at
    the current location alias."""

    def __init__(self):
        self.ops: List[Op] = []
        self.counter = 0
        # The location of the ops emitted now (an alias of ``locations``), and
        # each alias's definition: the user's source line, fused with the
        # train-step phase when the trace marks one.
        self.loc: Optional[str] = None
        self.locations: Dict[Tuple, str] = {}

    def set_location(self, position: Optional[Tuple[str, int]], phase: Optional[str],
                     checkpoint: Optional[int] = None) -> None:
        """Emits the following ops at ``position`` (file, line) in ``phase``;
        ``checkpoint``: the number of the ``torch.utils.checkpoint`` call
        that recomputes them in the backward pass (``fused<"forward">
        [fused<"shardx.checkpoint.K">[...]]``)."""
        if position is None and phase is None:
            self.loc = None
            return
        file, line = position or (None, 0)
        key = (phase, file, line) if checkpoint is None else (phase, file, line, checkpoint)
        if key not in self.locations:
            self.locations[key] = f"#loc{len(self.locations)}"
        self.loc = self.locations[key]

    def location_aliases(self) -> List[str]:
        """The definitions of the location aliases, for the end of the module."""
        out = []
        for (phase, file, line, *checkpoint), alias in self.locations.items():
            pos = f"{string_literal(file)}:{line}:0" if file is not None else "unknown"
            if checkpoint:
                pos = f'fused<"shardx.checkpoint.{checkpoint[0]}">[{pos}]'
            out.append(f"{alias} = loc(fused<\"{phase}\">[{pos}])" if phase else f"{alias} = loc({pos})")
        return out

    def fresh(self, prefix: str = "v") -> str:
        self.counter += 1
        return f"%{prefix}{self.counter}"

    def emit(self, text: str, prefix: str = "v") -> str:
        """Appends the op ``text`` at the current location; returns its
        result's name."""
        name = self.fresh(prefix)
        self.ops.append(Op(name, text, self.loc))
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
        if not shape or not x.shape:
            # To or from a 0-d tensor (every other dim a unit dim): one
            # collapse or expand with no groups.
            t = tensor_type(shape, x.dtype)
            if not shape:
                name = self.emit(f"tensor.collapse_shape {x.name} [] : {x.type} into {t}")
            else:
                sizes = ", ".join(map(str, shape))
                name = self.emit(f"tensor.expand_shape {x.name} [] output_shape [{sizes}] : {x.type} into {t}")
            cur = Value(name, shape, x.dtype)
            cur.reshape_of = source
            return cur
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

    def value_index_generic(self, x: Value, in_exprs: List[str], vals: Value, idx: Value,
                            iterators: List[str], out_exprs: List[str], body_fn) -> List[Value]:
        """A two-result ``linalg.generic`` reading ``x`` that keeps a value and
        its (i64) index, from ``vals`` and ``idx`` (the running extreme of
        ``max.dim``, ``cummax``, adaptive max pooling): ``body_fn(body, a,
        value, index)`` returns the new ``(value, index)``."""
        nd = len(iterators)
        b = Body(self)
        a, ov, oi = self.fresh("a"), self.fresh("o"), self.fresh("o")
        nv, ni = body_fn(b, a, ov, oi)
        out_map = _amap(nd, out_exprs)
        maps = ", ".join([_amap(nd, in_exprs), out_map, out_map])
        its = ", ".join(f'"{i}"' for i in iterators)
        et = elem_type(vals.dtype)
        text = [f"linalg.generic {{indexing_maps = [{maps}], iterator_types = [{its}]}} "
                f"ins({x.name} : {x.type}) outs({vals.name}, {idx.name} : {vals.type}, "
                f"{idx.type}) {{",
                f"^bb0({a}: {elem_type(x.dtype)}, {ov}: {et}, {oi}: i64):"]
        text += ["  " + line for line in b.lines]
        text.append(f"  linalg.yield {nv}, {ni} : {et}, i64")
        text.append(f"}} -> ({vals.type}, {idx.type})")
        name = self.fresh("v")
        self.ops.append(Op(f"{name}:2", "\n".join(text)))
        return [Value(f"{name}#0", vals.shape, vals.dtype), Value(f"{name}#1", idx.shape, torch.int64)]

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
        if any(n == 0 for n in sizes):
            # An empty slice (x[..., n:] of a dim of size n): no element is
            # read, and its offset may be the dim's size, which
            # tensor.extract_slice refuses.
            return self.empty(sizes, x.dtype)
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
