"""The composite attention ops (``importer/attention.py``): ``shardx::attention``,
``shardx::attention_dq`` and ``shardx::attention_dkv`` as the dialect's ops of
the same names, which the code generation writes as linalg ops
(lib/Compiler/DecomposeAttention.cpp)."""

from __future__ import annotations

from typing import List, Optional

import torch

from .. import attention  # noqa: F401  (registers the custom ops)
from ..emitter import Op
from ..registry import handles
from ..values import UnsupportedOpError, Value


def _positions(args) -> str:
    qpos, kpos = args
    if qpos is None:
        return ""
    return f" causal({qpos.name}, {kpos.name})"


def _types(values: List[Optional[Value]]) -> str:
    return ", ".join(v.type for v in values if v is not None)


def _emit(imp, op: str, tensors: List[Value], positions, scale: float, products: int,
          results: List[Value]) -> List[Value]:
    if any(v.dtype != tensors[0].dtype for v in tensors):
        raise UnsupportedOpError(f"shardx.{op} of mixed dtypes")
    operands = ", ".join(v.name for v in tensors)
    precision = f" products = {attention.PRODUCT_NAMES[products]}" if products else ""
    text = (f"shardx.{op} {operands}{_positions(positions)} scale = {float(scale)!r}"
            f"{precision} : "
            f"{_types(tensors + list(positions))} -> {_types(results)}")
    em = imp.em
    name = em.fresh("v")
    em.ops.append(Op(f"{name}:{len(results)}" if len(results) > 1 else name, text, em.loc))
    if len(results) == 1:
        return [Value(name, results[0].shape, results[0].dtype)]
    return [Value(f"{name}#{i}", r.shape, r.dtype) for i, r in enumerate(results)]


def _with_products(args, count: int):
    """The op's arguments with ``products`` (0 where the call leaves out its
    default)."""
    args = tuple(args)
    return args + (0,) * (count + 1 - len(args))


def _like(shape, dtype) -> Value:
    return Value("", tuple(shape), dtype)


@handles(torch.ops.shardx.attention.default)
def _attention(imp, node, args, kwargs):
    q, k, v, qpos, kpos, scale, products = _with_products(args, 6)
    out = _like((*q.shape[:-1], v.shape[-1]), q.dtype)
    lse = _like(q.shape[:-1], q.dtype)
    return _emit(imp, "attention", [q, k, v], (qpos, kpos), scale, products, [out, lse])


@handles(torch.ops.shardx.attention_dq.default)
def _attention_dq(imp, node, args, kwargs):
    q, k, v, out, lse, dout, qpos, kpos, scale, products = _with_products(args, 9)
    return _emit(imp, "attention_dq", [q, k, v, out, lse, dout], (qpos, kpos), scale,
                 products, [_like(q.shape, q.dtype)])[0]


@handles(torch.ops.shardx.attention_dkv.default)
def _attention_dkv(imp, node, args, kwargs):
    q, k, v, out, lse, dout, qpos, kpos, scale, products = _with_products(args, 9)
    return _emit(imp, "attention_dkv", [q, k, v, out, lse, dout], (qpos, kpos), scale,
                 products, [_like(k.shape, k.dtype), _like(v.shape, v.dtype)])
