"""Upsampling (``F.interpolate``) and padding by replication or reflection:
the backward of ``nearest`` and
``nearest-exact`` (1-, 2- and 3-d; their forward is PyTorch's decomposition,
an index) and of replication and reflection padding (``gather_backward``),
bit for bit with ATen's CPU kernels, and ``bilinear`` forward and
backward, with ATen's indices and weights (within a few ulps of eager: its
kernel's rounding order is not reproduced).

Each spatial dim's source indices and weights are computed here from the
sizes, as ATen computes them in the kernel's math type (f32 for f32, bf16
and f16; f64 for f64), and become constant tables the op reads with
``tensor.extract``:

- forward bilinear: ``(x[h0, w0] * w0l + x[h0, w1] * w1l) * h0l + (x[h1,
  w0] * w0l + x[h1, w1] * w1l) * h1l`` per output pixel;
- backward (a gather): each input pixel sums, over the output rows and
  columns that read it (a table per dim, padded with -1), the output
  gradient times the taps' weights, in the order ATen's kernel adds them
  into it (output rows, then columns, then the taps).
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..body import Body
from ..registry import _out, aten, handles
from ..values import UnsupportedOpError, Value, elem_type


def _math_type(dtype: torch.dtype):
    return np.float64 if dtype == torch.float64 else np.float32


def _scale(in_size: int, out_size: int, align_corners: bool, scale: Optional[float], t):
    """ATen's ``area_pixel_compute_scale``."""
    if align_corners:
        return t(in_size - 1) / t(out_size - 1) if out_size > 1 else t(0)
    if scale is not None and scale > 0:
        return t(1.0 / scale)  # in double, then the math type
    return t(in_size) / t(out_size)


def _nearest_sources(in_size: int, out_size: int, scale: Optional[float], exact: bool) -> List[int]:
    """ATen's ``nearest_idx`` / ``nearest_neighbor_exact_compute_source_index``
    (f32, as its CPU kernels compute them)."""
    t = np.float32
    s = _scale(in_size, out_size, False, scale, t)
    if out_size == in_size:
        return list(range(out_size))
    if not exact and out_size == 2 * in_size:
        return [o >> 1 for o in range(out_size)]
    src = []
    for o in range(out_size):
        v = (t(o) + t(0.5)) * s if exact else t(o) * s
        src.append(min(int(np.floor(v)), in_size - 1))
    return src


def _linear_taps(in_size: int, out_size: int, align_corners: bool, scale: Optional[float],
                 t) -> List[Tuple[int, int, float, float]]:
    """ATen's ``compute_source_index_and_lambda``: per output index (i0, i1,
    lambda0, lambda1) in the math type ``t``."""
    s = _scale(in_size, out_size, align_corners, scale, t)
    taps = []
    for o in range(out_size):
        if out_size == in_size:
            taps.append((o, o, t(1), t(0)))
            continue
        if align_corners:
            real = s * t(o)
        else:
            real = s * (t(o) + t(0.5)) - t(0.5)
            real = t(0) if real < 0 else real
        i0 = min(int(math.floor(real)), in_size - 1)
        l1 = t(min(max(real - t(i0), t(0)), t(1)))
        i1 = i0 + (1 if i0 < in_size - 1 else 0)
        taps.append((i0, i1, t(t(1) - l1), l1))
    return taps


def _const(imp, values, dtype: torch.dtype) -> Value:
    """A constant tensor of ``values`` (nested lists)."""
    t = torch.tensor(values, dtype=dtype)
    return imp._constant(t)


def _readers(sources_per_out: List[Sequence[int]], in_size: int) -> Tuple[List[List[int]], int]:
    """For each input index, the output indices that read it (ascending),
    padded with -1 to the longest."""
    readers: List[List[int]] = [[] for _ in range(in_size)]
    for o, srcs in enumerate(sources_per_out):
        for i in sorted(set(srcs)):
            readers[i].append(o)
    width = max(1, max(len(r) for r in readers))
    return [r + [-1] * (width - len(r)) for r in readers], width


@handles(aten.upsample_nearest1d_backward.default, aten.upsample_nearest2d_backward.default,
         aten.upsample_nearest3d_backward.default,
         aten._upsample_nearest_exact1d_backward.default,
         aten._upsample_nearest_exact2d_backward.default,
         aten._upsample_nearest_exact3d_backward.default)
def _nearest_backward(imp, node, args, kwargs):
    gy, out_size, in_size = args[0], list(args[1]), list(args[2])
    nd = len(out_size)
    scales = list(args[3:3 + nd]) + [None] * (nd - len(args[3:3 + nd]))
    exact = "exact" in str(node.target)
    shape, dtype = _out(node)
    sources = [_nearest_sources(in_size[2 + d], out_size[d], scales[d], exact) for d in range(nd)]
    return gather_backward(imp, gy, shape, dtype, sources)


