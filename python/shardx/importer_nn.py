"""aten handlers for the model zoo (shardx/zoo.py): convolutions and their
backward as ``linalg.conv_2d_nchw_fchw``, padding, slice scatters, integer
division, max-with-index reductions, ``scatter_add`` and ``index``.

Importing this module registers the handlers in ``importer.HANDLERS``.
"""

from __future__ import annotations

import math
from typing import List, Sequence

import torch

from .importer import (HANDLERS, Body, UnsupportedOpError, Value, _amap, _as_index, _ew,
                       _extract, _meta, _out, aten, elem_type, handles, is_float, tensor_type)


def _j(xs) -> str:
    return ", ".join(map(str, xs))


def insert_slice(imp, src: Value, dst: Value, offsets, strides) -> Value:
    name = imp.em.emit(f"tensor.insert_slice {src.name} into {dst.name}[{_j(offsets)}] "
                       f"[{_j(src.shape)}] [{_j(strides)}] : {src.type} into {dst.type}")
    return Value(name, dst.shape, dst.dtype)


def pad(imp, x: Value, low: Sequence[int], high: Sequence[int], value) -> Value:
    """``tensor.pad`` with a constant."""
    if not any(low) and not any(high):
        return x
    if any(p < 0 for p in list(low) + list(high)):
        raise UnsupportedOpError("negative padding")
    shape = tuple(s + lo + hi for s, lo, hi in zip(x.shape, low, high))
    c = imp.em.scalar(value, x.dtype)
    idx = ", ".join(f"%i{k}: index" for k in range(x.rank))
    name = imp.em.emit(f"tensor.pad {x.name} low[{_j(low)}] high[{_j(high)}] {{\n"
                       f"^bb0({idx}):\n  tensor.yield {c} : {elem_type(x.dtype)}\n"
                       f"}} : {x.type} to {tensor_type(shape, x.dtype)}")
    return Value(name, shape, x.dtype)


@handles(aten.slice_scatter.default)
def _slice_scatter(imp, node, args, kwargs):
    x, src = args[0], args[1]
    dim = (args[2] if len(args) > 2 else kwargs.get("dim", 0)) % x.rank
    start = args[3] if len(args) > 3 else kwargs.get("start")
    end = args[4] if len(args) > 4 else kwargs.get("end")
    step = args[5] if len(args) > 5 else kwargs.get("step", 1)
    start, _, step = slice(start, end, step).indices(x.shape[dim])
    offsets, strides = [0] * x.rank, [1] * x.rank
    offsets[dim], strides[dim] = start, step
    return insert_slice(imp, imp.em.cast(src, x.dtype), x, offsets, strides)


