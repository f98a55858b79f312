"""Elementwise aten ops as ``linalg.generic``s: arithmetic with torch's type
promotion, unary math, comparisons and logic, ``where``, ``pow``, ``clamp``,
casts and copies, integer division, ``remainder`` and ``fmod``, ``fmax``/
``fmin``, ``isnan``/``isinf``/``isfinite``, ``nan_to_num``."""

from __future__ import annotations

import math

import torch

from ..body import Body
from ..registry import HANDLERS, _compute_dtype, _ew, _meta, _out, aten, handles
from ..tracing import round_to
from ..values import UnsupportedOpError, Value, elem_type, is_float


def _arith(op):
    def h(imp, node, args, kwargs):
        a, b = args[0], args[1]
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        if op == "div" and kwargs.get("rounding_mode") is not None:
            raise UnsupportedOpError(f"div with rounding_mode={kwargs['rounding_mode']}")

        _, out_dtype = _out(node)
        narrow = out_dtype in (torch.bfloat16, torch.float16)
        scale = alpha
        if alpha != 1 and narrow:
            # Eager's bf16/f16 add with alpha: alpha and a number operand
            # rounded to the dtype, then a + b * alpha in f32 (the product
            # exact), rounded once.
            scale = round_to(alpha, out_dtype)
            if isinstance(b, (int, float)) and not isinstance(b, bool):
                b = round_to(b, out_dtype)

        def fn(body, v, t):
            y = v[1]
            if alpha != 1:
                if is_float(t) and not narrow:
                    # f32/f64: one fused multiply-add, as eager's kernels
                    # (a + alpha * b rounded twice was an ulp off in a
                    # fifth of the elements: an SGD step's p - lr * g).
                    c = body.const(scale if op == "add" else -scale, t)
                    return body.v(f"math.fma {y}, {c}, {v[0]} : {elem_type(t)}"), None
                y = body.binary("mul", y, body.const(scale, t), t)
            return body.binary(op, v[0], y, t), None
        # As eager's CPU kernels: a bf16/f16 tensor times (or over) a
        # Python number, or a 0-d tensor as the second operand (a CPU
        # scalar), takes it in f32 as it is, not rounded to bf16 first
        # (their opmath type; the result rounded once). Add and sub of a
        # number, and a 0-d tensor as the first operand, round it to bf16
        # first, as here.
        compute = None
        number = lambda x: isinstance(x, (int, float)) and not isinstance(x, bool)
        if narrow and (op in ("mul", "div") and (number(a) or number(b) or isinstance(b, Value)
                                                 and b.rank == 0) or alpha != 1):
            compute = torch.float32
        return _ew(imp, node, [a, b], fn, compute)
    return h


for _op, _name in [(aten.add.Tensor, "add"), (aten.add.Scalar, "add"), (aten.sub.Tensor, "sub"),
                   (aten.sub.Scalar, "sub"), (aten.mul.Tensor, "mul"), (aten.mul.Scalar, "mul"),
                   (aten.div.Tensor, "div"), (aten.div.Scalar, "div"), (aten.maximum.default, "max"),
                   (aten.minimum.default, "min")]:
    HANDLERS[_op] = _arith(_name)


@handles(aten.rsub.Scalar, aten.rsub.Tensor)
def _rsub(imp, node, args, kwargs):
    alpha = kwargs.get("alpha", 1)
    return _ew(imp, node, [args[0], args[1]],
               lambda b, v, t: (b.binary("sub", v[1], b.binary("mul", v[0], b.const(alpha, t), t), t), None))


def _unary(op):
    def h(imp, node, args, kwargs):
        # bf16/f16 in f32, rounded once, as eager's kernels compute them
        # (a sigmoid's exp, add and divide each rounded to bf16 were 2 ulps
        # off, 38 in f16).
        _, out_dtype = _out(node)
        compute = torch.float32 if out_dtype in (torch.bfloat16, torch.float16) else None
        return _ew(imp, node, [args[0]], lambda b, v, t: (b.unary(op, v[0], t), None), compute)
    return h


