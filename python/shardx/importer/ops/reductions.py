"""Reductions and sorts: ``sum``/``mean``/``amax``/``amin``/``any`` (and
``max``/``min`` of every element), ``prod``,
``var_mean``, ``max.dim``/``min.dim`` (values and first index),
``argmax``/``argmin``, ``cumsum``, ``cumprod``,
``topk``/``sort``; each a ``linalg.generic`` with reduction iterators over a
``linalg.fill``ed init."""

from __future__ import annotations

import math

import torch

from ..body import Body
from ..registry import _out, aten, handles
from ..values import UnsupportedOpError, Value, _prod, elem_type, is_float


def _extreme_init(dtype: torch.dtype, is_max: bool):
    """The identity of max (min) over ``dtype``: -inf (inf), the least
    (greatest) integer, False (True)."""
    if dtype == torch.bool:
        return not is_max
    if not is_float(dtype):
        return torch.iinfo(dtype).min if is_max else torch.iinfo(dtype).max
    return -math.inf if is_max else math.inf


@handles(aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default,
         aten.amax.default, aten.amin.default, aten.max.default, aten.min.default,
         aten.any.dim, aten.any.default, aten.any.dims)
def _reduction(imp, node, args, kwargs):
    x = args[0]
    shape, dtype = _out(node)
    target = node.target
    if target in (aten.sum.default, aten.mean.default, aten.any.default, aten.max.default,
                  aten.min.default):
        dims, keepdim = list(range(x.rank)), False
    else:
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        if dims is None or dims == []:
            dims = list(range(x.rank))
        if isinstance(dims, int):
            dims = [dims]
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    if target in (aten.amax.default, aten.amin.default, aten.max.default, aten.min.default):
        # max/min without a dim: of every element (a NaN wins).
        is_max = target in (aten.amax.default, aten.max.default)
        return imp.em.reduce(x, dims, keepdim, "max" if is_max else "min",
                             _extreme_init(dtype, is_max), dtype)
    if target in (aten.any.dim, aten.any.default, aten.any.dims):
        xb = imp.em.cast(x, torch.bool)
        return imp.em.reduce(xb, dims, keepdim, "or", False, torch.bool)
    s = imp.em.reduce(x, dims, keepdim, "add", 0, dtype)
    if target in (aten.mean.dim, aten.mean.default):
        count = _prod(x.shape[d % x.rank] for d in dims) if x.rank else 1
        s = imp.em.elementwise(s.shape, dtype, [s],
                               lambda b, v: b.binary("div", v[0], b.const(count, dtype), dtype))
    return s


@handles(aten.prod.dim_int, aten.prod.default)
def _prod_reduction(imp, node, args, kwargs):
    x = args[0]
    shape, dtype = _out(node)
    if node.target == aten.prod.default:
        dims, keepdim = list(range(x.rank)), False
    else:
        dims = [args[1]]
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    return imp.em.reduce(x, dims, keepdim, "mul", 1, dtype)


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
    out_dtype = x.dtype
    # bf16/f16: in f32 as eager's kernels (their accumulation type), each
    # result rounded once (in f16 a square of 1e4 overflowed to inf).
    if out_dtype in (torch.bfloat16, torch.float16):
        x = imp.em.cast(x, torch.float32)
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
    var = imp.em.cast(var, out_dtype)
    if node.target == aten.var.correction:
        return var
    mean = mean_k if keepdim else imp.em.reshape(mean_k, var.shape)
    return [var, imp.em.cast(mean, out_dtype)]


@handles(aten.max.dim, aten.min.dim)
def _max_dim(imp, node, args, kwargs):
    """Values and (first) indices along a dim: one linalg.generic with two
    results."""
    x = args[0]
    dim = args[1] % x.rank
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    is_max = node.target == aten.max.dim
    return _extreme(imp, x, dim, keepdim, is_max)


