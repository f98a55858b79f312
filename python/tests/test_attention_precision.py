"""Attention at a fused GPU kernel's precision (shardx/importer/attention.py),
which the GPU backends of ``shardx.compile`` trace under: its numbers
against float64 and against PyTorch's math attention, the calls it leaves to
PyTorch, the compiled step on the CPU against eager under the same
precision, and the cuda target's GEMMs of the traced step."""

import contextlib
import glob
import os
import subprocess

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.nn.attention import SDPBackend, sdpa_kernel

import shardx
from shardx import TrainStep
from shardx.importer.attention import composite, flash_precision, mode_key


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / "cache"))


def _grads(ctx, q, k, v, **kw):
    """Output and input gradients of attention under ``ctx``."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    with ctx:
        o = F.scaled_dot_product_attention(q, k, v, **kw)
    (o.double() * torch.linspace(-1, 1, o.shape[-1], dtype=torch.float64)).sum().backward()
    return [o.detach().double()] + [t.grad.double() for t in (q, k, v)]


CASES = [dict(is_causal=True), dict(), dict(mask="bool"), dict(mask="float"),
         dict(is_causal=True, scale=0.3), dict(is_causal=True, enable_gqa=True)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_matches_float64_as_closely_as_math_attention(dtype, case):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8).to(dtype) for _ in range(3))
    kw = dict(case)
    if kw.get("enable_gqa"):
        k, v = k[:, :1], v[:, :1]  # 3 query heads on one key/value head
    mask = kw.pop("mask", None)
    if mask == "bool":
        kw["attn_mask"] = torch.rand(16, 16) > 0.3
    elif mask == "float":
        kw["attn_mask"] = torch.randn(16, 16)
    ref = _grads(contextlib.nullcontext(), *(t.double() for t in (q, k, v)),
                 **{n: (x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                        else x) for n, x in kw.items()})
    flash = _grads(flash_precision(), q, k, v, **kw)
    math_ = _grads(sdpa_kernel(SDPBackend.MATH), q, k, v, **kw)
    eps = torch.finfo(dtype).eps
    for name, f, m, r in zip(("out", "dq", "dk", "dv"), flash, math_, ref):
        scale = r.abs().max().item()
        err_flash = (f - r).abs().max().item()
        err_math = (m - r).abs().max().item()
        # The probabilities and dS are rounded to the inputs' dtype once more
        # than the math attention does: a few ulps of the dtype, no more.
        assert err_flash <= 8 * eps * scale, (name, err_flash, err_math, scale)
        assert err_flash <= 4 * err_math + 2 * eps * scale, (name, err_flash, err_math)
    # It is another computation than PyTorch's CPU attention, not the same.
    assert any(not torch.equal(f, m) for f, m in zip(flash, math_))


def test_calls_it_does_not_cover_are_pytorchs():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 8).to(torch.bfloat16) for _ in range(3))
    learned = torch.randn(8, 8, requires_grad=True)
    calls = [
        lambda: F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True),
        lambda: F.scaled_dot_product_attention(q, k[:, :2], v[:, :2], enable_gqa=True,
                                               attn_mask=torch.ones(8, 8, dtype=torch.bool)),
        lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=learned),
        lambda: F.scaled_dot_product_attention(q, k[:1], v[:1]),  # broadcast batch
    ]
    for call in calls:
        with sdpa_kernel(SDPBackend.MATH):
            want = call()
        with sdpa_kernel(SDPBackend.MATH), flash_precision():
            got = call()
        assert torch.equal(got, want)
    assert mode_key() == "attention=math,composite=1"
    with flash_precision():
        assert mode_key() == "attention=flash,composite=1"
        with flash_precision(False):
            assert mode_key() == "attention=flash,composite=1"
    assert mode_key() == "attention=math,composite=1"
    with composite(False):
        assert mode_key() == "attention=math,composite=0"


class Block(nn.Module):
    def __init__(self, dim=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(a.transpose(1, 2).reshape(b, s, d))


class Model(nn.Module):
    def __init__(self, dim=16):
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim) for _ in range(2)])

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for block in self.blocks:
                x = block(x)
        return x.float()


def _step(dim=16):
    torch.manual_seed(0)
    step = TrainStep(Model(dim), F.mse_loss, "sgd", lr=0.1, momentum=0.9)
    args = step.example_args([torch.randn(2, 8, dim)], torch.randn(2, 8, dim))
    return step, args


def _leaves(tree):
    return [t.full() if hasattr(t, "full") else t
            for t in pytree.tree_leaves(tree)]


def test_compiled_step_matches_eager_at_the_same_precision():
    """The step traced under flash_precision, compiled for the CPU, against
    eager PyTorch under flash_precision (the same computation): two steps,
    the loss, every parameter and momentum buffer."""
    step, (params, state, inputs, target) = _step()
    f = shardx.compile(step, None, donate=(), name="attn")
    p, s, ep, es = params, state, params, state
    for _ in range(2):
        with flash_precision():
            loss, p, s = f(p, s, inputs, target)
            el, ep, es = step.run_eager(ep, es, inputs, target)
        got = [torch.as_tensor(x) for x in _leaves((loss, p, s))]
        want = [torch.as_tensor(x) for x in _leaves((el, ep, es))]
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert not torch.isnan(g).any()
            torch.testing.assert_close(g.float(), w.float(), rtol=2e-2, atol=2e-3)


def _cuda_program(dim, name):
    """The cuda target's lowered program of the step of width ``dim``,
    compiled by ``backend="cuda"`` (which traces under flash_precision)."""
    step, (params, state, inputs, target) = _step(dim)
    f = shardx.compile(step, None, donate=(0, 1), backend="cuda", name=name)
    f.precompile(params, state, inputs, target)
    cache = os.environ["SHARDX_CACHE_DIR"]
    sources = [p for p in glob.glob(os.path.join(cache, "**", "*.mlir"), recursive=True)
               if f"jit_{name}" in open(p).read()]
    assert len(sources) == 1
    build = os.environ.get("SHARDX_BUILD", os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "build"))
    return subprocess.run([os.path.join(build, "bin", "shardx-compile"), sources[0],
                           "--target=cuda", "--emit=mlir", "-o", "-"],
                          capture_output=True, text=True, check=True).stdout


def test_cuda_backend_runs_attention_as_fused_kernels():
    """backend="cuda" traces under flash_precision (after a trace of the same
    layers at the CPU's precision in this process, whose regions must not be
    reused): a causal attention of head width 32 is the composite op with
    bf16 products, which the cuda target runs as the runtime's fused
    kernels, one call per op per layer, with no attention GEMM left."""
    step, (params, state, inputs, target) = _step(64)
    shardx.compile(step, None, donate=(0, 1), name="cpu_attn").precompile(
        params, state, inputs, target)
    out = _cuda_program(64, "gpu_attn")
    for kernel in ("attention_bf16", "attention_dq_bf16", "attention_dkv_bf16"):
        assert out.count(f"llvm.call @shardx_rt_cuda_{kernel}(") == 2, kernel
    assert "llvm.call @shardx_rt_cuda_gemm_batched_bf16_f32(" not in out
    assert "llvm.call @shardx_rt_cuda_gemm_batched_f32(" not in out


def test_cuda_backend_attention_of_other_widths_is_linalg():
    """A head width the kernels lack (8) keeps the linalg ops, every
    product's operands rounded to bf16 and the scale applied to the logits
    (not to q and k): all six products per layer (q k^T, P v; dP, dq, dk,
    dv) are cuBLAS GEMMs of bf16 values, none in f32."""
    out = _cuda_program(16, "gpu_attn8")
    assert "@shardx_rt_cuda_attention" not in out
    assert out.count("llvm.call @shardx_rt_cuda_gemm_batched_bf16_f32(") == 12
    assert "llvm.call @shardx_rt_cuda_gemm_batched_f32(" not in out


def test_regions_trace_the_ops_autocast_chose_once():
    """A layer traced as a region runs inside the caller's autocast; its
    second pass must not apply autocast again to what the first recorded.
    PyTorch's CPU attention multiplies in f32 under autocast: with regions
    as without, every attention GEMM of the traced step is f32 (regions
    used to make them bf16)."""
    import re
    from shardx.importer.module import trace
    kinds = {}
    for regions in (False, True):
        step, args = _step()
        text = trace(step, list(args), regions=regions)
        kinds[regions] = sorted(set(re.findall(r"batch_matmul ins\([^:]*: ([^)]*)\)", text)))
    assert kinds[True] == kinds[False]
    assert kinds[True] and all("bf16" not in k for k in kinds[True]), kinds
