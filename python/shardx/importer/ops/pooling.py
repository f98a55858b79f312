"""2-d and 3-d pooling (NCHW, NCDHW) as windowed ``linalg.generic``
reductions: max pooling with its indices, average pooling, and their
backward ops as make_fx keeps them (``tracing.decompositions`` leaves the
2-d pooling ops whole where this module imports them; PyTorch has no
decomposition of the 3-d ones).

Each reads its input at ``s * oh + d * kh``: the generic sharding rule makes
that a windowed dim, so a split H or W keeps its split and exchanges halos
(docs/Rules.md, "Windowed ops"). The backward ops are written as the
convolution's input gradient is: the output gradient inserted at stride
``s`` (or padded, at stride 1) into zeros, then a stride-1 window over it
with the taps flipped.

Max pooling's indices are *window taps* (``kh * KW + kw``, ``(kd * KH +
kh) * KW + kw`` in 3-d, the first maximum in the window, as PyTorch picks
it), not PyTorch's flat ``h * W + w``: a tap is the same on every shard, a
flat index would need the shard's global offset. Only the backward op
(``max_pool2d_with_indices_backward``, ``max_pool3d_with_indices_backward``)
may read them (or a region's output that feeds it); anything else is
refused."""

from __future__ import annotations

import math
import operator
from typing import List, Sequence

import torch

from ..registry import aten, handles
from ..values import UnsupportedOpError, Value
from .shape import insert_slice, pad


def _spatial(v, nd: int, default=None) -> List[int]:
    """A pooling parameter per spatial dim (``nd`` of them)."""
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    if isinstance(v, int):
        return [v] * nd
    v = list(v)
    return v * nd if len(v) == 1 else v


