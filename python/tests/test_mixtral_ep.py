"""Expert parallelism on the zoo's Mixtral (transformers' own model,
``shardx_dev.zoo.mixtral_config``) with transformers' default ``grouped_mm``
experts: the MoE block of its first decoder layer
(``MixtralSparseMoeBlock``: router, top-2 softmax gating renormalized, the
tokens sorted by expert, counts by ``histc``, the SiLU-gated experts as
grouped matmuls, the rows put back by the inverse permutation) as a train
step (forward, backward, SGD), the experts' weights (``gate_up_proj``,
``down_proj``) Shard(0) over "ep" and the tokens replicated over it, on 2
and 4 ranks, and on a 2x2 (dp, ep) mesh with the batch over dp. Traced
as under ``torch.compile`` the f32 experts call transformers'
``grouped_mm_fallback`` custom ops (importer/ops/moe_ops.py), imported
as ``_grouped_mm`` is: each rank runs its own experts over every routed
row and the grouped matmuls' outputs are Partial(sum) over ep, all-reduced
(docs/Rules.md, "Expert parallelism"). Checked against eager PyTorch (its
``torch._grouped_mm`` experts) on threads for two steps, against the
unsharded compile under mpirun on the 2x2 mesh, and the plan's
collectives from print-plan. Uneven: 3 experts on 2 ranks and over ep of
the 2x2 mesh, and 3 sequences over dp of the 2x2 mesh."""

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S
from shardx.importer import trace
from shardx.train import TrainStep
from shardx_dev import zoo
from shardx_dev.testing.steps import assert_steps_match_eager, check_on_mpi, run_tool

T = pytest.importorskip("transformers")

HIDDEN, INTER, BATCH, SEQ, TOP_K = 32, 32, 2, 4, 2
CASES = {
    # name: (mesh shape, experts, batch)
    "ep2": ((2,), 4, BATCH),
    "ep4": ((4,), 4, BATCH),
    "dp2xep2": ((2, 2), 4, BATCH),
    "uneven_ep2": ((2,), 3, BATCH),
    "uneven_dp2xep2": ((2, 2), 3, BATCH),
    # 3 sequences over dp 2 (2, 1).
    "batch3_dp2xep2": ((2, 2), 4, 3),
}
EXPERTS = ("experts.gate_up_proj", "experts.down_proj")


def _block(experts, batch=BATCH):
    """The first decoder layer's MoE block of the zoo's Mixtral with
    ``experts`` experts (initialized by the model), and its input."""
    torch.manual_seed(0)
    model = T.MixtralForCausalLM(zoo.mixtral_config(experts))
    assert model.config._experts_implementation == "grouped_mm"
    return model.model.layers[0].mlp, torch.randn(batch, SEQ, HIDDEN)


def _step(name):
    shape, experts, batch = CASES[name]
    if len(shape) == 1:
        mesh, weights, tok = Mesh(shape, ("ep",)), [S(0)], [R()]
    else:
        mesh, weights, tok = Mesh(shape, ("dp", "ep")), [R(), S(0)], [S(0), R()]
    block, x = _block(experts, batch)
    step = TrainStep(block, F.mse_loss, "sgd", lr=0.1)
    ins, outs = step.placements(mesh, {n: weights for n in EXPERTS}, [tok], tok)
    return step, mesh, ins, outs, step.example_args([x], torch.randn_like(x))


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_steps_match_eager(name):
    step, mesh, ins, outs, args = _step(name)
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, name)


def test_sharded_matches_unsharded_on_mpi(tmp_path, build_dir):
    step, mesh, ins, outs, args = _step("uneven_dp2xep2")
    path = tmp_path / "uneven_dp2xep2.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name="uneven_dp2xep2"))
    check_on_mpi(build_dir, path, 4)


_PLAN = re.compile(r"remark: plan (\[[^\]]*\]) -> (\[[^\]]*\]) for tensor<([0-9x]+)x(?:f32|i64)>: "
                   r"\d+ steps?, (\d+) collectives?, (\d+) bytes/rank")


def _plans(name, tmp_path, build_dir, propagate="--shardx-propagate"):
    """print-plan's text for case `name` and its plans as (source, target,
    elements, collectives, bytes/rank)."""
    step, mesh, ins, outs, args = _step(name)
    path = tmp_path / f"{name}.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=name))
    text = run_tool([f"{build_dir}/bin/shardx-opt", path, propagate,
                     "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"])
    return text, [(src, dst, int(np.prod([int(d) for d in dims.split("x")])), int(n), int(b))
                  for src, dst, dims, n, b in _PLAN.findall(text)]