for _op, _name in [(aten.neg.default, "neg"), (aten.exp.default, "exp"), (aten.log.default, "log"),
                   (aten.sqrt.default, "sqrt"), (aten.rsqrt.default, "rsqrt"),
                   (aten.reciprocal.default, "reciprocal"), (aten.abs.default, "abs"),
                   (aten.tanh.default, "tanh"), (aten.erf.default, "erf"),
                   (aten.sigmoid.default, "sigmoid"), (aten.relu.default, "relu"),
                   (aten.sin.default, "sin"), (aten.cos.default, "cos"),
                   (aten.expm1.default, "expm1"), (aten.log1p.default, "log1p"),
                   (aten.sign.default, "sign"), (aten.log2.default, "log2"),
                   (aten.floor.default, "floor"), (aten.ceil.default, "ceil"),
                   (aten.trunc.default, "trunc"), (aten.round.default, "roundeven"),
                   (aten.tan.default, "tan"), (aten.sinh.default, "sinh"),
                   (aten.cosh.default, "cosh"), (aten.asin.default, "asin"),
                   (aten.acos.default, "acos"), (aten.atan.default, "atan"),
                   (aten.asinh.default, "asinh"), (aten.acosh.default, "acosh"),
                   (aten.atanh.default, "atanh"), (aten.log10.default, "log10"),
                   (aten.exp2.default, "exp2")]:
    HANDLERS[_op] = _unary(_name)


@handles(aten.round.decimals)
def _round_decimals(imp, node, args, kwargs):
    """``round(x, decimals)`` as ATen's kernel: to nearest even of x times
    10^decimals, divided back (a negative count divides first and
    multiplies back), in f32 for bf16/f16; an integer is itself."""
    decimals = kwargs.get("decimals", args[1] if len(args) > 1 else 0)
    _, out_dtype = _out(node)
    compute = torch.float32 if out_dtype in (torch.bfloat16, torch.float16) else None

    def fn(b, v, t):
        if not is_float(t):
            return v[0], None
        scale = b.const(float(10 ** abs(decimals)), t)
        e = elem_type(t)
        if decimals < 0:
            q = b.v(f"math.roundeven {b.binary('div', v[0], scale, t)} : {e}")
            return b.binary("mul", q, scale, t), None
        q = b.v(f"math.roundeven {b.binary('mul', v[0], scale, t)} : {e}")
        return b.binary("div", q, scale, t), None
    return _ew(imp, node, [args[0]], fn, compute)


@handles(aten.atan2.default)
def _atan2(imp, node, args, kwargs):
    return _ew(imp, node, [args[0], args[1]],
               lambda b, v, t: (b.v(f"math.atan2 {v[0]}, {v[1]} : {elem_type(t)}"), None))


@handles(aten.copysign.Tensor, aten.copysign.Scalar)
def _copysign(imp, node, args, kwargs):
    """``a``'s magnitude with ``b``'s sign bit, on the bits (the code
    generation lowers no math.copysign; -0.0 and NaN signs count)."""
    def fn(b, v, t):
        e, bits = elem_type(t), torch.finfo(t).bits
        i = f"i{bits}"
        sign = 1 << (bits - 1)
        ab = b.v(f"arith.bitcast {v[0]} : {e} to {i}")
        bb = b.v(f"arith.bitcast {v[1]} : {e} to {i}")
        mag = b.v(f"arith.andi {ab}, {b.v(f'arith.constant {sign - 1} : {i}')} : {i}")
        sgn = b.v(f"arith.andi {bb}, {b.v(f'arith.constant {-sign} : {i}')} : {i}")
        return b.v(f"arith.bitcast {b.v(f'arith.ori {mag}, {sgn} : {i}')} : {i} to {e}"), None
    return _ew(imp, node, [args[0], args[1]], fn)


@handles(aten.leaky_relu.default, aten.leaky_relu_backward.default)
def _leaky_relu(imp, node, args, kwargs):
    """``g`` where ``x > 0``, else ``g * slope``: the forward with ``g`` the
    input itself, the backward with ``g`` the gradient."""
    if node.target == aten.leaky_relu.default:
        operands = [args[0]]
        slope = args[1] if len(args) > 1 else kwargs.get("negative_slope", 0.01)
    else:
        operands, slope = [args[0], args[1]], args[2]

    def fn(b, v, t):
        pos = b.compare("gt", v[-1], b.const(0.0, t), t)
        return b.select(pos, v[0], b.binary("mul", v[0], b.const(slope, t), t), t), None
    return _ew(imp, node, operands, fn)


