"""Out-of-range indices in compiled programs (docs/Importer.md, "Index
checks"): nothing is read or written outside a tensor, whatever the index
values."""

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh


def test_huge_embedding_index_reads_nothing_outside_the_table():
    # Before the indices were made safe, 10**9 read far outside the table
    # (a segmentation fault).
    def f(w, idx):
        return F.embedding(idx, w).sum(0)
    w = torch.randn(8, 4, dtype=torch.float64)
    c = shardx.compile(f, Mesh((1,), ("tp",)))
    torch.testing.assert_close(c(w, torch.tensor([1, 2, 3])).to_torch(),
                               f(w, torch.tensor([1, 2, 3])))
    c(w, torch.tensor([1, 10**9, 3]))
