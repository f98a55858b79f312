"""Attention in the traced program: ``shardx.attention``, and attention at
the precision of a GPU's fused attention for the GPU backends.

**The composite op.** While the importer traces, PyTorch's
``scaled_dot_product_attention`` of f32/f64 q, k and v without a mask
tensor or dropout (``is_causal``, ``scale`` and ``enable_gqa`` any) is
recorded as the custom op ``shardx::attention`` (``composite()``), which
returns the output and the rows' log-sum-exp, and its gradient as
``shardx::attention_dq`` and ``shardx::attention_dkv``, which take the
log-sum-exp rather than the probabilities (flash attention's backward): the
traced program passes ``[batch, heads, queries]`` numbers per attention
from the forward to the backward, not the ``[batch, heads, queries, keys]``
probabilities (the code generation shares them between the forward and the
backward of one program, lib/Compiler/DecomposeAttention.cpp). The importer
writes them
as the dialect's ops of the same names (docs/Rules.md, "Attention"); a
causal mask is carried as the positions of the queries and keys
(``torch.arange``), which a split of the sequence splits with the rows.
Other calls (a mask tensor, dropout, bf16/f16, batch dims that broadcast)
are traced as PyTorch's math backend writes them. Under
``sequence_order(order)`` a causal call's positions are the constant
``order`` instead (rows reordered for context parallelism's load
balancing, ``shardx.context_parallel``).

**Flash precision.** PyTorch's CPU attention (the math backend the tracer uses) upcasts bf16/f16
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

Where the composite op covers the call (no mask tensor, no dropout; causal
or not, grouped-query heads too) it is that op on the widened q, k and v
with ``products`` set to their dtype (``shardx.attention ... products =
bf16``): the same numbers, and the cuda target runs each of the three ops
as one fused kernel on tensor cores (lib/Runtime/cuda/Attention.cpp), with
no ``[B, H, Sq, Sk]`` probabilities kept from the forward for the backward.
Other calls (a mask tensor) are traced as the products above.

The GPU backends of ``shardx.compile`` trace under it. Calls it does not
cover (dropout, grouped-query attention with a mask, a mask that needs a
gradient, batch dims that broadcast) keep PyTorch's own attention; f32 and
f64 ones are the composite op's.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import operator
import threading
from typing import Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["composite", "flash_precision", "mode_key", "sequence_order"]

_state = threading.local()


def mode_key() -> str:
    """The attention forms in force: part of a traced region's signature
    (the same layer traces to other ops under ``flash_precision`` or
    without the composite op)."""
    precision = "flash" if getattr(_state, "depth", 0) else "math"
    key = f"attention={precision},composite={int(_composite_enabled())}"
    digest = getattr(_state, "order_digest", None)
    if digest is not None:
        key += f",order={digest}"
    return key


# ----------------------------------------------------------------------------
# The order of a causal attention's sequence (context-parallel load balancing)
# ----------------------------------------------------------------------------

def _sequence_order() -> Optional[Tuple[int, ...]]:
    return getattr(_state, "order", None)


def normalized_order(order) -> Optional[Tuple[int, ...]]:
    """``order`` (``sequence_order``'s) as a tuple of ints, checked: a
    ValueError where it is not a permutation of ``range(n)``."""
    if order is None:
        return None
    if isinstance(order, torch.Tensor):
        if order.dim() != 1 or order.dtype.is_floating_point or order.is_complex() or \
                order.dtype == torch.bool:
            raise ValueError(f"sequence_order: expected a 1-D integer tensor, got "
                             f"{order.dtype} of shape {tuple(order.shape)}")
        order = order.tolist()
    try:
        order = tuple(operator.index(i) for i in order)
    except TypeError:
        raise ValueError(f"sequence_order: expected integers, got {order!r:.80}") from None
    if not order or sorted(order) != list(range(len(order))):
        raise ValueError("sequence_order: expected a permutation of range(n) (n >= 1), got "
                         f"{list(order)[:16]}{'...' if len(order) > 16 else ''}")
    return order


@contextlib.contextmanager
def sequence_order(order):
    """While in force, a causal ``scaled_dot_product_attention`` over a
    sequence of ``len(order)`` rows takes row ``i`` to be at position
    ``order[i]``: the mask lets row ``i`` see the keys at positions up to
    ``order[i]`` (``shardx.context_parallel``). ``order`` is a permutation
    of ``range(len(order))`` (a 1-D integer tensor or sequence); ``None``
    is the rows' own order. A causal attention over another length, or
    one that the composite op does not cover, is refused rather than
    masked in the rows' order."""
    order = normalized_order(order)
    before = _sequence_order(), getattr(_state, "order_digest", None)
    _state.order = order
    # Once here, not per traced region (mode_key).
    _state.order_digest = None if order is None else \
        hashlib.sha256(",".join(map(str, order)).encode()).hexdigest()[:16]
    try:
        yield
    finally:
        _state.order, _state.order_digest = before


# ----------------------------------------------------------------------------
# The composite op: shardx::attention and its gradient
# ----------------------------------------------------------------------------

#: ``products`` codes of the custom ops: the type every product's operands
#: are rounded to (0: none, f32/f64 products).
PRODUCTS = {torch.bfloat16: 1, torch.float16: 2}
_PRODUCT_TYPES = {1: torch.bfloat16, 2: torch.float16}
#: The dialect's name of each code.
PRODUCT_NAMES = {1: "bf16", 2: "f16"}


def _rounded(x, products: int):
    """``x`` as a product reads it: rounded to the ``products`` type and back."""
    if not products:
        return x
    return x.to(_PRODUCT_TYPES[products]).to(x.dtype)


def _reference(q, k, v, qpos, kpos, scale, products=0):
    """The op's numbers in PyTorch (eager runs of the custom ops): the
    scores ``[B, H, Sq, Sk]``, the seen keys and the key/value heads
    repeated to the query heads (rounded as the products read them)."""
    q, k, v = (_rounded(t, products) for t in (q, k, v))
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale
    seen = None
    if qpos is not None:
        seen = kpos[None, :] <= qpos[:, None]
        s = s.masked_fill(~seen, float("-inf"))
    return s, seen, k, v


@torch.library.custom_op("shardx::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  qpos: Optional[torch.Tensor], kpos: Optional[torch.Tensor],
                  scale: float, products: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    s, _, _, v = _reference(q, k, v, qpos, kpos, scale, products)
    m = s.amax(-1, keepdim=True)
    m = torch.where(m == float("-inf"), torch.zeros_like(m), m)
    e = torch.exp(s - m)
    total = e.sum(-1, keepdim=True)
    none = total == 0
    p = torch.where(none, torch.zeros_like(e), e / total)
    lse = torch.where(none, torch.full_like(m, float("-inf")), m + torch.log(total))
    return torch.matmul(_rounded(p, products), v), lse.squeeze(-1)


@_attention_op.register_fake
def _(q, k, v, qpos, kpos, scale, products=0):
    return (q.new_empty(*q.shape[:-1], v.shape[-1]), q.new_empty(q.shape[:-1]))


def _probabilities(q, k, v, lse, dout, out, qpos, kpos, scale, products):
    """P (0 where masked) and dS = P * (dP - delta) as the products read
    them, with the repeated k (rounded likewise)."""
    s, seen, k, v = _reference(q, k, v, qpos, kpos, scale, products)
    p = torch.exp(s - lse[..., None])
    if seen is not None:
        p = torch.where(seen, p, torch.zeros_like(p))
    dp = torch.matmul(_rounded(dout, products), v.transpose(-2, -1))
    delta = (dout * out).sum(-1, keepdim=True)
    return _rounded(p, products), _rounded(p * (dp - delta), products), k


def _per_kv_head(x, kv_heads):
    """Sums the query heads of each key/value head: [B, H, ...] -> [B, Hk, ...]."""
    return x.reshape(x.shape[0], kv_heads, -1, *x.shape[2:]).sum(2)


@torch.library.custom_op("shardx::attention_dq", mutates_args=())
def _attention_dq_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                     lse: torch.Tensor, dout: torch.Tensor, qpos: Optional[torch.Tensor],
                     kpos: Optional[torch.Tensor], scale: float,
                     products: int = 0) -> torch.Tensor:
    _, ds, k = _probabilities(q, k, v, lse, dout, out, qpos, kpos, scale, products)
    return torch.matmul(ds, k) * scale


@_attention_dq_op.register_fake
def _(q, k, v, out, lse, dout, qpos, kpos, scale, products=0):
    return torch.empty_like(q)


@torch.library.custom_op("shardx::attention_dkv", mutates_args=())
def _attention_dkv_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                      lse: torch.Tensor, dout: torch.Tensor, qpos: Optional[torch.Tensor],
                      kpos: Optional[torch.Tensor], scale: float, products: int = 0
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    p, ds, _ = _probabilities(q, k, v, lse, dout, out, qpos, kpos, scale, products)
    dk = torch.matmul(ds.transpose(-2, -1), _rounded(q, products)) * scale
    dv = torch.matmul(p.transpose(-2, -1), _rounded(dout, products))
    return _per_kv_head(dk, k.shape[1]), _per_kv_head(dv, k.shape[1])


@_attention_dkv_op.register_fake
def _(q, k, v, out, lse, dout, qpos, kpos, scale, products=0):
    return torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output):
    q, k, v, qpos, kpos, scale, products = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, qpos, kpos)
    ctx.scale = scale
    ctx.products = products