def _extreme(imp, x, dim, keepdim, is_max):
    """The max (min) along ``dim`` and the index of its first occurrence;
    a NaN is the extreme, its first occurrence's index (as PyTorch)."""
    kept = [i for i in range(x.rank) if i != dim]
    shape = tuple(x.shape[i] for i in kept)
    dt = x.dtype
    vals = imp.em.full(shape, _extreme_init(dt, is_max), dt)
    idx = imp.em.full(shape, 0, torch.int64)
    nd = x.rank
    em = imp.em

    def body(b: Body, a, ov, oi):
        i = b.v(f"arith.index_cast {b.v(f'linalg.index {dim} : index')} : index to i64")
        better = b.compare("gt" if is_max else "lt", a, ov, dt)
        if is_float(dt):
            # A NaN wins over every number, max or min, as in PyTorch; a
            # later NaN does not replace the first.
            not_nan = b.unary("not", b.is_nan(ov, dt), torch.bool)
            nan_first = b.v(f"arith.andi {b.is_nan(a, dt)}, {not_nan} : i1")
            better = b.v(f"arith.ori {better}, {nan_first} : i1")
        return b.select(better, a, ov, dt), b.select(better, i, oi, torch.int64)
    rv, ri = em.value_index_generic(
        x, [f"d{k}" for k in range(nd)], vals, idx,
        ["reduction" if k == dim else "parallel" for k in range(nd)],
        [f"d{k}" for k in kept], body)
    if keepdim:
        full = [1 if k == dim else x.shape[k] for k in range(nd)]
        rv, ri = em.reshape(rv, full), em.reshape(ri, full)
    return [rv, ri]


@handles(aten.argmax.default, aten.argmin.default)
def _argmax(imp, node, args, kwargs):
    """The index of the first max (min) along ``dim``, or of the flattened
    tensor without one (``max.dim``'s indices)."""
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    is_max = node.target == aten.argmax.default
    if x.dtype == torch.bool:
        raise UnsupportedOpError(f"{'argmax' if is_max else 'argmin'}(): does not support bool "
                                 "input (as eager)")
    shape, _ = _out(node)
    if dim is None:
        flat = imp.em.reshape(x, (_prod(x.shape),))
        return imp.em.reshape(_extreme(imp, flat, 0, False, is_max)[1], shape)
    if x.rank == 0:
        return imp.em.full(shape, 0, torch.int64)
    return _extreme(imp, x, dim % x.rank, keepdim, is_max)[1]


#: The type eager's CPU scans (cumsum, cumprod) accumulate in
#: (``at::acc_type<T, /*is_cuda=*/false>``): double for float and double,
#: float for bfloat16 and half; integers in their own type.
_SCAN_ACCUMULATOR = {torch.float32: torch.float64, torch.float64: torch.float64,
                     torch.bfloat16: torch.float32, torch.float16: torch.float32}


@handles(aten.cumsum.default, aten.cumprod.default)
def _cumsum(imp, node, args, kwargs):
    """out[.., i, ..] = the sum (product) of x[.., j, ..] for j <= i: a
    masked reduction over j in order (quadratic in the dim; position ids
    and masks) from the identity (0, 1), the terms past i skipped. As
    eager's CPU scan:
    the running value in the accumulator type (``_SCAN_ACCUMULATOR``: f64
    for f32), each output rounded from it once, bit for bit with eager."""
    x = args[0]
    op, identity = ("mul", 1) if node.target == aten.cumprod.default else ("add", 0)
    shape, dtype = _out(node)
    if x.rank == 0:
        return imp.em.cast(x, dtype)
    dim = (args[1] if len(args) > 1 else kwargs["dim"]) % x.rank
    r = x.rank
    exprs = [f"d{r}" if i == dim else f"d{i}" for i in range(r)]
    acc = _SCAN_ACCUMULATOR.get(dtype, dtype)

    def body(b: Body, a, out):
        i = b.v(f"linalg.index {dim} : index")
        j = b.v(f"linalg.index {r} : index")
        keep = b.v(f"arith.cmpi ule, {j}, {i} : index")
        v = b.cast(b.cast(a[0], x.dtype, dtype), dtype, acc)
        if not acc.is_floating_point:
            # Integers: the identity past i (exact in any order, so a split
            # of the dim may sum partial results; the MoE dispatch's
            # cumulative counts take this form, shardx-ragged-dispatch).
            return b.binary(op, out, b.select(keep, v, b.const(identity, acc), acc), acc)
        # Floats: past i the running value is kept as it is (not combined
        # with the identity): the combiner is then no sum or product that
        # propagation would split into partial results, whose sum across
        # ranks would round in another order than eager's running value.
        return b.select(keep, b.binary(op, out, v, acc), out, acc)
    scan = imp.em.generic(shape, acc, [(x, exprs)], ["parallel"] * r + ["reduction"],
                          [f"d{i}" for i in range(r)], body,
                          init=imp.em.full(shape, identity, acc))
    return imp.em.cast(scan, dtype)


