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
