"""The ops of transformers' default ``grouped_mm`` experts
(``transformers.integrations.moe.grouped_mm_experts_forward``, Mixtral's and
other MoE models' experts in transformers 5) beyond ``_grouped_mm`` itself:

- ``transformers::grouped_mm_fallback`` and its backward
  ``transformers::grouped_mm_fallback_backward``: the custom ops the
  experts call where ``torch._grouped_mm`` is not taken (under tracing,
  which runs as under ``torch.compile``, for weights other than bf16).
  Eager loops over the groups (``offs.tolist()``) and multiplies each
  group's rows by its expert (``torch.mm``), rows past ``offs[E-1]``
  zero; the op's shapes do not depend on the counts, so it is imported
  as ``_grouped_mm`` is (a contraction over the experts masked by each
  row's expert, ``grouped._row_groups``): the forward ``[R, K] x [E, K,
  N] -> [R, N]``, the input gradient ``[R, N] x [E, K, N]^T -> [R, K]``
  and the weight gradient ``[R, K]^T x [R, N] -> [E, K, N]``. Each
  expert loop splits like the weights' E (docs/Rules.md, "Expert
  parallelism").
- ``empty_permuted`` (``empty_like``'s decomposition, the inverse
  permutation's buffer): zeros of the traced shape, as ``empty_like``
  (the stride order is a layout, not a value).
- ``index_put`` without accumulation into dim 0 with one index tensor:
  the experts' inverse permutation ``inv[perm] = arange(S)``. The
  accumulating form stays ``indexing._index_put``'s.

These are custom ops of a library that registers them on import, possibly
after the importer: they are registered by their names
(``registry.handles`` with a string)."""

from __future__ import annotations

import torch

from ..body import Body
from ..registry import HANDLERS, _out, aten, handles
from ..values import UnsupportedOpError, Value, is_float
from .indexing import _bounds, checked_index  # (and its index_put handler, wrapped below)
from .grouped import _masked_term, _row_groups


def _check_operands(what: str, xs, dtype, offs: Value, experts: int):
    if any(not is_float(x.dtype) or x.dtype != dtype for x in xs):
        raise UnsupportedOpError(f"{what} of {[str(x.dtype) for x in xs]} -> {dtype} "
                                 "(one float dtype throughout)")
    if offs.shape != (experts,):
        raise UnsupportedOpError(f"{what} offs {list(offs.shape)} for {experts} groups")


def _rows_times_experts(imp, x: Value, w: Value, g: Value, transposed: bool, dtype) -> Value:
    """``out[r, n] = sum_{e, k} select(g[r] == e, x[r, k] * w[e, k, n], 0)``
    (``w[e, n, k]`` where ``transposed``); loops ``(r, n, e, k)``."""
    rows, n = x.shape[0], (w.shape[1] if transposed else w.shape[2])
    w_map = ["d2", "d1", "d3"] if transposed else ["d2", "d3", "d1"]
    return imp.em.generic(
        (rows, n), dtype, [(x, ["d0", "d3"]), (w, w_map), (g, ["d0"])],
        ["parallel", "parallel", "reduction", "reduction"], ["d0", "d1"],
        lambda b, a, out: _masked_term(b, 2, a[2], a[0], a[1], out, dtype),
        init=imp.em.full((rows, n), 0, dtype))


def _experts_weight_gradient(imp, x: Value, dy: Value, g: Value, experts: int, dtype) -> Value:
    """``out[e, k, n] = sum_r select(g[r] == e, x[r, k] * dy[r, n], 0)``
    (zero for an empty group); loops ``(e, k, n, r)``."""
    shape = (experts, x.shape[1], dy.shape[1])
    return imp.em.generic(
        shape, dtype, [(x, ["d3", "d1"]), (dy, ["d3", "d2"]), (g, ["d3"])],
        ["parallel", "parallel", "parallel", "reduction"], ["d0", "d1", "d2"],
        lambda b, a, out: _masked_term(b, 0, a[2], a[0], a[1], out, dtype),
        init=imp.em.full(shape, 0, dtype))


