"""Elementwise and optimizer arithmetic as eager's CPU kernels compute it,
bit for bit, where a differential probe against eager found ShardX off
(2026-11-29): bool sums, bf16/f16 math rounded once from f32, variance of
narrow floats in f32, add/sub with alpha and addcmul as one fused
multiply-add, lerp as ATen's vector lerp, bf16 floor division by a number,
integer pow/sign/floor, round with decimals. Each case compares the
compiled function's outputs with eager's: same NaNs, values and zero
signs."""

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx.importer.values import UnsupportedOpError

NARROW = [torch.bfloat16, torch.float16]
FLOATS = [torch.float32, torch.float64] + NARROW


def _same_bits(got, want):
    """Same dtype, NaNs where eager has them, equal values and zero signs
    elsewhere (a NaN's own sign bit follows the instruction that made it:
    not compared)."""
    return (got.dtype == want.dtype
            and torch.equal(torch.isnan(got), torch.isnan(want))
            and torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
            and torch.equal(torch.signbit(torch.nan_to_num(got)),
                            torch.signbit(torch.nan_to_num(want))))


def _check(fn, *args):
    want = fn(*args)
    got = shardx.compile(fn, None)(*args)
    bad = [k for k, (g, w) in enumerate(zip(got, want)) if not _same_bits(g.to_torch(), w)]
    assert not bad, f"outputs {bad} differ from eager"


def test_bool_sum_is_or_and_product_is_and():
    torch.manual_seed(0)
    a, b = torch.rand(64) > 0.5, torch.rand(64) > 0.5
    _check(lambda a, b: (a + b, a * b), a, b)  # True + True was False


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_variance_and_math_round_once_from_f32(dtype):
    torch.manual_seed(1)
    x = torch.randn(8, 64).to(dtype)
    x[0, 3], x[0, 4] = 1e4, -1e4  # its square overflowed f16: var was inf
    y = torch.randn(8, 64).to(dtype) * 6
    y[0, 0] = -0.0  # erf(-0.0) is -0.0 (the polynomial gave +0.0)
    # (var_mean's mean: eager's Welford mean is an ulp off sum / n in f16
    # at times; the variance is what overflowed.)
    _check(lambda x, y: (x.var(-1), x.std(-1), torch.var_mean(x, -1, correction=0)[0],
                         torch.sigmoid(y), torch.exp(y), torch.tanh(y), torch.erf(y),
                         torch.log1p(y.abs())), x, y)


@pytest.mark.parametrize("dtype", FLOATS)
def test_add_and_sub_with_alpha_are_one_multiply_add(dtype):
    torch.manual_seed(2)
    a, b = (torch.randn(512) * 3).to(dtype), (torch.randn(512) * 3).to(dtype)
    _check(lambda a, b: (torch.add(a, b, alpha=0.3), torch.sub(a, b, alpha=0.3),
                         torch.add(a, 0.7, alpha=0.3), torch.sub(a, 0.7, alpha=2.5)), a, b)


@pytest.mark.parametrize("dtype", FLOATS)
def test_lerp_addcmul_addcdiv_as_eager(dtype):
    """Adam's moments are lerps and its update an addcdiv; SGD's is an add
    with alpha."""
    torch.manual_seed(3)
    s, e = torch.randn(1024).to(dtype), torch.randn(1024).to(dtype)
    w = (torch.rand(1024) * 2 - 0.5).to(dtype)
    t1, t2 = torch.randn(1024).to(dtype), (torch.randn(1024).abs() + 0.1).to(dtype)
    _check(lambda s, e, w, t1, t2: (
        torch.lerp(s, e, 0.1), torch.lerp(s, e, 0.9), torch.lerp(s, e, -0.7), torch.lerp(s, e, w),
        torch.addcmul(s, t1, t2, value=0.37), torch.addcdiv(s, t1, t2, value=-0.01),
        torch.addcmul(s, t1, t2), torch.addcdiv(s, t1, t2)), s, e, w, t1, t2)


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_division_by_a_number_or_scalar_tensor(dtype):
    torch.manual_seed(4)
    x, y = (torch.randn(512) * 5).to(dtype), torch.randn(512).to(dtype)
    s = torch.tensor(0.3)
    _check(lambda x, y, s: (x // 0.3, torch.div(x, 0.3, rounding_mode="trunc"), x // y,
                            torch.div(x, y, rounding_mode="trunc"), x % 0.3, x * s, x / s,
                            s * x), x, y, s)


