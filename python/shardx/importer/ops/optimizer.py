"""The optimizers' ops: ``_foreach_*`` (one element op per list entry),
``lerp``, ``addcmul`` and ``addcdiv``."""

from __future__ import annotations

import torch

from ..registry import HANDLERS, _FakeNode, _ew, _meta, _out, aten, handles
from ..values import UnsupportedOpError, elem_type


def _foreach(scalar_op):
    def h(imp, node, args, kwargs):
        outs = _meta(node)
        lists = [a for a in args if isinstance(a, list)]
        n = len(lists[0])
        res = []
        for i in range(n):
            sub_args = [a[i] if isinstance(a, list) else a for a in args]
            fake = _FakeNode(node, outs[i])
            res.append(HANDLERS[scalar_op](imp, fake, tuple(sub_args), kwargs))
        return res
    return h


def _opmath(node):
    """The type eager's kernels compute in: f32 for bf16/f16, else None
    (the result's)."""
    _, out_dtype = _out(node)
    return torch.float32 if out_dtype in (torch.bfloat16, torch.float16) else None


def _fma(bd, a: str, b: str, c: str, t) -> str:
    """``a * b + c`` rounded once (a float ``t``), as eager's vector
    ``fmadd``."""
    return bd.v(f"math.fma {a}, {b}, {c} : {elem_type(t)}")


@handles(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(imp, node, args, kwargs):
    """As ATen's vector lerp: where |w| < 0.5, ``fma(w, end - start,
    start)``, else ``fma(w - 1, end - start, end)``, in f32 for bf16/f16
    (rounded once); start + w * (end - start) was an ulp off in a fifth of
    the elements (Adam's moments are lerps)."""
    a, b, w = args

    def fn(bd, v, t):
        start, end, weight = v
        diff = bd.binary("sub", end, start, t)
        small = bd.compare("lt", bd.unary("abs", weight, t), bd.const(0.5, t), t)
        coeff = bd.select(small, weight, bd.binary("sub", weight, bd.const(1.0, t), t), t)
        base = bd.select(small, start, end, t)
        return _fma(bd, coeff, diff, base, t), None
    return _ew(imp, node, [a, b, w], fn, _opmath(node))


def _addc(op):
    """addcmul / addcdiv as ATen's kernels: ``fma(value * x, y, a)`` and
    ``a + value * x / y`` (in f32 for bf16/f16, rounded once); ``a + value
    * (x op y)`` rounded otherwise (Adam's update is an addcdiv)."""
    def h(imp, node, args, kwargs):
        a, x, y = args[:3]
        val = kwargs.get("value", args[3] if len(args) > 3 else 1)

        def fn(bd, v, t):
            scaled = bd.binary("mul", v[3], v[1], t)
            if op == "mul":
                return _fma(bd, scaled, v[2], v[0], t), None
            return bd.binary("add", v[0], bd.binary("div", scaled, v[2], t), t), None
        return _ew(imp, node, [a, x, y, val], fn, _opmath(node))
    return h


HANDLERS[aten.addcmul.default] = _addc("mul")
HANDLERS[aten.addcdiv.default] = _addc("div")


_FOREACH = {
    "_foreach_add": {"List": aten.add.Tensor, "Scalar": aten.add.Tensor, "Tensor": aten.add.Tensor},
    "_foreach_sub": {"List": aten.sub.Tensor, "Scalar": aten.sub.Tensor},
    "_foreach_mul": {"List": aten.mul.Tensor, "Scalar": aten.mul.Tensor, "Tensor": aten.mul.Tensor},
    "_foreach_div": {"List": aten.div.Tensor, "Scalar": aten.div.Tensor, "Tensor": aten.div.Tensor},
    "_foreach_addcmul": {"Scalar": aten.addcmul.default},
    "_foreach_addcdiv": {"Scalar": aten.addcdiv.default},
    "_foreach_lerp": {"Scalar": aten.lerp.Scalar, "List": aten.lerp.Tensor},
    "_foreach_neg": {"default": aten.neg.default},
    "_foreach_sqrt": {"default": aten.sqrt.default},
    "_foreach_reciprocal": {"default": aten.reciprocal.default},
    "_foreach_exp": {"default": aten.exp.default},
    "_foreach_abs": {"default": aten.abs.default},
    "_foreach_maximum": {"List": aten.maximum.default},
    "_foreach_pow": {"ScalarAndTensor": aten.pow.Scalar, "Scalar": aten.pow.Tensor_Scalar,
                     "List": aten.pow.Tensor_Tensor},
    "_foreach_copy": {"default": aten.copy.default},
}
for _name, _ovs in _FOREACH.items():
    for _ov, _scalar in _ovs.items():
        _packet = getattr(aten, _name, None)
        if _packet is not None and hasattr(_packet, _ov):
            HANDLERS[getattr(_packet, _ov)] = _foreach(_scalar)


@handles(torch.ops.profiler._record_function_enter_new.default)
def _profiler_range(imp, node, args, kwargs):
    """A profiler range (``record_function``) in the traced function:
    ``torch.optim``'s ``Optimizer.step`` opens one. Its state would be
    made while tracing (fake tensors in the optimizer) and not carried from
    call to call as eager carries it: refused, naming the way out."""
    name = args[0] if args else "a profiler range"
    raise UnsupportedOpError(
        f"record_function({name!r}) in the compiled function: a torch.optim optimizer's "
        "step() is not compiled (its state would not carry over between calls); call "
        "optimizer.step() outside the compiled function, or write the update as tensor "
        "ops in it")
