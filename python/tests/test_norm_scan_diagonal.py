"""GroupNorm, the scans (cumsum, cumprod) and diagonals (diagonal, trace,
their backward diagonal_scatter), which had no handler or differed from
eager: each against eager PyTorch, unsharded and split over thread ranks
along the dims the op reads across. The scans and diagonals match bit for
bit (eager's CPU scans accumulate f32 in f64: so does ShardX now); GroupNorm
and the gradients through reductions within rounding."""

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S
from shardx.importer.values import UnsupportedOpError


def _same_bits(got, want):
    """Equal values, NaN where eager has NaN, and the same zero signs."""
    return (torch.equal(torch.isnan(got), torch.isnan(want))
            and torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
            and torch.equal(torch.signbit(got), torch.signbit(want)))


def _compile(fn, mesh, placements):
    return shardx.compile(fn, mesh, placements) if mesh else shardx.compile(fn, None)


GN_PLANS = {
    "whole": (None, None),
    "batch_dp2": (((2,), ("dp",)), [[S(0)], [R()], [R()]]),
    # 6 channels in 3 groups over 3 ranks: a group straddles two ranks.
    "channels_3": (((3,), ("tp",)), [[S(1)], [S(0)], [S(0)]]),
    "height_dp2": (((2,), ("dp",)), [[S(2)], [R()], [R()]]),
}


@pytest.mark.parametrize("plan", sorted(GN_PLANS))
def test_group_norm_step_matches_eager(plan):
    torch.manual_seed(0)
    x = torch.randn(4, 6, 5, 5)
    weight, bias = torch.rand(6) + 0.5, torch.randn(6) * 0.1
    target = torch.randn(4, 6, 5, 5)

    def step(x, weight, bias):
        x, weight, bias = [t.detach().requires_grad_(True) for t in (x, weight, bias)]
        y = F.group_norm(x * 1.5 + 0.2, 3, weight, bias)
        loss = ((y - target) ** 2 * torch.arange(1.0, 7.0)[:, None, None]).sum()
        return (y.detach(), loss.detach()) + torch.autograd.grad(loss, (x, weight, bias))

    shape, placements = GN_PLANS[plan]
    mesh = Mesh(*shape) if shape else None
    got = _compile(step, mesh, placements)(x, weight, bias)
    for g, w in zip(got, step(x, weight, bias)):
        torch.testing.assert_close(g.to_torch(), w, rtol=2e-5, atol=2e-5 * w.abs().max().item())


SCAN_PLANS = {"whole": (None, None), "scan_dim_dp2": (((2,), ("dp",)), [[S(1)]]),
              "rows_dp3": (((3,), ("dp",)), [[S(0)]])}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("plan", sorted(SCAN_PLANS))
def test_scans_match_eager_bit_for_bit(plan, dtype):
    torch.manual_seed(1)
    x = torch.randn(6, 300).to(dtype)
    x[2, 7] = float("nan")
    x[4, 100] = 0.0

    def scans(x):
        return torch.cumsum(x, 1), torch.cumprod(x * 2 ** -7 + 1, 1), torch.cumsum(x, 0)

    shape, placements = SCAN_PLANS[plan]
    got = _compile(scans, Mesh(*shape) if shape else None, placements)(x)
    for g, w in zip(got, scans(x)):
        assert _same_bits(g.to_torch(), w), (g.to_torch() - w).abs().nan_to_num().max()


def test_cumprod_gradient_with_zeros_matches_eager():
    torch.manual_seed(2)
    x = torch.randn(6, 10) * 0.5 + 1
    x[2, 3] = x[4, 7] = x[4, 8] = 0.0

    def step(x, w):
        x = x.detach().requires_grad_(True)
        y = torch.cumprod(x * w, 1)
        loss = (torch.cumprod(y, 0) * torch.arange(10.0)).sum() + y.sum()
        return torch.autograd.grad(loss, x)

    w = torch.tensor(1.1)
    want = step(x, w)[0]
    for mesh, placements in ((None, None), (Mesh((2,), ("dp",)), [[S(1)], [R()]])):
        got = _compile(step, mesh, placements)(x, w)[0].to_torch()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


DIAG_PLANS = {
    "whole": (None, None),
    "dim0_dp2": (((2,), ("dp",)), [[S(0)], [R()]]),
    "dim1_dp2": (((2,), ("dp",)), [[S(1)], [R()]]),
    "dim2_3": (((3,), ("dp",)), [[S(2)], [R()]]),
    "dims12_2x2": (((2, 2), ("a", "b")), [[S(1), S(2)], [R(), R()]]),
}


@pytest.mark.parametrize("plan", sorted(DIAG_PLANS))
def test_diagonals_and_their_gradient_match_eager_bit_for_bit(plan):
    torch.manual_seed(3)
    x = torch.randn(6, 8, 7)
    x[1, 2, 3] = -0.0  # on the first diagonal below: its sign must survive

    def step(x, w):
        x = x.detach().requires_grad_(True)
        d = torch.diagonal(x * w, 1, 1, 2)  # offset above, [6, 6]
        e = torch.diagonal(x, -2, 0, 2)  # offset below, other dims, [8, 4]
        t = torch.trace(d)
        loss = (d ** 2).sum() + (e * 3).sum() + t
        return (d, e, t) + torch.autograd.grad(loss, x)

    w = torch.tensor(1.3)
    shape, placements = DIAG_PLANS[plan]
    got = _compile(step, Mesh(*shape) if shape else None, placements)(x, w)
    want = step(x, w)
    assert torch.signbit(want[0][1, 2])
    for k, (g, w_) in enumerate(zip(got, want)):
        if k == 2:
            # The trace is a sum: split over ranks, it adds in another order.
            torch.testing.assert_close(g.to_torch(), w_, rtol=1e-6, atol=0)
        else:
            assert _same_bits(g.to_torch(), w_)


def test_as_strided_other_than_a_reshape_is_refused():
    def window(x):
        return (x.as_strided((3, 2), (2, 1), 1),)

    with pytest.raises(UnsupportedOpError, match="as_strided"):
        shardx.compile(window, None)(torch.randn(8))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_float_arithmetic_with_scalars_matches_eager_bit_for_bit(dtype):
    """A bf16/f16 tensor times or over a Python number takes the number in
    f32, as eager's CPU kernels do (it was rounded to bf16 first: 313 of
    1,800 products by 0.01 differed by an ulp); an add or sub of a number,
    and a product with a 0-d f32 tensor, round it to bf16 first, as eager's
    do."""
    torch.manual_seed(4)
    x, g = torch.randn(6, 300).to(dtype), torch.randn(6, 300).to(dtype)
    lr = torch.tensor(0.0123)

    def fn(x, g, lr):
        return (x * 0.01, 0.3 * x, x + 0.3, x / 3.0, x / 0.0123, x - lr * g, 0.7 - x)

    got = shardx.compile(fn, None)(x, g, lr)
    for k, (a, w) in enumerate(zip(got, fn(x, g, lr))):
        assert _same_bits(a.to_torch(), w), k