def _params(x, kernel, stride, padding, dilation, ceil_mode, what: str, nd: int = 2,
            partial: bool = False):
    """``(k, s, p, d, out)``, one entry per spatial dim; ``x`` a Value or a
    shape (NCHW for 2-d pooling, NCDHW for ``nd = 3``). ``partial``: a
    ``ceil_mode`` partial last window is taken (average pooling clips it)."""
    shape = tuple(x.shape) if isinstance(x, Value) else tuple(x)
    if len(shape) != nd + 2:
        raise UnsupportedOpError(f"{what} of a {len(shape)}-d input (only {_LAYOUT[nd]})")
    k = _spatial(kernel, nd)
    s = _spatial(stride, nd, k)
    p = _spatial(padding, nd)
    d = _spatial(dilation, nd)
    out = [(shape[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    if ceil_mode:
        ceil = [-(-(shape[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i]) + 1
                for i in range(nd)]
        # PyTorch drops a last window that would start in the padding.
        ceil = [c - 1 if (c - 1) * s[i] >= shape[2 + i] + p[i] else c for i, c in enumerate(ceil)]
        if ceil != out and not partial:
            raise UnsupportedOpError(f"{what} with ceil_mode (a partial last window)")
        out = ceil
    if min(out) < 1:
        raise UnsupportedOpError(f"{what}: the window is larger than the padded input")
    return k, s, p, d, out


_LAYOUT = {2: "NCHW", 3: "NCDHW"}


def _nd(node) -> int:
    """The spatial rank of a pooling node's op (2 or 3)."""
    return 3 if "pool3d" in str(node.target) else 2


def whole_pool(shape, kernel, stride, padding, dilation, ceil_mode) -> bool:
    """Whether this module imports the pooling op (tracing keeps it whole)."""
    try:
        _params(shape, kernel, stride, padding, dilation, ceil_mode, "pooling")
    except UnsupportedOpError:
        return False
    return True


def _dim(loop: int, c: int) -> str:
    return f"d{loop}" if c == 1 else f"d{loop} * {c}"


def _window(imp, windowed: Sequence[Value], plain: Sequence[Value], out_shape, out_dtype, k, s, d,
            init: Value, body_fn) -> Value:
    """A generic over ``(n, c, oh, ow, kh, kw)`` (``(n, c, od, oh, ow, kd,
    kh, kw)`` in 3-d) reading each of ``windowed`` at ``s * o + d * k`` and
    each of ``plain`` at ``(n, c, oh, ow)``, reducing the taps into
    ``init``; ``body_fn(b, args, out)``."""
    nd = len(k)
    win = ["d0", "d1"] + [f"{_dim(2 + i, s[i])} + {_dim(2 + nd + i, d[i])}" for i in range(nd)]
    outs = [f"d{i}" for i in range(2 + nd)]
    inputs = [(v, win) for v in windowed] + [(v, outs) for v in plain]
    # The window's shape (as linalg's pooling ops take it): the tap loops'
    # ranges, which the windowed maps alone do not determine.
    inputs.append((imp.em.empty(tuple(k), out_dtype), [f"d{2 + nd + i}" for i in range(nd)]))
    return imp.em.generic(tuple(out_shape), out_dtype, inputs,
                          ["parallel"] * (2 + nd) + ["reduction"] * nd, outs, body_fn, init=init)


def _flat_tap(b, taps: Sequence[str], k: Sequence[int]) -> str:
    """``kh * KW + kw`` (``(kd * KH + kh) * KW + kw``) of per-dim taps
    (i64)."""
    t = taps[0]
    for a in range(1, len(k)):
        t = b.binary("add", b.binary("mul", t, b.const(k[a], torch.int64), torch.int64), taps[a],
                     torch.int64)
    return t


def _tap(b, k: Sequence[int]) -> str:
    """The flat tap of the window loops, as i64."""
    nd = len(k)
    taps = [b.v(f"arith.index_cast {b.v(f'linalg.index {2 + nd + a} : index')} : index to i64")
            for a in range(nd)]
    return _flat_tap(b, taps, k)


def _check_indices_users(imp, node):
    """The indices (``node``'s second result) feed only the backward op (or
    a region's output, which a backward region reads)."""
    views = {aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default,
             aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.clone.default}

    def ok(u) -> bool:
        # The backward, a region's output, or a view or copy (max_pool1d's
        # decomposition squeezes the indices) read only so.
        if u.target in (aten.max_pool2d_with_indices_backward.default,
                        aten.max_pool3d_with_indices_backward.default):
            return True
        if u.op == "output":
            return getattr(imp, "in_region", False)
        return u.target in views and all(ok(v) for v in u.users)
    for g in node.users:
        if g.target is operator.getitem and g.args[1] == 1 and not all(ok(u) for u in g.users):
            raise UnsupportedOpError(
                f"max_pool{_nd(node)}d's indices used other than by its backward (the "
                "importer's indices are window taps, not PyTorch's flat indices)")


@handles(aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default)
def _max_pool2d(imp, node, args, kwargs):
    x = args[0]
    a = list(args[1:]) + [None] * 6
    kernel = a[0]
    stride = kwargs.get("stride", a[1])
    padding = kwargs.get("padding", a[2] if a[2] is not None else 0)
    dilation = kwargs.get("dilation", a[3] if a[3] is not None else 1)
    ceil_mode = kwargs.get("ceil_mode", a[4] if a[4] is not None else False)
    nd = _nd(node)
    what = f"max_pool{nd}d"
    k, s, p, d, out = _params(x, kernel, stride, padding, dilation, ceil_mode, what, nd)
    if not x.dtype.is_floating_point:
        raise UnsupportedOpError(f"{what} on {x.dtype}")
    _check_indices_users(imp, node)
    n, c = x.shape[:2]
    shape = (n, c) + tuple(out)
    xp = pad(imp, x, [0, 0] + p, [0, 0] + p, float("-inf"))
    dt = x.dtype
    vals = _window(imp, [xp], [], shape, dt, k, s, d, imp.em.full(shape, float("-inf"), dt),
                   lambda b, v, o: b.binary("max", v[0], o, dt))
    # The first tap holding the maximum (PyTorch's choice among ties).
    none = math.prod(k)

    def first(b, v, o):
        hit = b.compare("eq", v[0], v[1], dt)
        t = b.select(hit, _tap(b, k), b.const(none, torch.int64), torch.int64)
        return b.binary("min", t, o, torch.int64)
    idx = _window(imp, [xp], [vals], shape, torch.int64, k, s, d,
                  imp.em.full(shape, none, torch.int64), first)
    return [vals, idx]


def _back_window(imp, gys: Sequence[Value], fills, x: Value, k, s, p, d, body_fn) -> Value:
    """The input gradient: each output gradient-shaped tensor of ``gys``
    placed where its window starts (the row ``q = d (k - 1) - p`` on) in a
    tensor of ``fills`` of the input's rows plus ``E`` (padded at stride 1,
    inserted at stride ``s``), then a stride-1 window of ``E + 1`` taps over
    it into the input's shape: input row ``h`` reads row ``h + j``, the
    window ``oh`` with ``s oh + q = h + j`` at its tap ``kh = (q + p - j) /
    d`` (taps j it does not name add nothing). ``E`` is ``2q`` or ``2q + 1``
    (at least ``d (k - 1)``): the window rule's ``low = E / 2`` is then the
    insert's offset ``q``, so the inserted tensor's split is the one the
    window reads and only halos move. ``body_fn(b, vals, out, hit, tap)``:
    ``hit`` whether tap j is one of the window's, ``tap`` its ``kh * KW +
    kw`` (i64)."""
    nd = len(k)
    n, c = x.shape[:2]
    outs = gys[0].shape[2:]
    # Disjoint windows, pooled rows that every mesh axis splits evenly
    # (the reshape keeps an even split of a merged dim only; a unit dim,
    # max_pool1d's H, is never split).
    axes = getattr(imp.mesh, "shape", None) or (1,)
    if (not any(p) and all(d[i] * (k[i] - 1) < s[i] for i in range(nd))
            and all(v % a == 0 for a in axes for v in outs if v > 1)):
        return _disjoint_back(imp, gys, x, k, s, d, body_fn)
    q = [d[i] * (k[i] - 1) - p[i] for i in range(nd)]
    if min(q) < 0:
        raise UnsupportedOpError("pooling backward with padding past the window's extent")
    e = [2 * q[i] if 2 * q[i] >= d[i] * (k[i] - 1) else 2 * q[i] + 1 for i in range(nd)]
    rows = (n, c) + tuple(x.shape[2 + i] + e[i] for i in range(nd))
    if s == [1] * nd:
        hi = [rows[2 + i] - outs[i] - q[i] for i in range(nd)]
        zs = [pad(imp, g, [0, 0] + q, [0, 0] + hi, f) for g, f in zip(gys, fills)]
    else:
        zs = [insert_slice(imp, g, imp.em.full(rows, f, g.dtype), [0, 0] + q, [1, 1] + s)
              for g, f in zip(gys, fills)]
    i64 = torch.int64

    def body(b, v, o):
        hit, kh = None, []
        for a in range(nd):
            j = b.v(f"arith.index_cast {b.v(f'linalg.index {2 + nd + a} : index')} : index to i64")
            r = b.binary("sub", b.const(q[a] + p[a], i64), j, i64)
            ok, r = _window_tap(b, r, b.compare("ge", r, b.const(0, i64), i64), k[a], d[a])
            hit = ok if hit is None else b.binary("and", hit, ok, torch.bool)
            kh.append(r)
        return body_fn(b, v, o, hit, _flat_tap(b, kh, k))
    dt = gys[0].dtype
    return _window(imp, zs, [], x.shape, dt, [v + 1 for v in e], [1] * nd, [1] * nd,
                   imp.em.full(x.shape, 0, dt), body)


def _window_tap(b, r, ok, k: int, d: int):
    """Whether offset ``r`` (i64) from a window's start lands on one of its
    ``k`` taps of dilation ``d`` (and ``ok``, where given), and that tap's
    index: the two halves of a window's backward body along one dim."""
    i64 = torch.int64
    within = b.compare("le", r, b.const(d * (k - 1), i64), i64)
    ok = within if ok is None else b.binary("and", ok, within, torch.bool)
    if d > 1:
        rem = b.v(f"arith.remsi {r}, {b.const(d, i64)} : i64")
        ok = b.binary("and", ok, b.compare("eq", rem, b.const(0, i64), i64), torch.bool)
        r = b.binary("div", r, b.const(d, i64), i64)
    return ok, r


def _disjoint_back(imp, gys: Sequence[Value], x: Value, k, s, d, body_fn) -> Value:
    """The input gradient of a pooling whose windows do not overlap
    (``d (k - 1) < s``, no padding, 2x2 stride-2 pooling): input row ``s oh
    + r`` is read only by window ``oh`` (at tap ``r / d`` where ``d``
    divides ``r`` and ``r / d < k``), so the gradient is an elementwise
    op of the output gradient into ``(n, c, Ho, s, Wo, s)`` (``(n, c, Do,
    s, Ho, s, Wo, s)`` in 3-d), reshaped to ``(Ho s, Wo s)`` and padded
    with the rows no window reads: a split of the pooled rows keeps its
    split with no halo."""
    nd = len(k)
    n, c = x.shape[:2]
    outs = gys[0].shape[2:]

    def body(b, v, o):
        hit, kh = None, []
        for a in range(nd):
            r = b.v(f"arith.index_cast {b.v(f'linalg.index {3 + 2 * a} : index')} : index to i64")
            ok, r = _window_tap(b, r, None, k[a], d[a])
            hit = ok if hit is None else b.binary("and", hit, ok, torch.bool)
            kh.append(r)
        return body_fn(b, v, o, hit, _flat_tap(b, kh, k))
    dt = gys[0].dtype
    split = (n, c) + tuple(v for a in range(nd) for v in (outs[a], s[a]))
    rank = len(split)
    g = imp.em.generic(split, dt, [(v, ["d0", "d1"] + [f"d{2 + 2 * a}" for a in range(nd)])
                                   for v in gys],
                       ["parallel"] * rank, [f"d{i}" for i in range(rank)], body,
                       init=imp.em.full(split, 0, dt))
    g = imp.em.reshape(g, [n, c] + [outs[a] * s[a] for a in range(nd)])
    unread = [x.shape[2 + a] - outs[a] * s[a] for a in range(nd)]
    return pad(imp, g, [0] * (2 + nd), [0, 0] + unread, 0)


@handles(aten.max_pool2d_with_indices_backward.default,
         aten.max_pool3d_with_indices_backward.default)
def _max_pool2d_backward(imp, node, args, kwargs):
    """grad input[h] = the sum over the windows holding h of the output
    gradient where the window's tap at h is its maximum."""
    gy, x, kernel, stride, padding, dilation, ceil_mode, idx = args[:8]
    nd = _nd(node)
    k, s, p, d, _ = _params(x, kernel, stride, padding, dilation, ceil_mode,
                            f"max_pool{nd}d_with_indices_backward", nd)
    dt = gy.dtype

    def body(b, v, o, hit, tap):
        hit = b.binary("and", hit, b.compare("eq", v[1], tap, torch.int64), torch.bool)
        return b.binary("add", b.select(hit, v[0], b.const(0.0, dt), dt), o, dt)
    return _back_window(imp, [gy, idx], [0, -1], x, k, s, p, d, body)


def _overflow(x: Value, k, s, p, out) -> List[int]:
    """How far a ``ceil_mode`` partial last window reaches past the padded
    input, per spatial dim (0 without one)."""
    return [max((out[i] - 1) * s[i] + k[i] - (x.shape[2 + i] + 2 * p[i]), 0)
            for i in range(len(k))]


def _avg_divisor(imp, x: Value, k, s, p, out, count_include_pad, divisor_override):
    """The divisor: a number, or the window's pixel count per output pixel
    (in the image, or in the padded image where the padding counts and a
    ``ceil_mode`` window is clipped to it, as ATen's), a ``(1, 1, Ho,
    Wo)`` tensor."""
    if divisor_override:
        return float(divisor_override)
    over = _overflow(x, k, s, p, out)
    if not any(over) and (count_include_pad or not any(p)):
        return float(math.prod(k))
    if count_include_pad:
        padded = tuple(x.shape[2 + i] + 2 * p[i] for i in range(len(k)))
        ones = pad(imp, imp.em.full((1, 1) + padded, 1, x.dtype), [0, 0] + [0] * len(k),
                   [0, 0] + over, 0)
    else:
        ones = pad(imp, imp.em.full((1, 1) + tuple(x.shape[2:]), 1, x.dtype), [0, 0] + p,
                   [0, 0] + [p[i] + over[i] for i in range(len(k))], 0)
    shape = (1, 1) + tuple(out)
    return _window(imp, [ones], [], shape, x.dtype, k, s, [1] * len(k),
                   imp.em.full(shape, 0, x.dtype),
                   lambda b, v, o: b.binary("add", v[0], o, x.dtype))


def _avg_args(args, kwargs):
    a = list(args[2:]) + [None] * 6
    stride = kwargs.get("stride", a[0])
    padding = kwargs.get("padding", a[1] if a[1] is not None else 0)
    ceil_mode = kwargs.get("ceil_mode", a[2] if a[2] is not None else False)
    include = kwargs.get("count_include_pad", a[3] if a[3] is not None else True)
    override = kwargs.get("divisor_override", a[4])
    return stride, padding, ceil_mode, include, override


def _divide(imp, v: Value, div) -> Value:
    dt = v.dtype
    if isinstance(div, float):
        return imp.em.elementwise(v.shape, dt, [v],
                                  lambda b, a: b.binary("div", a[0], b.const(div, dt), dt))
    return imp.em.elementwise(v.shape, dt, [v, div], lambda b, a: b.binary("div", a[0], a[1], dt))


@handles(aten.avg_pool2d.default, aten.avg_pool3d.default)
def _avg_pool2d(imp, node, args, kwargs):
    x, kernel = args[0], args[1]
    stride, padding, ceil_mode, include, override = _avg_args(args, kwargs)
    nd = _nd(node)
    k, s, p, d, out = _params(x, kernel, stride, padding, 1, ceil_mode, f"avg_pool{nd}d", nd,
                              partial=True)
    if not x.dtype.is_floating_point:
        raise UnsupportedOpError(f"avg_pool{nd}d on {x.dtype}")
    shape = (x.shape[0], x.shape[1]) + tuple(out)
    over = _overflow(x, k, s, p, out)
    xp = pad(imp, x, [0, 0] + p, [0, 0] + [p[i] + over[i] for i in range(nd)], 0)
    dt = x.dtype
    total = _window(imp, [xp], [], shape, dt, k, s, d, imp.em.full(shape, 0, dt),
                    lambda b, v, o: b.binary("add", v[0], o, dt))
    return _divide(imp, total, _avg_divisor(imp, x, k, s, p, out, include, override))


@handles(aten.avg_pool2d_backward.default, aten.avg_pool3d_backward.default)
def _avg_pool2d_backward(imp, node, args, kwargs):
    """grad input[h] = the sum over the windows holding h of the output
    gradient over the window's divisor."""
    gy, x, kernel = args[:3]
    stride, padding, ceil_mode, include, override = _avg_args(list(args[1:]), kwargs)
    nd = _nd(node)
    k, s, p, d, out = _params(x, kernel, stride, padding, 1, ceil_mode, f"avg_pool{nd}d_backward",
                              nd, partial=True)
    g = _divide(imp, gy, _avg_divisor(imp, x, k, s, p, out, include, override))
    dt = gy.dtype
    over = _overflow(x, k, s, p, out)
    # A ceil_mode partial last window: the gradient of an input lengthened
    # by the overflow (only its shape is read), then its rows of x.
    xs = x if not any(over) else Value(x.name, tuple(x.shape[:2]) + tuple(
        x.shape[2 + i] + over[i] for i in range(nd)), x.dtype)
    gx = _back_window(imp, [g], [0], xs, k, s, p, d,
                      lambda b, v, o, hit, tap: b.binary(
                          "add", b.select(hit, v[0], b.const(0.0, dt), dt), o, dt))
    if any(over):
        gx = imp.em.extract_slice(gx, [0] * x.rank, list(x.shape), [1] * x.rank)
    return gx
