"""Contractions: ``mm``/``bmm``/``addmm`` as ``linalg.matmul`` and
``linalg.batch_matmul``; 2-d convolutions (NCHW, groups 1) and their
backward as ``linalg.conv_2d_nchw_fchw`` on a ``tensor.pad``ded input; 1-d
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
    if x.rank != 4:
        raise UnsupportedOpError(f"{x.rank - 2}-d convolution (only 1-d NCL and 2-d NCHW)")
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
        b = imp.em.reshape(bias, [bias.shape[0], 1, 1])
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
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    ho, wo = gy.shape[2], gy.shape[3]
    hp, wp = h + 2 * p[0], wd + 2 * p[1]
    dtype = gy.dtype
    res: List = [None, None, None]
    q = [d[0] * (kh - 1) - p[0], d[1] * (kw - 1) - p[1]]
    if mask[0] and s == [1, 1] and min(q) >= 0:
        # Stride 1: the output gradient padded by q convolved with the
        # flipped weight is the input gradient, a windowed op whose rows
        # split like the input's (docs/Rules.md, "Windowed ops").
        z = pad(imp, gy, [0, 0] + q, [0, 0] + q, 0)
        wt = imp.em.generic((c, f, kh, kw), w.dtype, [(w, ["d1", "d0", f"-d2 + {kh - 1}", f"-d3 + {kw - 1}"])],
                            ["parallel"] * 4, ["d0", "d1", "d2", "d3"], lambda b, a, o: a[0])
        res[0] = conv2d(imp, z, wt, [1, 1], d, (n, c, h, wd), dtype)
    elif mask[0] and min(q) >= 0 and h + p[0] >= s[0] * ho and wd + p[1] >= s[1] * wo:
        # Stride s: the output gradient inserted at stride s (from row q)
        # into zeros of the input's rows plus the kernel's extent, convolved
        # with the flipped weight at stride 1: a strided insert and a
        # stride-1 window, both windowed ops (docs/Rules.md).
        z = imp.em.full((n, f, h + d[0] * (kh - 1), wd + d[1] * (kw - 1)), 0, dtype)
        z = insert_slice(imp, gy, z, [0, 0] + q, [1, 1] + s)
        wt = imp.em.generic((c, f, kh, kw), w.dtype, [(w, ["d1", "d0", f"-d2 + {kh - 1}", f"-d3 + {kw - 1}"])],
                            ["parallel"] * 4, ["d0", "d1", "d2", "d3"], lambda b, a, o: a[0])
        res[0] = conv2d(imp, z, wt, [1, 1], d, (n, c, h, wd), dtype)
    elif mask[0]:
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
