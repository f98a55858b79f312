"""Modules, losses and optimizers the importer must cover (shared by tests
and scripts/gen_examples.py)."""

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    """Multi-head self-attention written out in ops (Megatron layout: q, k,
    v column-parallel over heads, out row-parallel)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        h = self.heads

        def split(t):
            return t.view(b, s, h, d // h).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-2, -1) / (d // h) ** 0.5
        a = torch.softmax(scores, dim=-1) @ v
        return self.out(a.transpose(1, 2).reshape(b, s, d))


class Block(nn.Module):
    """Pre-norm transformer block: attention + GELU MLP."""

    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class MHA(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class EmbeddingLM(nn.Module):
    def __init__(self, vocab: int, dim: int):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.proj = nn.Linear(dim, vocab)

    def forward(self, ids):
        return F.log_softmax(self.proj(torch.tanh(self.emb(ids))), dim=-1)


def mlp(din=8, hidden=16, dout=8, act=nn.ReLU):
    return nn.Sequential(nn.Linear(din, hidden), act(), nn.Linear(hidden, dout))


def nll(out, target):
    return F.nll_loss(out.reshape(-1, out.shape[-1]), target.reshape(-1))


class HaloUNet(nn.Module):
    """A small U-Net-like CNN for spatial (domain) parallelism: 3x3
    convolutions (stride 1, padding 1) with ReLU at two resolutions, a 2x2
    average pooling and a nearest 2x upsampling written as reshapes (they
    keep an even H or W split), a skip connection concatenated on channels.
    With ``levels=1`` only the full-resolution convolutions (any H, W).
    ``spatial`` (placements, e.g. ``[Shard(2), Shard(3)]``) constrains the
    activations after each convolution to stay split, as a ShardTensor's
    do (``shardx.constrain``)."""

    def __init__(self, cin: int = 2, width: int = 4, cout: int = 2, levels: int = 2, spatial=None):
        super().__init__()
        self.levels = levels
        self.spatial = spatial
        self.enc = nn.Conv2d(cin, width, 3, padding=1)
        self.mid = nn.Conv2d(width, width, 3, padding=1)
        self.dec = nn.Conv2d(2 * width if levels == 2 else width, cout, 3, padding=1)

    def _keep(self, t):
        if self.spatial is None:
            return t
        import shardx
        return shardx.constrain(t, self.spatial)

    def forward(self, x):
        a = self._keep(F.relu(self.enc(x)))
        if self.levels == 1:
            return self.dec(self._keep(F.relu(self.mid(a))))
        n, c, h, w = a.shape
        p = a.reshape(n, c, h // 2, 2, w // 2, 2).mean((3, 5))
        b = self._keep(F.relu(self.mid(p)))
        u = b[:, :, :, None, :, None].expand(n, c, h // 2, 2, w // 2, 2).reshape(n, c, h, w)
        return self.dec(torch.cat([a, u], 1))


class StridedUNet(nn.Module):
    """HaloUNet's downsampling as a strided convolution (3x3, stride 2,
    padding 1): a full-resolution convolution, the stride-2 one, a
    convolution at half resolution and, with ``up=True`` (even H, W), the
    nearest 2x upsampling as a reshape, a skip connection and a last
    convolution at full resolution; without it the output is at half
    resolution (any H, W)."""

    def __init__(self, cin: int = 2, width: int = 4, cout: int = 2, up: bool = True):
        super().__init__()
        self.up = up
        self.enc = nn.Conv2d(cin, width, 3, padding=1)
        self.down = nn.Conv2d(width, width, 3, stride=2, padding=1)
        self.mid = nn.Conv2d(width, width if up else cout, 3, padding=1)
        self.dec = nn.Conv2d(2 * width, cout, 3, padding=1) if up else None

    def forward(self, x):
        a = F.relu(self.enc(x))
        b = self.mid(F.relu(self.down(a)))
        if not self.up:
            return b
        n, c, h, w = a.shape
        u = F.relu(b)[:, :, :, None, :, None].expand(n, c, h // 2, 2, w // 2, 2).reshape(n, c, h, w)
        return self.dec(torch.cat([a, u], 1))


class PoolUNet(nn.Module):
    """HaloUNet with PyTorch's pooling: a 3x3 convolution, a 2x2 max
    pooling (stride 2), a 3x3 convolution at half resolution, a 3x3 average
    pooling (stride 1, padding 1) and, with ``up=True`` (even H, W), the
    nearest 2x upsampling as a reshape, a skip connection and a last
    convolution at full resolution; without it a last convolution at half
    resolution (any H, W whose halves split like the image)."""

    def __init__(self, cin: int = 2, width: int = 4, cout: int = 2, up: bool = True):
        super().__init__()
        self.up = up
        self.enc = nn.Conv2d(cin, width, 3, padding=1)
        self.mid = nn.Conv2d(width, width, 3, padding=1)
        self.dec = nn.Conv2d(2 * width if up else width, cout, 3, padding=1)

    def forward(self, x):
        a = F.relu(self.enc(x))
        b = F.relu(self.mid(F.max_pool2d(a, 2)))
        c = F.avg_pool2d(b, 3, stride=1, padding=1)
        if not self.up:
            return self.dec(c)
        n, ch, h, w = a.shape
        u = c[:, :, :, None, :, None].expand(n, ch, h // 2, 2, w // 2, 2).reshape(n, ch, h, w)
        return self.dec(torch.cat([a, u], 1))


class HaloNet1d(nn.Module):
    """A 1-d CNN (NCL) for sequence/domain splits of L: a 3-tap convolution,
    optionally a 2x max pooling, a stride-2 convolution and a dilated one
    (dilation 2, 5-row extent)."""

    def __init__(self, cin: int = 2, width: int = 4, cout: int = 2, pool: bool = True):
        super().__init__()
        self.pool = pool
        self.a = nn.Conv1d(cin, width, 3, padding=1)
        self.b = nn.Conv1d(width, width, 3, stride=2, padding=1)
        self.c = nn.Conv1d(width, cout, 3, padding=2, dilation=2)

    def forward(self, x):
        h = F.relu(self.a(x))
        if self.pool:
            h = F.max_pool1d(h, 2)
        return self.c(F.relu(self.b(h)))


class HaloNet3d(nn.Module):
    """A 3-d CNN (NCDHW) for domain splits of D, H and W: a 3x3x3
    convolution, a stride-2 convolution and a dilated one (dilation 2,
    5-plane extent); with ``pool``, a 2x2x2 max pooling before the stride-2
    convolution and a 3x3x3 average pooling (stride 1, padding 1, the
    padding not counted) after it."""

    def __init__(self, cin: int = 2, width: int = 4, cout: int = 2, pool: bool = False):
        super().__init__()
        self.pool = pool
        self.a = nn.Conv3d(cin, width, 3, padding=1)
        self.b = nn.Conv3d(width, width, 3, stride=2, padding=1)
        self.c = nn.Conv3d(width, cout, 3, padding=2, dilation=2)

    def forward(self, x):
        h = F.relu(self.a(x))
        if self.pool:
            h = F.max_pool3d(h, 2)
        h = F.relu(self.b(h))
        if self.pool:
            h = F.avg_pool3d(h, 3, stride=1, padding=1, count_include_pad=False)
        return self.c(h)


class LlamaBlock(nn.Module):
    """A Llama-style decoder block for context parallelism: RMSNorm, rotary
    position embeddings (RoPE), grouped-query attention with a causal mask,
    and a SwiGLU MLP, each with a residual. The rotary angles and the causal
    mask are built from ``torch.arange`` over the positions, so a rank that
    holds a block of the sequence builds its own rows of both.

    ``sdpa=True`` runs the attention as torchtitan's Llama does:
    ``F.scaled_dot_product_attention(q, k, v, is_causal=True)`` on the
    repeated K and V (traced under the math backend, which builds the causal
    mask from positions and scales q and k by the root of the scale each)."""

    def __init__(self, dim: int = 32, heads: int = 4, kv_heads: int = 2, hidden: int = 64,
                 theta: float = 10000.0, eps: float = 1e-6, sdpa: bool = False):
        super().__init__()
        assert dim % heads == 0 and heads % kv_heads == 0
        self.sdpa = sdpa
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.theta, self.eps = theta, eps
        self.attn_norm = nn.Parameter(torch.ones(dim))
        self.wq = nn.Linear(dim, heads * self.hd, bias=False)
        self.wk = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(dim, kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, dim, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(dim))
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def _norm(self, x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * weight

    def _rope(self, t, cos, sin):
        # t: (b, s, h, hd); rotate the two halves of each head (Llama's
        # rotate_half convention).
        a, b = t[..., : self.hd // 2], t[..., self.hd // 2:]
        return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

    def forward(self, x, positions=None):
        # positions: each row's position (the rotary angles'), for rows in
        # another order (context parallelism's zig-zag).
        bsz, s, _ = x.shape
        pos = (torch.arange(s, dtype=torch.float32) if positions is None
               else positions.to(torch.float32))
        inv = 1.0 / self.theta ** (torch.arange(0, self.hd // 2, dtype=torch.float32) * 2 / self.hd)
        ang = pos[:, None] * inv[None, :]
        cos, sin = ang.cos()[None, :, None, :], ang.sin()[None, :, None, :]
        h = self._norm(x, self.attn_norm)
        q = self._rope(self.wq(h).view(bsz, s, self.heads, self.hd), cos, sin)
        k = self._rope(self.wk(h).view(bsz, s, self.kv_heads, self.hd), cos, sin)
        v = self.wv(h).view(bsz, s, self.kv_heads, self.hd)
        rep = self.heads // self.kv_heads
        k = k.repeat_interleave(rep, dim=2)
        v = v.repeat_interleave(rep, dim=2)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            scores = q @ k.transpose(-2, -1) / self.hd ** 0.5
            idx = torch.arange(s) if positions is None else positions
            causal = idx[:, None] >= idx[None, :]
            scores = scores.masked_fill(~causal, float("-inf"))
            a = torch.softmax(scores, dim=-1) @ v
        x = x + self.wo(a.transpose(1, 2).reshape(bsz, s, -1))
        h = self._norm(x, self.mlp_norm)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def moe_experts(xe, w1, w3, w2):
    """SiLU-gated experts on an expert buffer ``xe [E, G, C, D]``:
    ``w2[e](silu(x w1[e]) * x w3[e])`` for each expert ``e``."""
    h = F.silu(torch.einsum("egcd,edh->egch", xe, w1))
    h = h * torch.einsum("egcd,edh->egch", xe, w3)
    return torch.einsum("egch,ehd->egcd", h, w2)


class MoEBlock(nn.Module):
    """A Mixtral-style mixture-of-experts block in static shapes: a router,
    top-k softmax gating (Mixtral's: the softmax of the router logits,
    renormalized over the k chosen experts) and ``experts`` SiLU-gated
    experts (``w2(silu(x w1) * x w3)``), with GShard/Switch capacity
    dispatch: the tokens of each group (dim 0 of ``x [groups, tokens,
    dim]``) are scattered by one-hot ``dispatch [G, S, E, C]`` into an
    expert buffer ``[E, G, C, D]`` (``C = capacity`` slots per expert and
    group, token-major, choice-major within a token; a token past capacity
    is dropped, as in GShard), each expert runs on its slots, and
    ``combine`` (the gate weights on the same one-hot) gathers them back.
    With the tokens split on G and the experts' weights on E, the buffer's
    move from Shard(G) to Shard(E) and back is expert parallelism's two
    all-to-alls. ``capacity=None`` is ``tokens`` (no token can be dropped);
    GShard's is ``ceil(factor * top_k * tokens / experts)``. ``buffer``
    (placements, e.g. ``[Shard(1), Shard(0)]`` on a (dp, ep) mesh)
    constrains the expert buffer and the experts' output to that layout
    (``shardx.constrain``); without it propagation chooses."""

    def __init__(self, dim: int = 8, hidden: int = 16, experts: int = 4, top_k: int = 2,
                 capacity=None, buffer=None):
        super().__init__()
        self.experts, self.top_k, self.capacity = experts, top_k, capacity
        self.buffer = buffer
        self.router = nn.Linear(dim, experts, bias=False)
        scale = dim ** -0.5
        self.w1 = nn.Parameter(torch.randn(experts, dim, hidden) * scale)
        self.w3 = nn.Parameter(torch.randn(experts, dim, hidden) * scale)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, dim) * hidden ** -0.5)

    def route(self, x):
        """(dispatch, combine), each ``[G, S, E, C]``, of tokens ``x [G, S, D]``."""
        g, s, _ = x.shape
        e, k = self.experts, self.top_k
        c = s if self.capacity is None else self.capacity
        probs = torch.softmax(self.router(x), dim=-1)
        weights, chosen = probs.topk(k, dim=-1)                      # [G, S, k]
        weights = weights / weights.sum(-1, keepdim=True)
        onehot = (chosen[..., None] == torch.arange(e)).to(x.dtype)  # [G, S, k, E]
        flat = onehot.reshape(g, s * k, e)
        slot = (torch.cumsum(flat, dim=1) - 1) * flat                # slot of each choice
        place = (slot[..., None] == torch.arange(c).to(x.dtype)).to(x.dtype) * flat[..., None]
        place = place.reshape(g, s, k, e, c)
        dispatch = place.sum(2)                                      # [G, S, E, C]
        combine = (weights[..., None, None] * place).sum(2)
        return dispatch, combine

    def forward(self, x):
        dispatch, combine = self.route(x)
        xe = self._keep(torch.einsum("gsec,gsd->egcd", dispatch, x))  # expert buffer
        ye = self._keep(moe_experts(xe, self.w1, self.w3, self.w2))
        return torch.einsum("gsec,egcd->gsd", combine, ye)

    def _keep(self, t):
        if self.buffer is None:
            return t
        import shardx
        return shardx.constrain(t, self.buffer)
