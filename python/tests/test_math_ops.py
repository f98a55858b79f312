"""Activations, trigonometry and reductions that had no handler (an
``UnsupportedOpError`` before): their forward against eager PyTorch
(libm's functions against eager's vectorized ones: a few ulps), unsharded
and with the rows split over 2 thread ranks, and the gradients their
backward ops give (``leaky_relu_backward``, ``elu_backward``,
``hardtanh_backward``; the others' backward are compositions) in a
function that calls ``torch.autograd.grad``."""

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Shard as S

torch.manual_seed(0)
X = torch.randn(4, 8) * 1.5
Y = torch.randn(4, 8)
U = torch.rand(4, 8) * 1.8 - 0.9  # inside (-1, 1): asin, acos, atanh

OPS = {
    "tan": (lambda x: torch.tan(x * 0.5), X),
    "sinh_cosh": (lambda x: torch.sinh(x) - torch.cosh(x), X),
    "asin_acos": (lambda u: torch.asin(u) + 2 * torch.acos(u), U),
    "atan": (lambda x: torch.atan(x), X),
    "asinh_acosh_atanh": (lambda u: torch.asinh(u) + torch.acosh(u.abs() + 1) + torch.atanh(u), U),
    "log10_exp2": (lambda x: torch.log10(x.abs() + 0.1) + torch.exp2(x), X),
    "atan2": (lambda x: torch.atan2(x, Y), X),
    "copysign": (lambda x: torch.copysign(x, Y) + torch.copysign(x, -0.0), X),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), X),
    "elu": (lambda x: F.elu(x, 0.7), X),
    "selu": (lambda x: F.selu(x), X),
    "celu": (lambda x: F.celu(x, 1.3), X),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 0.8), X),
    "clamp_tensor": (lambda x: torch.clamp(x, min=Y, max=Y + 1.0), X),
    "cosine_similarity": (lambda x: F.cosine_similarity(x, x.flip(-1) + 0.5)[:, None], X),
    "max_min_all": (lambda x: (torch.max(x) - torch.min(x)).expand(4, 1), X),
    "prod": (lambda x: torch.prod(x * 0.5 + 1, -1, keepdim=True), X),
}


@pytest.mark.parametrize("split", [False, True], ids=["whole", "rows_dp2"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_forward_matches_eager(name, split):
    fn, x = OPS[name]
    g = lambda x: (fn(x),)
    want = g(x)[0]
    f = shardx.compile(g, Mesh((2,), ("dp",)), [[S(0)]]) if split else shardx.compile(g, None)
    got = f(x)[0].to_torch()
    torch.testing.assert_close(got, want, rtol=2e-6, atol=2e-6)


GRADS = ["leaky_relu", "elu", "selu", "celu", "hardtanh", "tan", "atan", "asin_acos",
         "sinh_cosh", "atan2", "clamp_tensor"]


@pytest.mark.parametrize("name", GRADS)
def test_gradients_match_eager(name):
    fn, x = OPS[name]
    w = torch.randn(8, 8) * 0.3

    def step(x, w):
        w = w.detach().requires_grad_(True)
        loss = (fn(x @ w * 0.5) ** 2).sum()
        return torch.autograd.grad(loss, w)

    want = step(x, w)[0]
    got = shardx.compile(step, None)(x, w)[0].to_torch()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
