"""Expert parallelism: a Mixtral-style MoE block train step (router, top-2
softmax gating, SiLU-gated experts, GShard capacity dispatch into an
``[E, G, C, D]`` expert buffer; forward, backward and an SGD step) with the
token groups split over the ranks and the experts' weights split on E: over
2 and 4 ranks ("ep"), and over "ep" with the tokens also split over "dp" on
a 2x2 mesh. At these small sizes the expert buffer's layout is stated
(``models.MoEBlock(buffer=...)``, a ``shardx.constrain`` on the dispatch
and the experts' output: the token split, Shard(G), on 1-D meshes; groups
over dp and experts over ep on the 2x2); propagation plans the rest, and
the buffer's move from the token split to the expert split and back is an
all-to-all of the routed tokens (docs/Rules.md, "Expert parallelism").
With large experts propagation chooses the same plan unconstrained.
Each program is checked against eager PyTorch on the threads backend
(shardx.compile, two steps) and against its unsharded compile under mpirun
on the mpi backend (shardx-run --check, on 2 ranks and the 2x2 mesh);
uneven cases have 3 token groups and 3 experts on 2 ranks and on the 2x2
mesh."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S
from shardx.importer import trace
from shardx.train import TrainStep
from shardx_dev import models
from shardx_dev.testing.steps import assert_steps_match_eager, check_on_mpi, run_tool

DIM, HIDDEN = 16, 32
CASES = {
    # name: (mesh shape, groups, tokens per group, experts, capacity)
    "ep2": ((2,), 4, 8, 4, 4),
    "ep4": ((4,), 4, 8, 4, 4),
    "dp2xep2": ((2, 2), 4, 8, 4, 4),
    "uneven_ep2": ((2,), 3, 5, 3, 3),
    "uneven_dp2xep2": ((2, 2), 3, 5, 3, 3),
}


def _layouts(shape):
    """(mesh, expert weights', tokens', expert buffer's placements)."""
    if len(shape) == 1:
        return Mesh(shape, ("ep",)), [S(0)], [S(0)], [S(1)]
    return Mesh(shape, ("dp", "ep")), [R(), S(0)], [S(0), S(0)], [S(1), S(0)]


# Large experts against few tokens, traced for their plans only.
LARGE = {"ep4": ((4,), 4, 16, 4, 8), "dp2xep2": ((2, 2), 4, 16, 4, 8)}


def _step(name, constrain=True, dim=DIM, hidden=HIDDEN, cases=CASES):
    shape, groups, tokens, experts, capacity = cases[name]
    mesh, weights, tok, buffer = _layouts(shape)
    torch.manual_seed(0)
    module = models.MoEBlock(dim, hidden, experts, top_k=2, capacity=capacity,
                             buffer=buffer if constrain else None)
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    x, y = torch.randn(groups, tokens, dim), torch.randn(groups, tokens, dim)
    ins, outs = step.placements(mesh, {"w1": weights, "w2": weights, "w3": weights}, [tok], tok)
    return step, mesh, ins, outs, step.example_args([x], y)


@pytest.fixture(scope="module", params=sorted(CASES))
def program(request, tmp_path_factory):
    step, mesh, ins, outs, args = _step(request.param)
    path = tmp_path_factory.mktemp("moe") / f"{request.param}.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=request.param))
    return request.param, path


_PLAN = re.compile(r"remark: plan (\[[^\]]*\])(?:, strides = \{[^}]*\})? -> (\[[^\]]*\])"
                   r"(?:, strides = \{[^}]*\})? for tensor<([0-9x]+)xf32>: 1 step, 1 collective, "
                   r"(\d+) bytes/rank")


def buffer_all_to_alls(plan_text, numel):
    """The bytes per rank of each one-collective plan of a tensor of
    ``numel`` elements between two layouts that split it on every mesh axis
    (no Replicate, no Partial): an all-to-all, Shard(i) -> Shard(j)."""
    out = []
    for src, dst, dims, nbytes in _PLAN.findall(plan_text):
        if np.prod([int(d) for d in dims.split("x")]) == numel and not re.search(r"R|P", src + dst):
            out.append(int(nbytes))
    return out


def routed_bytes(name, dim=DIM, cases=CASES):
    """What one all-to-all of the expert buffer moves per rank: a rank holds
    E x C slots of D floats for each of its token groups and keeps the
    slots of its own experts, sending the others (capacity-padded, as the
    model states it); even cases only."""
    shape, groups, _, experts, capacity = cases[name]
    ep, ranks = shape[-1], int(np.prod(shape))
    return experts * (groups // ranks) * capacity * dim * 4 * (ep - 1) // ep


@pytest.mark.parametrize("name", ["ep2", "ep4", "dp2xep2"])
def test_plan_moves_routed_tokens(name, tmp_path, build_dir):
    """print-plan: the expert buffer goes from the token split to the expert
    split and back by four all-to-alls of the routed tokens' bytes (forward:
    dispatch and combine; backward: the same two, reversed), and no expert
    weight is gathered."""
    step, mesh, ins, outs, args = _step(name)
    path = tmp_path / "moe.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=name))
    plan = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-propagate",
                     "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"])
    shape, groups, _, experts, capacity = CASES[name]
    moved = buffer_all_to_alls(plan, experts * groups * capacity * DIM)
    expected = routed_bytes(name)
    assert moved and set(moved) == {expected}, (moved, expected, plan)
    assert len(moved) == 4, plan
    weights = experts * DIM * HIDDEN
    gathered = [m for m in _PLAN.findall(plan)
                if np.prod([int(d) for d in m[2].split("x")]) == weights and "R]" in m[1]
                and "P" not in m[0]]
    assert not gathered, gathered