@handles(aten.topk.default, aten.sort.default, aten.sort.stable)
def _topk(imp, node, args, kwargs):
    """topk / sort along a dim (the last; another moved last and back) by
    ranks: rank(i) = the number of elements before i in the order
    (PyTorch's: NaN above every number;
    ties by position, as a stable sort); slot r gathers the element of
    rank r. Quadratic in the dim's size (router logits over a few
    experts). Eager's topk on CPU orders tied values as its partial sort
    leaves them, not by position: where values tie, the indices can differ
    from eager's (docs/Importer.md)."""
    x = args[0]
    if node.target == aten.topk.default:
        k = args[1]
        dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
        largest = args[3] if len(args) > 3 else kwargs.get("largest", True)
    else:
        k = x.shape[-1] if x.rank else 1
        dim = kwargs.get("dim", args[1] if len(args) > 1 and isinstance(args[1], int) else -1)
        largest = kwargs.get("descending", args[2] if len(args) > 2 and isinstance(args[2], bool) else False)
        if node.target == aten.sort.stable:
            dim = kwargs.get("dim", -1)
            largest = kwargs.get("descending", False)
    if x.rank == 0:
        # As eager: the value itself, at index 0.
        if k != 1:
            raise UnsupportedOpError(f"topk of a 0-d tensor with k = {k}")
        return [x, imp.em.full((), 0, torch.int64)]
    dim %= x.rank
    if node.target != aten.topk.default:
        k = x.shape[dim]
    return _sort_along(imp, x, dim, k, largest)


def _sort_along(imp, x, dim, k, largest):
    """``_sort_last`` along ``dim`` (another dim is moved last, and the
    results back): the values and indices of the ``k`` first in the order,
    in ``dim``'s place."""
    if dim == x.rank - 1:
        return _sort_last(imp, x, k, largest)
    perm = [d for d in range(x.rank) if d != dim] + [dim]
    back = [perm.index(d) for d in range(x.rank)]
    values, indices = _sort_last(imp, imp.em.transpose(x, perm), k, largest)
    return [imp.em.transpose(values, back), imp.em.transpose(indices, back)]


@handles(aten.kthvalue.default)
def _kthvalue(imp, node, args, kwargs):
    """The k-th smallest value along ``dim`` (NaN above every number, as
    eager) and its index: slot k - 1 of the ascending sort (``_sort_last``).
    Where values tie, the index is the first position's; eager's
    quickselect can name another position of the same value, as for
    ``topk`` (docs/Importer.md)."""
    x, k = args[0], args[1]
    a = list(args) + [None] * 4
    dim = kwargs.get("dim", a[2] if a[2] is not None else -1)
    keepdim = kwargs.get("keepdim", a[3] if a[3] is not None else False)
    if x.rank == 0:
        if k != 1:
            raise UnsupportedOpError(f"kthvalue of a 0-d tensor with k = {k}")
        return [x, imp.em.full((), 0, torch.int64)]
    dim %= x.rank
    offsets = [0] * x.rank
    offsets[dim] = k - 1
    sizes = list(x.shape)
    sizes[dim] = 1
    target = [s for i, s in enumerate(x.shape) if i != dim]
    if keepdim:
        target.insert(dim, 1)
    return [imp.em.reshape(imp.em.extract_slice(v, offsets, sizes, [1] * x.rank), target)
            for v in _sort_along(imp, x, dim, k, False)]


