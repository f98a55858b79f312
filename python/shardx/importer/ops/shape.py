"""Shape and view ops: reshapes (``view``, ``squeeze``, ``flatten``, ...) as
``tensor.collapse_shape``/``expand_shape``, permutes as ``linalg.transpose``,
``expand`` as ``linalg.broadcast``, slices, ``select``, ``split``, ``cat``,
``slice_scatter``, ``diagonal`` and ``diagonal_scatter``, ``as_strided``
where it is a reshape, ``constant_pad_nd``, and the factories (``full``,
``zeros``, ``arange``, ...)."""

from __future__ import annotations

import math
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


def _contiguous_strides(shape) -> tuple:
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def _same_strides(shape, strides) -> bool:
    """Whether ``strides`` are the row-major strides of ``shape`` (a size-1
    dim's stride is never read)."""
    want = _contiguous_strides(shape)
    return all(int(s) == 1 or int(a) == int(b) for s, a, b in zip(shape, strides, want))


def _permuted_layout(size, stride):
    """The permutation ``p`` for which ``stride`` (of a view of sizes
    ``size``) are the row-major strides of ``size[p]`` (a view of a whole
    row-major storage in another dim order: a transpose's), or None."""
    order = sorted(range(len(size)), key=lambda d: (-int(stride[d]) if int(size[d]) != 1 else 0, d))
    permuted = [int(size[d]) for d in order]
    if _same_strides(permuted, [int(stride[d]) for d in order]):
        return order
    return None


@handles(aten.as_strided.default, aten.as_strided_copy.default)
def _as_strided(imp, node, args, kwargs):
    """``as_strided`` where it views a whole row-major storage: a reshape
    (PyTorch's decompositions write reshapes so, e.g. GroupNorm's
    ``native_group_norm``), or a reshape then a transpose where the strides
    are row-major in another dim order (a transposed activation's layout).
    Any other window into the storage reads memory that a value does not
    describe: refused."""
    x = args[0]
    size = args[1] if len(args) > 1 else kwargs["size"]
    stride = args[2] if len(args) > 2 else kwargs["stride"]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    src = _meta(node.args[0])
    shape, _ = _out(node)
    whole = src.storage_offset() == 0 and (offset or 0) == 0 and src.is_contiguous() and \
        math.prod(shape) == src.numel()
    if whole and _same_strides(shape, stride):
        return imp.em.reshape(x, shape)
    order = _permuted_layout(shape, stride) if whole else None
    if order is not None:
        rows = imp.em.reshape(x, [shape[d] for d in order])
        return imp.em.transpose(rows, [order.index(d) for d in range(len(shape))])
    raise UnsupportedOpError(
        f"as_strided of a {tuple(src.shape)} tensor (strides {tuple(src.stride())}, offset "
        f"{src.storage_offset()}) to size {tuple(size)}, strides {tuple(stride)}, offset "
        f"{offset or 0}: only a row-major view of a whole row-major tensor (a reshape) is "
        "imported")


@handles(aten.as_strided_scatter.default)
def _as_strided_scatter(imp, node, args, kwargs):
    """``as_strided_scatter(self, src, size, stride, offset)`` where the
    view covers ``self``'s whole row-major storage in some dim order (the
    backward of a pooling over a transposed or channels-last activation):
    ``src`` laid out in that order is the result."""
    base, src = args[0], args[1]
    size = list(args[2]) if len(args) > 2 else list(kwargs["size"])
    stride = list(args[3]) if len(args) > 3 else list(kwargs["stride"])
    offset = args[4] if len(args) > 4 else kwargs.get("storage_offset")
    meta = _meta(node.args[0])
    shape, dtype = _out(node)
    whole = meta.storage_offset() == 0 and (offset or 0) == 0 and meta.is_contiguous() and \
        math.prod(size) == meta.numel()
    order = _permuted_layout(size, stride) if whole else None
    if order is None:
        raise UnsupportedOpError(
            f"as_strided_scatter into a {tuple(meta.shape)} tensor of a view of size "
            f"{tuple(size)}, strides {tuple(stride)}, offset {offset or 0}: only a view of the "
            "whole row-major storage (in some dim order) is imported")
    rows = imp.em.transpose(imp.em.cast(src, dtype), order)
    return imp.em.reshape(rows, shape)