@pytest.mark.parametrize("name", ["ep2", "ep4", "dp2xep2"])
def test_plan_runs_gate_up_experts_in_place(name, tmp_path, build_dir):
    """print-plan over ep: the gate-up projection runs each rank's experts
    over every routed row (``BATCH * SEQ * TOP_K``), its ``[rows, 2 *
    inter]`` output Partial(sum), all-reduced (a ring's ``2 (n - 1) / n``
    of its bytes), ``gate_up_proj`` never gathered. The down projection's
    output is read by the inverse permutation's gather (``index`` of a
    captured tensor), which could read it pending the sum, but at the
    mesh's 5 us per collective the cost model gathers ``down_proj``
    instead (its ``(n - 1) / n``) and runs it whole, the only other
    collective over ep: two collectives against the four the split plan
    needs (docs/Rules.md, "Expert parallelism")."""
    text, plans = _plans(name, tmp_path, build_dir)
    shape, experts, _ = CASES[name]
    ep, rows = shape[-1], BATCH * SEQ * TOP_K
    over_ep = [p for p in plans if p[0] in ("[P(sum)]", "[S(0)]", "[R, P(sum)]", "[R, S(0)]")]
    assert sorted((src.replace("R, ", ""), numel, n, nbytes) for src, _, numel, n, nbytes in over_ep) == [
        ("[P(sum)]", rows * 2 * INTER, 1, 2 * (ep - 1) * rows * 2 * INTER * 4 // ep),
        ("[S(0)]", experts * HIDDEN * INTER, 1, (ep - 1) * experts * HIDDEN * INTER * 4 // ep)], text


@pytest.mark.parametrize("name", ["ep2", "ep4"])
def test_bytes_only_plan_keeps_down_proj_split(name, tmp_path, build_dir):
    """print-plan bytes only (``latency=0``): ``down_proj`` stays split, the
    inverse permutation's gather reads the down projection's output
    pending the sum (a lookup is linear in its table) and the all-reduce
    moves after the top-k combine, to the ``[batch, seq, hidden]`` output,
    not the ``[rows, hidden]`` table. Four all-reduces in all, no
    all-gather: the gate-up output, that output, a ``[rows, inter]``
    gradient of the backward and a ``[experts, tokens]`` one of the
    routing (docs/Rules.md, "Expert parallelism")."""
    text, plans = _plans(name, tmp_path, build_dir, "--shardx-propagate=latency=0")
    shape, experts, _ = CASES[name]
    ep, rows = shape[-1], BATCH * SEQ * TOP_K
    assert all(src == "[P(sum)]" and dst == "[R]" and n == 1 for src, dst, _, n, _ in plans), text
    ring = lambda numel: 2 * (ep - 1) * numel * 4 // ep
    want = [rows * 2 * INTER, BATCH * SEQ * HIDDEN, rows * INTER, experts * BATCH * SEQ]
    assert sorted((numel, b) for _, _, numel, _, b in plans) == sorted((m, ring(m)) for m in want), text


# -- the importer's ops, one at a time ----------------------------------------

def _fallback_ops():
    import transformers.integrations.moe  # noqa: F401  (defines the custom ops)
    return torch.ops.transformers.grouped_mm_fallback, torch.ops.transformers.grouped_mm_fallback_backward


@pytest.mark.parametrize("ends", [[3, 3, 10, 17], [0, 20, 20, 20], [2, 5, 9, 14]])
def test_grouped_mm_fallback_matches_eager(ends):
    """transformers' fallback grouped matmul and its backward (the input
    and the weight gradients), with an empty group, all rows in one group
    and rows past the last end (zero, as eager's), the experts split over
    2 ranks (4 experts) against eager's custom ops (their ``torch.mm``
    loop over the groups), to 1e-6 (the sums over K in another order)."""
    fwd, bwd = _fallback_ops()
    torch.manual_seed(0)
    x, w, dy = torch.randn(20, 16), torch.randn(4, 16, 8), torch.randn(20, 8)
    offs = torch.tensor(ends, dtype=torch.int32)
    fn = lambda x, w, offs, dy: (fwd(x, w, offs), *bwd(x, w, offs, dy))
    mesh = Mesh((2,), ("ep",))
    got = shardx.compile(fn, mesh, [[R()], [S(0)], [R()], [R()]], [[R()], [R()], [S(0)]])(x, w, offs, dy)
    for g, want in zip(got, fn(x, w, offs, dy)):
        torch.testing.assert_close(g.to_torch(), want, rtol=1e-6, atol=1e-6)


def test_index_put_overwrite_matches_eager():
    """``x[idx] = v`` (no accumulation) into dim 0: the inverse
    permutation of the grouped_mm experts, a negative index (counted from
    the end) and a repeated one (the last write wins, as eager's CPU
    kernel writes in order); the accumulating form unchanged. An index
    out of range raises eager's IndexError."""
    perm = torch.tensor([3, 0, 4, 1, 2])
    idx, v = torch.tensor([1, -1, 1, 0]), torch.tensor([[1., 2.], [3., 4.], [5., 6.], [7., 8.]])

    def fn(perm, x, idx, v):
        inv = torch.empty_like(perm)
        inv[perm] = torch.arange(5)
        y, z = x.clone(), x.clone()
        y[idx] = v
        z.index_put_((idx,), v, accumulate=True)
        return inv, y, z
    x = torch.zeros(3, 2)
    f = shardx.compile(fn, None)
    got = f(perm, x, idx, v)
    for g, want in zip(got, fn(perm, x, idx, v)):
        assert torch.equal(g.to_torch(), want)
    with pytest.raises(IndexError, match="index out of bounds for dimension 0 with size 3"):
        f(perm, x, torch.tensor([1, 3, 0, 0]), v)


def test_fallback_forms_are_named():
    """A grouped_mm_fallback whose offs do not name every expert is
    refused by name."""
    fwd, _ = _fallback_ops()
    x, w = torch.randn(8, 16), torch.randn(4, 16, 8)
    with pytest.raises(shardx.importer.values.UnsupportedOpError, match="offs \\[3\\] for 4 groups"):
        shardx.compile(lambda x, w, o: fwd(x, w, o), None)(x, w, torch.tensor([2, 4, 8], dtype=torch.int32))
