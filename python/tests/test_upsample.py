"""``F.interpolate`` in train steps (U-Nets, diffusion models, FPNs):
``nearest`` and ``nearest-exact`` (their backward had no handler) bit for
bit with eager, ``bilinear`` (no handler at all) within a few ulps, both
directions, at integer and fractional scales and sizes, unsharded and split
over the channels and the rows."""

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Shard as S

MODES = {
    "nearest_x2": ("nearest", dict(scale_factor=2)),
    "nearest_size": ("nearest", dict(size=(11, 7))),
    "nearest_x1.5": ("nearest", dict(scale_factor=1.5)),
    "nearest_exact_size": ("nearest-exact", dict(size=(9, 13))),
    "bilinear_x2": ("bilinear", dict(scale_factor=2, align_corners=False)),
    "bilinear_size_corners": ("bilinear", dict(size=(9, 13), align_corners=True)),
    "bilinear_x0.5": ("bilinear", dict(scale_factor=0.5, align_corners=False)),
    "bilinear_x1.7": ("bilinear", dict(scale_factor=1.7, align_corners=False)),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("case", sorted(MODES))
def test_interpolate_and_its_gradient_match_eager(case, dtype):
    mode, kw = MODES[case]
    torch.manual_seed(0)
    x = torch.randn(2, 4, 5, 6, dtype=dtype)
    weight = torch.randn(F.interpolate(x, mode=mode, **kw).shape, dtype=dtype)

    def step(x):
        x = x.detach().requires_grad_(True)
        y = F.interpolate(x, mode=mode, **kw)
        return y.detach(), torch.autograd.grad((y * weight).sum(), x)[0]
    want = step(x)
    eps = torch.finfo(dtype).eps
    for f in (shardx.compile(step, None), shardx.compile(step, Mesh((2,), ("c",)), [[S(1)]]),
              shardx.compile(step, Mesh((2,), ("r",)), [[S(2)]])):
        for got, w in zip(f(x), want):
            got = got.to_torch()
            if mode.startswith("nearest"):
                assert torch.equal(got, w)
            else:
                torch.testing.assert_close(got, w, rtol=4 * eps, atol=4 * eps * w.abs().max().item())


PADS = {
    "circular": ("circular", (1, 2, 2, 1)),
    "circular_rows": ("circular", (0, 0, 3, 0)),
    "replicate": ("replicate", (1, 2, 2, 1)),
    "reflect": ("reflect", (1, 2, 2, 1)),
    "replicate_1d": ("replicate", (2, 3)),
    "reflect_1d": ("reflect", (3, 1)),
}


@pytest.mark.parametrize("case", sorted(PADS))
def test_padding_modes_and_their_gradients_match_eager_bit_for_bit(case):
    """Circular (new_empty_strided had no handler), replication (its
    backward had none) and reflection padding (its backward in ATen's
    order, not the core decomposition's), 1-d and 2-d."""
    mode, pad = PADS[case]
    torch.manual_seed(1)
    x = torch.randn(2, 3, 5, 6) if len(pad) == 4 else torch.randn(2, 3, 7)
    weight = torch.randn(F.pad(x, pad, mode=mode).shape)

    def step(x):
        x = x.detach().requires_grad_(True)
        y = F.pad(x, pad, mode=mode)
        return y.detach(), torch.autograd.grad((y * weight).sum(), x)[0]
    want = step(x)
    for f in (shardx.compile(step, None), shardx.compile(step, Mesh((2,), ("c",)), [[S(1)]]),
              shardx.compile(step, Mesh((2,), ("r",)), [[S(2)]])):
        for got, w in zip(f(x), want):
            assert torch.equal(got.to_torch(), w)
