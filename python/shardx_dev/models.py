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