def gather_backward(imp, gy: Value, shape, dtype: torch.dtype,
                    sources: List[List[int]]) -> Value:
    """The gradient of an op whose output element reads the input element
    at ``sources[d][o_d]`` along each of the last ``len(sources)`` dims
    (nearest upsampling, replication and reflection padding): each input
    element sums the output gradient of the outputs that read it, in
    output order (row-major), as ATen's kernels add them into it. The
    outputs reading an input index are a constant table per dim (padded
    with -1); the reduction runs over their slots."""
    nd = len(sources)
    tables, widths = [], []
    for d in range(nd):
        readers, width = _readers([[s] for s in sources[d]], shape[len(shape) - nd + d])
        tables.append(_const(imp, readers, torch.int64))
        widths.append(width)
    r = len(shape)
    lead = r - nd
    taps = imp.em.full(tuple(widths), 0, torch.int64)

    def body(b: Body, a, out):
        hit = None
        coords = [b.v(f"linalg.index {k} : index") for k in range(lead)]
        for d in range(nd):
            i = b.v(f"linalg.index {lead + d} : index")
            k = b.v(f"linalg.index {r + d} : index")
            o = b.v(f"tensor.extract {tables[d].name}[{i}, {k}] : {tables[d].type}")
            ok = b.compare("ge", o, b.const(0, torch.int64), torch.int64)
            hit = ok if hit is None else b.v(f"arith.andi {hit}, {ok} : i1")
            safe = b.select(ok, o, b.const(0, torch.int64), torch.int64)
            coords.append(b.v(f"arith.index_cast {safe} : i64 to index"))
        v = b.v(f"tensor.extract {gy.name}[{', '.join(coords)}] : {gy.type}")
        return b.select(hit, b.binary("add", out, v, dtype), out, dtype)
    return imp.em.generic(shape, dtype, [(taps, [f"d{r + d}" for d in range(nd)])],
                          ["parallel"] * r + ["reduction"] * nd, [f"d{k}" for k in range(r)],
                          body, init=imp.em.full(shape, 0, dtype))


def _pad_sources(in_size: int, low: int, out_size: int, reflect: bool) -> List[int]:
    """The input index each output index of a replication (reflection)
    padding reads."""
    src = []
    for o in range(out_size):
        i = o - low
        if reflect:
            i = -i if i < 0 else (2 * (in_size - 1) - i if i >= in_size else i)
        else:
            i = min(max(i, 0), in_size - 1)
        src.append(i)
    return src


@handles(aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
         aten.replication_pad3d_backward.default, aten.reflection_pad1d_backward.default,
         aten.reflection_pad2d_backward.default, aten.reflection_pad3d_backward.default)
def _pad_backward(imp, node, args, kwargs):
    """Replication and reflection padding's gradient (``gather_backward``),
    bit for bit with ATen's kernels."""
    gy, x, padding = args[0], args[1], list(args[2])
    shape, dtype = _out(node)
    nd = len(padding) // 2
    reflect = "reflection" in str(node.target)
    sources = []
    for d in range(nd):
        # padding pairs run from the last dim backwards
        k = nd - 1 - d
        low = padding[2 * k]
        sources.append(_pad_sources(x.shape[x.rank - nd + d], low, gy.shape[gy.rank - nd + d],
                                    reflect))
    return gather_backward(imp, gy, shape, dtype, sources)


def _bilinear_args(args, node):
    x = args[0]
    out_size = list(args[1])
    align = bool(args[2])
    scales = list(args[3:5]) + [None] * (2 - len(args[3:5]))
    return x, out_size, align, scales


@handles(aten.upsample_bilinear2d.default)
def _bilinear(imp, node, args, kwargs):
    x, out_size, align, scales = _bilinear_args(args, node)
    shape, dtype = _out(node)
    if x.rank != 4:
        raise UnsupportedOpError(f"upsample_bilinear2d of a {x.rank}-d tensor")
    t = _math_type(dtype)
    math_dtype = torch.float64 if t is np.float64 else torch.float32
    hs = _linear_taps(x.shape[2], out_size[0], align, scales[0], t)
    ws = _linear_taps(x.shape[3], out_size[1], align, scales[1], t)
    hidx = _const(imp, [[a, b] for a, b, _, _ in hs], torch.int64)
    widx = _const(imp, [[a, b] for a, b, _, _ in ws], torch.int64)
    # The weights are stored in the tensor's dtype (ATen's scalar_t) and
    # read in the math type.
    hw = _const(imp, [[float(l0), float(l1)] for _, _, l0, l1 in hs], dtype)
    ww = _const(imp, [[float(l0), float(l1)] for _, _, l0, l1 in ws], dtype)

    def body(b: Body, a, out):
        const = lambda v: b.v(f"arith.constant {v} : index")
        n, c, oh, ow = [b.v(f"linalg.index {k} : index") for k in range(4)]
        m = math_dtype

        def at(table, row, k):
            return b.v(f"tensor.extract {table.name}[{row}, {const(k)}] : {table.type}")

        def idx(table, row, k):
            return b.v(f"arith.index_cast {at(table, row, k)} : i64 to index")

        def weight(table, row, k):
            return b.cast(at(table, row, k), dtype, m)

        def px(h, w):
            v = b.v(f"tensor.extract {x.name}[{n}, {c}, {h}, {w}] : {x.type}")
            return b.cast(v, x.dtype, m)
        w0, w1 = idx(widx, ow, 0), idx(widx, ow, 1)
        w0l, w1l = weight(ww, ow, 0), weight(ww, ow, 1)
        rows = []
        for k in (0, 1):
            h = idx(hidx, oh, k)
            inner = b.binary("add", b.binary("mul", px(h, w0), w0l, m),
                             b.binary("mul", px(h, w1), w1l, m), m)
            rows.append(b.binary("mul", inner, weight(hw, oh, k), m))
        return b.cast(b.binary("add", rows[0], rows[1], m), m, dtype)
    return imp.em.generic(shape, dtype, [], ["parallel"] * 4, [f"d{k}" for k in range(4)], body)


