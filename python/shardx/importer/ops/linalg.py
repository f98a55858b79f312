"""Contractions: ``mm``/``bmm``/``addmm`` as ``linalg.matmul`` and
``linalg.batch_matmul``; 2-d convolutions (NCHW) and their backward as
``linalg.conv_2d_nchw_fchw`` on a ``tensor.pad``ded input, 3-d ones
(NCDHW) as ``linalg.conv_3d_ncdhw_fcdhw`` the same way; 1-d convolutions
(NCL) as 2-d ones of a unit H; grouped (and depthwise) ones as one
``linalg.generic`` with a group dim (``grouped_conv``)."""

from __future__ import annotations

from typing import List

import torch

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
    # bf16/f16: the product accumulated in f32 and the bias added in f32,
    # rounded once, as eager's CPU GEMM does (the product rounded to bf16
    # and then the sum was an ulp off in a fifth of nn.Linear's outputs
    # under autocast).
    narrow = dtype in (torch.bfloat16, torch.float16)
    m = imp.em.matmul(a, b, torch.float32 if narrow else dtype)

    def fn(bd, v, t):
        x = v[0] if alpha == 1 else bd.binary("mul", v[0], bd.const(alpha, t), t)
        y = v[1] if beta == 1 else bd.binary("mul", v[1], bd.const(beta, t), t)
        return bd.binary("add", x, y, t), None
    return _ew(imp, node, [m, bias], fn, torch.float32 if narrow else None)


def _conv_params(x: Value, w: Value, stride, padding, dilation, transposed, groups):
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


def grouped_conv(imp, x: Value, w: Value, groups: int, stride, dilation, out_shape,
                 dtype) -> Value:
    """A convolution of ``groups`` groups (NC + spatial dims; weight F, C /
    groups + kernel dims) of an already padded input, as one
    ``linalg.generic`` over ``[N, G, F/G, out..., C/G, kernel...]``: input
    channel ``g * C/G + c`` and weight row ``g * F/G + f``, each spatial
    input index ``s * o + d * k`` (a windowed dim, as the named
    convolutions': docs/Rules.md, "Windowed ops"). Depthwise convolutions
    are the groups of one channel."""
    if groups == 1:
        return conv2d(imp, x, w, stride, dilation, out_shape, dtype)
    nd = len(stride)
    n, c = x.shape[:2]
    f = w.shape[0]
    cg, fg = c // groups, f // groups
    ks = w.shape[2:]
    xg = imp.em.reshape(x, [n, groups, cg] + list(x.shape[2:]))
    wg = imp.em.reshape(w, [groups, fg, cg] + list(ks))
    # Loops: n, g, f, out spatial (parallel); c, kernel (reduction).
    o = [f"d{3 + i}" for i in range(nd)]
    cl = f"d{3 + nd}"
    k = [f"d{4 + nd + i}" for i in range(nd)]
    spatial = [f"{o[i]} * {stride[i]} + {k[i]} * {dilation[i]}" for i in range(nd)]
    shape = (n, groups, fg) + tuple(out_shape[2:])

    def body(b, a, out):
        return b.binary("add", out, b.binary("mul", a[0], a[1], dtype), dtype)
    y = imp.em.generic(shape, dtype, [(xg, ["d0", "d1", cl] + spatial), (wg, ["d1", "d2", cl] + k)],
                       ["parallel"] * (3 + nd) + ["reduction"] * (1 + nd),
                       ["d0", "d1", "d2"] + o, body, init=imp.em.full(shape, 0, dtype))
    return imp.em.reshape(y, list(out_shape))


