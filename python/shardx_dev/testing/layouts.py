"""Layouts and reshard pairs for the back-end sweep.

A small model of ShardX's canonical layout (docs/Layouts.md): per mesh axis
the pending Partial op, per sharded dim the ordered splits ``(axis, stride)``
and optional explicit sizes. ``from_spelling`` resolves DTensor spellings
(``R``, ``S(d)``, ``SS(d, sf)``, ``P(op)``, ``order``/``strides``/``sizes``)
the way ``lib/Layout/Layout.cpp`` does, so two spellings of one distribution
are one pair, and ``text`` prints what ``shardx-opt`` prints (the sweep
checks that against the layout text ``shardx-run`` reports for every output).

The families mirror ``test/Unit/PlannerTest.cpp``: every pair of R / S(d) /
P(sum) layouts with every order of nested splits and stride variants
(``all``), every pair that involves a Partial of any op (``partial``), and
explicit uneven sizes to and from the rest (``sizes``).
"""

from __future__ import annotations

import itertools
import random
import zlib
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

REDUCE_OPS = ("sum", "avg", "max", "min", "prod")

# Placements: ("R",), ("S", d), ("SS", d, sf), ("P", op).
Placement = Tuple


class LayoutError(ValueError):
    """A spelling that does not resolve to a layout."""


@dataclass(frozen=True)
class DimSharding:
    dim: int
    splits: Tuple[Tuple[int, int], ...]  # (mesh axis, stride), major first
    sizes: Optional[Tuple[int, ...]] = None


@dataclass(frozen=True)
class Layout:
    """A canonical layout; equal layouts are equal distributions."""

    partials: Tuple[Optional[str], ...]
    dims: Tuple[DimSharding, ...]

    def has_partial(self) -> bool:
        return any(self.partials)

    def partial_ops(self) -> set:
        return {p for p in self.partials if p}

    def dim(self, d: int) -> Optional[DimSharding]:
        for ds in self.dims:
            if ds.dim == d:
                return ds
        return None

    def text(self) -> str:
        """The canonical text, as ``Layout::str()`` prints it."""
        placements = ["R"] * len(self.partials)
        for a, op in enumerate(self.partials):
            if op:
                placements[a] = f"P({op})"
        order, strides, sizes = {}, {}, {}
        for ds in self.dims:
            axes = [a for a, _ in ds.splits]
            for a in axes:
                placements[a] = f"S({ds.dim})"
            if axes != sorted(axes):
                order[ds.dim] = axes
            if any(s != 1 for _, s in ds.splits):
                strides[ds.dim] = [s for _, s in ds.splits]
            if ds.sizes is not None:
                sizes[ds.dim] = list(ds.sizes)
        out = "[" + ", ".join(placements) + "]"
        for name, m in (("order", order), ("strides", strides), ("sizes", sizes)):
            if m:
                out += f", {name} = {{" + ", ".join(
                    f"{d} = [{', '.join(map(str, v))}]" for d, v in sorted(m.items())) + "}"
        return out

    def verify_for_shape(self, mesh: Sequence[int], shape: Sequence[int]) -> str:
        """``Layout::verifyForShape``: "" when valid."""
        for ds in self.dims:
            if ds.dim >= len(shape):
                return f"shard dim {ds.dim} is out of range for a tensor of rank {len(shape)}"
            size = shape[ds.dim]
            if ds.sizes is not None:
                if sum(ds.sizes) != size:
                    return f"sizes for dim {ds.dim} do not sum to {size}"
                continue
            last = ds.splits[-1][1]
            if last == 1:
                continue
            blocks = last
            for a, _ in ds.splits:
                blocks *= mesh[a]
            if size % blocks:
                return f"dim {ds.dim} of size {size} is not a multiple of {blocks} blocks"
        return ""


def placement_text(p: Placement) -> str:
    if p[0] == "R":
        return "R"
    if p[0] == "S":
        return f"S({p[1]})"
    if p[0] == "SS":
        return f"SS({p[1]}, {p[2]})"
    return f"P({p[1]})"


