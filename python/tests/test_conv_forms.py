"""Grouped, depthwise and transposed convolutions (1-, 2- and 3-d, with
stride, padding, dilation and output_padding) and their gradients, against
eager PyTorch: unsharded, the batch split, the channels split along the
groups, and the rows split (halo exchange). Before, each raised an
UnsupportedOpError: depthwise convolutions (ConvNeXt, MobileNet, Mamba's
causal conv1d) and transposed ones (U-Net decoders, GAN generators) did not
import."""

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S

PLANS = {"whole": None, "batch": [[S(0)], [R()], [R()]], "rows": [[S(2)], [R()], [R()]]}

GROUPED = {
    "2d_groups2": ((2, 4, 7, 6), (6, 2, 3, 3), dict(groups=2, padding=1)),
    "2d_depthwise_stride2": ((2, 4, 9, 8), (4, 1, 3, 3), dict(groups=4, padding=1, stride=2)),
    "2d_depthwise_x2_dilated": ((2, 4, 9, 8), (8, 1, 3, 3), dict(groups=4, padding=2, dilation=2)),
    "1d_causal_depthwise": ((2, 6, 10), (6, 1, 4), dict(groups=6, padding=3)),
    "3d_groups2": ((1, 4, 5, 5, 5), (4, 2, 3, 3, 3), dict(groups=2, padding=1)),
}

TRANSPOSED = {
    "2d_stride1": ((2, 4, 5, 6), (4, 3, 3, 3), dict(padding=1)),
    "2d_stride2_output_padding": ((2, 4, 5, 6), (4, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
    "2d_stride2_kernel4": ((2, 4, 5, 6), (4, 3, 4, 4), dict(stride=2, padding=1)),
    "2d_groups2_dilated": ((2, 4, 5, 6), (4, 3, 3, 3), dict(stride=2, padding=2, dilation=2, groups=2)),
    "1d_stride2": ((2, 4, 7), (4, 2, 4), dict(stride=2, padding=1)),
    "3d_stride2": ((1, 2, 3, 4, 3), (2, 2, 3, 3, 3), dict(stride=2, padding=1, output_padding=1)),
}


def _run(conv, x_shape, w_shape, kw, out_channels, plan):
    torch.manual_seed(0)
    x, w, b = torch.randn(x_shape), torch.randn(w_shape), torch.randn(out_channels)

    def step(x, w, b):
        x, w, b = [t.detach().requires_grad_(True) for t in (x, w, b)]
        y = conv(x, w, b, **kw)
        return (y.detach(),) + torch.autograd.grad((y * y).sum(), (x, w, b))
    placements = PLANS[plan]
    f = shardx.compile(step, None) if placements is None else \
        shardx.compile(step, Mesh((2,), ("r",)), placements)
    for got, want in zip(f(x, w, b), step(x, w, b)):
        torch.testing.assert_close(got.to_torch(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("case", sorted(GROUPED))
def test_grouped_convolutions_match_eager(case, plan):
    x_shape, w_shape, kw = GROUPED[case]
    conv = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(x_shape)]
    _run(conv, x_shape, w_shape, kw, w_shape[0], plan)


def test_depthwise_convolution_with_channels_split_along_groups():
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 4, 9, 8), torch.randn(8, 1, 3, 3), torch.randn(8)

    def step(x, w, b):
        x, w, b = [t.detach().requires_grad_(True) for t in (x, w, b)]
        y = F.conv2d(x, w, b, groups=4, padding=1)
        return (y.detach(),) + torch.autograd.grad((y * y).sum(), (x, w, b))
    f = shardx.compile(step, Mesh((2,), ("tp",)), [[S(1)], [S(0)], [S(0)]])
    for got, want in zip(f(x, w, b), step(x, w, b)):
        torch.testing.assert_close(got.to_torch(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("plan", sorted(PLANS))
@pytest.mark.parametrize("case", sorted(TRANSPOSED))
def test_transposed_convolutions_match_eager(case, plan):
    x_shape, w_shape, kw = TRANSPOSED[case]
    conv = {3: F.conv_transpose1d, 4: F.conv_transpose2d, 5: F.conv_transpose3d}[len(x_shape)]
    _run(conv, x_shape, w_shape, kw, w_shape[1] * kw.get("groups", 1), plan)