def _grouped_weight_grad(imp, xp: Value, gy: Value, groups: int, stride, dilation, ks,
                         dtype) -> Value:
    """The weight gradient of a grouped convolution: ``gw[g * F/G + f, c,
    k...] = sum over n and out of xp[n, g * C/G + c, s * o + d * k] *
    gy[n, g * F/G + f, o]``, one ``linalg.generic``."""
    nd = len(stride)
    n, c = xp.shape[:2]
    f = gy.shape[1]
    cg, fg = c // groups, f // groups
    out = gy.shape[2:]
    xg = imp.em.reshape(xp, [n, groups, cg] + list(xp.shape[2:]))
    gg = imp.em.reshape(gy, [n, groups, fg] + list(out))
    # Loops: g, f, c, kernel (parallel); n, out (reduction).
    k = [f"d{3 + i}" for i in range(nd)]
    nl = f"d{3 + nd}"
    o = [f"d{4 + nd + i}" for i in range(nd)]
    spatial = [f"{o[i]} * {stride[i]} + {k[i]} * {dilation[i]}" for i in range(nd)]
    shape = (groups, fg, cg) + tuple(ks)

    def body(b, a, acc):
        return b.binary("add", acc, b.binary("mul", a[0], a[1], dtype), dtype)
    gw = imp.em.generic(shape, dtype, [(xg, [nl, "d0", "d2"] + spatial), (gg, [nl, "d0", "d1"] + o)],
                        ["parallel"] * (3 + nd) + ["reduction"] * (1 + nd),
                        ["d0", "d1", "d2"] + k, body, init=imp.em.full(shape, 0, dtype))
    return imp.em.reshape(gw, [f, cg] + list(ks))


def _flipped_groups(imp, w: Value, groups: int) -> Value:
    """The input gradient's weight of a grouped convolution: per group,
    the flipped weight with its F and C swapped (``_flipped``): ``[C, F/G,
    k...]`` rows ``g * C/G + c``."""
    if groups == 1:
        return _flipped(imp, w)
    f, cg = w.shape[:2]
    fg = f // groups
    ks = w.shape[2:]
    nd = len(ks)
    taps = [f"-d{3 + i} + {ks[i] - 1}" for i in range(nd)]
    wg = imp.em.reshape(w, [groups, fg, cg] + list(ks))
    loops = [f"d{i}" for i in range(3 + nd)]
    # out[g, c, f, k] = w[g, f, c, K - 1 - k]
    t = imp.em.generic((groups, cg, fg) + tuple(ks), w.dtype, [(wg, ["d0", "d2", "d1"] + taps)],
                       ["parallel"] * (3 + nd), loops, lambda b, a, o: a[0])
    return imp.em.reshape(t, [groups * cg, fg] + list(ks))


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
    one_d = x.rank == 3 and not isinstance(padding, str)
    if one_d:
        (x, w), stride, padding, dilation = _lift_1d(imp, [x, w], stride, padding, dilation)
        shape = (shape[0], shape[1], 1, shape[2])
    stride, padding, dilation = _conv_params(x, w, stride, padding, dilation, transposed, groups)
    if transposed:
        # The adjoint of the convolution by w (C_in -> C_out / groups rows
        # per group): its input gradient, of the output's shape (which
        # output_padding lengthens).
        y = _input_grad(imp, x, w, groups, stride, padding, dilation, shape, dtype)
    else:
        xp = pad(imp, x, [0, 0] + padding, [0, 0] + padding, 0)
        y = grouped_conv(imp, xp, w, groups, stride, dilation, shape, dtype)
    if bias is not None:
        b = imp.em.reshape(bias, [bias.shape[0]] + [1] * (len(shape) - 2))
        y = imp.em.elementwise(shape, dtype, [y, b], lambda bd, v: bd.binary("add", v[0], v[1], dtype))
    return _drop_unit(imp, y) if one_d else y


