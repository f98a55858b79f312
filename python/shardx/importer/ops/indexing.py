"""Indexing ops as ``linalg.generic``s that read a table with
``tensor.extract`` or write through a mask: ``embedding``, ``gather``,
``index``/``index_select``, ``scatter``/``scatter_add`` and accumulating
``index_put`` (embedding backward).

Index values come from the data, so they are checked where they are used
(``checked_index``): an out-of-range index is replaced by 0 before any
``tensor.extract`` reads with it (no read outside the table, whatever the
values), and the number of out-of-range indices is recorded as a check of
the program (``Importer.checks``; ``shardx.compile`` raises eager's error
after a step in which one fails, docs/Importer.md, "Index checks")."""

from __future__ import annotations

from typing import List

import torch

from ..body import Body
from ..registry import _out, aten, handles
from ..values import UnsupportedOpError, Value, _prod, elem_type


def checked_index(imp, idx: Value, size: int, wrap: bool, exc: str, message: str) -> Value:
    """``idx`` (negative values wrapped by ``size`` first where ``wrap``,
    as eager's ``x[idx]`` and ``index_put`` wrap them) with each value
    outside ``[0, size)`` replaced by 0, so that it is safe to read or
    write with. The count of those values is recorded as a check whose
    failure raises ``exc(message)`` (``record_check``)."""
    t = idx.dtype

    def wrapped(b: Body, v):
        x = v[0]
        if wrap:
            neg = b.compare("lt", x, b.const(0, t), t)
            x = b.select(neg, b.binary("add", x, b.const(size, t), t), x, t)
        return x

    def in_range(b: Body, v):
        x = wrapped(b, v)
        return b.binary("and", b.compare("ge", x, b.const(0, t), t),
                        b.compare("lt", x, b.const(size, t), t), torch.bool)
    ok = imp.em.elementwise(idx.shape, torch.bool, [idx], in_range)
    safe = imp.em.elementwise(idx.shape, t, [idx, ok],
                              lambda b, v: b.select(v[1], wrapped(b, v), b.const(0, t), t))
    record_check(imp, ok, exc, message)
    return safe


def record_check(imp, ok: Value, exc: str, message: str) -> None:
    """Records a run-time check of the program: ``ok`` (bool) must be true
    everywhere, else the step raises ``exc(message)``. The importer keeps
    the count of false elements (an i64 scalar); ``trace(...,
    index_checks=True)`` returns it as an extra output (module.py)."""
    bad = imp.em.elementwise(ok.shape, torch.int64, [ok],
                             lambda b, v: b.cast(b.unary("not", v[0], torch.bool), torch.bool,
                                                 torch.int64))
    count = imp.em.reduce(bad, list(range(bad.rank)), False, "add", 0) if bad.rank else bad
    checks = getattr(imp, "checks", None)
    if checks is not None:
        checks.append((count, exc, message))


def _bounds(dim: int, size: int) -> str:
    return f"index out of bounds for dimension {dim} with size {size}"


_SELF = "index out of range in self"


def _extract(b: Body, src: Value, coords: List[str]) -> str:
    return b.v(f"tensor.extract {src.name}[{', '.join(coords)}] : {src.type}")


def _as_index(b: Body, v: str, dtype: torch.dtype) -> str:
    return b.v(f"arith.index_cast {v} : {elem_type(dtype)} to index")


@handles(aten.embedding.default)
def _embedding(imp, node, args, kwargs):
    w, idx = args[0], args[1]
    shape, dtype = _out(node)
    r = len(shape)
    idx = checked_index(imp, idx, w.shape[0], False, "IndexError", _SELF)

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
    idx = checked_index(imp, idx, x.shape[dim], False, "RuntimeError", _bounds(dim, x.shape[dim]))

    def body(b: Body, a, out):
        coords = [b.v(f"linalg.index {i} : index") if i != dim else _as_index(b, a[0], idx.dtype)
                  for i in range(r)]
        return _extract(b, x, coords)
    return imp.em.generic(shape, dtype, [(idx, [f"d{i}" for i in range(r)])], ["parallel"] * r,
                          [f"d{i}" for i in range(r)], body)