@dataclass(frozen=True)
class Spelling:
    """One way to write a layout in the ``#shardx.layout`` attribute."""

    placements: Tuple[Placement, ...]
    order: Tuple[Tuple[int, Tuple[int, ...]], ...] = ()
    strides: Tuple[Tuple[int, Tuple[int, ...]], ...] = ()
    sizes: Tuple[Tuple[int, Tuple[int, ...]], ...] = ()

    def text(self) -> str:
        out = "[" + ", ".join(placement_text(p) for p in self.placements) + "]"
        for name, m in (("order", self.order), ("strides", self.strides),
                        ("sizes", self.sizes)):
            if m:
                out += f", {name} = {{" + ", ".join(
                    f"{d} = [{', '.join(map(str, v))}]" for d, v in m) + "}"
        return out


def _apply_split(digits: List[list], axis: int, n: int, sf: int) -> None:
    """``applySplit`` of Layout.cpp: digits are [kind, value] with kind
    "A" (mesh axis), "F" (free blocks) or "T" (the trailing rest)."""
    idx, prefix = 0, 1
    fail = LayoutError(f"split factor {sf} on mesh axis {axis} does not fall on a block boundary")
    while prefix < sf:
        while digits[idx][0] == "A":
            idx += 1
        d = digits[idx]
        if sf % prefix:
            raise fail
        need = sf // prefix
        if d[0] == "T":
            digits.insert(idx, ["F", need])
            idx += 1
            prefix = sf
            break
        if d[1] <= need:
            if need % d[1]:
                raise fail
            prefix *= d[1]
            idx += 1
            continue
        if d[1] % need:
            raise fail
        remaining = d[1] // need
        d[1] = need
        digits.insert(idx + 1, ["F", remaining])
        idx += 1
        prefix = sf
    if prefix != sf:
        raise fail
    while digits[idx][0] == "A":
        idx += 1
    d = digits[idx]
    if d[0] == "T":
        digits.insert(idx, ["A", axis])
        return
    if d[1] % n:
        raise LayoutError(f"mesh axis {axis} (size {n}) cannot split a block of {d[1]}")
    remaining = d[1] // n
    del digits[idx]
    if remaining != 1:
        digits.insert(idx, ["F", remaining])
    digits.insert(idx, ["A", axis])


def from_spelling(sp: Spelling, mesh: Sequence[int]) -> Layout:
    """``Layout::fromSpelling``: the canonical layout of a spelling."""
    if len(sp.placements) != len(mesh):
        raise LayoutError("wrong number of placements")
    partials: List[Optional[str]] = [None] * len(mesh)
    shard_axes: Dict[int, List[Tuple[int, int]]] = {}
    for a, p in enumerate(sp.placements):
        if p[0] == "P":
            partials[a] = p[1]
        elif p[0] in ("S", "SS"):
            sf = p[2] if p[0] == "SS" else 1
            if sf < 1:
                raise LayoutError("split factor below 1")
            shard_axes.setdefault(p[1], []).append((a, sf))
    order, strides, sizes = dict(sp.order), dict(sp.strides), dict(sp.sizes)
    for m in (order, strides, sizes):
        for d in m:
            if d not in shard_axes:
                raise LayoutError(f"clause for dim {d}, which no mesh axis shards")
    dims = []
    for d in sorted(shard_axes):
        axes = shard_axes[d]
        if any(sf != 1 for _, sf in axes):
            if d in order or d in strides:
                raise LayoutError("SS with order or strides")
            digits: List[list] = [["T", 0]]
            for a, sf in axes:
                _apply_split(digits, a, mesh[a], sf)
            splits, free = [], 1
            for kind, value in digits:
                if kind == "F":
                    free *= value
                elif kind == "A":
                    splits.append((value, free))
        else:
            ax = [a for a, _ in axes]
            if d in order:
                if sorted(order[d]) != ax:
                    raise LayoutError("order is not the sharding axes")
                ax = list(order[d])
            st = list(strides.get(d, [1] * len(ax)))
            if len(st) != len(ax):
                raise LayoutError("wrong number of strides")
            splits = list(zip(ax, st))
        prev = 1
        for _, s in splits:
            if s < 1 or s % prev:
                raise LayoutError("strides do not divide")
            prev = s
        sz = sizes.get(d)
        if sz is not None:
            if prev != 1:
                raise LayoutError("strides and sizes")
            shards = 1
            for a, _ in splits:
                shards *= mesh[a]
            if len(sz) != shards:
                raise LayoutError("wrong number of sizes")
        dims.append(DimSharding(d, tuple(splits), tuple(sz) if sz is not None else None))
    return Layout(tuple(partials), tuple(dims))