@handles(aten.convolution_backward.default)
def _convolution_backward(imp, node, args, kwargs):
    """grad input: the stride-dilated, padded output gradient convolved with
    the flipped, transposed weight (``_input_grad``); grad weight: the
    padded input convolved with the output gradient (stride and dilation
    swap roles; ``_weight_grad``); grad bias: a sum. A transposed
    convolution swaps them: its input gradient is the convolution of the
    padded output gradient by the weight, its weight gradient the one of
    the convolution with the roles of input and output gradient
    exchanged."""
    gy, x, w, _, stride, padding, dilation, transposed, _, groups, mask = args[:11]
    if x.rank == 3:
        (gy, x, w), stride, padding, dilation = _lift_1d(imp, [gy, x, w], stride, padding, dilation)
        res = _convolution_backward(imp, node, [gy, x, w, None, stride, padding, dilation, transposed,
                                                None, groups, mask], kwargs)
        return [r if r is None or r.rank != 4 else _drop_unit(imp, r) for r in res]
    s, p, d = _conv_params(x, w, stride, padding, dilation, transposed, groups)
    ks = w.shape[2:]
    dtype = gy.dtype
    res: List = [None, None, None]
    if transposed:
        gyp = pad(imp, gy, [0, 0] + p, [0, 0] + p, 0)
        if mask[0]:
            res[0] = grouped_conv(imp, gyp, w, groups, s, d, x.shape, dtype)
        if mask[1]:
            res[1] = _weight_grad(imp, gyp, x, groups, s, d, ks, dtype)
    else:
        if mask[0]:
            res[0] = _input_grad(imp, gy, w, groups, s, p, d, x.shape, dtype)
        if mask[1]:
            xp = pad(imp, x, [0, 0] + p, [0, 0] + p, 0)
            res[1] = _weight_grad(imp, xp, gy, groups, s, d, ks, dtype)
    if mask[2]:
        res[2] = imp.em.reduce(gy, [0] + list(range(2, x.rank)), False, "add", 0, dtype)
    return res


def _input_grad(imp, gy: Value, w: Value, groups: int, s, p, d, in_shape, dtype) -> Value:
    """The input gradient (of shape ``in_shape``) of the convolution by
    ``w`` (stride ``s``, padding ``p``, dilation ``d``) whose output
    gradient is ``gy``: a convolution of the output gradient, stride-
    dilated and padded, by the flipped weight with its F and C swapped."""
    nd = len(s)
    n, c = in_shape[:2]
    f, ks = w.shape[0], w.shape[2:]
    rows, out = in_shape[2:], gy.shape[2:]
    ext = [d[i] * (ks[i] - 1) for i in range(nd)]
    q = [ext[i] - p[i] for i in range(nd)]
    flipped = _flipped_groups(imp, w, groups)
    if s == [1] * nd and min(q) >= 0:
        # Stride 1: the output gradient padded by q convolved with the
        # flipped weight is the input gradient, a windowed op whose rows
        # split like the input's (docs/Rules.md, "Windowed ops").
        z = pad(imp, gy, [0, 0] + q, [0, 0] + q, 0)
        return grouped_conv(imp, z, flipped, groups, [1] * nd, d, in_shape, dtype)
    if min(q) >= 0 and all(rows[i] + p[i] >= s[i] * out[i] for i in range(nd)):
        # Stride s: the output gradient inserted at stride s (from row q)
        # into zeros of the input's rows plus the kernel's extent, convolved
        # with the flipped weight at stride 1: a strided insert and a
        # stride-1 window, both windowed ops (docs/Rules.md).
        z = imp.em.full((n, f) + tuple(rows[i] + ext[i] for i in range(nd)), 0, dtype)
        z = insert_slice(imp, gy, z, [0, 0] + q, [1, 1] + s)
        return grouped_conv(imp, z, flipped, groups, [1] * nd, d, in_shape, dtype)
    padded = tuple(rows[i] + 2 * p[i] for i in range(nd))
    z = imp.em.full((n, f) + tuple(padded[i] + ext[i] for i in range(nd)), 0, dtype)
    z = insert_slice(imp, gy, z, [0, 0] + ext, [1, 1] + s)
    gxp = grouped_conv(imp, z, flipped, groups, [1] * nd, d, (n, c) + padded, dtype)
    return gxp if not any(p) else imp.em.extract_slice(gxp, [0, 0] + p, list(in_shape),
                                                       [1] * len(in_shape))


def _weight_grad(imp, xp: Value, gy: Value, groups: int, s, d, ks, dtype) -> Value:
    """The weight gradient of the convolution of the padded input ``xp``
    whose output gradient is ``gy``."""
    if groups != 1:
        return _grouped_weight_grad(imp, xp, gy, groups, s, d, ks, dtype)
    c, f = xp.shape[1], gy.shape[1]
    perm = [1, 0] + list(range(2, xp.rank))
    gw = conv2d(imp, imp.em.transpose(xp, perm), imp.em.transpose(gy, perm),
                d, s, (c, f) + tuple(ks), dtype)
    return imp.em.transpose(gw, perm)