def _backward(ctx, dout, dlse):
    # lse is the op's own output, read only by this backward: nothing
    # differentiates it (the importer refuses a program that returns it).
    q, k, v, out, lse, qpos, kpos = ctx.saved_tensors
    args = (q, k, v, out, lse, dout.contiguous(), qpos, kpos, ctx.scale, ctx.products)
    dq = torch.ops.shardx.attention_dq(*args) if ctx.needs_input_grad[0] else None
    dk = dv = None
    if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
        dk, dv = torch.ops.shardx.attention_dkv(*args)
    return dq, dk, dv, None, None, None, None


_attention_op.register_autograd(_backward, setup_context=_setup_context)


def _composite_enabled() -> bool:
    return getattr(_state, "composite", True)


@contextlib.contextmanager
def composite(enabled: bool = True):
    """Records f32/f64 ``scaled_dot_product_attention`` as ``shardx::attention``
    while tracing (the default; ``False``: as the math backend's ops)."""
    before = _composite_enabled()
    _state.composite = enabled
    try:
        yield
    finally:
        _state.composite = before


def _composite_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False,
                         scale=None, enable_gqa=False):
    """``scaled_dot_product_attention`` as ``shardx::attention``, or None
    where the call is not one it covers."""
    out = _composite_or_none(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    if out is None and is_causal and _sequence_order() is not None:
        _refuse_ordered("the composite attention op does not cover this call (f32/f64 q, "
                        "k and v without a mask tensor or dropout)")
    return out


def _refuse_ordered(why: str):
    from .values import UnsupportedOpError
    raise UnsupportedOpError(
        f"a causal scaled_dot_product_attention under shardx sequence_order "
        f"(context-parallel load balancing): {why}; its mask would be the rows' order")


def _composite_or_none(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                       products=0):
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return None
    if q.dtype not in (torch.float32, torch.float64) or k.dtype != q.dtype or \
            v.dtype != q.dtype or attn_mask is not None or dropout_p != 0.0:
        return None
    if q.dim() < 3 or k.dim() != q.dim() or v.dim() != q.dim():
        return None
    if k.shape[:-3] != q.shape[:-3] or v.shape[:-2] != k.shape[:-2] or \
            k.shape[-1] != q.shape[-1]:
        return None  # batch dims that broadcast
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if heads != kv_heads and not (enable_gqa and kv_heads > 0 and heads % kv_heads == 0):
        return None  # PyTorch's own error, or a broadcast of the head dim
    length, source, width = q.shape[-2], k.shape[-2], q.shape[-1]
    if 0 in (length, source, width, heads) or 0 in q.shape[:-3]:
        return None
    batch = math.prod(q.shape[:-3])
    if scale is None:
        scale = 1.0 / math.sqrt(width)
    qpos = kpos = None
    order = _sequence_order()
    if is_causal and order is not None:
        if length != len(order) or source != len(order):
            _refuse_ordered(f"{length} queries and {source} keys, the order is of "
                            f"{len(order)} positions")
        # A constant of the program: the ring reads it to skip the blocks
        # the mask hides (shardx-ring-attention).
        qpos = torch.tensor(order, dtype=torch.int64, device=q.device)
        kpos = qpos
    elif is_causal:
        qpos = torch.arange(length, device=q.device)
        kpos = torch.arange(source, device=q.device)
    out, _ = torch.ops.shardx.attention(
        q.reshape(batch, heads, length, width), k.reshape(batch, kv_heads, source, width),
        v.reshape(batch, kv_heads, source, v.shape[-1]), qpos, kpos, float(scale), products)
    return out.reshape(*q.shape[:-1], v.shape[-1])




def composite_mode(stack: contextlib.ExitStack) -> None:
    """Enters the tracing mode that records ``shardx::attention`` (when
    ``composite()`` is on) on ``stack``."""
    if _composite_enabled():
        stack.enter_context(_SdpaMode(_composite_attention))
    elif _sequence_order() is not None:
        def refuse(*args, is_causal=False, **kwargs):
            if is_causal or (len(args) > 5 and args[5]):
                _refuse_ordered("the composite attention op is off (composite(False))")
            return None
        stack.enter_context(_SdpaMode(refuse))


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
    if _composite_enabled() and q.dtype in PRODUCTS and k.dtype == q.dtype and \
            v.dtype == q.dtype and attn_mask is None and dropout_p == 0.0:
        # The composite op at this precision (products = bf16/f16): one
        # fused kernel per op on the cuda target, no [B, H, Sq, Sk]
        # probabilities kept from the forward for the backward.
        with torch.autocast(q.device.type, enabled=False):
            out = _composite_or_none(q.float(), k.float(), v.float(), None, 0.0, is_causal,
                                     scale, enable_gqa, PRODUCTS[q.dtype])
        if out is not None:
            return out.to(q.dtype)
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


class _SdpaMode(TorchFunctionMode):
    """Runs ``scaled_dot_product_attention`` calls through ``handler``
    (``_attention``, ``_composite_attention``), PyTorch's own where it
    returns None."""

    def __init__(self, handler):
        super().__init__()
        self.handler = handler

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            out = self.handler(*args, **kwargs)
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
        with _SdpaMode(_attention):
            yield
    finally:
        _state.depth -= 1
