"""Capacity-free (dropless) expert parallelism: the forward of the zoo's
Mixtral-style block (``models.MoEBlock(capacity=None)``: no token dropped)
as a local program whose dispatch and combine are
``shardx.ragged_all_to_all`` with the per-rank counts the routing gives at
run time (``shardx_dev.dropless_moe``), checked against the block's eager
forward: experts over 2 and 4 ranks, over ep with the tokens also split
over dp on a 2x2 mesh, token counts and expert counts that do not divide
over the ranks, on threads and under MPI. The rows the exchanges move between ranks are the
routed items whose expert lives on another rank, counted from the eager
routing. The program's backward (the exchanges' transposes) against
autograd."""

import math
import shutil

import numpy as np
import pytest
import torch

from shardx.artifact import Artifact, compile_mlir
from shardx.sharded_tensor import runtime
from shardx_dev import models
from shardx_dev.dropless_moe import local_program, moved_rows
from shardx_dev.testing.steps import run_tool

DIM, HIDDEN = 8, 16
CASES = {
    # name: (mesh shape, tokens, experts)
    "ep2": ((2,), 16, 4),
    "ep4": ((4,), 16, 4),
    "dp2xep2": ((2, 2), 16, 4),
    "uneven_ep2": ((2,), 7, 4),
    "uneven_ep4": ((4,), 10, 8),
    "uneven_dp2xep2": ((2, 2), 11, 6),
    # Experts that do not divide over ep: 2 + 1, 2 + 2 + 2 + 1.
    "uneven_experts_ep2": ((2,), 9, 3),
    "uneven_experts_ep4": ((4,), 10, 7),
    "uneven_experts_dp2xep2": ((2, 2), 11, 3),
}


def _case(name, tmp_path):
    shape, tokens, experts = CASES[name]
    torch.manual_seed(0)
    block = models.MoEBlock(DIM, HIDDEN, experts, top_k=2, capacity=None)
    x = torch.randn(tokens, DIM)
    with torch.no_grad():
        ref = block(x[None])[0].numpy()
    args = [x.numpy(), block.router.weight.detach().numpy(),
            block.w1.detach().numpy(), block.w3.detach().numpy(),
            block.w2.detach().numpy()]
    path = compile_mlir(local_program(tokens, DIM, HIDDEN, experts, shape),
                        str(tmp_path / f"{name}.so"))
    with torch.no_grad():
        moved = moved_rows(block, x, shape)
    return path, args, ref, moved


@pytest.mark.parametrize("name", list(CASES))
def test_dropless_matches_eager_on_threads(name, tmp_path):
    path, args, ref, moved = _case(name, tmp_path)
    y, rows = Artifact(path)["moe"](*args)
    np.testing.assert_allclose(y[:ref.shape[0]], ref, rtol=1e-4, atol=1e-5)
    # Every routed item whose expert is on another rank, and nothing else.
    assert float(rows) == moved
    assert moved > 0


@pytest.mark.parametrize("name", ["uneven_ep4", "uneven_experts_dp2xep2"])
def test_dropless_matches_eager_on_mpi(name, tmp_path, build_dir):
    mpirun = shutil.which("mpirun")
    if mpirun is None or not runtime().has_mpi:
        pytest.skip("needs OpenMPI and a runtime built with the mpi backend")
    path, args, ref, moved = _case(name, tmp_path)
    shape = CASES[name][0]
    ranks = int(np.prod(shape))
    files = []
    for i, a in enumerate(args):
        files.append(str(tmp_path / f"in{i}.npy"))
        np.save(files[-1], a)
    rows = math.ceil(ref.shape[0] / ranks) * ranks
    padded = np.zeros((rows, ref.shape[1]), np.float32)
    padded[:ref.shape[0]] = ref
    expect = [str(tmp_path / "y.npy"), str(tmp_path / "moved.npy")]
    np.save(expect[0], padded)
    np.save(expect[1], np.array(moved, np.float32))
    run_tool([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", ranks,
              f"{build_dir}/bin/shardx-exec", path, "--backend", "mpi",
              "--inputs", ",".join(files), "--expect", ",".join(expect)])


@pytest.mark.parametrize("name", ["ep2", "uneven_ep4", "uneven_experts_ep2",
                                  "uneven_experts_dp2xep2"])
def test_dropless_backward_matches_autograd(name, tmp_path):
    """The backward too: the combine's transpose is the dispatch's exchange
    and back; the gradients of x, the router and the experts against
    autograd of the eager block."""
    shape, tokens, experts = CASES[name]
    torch.manual_seed(0)
    block = models.MoEBlock(DIM, HIDDEN, experts, top_k=2, capacity=None)
    x = torch.randn(tokens, DIM, requires_grad=True)
    dy = torch.randn(tokens, DIM)
    y = block(x[None])[0]
    (y * dy).sum().backward()
    args = [x.detach().numpy(), block.router.weight.detach().numpy(),
            block.w1.detach().numpy(), block.w3.detach().numpy(),
            block.w2.detach().numpy(), dy.numpy()]
    path = compile_mlir(local_program(tokens, DIM, HIDDEN, experts, shape, backward=True),
                        str(tmp_path / f"{name}_bw.so"))
    out, _, dx, dwr, dw1, dw3, dw2 = Artifact(path)["moe"](*args)
    np.testing.assert_allclose(out[:tokens], y.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx[:tokens], x.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dwr, block.router.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    for got, want in ((dw1, block.w1), (dw3, block.w3), (dw2, block.w2)):
        np.testing.assert_allclose(got[:experts], want.grad.numpy(), rtol=1e-4, atol=1e-5)
