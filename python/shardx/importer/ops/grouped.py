"""Grouped matmuls and counting: ``_grouped_mm`` (torchtitan's dropless
experts: rows sorted by expert, ``offs`` the groups' end offsets) as a
contraction over the experts masked by each row's expert, and
``bincount``/``histc`` (the tokens per expert) as masked counts. No op of
its own needs a sharding rule: each is a ``linalg.generic`` whose expert
loop the generic rules split (docs/Rules.md, "Expert parallelism")."""

from __future__ import annotations

import torch

from ..body import Body
from ..registry import _out, aten, handles
from ..values import UnsupportedOpError, Value, _prod, elem_type, is_float


def _row_groups(imp, offs: Value, rows: int) -> Value:
    """``g[r]`` = the number of groups whose end ``offs[e] <= r``: row
    ``r``'s group (``offs[e-1] <= r < offs[e]``), ``E`` for a row past the
    last end (which no group then selects). An i64 ``[rows]``."""
    if offs.rank != 1 or is_float(offs.dtype):
        raise UnsupportedOpError(f"_grouped_mm offs of {offs.rank} dims and {offs.dtype} "
                                 "(a 1-d integer tensor)")

    def body(b: Body, a, out):
        r = b.v("arith.index_cast " + b.v("linalg.index 0 : index") + " : index to i64")
        end = b.cast(a[0], offs.dtype, torch.int64)
        ended = b.compare("le", end, r, torch.int64)
        return b.binary("add", out, b.cast(ended, torch.bool, torch.int64), torch.int64)
    return imp.em.generic((rows,), torch.int64, [(offs, ["d1"])], ["parallel", "reduction"], ["d0"],
                          body, init=imp.em.full((rows,), 0, torch.int64))


def _masked_term(b: Body, e_loop: int, group: str, x: str, y: str, acc: str, dtype) -> str:
    """``acc + select(group == e, x * y, 0)``: a select, not a product with
    a mask, so another expert's inf or NaN never reaches the sum."""
    e = b.v(f"linalg.index {e_loop} : index")
    hit = b.v(f"arith.cmpi eq, {e}, {b.v(f'arith.index_cast {group} : i64 to index')} : index")
    term = b.select(hit, b.binary("mul", x, y, dtype), b.const(0, dtype), dtype)
    return b.binary("add", acc, term, dtype)


@handles(aten._grouped_mm.default)
def _grouped_mm(imp, node, args, kwargs):
    """``_grouped_mm(x, w, offs)``:

    - ``x [R, K]``, ``w [E, K, N]`` -> ``[R, N]``: row ``r`` times its
      group's ``w[e]``: ``out[r, n] = sum_{e, k} select(g[r] == e,
      x[r, k] * w[e, k, n], 0)`` (the forward, and the input gradient with
      ``w`` transposed);
    - ``x [K, R]``, ``w [R, N]`` -> ``[E, K, N]``: each group's rows'
      product: ``out[e, k, n] = sum_r select(g[r] == e, x[k, r] *
      w[r, n], 0)`` (the weight gradient);
    - ``x [E, M, K]``, ``w [E, K, N]`` without offs: a batched matmul.

    Loops ``(r, n, e, k)`` and ``(e, k, n, r)``: the expert loop ``e``
    splits like the weights' E (each rank runs its experts; ``out`` of the
    first form is then Partial(sum)). Rows past ``offs[E-1]`` are zero."""
    x, w = args[0], args[1]
    offs = args[2] if len(args) > 2 else kwargs.get("offs")
    bias = args[3] if len(args) > 3 else kwargs.get("bias")
    shape, dtype = _out(node)
    if bias is not None:
        raise UnsupportedOpError("_grouped_mm with a bias")
    if not is_float(x.dtype) or x.dtype != w.dtype or dtype != x.dtype:
        raise UnsupportedOpError(f"_grouped_mm of {x.dtype} x {w.dtype} -> {dtype} "
                                 "(one float dtype throughout)")
    if offs is None:
        if x.rank == 3 and w.rank == 3:
            return imp.em.matmul(x, w, dtype)
        raise UnsupportedOpError(f"_grouped_mm of {x.rank}-d x {w.rank}-d without offs")
    if x.rank == 2 and w.rank == 3:
        rows, experts = x.shape[0], w.shape[0]
        if offs.shape != (experts,):
            raise UnsupportedOpError(f"_grouped_mm offs {list(offs.shape)} for {experts} groups")
        g = _row_groups(imp, offs, rows)
        return imp.em.generic(
            shape, dtype, [(x, ["d0", "d3"]), (w, ["d2", "d3", "d1"]), (g, ["d0"])],
            ["parallel", "parallel", "reduction", "reduction"], ["d0", "d1"],
            lambda b, a, out: _masked_term(b, 2, a[2], a[0], a[1], out, dtype),
            init=imp.em.full(shape, 0, dtype))
    if x.rank == 2 and w.rank == 2:
        rows = x.shape[1]
        g = _row_groups(imp, offs, rows)
        return imp.em.generic(
            shape, dtype, [(x, ["d1", "d3"]), (w, ["d3", "d2"]), (g, ["d3"])],
            ["parallel", "parallel", "parallel", "reduction"], ["d0", "d1", "d2"],
            lambda b, a, out: _masked_term(b, 0, a[2], a[0], a[1], out, dtype),
            init=imp.em.full(shape, 0, dtype))
    raise UnsupportedOpError(f"_grouped_mm of {x.rank}-d x {w.rank}-d with offs "
                             "(2-d x 3-d and 2-d x 2-d are imported)")