@handles(aten.elu.default)
def _elu(imp, node, args, kwargs):
    """``scale * x`` where x > 0, else ``scale * alpha * (exp(x *
    input_scale) - 1)`` (elu, selu, celu)."""
    alpha = args[1] if len(args) > 1 else kwargs.get("alpha", 1.0)
    scale = args[2] if len(args) > 2 else kwargs.get("scale", 1.0)
    input_scale = args[3] if len(args) > 3 else kwargs.get("input_scale", 1.0)

    def fn(b, v, t):
        x = v[0]
        pos = b.compare("gt", x, b.const(0.0, t), t)
        neg = b.unary("expm1", b.binary("mul", x, b.const(input_scale, t), t), t)
        neg = b.binary("mul", neg, b.const(scale * alpha, t), t)
        return b.select(pos, b.binary("mul", x, b.const(scale, t), t), neg, t), None
    return _ew(imp, node, [args[0]], fn)


@handles(aten.elu_backward.default)
def _elu_backward(imp, node, args, kwargs):
    """ATen's: where the input (or, ``is_result``, the output) is <= 0,
    ``grad * input_scale * (out + alpha * scale)`` from the output or
    ``grad * input_scale * alpha * scale * exp(x * input_scale)`` from the
    input; elsewhere ``grad * scale``."""
    grad, alpha, scale, input_scale, is_result, saved = args[:6]

    def fn(b, v, t):
        g, y = v[0], v[1]
        c = lambda value: b.const(value, t)
        nonpos = b.compare("le", y, c(0.0), t)
        if is_result:
            neg = b.binary("mul", b.binary("mul", g, c(input_scale), t),
                           b.binary("add", y, c(alpha * scale), t), t)
        else:
            e = b.unary("exp", b.binary("mul", y, c(input_scale), t), t)
            neg = b.binary("mul", b.binary("mul", g, c(input_scale * alpha * scale), t), e, t)
        return b.select(nonpos, neg, b.binary("mul", g, c(scale), t), t), None
    return _ew(imp, node, [grad, saved], fn)


@handles(aten.hardtanh.default)
def _hardtanh(imp, node, args, kwargs):
    lo = args[1] if len(args) > 1 else kwargs.get("min_val", -1.0)
    hi = args[2] if len(args) > 2 else kwargs.get("max_val", 1.0)

    def fn(b, v, t):
        r = b.clamp_low(v[0], b.const(lo, t), t)
        return b.clamp_high(r, b.const(hi, t), t), None
    return _ew(imp, node, [args[0]], fn)


@handles(aten.hardtanh_backward.default)
def _hardtanh_backward(imp, node, args, kwargs):
    grad, x, lo, hi = args[:4]

    def fn(b, v, t):
        out = b.v(f"arith.ori {b.compare('le', v[1], b.const(lo, t), t)}, "
                  f"{b.compare('ge', v[1], b.const(hi, t), t)} : i1")
        return b.select(out, b.const(0.0, t), v[0], t), None
    return _ew(imp, node, [grad, x], fn)


@handles(aten.logical_not.default, aten.bitwise_not.default)
def _not(imp, node, args, kwargs):
    x = args[0]
    if x.dtype != torch.bool and aten.bitwise_not.default == node.target:
        raise UnsupportedOpError("bitwise_not on integers")
    return _ew(imp, node, [x], lambda b, v, t: (b.unary("not", v[0], t), "bool"), compute=torch.bool)


def _logical(op):
    def h(imp, node, args, kwargs):
        shape, dtype = _out(node)
        if dtype != torch.bool and node.target in (aten.logical_and.default, aten.logical_or.default):
            raise UnsupportedOpError(str(node.target))
        t = torch.bool if dtype == torch.bool else dtype
        return _ew(imp, node, [args[0], args[1]], lambda b, v, tt: (b.binary(op, v[0], v[1], tt), None), compute=t)
    return h


HANDLERS[aten.bitwise_and.Tensor] = _logical("and")
HANDLERS[aten.bitwise_or.Tensor] = _logical("or")
HANDLERS[aten.bitwise_xor.Tensor] = _logical("xor")
HANDLERS[aten.bitwise_and.Scalar] = _logical("and")
HANDLERS[aten.bitwise_or.Scalar] = _logical("or")
HANDLERS[aten.bitwise_xor.Scalar] = _logical("xor")
HANDLERS[aten.logical_and.default] = _logical("and")
HANDLERS[aten.logical_or.default] = _logical("or")


@handles(aten.fmax.default, aten.fmin.default)
def _fmax(imp, node, args, kwargs):
    """The max (min) ignoring a NaN: NaN only where both are."""
    op = "fmax" if node.target == aten.fmax.default else "fmin"
    _, dtype = _out(node)
    if not is_float(dtype):
        op = op[1:]
    return _ew(imp, node, [args[0], args[1]], lambda b, v, t: (b.binary(op, v[0], v[1], t), None))