class LayoutSet:
    """Distinct layouts with one spelling each (a stable choice among the
    spellings that reach it, so SS, order and strides all get written)."""

    def __init__(self):
        self._spellings: Dict[Layout, List[Spelling]] = {}

    def add(self, sp: Spelling, mesh: Sequence[int]) -> Optional[Layout]:
        try:
            layout = from_spelling(sp, mesh)
        except LayoutError:
            return None
        self._spellings.setdefault(layout, [])
        if sp not in self._spellings[layout]:
            self._spellings[layout].append(sp)
        return layout

    def items(self, every_spelling: bool = False) -> List[Tuple[Layout, Spelling]]:
        out = []
        for layout, sps in self._spellings.items():
            if every_spelling:
                out += [(layout, sp) for sp in sps]
                continue
            pick = zlib.crc32(layout.text().encode()) % len(sps)
            out.append((layout, sps[pick]))
        return out


def split_factors(mesh: Sequence[int]) -> List[int]:
    """The split factors worth spelling on ``mesh``: 2 and the products of
    mesh axis sizes (an FSDP-over-TP ``sf`` is the size of the inner axes)."""
    out = {2}
    for r in range(1, len(mesh) + 1):
        for axes in itertools.combinations(mesh, r):
            prod = 1
            for n in axes:
                prod *= n
            if prod > 1:
                out.add(prod)
    return sorted(out)


def enumerate_layouts(mesh: Sequence[int], rank: int, partial_ops: Sequence[str],
                      variants: bool = True,
                      every_spelling: bool = False) -> List[Tuple[Layout, Spelling]]:
    """Every assignment of R, S(d) and P(op) to the mesh axes; with
    ``variants``, every other order of a dim's splits, a stride-2 variant of
    single-split dims (as PlannerTest's ``enumerateLayouts``) and every
    ``SS(d, sf)`` spelling that resolves."""
    choices: List[Placement] = [("R",)] + [("S", d) for d in range(rank)] + \
        [("P", op) for op in partial_ops]
    result = LayoutSet()
    for ps in itertools.product(choices, repeat=len(mesh)):
        base = Spelling(tuple(ps))
        layout = result.add(base, mesh)
        if layout is None or not variants:
            continue
        for ds in layout.dims:
            axes = [a for a, _ in ds.splits]
            for perm in itertools.permutations(axes):
                if list(perm) != axes:
                    result.add(Spelling(base.placements, order=((ds.dim, perm),)), mesh)
            if len(axes) == 1:
                result.add(Spelling(base.placements, strides=((ds.dim, (2,)),)), mesh)
        shard_axes = [a for a, p in enumerate(ps) if p[0] == "S"]
        for a in shard_axes:
            for sf in split_factors(mesh):
                sp = list(ps)
                sp[a] = ("SS", ps[a][1], sf)
                result.add(Spelling(tuple(sp)), mesh)
        if len(shard_axes) >= 2:
            # Every axis strided at once: FSDP-over-TP style spellings.
            for sf in split_factors(mesh):
                sp = [("SS", p[1], sf) if p[0] == "S" else p for p in ps]
                result.add(Spelling(tuple(sp)), mesh)
    return result.items(every_spelling)


def _composition(total: int, parts: int, rng: random.Random) -> Tuple[int, ...]:
    cuts = sorted(rng.randint(0, total) for _ in range(parts - 1))
    bounds = [0] + cuts + [total]
    return tuple(bounds[i + 1] - bounds[i] for i in range(parts))


