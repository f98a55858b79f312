"""Adaptive pooling of any output size (2-d; 1-d lifts to it): average and
max, forward and backward, as ATen's CPU kernels compute them.

Output index ``o`` of a dim pools the input window ``[floor(o * in / out),
ceil((o + 1) * in / out))``; the windows' starts and lengths are constant
tables read with ``tensor.extract``:

- average: the window's sum in the math type, row-major, then ``/ kh / kw``
  (ATen divides twice); its backward gives each input the sum of
  ``grad / kh / kw`` over the outputs whose windows hold it, in output order;
- max: the first maximum in row-major order, a NaN winning (``val > max or
  isnan(val)``), its index ``ih * W + iw``; its backward gives each input the
  sum of the output gradients whose index is it, in output order.

Bit for bit with eager (``python/tests/test_adaptive_pool.py``)."""

from __future__ import annotations

from typing import List, Tuple

import torch

from ..body import Body
from ..registry import _out, aten, handles
from ..values import Value


def _windows(in_size: int, out_size: int) -> List[Tuple[int, int]]:
    """(start, length) of each output index's window (ATen's start_index and
    end_index)."""
    res = []
    for o in range(out_size):
        start = (o * in_size) // out_size
        end = -((-(o + 1) * in_size) // out_size)
        res.append((start, end - start))
    return res


def _holders(windows: List[Tuple[int, int]], in_size: int) -> List[List[int]]:
    """For each input index, the output indices whose windows hold it
    (ascending), padded with -1 to the longest."""
    lists: List[List[int]] = [[] for _ in range(in_size)]
    for o, (start, length) in enumerate(windows):
        for i in range(start, start + length):
            lists[i].append(o)
    width = max(1, max(len(x) for x in lists))
    return [x + [-1] * (width - len(x)) for x in lists]


def _table(imp, rows) -> Value:
    return imp._constant(torch.tensor(rows, dtype=torch.int64))


def _forward_windows(imp, x: Value, out_size):
    """The windows of each output row and column (``_windows``), their
    tables, and an operand over the longest window's slots (the
    reduction's extent)."""
    (h, w) = x.shape[-2:]
    hw, ww = _windows(h, out_size[0]), _windows(w, out_size[1])
    ht, wt = _table(imp, [list(t) for t in hw]), _table(imp, [list(t) for t in ww])
    taps = imp.em.full((max(n for _, n in hw), max(n for _, n in ww)), 0, torch.int64)
    return hw, ww, ht, wt, taps


def _math(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


class _Ctx:
    """Index helpers inside a body."""

    def __init__(self, b: Body):
        self.b = b

    def const(self, v):
        return self.b.v(f"arith.constant {v} : index")

    def at(self, table: Value, *coords):
        return self.b.v(f"tensor.extract {table.name}[{', '.join(coords)}] : {table.type}")

    def index(self, v64):
        return self.b.v(f"arith.index_cast {v64} : i64 to index")

    def loop(self, d):
        return self.b.v(f"linalg.index {d} : index")

    def window_element(self, x: Value, ht: Value, wt: Value, lead: int, r: int):
        """In a forward's reduction over each output's window (loops: the
        output's ``r`` dims, then the window's row and column slots):
        whether the slot is inside the window, the input row and column
        (i64), and the element there (the window's first where outside)."""
        b = self.b
        outer = [self.loop(d) for d in range(lead)]
        oh, ow, i, j = self.loop(lead), self.loop(lead + 1), self.loop(r), self.loop(r + 1)
        h0, nh = self.at(ht, oh, self.const(0)), self.at(ht, oh, self.const(1))
        w0, nw = self.at(wt, ow, self.const(0)), self.at(wt, ow, self.const(1))
        i64, j64 = (b.v(f"arith.index_cast {v} : index to i64") for v in (i, j))
        inside = b.v(f"arith.andi {b.compare('lt', i64, nh, torch.int64)}, "
                     f"{b.compare('lt', j64, nw, torch.int64)} : i1")
        zero = b.const(0, torch.int64)
        ih = b.binary("add", h0, b.select(inside, i64, zero, torch.int64), torch.int64)
        iw = b.binary("add", w0, b.select(inside, j64, zero, torch.int64), torch.int64)
        coords = ", ".join(outer + [self.index(ih), self.index(iw)])
        return inside, ih, iw, b.v(f"tensor.extract {x.name}[{coords}] : {x.type}")

    def holder(self, hh: Value, wh: Value, lead: int, r: int):
        """In a backward's gather over the outputs holding each input
        (loops: the input's ``r`` dims, then the two holder slots): the
        leading coordinates, the input row and column (index), whether
        the slots name outputs, and those outputs' row and column (index,
        0 where they do not)."""
        b = self.b
        outer = [self.loop(d) for d in range(lead)]
        ih, iw = self.loop(lead), self.loop(lead + 1)
        oh, ow = self.at(hh, ih, self.loop(r)), self.at(wh, iw, self.loop(r + 1))
        zero = b.const(0, torch.int64)
        valid = b.v(f"arith.andi {b.compare('ge', oh, zero, torch.int64)}, "
                    f"{b.compare('ge', ow, zero, torch.int64)} : i1")
        ohx = self.index(b.select(valid, oh, zero, torch.int64))
        owx = self.index(b.select(valid, ow, zero, torch.int64))
        return outer, ih, iw, valid, ohx, owx


@handles(aten._adaptive_avg_pool2d.default)
def _adaptive_avg(imp, node, args, kwargs):
    x, out_size = args[0], list(args[1])
    shape, dtype = _out(node)
    lead = x.rank - 2
    hw, ww, ht, wt, taps = _forward_windows(imp, x, out_size)
    m = _math(dtype)
    r = len(shape)

    def body(b: Body, a, out):
        inside, _, _, v = _Ctx(b).window_element(x, ht, wt, lead, r)
        v = b.cast(v, dtype, m)
        return b.select(inside, b.binary("add", out, v, m), out, m)
    total = imp.em.generic(shape, m, [(taps, [f"d{r}", f"d{r + 1}"])],
                           ["parallel"] * r + ["reduction"] * 2, [f"d{d}" for d in range(r)],
                           body, init=imp.em.full(shape, 0, m))
    counts_h = imp._constant(torch.tensor([n for _, n in hw], dtype=torch.int64))
    counts_w = imp._constant(torch.tensor([n for _, n in ww], dtype=torch.int64))

    def divide(b: Body, a, out):
        c = _Ctx(b)
        nh = b.cast(c.at(counts_h, c.loop(lead)), torch.int64, m)
        nw = b.cast(c.at(counts_w, c.loop(lead + 1)), torch.int64, m)
        return b.cast(b.binary("div", b.binary("div", a[0], nh, m), nw, m), m, dtype)
    loops = [f"d{d}" for d in range(r)]
    return imp.em.generic(shape, dtype, [(total, loops)], ["parallel"] * r, loops, divide)


@handles(aten._adaptive_avg_pool2d_backward.default)
def _adaptive_avg_backward(imp, node, args, kwargs):
    gy, x = args[0], args[1]
    shape, dtype = _out(node)
    lead = x.rank - 2
    (h, w), (oh_n, ow_n) = x.shape[-2:], gy.shape[-2:]
    hw, ww = _windows(h, oh_n), _windows(w, ow_n)
    hh, wh = _table(imp, _holders(hw, h)), _table(imp, _holders(ww, w))
    counts_h = imp._constant(torch.tensor([n for _, n in hw], dtype=torch.int64))
    counts_w = imp._constant(torch.tensor([n for _, n in ww], dtype=torch.int64))
    m = _math(dtype)
    taps = imp.em.full((hh.shape[1], wh.shape[1]), 0, torch.int64)
    r = len(shape)

    def body(b: Body, a, out):
        c = _Ctx(b)
        outer, ih, iw, valid, ohx, owx = c.holder(hh, wh, lead, r)
        g = b.cast(b.v(f"tensor.extract {gy.name}[{', '.join(outer + [ohx, owx])}] : {gy.type}"),
                   gy.dtype, m)
        nh = b.cast(c.at(counts_h, ohx), torch.int64, m)
        nw = b.cast(c.at(counts_w, owx), torch.int64, m)
        delta = b.binary("div", b.binary("div", g, nh, m), nw, m)
        return b.select(valid, b.binary("add", out, delta, m), out, m)
    total = imp.em.generic(shape, m, [(taps, [f"d{r}", f"d{r + 1}"])],
                           ["parallel"] * r + ["reduction"] * 2, [f"d{d}" for d in range(r)],
                           body, init=imp.em.full(shape, 0, m))
    return imp.em.cast(total, dtype)


@handles(aten.adaptive_max_pool2d.default)
def _adaptive_max(imp, node, args, kwargs):
    x, out_size = args[0], list(args[1])
    (shape, dtype) = tuple(int(s) for s in node.meta["val"][0].shape), x.dtype
    lead = x.rank - 2
    w = x.shape[-1]
    hw, ww, ht, wt, taps = _forward_windows(imp, x, out_size)
    r = len(shape)
    em = imp.em
    init_v = em.full(shape, float("-inf") if dtype.is_floating_point else torch.iinfo(dtype).min,
                     dtype)
    # The window's first element until a value beats -inf (ATen's start).
    starts = imp._constant(torch.tensor([[s0 * w + s1 for s1, _ in ww] for s0, _ in hw],
                                        dtype=torch.int64))
    init_i = em.broadcast_to(starts, shape)

    def body(b: Body, a, ov, oi):
        inside, ih, iw, v = _Ctx(b).window_element(x, ht, wt, lead, r)
        better = b.compare("gt", v, ov, dtype)
        nan = b.is_nan(v, dtype)
        if nan is not None:
            better = b.v(f"arith.ori {better}, {nan} : i1")
        take = b.v(f"arith.andi {inside}, {better} : i1")
        flat = b.binary("add", b.binary("mul", ih, b.const(w, torch.int64), torch.int64), iw,
                        torch.int64)
        return b.select(take, v, ov, dtype), b.select(take, flat, oi, torch.int64)
    return em.value_index_generic(taps, [f"d{r}", f"d{r + 1}"], init_v, init_i,
                                  ["parallel"] * r + ["reduction"] * 2,
                                  [f"d{d}" for d in range(r)], body)


@handles(aten.adaptive_max_pool2d_backward.default)
def _adaptive_max_backward(imp, node, args, kwargs):
    gy, x, indices = args[0], args[1], args[2]
    shape, dtype = _out(node)
    lead = x.rank - 2
    (h, w), (oh_n, ow_n) = x.shape[-2:], gy.shape[-2:]
    hh = _table(imp, _holders(_windows(h, oh_n), h))
    wh = _table(imp, _holders(_windows(w, ow_n), w))
    taps = imp.em.full((hh.shape[1], wh.shape[1]), 0, torch.int64)
    r = len(shape)

    def body(b: Body, a, out):
        c = _Ctx(b)
        outer, ih, iw, valid, ohx, owx = c.holder(hh, wh, lead, r)
        coords = ", ".join(outer + [ohx, owx])
        picked = b.v(f"tensor.extract {indices.name}[{coords}] : {indices.type}")
        here = b.binary("add", b.binary("mul", b.v(f"arith.index_cast {ih} : index to i64"),
                                        b.const(w, torch.int64), torch.int64),
                        b.v(f"arith.index_cast {iw} : index to i64"), torch.int64)
        hit = b.v(f"arith.andi {valid}, {b.compare('eq', picked, here, torch.int64)} : i1")
        g = b.v(f"tensor.extract {gy.name}[{coords}] : {gy.type}")
        return b.select(hit, b.binary("add", out, g, dtype), out, dtype)
    return imp.em.generic(shape, dtype, [(taps, [f"d{r}", f"d{r + 1}"])],
                          ["parallel"] * r + ["reduction"] * 2, [f"d{d}" for d in range(r)],
                          body, init=imp.em.full(shape, 0, dtype))