def _scatter_one(imp, node, args, kwargs):
    """scatter with one index per row along dim (one-hot targets): each
    element is the source where its position along dim is the index."""
    x, dim, idx, val = args[0], args[1] % args[0].rank, args[2], args[3]
    if kwargs.get("reduce") is not None:
        raise UnsupportedOpError("scatter with reduce")
    r = x.rank
    if idx.shape[dim] != 1 or any(idx.shape[i] != x.shape[i] for i in range(r) if i != dim):
        raise UnsupportedOpError("scatter whose index is not one element per row along dim "
                                 f"(index {list(idx.shape)}, self {list(x.shape)}, dim {dim})")
    idx = checked_index(imp, idx, x.shape[dim], False, "RuntimeError", _bounds(dim, x.shape[dim]))
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
    if not accumulate:
        raise UnsupportedOpError("index_put without accumulate other than into dim 0 with one "
                                 "integer index tensor")
    if len(indices) != 1 or indices[0] is None:
        return _index_put_indices(imp, node, x, list(indices), values)
    # Negative indices count from the end, as in eager.
    idx = checked_index(imp, indices[0], x.shape[0], True, "IndexError", _bounds(0, x.shape[0]))
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


@handles(aten.scatter.src, aten.scatter.value)
def _scatter(imp, node, args, kwargs):
    """scatter with several indices per row along dim (topk's backward): a
    masked pass over the index's dim (the last matching index wins; PyTorch
    leaves duplicates unspecified). One index per row: ``_scatter_one``."""
    x, dim, idx, val = args[0], args[1] % args[0].rank, args[2], args[3]
    if kwargs.get("reduce") is not None or idx.shape[dim] == 1:
        return _scatter_one(imp, node, args, kwargs)
    r = x.rank
    if any(idx.shape[i] != x.shape[i] for i in range(r) if i != dim):
        raise UnsupportedOpError("scatter whose index differs from self outside dim")
    idx = checked_index(imp, idx, x.shape[dim], False, "RuntimeError", _bounds(dim, x.shape[dim]))
    exprs = [f"d{r}" if i == dim else f"d{i}" for i in range(r)]
    inputs = [(idx, exprs)]
    if isinstance(val, Value):
        if tuple(val.shape) != tuple(idx.shape):
            val = imp.em.extract_slice(val, [0] * r, list(idx.shape), [1] * r)
        inputs.append((val, exprs))

    def body(b: Body, a, out):
        pos = b.v(f"linalg.index {dim} : index")
        hit = b.v(f"arith.cmpi eq, {pos}, {_as_index(b, a[0], idx.dtype)} : index")
        v = b.cast(a[1], val.dtype, x.dtype) if isinstance(val, Value) else b.const(val, x.dtype)
        return b.select(hit, v, out, x.dtype)
    return imp.em.generic(x.shape, x.dtype, inputs, ["parallel"] * r + ["reduction"],
                          [f"d{i}" for i in range(r)], body, init=x)


@handles(aten.scatter_add.default)
def _scatter_add(imp, node, args, kwargs):
    """out[..., j, ...] = x + the sum of src where index == j along dim: a
    reduction over the index's dim (masked)."""
    x, dim, idx, src = args[0], args[1] % args[0].rank, args[2], args[3]
    r = x.rank
    if any(idx.shape[i] != x.shape[i] for i in range(r) if i != dim):
        raise UnsupportedOpError("scatter_add whose index differs from self outside dim")
    idx = checked_index(imp, idx, x.shape[dim], False, "RuntimeError", _bounds(dim, x.shape[dim]))
    if tuple(src.shape) != tuple(idx.shape):
        src = imp.em.extract_slice(src, [0] * r, list(idx.shape), [1] * r)
    # Loops: the r dims of x, then the index's dim (reduction).
    nd = r + 1
    in_exprs = [f"d{r}" if i == dim else f"d{i}" for i in range(r)]

    def body(b: Body, a, out):
        pos = b.v(f"linalg.index {dim} : index")
        hit = b.v(f"arith.cmpi eq, {pos}, {_as_index(b, a[0], idx.dtype)} : index")
        v = b.cast(a[1], src.dtype, x.dtype)
        return b.binary("add", out, b.select(hit, v, b.const(0, x.dtype), x.dtype), x.dtype)
    return imp.em.generic(x.shape, x.dtype, [(idx, in_exprs), (src, in_exprs)],
                          ["parallel"] * r + ["reduction"], [f"d{i}" for i in range(r)], body, init=x)