def explicit_size_layouts(mesh: Sequence[int], shape: Sequence[int], count: int,
                          seed: int) -> List[Tuple[Layout, Spelling]]:
    """Layouts with explicit uneven ``sizes`` (zeros included) on stride-1
    splits: random compositions of the dim over its shards, one or two
    sharded dims, some with a Partial axis, some with an explicit order."""
    rng = random.Random(seed)
    rank = len(shape)
    choices: List[Placement] = [("R",)] + [("S", d) for d in range(rank)] + [("P", "sum")]
    bases = []
    for ps in itertools.product(choices, repeat=len(mesh)):
        if any(p[0] == "S" for p in ps):
            bases.append(ps)
    result = LayoutSet()
    tries = 0
    while len(result.items()) < count and tries < 50 * count:
        tries += 1
        ps = rng.choice(bases)
        axes_of: Dict[int, List[int]] = {}
        for a, p in enumerate(ps):
            if p[0] == "S":
                axes_of.setdefault(p[1], []).append(a)
        sizes, order = [], []
        for d, axes in sorted(axes_of.items()):
            shards = 1
            for a in axes:
                shards *= mesh[a]
            sizes.append((d, _composition(shape[d], shards, rng)))
            if len(axes) > 1 and rng.random() < 0.5:
                order.append((d, tuple(reversed(axes))))
        result.add(Spelling(tuple(ps), order=tuple(order), sizes=tuple(sizes)), mesh)
    return result.items()


#===----------------------------------------------------------------------===#
# Pairs
#===----------------------------------------------------------------------===#

# The meshes of the sweep: per mesh the shapes of the ``all`` family (dims
# that divide every block count, so strided layouts exist, dims that do not,
# and 1) and of the ``partial`` family.
MESH_SHAPES: Dict[Tuple[int, ...], List[Tuple[int, ...]]] = {
    (4,): [(16,), (7,), (1, 7), (5, 3), (8, 4)],
    (2, 2): [(16,), (7,), (1, 7), (5, 3), (8, 4)],
    (2, 3): [(12,), (7,), (1, 7), (5, 3), (12, 6)],
    (3, 2): [(12,), (7,), (5, 3), (12, 6)],
    (2, 2, 2): [(16,), (7,), (5, 3), (8, 4)],
    (5,): [(10,), (7,), (1, 7), (5, 3), (10, 4)],
}
PARTIAL_SHAPES: Dict[Tuple[int, ...], List[Tuple[int, ...]]] = {
    (4,): [(16,), (7,), (5, 3), (8, 4)],
    (2, 2): [(7,), (5, 3)],
    (2, 3): [(12,), (5, 3)],
    (3, 2): [(7,), (5, 3)],
    (2, 2, 2): [(7,)],
    (5,): [(10,), (7,), (5, 3), (10, 4)],
}
# Meshes whose ``all`` family pairs every layout with every layout; on the
# others (3 axes: hundreds of order and stride variants) the base layouts
# are paired exhaustively and each variant goes to and from a few hubs.
EXHAUSTIVE_VARIANTS = {(4,), (2, 2), (2, 3), (3, 2), (5,)}


def parse_mesh(text: str) -> Tuple[int, ...]:
    return tuple(int(x) for x in text.lower().replace("(", "").replace(")", "")
                 .replace(",", "x").split("x") if x)


def mesh_text(mesh: Sequence[int]) -> str:
    return "x".join(map(str, mesh))


@dataclass
class Pair:
    """One reshard: a global tensor of ``shape`` from ``src`` to ``dst``."""

    family: str
    mesh: Tuple[int, ...]
    shape: Tuple[int, ...]
    dtype: str
    src: Layout
    dst: Layout
    src_spelling: Spelling
    dst_spelling: Spelling
    outcome: str = ""
    detail: str = ""
    extra: dict = field(default_factory=dict)

    def key(self) -> str:
        return (f"mesh {mesh_text(self.mesh)}, {tensor_text(self.shape, self.dtype)}: "
                f"{self.src_spelling.text()} -> {self.dst_spelling.text()}")