@handles("transformers.grouped_mm_fallback.default")
def _grouped_mm_fallback(imp, node, args, kwargs):
    """``grouped_mm_fallback(input [R, K], weight [E, K, N], offs [E])`` ->
    ``[R, N]``: row ``r`` times its group's ``weight[e]``, rows past
    ``offs[E-1]`` zero (as eager's zero-filled output)."""
    x, w = args[0], args[1]
    offs = args[2] if len(args) > 2 else kwargs["offs"]
    shape, dtype = _out(node)
    if x.rank != 2 or w.rank != 3:
        raise UnsupportedOpError(f"grouped_mm_fallback of {x.rank}-d x {w.rank}-d (2-d x 3-d)")
    _check_operands("grouped_mm_fallback", (x, w), dtype, offs, w.shape[0])
    return _rows_times_experts(imp, x, w, _row_groups(imp, offs, x.shape[0]), False, dtype)


@handles("transformers.grouped_mm_fallback_backward.default")
def _grouped_mm_fallback_backward(imp, node, args, kwargs):
    """``grouped_mm_fallback_backward(input, weight, offs, grad_output)`` ->
    ``(grad_input [R, K], grad_weight [E, K, N])``: ``grad_output`` times
    each row's ``weight[e]^T`` (rows past ``offs[E-1]`` zero) and each
    group's ``input^T grad_output`` (an empty group's zero). One row-group
    map serves both."""
    x, w, offs, dy = args[:4]
    dtype = node.meta["val"][0].dtype
    if x.rank != 2 or w.rank != 3 or dy.rank != 2:
        raise UnsupportedOpError(f"grouped_mm_fallback_backward of {x.rank}-d, {w.rank}-d, "
                                 f"{dy.rank}-d (2-d, 3-d, 2-d)")
    _check_operands("grouped_mm_fallback_backward", (x, w, dy), dtype, offs, w.shape[0])
    g = _row_groups(imp, offs, x.shape[0])
    return [_rows_times_experts(imp, dy, w, g, True, dtype),
            _experts_weight_gradient(imp, x, dy, g, w.shape[0], dtype)]


@handles(aten.empty_permuted.default)
def _empty_permuted(imp, node, args, kwargs):
    shape, dtype = _out(node)
    return imp.em.full(shape, 0, dtype)


def _index_put_overwrite(imp, node, args, kwargs):
    """``x[idx] = values`` into dim 0 with one index tensor: ``out[v] =
    values[i]`` for the last ``i`` (in index order) with ``idx[i] == v``
    (wrapped from the end where negative, as eager), ``x[v]`` where none
    is: a masked pass over the index's elements, no address taken from a
    value. An index outside ``[-n, n)`` fails the step's index check with
    eager's IndexError (``indexing.checked_index``)."""
    x, indices, values = args[0], args[1], args[2]
    if len(indices) != 1 or indices[0] is None or is_float(indices[0].dtype):
        raise UnsupportedOpError("index_put without accumulate other than into dim 0 with one "
                                 "integer index tensor")
    n = x.shape[0]
    idx = checked_index(imp, indices[0], n, True, "IndexError", _bounds(0, n))
    k, rest = idx.rank, x.rank - 1
    values = imp.em.broadcast_to(values, tuple(idx.shape) + tuple(x.shape[1:]))
    # Loops (v, rest..., i...): the index dims are a reduction whose
    # combiner keeps the latest hit.
    out_exprs = [f"d{i}" for i in range(1 + rest)]
    idx_exprs = [f"d{1 + rest + i}" for i in range(k)]
    val_exprs = idx_exprs + [f"d{1 + i}" for i in range(rest)]

    def body(b: Body, a, out):
        v = b.v("arith.index_cast " + b.v("linalg.index 0 : index") + " : index to i64")
        hit = b.compare("eq", b.cast(a[0], idx.dtype, torch.int64), v, torch.int64)
        return b.select(hit, b.cast(a[1], values.dtype, x.dtype), out, x.dtype)
    return imp.em.generic(x.shape, x.dtype, [(idx, idx_exprs), (values, val_exprs)],
                          ["parallel"] * (1 + rest) + ["reduction"] * k, out_exprs, body, init=x)


def _index_put(accumulating):
    def handler(imp, node, args, kwargs):
        accumulate = args[3] if len(args) > 3 else kwargs.get("accumulate", False)
        if accumulate:
            return accumulating(imp, node, args, kwargs)
        return _index_put_overwrite(imp, node, args, kwargs)
    handler.__doc__ = accumulating.__doc__
    return handler


for _op in (aten.index_put.default, aten._unsafe_index_put.default):
    HANDLERS[_op] = _index_put(HANDLERS[_op])
