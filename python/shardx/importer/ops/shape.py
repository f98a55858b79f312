"""Shape and view ops: reshapes (``view``, ``squeeze``, ``flatten``, ...) as
``tensor.collapse_shape``/``expand_shape``, permutes as ``linalg.transpose``,
``expand`` as ``linalg.broadcast``, slices, ``select``, ``split``, ``cat``,
``slice_scatter``, ``constant_pad_nd``, and the factories (``full``,
``zeros``, ``arange``, ...)."""

from __future__ import annotations

from typing import Sequence

import torch

from ..body import Body
from ..registry import _meta, _out, aten, handles
from ..values import UnsupportedOpError, Value, elem_type, tensor_type


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


@handles(aten.flip.default)
def _flip(imp, node, args, kwargs):
    """``x`` reversed along ``dims``: a copy reading position ``n - 1 - i``
    of each flipped dim."""
    x, dims = args[0], args[1]
    r = x.rank
    flipped = {d % r for d in dims} if r else set()
    exprs = [f"{x.shape[i] - 1} - d{i}" if i in flipped else f"d{i}" for i in range(r)]
    return imp.em.generic(x.shape, x.dtype, [(x, exprs)], ["parallel"] * r,
                          [f"d{i}" for i in range(r)], lambda b, a, out: a[0])