def _float_test(kind):
    """isnan / isinf / isposinf / isneginf / isfinite: a bool per element
    (integers and booleans: never NaN nor infinite)."""
    def h(imp, node, args, kwargs):
        x = args[0]
        if not is_float(x.dtype):
            shape, _ = _out(node)
            return imp.em.full(shape, kind == "finite", torch.bool)

        def fn(b, v, t):
            e = elem_type(t)
            a = v[0]
            if kind == "nan":
                return b.is_nan(a, t), "bool"
            inf = b.const(float("inf"), t)
            if kind == "posinf":
                return b.v(f"arith.cmpf oeq, {a}, {inf} : {e}"), "bool"
            if kind == "neginf":
                return b.v(f"arith.cmpf oeq, {a}, {b.const(float('-inf'), t)} : {e}"), "bool"
            mag = b.unary("abs", a, t)
            # one: ordered and unequal (a NaN is not finite).
            return b.v(f"arith.cmpf {'oeq' if kind == 'inf' else 'one'}, {mag}, {inf} : {e}"), "bool"
        return _ew(imp, node, [x], fn, compute=x.dtype)
    return h


for _op, _kind in [(aten.isnan.default, "nan"), (aten.isinf.default, "inf"),
                   (aten.isposinf.default, "posinf"), (aten.isneginf.default, "neginf"),
                   (aten.isfinite.default, "finite")]:
    HANDLERS[_op] = _float_test(_kind)


@handles(aten.nan_to_num.default)
def _nan_to_num(imp, node, args, kwargs):
    """NaN -> ``nan`` (0), +inf -> ``posinf`` (the dtype's max), -inf ->
    ``neginf`` (its lowest)."""
    x = args[0]
    if not is_float(x.dtype):
        return imp.em.cast(x, x.dtype)
    nan = args[1] if len(args) > 1 and args[1] is not None else kwargs.get("nan") or 0.0
    posinf = args[2] if len(args) > 2 else kwargs.get("posinf")
    neginf = args[3] if len(args) > 3 else kwargs.get("neginf")
    info = torch.finfo(x.dtype)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf

    def fn(b, v, t):
        e, a = elem_type(t), v[0]
        r = b.select(b.is_nan(a, t), b.const(nan, t), a, t)
        r = b.select(b.v(f"arith.cmpf oeq, {a}, {b.const(float('inf'), t)} : {e}"),
                     b.const(posinf, t), r, t)
        r = b.select(b.v(f"arith.cmpf oeq, {a}, {b.const(float('-inf'), t)} : {e}"),
                     b.const(neginf, t), r, t)
        return r, None
    return _ew(imp, node, [x], fn, compute=x.dtype)


@handles(aten.__lshift__.Scalar, aten.__lshift__.Tensor, aten.bitwise_left_shift.Tensor,
         aten.bitwise_left_shift.Tensor_Scalar, aten.__rshift__.Scalar, aten.__rshift__.Tensor,
         aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar)
def _shift(imp, node, args, kwargs):
    """Integer shifts as ATen defines them past the width: a shift by a
    negative amount or by the width or more gives 0 to the left and the
    sign to the right (arithmetic)."""
    left = node.target in (aten.__lshift__.Scalar, aten.__lshift__.Tensor,
                           aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar)
    _, dtype = _out(node)
    if is_float(dtype) or dtype == torch.bool:
        raise UnsupportedOpError(f"{node.target} on {dtype}")
    bits = torch.iinfo(dtype).bits

    def fn(b, v, t):
        e = elem_type(t)
        x, n = v[0], v[1]
        out = b.compare("ge", n, b.const(bits, t), t)
        out = b.v(f"arith.ori {out}, {b.compare('lt', n, b.const(0, t), t)} : i1")
        if left:
            shifted = b.v(f"arith.shli {x}, {n} : {e}")
            return b.select(out, b.const(0, t), shifted, t), None
        shifted = b.v(f"arith.shrsi {x}, {n} : {e}")
        return b.select(out, b.v(f"arith.shrsi {x}, {b.const(bits - 1, t)} : {e}"), shifted, t), None
    return _ew(imp, node, [args[0], args[1]], fn)


