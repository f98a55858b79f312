"""Contractions: ``mm``/``bmm``/``addmm`` as ``linalg.matmul`` and
``linalg.batch_matmul``; 2-d convolutions (NCHW, groups 1) and their
backward as ``linalg.conv_2d_nchw_fchw`` on a ``tensor.pad``ded input, 3-d
ones (NCDHW) as ``linalg.conv_3d_ncdhw_fcdhw`` the same way; 1-d
convolutions (NCL) as 2-d ones of a unit H."""

from __future__ import annotations

from typing import List

from ..registry import _ew, _out, aten, handles
from ..values import UnsupportedOpError, Value, tensor_type
from .shape import _j, insert_slice, pad


@handles(aten.mm.default, aten.bmm.default)
def _mm(imp, node, args, kwargs):
    _, dtype = _out(node)
    return imp.em.matmul(args[0], args[1], dtype)


@handles(aten.addmm.default)
def _addmm(imp, node, args, kwargs):
    bias, a, b = args[:3]
    beta = kwargs.get("beta", 1)
    alpha = kwargs.get("alpha", 1)
    shape, dtype = _out(node)
    m = imp.em.matmul(a, b, dtype)

    def fn(bd, v, t):
        x = v[0] if alpha == 1 else bd.binary("mul", v[0], bd.const(alpha, t), t)
        y = v[1] if beta == 1 else bd.binary("mul", v[1], bd.const(beta, t), t)
        return bd.binary("add", x, y, t), None
    return _ew(imp, node, [m, bias], fn)


def _conv_params(x: Value, w: Value, stride, padding, dilation, transposed, groups):
    if transposed:
        raise UnsupportedOpError("transposed convolution")
    if groups != 1:
        raise UnsupportedOpError(f"grouped convolution (groups={groups})")
    if x.rank not in (4, 5):
        raise UnsupportedOpError(
            f"{x.rank - 2}-d convolution (only 1-d NCL, 2-d NCHW and 3-d NCDHW)")
    if isinstance(padding, str):
        raise UnsupportedOpError(f"padding={padding!r}")
    nd = x.rank - 2
    sp = lambda v: list(v) * nd if len(v) == 1 else list(v)
    return sp(stride), sp(padding), sp(dilation)


# The named linalg convolution of each spatial rank (NC + spatial dims,
# FC + kernel dims): its input index is ``s * o + d * k`` per spatial dim, a
# windowed dim of the generic rule (docs/Rules.md, "Windowed ops").
_CONV_OPS = {2: "conv_2d_nchw_fchw", 3: "conv_3d_ncdhw_fcdhw"}


def conv2d(imp, x: Value, w: Value, stride, dilation, out_shape, dtype) -> Value:
    """``linalg.conv_2d_nchw_fchw`` (``linalg.conv_3d_ncdhw_fcdhw`` for
    NCDHW) of an already padded input."""
    nd = len(stride)
    acc = imp.em.full(out_shape, 0, dtype)
    t = tensor_type(out_shape, dtype)
    name = imp.em.emit(
        f"linalg.{_CONV_OPS[nd]} {{dilations = dense<[{_j(dilation)}]> : tensor<{nd}xi64>, "
        f"strides = dense<[{_j(stride)}]> : tensor<{nd}xi64>}} ins({x.name}, {w.name} : {x.type}, "
        f"{w.type}) outs({acc.name} : {t}) -> {t}")
    return Value(name, tuple(out_shape), dtype)


def _flipped(imp, w: Value) -> Value:
    """``wt[c, f, i, j, ...] = w[f, c, kh - 1 - i, kw - 1 - j, ...]``: the
    weight of the input gradient's convolution."""
    f, c = w.shape[:2]
    ks = w.shape[2:]
    taps = [f"-d{2 + i} + {k - 1}" for i, k in enumerate(ks)]
    loops = [f"d{i}" for i in range(w.rank)]
    return imp.em.generic((c, f) + tuple(ks), w.dtype, [(w, ["d1", "d0"] + taps)],
                          ["parallel"] * w.rank, loops, lambda b, a, o: a[0])


def _lift_1d(imp, values, stride, padding, dilation):
    """A 1-d convolution (NCL) as a 2-d one of a unit H (NC1L): each 3-d
    value gets a unit dim 2, the parameters a stride 1, padding 0 and
    dilation 1 for it. The L dim is then the 2-d convolution's W, a
    windowed dim like it (docs/Rules.md, "Windowed ops")."""
    lifted = [v if v is None or v.rank != 3 else imp.em.reshape(v, [v.shape[0], v.shape[1], 1, v.shape[2]])
              for v in values]
    one = lambda v, pad: [pad] + (list(v) if isinstance(v, (list, tuple)) else [v])
    return lifted, one(stride, 1), one(padding, 0), one(dilation, 1)