@handles(aten.diagonal.default, aten.diagonal_copy.default)
def _diagonal(imp, node, args, kwargs):
    """``diagonal(x, offset, dim1, dim2)``: the other dims in order, then the
    diagonal. Written as a masked sum over dim2 of the rows of dim1 that
    hold the diagonal (``x[.., i + r0, .., j, ..]`` where ``j = i + c0``),
    the masked-out terms -0.0 (0 for integers): adding -0.0 changes no
    value, not even a zero's sign, so each output is its element exactly,
    and a split of dim2 is a partial sum like any other reduction."""
    x = args[0]
    a = list(args) + [None] * 4
    offset = kwargs.get("offset", a[1] if a[1] is not None else 0)
    dim1 = kwargs.get("dim1", a[2] if a[2] is not None else 0) % x.rank
    dim2 = kwargs.get("dim2", a[3] if a[3] is not None else 1) % x.rank
    shape, dtype = _out(node)
    size = shape[-1]
    if size == 0 or any(n == 0 for n in x.shape):
        return imp.em.full(shape, 0, dtype)
    # The rows of dim1 that hold the diagonal, and its column in row i.
    r0, c0 = max(-offset, 0), max(offset, 0)
    sizes = list(x.shape)
    sizes[dim1] = size
    offsets = [0] * x.rank
    offsets[dim1] = r0
    if tuple(sizes) != tuple(x.shape):
        x = imp.em.extract_slice(x, offsets, sizes, [1] * x.rank)
    others = [d for d in range(x.rank) if d not in (dim1, dim2)]
    r = len(shape)  # loops d0..d{r-1} the output's, d{r} the column
    exprs = []
    for d in range(x.rank):
        exprs.append(f"d{r - 1}" if d == dim1 else f"d{r}" if d == dim2
                     else f"d{others.index(d)}")
    floating = dtype.is_floating_point or dtype.is_complex

    def body(b: Body, a, out):
        i = b.v(f"linalg.index {r - 1} : index")
        j = b.v(f"linalg.index {r} : index")
        col = b.v(f"arith.addi {i}, {b.v(f'arith.constant {c0} : index')} : index") if c0 else i
        hit = b.v(f"arith.cmpi eq, {j}, {col} : index")
        zero = b.const(-0.0 if floating else 0, dtype)
        return b.binary("add", out, b.select(hit, a[0], zero, dtype), dtype)
    init = imp.em.full(shape, -0.0 if floating else 0, dtype)
    return imp.em.generic(shape, dtype, [(x, exprs)], ["parallel"] * r + ["reduction"],
                          [f"d{k}" for k in range(r)], body, init=init)


@handles(aten.diagonal_scatter.default)
def _diagonal_scatter(imp, node, args, kwargs):
    """``diagonal_scatter(base, src, offset, dim1, dim2)`` (the backward of
    ``diagonal``): base with its diagonal replaced by src. src is padded
    along its diagonal dim to base's dim1 (the diagonal's element of row i
    at position i), then each element picks src where it is on the
    diagonal and base elsewhere."""
    base, src = args[0], args[1]
    a = list(args) + [None] * 5
    offset = kwargs.get("offset", a[2] if a[2] is not None else 0)
    dim1 = kwargs.get("dim1", a[3] if a[3] is not None else 0) % base.rank
    dim2 = kwargs.get("dim2", a[4] if a[4] is not None else 1) % base.rank
    shape, dtype = _out(node)
    size = src.shape[-1] if src.rank else 0
    if size == 0:
        return base
    r0, c0 = max(-offset, 0), max(offset, 0)
    n1 = base.shape[dim1]
    low = [0] * src.rank
    high = [0] * src.rank
    low[-1], high[-1] = r0, n1 - r0 - size
    src = pad(imp, src, low, high, 0)
    others = [d for d in range(base.rank) if d not in (dim1, dim2)]
    loops = [f"d{d}" for d in range(base.rank)]

    def body(b: Body, a, out):
        i = b.v(f"linalg.index {dim1} : index")
        j = b.v(f"linalg.index {dim2} : index")
        const = lambda c: b.v(f"arith.constant {c} : index")
        on = b.v(f"arith.cmpi eq, {b.v(f'arith.addi {j}, {const(r0)} : index')}, "
                 f"{b.v(f'arith.addi {i}, {const(c0)} : index')} : index")
        lo = b.v(f"arith.cmpi uge, {i}, {const(r0)} : index")
        hi = b.v(f"arith.cmpi ult, {i}, {const(r0 + size)} : index")
        hit = b.v(f"arith.andi {on}, {b.v(f'arith.andi {lo}, {hi} : i1')} : i1")
        return b.select(hit, b.cast(a[1], src.dtype, dtype), b.cast(a[0], base.dtype, dtype),
                        dtype)
    return imp.em.generic(shape, dtype, [(base, loops),
                                         (src, [f"d{d}" for d in others] + [f"d{dim1}"])],
                          ["parallel"] * base.rank, loops, body)


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
    if any(v < 0 for v in low + high):
        # A negative padding crops (local_response_norm's window sum pads
        # one side and crops the other): a slice first, then the rest.
        offsets = [max(-lo, 0) for lo in low]
        sizes = [s - max(-lo, 0) - max(-hi, 0) for s, lo, hi in zip(x.shape, low, high)]
        if any(n < 0 for n in sizes):
            raise UnsupportedOpError(f"padding {p} crops more than {list(x.shape)}")
        x = imp.em.extract_slice(x, offsets, sizes, [1] * x.rank)
        low, high = [max(v, 0) for v in low], [max(v, 0) for v in high]
    return pad(imp, x, low, high, value)


