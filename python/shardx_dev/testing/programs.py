"""Small random programs on random layouts, for the back-end sweep.

A program is a few ops on f32 tensors of small odd shapes, in the forms the
importer emits and hand-written input uses: elementwise ``arith``/``math``
ops on tensors and ``linalg.generic`` (unary, binary, broadcast),
reductions (``linalg.reduce`` and reduction ``linalg.generic`` with sum, max
and min: over a split dim they leave real per-rank Partial terms, which a
reshard to a random layout then takes apart),
``linalg.matmul``, ``linalg.transpose``, ``tensor.collapse_shape`` /
``expand_shape``, ``tensor.extract_slice`` and ``shardx.annotate`` (a reshard
in the middle). Arguments get random layouts (from the sweep's enumeration,
Partial ones included), results random layouts or none. Several programs on
one mesh share one module (one function; each program its own arguments and
results), like the pairs.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .layouts import (MESH_SHAPES, REDUCE_OPS, Spelling, enumerate_layouts, mesh_text,
                      tensor_text)

DIM_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12)


@dataclass
class Value:
    name: str
    shape: Tuple[int, ...]


@dataclass
class Program:
    """One random program; its lines use names prefixed by ``prefix``."""

    index: int
    mesh: Tuple[int, ...]
    prefix: str
    args: List[Tuple[Value, Optional[Spelling]]] = field(default_factory=list)
    body: List[str] = field(default_factory=list)
    results: List[Tuple[Value, Optional[Spelling]]] = field(default_factory=list)
    ops: List[str] = field(default_factory=list)
    outcome: str = ""
    detail: str = ""
    extra: dict = field(default_factory=dict)

    def key(self) -> str:
        return f"program {self.index} on mesh {mesh_text(self.mesh)}: {', '.join(self.ops)}"


def _tt(shape: Sequence[int]) -> str:
    return tensor_text(shape, "f32")


def _identity_map(rank: int) -> str:
    dims = ", ".join(f"d{i}" for i in range(rank))
    return f"affine_map<({dims}) -> ({dims})>"


class _Builder:
    def __init__(self, prog: Program, rng: random.Random, layouts_of):
        self.p = prog
        self.rng = rng
        self.layouts_of = layouts_of
        self.count = 0
        self.values: List[Value] = []

    def fresh(self, stem: str = "v") -> str:
        self.count += 1
        return f"%{self.p.prefix}{stem}{self.count}"

    def emit(self, line: str) -> None:
        self.p.body.append("  " + line)

    def new_arg(self, shape: Tuple[int, ...], partial_ok: bool = True) -> Value:
        v = Value(self.fresh("a"), shape)
        choices = self.layouts_of(shape, partial_ok)
        spelling = self.rng.choice(choices) if choices and self.rng.random() < 0.9 else None
        self.p.args.append((v, spelling))
        self.values.append(v)
        return v

    def random_shape(self, rank: int) -> Tuple[int, ...]:
        return tuple(self.rng.choice(DIM_SIZES) for _ in range(rank))

    def pick(self, pred=lambda v: True) -> Optional[Value]:
        vs = [v for v in self.values if pred(v)]
        if not vs:
            return None
        # Prefer recent values: programs become chains, not fans.
        return vs[-1] if self.rng.random() < 0.6 else self.rng.choice(vs)

    def add(self, shape: Tuple[int, ...], name: str) -> Value:
        v = Value(name, shape)
        self.values.append(v)
        return v

    def empty(self, shape) -> str:
        e = self.fresh("e")
        self.emit(f"{e} = tensor.empty() : {_tt(shape)}")
        return e

    def filled(self, shape, constant: str) -> str:
        e = self.empty(shape)
        c = self.fresh("c")
        self.emit(f"{c} = arith.constant {constant} : f32")
        f = self.fresh("f")
        self.emit(f"{f} = linalg.fill ins({c} : f32) outs({e} : {_tt(shape)}) -> {_tt(shape)}")
        return f

    # Ops: each returns False when it does not apply to the values so far.

    def op_arith_binary(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        b = self.pick(lambda v: v.shape == a.shape and v is not a)
        if b is None:
            b = self.new_arg(a.shape)
        op = self.rng.choice(["arith.addf", "arith.subf", "arith.mulf", "arith.maximumf",
                              "arith.minimumf"])
        r = self.fresh()
        self.emit(f"{r} = {op} {a.name}, {b.name} : {_tt(a.shape)}")
        self.add(a.shape, r)
        self.p.ops.append(op)
        return True

    def op_math_unary(self) -> bool:
        a = self.pick()
        if a is None:
            return False
        op = self.rng.choice(["math.tanh", "math.absf", "arith.negf", "math.sin"])
        r = self.fresh()
        self.emit(f"{r} = {op} {a.name} : {_tt(a.shape)}")
        self.add(a.shape, r)
        self.p.ops.append(op)
        return True

    def op_generic_elementwise(self) -> bool:
        a = self.pick(lambda v: len(v.shape) >= 1)
        if a is None:
            return False
        rank = len(a.shape)
        ins = [a]
        maps = [_identity_map(rank)]
        kind = self.rng.choice(["unary", "binary", "broadcast"])
        if kind == "binary":
            b = self.pick(lambda v: v.shape == a.shape and v is not a) or self.new_arg(a.shape)
            ins.append(b)
            maps.append(_identity_map(rank))
        elif kind == "broadcast" and rank == 2:
            d = self.rng.randrange(2)
            b = self.pick(lambda v: v.shape == (a.shape[d],)) or self.new_arg((a.shape[d],))
            ins.append(b)
            maps.append(f"affine_map<(d0, d1) -> (d{d})>")
        else:
            kind = "unary"
        maps.append(_identity_map(rank))
        e = self.empty(a.shape)
        r = self.fresh()
        iters = ", ".join(['"parallel"'] * rank)
        ins_text = ", ".join(v.name for v in ins)
        ins_types = ", ".join(_tt(v.shape) for v in ins)
        self.emit(f"{r} = linalg.generic {{indexing_maps = [{', '.join(maps)}], "
                  f"iterator_types = [{iters}]}} ins({ins_text} : {ins_types}) "
                  f"outs({e} : {_tt(a.shape)}) {{")
        args = [self.fresh("x") for _ in ins]
        out = self.fresh("o")
        self.emit(f"^bb0({', '.join(f'{x}: f32' for x in args)}, {out}: f32):")
        s = self.fresh("s")
        if kind == "unary":
            self.emit(f"  {s} = arith.mulf {args[0]}, {args[0]} : f32")
        else:
            op = self.rng.choice(["arith.addf", "arith.mulf", "arith.subf"])
            self.emit(f"  {s} = {op} {args[0]}, {args[1]} : f32")
        self.emit(f"  linalg.yield {s} : f32")
        self.emit(f"}} -> {_tt(a.shape)}")
        self.add(a.shape, r)
        self.p.ops.append(f"generic.{kind}")
        return True

    _REDUCTIONS = {"sum": ("arith.addf", "0.0"), "max": ("arith.maximumf", "0xFF800000"),
                   "min": ("arith.minimumf", "0x7F800000")}

    def op_reduce(self) -> bool:
        a = self.pick(lambda v: len(v.shape) == 2) or self.pick(lambda v: len(v.shape) == 1)
        if a is None:
            return False
        kind = self.rng.choice(sorted(self._REDUCTIONS))
        combiner, init = self._REDUCTIONS[kind]
        dim = self.rng.randrange(len(a.shape))
        out_shape = tuple(s for i, s in enumerate(a.shape) if i != dim)
        f = self.filled(out_shape, init)
        r = self.fresh()
        if len(a.shape) == 2 and self.rng.random() < 0.5:
            # The importer's form: a reduction linalg.generic.
            keep = "d1" if dim == 0 else "d0"
            iters = '"reduction", "parallel"' if dim == 0 else '"parallel", "reduction"'
            self.emit(f"{r} = linalg.generic {{indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, "
                      f"affine_map<(d0, d1) -> ({keep})>], iterator_types = [{iters}]}} "
                      f"ins({a.name} : {_tt(a.shape)}) outs({f} : {_tt(out_shape)}) {{")
            form = "generic"
        else:
            self.emit(f"{r} = linalg.reduce ins({a.name} : {_tt(a.shape)}) "
                      f"outs({f} : {_tt(out_shape)}) dimensions = [{dim}]")
            form = "reduce"
        x, acc, s = self.fresh("x"), self.fresh("o"), self.fresh("s")
        if form == "generic":
            self.emit(f"^bb0({x}: f32, {acc}: f32):")
        else:
            self.emit(f"  ({x}: f32, {acc}: f32) {{")
        self.emit(f"  {s} = {combiner} {x}, {acc} : f32")
        self.emit(f"  linalg.yield {s} : f32")
        self.emit(f"}} -> {_tt(out_shape)}" if form == "generic" else "  }")
        self.add(out_shape, r)
        self.p.ops.append(f"{form}.{kind}(dim {dim})")
        return True

    def op_partial_terms(self) -> bool:
        """A reduction over dim 0 of a new argument whose dim 0 is split:
        real per-rank Partial terms (sum, max or min), then a reshard to a
        random layout."""
        shape = self.random_shape(self.rng.choice([1, 2]))
        full = (self.rng.choice([2, 3, 4, 6, 8]),) + shape
        split = [sp for sp in self.layouts_of(full, False)
                 if any(p[0] in ("S", "SS") and p[1] == 0 for p in sp.placements)]
        if not split:
            return False
        a = Value(self.fresh("a"), full)
        self.p.args.append((a, self.rng.choice(split)))
        kind = self.rng.choice(sorted(self._REDUCTIONS))
        combiner, init = self._REDUCTIONS[kind]
        f = self.filled(shape, init)
        r = self.fresh()
        self.emit(f"{r} = linalg.reduce ins({a.name} : {_tt(full)}) "
                  f"outs({f} : {_tt(shape)}) dimensions = [0]")
        x, acc, t = self.fresh("x"), self.fresh("o"), self.fresh("s")
        self.emit(f"  ({x}: f32, {acc}: f32) {{")
        self.emit(f"  {t} = {combiner} {x}, {acc} : f32")
        self.emit(f"  linalg.yield {t} : f32")
        self.emit("  }")
        self.add(shape, r)
        self.p.ops.append(f"partial.{kind}")
        return self.op_annotate() or True

    def op_matmul(self) -> bool:
        a = self.pick(lambda v: len(v.shape) == 2)
        if a is None:
            return False
        m, k = a.shape
        b = self.pick(lambda v: len(v.shape) == 2 and v.shape[0] == k and v is not a)
        if b is None:
            b = self.new_arg((k, self.rng.choice(DIM_SIZES)))
        n = b.shape[1]
        f = self.filled((m, n), "0.0")
        r = self.fresh()
        self.emit(f"{r} = linalg.matmul ins({a.name}, {b.name} : {_tt(a.shape)}, {_tt(b.shape)}) "
                  f"outs({f} : {_tt((m, n))}) -> {_tt((m, n))}")
        self.add((m, n), r)
        self.p.ops.append("matmul")
        return True

    def op_transpose(self) -> bool:
        a = self.pick(lambda v: len(v.shape) == 2)
        if a is None:
            return False
        shape = (a.shape[1], a.shape[0])
        e = self.empty(shape)
        r = self.fresh()
        self.emit(f"{r} = linalg.transpose ins({a.name} : {_tt(a.shape)}) "
                  f"outs({e} : {_tt(shape)}) permutation = [1, 0]")
        self.add(shape, r)
        self.p.ops.append("transpose")
        return True

    def op_collapse(self) -> bool:
        a = self.pick(lambda v: len(v.shape) == 2)
        if a is None:
            return False
        shape = (a.shape[0] * a.shape[1],)
        r = self.fresh()
        self.emit(f"{r} = tensor.collapse_shape {a.name} [[0, 1]] : {_tt(a.shape)} into {_tt(shape)}")
        self.add(shape, r)
        self.p.ops.append("collapse_shape")
        return True

    def op_expand(self) -> bool:
        a = self.pick(lambda v: len(v.shape) == 1)
        if a is None:
            return False
        n = a.shape[0]
        factors = [d for d in range(1, n + 1) if n % d == 0]
        d = self.rng.choice(factors)
        shape = (d, n // d)
        r = self.fresh()
        self.emit(f"{r} = tensor.expand_shape {a.name} [[0, 1]] output_shape [{shape[0]}, {shape[1]}] "
                  f": {_tt(a.shape)} into {_tt(shape)}")
        self.add(shape, r)
        self.p.ops.append("expand_shape")
        return True

    def op_slice(self) -> bool:
        a = self.pick(lambda v: len(v.shape) >= 1 and max(v.shape) > 1)
        if a is None:
            return False
        dims = [i for i, s in enumerate(a.shape) if s > 1]
        d = self.rng.choice(dims)
        size = self.rng.randint(1, a.shape[d] - 1)
        offset = self.rng.randint(0, a.shape[d] - size)
        offsets = [0] * len(a.shape)
        sizes = list(a.shape)
        offsets[d], sizes[d] = offset, size
        r = self.fresh()
        self.emit(f"{r} = tensor.extract_slice {a.name}[{', '.join(map(str, offsets))}] "
                  f"[{', '.join(map(str, sizes))}] [{', '.join(['1'] * len(sizes))}] "
                  f": {_tt(a.shape)} to {_tt(sizes)}")
        self.add(tuple(sizes), r)
        self.p.ops.append("extract_slice")
        return True

    def op_annotate(self) -> bool:
        a = self.pick()
        if a is None or not a.shape:
            return False
        choices = self.layouts_of(a.shape, True)
        if not choices:
            return False
        sp = self.rng.choice(choices)
        r = self.fresh()
        self.emit(f"{r} = shardx.annotate {a.name} : {_tt(a.shape)} to "
                  f"#shardx.layout<@mesh, {sp.text()}>")
        self.add(a.shape, r)
        self.p.ops.append("annotate")
        return True


OPS = {
    "arith": (_Builder.op_arith_binary, 2),
    "math": (_Builder.op_math_unary, 1),
    "generic": (_Builder.op_generic_elementwise, 2),
    "reduce": (_Builder.op_reduce, 2),
    "matmul": (_Builder.op_matmul, 2),
    "transpose": (_Builder.op_transpose, 1),
    "collapse": (_Builder.op_collapse, 1),
    "expand": (_Builder.op_expand, 1),
    "slice": (_Builder.op_slice, 1),
    "annotate": (_Builder.op_annotate, 1),
    "partial": (_Builder.op_partial_terms, 2),
}


class LayoutCache:
    """Spellings of valid layouts per (mesh, shape)."""

    def __init__(self):
        self._by_rank: Dict[Tuple, list] = {}
        self._by_shape: Dict[Tuple, List[Spelling]] = {}

    def get(self, mesh: Tuple[int, ...], shape: Tuple[int, ...], partial_ok: bool) -> List[Spelling]:
        key = (mesh, shape, partial_ok)
        if key not in self._by_shape:
            rkey = (mesh, len(shape), partial_ok)
            if rkey not in self._by_rank:
                self._by_rank[rkey] = enumerate_layouts(
                    mesh, len(shape), REDUCE_OPS if partial_ok else ("sum",))
            self._by_shape[key] = [s for l, s in self._by_rank[rkey]
                                   if not l.verify_for_shape(mesh, shape)
                                   and len(l.partial_ops()) <= 1]
        return self._by_shape[key]


def random_program(index: int, mesh: Tuple[int, ...], rng: random.Random,
                   cache: LayoutCache) -> Program:
    prog = Program(index, mesh, prefix=f"p{index}_")
    b = _Builder(prog, rng, lambda shape, partial_ok: cache.get(mesh, shape, partial_ok))
    for _ in range(rng.randint(1, 2)):
        b.new_arg(b.random_shape(rng.choice([1, 2, 2])))
    names = list(OPS)
    weights = [OPS[n][1] for n in names]
    steps = rng.randint(2, 6)
    done = 0
    while done < steps:
        name = rng.choices(names, weights)[0]
        if OPS[name][0](b):
            done += 1
    # Results: the values no later op reads (the last one first, at most
    # three; arguments never), each with a random layout or none.
    def used(v: Value) -> bool:
        pattern = re.compile(re.escape(v.name) + r"(?![0-9])")
        return any(pattern.search(line) and not line.lstrip().startswith(v.name + " =")
                   for line in prog.body)
    sinks = [v for v in b.values[:-1]
             if not v.name.startswith(f"%{prog.prefix}a") and not used(v)]
    outs = [b.values[-1]] + sinks[-2:]
    for v in outs:
        choices = cache.get(mesh, v.shape, True) if v.shape else []
        sp = rng.choice(choices) if choices and rng.random() < 0.8 else None
        prog.results.append((v, sp))
    return prog


def random_programs(count: int, seed: int, meshes: Sequence[Tuple[int, ...]]) -> List[Program]:
    rng = random.Random(seed)
    cache = LayoutCache()
    meshes = list(meshes) or list(MESH_SHAPES)
    return [random_program(i, rng.choice(meshes), rng, cache) for i in range(count)]


def programs_module(progs: Sequence[Program]) -> Tuple[str, Dict[int, int], List[int]]:
    """One module for programs on one mesh: the text, a map from source line
    to program index, and per output the program index."""
    mesh = progs[0].mesh
    lines = [f"shardx.mesh @mesh(shape = {mesh_text(mesh)})", "func.func @programs("]
    line_of: Dict[int, int] = {}
    args = [(i, v, sp) for i, p in enumerate(progs) for v, sp in p.args]
    for k, (i, v, sp) in enumerate(args):
        attr = f" {{shardx.layout = #shardx.layout<@mesh, {sp.text()}>}}" if sp else ""
        lines.append(f"    {v.name}: {_tt(v.shape)}{attr}" + ("," if k + 1 < len(args) else ""))
        line_of[len(lines)] = i
    lines.append("  ) -> (")
    results = [(i, v, sp) for i, p in enumerate(progs) for v, sp in p.results]
    for k, (i, v, sp) in enumerate(results):
        attr = f" {{shardx.layout = #shardx.layout<@mesh, {sp.text()}>}}" if sp else ""
        lines.append(f"    {_tt(v.shape)}{attr}" + ("," if k + 1 < len(results) else ""))
        line_of[len(lines)] = i
    lines.append("  ) {")
    for i, p in enumerate(progs):
        lines.append(f"  // program {p.index}: {', '.join(p.ops)}")
        for line in p.body:
            lines.append(line)
            line_of[len(lines)] = i
    lines.append(f"  return {', '.join(v.name for _, v, _ in results)} : "
                 f"{', '.join(_tt(v.shape) for _, v, _ in results)}")
    lines.append("}")
    return "\n".join(lines) + "\n", line_of, [i for i, _, _ in results]