@pytest.mark.parametrize("name", ["ep4", "dp2xep2"])
def test_propagation_chooses_ep_for_large_experts(name, tmp_path, build_dir):
    """Without the buffer's layout propagation chooses expert parallelism
    itself where the experts' weights outweigh the routed tokens (dim 256,
    hidden 1024: 4 MiB per weight against 32 KiB of buffer per rank): the
    same four all-to-alls, no weight gathered; on the 2x2 mesh DP x EP (the
    tokens keep their dp split, the experts' gradients are all-reduced over
    dp) rather than gathering the tokens over dp. (At the small sizes
    above, where each collective's latency outweighs its bytes, it moves
    the gate weights instead of the experts' output in the combine.)"""
    step, mesh, ins, outs, args = _step(name, constrain=False, dim=256, hidden=1024, cases=LARGE)
    path = tmp_path / "moe.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=f"{name}_free"))
    plan = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-propagate",
                     "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"])
    _, groups, _, experts, capacity = LARGE[name]
    moved = buffer_all_to_alls(plan, experts * groups * capacity * 256)
    assert moved == [routed_bytes(name, dim=256, cases=LARGE)] * 4, plan
    weights = [m for m in _PLAN.findall(plan)
               if np.prod([int(d) for d in m[2].split("x")]) == experts * 256 * 1024]
    # No weight gathered over ep; on 2x2 each gradient is all-reduced over dp.
    assert not [m for m in weights if m[1].endswith("R]") and "P" not in m[0]], plan
    if name == "dp2xep2":
        assert sorted(m[:2] for m in weights) == [("[P(sum), S(0)]", "[R, S(0)]")] * 3, plan


def test_local_program_all_to_all(program, build_dir):
    """The local program moves the expert buffer with shardx.all_to_all (even
    shards) or shardx.exchange (uneven ones) over the "ep" axis."""
    name, path = program
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    ep_axis = len(CASES[name][0]) - 1
    moves = re.findall(r"shardx\.(?:all_to_all|exchange) \S+ on @mesh axes = \[([\d, ]+)\]", local)
    assert any(str(ep_axis) in a.split(", ") for a in moves), local[-3000:]


# On MPI, one case per mesh shape and the uneven 2x2 (each mpirun compiles
# the step twice; the threads backend runs every case against eager below).
@pytest.mark.parametrize("name", ["ep2", "dp2xep2", "uneven_dp2xep2"])
def test_sharded_matches_unsharded_on_mpi(name, tmp_path, build_dir):
    step, mesh, ins, outs, args = _step(name)
    path = tmp_path / f"{name}.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=name))
    check_on_mpi(build_dir, path, int(np.prod(CASES[name][0])))


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_steps_match_eager(name):
    step, mesh, ins, outs, args = _step(name)
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, name)


def test_capacity_drops_tokens_like_eager():
    """A capacity below the routed load drops tokens (GShard): the module's
    output then differs from the no-drop one ("ep4" and the uneven cases
    run such capacities against eager above)."""
    torch.manual_seed(0)
    full = models.MoEBlock(DIM, HIDDEN, 4, capacity=None)
    tight = models.MoEBlock(DIM, HIDDEN, 4, capacity=1)
    tight.load_state_dict(full.state_dict())
    x = torch.randn(4, 8, DIM)
    assert not torch.allclose(full(x), tight(x))
