"""bf16/f16 conversions of the CPU target against PyTorch's, bit for bit.

The CPU target converts to and from bf16/f16 with integer arithmetic
(``shardx-expand-narrow-floats``, docs/Compiler.md), never through a compiler
builtin such as ``__truncsfbf2``. These tests run the compiled conversions
on every bf16/f16 bit pattern and on f32/f64 values chosen at the rounding
edges (ties to even, subnormals, overflow, infinities, NaN) and compare them
with eager PyTorch, exactly (a NaN must stay a NaN; its payload is not
compared)."""

import numpy as np
import pytest
import torch

import shardx

NARROW = [torch.bfloat16, torch.float16]


def edge_values(dtype):
    """f32/f64 values around every rounding edge of bf16 and f16."""
    f = torch.finfo
    vals = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"),
            f(torch.float32).tiny, f(torch.float32).tiny / 8, f(torch.float32).max,
            65504.0, 65519.99, 65520.0, 65536.0, 3.4e38, 2.0 ** -14, 2.0 ** -24,
            2.0 ** -25, 2.0 ** -25 * 1.5, 2.0 ** -26, 6.1e-5, 5.96e-8, 2.98e-8]
    # Ties and their neighbours for both mantissa widths (8 and 11 bits).
    for bits in (8, 11):
        for k in range(0, 6):
            base = 1.0 + k * 2.0 ** -(bits - 1)
            for d in (-1, 0, 1):
                vals.append(base + 2.0 ** -bits + d * 2.0 ** -23)
    g = torch.Generator().manual_seed(0)
    rand = torch.randn(20000, generator=g, dtype=torch.float64)
    scale = torch.pow(2.0, torch.randint(-30, 20, (20000,), generator=g).double())
    x = torch.cat([torch.tensor(vals, dtype=torch.float64), rand * scale])
    x = torch.cat([x, -x])
    return x.to(dtype)


def same(got, want):
    got, want = got.detach(), want.detach()
    assert got.dtype == want.dtype and got.shape == want.shape
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), "NaN positions differ"
    g = got[~nan].view(-1)
    w = want[~nan].view(-1)
    bad = (g != w) | (torch.signbit(g) != torch.signbit(w))
    assert not bad.any(), (f"{int(bad.sum())} of {g.numel()} differ, e.g. "
                           f"{g[bad][:4].tolist()} != {w[bad][:4].tolist()}")


@pytest.mark.parametrize("src", [torch.float32, torch.float64])
def test_round_to_narrow(src):
    def round_trip(x):
        return (x.to(torch.bfloat16), x.to(torch.float16))
    x = edge_values(src)
    fn = shardx.compile(round_trip, None)
    got = fn(x)
    want = round_trip(x)
    for g, w in zip(got, want):
        same(g.to_torch() if hasattr(g, "to_torch") else g, w)


@pytest.mark.parametrize("dtype", NARROW)
def test_widen_every_bit_pattern(dtype):
    def widen(x):
        return (x.float(), x.double(), x * 3 + 1)
    x = torch.arange(-32768, 32768, dtype=torch.int32).to(torch.int16).view(dtype)
    fn = shardx.compile(widen, None)
    got = fn(x)
    for g, w in zip(got, widen(x)):
        same(g.to_torch() if hasattr(g, "to_torch") else g, w)
