"""A dropless mixture-of-experts block in torchtitan's global form: the
tokens' expert choices sorted by expert (a stable argsort), the counts per
expert (``bincount``, or ``histc`` as torchtitan writes it), their
cumulative sum as the groups' end offsets, and each of the SiLU-gated
experts' three matmuls one ``torch._grouped_mm`` over the sorted rows
(row ``r`` uses expert ``e`` where ``offs[e-1] <= r < offs[e]``); the
rows, weighted by their gates, are added back to their tokens. No token is
dropped: every choice has its row. The importer lowers ``_grouped_mm`` to
a contraction over the experts masked by each row's expert
(docs/Rules.md, "Expert parallelism"), so with the experts' weights split
on E propagation runs each rank's experts only."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class GroupedMoEBlock(nn.Module):
    """Router, top-k softmax gating renormalized over the k chosen experts
    (Mixtral's), ``experts`` SiLU-gated experts ``w2(silu(x w1) * x w3)``
    run as grouped matmuls over the tokens sorted by expert. ``x [T, D]``
    (tokens flattened). ``counts`` is ``"bincount"`` or ``"histc"``.
    ``torch._grouped_mm`` on CPU wants ``dim`` and ``hidden`` multiples of
    4 (rows 16-byte aligned)."""

    def __init__(self, dim: int = 16, hidden: int = 32, experts: int = 4, top_k: int = 2,
                 counts: str = "bincount"):
        super().__init__()
        if counts not in ("bincount", "histc"):
            raise ValueError(f"counts={counts!r}: 'bincount' or 'histc'")
        self.experts, self.top_k, self.counts = experts, top_k, counts
        self.router = nn.Linear(dim, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, dim, hidden) * dim ** -0.5)
        self.w3 = nn.Parameter(torch.randn(experts, dim, hidden) * dim ** -0.5)
        self.w2 = nn.Parameter(torch.randn(experts, hidden, dim) * hidden ** -0.5)

    def route(self, x):
        """(gate weights ``[T, k]``, chosen experts ``[T, k]``)."""
        probs = torch.softmax(self.router(x), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        return weights / weights.sum(-1, keepdim=True), chosen

    def forward(self, x):
        e, k = self.experts, self.top_k
        weights, chosen = self.route(x)
        flat = chosen.reshape(-1)                                    # [T k]
        if self.counts == "histc":
            counts = torch.histc(flat.to(torch.float32), bins=e, min=0, max=e)
        else:
            counts = torch.bincount(flat, minlength=e)
        offs = torch.cumsum(counts, dim=0, dtype=torch.int32)        # groups' ends
        order = torch.argsort(flat, stable=True)                     # choices by expert
        token = order // k
        xs = x[token]                                                # [T k, D]
        h = F.silu(torch._grouped_mm(xs, self.w1, offs=offs)) * torch._grouped_mm(xs, self.w3, offs=offs)
        ys = torch._grouped_mm(h, self.w2, offs=offs) * weights.reshape(-1)[order][:, None]
        return torch.zeros_like(x).index_add(0, token, ys)