@handles(aten.fmod.Tensor, aten.fmod.Scalar)
def _fmod(imp, node, args, kwargs):
    """C's fmod: the remainder with the dividend's sign (truncated
    division)."""
    def fn(b, v, t):
        op = "arith.remf" if is_float(t) else "arith.remsi"
        return b.v(f"{op} {v[0]}, {v[1]} : {elem_type(t)}"), None
    return _ew(imp, node, [args[0], args[1]], fn)


def _cmp(pred):
    def h(imp, node, args, kwargs):
        a, b = args[0], args[1]
        t = _compute_dtype([a, b])
        return _ew(imp, node, [a, b], lambda bd, v, tt: (bd.compare(pred, v[0], v[1], tt), "bool"), compute=t)
    return h


for _pred in ["eq", "ne", "lt", "le", "gt", "ge"]:
    for _ov in ["Tensor", "Scalar"]:
        HANDLERS[getattr(getattr(aten, _pred), _ov)] = _cmp(_pred)


@handles(aten.where.self)
def _where(imp, node, args, kwargs):
    c, a, b = args
    t = _meta(node).dtype

    def fn(bd, v, tt):
        return bd.select(v[0], v[1], v[2], tt), None

    shape, out_dtype = _out(node)

    def body(bd: Body, vals):
        cond = vals[0] if isinstance(c, Value) else bd.const(c, torch.bool)
        if isinstance(c, Value) and c.dtype != torch.bool:
            cond = bd.cast(cond, c.dtype, torch.bool)
        x = bd.cast(vals[1], a.dtype, t) if isinstance(a, Value) else bd.const(a, t)
        y = bd.cast(vals[2], b.dtype, t) if isinstance(b, Value) else bd.const(b, t)
        return bd.select(cond, x, y, t)

    return imp.em.elementwise(shape, out_dtype, [c, a, b], body)


@handles(aten.pow.Tensor_Scalar)
def _pow_ts(imp, node, args, kwargs):
    x, e = args

    def fn(b, v, t):
        if e == 2:
            return b.binary("mul", v[0], v[0], t), None
        if e == 1:
            return v[0], None
        if e == 0.5 and is_float(t):
            return b.unary("sqrt", v[0], t), None
        if not is_float(t):
            return b.binary("pow", v[0], b.const(e, t), t), None
        return b.binary("pow", v[0], b.const(e, t), t), None
    return _ew(imp, node, [x], fn)