@handles(aten.constant_pad_nd.default)
def _constant_pad_nd(imp, node, args, kwargs):
    x, p = args[0], list(args[1])
    value = args[2] if len(args) > 2 else kwargs.get("value", 0)
    low, high = [0] * x.rank, [0] * x.rank
    for k in range(len(p) // 2):  # pairs from the last dim backwards
        low[x.rank - 1 - k], high[x.rank - 1 - k] = p[2 * k], p[2 * k + 1]
    return pad(imp, x, low, high, value)


@handles(aten.add_.Tensor)
def _add_inplace(imp, node, args, kwargs):
    # What functionalization leaves of an in-place update of a module buffer
    # (BatchNorm's num_batches_tracked); the value is the sum.
    return HANDLERS[aten.add.Tensor](imp, node, args, kwargs)


# ----------------------------------------------------------------------------
# Convolutions
# ----------------------------------------------------------------------------


def _conv_params(x: Value, w: Value, stride, padding, dilation, transposed, groups):
    if transposed:
        raise UnsupportedOpError("transposed convolution")
    if groups != 1:
        raise UnsupportedOpError(f"grouped convolution (groups={groups})")
    if x.rank != 4:
        raise UnsupportedOpError(f"{x.rank - 2}-d convolution (only 2-d, NCHW)")
    if isinstance(padding, str):
        raise UnsupportedOpError(f"padding={padding!r}")
    sp = lambda v: list(v) * 2 if len(v) == 1 else list(v)
    return sp(stride), sp(padding), sp(dilation)


def conv2d(imp, x: Value, w: Value, stride, dilation, out_shape, dtype) -> Value:
    """``linalg.conv_2d_nchw_fchw`` of an already padded input."""
    acc = imp.em.full(out_shape, 0, dtype)
    t = tensor_type(out_shape, dtype)
    name = imp.em.emit(
        f"linalg.conv_2d_nchw_fchw {{dilations = dense<[{_j(dilation)}]> : tensor<2xi64>, "
        f"strides = dense<[{_j(stride)}]> : tensor<2xi64>}} ins({x.name}, {w.name} : {x.type}, "
        f"{w.type}) outs({acc.name} : {t}) -> {t}")
    return Value(name, tuple(out_shape), dtype)


@handles(aten.convolution.default)
def _convolution(imp, node, args, kwargs):
    x, w, bias, stride, padding, dilation, transposed, _, groups = args[:9]
    stride, padding, dilation = _conv_params(x, w, stride, padding, dilation, transposed, groups)
    shape, dtype = _out(node)
    xp = pad(imp, x, [0, 0] + padding, [0, 0] + padding, 0)
    y = conv2d(imp, xp, w, stride, dilation, shape, dtype)
    if bias is not None:
        b = imp.em.reshape(bias, [bias.shape[0], 1, 1])
        y = imp.em.elementwise(shape, dtype, [y, b], lambda bd, v: bd.binary("add", v[0], v[1], dtype))
    return y


@handles(aten.convolution_backward.default)
def _convolution_backward(imp, node, args, kwargs):
    """grad input: the stride-dilated, padded output gradient convolved with
    the flipped, transposed weight; grad weight: the padded input convolved
    with the output gradient (stride and dilation swap roles); grad bias: a
    sum."""
    gy, x, w, _, stride, padding, dilation, transposed, _, groups, mask = args[:11]
    s, p, d = _conv_params(x, w, stride, padding, dilation, transposed, groups)
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    ho, wo = gy.shape[2], gy.shape[3]
    hp, wp = h + 2 * p[0], wd + 2 * p[1]
    dtype = gy.dtype
    res: List = [None, None, None]
    if mask[0]:
        lo = [d[0] * (kh - 1), d[1] * (kw - 1)]
        z = imp.em.full((n, f, hp + lo[0], wp + lo[1]), 0, dtype)
        z = insert_slice(imp, gy, z, [0, 0] + lo, [1, 1] + s)
        # wt[c, f, i, j] = w[f, c, kh - 1 - i, kw - 1 - j]
        wt = imp.em.generic((c, f, kh, kw), w.dtype, [(w, ["d1", "d0", f"-d2 + {kh - 1}", f"-d3 + {kw - 1}"])],
                            ["parallel"] * 4, ["d0", "d1", "d2", "d3"], lambda b, a, o: a[0])
        gxp = conv2d(imp, z, wt, [1, 1], d, (n, c, hp, wp), dtype)
        res[0] = gxp if not any(p) else imp.em.extract_slice(gxp, [0, 0] + p, [n, c, h, wd], [1] * 4)
    if mask[1]:
        xp = pad(imp, x, [0, 0] + p, [0, 0] + p, 0)
        gw = conv2d(imp, imp.em.transpose(xp, [1, 0, 2, 3]), imp.em.transpose(gy, [1, 0, 2, 3]),
                    d, s, (c, f, kh, kw), dtype)
        res[1] = imp.em.transpose(gw, [1, 0, 2, 3])
    if mask[2]:
        res[2] = imp.em.reduce(gy, [0, 2, 3], False, "add", 0, dtype)
    return res


# ----------------------------------------------------------------------------
# Integer ops, max with index, scatter_add, index
# ----------------------------------------------------------------------------


def _floor_div(b: Body, x: str, y: str, t: torch.dtype) -> str:
    if is_float(t):
        return b.v(f"math.floor {b.binary('div', x, y, t)} : {elem_type(t)}")
    return b.v(f"arith.floordivsi {x}, {y} : {elem_type(t)}")


@handles(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(imp, node, args, kwargs):
    mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)

    def fn(b, v, t):
        if mode == "floor":
            return _floor_div(b, v[0], v[1], t), None
        if mode == "trunc":
            if is_float(t):
                q = b.binary("div", v[0], v[1], t)
                return b.v(f"math.trunc {q} : {elem_type(t)}"), None
            return b.binary("div", v[0], v[1], t), None
        return b.binary("div", v[0], v[1], t), None
    return _ew(imp, node, [args[0], args[1]], fn)


@handles(aten.remainder.Scalar, aten.remainder.Tensor)
def _remainder(imp, node, args, kwargs):
    def fn(b, v, t):
        # Python semantics: the result has the sign of the divisor.
        q = _floor_div(b, v[0], v[1], t)
        return b.binary("sub", v[0], b.binary("mul", q, v[1], t), t), None
    return _ew(imp, node, [args[0], args[1]], fn)


@handles(aten.max.dim, aten.min.dim)
def _max_dim(imp, node, args, kwargs):
    """Values and (first) indices along a dim: one linalg.generic with two
    results."""
    x = args[0]
    dim = args[1] % x.rank
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    is_max = node.target == aten.max.dim
    kept = [i for i in range(x.rank) if i != dim]
    shape = tuple(x.shape[i] for i in kept)
    dt = x.dtype
    init = -math.inf if is_max else math.inf
    if not is_float(dt):
        init = torch.iinfo(dt).min if is_max else torch.iinfo(dt).max
    vals = imp.em.full(shape, init, dt)
    idx = imp.em.full(shape, 0, torch.int64)
    nd = x.rank
    em = imp.em
    b = Body(em)
    a, ov, oi = em.fresh("a"), em.fresh("o"), em.fresh("o")
    i = b.v(f"arith.index_cast {b.v(f'linalg.index {dim} : index')} : index to i64")
    better = b.compare("gt" if is_max else "lt", a, ov, dt)
    if is_float(dt):  # NaN wins, as in PyTorch
        better = b.v(f"arith.ori {better}, {b.v(f'arith.cmpf uno, {a}, {a} : {elem_type(dt)}')} : i1")
    nv = b.select(better, a, ov, dt)
    ni = b.select(better, i, oi, torch.int64)
    out_map = _amap(nd, [f"d{k}" for k in kept])
    maps = [_amap(nd, [f"d{k}" for k in range(nd)]), out_map, out_map]
    its = ", ".join('"reduction"' if k == dim else '"parallel"' for k in range(nd))
    text = [f"linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{its}]}} "
            f"ins({x.name} : {x.type}) outs({vals.name}, {idx.name} : {vals.type}, {idx.type}) {{",
            f"^bb0({a}: {elem_type(dt)}, {ov}: {elem_type(dt)}, {oi}: i64):"]
    text += ["  " + line for line in b.lines]
    text.append(f"  linalg.yield {nv}, {ni} : {elem_type(dt)}, i64")
    text.append(f"}} -> ({vals.type}, {idx.type})")
    name = em.fresh("v")
    em.lines.append(f"{name}:2 = " + "\n".join(text))
    rv, ri = Value(f"{name}#0", shape, dt), Value(f"{name}#1", shape, torch.int64)
    if keepdim:
        full = [1 if k == dim else x.shape[k] for k in range(nd)]
        rv, ri = em.reshape(rv, full), em.reshape(ri, full)
    return [rv, ri]


@handles(aten.scatter_add.default)
def _scatter_add(imp, node, args, kwargs):
    """out[..., j, ...] = x + the sum of src where index == j along dim: a
    reduction over the index's dim (masked)."""
    x, dim, idx, src = args[0], args[1] % args[0].rank, args[2], args[3]
    r = x.rank
    if any(idx.shape[i] != x.shape[i] for i in range(r) if i != dim):
        raise UnsupportedOpError("scatter_add whose index differs from self outside dim")
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


@handles(aten.index.Tensor)
def _index(imp, node, args, kwargs):
    """Advanced indexing with index tensors on leading or any dims (None for
    a full dim); the index tensors broadcast together and their dims come
    first when they are not adjacent, as in PyTorch."""
    x, indices = args[0], list(args[1])
    shape, dtype = _out(node)
    indices += [None] * (x.rank - len(indices))
    pos = [k for k, t in enumerate(indices) if t is not None]
    if any(indices[k].dtype == torch.bool for k in pos):
        raise UnsupportedOpError("indexing with a boolean mask (data-dependent shape)")
    bshape = tuple(torch.broadcast_shapes(*[tuple(indices[k].shape) for k in pos]))
    nb = len(bshape)
    adjacent = pos == list(range(pos[0], pos[-1] + 1))
    first = pos[0] if adjacent else 0
    # Output dims: x dims before `first` (the None ones), the broadcast dims,
    # then the remaining None dims.
    none_dims = [k for k in range(x.rank) if indices[k] is None]
    before = [k for k in none_dims if k < first] if adjacent else []
    after = [k for k in none_dims if k not in before]
    out_of = {}
    for o, k in enumerate(before):
        out_of[k] = o
    for o, k in enumerate(after):
        out_of[k] = len(before) + nb + o
    r = len(shape)
    inputs = []
    for k in pos:
        t = indices[k]
        off = nb - t.rank
        keep = [i for i in range(t.rank) if not (t.shape[i] == 1 and bshape[off + i] != 1)]
        src = imp.em.reshape(t, [t.shape[i] for i in keep])
        inputs.append((src, [f"d{len(before) + off + i}" for i in keep]))

    def body(b: Body, a, out):
        coords = []
        j = 0
        for k in range(x.rank):
            if indices[k] is None:
                coords.append(b.v(f"linalg.index {out_of[k]} : index"))
            else:
                t = indices[k]
                v = _as_index(b, a[j], t.dtype)
                # Negative indices count from the end.
                neg = b.v(f"arith.cmpi slt, {v}, {b.v('arith.constant 0 : index')} : index")
                wrapped = b.v(f"arith.addi {v}, {b.v(f'arith.constant {x.shape[k]} : index')} : index")
                coords.append(b.v(f"arith.select {neg}, {wrapped}, {v} : index"))
                j += 1
        return _extract(b, x, coords)
    return imp.em.generic(shape, dtype, inputs, ["parallel"] * r, [f"d{i}" for i in range(r)], body)


@handles(aten.topk.default, aten.sort.default, aten.sort.stable)
def _topk(imp, node, args, kwargs):
    """topk / sort along the last dim by ranks: rank(i) = the number of
    elements before i in the order (ties by position, as a stable sort);
    slot r gathers the element of rank r. Quadratic in the dim's size
    (router logits over a few experts)."""
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
    if x.rank == 0 or dim % x.rank != x.rank - 1:
        raise UnsupportedOpError("topk/sort along a dim other than the last")
    r = x.rank
    lead = [f"d{i}" for i in range(r - 1)]
    n = x.shape[-1]
    dt = x.dtype

    def rank_body(b: Body, a, out):
        xi, xj = a[0], a[1]
        i = b.v(f"linalg.index {r - 1} : index")
        j = b.v(f"linalg.index {r} : index")
        before = b.compare("gt" if largest else "lt", xj, xi, dt)
        tie = b.v(f"arith.andi {b.compare('eq', xj, xi, dt)}, {b.v(f'arith.cmpi ult, {j}, {i} : index')} : i1")
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
            return b.binary("add", out, b.select(hit, v, b.const(0, t), t), t)
        ins = [(ranks, lead + [f"d{r}"])] + ([(x, lead + [f"d{r}"])] if values else [])
        return imp.em.generic(out_shape, t, ins, ["parallel"] * r + ["reduction"], lead + [f"d{r - 1}"],
                              body, init=imp.em.full(out_shape, 0, t))
    if n == 0:
        raise UnsupportedOpError("topk of an empty dim")
    return [pick(True), pick(False)]


_scatter_one = HANDLERS[aten.scatter.src]


@handles(aten.scatter.src, aten.scatter.value)
def _scatter(imp, node, args, kwargs):
    """scatter with several indices per row along dim (topk's backward): a
    masked pass over the index's dim (the last matching index wins; PyTorch
    leaves duplicates unspecified). One index per row: the importer's own."""
    x, dim, idx, val = args[0], args[1] % args[0].rank, args[2], args[3]
    if kwargs.get("reduce") is not None or idx.shape[dim] == 1:
        return _scatter_one(imp, node, args, kwargs)
    r = x.rank
    if any(idx.shape[i] != x.shape[i] for i in range(r) if i != dim):
        raise UnsupportedOpError("scatter whose index differs from self outside dim")
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


@handles(aten.cumsum.default)
def _cumsum(imp, node, args, kwargs):
    """out[.., i, ..] = the sum of x[.., j, ..] for j <= i: a masked
    reduction over j (quadratic in the dim; position ids and masks)."""
    x = args[0]
    shape, dtype = _out(node)
    if x.rank == 0:
        return imp.em.cast(x, dtype)
    dim = (args[1] if len(args) > 1 else kwargs["dim"]) % x.rank
    r = x.rank
    exprs = [f"d{r}" if i == dim else f"d{i}" for i in range(r)]

    def body(b: Body, a, out):
        i = b.v(f"linalg.index {dim} : index")
        j = b.v(f"linalg.index {r} : index")
        keep = b.v(f"arith.cmpi ule, {j}, {i} : index")
        v = b.cast(a[0], x.dtype, dtype)
        return b.binary("add", out, b.select(keep, v, b.const(0, dtype), dtype), dtype)
    return imp.em.generic(shape, dtype, [(x, exprs)], ["parallel"] * r + ["reduction"],
                          [f"d{i}" for i in range(r)], body, init=imp.em.full(shape, 0, dtype))


@handles(aten.index_select.default)
def _index_select(imp, node, args, kwargs):
    x, dim, idx = args[0], args[1] % args[0].rank, args[2]
    return _index(imp, node, (x, [None] * dim + [imp.em.reshape(idx, [_prod1(idx.shape)])]), {})


def _prod1(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n