class _IndexLayout:
    """How advanced indexing lays out its result (as PyTorch): the index
    tensors (at ``pos``) broadcast to ``bshape``, whose dims come where the
    first index is when the indices are adjacent, else first; ``before``
    and ``after`` the unindexed dims of ``x`` ahead of and behind them."""

    def __init__(self, x: Value, indices, what: str):
        self.indices = list(indices) + [None] * (x.rank - len(indices))
        self.pos = [k for k, t in enumerate(self.indices) if t is not None]
        if any(self.indices[k].dtype == torch.bool for k in self.pos):
            raise UnsupportedOpError(f"{what} with a boolean mask (data-dependent shape)")
        self.bshape = tuple(torch.broadcast_shapes(*[tuple(self.indices[k].shape)
                                                     for k in self.pos]))
        adjacent = self.pos == list(range(self.pos[0], self.pos[-1] + 1))
        first = self.pos[0] if adjacent else 0
        none_dims = [k for k in range(x.rank) if self.indices[k] is None]
        self.before = [k for k in none_dims if k < first] if adjacent else []
        self.after = [k for k in none_dims if k not in self.before]

    def index_inputs(self, imp, first_loop: int):
        """Each index tensor without its broadcast unit dims, and its map
        onto the broadcast dims, numbered from loop ``first_loop``."""
        nb = len(self.bshape)
        inputs = []
        for k in self.pos:
            t = self.indices[k]
            off = nb - t.rank
            keep = [i for i in range(t.rank)
                    if not (t.shape[i] == 1 and self.bshape[off + i] != 1)]
            src = imp.em.reshape(t, [t.shape[i] for i in keep])
            inputs.append((src, [f"d{first_loop + off + i}" for i in keep]))
        return inputs


@handles(aten.index.Tensor)
def _index(imp, node, args, kwargs, select: bool = False):
    """Advanced indexing with index tensors on leading or any dims (None for
    a full dim); the index tensors broadcast together and their dims come
    first when they are not adjacent, as in PyTorch. Negative indices count
    from the end (``select``: ``index_select``'s, which eager rejects)."""
    x = args[0]
    shape, dtype = _out(node)
    layout = _IndexLayout(x, args[1], "indexing")
    indices, pos, before, after = layout.indices, layout.pos, layout.before, layout.after
    nb = len(layout.bshape)
    # Output dims: x dims before the indices (the None ones), the broadcast
    # dims, then the remaining None dims.
    out_of = {}
    for o, k in enumerate(before):
        out_of[k] = o
    for o, k in enumerate(after):
        out_of[k] = len(before) + nb + o
    r = len(shape)
    for k in pos:
        indices[k] = checked_index(imp, indices[k], x.shape[k], not select,
                                   "IndexError", _SELF if select else _bounds(k, x.shape[k]))
    inputs = layout.index_inputs(imp, len(before))

    def body(b: Body, a, out):
        coords = []
        j = 0
        for k in range(x.rank):
            if indices[k] is None:
                coords.append(b.v(f"linalg.index {out_of[k]} : index"))
            else:
                coords.append(_as_index(b, a[j], indices[k].dtype))  # wrapped, in range
                j += 1
        return _extract(b, x, coords)
    return imp.em.generic(shape, dtype, inputs, ["parallel"] * r, [f"d{i}" for i in range(r)], body)


@handles(aten.index_select.default)
def _index_select(imp, node, args, kwargs):
    x, dim, idx = args[0], args[1] % args[0].rank, args[2]
    return _index(imp, node, (x, [None] * dim + [imp.em.reshape(idx, [_prod(idx.shape)])]), {},
                  select=True)