@pytest.mark.parametrize("dtype", NARROW)
def test_narrow_logit_and_squared_error_step_by_step(dtype):
    """Eager rounds each step to the dtype here (PyTorch's decompositions
    compute in f32 and round once): logit(1.0, eps=1e-3) is inf in bf16,
    as 1 - eps rounds to 1."""
    import torch.nn.functional as F
    torch.manual_seed(7)
    u = torch.rand(512).to(dtype)
    u[:3] = torch.tensor([0.0, 1.0, 0.5]).to(dtype)
    x, y = (torch.randn(512) * 3).to(dtype), torch.randn(512).to(dtype)
    _check(lambda u, x, y: (torch.logit(u, 1e-3), torch.logit(u),
                            F.mse_loss(x, y, reduction="none")), u, x, y)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_pow_sign_and_rounding(dtype):
    """Integer pow did not compile (math.ipowi), sign was not imported
    (a float compare), floor/ceil/round/trunc were refused."""
    torch.manual_seed(5)
    x = torch.randint(-6, 7, (256,), dtype=dtype)
    n = torch.randint(-3, 9, (256,), dtype=dtype)
    x[:4] = torch.tensor([1, -1, 0, 2 ** 20], dtype=dtype)  # 2**20 cubed wraps
    _check(lambda x, n: (x ** 3, x ** n, torch.sign(x), torch.floor(x), torch.ceil(x),
                         torch.round(x), torch.trunc(x), 2 ** n.clamp(min=0)), x, n)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_clamps_keep_the_input_at_a_bound(dtype):
    """relu(-0.0) is -0.0 in eager (its vector max keeps the input where
    it equals the bound; it was +0.0); a NaN input or bound gives NaN."""
    import torch.nn.functional as F
    torch.manual_seed(8)
    x = (torch.randn(64) * 5).to(dtype)
    x[5], x[6], x[7], x[8] = -0.0, float("nan"), 6.0, 0.0
    lo = torch.randn(64).to(dtype)
    lo[10], lo[11] = float("nan"), -0.0
    hi = lo + 2
    want_sign = torch.signbit(torch.relu(x)[5])
    assert want_sign
    _check(lambda x, lo, hi: (torch.relu(x), F.relu6(x), F.hardtanh(x, -1.0, 1.0),
                              torch.clamp(x, 0.0, 6.0), torch.clamp_min(x, -0.0),
                              torch.clamp(x, lo, hi), torch.clamp_max(x, hi)), x, lo, hi)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_round_with_decimals(dtype):
    torch.manual_seed(6)
    y = (torch.randn(256) * 100).to(dtype)
    _check(lambda y: (torch.round(y, decimals=2), torch.round(y, decimals=-1)), y)


def test_an_optimizer_step_inside_the_function_is_refused_by_name():
    """Optimizer.step() under the trace would keep state made while
    tracing (the second call's numbers were off by 0.017): refused."""
    p = torch.nn.Parameter(torch.randn(8, 4))
    opt = torch.optim.AdamW([p], lr=1e-2, foreach=False)

    def step(g):
        p.grad = g
        opt.step()
        return (p.detach().clone(),)

    with pytest.raises(UnsupportedOpError, match="optimizer.step\\(\\) outside"):
        shardx.compile(step, None)(torch.randn(8, 4))


@pytest.mark.parametrize("split", [False, True], ids=["whole", "rows_dp2"])
def test_kthvalue_and_sorted_zero_signs(split):
    """kthvalue had no handler; a sort or top-k of -0.0 gave +0.0 (its
    slot was a sum from +0.0). NaN sorts above every number, as eager."""
    torch.manual_seed(9)
    x = torch.randn(6, 9)
    x[1, 2], x[2, 3], x[2, 4] = float("nan"), -0.0, 5.0

    def fn(x):
        return (*torch.kthvalue(x, 3, 1), *torch.kthvalue(x, 2, 0, keepdim=True),
                *torch.kthvalue(x, 9), torch.sort(x, -1)[0], torch.topk(x, 3)[0])

    mesh = shardx.Mesh((2,), ("dp",)) if split else None
    want = fn(x)
    got = (shardx.compile(fn, mesh, [[shardx.Shard(0)]]) if split else shardx.compile(fn, None))(x)
    assert torch.signbit(want[6][2, 1])  # the sorted -0.0 keeps its sign
    for k, (g, w) in enumerate(zip(got, want)):
        assert _same_bits(g.to_torch(), w), k


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_narrow_linear_with_bias_rounds_once_as_eager(dtype):
    """addmm of bf16/f16 (nn.Linear under autocast): the product and the
    bias summed in f32, rounded once, as eager's CPU GEMM (the product
    rounded to the dtype first was an ulp off in 12 of 64 outputs)."""
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8), torch.randn(16, 8), torch.randn(16)

    def lin(x, w, b):
        return F.linear(x.to(dtype), w.to(dtype), b.to(dtype)), \
            torch.addmm(b.to(dtype), x.to(dtype), w.to(dtype).t(), beta=0.5, alpha=2.0)
    for got, want in zip(shardx.compile(lin, None)(x, w, b), lin(x, w, b)):
        assert torch.equal(got.to_torch(), want)