# Factories.

@handles(aten.full.default, aten.full_like.default, aten.zeros.default, aten.ones.default,
         aten.zeros_like.default, aten.ones_like.default, aten.scalar_tensor.default,
         aten.new_zeros.default, aten.new_ones.default, aten.new_full.default, aten.empty_like.default,
         aten.empty.memory_format, aten.new_empty_strided.default, aten.new_empty.default,
         aten.empty_strided.default)
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


@handles(aten.unfold.default, aten.unfold_copy.default)
def _unfold(imp, node, args, kwargs):
    """``x.unfold(dim, size, step)``: the windows of ``size`` elements
    every ``step`` along ``dim`` (``n = (len - size) // step + 1`` of them)
    in ``dim``'s place, each window's elements a new last dim:
    ``out[.., i, .., k] = x[.., i * step + k, ..]``, read with
    ``tensor.extract`` (a window reads across the dim, as a gather)."""
    x, dim, size, step = args[0], args[1], args[2], args[3]
    shape, dtype = _out(node)
    if x.rank == 0:
        return imp.em.reshape(x, shape)
    dim %= x.rank
    r = len(shape)
    if any(n == 0 for n in shape):
        return imp.em.full(shape, 0, dtype)

    def body(b: Body, a, out):
        i = b.v(f"linalg.index {dim} : index")
        k = b.v(f"linalg.index {r - 1} : index")
        stride = b.v(f"arith.constant {step} : index")
        at = b.v(f"arith.addi {b.v(f'arith.muli {i}, {stride} : index')}, {k} : index")
        coords = [at if d == dim else b.v(f"linalg.index {d} : index") for d in range(x.rank)]
        return b.v(f"tensor.extract {x.name}[{_j(coords)}] : {x.type}")
    return imp.em.generic(shape, dtype, [], ["parallel"] * r, [f"d{d}" for d in range(r)], body)


def _window_of(b: Body, pos: str, k: str, pad: int, dil: int, step: int, count: int):
    """In a body, the window ``o`` whose tap ``k`` reads (padded) position
    ``pos``: ``pos + pad - k * dil = o * step`` with ``0 <= o < count``.
    Returns whether there is one (i1) and ``o`` (index; 0 where none)."""
    const = lambda c: b.v(f"arith.constant {c} : index")
    at = b.v(f"arith.addi {pos}, {const(pad)} : index") if pad else pos
    off = b.v(f"arith.muli {k}, {const(dil)} : index") if dil != 1 else k
    ge = b.v(f"arith.cmpi uge, {at}, {off} : index")
    zero = const(0)
    sub = b.v(f"arith.subi {at}, {off} : index")
    diff = b.v(f"arith.select {ge}, {sub}, {zero} : index")
    o = b.v(f"arith.divui {diff}, {const(step)} : index")
    rem = b.v(f"arith.remui {diff}, {const(step)} : index")
    whole = b.v(f"arith.cmpi eq, {rem}, {zero} : index")
    inside = b.v(f"arith.cmpi ult, {o}, {const(count)} : index")
    both = b.v(f"arith.andi {whole}, {inside} : i1")
    ok = b.v(f"arith.andi {ge}, {both} : i1")
    return ok, b.v(f"arith.select {ok}, {o}, {zero} : index")