def _sort_last(imp, x, k, largest):
    """The ``k`` first values and indices of ``x`` along its last dim in
    the order ``largest`` (descending) or not (``_topk``)."""
    r = x.rank
    lead = [f"d{i}" for i in range(r - 1)]
    n = x.shape[-1]
    dt = x.dtype

    def rank_body(b: Body, a, out):
        xi, xj = a[0], a[1]
        i = b.v(f"linalg.index {r - 1} : index")
        j = b.v(f"linalg.index {r} : index")
        before = b.before_in_order(xj, xi, dt, descending=largest)
        tie = b.v(f"arith.andi {b.same_in_order(xj, xi, dt)}, {b.v(f'arith.cmpi ult, {j}, {i} : index')} : i1")
        hit = b.v(f"arith.ori {before}, {tie} : i1")
        one = b.cast(hit, torch.bool, torch.int64)
        return b.binary("add", out, one, torch.int64)
    ranks = imp.em.generic(x.shape, torch.int64, [(x, lead + [f"d{r - 1}"]), (x, lead + [f"d{r}"])],
                           ["parallel"] * r + ["reduction"], lead + [f"d{r - 1}"], rank_body,
                           init=imp.em.full(x.shape, 0, torch.int64))
    out_shape = tuple(x.shape[:-1]) + (k,)

    def pick(values: bool):
        t = dt if values else torch.int64

        def body(b: Body, a, out):
            slot = b.v(f"arith.index_cast {b.v(f'linalg.index {r - 1} : index')} : index to i64")
            hit = b.compare("eq", a[0], slot, torch.int64)
            if values:
                v = a[1]
            else:
                v = b.v(f"arith.index_cast {b.v(f'linalg.index {r} : index')} : index to i64")
            # -0.0 for floats: adding it changes no value, not even a
            # zero's sign (a sorted -0.0 was +0.0).
            return b.binary("add", out, b.select(hit, v, b.const(zero, t), t), t)
        zero = -0.0 if values and dt.is_floating_point else 0
        ins = [(ranks, lead + [f"d{r}"])] + ([(x, lead + [f"d{r}"])] if values else [])
        return imp.em.generic(out_shape, t, ins, ["parallel"] * r + ["reduction"], lead + [f"d{r - 1}"],
                              body, init=imp.em.full(out_shape, zero, t))
    if n == 0:
        raise UnsupportedOpError("topk of an empty dim")
    return [pick(True), pick(False)]


@handles(aten.cummax.default, aten.cummin.default)
def _cummax(imp, node, args, kwargs):
    """The running max (min) along ``dim`` and the index it came from, as
    eager's CPU scan: element ``j`` takes over where it is NaN, or where
    the running value is not NaN and ``x[j] >= run`` (``<=`` for the min),
    so ties and NaNs go to the latest index. A masked pass over ``j <= i``
    in order (quadratic in the dim, as ``cumsum``), from a start every
    first element takes over from."""
    x = args[0]
    is_max = node.target == aten.cummax.default
    if x.rank == 0:
        return [x, imp.em.full((), 0, torch.int64)]
    dim = (args[1] if len(args) > 1 else kwargs["dim"]) % x.rank
    r, dt, em = x.rank, x.dtype, imp.em
    if dt == torch.bool:
        start = not is_max
    elif is_float(dt):
        start = float("-inf") if is_max else float("inf")
    else:
        info = torch.iinfo(dt)
        start = info.min if is_max else info.max
    vals = em.full(x.shape, start, dt)
    idx = em.full(x.shape, 0, torch.int64)

    def body(b: Body, a, ov, oi):
        i = b.v(f"linalg.index {dim} : index")
        j = b.v(f"linalg.index {r} : index")
        seen = b.v(f"arith.cmpi ule, {j}, {i} : index")
        takes = b.compare("ge" if is_max else "le", a, ov, dt)
        if is_float(dt):
            run_ok = b.unary("not", b.is_nan(ov, dt), torch.bool)
            later = b.v(f"arith.andi {run_ok}, {takes} : i1")
            takes = b.v(f"arith.ori {b.is_nan(a, dt)}, {later} : i1")
        take = b.v(f"arith.andi {seen}, {takes} : i1")
        return (b.select(take, a, ov, dt),
                b.select(take, b.v(f"arith.index_cast {j} : index to i64"), oi, torch.int64))
    return em.value_index_generic(x, [f"d{r}" if k == dim else f"d{k}" for k in range(r)],
                                  vals, idx, ["parallel"] * r + ["reduction"],
                                  [f"d{k}" for k in range(r)], body)