def _count(imp, shape, dtype, bins: Value) -> Value:
    """``out[b]`` = the number of elements of the i64 ``bins`` equal to ``b``
    (a masked sum over them)."""
    def body(b: Body, a, out):
        slot = b.v("arith.index_cast " + b.v("linalg.index 0 : index") + " : index to i64")
        hit = b.compare("eq", a[0], slot, torch.int64)
        return b.binary("add", out, b.select(hit, b.const(1, dtype), b.const(0, dtype), dtype), dtype)
    return imp.em.generic(shape, dtype, [(bins, ["d1"])], ["parallel", "reduction"], ["d0"], body,
                          init=imp.em.full(shape, 0, dtype))


@handles(aten.bincount.default)
def _bincount(imp, node, args, kwargs):
    """Counts of each value of a 1-d integer tensor, ``minlength`` of them.
    The output's length must be ``minlength``: a longer traced one came
    from the traced values (``max + 1``), which the compiled program, reused
    for other values of the same shape, would keep. At run time a value
    outside ``[0, minlength)`` is counted nowhere and fails a check of the
    program (``indexing.record_check``): eager raises for a negative one
    and lengthens the output for a larger one, which the compiled program
    cannot."""
    x = args[0]
    weights = args[1] if len(args) > 1 else kwargs.get("weights")
    minlength = args[2] if len(args) > 2 else kwargs.get("minlength", 0)
    shape, dtype = _out(node)
    if weights is not None:
        raise UnsupportedOpError("bincount with weights")
    if x.rank != 1 or is_float(x.dtype):
        raise UnsupportedOpError("bincount of other than a 1-d integer tensor")
    if shape[0] != max(minlength, 0):
        raise UnsupportedOpError(
            f"bincount whose length {shape[0]} comes from the traced values (minlength "
            f"{minlength}): the compiled program keeps it for other values; pass minlength "
            "(one more than the largest value)")
    from .indexing import record_check
    t = x.dtype
    record_check(imp, imp.em.elementwise(x.shape, torch.bool, [x],
                                         lambda b, v: b.compare("ge", v[0], b.const(0, t), t)),
                 "RuntimeError", "bincount only supports 1-d non-negative integral inputs.")
    record_check(imp, imp.em.elementwise(x.shape, torch.bool, [x],
                                         lambda b, v: b.compare("lt", v[0], b.const(shape[0], t), t)),
                 "RuntimeError", f"bincount: a value >= minlength {shape[0]} (eager returns a longer "
                 "result; the compiled program's length is fixed: pass a larger minlength)")
    return _count(imp, shape, dtype, imp.em.cast(x, torch.int64))


@handles(aten.histc.default)
def _histc(imp, node, args, kwargs):
    """``histc(x, bins, min, max)`` as PyTorch's CPU kernel bins it: element
    ``v`` in ``[min, max]`` goes to ``int((v - min) * bins / (max - min))``
    (computed in ``x``'s dtype, ``min`` and ``max`` rounded to it first, as
    the kernel's bin edges are; ``max`` itself to the last bin), others
    (NaN too) to none. A range taken from the data (``min == max``) is not
    imported."""
    x = args[0]
    bins = args[1] if len(args) > 1 else kwargs.get("bins", 100)
    lo = args[2] if len(args) > 2 else kwargs.get("min", 0)
    hi = args[3] if len(args) > 3 else kwargs.get("max", 0)
    shape, dtype = _out(node)
    if not is_float(x.dtype):
        raise UnsupportedOpError(f"histc of {x.dtype}")
    if not lo < hi:
        raise UnsupportedOpError(f"histc with min {lo} >= max {hi} (a range from the data)")
    t = x.dtype
    flat = imp.em.reshape(x, [_prod(x.shape)])

    def pos(b: Body, v):
        a = v[0]
        s = b.binary("div", b.binary("mul", b.binary("sub", a, b.const(lo, t), t), b.const(bins, t), t),
                     b.binary("sub", b.const(hi, t), b.const(lo, t), t), t)
        p = b.v(f"arith.fptosi {s} : {elem_type(t)} to i64")
        last = b.const(bins - 1, torch.int64)
        p = b.select(b.compare("gt", p, last, torch.int64), last, p, torch.int64)
        inside = b.v(f"arith.andi {b.compare('ge', a, b.const(lo, t), t)}, "
                     f"{b.compare('le', a, b.const(hi, t), t)} : i1")
        return b.select(inside, p, b.const(-1, torch.int64), torch.int64)
    bin_of = imp.em.elementwise(flat.shape, torch.int64, [flat], pos)
    return _count(imp, shape, dtype, bin_of)

