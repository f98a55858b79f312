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
dispatch, no token dropped, the weights never gathered; and
shardx-ragged-experts (in ``--shardx-spmd``) keeps the rows between the
grouped matmuls on their experts' ranks, so only the combine's output is
all-reduced. Checked against
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


_PLAN = re.compile(r"remark: plan (\[[^\]]*\]) -> (\[[^\]]*\]) for tensor<([0-9x]+)x(?:f32|i64)>: "
                   r"\d+ steps?, (\d+) collectives?, (\d+) bytes/rank")


def _forward(name):
    """The block's forward alone: (function, example args, mesh, flat input
    placements, module, x)."""
    shape = CASES[name][0]
    mesh, weights, tok = _layouts(shape)
    module, x = _module(name)
    fn = lambda p, x: torch.func.functional_call(module, p, (x,))
    params = {k: v.detach() for k, v in module.named_parameters()}
    place = {k: (weights if k.startswith("w") else [R()] * len(shape)) for k in params}
    # In the order the dict flattens (insertion: w1, w3, w2, router.weight).
    return fn, [params, x], mesh, [place[k] for k in params] + [tok], module, x


def _traced(name, tmp_path, forward):
    """The traced train step of case ``name``, or its forward alone, as
    MLIR in ``tmp_path``: the file's path."""
    if forward:
        fn, args, mesh, ins, _, _ = _forward(name)
        text = trace(fn, args, mesh, ins, None, name=name)
    else:
        step, mesh, ins, outs, args = _step(name)
        text = trace(step, args, mesh, ins, outs, name=name)
    path = tmp_path / f"{name}.mlir"
    path.write_text(text)
    return path


def _plan(name, tmp_path, build_dir, ragged=False, forward=False):
    """print-plan's reshards (source, target, elements, collectives, bytes
    per rank) of the train step, or of the forward alone, after
    propagation and, with ``ragged``, shardx-ragged-experts."""
    path = _traced(name, tmp_path, forward)
    passes = ["--shardx-propagate"] + (["--shardx-ragged-experts"] if ragged else [])
    text = run_tool([f"{build_dir}/bin/shardx-opt", path, *passes,
                     "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"])
    return [(src, dst, int(np.prod([int(d) for d in dims.split("x")])), int(n), int(b))
            for src, dst, dims, n, b in _PLAN.findall(text)], text