def tensor_text(shape: Sequence[int], dtype: str) -> str:
    return f"tensor<{'x'.join(map(str, shape))}x{dtype}>" if shape else f"tensor<{dtype}>"


def _hubs(layouts: List[Tuple[Layout, Spelling]], mesh: Sequence[int],
          rank: int) -> List[Tuple[Layout, Spelling]]:
    """A few base layouts every variant is paired with: all replicated, all
    P(sum), each dim split by all axes, each single axis splitting each dim."""
    wanted = [tuple([("R",)] * len(mesh)), tuple([("P", "sum")] * len(mesh))]
    for d in range(rank):
        wanted.append(tuple([("S", d)] * len(mesh)))
        for a in range(len(mesh)):
            ps = [("R",)] * len(mesh)
            ps[a] = ("S", d)
            wanted.append(tuple(ps))
    by_layout = dict(layouts)
    out = []
    for ps in wanted:
        l = from_spelling(Spelling(ps), mesh)
        if l in by_layout:
            out.append((l, by_layout[l]))
    return out


def mesh_pairs(mesh: Tuple[int, ...], dtype: str = "f32") -> Iterator[Pair]:
    """Every pair of the sweep on one mesh, in a fixed order."""
    seen = set()

    def pair(family, shape, src, dst):
        if (shape, src[0], dst[0]) in seen:
            return None
        seen.add((shape, src[0], dst[0]))
        return Pair(family, mesh, shape, dtype, src[0], dst[0], src[1], dst[1])

    for shape in MESH_SHAPES[mesh]:
        rank = len(shape)
        valid = lambda ls: [(l, s) for l, s in ls if not l.verify_for_shape(mesh, shape)]
        layouts = valid(enumerate_layouts(mesh, rank, ("sum",)))
        if mesh in EXHAUSTIVE_VARIANTS:
            for a, b in itertools.product(layouts, repeat=2):
                p = pair("all", shape, a, b)
                if p:
                    yield p
        else:
            base = valid(enumerate_layouts(mesh, rank, ("sum",), variants=False))
            for a, b in itertools.product(base, repeat=2):
                p = pair("all", shape, a, b)
                if p:
                    yield p
            base_set = {l for l, _ in base}
            hubs = _hubs(base, mesh, rank)
            for v in layouts:
                if v[0] in base_set:
                    continue
                for h in hubs:
                    for a, b in ((v, h), (h, v)):
                        p = pair("variants", shape, a, b)
                        if p:
                            yield p
        seed = zlib.crc32(f"{mesh}{shape}".encode())
        sized = explicit_size_layouts(mesh, shape, 6, seed)
        pool = layouts if mesh in EXHAUSTIVE_VARIANTS else \
            valid(enumerate_layouts(mesh, rank, ("sum",), variants=False))
        for a in sized:
            for b in pool + sized:
                for src, dst in ((a, b), (b, a)):
                    p = pair("sizes", shape, src, dst)
                    if p:
                        yield p
    for shape in PARTIAL_SHAPES[mesh]:
        rank = len(shape)
        layouts = [(l, s) for l, s in enumerate_layouts(mesh, rank, REDUCE_OPS, variants=False)
                   if not l.verify_for_shape(mesh, shape)]
        if mesh in EXHAUSTIVE_VARIANTS:
            candidates = itertools.product(layouts, repeat=2)
        else:
            hubs = _hubs(layouts, mesh, rank)
            candidates = itertools.chain.from_iterable(
                ((v, h), (h, v)) for v in layouts for h in hubs)
        for a, b in candidates:
            if a[0].partial_ops() - {"sum"} or b[0].partial_ops() - {"sum"}:
                p = pair("partial", shape, a, b)
                if p:
                    yield p


def sweep_pairs(meshes: Sequence[Tuple[int, ...]], dtype: str = "f32") -> List[Pair]:
    out: List[Pair] = []
    for mesh in meshes:
        out.extend(mesh_pairs(mesh, dtype))
    return out