@handles(aten.logcumsumexp.default)
def _logcumsumexp(imp, node, args, kwargs):
    """``log(cumsum(exp(x)))`` along ``dim`` as eager's CPU scan computes
    it: the running value in the accumulator type (f64 for f32 and f64,
    f32 for bf16/f16), each step ``log1p(exp(min - max)) + max`` of the
    element and the running value (``std::min``/``std::max``, a NaN
    running value kept), or the element itself where both are the same
    infinity; each output rounded once. A masked pass over ``j <= i`` in
    order, as ``cumsum``."""
    x = args[0]
    shape, dtype = _out(node)
    if not is_float(dtype):
        raise UnsupportedOpError(f"logcumsumexp of {dtype}")
    if x.rank == 0:
        return imp.em.cast(x, dtype)
    dim = (args[1] if len(args) > 1 else kwargs["dim"]) % x.rank
    r = x.rank
    acc = _SCAN_ACCUMULATOR.get(dtype, dtype)
    e = elem_type(acc)
    exprs = [f"d{r}" if k == dim else f"d{k}" for k in range(r)]

    def body(b: Body, a, out):
        i = b.v(f"linalg.index {dim} : index")
        j = b.v(f"linalg.index {r} : index")
        keep = b.v(f"arith.cmpi ule, {j}, {i} : index")
        v = b.cast(b.cast(a[0], x.dtype, dtype), dtype, acc)
        y_nan = b.is_nan(out, acc)
        # std::min(x, y) = y < x ? y : x; std::max(x, y) = x < y ? y : x.
        lo = b.select(y_nan, out, b.select(b.compare("lt", out, v, acc), out, v, acc), acc)
        hi = b.select(y_nan, out, b.select(b.compare("lt", v, out, acc), out, v, acc), acc)
        finite = b.compare("lt", b.v(f"math.absf {lo} : {e}"), b.const(float("inf"), acc), acc)
        differ = b.compare("ne", lo, hi, acc)
        general = b.v(f"arith.ori {differ}, {finite} : i1")
        gap = b.v(f"math.exp {b.binary('sub', lo, hi, acc)} : {e}")
        step = b.binary("add", b.v(f"math.log1p {gap} : {e}"), hi, acc)
        new = b.select(general, step, v, acc)
        return b.select(keep, new, out, acc)
    scan = imp.em.generic(shape, acc, [(x, exprs)], ["parallel"] * r + ["reduction"],
                          [f"d{k}" for k in range(r)], body,
                          init=imp.em.full(shape, float("-inf"), acc))
    return imp.em.cast(scan, dtype)


@handles(aten.median.dim, aten.median.default)
def _median(imp, node, args, kwargs):
    """The lower median along ``dim`` (slot ``(n - 1) // 2`` of the ascending
    sort, ``_sort_last``) and its index; a NaN anywhere along the dim is the
    median, at the first NaN's index, as eager's. Where values tie, the
    index is the first position's in the order; eager's quickselect can
    name another position of the same value (as for ``kthvalue``,
    docs/Importer.md). ``median()`` without a dim is the flattened one's
    value."""
    x = args[0]
    whole = node.target == aten.median.default
    if whole:
        x = imp.em.reshape(x, (_prod(x.shape),))
        dim, keepdim = 0, False
    else:
        a = list(args) + [None] * 3
        dim = kwargs.get("dim", a[1] if a[1] is not None else -1)
        keepdim = kwargs.get("keepdim", a[2] if a[2] is not None else False)
    if x.rank == 0:
        return x if whole else [x, imp.em.full((), 0, torch.int64)]
    dim %= x.rank
    n = x.shape[dim]
    if n == 0:
        raise UnsupportedOpError("median of an empty dim")
    k = (n - 1) // 2
    values, indices = _sort_along(imp, x, dim, k + 1, False)
    offsets = [0] * x.rank
    offsets[dim] = k
    sizes = list(x.shape)
    sizes[dim] = 1
    target = [s for i, s in enumerate(x.shape) if i != dim]
    pick = lambda v: imp.em.reshape(imp.em.extract_slice(v, offsets, sizes, [1] * x.rank), target)
    values, indices = pick(values), pick(indices)
    if is_float(x.dtype):
        nan = imp.em.elementwise(x.shape, torch.bool, [x], lambda b, v: b.is_nan(v[0], x.dtype))
        any_nan, first = _extreme(imp, nan, dim, False, True)
        values = imp.em.elementwise(values.shape, x.dtype, [any_nan, values], lambda b, v: b.select(
            v[0], b.const(float("nan"), x.dtype), v[1], x.dtype))
        indices = imp.em.elementwise(values.shape, torch.int64, [any_nan, first, indices],
                                     lambda b, v: b.select(v[0], v[1], v[2], torch.int64))
    if whole:
        return values
    if keepdim:
        full = [1 if i == dim else s for i, s in enumerate(x.shape)]
        values, indices = imp.em.reshape(values, full), imp.em.reshape(indices, full)
    return [values, indices]
