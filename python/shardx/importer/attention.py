"""Attention at the precision of a GPU's fused attention, for the GPU
backends.

PyTorch's CPU attention (the math backend the tracer uses) upcasts bf16/f16
q, k and v to f32 and computes every product in f32. A GPU user of eager
PyTorch gets a fused (flash) kernel instead: q @ k^T of the bf16 values
accumulated in f32, softmax in f32, the probabilities rounded to bf16 for
the product with v, and the backward's products again of bf16 values with
f32 accumulation. Traced the CPU way, a GPT step on the GPU runs its six
attention GEMMs per layer in f32 (CUDA cores, twice the bytes) where eager
runs them on tensor cores.

``flash_precision()`` traces ``scaled_dot_product_attention`` of bf16/f16
q, k and v that way: every GEMM is an f32 product of widened bf16/f16
values, which the cuda target's ``shardx-narrow-gemm-operands`` turns into
a cuBLAS GEMM of the bf16/f16 values with an f32 result (tensor cores; the
products are exact in f32, so only the order of the sums changes):

    S  = q @ k^T (f32) * scale (+ mask)     P = softmax(S) (f32)
    O  = bf16(P) @ v (f32), rounded to the inputs' dtype
    dP = dO @ v^T                           dS = P * (dP - rowsum(P * dP))
    dq = bf16(dS) @ k * scale               dk = bf16(dS)^T @ q * scale
    dv = bf16(P)^T @ dO

The GPU backends of ``shardx.compile`` trace under it. Calls it does not
cover (f32 inputs, dropout, grouped-query attention, a mask that needs a
gradient, batch dims that broadcast) keep PyTorch's own attention.
"""

from __future__ import annotations

import contextlib
import math
import threading

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["flash_precision", "mode_key"]

_state = threading.local()


def mode_key() -> str:
    """The attention precision in force: part of a traced region's signature
    (the same layer traces to other ops under ``flash_precision``)."""
    return "attention=flash" if getattr(_state, "depth", 0) else "attention=math"


def _causal_mask(length: int, source: int) -> torch.Tensor:
    return torch.ones(length, source, dtype=torch.bool).tril()


class _FlashPrecisionAttention(torch.autograd.Function):
    """Attention of [N, L, E] q, [N, S, E] k and [N, S, Ev] v (bf16/f16)."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, scale):
        dtype = q.dtype
        with torch.autocast(q.device.type, enabled=False):
            s = torch.bmm(q.float(), k.float().transpose(1, 2)) * scale
            if causal:
                s = s.masked_fill(~_causal_mask(q.shape[1], k.shape[1]), float("-inf"))
            if mask is not None:
                s = (s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool
                     else s + mask.float())
            # Rows masked everywhere give zeros, as PyTorch's attention; a
            # causal mask leaves every row its first column, so a plain
            # softmax there (one pass over the scores fewer).
            p = (torch.softmax(s, -1) if causal and mask is None
                 else torch.ops.aten._safe_softmax(s, -1))
            out = torch.bmm(p.to(dtype).float(), v.float()).to(dtype)
        ctx.save_for_backward(q, k, v, p)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, p = ctx.saved_tensors
        dtype = q.dtype
        with torch.autocast(q.device.type, enabled=False):
            do = grad.to(dtype).float()
            dp = torch.bmm(do, v.float().transpose(1, 2))
            ds = p * (dp - (p * dp).sum(-1, keepdim=True))
            ds = ds.to(dtype).float()
            dq = (torch.bmm(ds, k.float()) * ctx.scale).to(dtype)
            dk = (torch.bmm(ds.transpose(1, 2), q.float()) * ctx.scale).to(dtype)
            dv = torch.bmm(p.to(dtype).float().transpose(1, 2), do).to(dtype)
        return dq, dk, dv, None, None, None


def _attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
               enable_gqa=False):
    """The flash-precision attention, or None where it does not apply."""
    tensors = (q, k, v)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or \
            v.dtype != q.dtype or dropout_p != 0.0 or q.dim() < 3:
        return None
    batch = q.shape[:-2]
    if k.shape[:-2] != batch or v.shape[:-2] != batch or k.shape[-1] != q.shape[-1] or \
            v.shape[-2] != k.shape[-2]:
        return None  # broadcast batch dims or grouped-query heads
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor) or attn_mask.requires_grad or \
                (attn_mask.dtype != torch.bool and not attn_mask.is_floating_point()):
            return None
        if is_causal:
            return None  # PyTorch refuses both
    length, source, width = q.shape[-2], k.shape[-2], q.shape[-1]
    n = math.prod(batch)
    if scale is None:
        scale = 1.0 / math.sqrt(width)
    mask = None
    if attn_mask is not None:
        mask = attn_mask.expand(*batch, length, source).reshape(n, length, source)
    out = _FlashPrecisionAttention.apply(
        q.reshape(n, length, width), k.reshape(n, source, width),
        v.reshape(n, source, v.shape[-1]), mask, bool(is_causal), float(scale))
    return out.reshape(*batch, length, v.shape[-1])


class _Mode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            out = _attention(*args, **kwargs)
            if out is not None:
                return out
        return func(*args, **kwargs)


@contextlib.contextmanager
def flash_precision(enabled: bool = True):
    """Traces (and runs) ``scaled_dot_product_attention`` of bf16/f16 inputs
    at a fused GPU kernel's precision while in force (module docstring)."""
    if not enabled:
        yield
        return
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        with _Mode():
            yield
    finally:
        _state.depth -= 1