@handles(aten.unfold_backward.default)
def _unfold_backward(imp, node, args, kwargs):
    """The gradient of ``unfold``: ``out[.., j, ..]`` sums ``grad[.., i, ..,
    k]`` over the windows ``i`` holding ``j`` (``j = i * step + k``), the
    windows in ascending order as eager's kernel adds them (a reduction
    over the window's positions, descending, the gradient read with
    ``tensor.extract``), from +0.0 (eager's zeros). Bit for bit with
    eager."""
    grad, sizes, dim, size, step = args[0], list(args[1]), args[2], args[3], args[4]
    shape, dtype = _out(node)
    rank = len(sizes)
    if rank == 0:
        return imp.em.reshape(grad, shape)
    dim %= rank
    n = grad.shape[dim]
    if any(s == 0 for s in shape) or n == 0:
        return imp.em.full(shape, 0, dtype)
    floating = dtype.is_floating_point

    def body(b: Body, a, out):
        const = lambda c: b.v(f"arith.constant {c} : index")
        j = b.v(f"linalg.index {dim} : index")
        # Windows in ascending order (the position in the window descends),
        # as eager's kernel adds them.
        k = b.v(f"arith.subi {const(size - 1)}, {b.v(f'linalg.index {rank} : index')} : index")
        hit, safe = _window_of(b, j, k, 0, 1, step, n)
        coords = [safe if d == dim else b.v(f"linalg.index {d} : index") for d in range(rank)]
        v = b.v(f"tensor.extract {grad.name}[{_j(coords + [k])}] : {grad.type}")
        if not floating:
            return b.binary("add", out, b.select(hit, v, b.const(0, dtype), dtype), dtype)
        # Past the windows the running value is kept as it is (a -0.0
        # gradient stays -0.0 where one window holds the element).
        return b.select(hit, b.binary("add", out, v, dtype), out, dtype)
    init = imp.em.full(shape, 0, dtype)
    # An operand over the window's positions gives the reduction its size.
    positions = imp.em.full((size,), 0, torch.int64)
    return imp.em.generic(shape, dtype, [(positions, [f"d{rank}"])],
                          ["parallel"] * rank + ["reduction"],
                          [f"d{d}" for d in range(rank)], body, init=init)


@handles(aten.col2im.default)
def _col2im(imp, node, args, kwargs):
    """``F.fold`` (and ``F.unfold``'s backward): ``out[n, c, y, x]`` sums
    the columns ``input[n, (c * kh + i) * kw + j, oh * OW + ow]`` of the
    windows that cover the pixel (``y = oh * sh - ph + i * dh``, and so for
    ``x``), in eager's order (the kernel positions ascending) from +0.0: a
    reduction over ``(i, j)``, the columns read with ``tensor.extract``.
    Bit for bit with eager."""
    x, out_size, kernel, dilation, padding, stride = args[:6]
    shape, dtype = _out(node)
    batched = x.rank == 3
    if not batched:
        x = imp.em.reshape(x, (1,) + tuple(x.shape))
    n, cols, length = x.shape
    (h, w), (kh, kw), (dh, dw), (ph, pw), (sh, sw) = out_size, kernel, dilation, padding, stride
    oh = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    c = cols // (kh * kw)
    full = (n, c, h, w)
    if any(s == 0 for s in full) or oh <= 0 or ow <= 0:
        out = imp.em.full(full, 0, dtype)
        return out if batched else imp.em.reshape(out, shape)

    def body(b: Body, a, out):
        const = lambda v: b.v(f"arith.constant {v} : index")
        idx = lambda d: b.v(f"linalg.index {d} : index")

        i, j = idx(4), idx(5)
        ok_y, row = _window_of(b, idx(2), i, ph, dh, sh, oh)
        ok_x, col = _window_of(b, idx(3), j, pw, dw, sw, ow)
        hit = b.v(f"arith.andi {ok_y}, {ok_x} : i1")
        base = b.v(f"arith.muli {idx(1)}, {const(kh * kw)} : index")
        tap = b.v(f"arith.addi {b.v(f'arith.muli {i}, {const(kw)} : index')}, {j} : index")
        k = b.v(f"arith.addi {base}, {tap} : index")
        pos = b.v(f"arith.addi {b.v(f'arith.muli {row}, {const(ow)} : index')}, {col} : index")
        v = b.v(f"tensor.extract {x.name}[{idx(0)}, {k}, {pos}] : {x.type}")
        return b.select(hit, b.binary("add", out, v, dtype), out, dtype)
    taps = imp.em.full((kh, kw), 0, torch.int64)
    out = imp.em.generic(full, dtype, [(taps, ["d4", "d5"])], ["parallel"] * 4 + ["reduction"] * 2,
                         ["d0", "d1", "d2", "d3"], body, init=imp.em.full(full, 0, dtype))
    return out if batched else imp.em.reshape(out, shape)