#: scatter_reduce's identities where ``include_self`` is False (the value a
#: scattered-to element starts from, as eager fills it first).
def _reduce_identity(reduce: str, dtype: torch.dtype):
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype.is_floating_point:
        return float("-inf") if reduce == "amax" else float("inf")
    if dtype == torch.bool:
        return reduce != "amax"
    info = torch.iinfo(dtype)
    return info.min if reduce == "amax" else info.max


@handles(aten.scatter_reduce.two)
def _scatter_reduce(imp, node, args, kwargs):
    """``scatter_reduce`` along ``dim`` with ``sum``, ``prod``, ``mean``,
    ``amax`` or ``amin``: a masked pass over the index's dim, in its order
    (as eager's CPU kernel combines them), from ``self``, or (without
    ``include_self``) from the reduction's identity wherever an index
    points. ``amax``/``amin`` take a NaN source, and otherwise
    ``std::max``/``std::min`` of the running value and the source, as
    eager's; ``mean`` divides by the number of terms (``self`` counting
    with ``include_self``), floor division for integers, and leaves an
    element no index points at as it is. The index must have ``self``'s
    sizes outside ``dim`` (as ``scatter_add`` here)."""
    x, dim, idx, src, reduce = args[0], args[1] % max(args[0].rank, 1), args[2], args[3], args[4]
    include_self = args[5] if len(args) > 5 else kwargs.get("include_self", True)
    r = x.rank
    if r == 0:
        raise UnsupportedOpError("scatter_reduce of a 0-d tensor")
    if any(idx.shape[i] != x.shape[i] for i in range(r) if i != dim):
        raise UnsupportedOpError("scatter_reduce whose index differs from self outside dim "
                                 f"(index {list(idx.shape)}, self {list(x.shape)}, dim {dim})")
    idx = checked_index(imp, idx, x.shape[dim], False, "RuntimeError", _bounds(dim, x.shape[dim]))
    if tuple(src.shape) != tuple(idx.shape):
        src = imp.em.extract_slice(src, [0] * r, list(idx.shape), [1] * r)
    t = x.dtype
    in_exprs = [f"d{r}" if i == dim else f"d{i}" for i in range(r)]
    out_exprs = [f"d{i}" for i in range(r)]
    its = ["parallel"] * r + ["reduction"]

    def hit_of(b: Body, a):
        pos = b.v(f"linalg.index {dim} : index")
        return b.v(f"arith.cmpi eq, {pos}, {_as_index(b, a[0], idx.dtype)} : index")

    def count_hits():
        def body(b: Body, a, out):
            one = b.cast(hit_of(b, a), torch.bool, torch.int64)
            return b.binary("add", out, one, torch.int64)
        return imp.em.generic(x.shape, torch.int64, [(idx, in_exprs)], its, out_exprs, body,
                              init=imp.em.full(x.shape, 0, torch.int64))

    count = None
    start = x
    if not include_self or reduce == "mean":
        count = count_hits()
    if not include_self:
        ident = _reduce_identity(reduce, t)
        start = imp.em.elementwise(x.shape, t, [count, x],
                                   lambda b, v: b.select(b.compare("gt", v[0], b.const(0, torch.int64),
                                                                   torch.int64),
                                                         b.const(ident, t), v[1], t))

    def body(b: Body, a, out):
        hit = hit_of(b, a)
        s = b.cast(a[1], src.dtype, t)
        if reduce in ("sum", "mean"):
            new = b.binary("add", out, s, t)
        elif reduce == "prod":
            new = b.binary("mul", out, s, t)
        elif reduce in ("amax", "amin"):
            # std::max(out, s) = out < s ? s : out; std::min = s < out ? s : out.
            less = b.compare("lt", out, s, t) if reduce == "amax" else b.compare("lt", s, out, t)
            new = b.select(less, s, out, t)
            nan = b.is_nan(s, t)
            if nan is not None:
                new = b.select(nan, s, new, t)
        else:
            raise UnsupportedOpError(f"scatter_reduce with reduce={reduce!r}")
        # The running value kept where the index points elsewhere (not
        # combined with an identity: -0.0 stays -0.0).
        return b.select(hit, new, out, t)
    out = imp.em.generic(x.shape, t, [(idx, in_exprs), (src, in_exprs)], its, out_exprs, body,
                         init=start)
    if reduce != "mean":
        return out

    def mean(b: Body, v):
        n = v[1]
        if include_self:
            n = b.binary("add", n, b.const(1, torch.int64), torch.int64)
        n = b.select(b.compare("eq", n, b.const(0, torch.int64), torch.int64),
                     b.const(1, torch.int64), n, torch.int64)
        if t.is_floating_point:
            return b.binary("div", v[0], b.cast(n, torch.int64, t), t)
        q = b.binary("div", v[0], b.cast(n, torch.int64, t), t)
        # Floor division (the quotient truncates toward zero).
        rem = b.v(f"arith.remsi {v[0]}, {b.cast(n, torch.int64, t)} : {elem_type(t)}")
        neg = b.compare("lt", rem, b.const(0, t), t)
        return b.select(neg, b.binary("sub", q, b.const(1, t), t), q, t)
    return imp.em.elementwise(x.shape, t, [out, count], mean)