@handles(aten.upsample_bilinear2d_backward.default)
def _bilinear_backward(imp, node, args, kwargs):
    """Each input pixel sums, over the output rows and columns whose taps
    read it, ``(h_lambda * w_lambda) * grad`` for each of the four taps
    that reads it, in ATen's order: output rows, columns, then the taps
    (h0 w0, h0 w1, h1 w0, h1 w1)."""
    gy, out_size, in_size = args[0], list(args[1]), list(args[2])
    align = bool(args[3])
    scales = list(args[4:6]) + [None] * (2 - len(args[4:6]))
    shape, dtype = _out(node)
    t = _math_type(dtype)
    m = torch.float64 if t is np.float64 else torch.float32
    hs = _linear_taps(in_size[2], out_size[0], align, scales[0], t)
    ws = _linear_taps(in_size[3], out_size[1], align, scales[1], t)
    hread, hwidth = _readers([(a, b) for a, b, _, _ in hs], in_size[2])
    wread, wwidth = _readers([(a, b) for a, b, _, _ in ws], in_size[3])
    tables = {
        "hread": _const(imp, hread, torch.int64), "wread": _const(imp, wread, torch.int64),
        "hidx": _const(imp, [[a, b] for a, b, _, _ in hs], torch.int64),
        "widx": _const(imp, [[a, b] for a, b, _, _ in ws], torch.int64),
        "hw": _const(imp, [[float(l0), float(l1)] for _, _, l0, l1 in hs], dtype),
        "ww": _const(imp, [[float(l0), float(l1)] for _, _, l0, l1 in ws], dtype),
    }
    taps = imp.em.full((hwidth, wwidth), 0, torch.int64)
    acc_dtype = m

    def body(b: Body, a, out):
        const = lambda v: b.v(f"arith.constant {v} : index")
        n, c, ih, iw, kh, kw = [b.v(f"linalg.index {k} : index") for k in range(6)]

        def at(name, row, col):
            tb = tables[name]
            return b.v(f"tensor.extract {tb.name}[{row}, {col}] : {tb.type}")
        oh = at("hread", ih, kh)
        ow = at("wread", iw, kw)
        zero = b.const(0, torch.int64)
        valid = b.v(f"arith.andi {b.compare('ge', oh, zero, torch.int64)}, "
                    f"{b.compare('ge', ow, zero, torch.int64)} : i1")
        ohx = b.v(f"arith.index_cast {b.select(valid, oh, zero, torch.int64)} : i64 to index")
        owx = b.v(f"arith.index_cast {b.select(valid, ow, zero, torch.int64)} : i64 to index")
        g = b.cast(b.v(f"tensor.extract {gy.name}[{n}, {c}, {ohx}, {owx}] : {gy.type}"), gy.dtype, m)
        ih64 = b.v(f"arith.index_cast {ih} : index to i64")
        iw64 = b.v(f"arith.index_cast {iw} : index to i64")
        acc = out
        for p in (0, 1):
            hp = b.compare("eq", at("hidx", ohx, const(p)), ih64, torch.int64)
            hl = b.cast(at("hw", ohx, const(p)), dtype, m)
            for q in (0, 1):
                wq = b.compare("eq", at("widx", owx, const(q)), iw64, torch.int64)
                wl = b.cast(at("ww", owx, const(q)), dtype, m)
                hit = b.v(f"arith.andi {valid}, {b.v(f'arith.andi {hp}, {wq} : i1')} : i1")
                term = b.binary("mul", b.binary("mul", hl, wl, m), g, m)
                acc = b.select(hit, b.binary("add", acc, term, m), acc, m)
        return acc
    res = imp.em.generic(shape, acc_dtype, [(taps, ["d4", "d5"])],
                         ["parallel"] * 4 + ["reduction"] * 2, [f"d{k}" for k in range(4)], body,
                         init=imp.em.full(shape, 0, acc_dtype))
    return imp.em.cast(res, dtype)
