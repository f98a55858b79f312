"""The optimizers' ops: ``_foreach_*`` (one element op per list entry),
``lerp``, ``addcmul`` and ``addcdiv``."""

from __future__ import annotations

from ..registry import HANDLERS, _FakeNode, _ew, _meta, aten, handles


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


@handles(aten.lerp.Scalar, aten.lerp.Tensor)
def _lerp(imp, node, args, kwargs):
    a, b, w = args
    return _ew(imp, node, [a, b, w], lambda bd, v, t: (
        bd.binary("add", v[0], bd.binary("mul", v[2], bd.binary("sub", v[1], v[0], t), t), t), None))


def _addc(op):
    """addcmul / addcdiv: a + value * (x op y)."""
    def h(imp, node, args, kwargs):
        a, x, y = args[:3]
        val = kwargs.get("value", args[3] if len(args) > 3 else 1)
        return _ew(imp, node, [a, x, y, val], lambda bd, v, t: (
            bd.binary("add", v[0], bd.binary("mul", v[3], bd.binary(op, v[1], v[2], t), t), t), None))
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