@handles(aten.searchsorted.Tensor, aten.bucketize.Tensor)
def _searchsorted(imp, node, args, kwargs):
    """``searchsorted(sorted_sequence, values)`` and ``bucketize(values,
    boundaries)``: each value's insertion point, by eager's own binary
    search unrolled (``bit_length(len)`` halvings of ``[start, end)``, the
    middle read with ``tensor.extract``): the lower bound moves right while
    ``!(seq[mid] >= v)``, the upper bound (``right``/``side="right"``)
    while ``!(seq[mid] > v)``, so NaNs and unsorted sequences give eager's
    answers too. A 1-d sequence serves every value; otherwise its leading
    dims are the values' (one sequence per row). ``sorter`` reads the
    sequence through it."""
    if node.target == aten.bucketize.Tensor:
        values, seq = args[0], args[1]
        sorter = None
    else:
        seq, values = args[0], args[1]
        sorter = kwargs.get("sorter", args[5] if len(args) > 5 else None)
    out_int32 = kwargs.get("out_int32", args[2] if len(args) > 2 else False)
    right = kwargs.get("right", args[3] if len(args) > 3 else False)
    side = kwargs.get("side", args[4] if len(args) > 4 and node.target != aten.bucketize.Tensor
                      else None)
    if side is not None:
        right = side == "right"
    shape, dtype = _out(node)
    if seq.rank == 0:
        raise UnsupportedOpError("searchsorted with a 0-d sequence")
    m = seq.shape[-1]
    r = len(shape)
    if m == 0:
        return imp.em.full(shape, 0, dtype)
    if seq.rank > 1 and (values.rank != seq.rank or tuple(values.shape[:-1]) != tuple(seq.shape[:-1])):
        raise UnsupportedOpError("searchsorted whose sequence's leading dims are not the values' "
                                 f"(sequence {list(seq.shape)}, values {list(values.shape)})")
    # Compare in the promoted type, as eager's kernel does.
    cmp_t = torch.promote_types(seq.dtype, values.dtype)

    def body(b: Body, a, out):
        const = lambda c: b.v(f"arith.constant {c} : index")
        v = b.cast(a[0], values.dtype, cmp_t)
        start, end = const(0), const(m)
        lead = [b.v(f"linalg.index {d} : index") for d in range(seq.rank - 1)]
        for _ in range(max(m, 1).bit_length()):
            going = b.v(f"arith.cmpi ult, {start}, {end} : index")
            width = b.v(f"arith.subi {end}, {start} : index")
            half = b.v(f"arith.shrui {width}, {const(1)} : index")
            mid = b.v(f"arith.addi {start}, {half} : index")
            # Past the search (start == end) mid is end, which may be m:
            # read a position inside the sequence instead (unused).
            pos = b.v(f"arith.minui {mid}, {const(m - 1)} : index")
            if sorter is not None:
                pos = _as_index(b, b.v(f"tensor.extract {sorter.name}[{', '.join(lead + [pos])}] : "
                                       f"{sorter.type}"), sorter.dtype)
            s = b.cast(b.v(f"tensor.extract {seq.name}[{', '.join(lead + [pos])}] : {seq.type}"),
                       seq.dtype, cmp_t)
            stop = b.compare("gt" if right else "ge", s, v, cmp_t)
            move = b.v(f"arith.andi {going}, {b.unary('not', stop, torch.bool)} : i1")
            keep = b.v(f"arith.andi {going}, {stop} : i1")
            start = b.v(f"arith.select {move}, {b.v(f'arith.addi {mid}, {const(1)} : index')}, "
                        f"{start} : index")
            end = b.v(f"arith.select {keep}, {mid}, {end} : index")
        return b.v(f"arith.index_cast {start} : index to {elem_type(dtype)}")
    return imp.em.generic(shape, dtype, [(values, [f"d{d}" for d in range(r)])], ["parallel"] * r,
                          [f"d{d}" for d in range(r)], body)