@pytest.mark.parametrize("name", ["ep2", "ep4", "dp2xep2"])
def test_plan_reduces_experts_outputs(name, tmp_path, build_dir):
    """print-plan: each rank runs its own experts on every routed row, and
    each grouped matmul's output over the rows, Partial(sum) over ep (the
    other ranks' experts' rows are zeros), is all-reduced over ep: three in
    the forward (the two ``[T k, hidden]`` before the SiLU gate, the
    ``[T k, dim]`` before the gates' weighting) and one in the backward
    (the hidden gradient; the tokens' input gradient is not needed), each
    a ring all-reduce's ``2 (n - 1) / n`` of the tensor's bytes. No expert
    weight is gathered."""
    plans, text = _plan(name, tmp_path, build_dir)
    shape, tokens, experts, _ = CASES[name]
    ep, rows = shape[-1], tokens * 2
    ep_partial = "[P(sum)]" if len(shape) == 1 else "[R, P(sum)]"
    reduced = sorted(numel for src, dst, numel, _, _ in plans if src == ep_partial)
    assert reduced == sorted([rows * HIDDEN] * 3 + [rows * DIM]), text
    for src, dst, numel, n, nbytes in plans:
        if src == ep_partial:
            assert (n, nbytes) == (1, 2 * (ep - 1) * numel * 4 // ep), text
    weights = [experts * DIM * HIDDEN]
    assert not [p for p in plans if p[2] in weights and "P" not in p[0]], text


@pytest.mark.parametrize("name", ["ep2", "ep4", "dp2xep2", "uneven_ep4"])
@pytest.mark.parametrize("forward", [False, True], ids=["step", "forward"])
def test_plan_keeps_rows_on_experts(name, forward, tmp_path, build_dir):
    """print-plan after shardx-ragged-experts: the rows between the grouped
    matmuls stay on the ranks of their experts (docs/Rules.md, "Expert
    parallelism"), so of the reshards over ep of the propagated plan
    (``test_plan_reduces_experts_outputs``) only the combine's is left: in
    the train step the all-reduce of the last grouped matmul's ``[T k,
    dim]`` output (the backward reads it for the gates' gradient), in the
    forward the all-reduce of the ``[T, dim]`` output (propagation moves
    the sum past the gates and the ``index_add``). No ``[T k, hidden]``
    is reduced, and the plan's bytes over ep shrink."""
    plans, text = _plan(name, tmp_path, build_dir, ragged=True, forward=forward)
    before, _ = _plan(name, tmp_path, build_dir, forward=forward)
    shape, tokens, _, _ = CASES[name]
    ep, rows = shape[-1], tokens * 2
    ep_partial = "[P(sum)]" if len(shape) == 1 else "[R, P(sum)]"
    reduced = [(numel, n, nbytes) for src, _, numel, n, nbytes in plans if src == ep_partial]
    numel = tokens * DIM if forward else rows * DIM
    assert reduced == [(numel, 1, 2 * (ep - 1) * numel * 4 // ep)], text
    # No [T k, hidden] is reduced over ep (the last mesh axis). On the 2x2
    # forward, whose tokens are split over dp, the gathered rows are
    # Partial(sum) over dp too and are reduced over dp alone.
    assert not [p for p in plans if p[2] == rows * HIDDEN and p[0].endswith("P(sum)]")
                and not p[1].endswith("P(sum)]")], text
    over_ep = lambda ps: sum(b for src, _, _, _, b in ps if src.endswith("P(sum)]"))
    assert over_ep(plans) < over_ep(before), (plans, before)
    # print-plan names the operands read on their experts' ranks: the last
    # grouped matmul's input; in the step also the weight gradients' rows
    # (w2's through the transposed hidden rows, w1's and w3's).
    kept = sorted(re.findall(r"remark: ragged rows: grouped matmul reads operand #(\d) "
                             r"tensor<(\d+)x(\d+)xf32> as (\[[^\]]*\])", text))
    hidden = (str(rows), str(HIDDEN))
    want = [("0", *hidden)] if forward else sorted(
        [("0", *hidden), ("0", *hidden[::-1]), ("1", *hidden), ("1", *hidden)])
    assert [k[:3] for k in kept] == want and {k[3] for k in kept} == {ep_partial}, text


def test_local_program_runs_own_experts(tmp_path, build_dir):
    """The local program on 2 ranks: the experts' weights stay split
    (``tensor<2x16x32xf32>`` per rank, half of 4 experts), and the one
    collective is the all-reduce over ep of the last grouped matmul's
    output (the rows between the grouped matmuls stay on their experts'
    ranks: shardx-ragged-experts; the local ops never see the whole
    weights)."""
    step, mesh, ins, outs, args = _step("ep2")
    path = tmp_path / "ep2.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name="ep2"))
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    collectives = re.findall(r"shardx\.(all_reduce|all_gather|all_to_all|exchange|reduce_scatter"
                             r"|ragged_all_to_all|permute)\b", local)
    assert collectives == ["all_reduce"], collectives
    # The global types are only in the function's signature attribute.
    body = "\n".join(l for l in local.splitlines() if "result_types" not in l)
    assert "tensor<2x16x32xf32>" in body and "tensor<4x16x32xf32>" not in body


# The 2x2 mesh once: uneven_dp2xep2 has dp2xep2's mesh and placements.
@pytest.mark.parametrize("name", ["ep2", "uneven_ep4", "uneven_dp2xep2"])
@pytest.mark.parametrize("forward", [False, True], ids=["step", "forward"])
def test_sharded_matches_unsharded_on_mpi(name, forward, tmp_path, build_dir):
    path = _traced(name, tmp_path, forward)
    check_on_mpi(build_dir, path, int(np.prod(CASES[name][0])))


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_matches_eager_and_unsharded(name):
    """The block's forward alone (no backward): sharded, unsharded and eager
    agree. The sharded and unsharded programs to a few ulps, not to the
    bit: the other ranks' experts add exact zeros, but with the rows kept
    on their experts (shardx-ragged-experts) no all-reduce separates the
    grouped matmuls from the gate, and the local program's kernels round
    differently from the unsharded one's (3e-7 at most on ep4)."""
    fn, (params, _), mesh, ins, module, x = _forward(name)
    want = module(x).detach()
    sharded = shardx.compile(fn, mesh, ins)(params, x)
    whole = shardx.compile(fn, None)(params, x)
    np.testing.assert_allclose(sharded.to_torch().numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sharded.to_torch(), whole.to_torch(), rtol=1e-6, atol=1e-6)


# -- the importer's ops, one at a time ----------------------------------------

_EP4 = Mesh((4,), ("ep",))


def _close_to_eager(got, want):
    """Against eager's CPU ``_grouped_mm`` to rtol 1e-6, atol 1e-5: each
    output a sum of K (at most 64) products of about unit size, which a
    kernel summing K in another order may round differently by a few
    ulps of the sum's terms (not to the bit: exactness is not the point)."""
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)


def _gmm(x, w, offs):
    return torch._grouped_mm(x, w, offs=offs)


@pytest.mark.parametrize("ends", [[3, 3, 10, 17, 20], [0, 20, 20, 20, 20], [4, 8, 12, 16, 20]])
def test_grouped_mm_matches_eager(ends):
    """``[R, K] x [E, K, N]`` with an empty group, all rows in one group, and
    even groups, the experts split over 4 ranks (5 experts: uneven):
    eager's CPU ``_grouped_mm`` (``_close_to_eager``)."""
    torch.manual_seed(0)
    x, w = torch.randn(20, 64), torch.randn(5, 64, 8)
    offs = torch.tensor(ends, dtype=torch.int32)
    got = shardx.compile(_gmm, _EP4, [[R()], [S(0)], [R()]])(x, w, offs).to_torch()
    _close_to_eager(got, torch._grouped_mm(x, w, offs=offs))


def test_grouped_mm_rows_past_the_last_end_are_zero():
    """Rows past ``offs[E-1]`` belong to no group: zero (eager leaves them
    unwritten), the others eager's (``_close_to_eager``), the experts
    split over 2 ranks."""
    torch.manual_seed(3)
    x, w = torch.randn(12, 16), torch.randn(4, 16, 8)
    offs = torch.tensor([2, 2, 5, 9], dtype=torch.int32)
    got = shardx.compile(_gmm, Mesh((2,), ("ep",)), [[R()], [S(0)], [R()]])(x, w, offs).to_torch()
    _close_to_eager(got[:9], torch._grouped_mm(x, w, offs=offs)[:9])
    assert torch.equal(got[9:], torch.zeros(3, 8))


def test_grouped_mm_weight_gradient_form():
    """``[K, R] x [R, N]`` -> ``[E, K, N]`` (the weight gradient's form),
    the output split on E over 4 ranks: eager's (``_close_to_eager``)."""
    torch.manual_seed(1)
    a, b = torch.randn(16, 20), torch.randn(20, 8)
    offs = torch.tensor([3, 3, 10, 17, 20], dtype=torch.int32)
    got = shardx.compile(_gmm, _EP4, [[R()], [R()], [R()]], [[S(0)]])(a, b, offs).to_torch()
    _close_to_eager(got, torch._grouped_mm(a, b, offs=offs))


def test_grouped_mm_other_experts_nan_does_not_leak():
    """An expert with NaN and inf weights that no row uses (an empty group)
    leaves every row finite (and eager's): the mask is a select, not a
    product."""
    torch.manual_seed(2)
    x, w = torch.randn(8, 16), torch.randn(3, 16, 8)
    w[0] = float("nan")
    w[2, 0] = float("inf")
    offs = torch.tensor([0, 8, 8], dtype=torch.int32)
    want = torch._grouped_mm(x, w, offs=offs)
    got = shardx.compile(_gmm, Mesh((2,), ("ep",)), [[R()], [S(0)], [R()]])(x, w, offs).to_torch()
    assert torch.isfinite(want).all() and torch.isfinite(got).all()
    _close_to_eager(got, want)


def test_counts_match_eager():
    """``histc`` as PyTorch's CPU kernel bins (the range's end in the last
    bin; values outside it and NaN in none; the width ``max - min`` of the
    range's ends rounded to f32, not rounded once: 0.29999998 is in bin 1
    of [0.1, 0.7] by 3) and ``bincount``."""
    v = torch.tensor([0., 0.5, 1.999, 2., 2.5, 3., -0.1, 3.1, float("nan"), 1.])
    ids = torch.tensor([4, 0, 2, 2, 4, 1, 0, 4])
    near = torch.tensor([0.29999998, 0.1, 0.7, 0.5, 0.69999999])
    fn = lambda v, ids, near: (torch.histc(v, bins=3, min=0, max=3),
                               torch.bincount(ids, minlength=6), torch.bincount(ids, minlength=5),
                               torch.histc(near, bins=3, min=0.1, max=0.7))
    got = shardx.compile(fn, None)(v, ids, near)
    for g, w in zip(got, fn(v, ids, near)):
        assert g.to_torch().dtype == w.dtype and torch.equal(g.to_torch(), w)


def test_unsupported_forms_are_named():
    """A ``[G, M, K] x [K, N]`` grouped matmul with offs (groups over N), a
    ``histc`` whose range comes from the data and a ``bincount`` whose length
    does (the compiled program would keep it for other values) are refused
    by name."""
    x, w = torch.randn(2, 4, 8), torch.randn(8, 4)
    offs = torch.tensor([2, 4], dtype=torch.int32)
    with pytest.raises(UnsupportedOpError, match="_grouped_mm of 3-d x 2-d"):
        shardx.compile(_gmm, None)(x, w, offs)
    with pytest.raises(UnsupportedOpError, match="histc with min"):
        shardx.compile(lambda v: torch.histc(v, bins=4), None)(torch.randn(8))
    ids = torch.tensor([4, 0, 2])
    for fn in (torch.bincount, lambda ids: torch.bincount(ids, minlength=3)):
        with pytest.raises(UnsupportedOpError, match="bincount whose length 5 comes from"):
            shardx.compile(fn, None)(ids)