@handles(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def _pow(imp, node, args, kwargs):
    return _ew(imp, node, [args[0], args[1]], lambda b, v, t: (b.binary("pow", v[0], v[1], t), None))


@handles(aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default,
         aten.clamp.Tensor, aten.clamp_min.Tensor, aten.clamp_max.Tensor)
def _clamp(imp, node, args, kwargs):
    """``x`` raised to ``lo``, then lowered to ``hi`` (``Body.clamp_low``:
    x kept where it equals a bound, as eager), the bounds numbers or
    tensors (broadcast); a NaN input or bound gives NaN."""
    x = args[0]
    if node.target in (aten.clamp_min.default, aten.clamp_min.Tensor):
        lo, hi = args[1], None
    elif node.target in (aten.clamp_max.default, aten.clamp_max.Tensor):
        lo, hi = None, args[1]
    else:
        lo = args[1] if len(args) > 1 else kwargs.get("min")
        hi = args[2] if len(args) > 2 else kwargs.get("max")
    operands = [x] + [v for v in (lo, hi) if v is not None]

    def fn(b, v, t):
        r, k = v[0], 1
        if lo is not None:
            r, k = b.clamp_low(r, v[k], t), k + 1
        if hi is not None:
            r = b.clamp_high(r, v[k], t)
        return r, None
    return _ew(imp, node, operands, fn)


@handles(aten._to_copy.default, aten.clone.default, aten.alias.default, aten.detach.default,
         aten.lift_fresh_copy.default, aten.alias_copy.default, aten.detach_copy.default,
         aten.convert_element_type.default if hasattr(aten, "convert_element_type") else aten.clone.default)
def _copy_like(imp, node, args, kwargs):
    _, dtype = _out(node)
    return imp.em.cast(args[0], dtype)


@handles(aten.copy.default, aten.copy_.default)
def _copy(imp, node, args, kwargs):
    dst, src = args[0], args[1]
    out = imp.em.cast(imp.em.broadcast_to(src, dst.shape), dst.dtype)
    return out


@handles(aten.add_.Tensor)
def _add_inplace(imp, node, args, kwargs):
    # What functionalization leaves of an in-place update of a module buffer
    # (BatchNorm's num_batches_tracked); the value is the sum.
    return HANDLERS[aten.add.Tensor](imp, node, args, kwargs)


def _floor_div(b: Body, x: str, y: str, t: torch.dtype) -> str:
    if is_float(t):
        # As ATen's div_floor_floating: floor(x / y) rounds the quotient
        # first (1 // 0.1 gave 10, eager 9; -5 // inf gave -0, eager -1).
        e = elem_type(t)
        zero, one, half = b.const(0.0, t), b.const(1.0, t), b.const(0.5, t)
        quot = b.binary("div", x, y, t)
        mod = b.v(f"arith.remf {x}, {y} : {e}")
        div = b.binary("div", b.binary("sub", x, mod, t), y, t)
        nonzero = b.v(f"arith.cmpf une, {mod}, {zero} : {e}")
        differ = b.v(f"arith.xori {b.v(f'arith.cmpf olt, {y}, {zero} : {e}')}, "
                     f"{b.v(f'arith.cmpf olt, {mod}, {zero} : {e}')} : i1")
        fix = b.v(f"arith.andi {nonzero}, {differ} : i1")
        div = b.v(f"arith.select {fix}, {b.binary('sub', div, one, t)}, {div} : {e}")
        floor = b.v(f"math.floor {div} : {e}")
        up = b.v(f"arith.cmpf ogt, {b.binary('sub', div, floor, t)}, {half} : {e}")
        floor = b.v(f"arith.select {up}, {b.binary('add', floor, one, t)}, {floor} : {e}")
        # copysign(0, quot), by the sign bit (the CPU pipeline has no
        # lowering of math.copysign).
        ity = f"i{torch.finfo(t).bits}"
        bits = b.v(f"arith.bitcast {quot} : {e} to {ity}")
        negative = b.v(f"arith.cmpi slt, {bits}, {b.v(f'arith.constant 0 : {ity}')} : {ity}")
        signed_zero = b.v(f"arith.select {negative}, {b.v(f'arith.negf {zero} : {e}')}, "
                          f"{zero} : {e}")
        div_nonzero = b.v(f"arith.cmpf une, {div}, {zero} : {e}")
        res = b.v(f"arith.select {div_nonzero}, {floor}, {signed_zero} : {e}")
        y_zero = b.v(f"arith.cmpf oeq, {y}, {zero} : {e}")
        return b.v(f"arith.select {y_zero}, {quot}, {res} : {e}")
    return b.v(f"arith.floordivsi {x}, {y} : {elem_type(t)}")


def _checked_divisor(imp, node, divisor) -> None:
    """Integer division and remainder by zero: eager raises
    ``RuntimeError: ZeroDivisionError``; the program's division
    instruction would trap (SIGFPE: the whole process died). A divisor
    tensor gets a check (``record_check``: the step raises eager's error
    after running) and the division reads 1 where it is 0
    (``_safe_divisor``); a Python 0 is refused at trace time."""
    from .indexing import record_check
    from ..values import ImportError_
    if is_float(_out(node)[1]):
        return
    if not isinstance(divisor, Value):
        if divisor == 0:
            raise ImportError_("integer division by zero (eager raises RuntimeError: "
                               "ZeroDivisionError)")
        return
    d = divisor.dtype
    ok = imp.em.elementwise(divisor.shape, torch.bool, [divisor],
                            lambda b, v: b.compare("ne", v[0], b.const(0, d), d))
    record_check(imp, ok, "RuntimeError", "ZeroDivisionError")


def _safe_divisor(b: Body, y: str, t: torch.dtype) -> str:
    """An integer divisor with 0 replaced by 1 (``_checked_divisor``)."""
    if is_float(t):
        return y
    return b.select(b.compare("eq", y, b.const(0, t), t), b.const(1, t), y, t)


@handles(aten.div.Tensor_mode, aten.div.Scalar_mode)
def _div_mode(imp, node, args, kwargs):
    mode = kwargs.get("rounding_mode", args[2] if len(args) > 2 else None)
    if mode is not None:
        _checked_divisor(imp, node, args[1])

    def fn(b, v, t):
        if mode is not None:
            v = [v[0], _safe_divisor(b, v[1], t)]
        if mode == "floor":
            return _floor_div(b, v[0], v[1], t), None
        if mode == "trunc":
            if is_float(t):
                q = b.binary("div", v[0], v[1], t)
                return b.v(f"math.trunc {q} : {elem_type(t)}"), None
            return b.binary("div", v[0], v[1], t), None
        return b.binary("div", v[0], v[1], t), None
    # A bf16/f16 tensor over a Python number or a 0-d tensor (a CPU
    # scalar): in f32 with the number as it is, rounded once, as eager's
    # kernels (each step rounded to bf16 put a whole-number quotient one
    # off); over a tensor, the quotient rounded to bf16 first, as here.
    _, out_dtype = _out(node)
    divisor = args[1]
    compute = None
    if out_dtype in (torch.bfloat16, torch.float16) and (
            isinstance(divisor, (int, float)) and not isinstance(divisor, bool)
            or isinstance(divisor, Value) and divisor.rank == 0):
        compute = torch.float32
    return _ew(imp, node, [args[0], divisor], fn, compute)


@handles(aten.remainder.Scalar, aten.remainder.Tensor)
def _remainder(imp, node, args, kwargs):
    _checked_divisor(imp, node, args[1])

    def fn(b, v, t):
        v = [v[0], _safe_divisor(b, v[1], t)]
        # Python semantics: the result has the sign of the divisor.
        if is_float(t):
            # As ATen computes it: fmod (exact), then the divisor added where
            # the signs differ; x - floor(x / y) * y rounds, and gives NaN
            # for an infinite divisor (3 % inf is 3, -3 % inf is inf).
            e = elem_type(t)
            zero = b.const(0.0, t)
            mod = b.v(f"arith.remf {v[0]}, {v[1]} : {e}")
            nonzero = b.v(f"arith.cmpf une, {mod}, {zero} : {e}")
            neg_y = b.v(f"arith.cmpf olt, {v[1]}, {zero} : {e}")
            neg_mod = b.v(f"arith.cmpf olt, {mod}, {zero} : {e}")
            differ = b.v(f"arith.xori {neg_y}, {neg_mod} : i1")
            fix = b.v(f"arith.andi {nonzero}, {differ} : i1")
            return b.v(f"arith.select {fix}, {b.binary('add', mod, v[1], t)}, {mod} : {e}"), None
        q = _floor_div(b, v[0], v[1], t)
        return b.binary("sub", v[0], b.binary("mul", q, v[1], t), t), None
    return _ew(imp, node, [args[0], args[1]], fn)


@handles(aten.hypot.default)
def _hypot(imp, node, args, kwargs):
    """``sqrt(a**2 + b**2)`` without overflow, +inf where either is
    infinite (a NaN too, as C's ``hypot``). f32 (and bf16/f16, through
    f32 as eager's) in f64, where the squares are exact: rounded once to
    f32, as eager's correctly rounded kernel gives it. f64 from
    ``max(|a|, |b|)`` scaled by a power of two (exact) into a range where
    ``sqrt(fma(a, a, b * b))`` cannot overflow or lose the smaller square:
    within an ulp of eager's."""
    _, out_dtype = _out(node)
    if not is_float(out_dtype):
        raise UnsupportedOpError(f"hypot of {out_dtype}")
    compute = torch.float32 if out_dtype in (torch.bfloat16, torch.float16) else out_dtype

    def fn(b: Body, v, t):
        w = torch.float64
        e = elem_type(w)
        x = b.v(f"math.absf {b.cast(v[0], t, w)} : {e}")
        y = b.v(f"math.absf {b.cast(v[1], t, w)} : {e}")
        inf = b.const(float("inf"), w)
        x_inf, y_inf = b.compare("eq", x, inf, w), b.compare("eq", y, inf, w)
        either_inf = b.v(f"arith.ori {x_inf}, {y_inf} : i1")
        if t == torch.float64:
            hi = b.binary("max", x, y, w)  # NaN propagates
            lo = b.binary("min", x, y, w)
            big = b.compare("gt", hi, b.const(2.0 ** 500, w), w)
            small = b.compare("lt", hi, b.const(2.0 ** -500, w), w)
            scale = b.select(big, b.const(2.0 ** -600, w),
                             b.select(small, b.const(2.0 ** 600, w), b.const(1.0, w), w), w)
            hs, ls = b.binary("mul", hi, scale, w), b.binary("mul", lo, scale, w)
            ls2 = b.binary("mul", ls, ls, w)
            root = b.v(f"math.sqrt {b.v(f'math.fma {hs}, {hs}, {ls2} : {e}')} : {e}")
            r = b.binary("div", root, scale, w)
        else:
            sq = b.binary("add", b.binary("mul", x, x, w), b.binary("mul", y, y, w), w)
            r = b.v(f"math.sqrt {sq} : {e}")
        return b.cast(b.select(either_inf, inf, r, w), w, t), None
    return _ew(imp, node, [args[0], args[1]], fn, compute)


#: calc_erfinv's coefficients (ATen's Math.h).
_ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
_ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
_ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
_ERFINV_D = (3.543889200, 1.637067800)


@handles(aten.erfinv.default)
def _erfinv(imp, node, args, kwargs):
    """The inverse error function as eager's ``calc_erfinv``: a rational
    approximation (one for ``|y| <= 0.7``, one in ``sqrt(-log((1 - |y|) /
    2))`` beyond), then two Newton steps on ``erf``; NaN beyond
    ``[-1, 1]``, +-inf at +-1. In the dtype (bf16/f16 in f32, as eager's).
    Its ``erf`` and ``exp`` are the code generation's, so results can be
    an ulp or two from eager's (docs/Importer.md, Limits)."""
    _, out_dtype = _out(node)
    if not is_float(out_dtype):
        raise UnsupportedOpError(f"erfinv of {out_dtype}")
    compute = torch.float32 if out_dtype in (torch.bfloat16, torch.float16) else out_dtype

    def fn(b: Body, v, t):
        e = elem_type(t)
        c = lambda x: b.const(x, t)
        mul = lambda p, q: b.binary("mul", p, q, t)
        add = lambda p, q: b.binary("add", p, q, t)
        y = v[0]
        ay = b.v(f"math.absf {y} : {e}")

        def poly(coeffs, z):
            r = c(coeffs[-1])
            for k in reversed(coeffs[:-1]):
                r = add(mul(r, z), c(k))
            return r
        z = mul(y, y)
        central = b.binary("div", mul(y, poly(_ERFINV_A, z)),
                           add(mul(poly(_ERFINV_B, z), z), c(1.0)), t)
        half = b.binary("div", b.binary("sub", c(1.0), ay, t), c(2.0), t)
        minus_log = b.unary("neg", b.v(f"math.log {half} : {e}"), t)
        zt = b.v(f"math.sqrt {minus_log} : {e}")
        # copysign(num, y) (y is not a zero here).
        num = b.v(f"math.absf {poly(_ERFINV_C, zt)} : {e}")
        signed = b.select(b.v(f"arith.cmpf olt, {y}, {c(0.0)} : {e}"), b.unary("neg", num, t), num, t)
        dem = add(mul(add(mul(c(_ERFINV_D[1]), zt), c(_ERFINV_D[0])), zt), c(1.0))
        tail = b.binary("div", signed, dem, t)
        x = b.select(b.compare("le", ay, c(0.7), t), central, tail, t)
        two_over_sqrt_pi = c(float(torch.tensor(2.0, dtype=t) / torch.tensor(math.sqrt(math.pi), dtype=t)))
        for _ in range(2):
            err = b.binary("sub", b.unary("erf", x, t), y, t)
            gauss = b.v(f"math.exp {b.unary('neg', mul(x, x), t)} : {e}")
            slope = mul(two_over_sqrt_pi, gauss)
            x = b.binary("sub", x, b.binary("div", err, slope, t), t)
        inf = b.select(b.v(f"arith.cmpf olt, {y}, {c(0.0)} : {e}"), c(float("-inf")), c(float("inf")), t)
        x = b.select(b.compare("eq", ay, c(1.0), t), inf, x, t)
        return b.select(b.compare("gt", ay, c(1.0), t), c(float("nan")), x, t), None
    return _ew(imp, node, [args[0]], fn, compute)


@handles(aten.hardshrink_backward.default, aten.softshrink_backward.default)
def _shrink_backward(imp, node, args, kwargs):
    """The gradient of ``hardshrink``/``softshrink``: 0 where ``-lambd <=
    x <= lambd``, else the output gradient (ATen's kernels)."""
    g, x, lambd = args[0], args[1], args[2]

    def fn(b, v, t):
        lo = b.compare("ge", v[1], b.const(-lambd, t), t)
        hi = b.compare("le", v[1], b.const(lambd, t), t)
        inside = b.v(f"arith.andi {lo}, {hi} : i1")
        return b.select(inside, b.const(0, t), v[0], t), None
    return _ew(imp, node, [g, x], fn)
