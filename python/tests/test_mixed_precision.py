"""Mixed precision on the CPU target: train steps traced under
``torch.autocast('cpu', dtype=bf16|f16)`` (bf16/f16 GEMMs and activations,
f32 parameters, loss and update) compiled unsharded and sharded over 2 thread
ranks, checked against the same step run eagerly by PyTorch under autocast,
and the sharded runs against the unsharded one.

ShardX accumulates every bf16/f16 contraction and reduction in f32 and
rounds once (``shardx-widen-accumulation``), as PyTorch's CPU kernels do, so
the remaining differences are the summation order and, when sharded, the
rounding of each rank's bf16/f16 partial sum before the f32-accumulating
all-reduce: about one unit in the last place of the low-precision type. The
tolerances (docs/Compiler.md, "Mixed precision") are stated per dtype
relative to the largest magnitude of the compared tensor.
"""

import numpy as np
import pytest
import torch
import torch.nn as nn

import shardx
from shardx import Mesh, Replicate, Shard
from shardx.train import TrainStep

# Per dtype: relative tolerance on each element, and absolute tolerance as a
# fraction of the compared tensor's largest magnitude. bf16 keeps 8 bits of
# mantissa (unit roundoff 2^-8 = 3.9e-3), f16 11 bits (2^-11 = 4.9e-4): the
# bounds allow a few units of rounding in the last low-precision op.
TOLERANCES = {torch.bfloat16: (3e-2, 2e-2), torch.float16: (4e-3, 3e-3)}
DTYPES = [torch.bfloat16, torch.float16]


class AutocastMLP(nn.Module):
    """Linear -> GELU -> Linear -> ReLU -> Linear with its forward under
    autocast: the GEMMs run in `dtype`, the output is cast back to f32."""

    def __init__(self, dtype, sizes=(32, 64, 48, 8)):
        super().__init__()
        self.dtype = dtype
        self.l1 = nn.Linear(sizes[0], sizes[1])
        self.l2 = nn.Linear(sizes[1], sizes[2])
        self.l3 = nn.Linear(sizes[2], sizes[3])

    def forward(self, x):
        with torch.autocast("cpu", dtype=self.dtype):
            h = torch.nn.functional.gelu(self.l1(x))
            h = torch.relu(self.l2(h))
            out = self.l3(h)
        return out.float()


def mse(out, target):
    return ((out - target) ** 2).mean()


def make_step(dtype, momentum=0.0):
    torch.manual_seed(0)
    module = AutocastMLP(dtype)
    step = TrainStep(module, mse, "sgd", lr=0.5, momentum=momentum)
    x = torch.randn(16, 32)
    y = torch.randn(16, 8)
    return step, step.example_args([x], y)


def close(got, want, dtype, what):
    rtol, frac = TOLERANCES[dtype]
    got = got.to_torch() if hasattr(got, "to_torch") else got
    got = got.detach().float().numpy()
    want = want.detach().float().numpy()
    atol = frac * max(float(np.abs(want).max()), 1e-30)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def run_compiled(step, args, mesh, in_placements):
    f = shardx.compile(step, mesh, in_placements)
    params, state, inputs, target = args
    return f(params, state, inputs, target)


def placements_for(args, batch_sharded):
    """dp over 2 ranks: the batch (inputs and target) sharded on dim 0, the
    parameters and optimizer state replicated."""
    params, state, inputs, target = args
    n_state = sum(len(v) for v in state.values())
    return ([[Replicate()]] * (len(params) + n_state) +
            [[Shard(0)] if batch_sharded else [Replicate()]] * (len(inputs) + 1))


def check_step(dtype, momentum, mesh, batch_sharded):
    step, args = make_step(dtype, momentum)
    want_loss, want_params, _ = step(*args)
    in_pl = placements_for(args, batch_sharded) if mesh is not None else None
    got_loss, got_params, _ = run_compiled(step, args, mesh, in_pl)
    close(got_loss, want_loss, dtype, "loss")
    for i, (g, w, p0) in enumerate(zip(got_params, want_params, args[0])):
        got_update = (g.to_torch() if hasattr(g, "to_torch") else g) - p0
        close(got_update, w - p0, dtype, f"update of parameter {i}")
    return got_loss, got_params


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_autocast_step_matches_eager_unsharded(dtype):
    check_step(dtype, 0.0, None, False)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_autocast_step_matches_eager_dp2(dtype):
    check_step(dtype, 0.9, Mesh((2,), ("dp",)), True)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_sharded_matches_unsharded(dtype):
    """The dp2 step against ShardX's own unsharded step."""
    mesh = Mesh((2,), ("dp",))
    loss1, params1 = check_step(dtype, 0.0, None, False)
    loss2, params2 = check_step(dtype, 0.0, mesh, True)
    _, args = make_step(dtype)
    close(loss2, loss1.to_torch(), dtype, "loss, dp2 vs unsharded")
    for i, (a, b, p0) in enumerate(zip(params2, params1, args[0])):
        close(a.to_torch() - p0, b.to_torch() - p0, dtype, f"update {i}, dp2 vs unsharded")


def test_bf16_gemm_accumulates_in_f32():
    """A bf16 matmul over k = 4096 equals PyTorch's (f32 accumulation,
    rounded once); summing in bf16 would be off by several percent."""
    torch.manual_seed(0)

    def matmul(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (a @ b,)

    a, b = torch.rand(8, 4096), torch.rand(4096, 8)
    want = matmul(a, b)[0]
    got = shardx.compile(matmul, None)(a, b)[0].to_torch()
    assert got.dtype == torch.bfloat16
    # Exact up to the summation order: within one bf16 unit of the result.
    np.testing.assert_allclose(got.float().numpy(), want.float().numpy(), rtol=2 ** -7)
