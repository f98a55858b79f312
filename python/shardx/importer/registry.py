"""The handler registry: ``HANDLERS`` maps an aten op overload to the
function that emits it, ``@handles(op, ...)`` registers one. Shared helpers
of the handlers: a node's traced shape and dtype, and ``_ew``, an
elementwise op with torch's type promotion."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict

import torch
import torch.fx

from .body import Body
from .values import UnsupportedOpError, Value

if TYPE_CHECKING:
    from .graph import Importer

aten = torch.ops.aten

Handler = Callable[["Importer", torch.fx.Node, tuple, dict], Any]


class _Handlers(dict):
    """Op overload -> handler. An op that a library defines when it is
    imported (transformers' ``torch.library`` custom ops), possibly after
    the importer, is registered by its name ``"namespace.op.overload"``
    (``str`` of the overload) and found by it."""

    def get(self, op, default=None):
        handler = dict.get(self, op)
        if handler is None and isinstance(op, torch._ops.OpOverload):
            handler = dict.get(self, str(op))
        return default if handler is None else handler


HANDLERS: Dict[Any, Handler] = _Handlers()


def handles(*ops):
    """Registers the decorated function as the handler of each aten op
    overload in ``ops`` (or op name, for ops defined on import elsewhere:
    ``_Handlers``): ``handler(importer, node, args, kwargs)`` returns the
    node's ``Value`` (or a list of them)."""
    def deco(fn):
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return deco


def _meta(node) -> torch.Tensor:
    val = node.meta.get("val")
    if val is None:
        raise UnsupportedOpError(f"{node.target}: no shape information")
    return val


def _out(node):
    v = _meta(node)
    return tuple(int(s) for s in v.shape), v.dtype


def _compute_dtype(args) -> torch.dtype:
    vals = [a for a in args if isinstance(a, (Value, int, float, bool))]
    probes = []
    for a in vals:
        if isinstance(a, Value):
            probes.append(torch.empty([1] * a.rank if a.rank else [], dtype=a.dtype))
        else:
            probes.append(a)
    if len(probes) == 1:
        return probes[0].dtype if isinstance(probes[0], torch.Tensor) else torch.tensor(probes[0]).dtype
    dt = torch.result_type(probes[0], probes[1])
    for p in probes[2:]:
        dt = torch.promote_types(dt, torch.result_type(torch.empty([], dtype=dt), p))
    return dt


def _ew(imp: "Importer", node, operands, fn, compute=None):
    """Elementwise op: operands are cast to ``compute`` (default: the result
    dtype), ``fn(body, vals, dtype)`` computes, the result is cast to the node's
    dtype."""
    shape, out_dtype = _out(node)
    compute = compute or out_dtype

    def body(b: Body, vals):
        cvals = []
        for o, v in zip(operands, vals):
            if isinstance(o, Value):
                cvals.append(b.cast(v, o.dtype, compute))
            else:
                cvals.append(b.const(o, compute))
        r = fn(b, cvals, compute)
        res_dtype = torch.bool if r[1] == "bool" else compute
        return b.cast(r[0], res_dtype, out_dtype)

    return imp.em.elementwise(shape, out_dtype, list(operands), body)


class _FakeNode:
    """A node with another traced value: one element of a list-valued op
    (``_foreach_*``), emitted by the element op's handler."""

    def __init__(self, node, val):
        self.target = node.target
        self.meta = {"val": val, "stack_trace": node.meta.get("stack_trace")}