def _drop_unit(imp, v: Value) -> Value:
    return imp.em.reshape(v, [v.shape[0], v.shape[1], v.shape[3]])


@handles(aten.convolution.default)
def _convolution(imp, node, args, kwargs):
    x, w, bias, stride, padding, dilation, transposed, _, groups = args[:9]
    shape, dtype = _out(node)
    one_d = x.rank == 3 and not transposed and groups == 1 and not isinstance(padding, str)
    if one_d:
        (x, w), stride, padding, dilation = _lift_1d(imp, [x, w], stride, padding, dilation)
        shape = (shape[0], shape[1], 1, shape[2])
    stride, padding, dilation = _conv_params(x, w, stride, padding, dilation, transposed, groups)
    xp = pad(imp, x, [0, 0] + padding, [0, 0] + padding, 0)
    y = conv2d(imp, xp, w, stride, dilation, shape, dtype)
    if bias is not None:
        b = imp.em.reshape(bias, [bias.shape[0]] + [1] * (len(shape) - 2))
        y = imp.em.elementwise(shape, dtype, [y, b], lambda bd, v: bd.binary("add", v[0], v[1], dtype))
    return _drop_unit(imp, y) if one_d else y


@handles(aten.convolution_backward.default)
def _convolution_backward(imp, node, args, kwargs):
    """grad input: the stride-dilated, padded output gradient convolved with
    the flipped, transposed weight; grad weight: the padded input convolved
    with the output gradient (stride and dilation swap roles); grad bias: a
    sum."""
    gy, x, w, _, stride, padding, dilation, transposed, _, groups, mask = args[:11]
    if x.rank == 3 and not transposed and groups == 1:
        (gy, x, w), stride, padding, dilation = _lift_1d(imp, [gy, x, w], stride, padding, dilation)
        res = _convolution_backward(imp, node, [gy, x, w, None, stride, padding, dilation, transposed,
                                                None, groups, mask], kwargs)
        return [r if r is None or r.rank != 4 else _drop_unit(imp, r) for r in res]
    s, p, d = _conv_params(x, w, stride, padding, dilation, transposed, groups)
    nd = len(s)
    n, c = x.shape[:2]
    f, ks = w.shape[0], w.shape[2:]
    rows, out = x.shape[2:], gy.shape[2:]
    dtype = gy.dtype
    res: List = [None, None, None]
    ext = [d[i] * (ks[i] - 1) for i in range(nd)]
    q = [ext[i] - p[i] for i in range(nd)]
    if mask[0] and s == [1] * nd and min(q) >= 0:
        # Stride 1: the output gradient padded by q convolved with the
        # flipped weight is the input gradient, a windowed op whose rows
        # split like the input's (docs/Rules.md, "Windowed ops").
        z = pad(imp, gy, [0, 0] + q, [0, 0] + q, 0)
        res[0] = conv2d(imp, z, _flipped(imp, w), [1] * nd, d, x.shape, dtype)
    elif mask[0] and min(q) >= 0 and all(rows[i] + p[i] >= s[i] * out[i] for i in range(nd)):
        # Stride s: the output gradient inserted at stride s (from row q)
        # into zeros of the input's rows plus the kernel's extent, convolved
        # with the flipped weight at stride 1: a strided insert and a
        # stride-1 window, both windowed ops (docs/Rules.md).
        z = imp.em.full((n, f) + tuple(rows[i] + ext[i] for i in range(nd)), 0, dtype)
        z = insert_slice(imp, gy, z, [0, 0] + q, [1, 1] + s)
        res[0] = conv2d(imp, z, _flipped(imp, w), [1] * nd, d, x.shape, dtype)
    elif mask[0]:
        padded = tuple(rows[i] + 2 * p[i] for i in range(nd))
        z = imp.em.full((n, f) + tuple(padded[i] + ext[i] for i in range(nd)), 0, dtype)
        z = insert_slice(imp, gy, z, [0, 0] + ext, [1, 1] + s)
        gxp = conv2d(imp, z, _flipped(imp, w), [1] * nd, d, (n, c) + padded, dtype)
        res[0] = gxp if not any(p) else imp.em.extract_slice(gxp, [0, 0] + p, list(x.shape),
                                                             [1] * x.rank)
    if mask[1]:
        xp = pad(imp, x, [0, 0] + p, [0, 0] + p, 0)
        perm = [1, 0] + list(range(2, x.rank))
        gw = conv2d(imp, imp.em.transpose(xp, perm), imp.em.transpose(gy, perm),
                    d, s, (c, f) + tuple(ks), dtype)
        res[1] = imp.em.transpose(gw, perm)
    if mask[2]:
        res[2] = imp.em.reduce(gy, [0] + list(range(2, x.rank)), False, "add", 0, dtype)
    return res