@handles("shardx.one_hot.default")
def _one_hot(imp, node, args, kwargs):
    """``shardx::one_hot`` (importer/checked.py): each label against the
    classes, with eager's two checks (a negative label, a label past the
    classes) as the program's index checks."""
    labels, n = args[0], args[1]
    t = labels.dtype
    nonneg = imp.em.elementwise(labels.shape, torch.bool, [labels],
                                lambda b, v: b.compare("ge", v[0], b.const(0, t), t))
    record_check(imp, nonneg, "RuntimeError", "Class values must be non-negative.")
    below = imp.em.elementwise(labels.shape, torch.bool, [labels],
                               lambda b, v: b.compare("lt", v[0], b.const(n, t), t))
    record_check(imp, below, "RuntimeError", "Class values must be smaller than num_classes.")
    r = labels.rank + 1

    def body(b: Body, a, out):
        k = b.v(f"arith.index_cast {b.v(f'linalg.index {r - 1} : index')} : index to {elem_type(t)}")
        return b.cast(b.compare("eq", a[0], k, t), torch.bool, torch.int64)
    return imp.em.generic(tuple(labels.shape) + (n,), torch.int64,
                          [(labels, [f"d{d}" for d in range(r - 1)])], ["parallel"] * r,
                          [f"d{d}" for d in range(r)], body)


def _index_put_indices(imp, node, x: Value, indices, values: Value) -> Value:
    """Accumulating ``index_put`` with several index tensors, or one on
    another dim (``x[arange(B), idx]``'s backward: a sequence
    classifier's pooling, CLIP's; ``x[..., [i], :]``): each element of
    ``x`` adds the values whose indices name it, in the index order (a
    reduction over the broadcast index dims, masked). The indexed result's
    dims are laid out as ``_index`` lays them out (the broadcast dims at
    the first index's place where the indices are adjacent, else first)."""
    layout = _IndexLayout(x, indices, "index_put")
    indices, pos, before, after = layout.indices, layout.pos, layout.before, layout.after
    bshape, nb = layout.bshape, len(layout.bshape)
    r = x.rank
    result_exprs = [f"d{k}" for k in before] + [f"d{r + i}" for i in range(nb)] + \
        [f"d{k}" for k in after]
    result_shape = [x.shape[k] for k in before] + list(bshape) + [x.shape[k] for k in after]
    values = imp.em.broadcast_to(values, tuple(result_shape))
    for k in pos:
        indices[k] = checked_index(imp, indices[k], x.shape[k], True, "IndexError",
                                   _bounds(k, x.shape[k]))
    inputs = layout.index_inputs(imp, r) + [(values, result_exprs)]

    def body(b: Body, a, out):
        hit = None
        for j, k in enumerate(pos):
            here = b.v(f"linalg.index {k} : index")
            eq = b.v(f"arith.cmpi eq, {here}, {_as_index(b, a[j], indices[k].dtype)} : index")
            hit = eq if hit is None else b.v(f"arith.andi {hit}, {eq} : i1")
        v = b.cast(a[len(pos)], values.dtype, x.dtype)
        return b.select(hit, b.binary("add", out, v, x.dtype), out, x.dtype)
    return imp.em.generic(x.shape, x.dtype, inputs, ["parallel"] * r + ["reduction"] * nb,
                          [f"d{k}" for k in range(r)], body, init=x)
