"""Adaptive average and max pooling of any output size (VGG's (7, 7),
pyramid pooling, ...; only the global (1, 1) average imported before),
forward and backward, bit for bit with eager: windows that overlap and
differ in length, max's first index with NaN winning and an all -inf
window keeping its first element, 1-d and unbatched inputs; unsharded and
split over the channels and the rows."""

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Shard as S

CASES = {
    "avg_3x4": lambda x: F.adaptive_avg_pool2d(x, (3, 4)),
    "avg_5x5": lambda x: F.adaptive_avg_pool2d(x, (5, 5)),
    "max_3x4_indices": lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True),
    "max_4x5": lambda x: F.adaptive_max_pool2d(x, (4, 5)),
    "avg_1d": lambda x: F.adaptive_avg_pool1d(x[:, :, 0], 4),
    "avg_unbatched": lambda x: F.adaptive_avg_pool2d(x[0], (3, 4)),
}


def _same(a, b):
    return torch.equal(a.nan_to_num(), b.nan_to_num()) and torch.equal(a.isnan(), b.isnan())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", sorted(CASES))
def test_adaptive_pooling_matches_eager(case, dtype):
    fn = CASES[case]
    torch.manual_seed(0)
    x = torch.randn(2, 4, 7, 6, dtype=dtype)
    if case.startswith("max"):
        x[0, 0, 2, 2] = float("nan")
        x[1, 1] = float("-inf")
    out = fn(x)
    weight = torch.randn((out[0] if isinstance(out, tuple) else out).shape, dtype=dtype)

    def step(x):
        x = x.detach().requires_grad_(True)
        ys = fn(x)
        ys = ys if isinstance(ys, tuple) else (ys,)
        grad = torch.autograd.grad((ys[0] * weight).nan_to_num().sum(), x)[0]
        return [y.detach() for y in ys] + [grad]
    want = step(x)
    for f in (shardx.compile(step, None), shardx.compile(step, Mesh((2,), ("c",)), [[S(1)]]),
              shardx.compile(step, Mesh((2,), ("r",)), [[S(2)]])):
        for got, w in zip(f(x), want):
            assert _same(got.to_torch(), w)


def test_pooling_a_transposed_or_channels_last_activation():
    """Pooling over a transposed activation (Swin's pooler) and a
    channels-last network: their backward writes an as_strided_scatter (a
    view of the whole storage in another dim order), before refused."""
    import torch.nn as nn
    torch.manual_seed(1)
    lin, pool = nn.Linear(8, 8), nn.AdaptiveAvgPool1d(1)
    x = torch.randn(2, 5, 8)
    conv = nn.Conv2d(3, 4, 3, padding=1).to(memory_format=torch.channels_last)
    img = torch.randn(2, 3, 6, 6).to(memory_format=torch.channels_last)

    def step(x, img):
        x, img = x.detach().requires_grad_(True), img.detach().requires_grad_(True)
        a = pool(lin(x).transpose(1, 2)).flatten(1)
        b = F.adaptive_avg_pool2d(conv(img), (2, 3))
        loss = (a * a).sum() + (b * b).sum()
        return [a.detach(), b.detach()] + list(torch.autograd.grad(loss, (x, img)))
    want = step(x, img)
    for got, w in zip(shardx.compile(step, None)(x, img), want):
        torch.testing.assert_close(got.to_torch(), w, rtol=1e-5, atol=1e-6)


AVG_CEIL = {
    "stride2": ((2, 3, 7, 6), dict(kernel_size=3, stride=2, ceil_mode=True)),
    "padded": ((2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True)),
    "padded_not_counted": ((2, 3, 7, 6), dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                             count_include_pad=False)),
    "divisor": ((2, 3, 7, 7), dict(kernel_size=3, stride=3, ceil_mode=True, divisor_override=4)),
}


@pytest.mark.parametrize("case", sorted(AVG_CEIL))
def test_avg_pool_with_a_partial_last_window_matches_eager(case):
    """avg_pool2d with ceil_mode (a partial last window, clipped to the
    padded input in the divisor as ATen clips it), and its gradient, bit
    for bit; before refused."""
    shape, kw = AVG_CEIL[case]
    torch.manual_seed(2)
    x = torch.randn(*shape)
    weight = torch.randn(F.avg_pool2d(x, **kw).shape)

    def step(x):
        x = x.detach().requires_grad_(True)
        y = F.avg_pool2d(x, **kw)
        return y.detach(), torch.autograd.grad((y * weight).sum(), x)[0]
    want = step(x)
    for f in (shardx.compile(step, None), shardx.compile(step, Mesh((2,), ("r",)), [[S(2)]])):
        for got, w in zip(f(x), want):
            assert torch.equal(got.to_torch(), w)
