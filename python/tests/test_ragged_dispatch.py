"""Dropless expert parallelism with the tokens split over the experts'
axis: shardx-ragged-dispatch (in ``--shardx-spmd``) turns the global
program of ``shardx_dev.grouped_moe.GroupedMoEBlock`` (torchtitan's form:
a stable argsort of the routed choices, ``bincount``, grouped matmuls,
``index_add``) whose tokens are ``Shard(0)`` over ``ep`` (and ``dp`` on
a 2x2 mesh) into the local dispatch and combine by
``shardx.ragged_all_to_all`` (docs/Rules.md, "Expert parallelism"): each
rank sorts its own tokens' choices, sends each rank the rows of its
experts, runs its experts on what it receives and sends the rows back.
The forward is checked against eager PyTorch and the unsharded program
(threads), and under mpirun; print-plan's exchanges against the routed
rows' bytes and against the propagated plan's reshards without the pass.
So is a train step (a linear layer, the block, MSE, SGD), whose backward
the pass builds with the forward: four ragged exchanges (the tokens' rows
out, the outputs back, the output gradient's rows out, the rows'
gradients back), the experts' gradients on their ranks.

The 3-expert cases are uneven in the experts (2 and 1 per ep rank), 5
on 4 ranks too (2, 2, 1, 0), and all are uneven in the rows each rank
sends and receives (the routing decides them at run time); the routed
rows ``T * top_k`` are a multiple of 4 (CPU ``_grouped_mm`` wants 16-byte
aligned rows). ``UNEVEN_TOKENS`` holds forwards whose tokens do not
divide over the ranks (each rank's padded to the most any holds)."""

import re

import numpy as np
import pytest
import torch

import shardx
from shardx import Mesh, Replicate as R, Shard as S
from shardx.importer import trace
from shardx_dev.grouped_moe import GroupedMoEBlock
from shardx_dev.testing.steps import check_on_mpi, run_tool

DIM, HIDDEN, TOP_K = 16, 32, 2
CASES = {
    # name: (mesh shape, tokens, experts)
    "ep2": ((2,), 8, 4),
    "ep4": ((4,), 8, 4),
    "uneven_ep2": ((2,), 6, 3),
    "uneven_ep4": ((4,), 8, 5),
    "uneven_dp2xep2": ((2, 2), 8, 3),
    "dp2xep2": ((2, 2), 8, 4),
}
# Tokens that do not divide over the ranks (each rank's padded to the most
# any rank holds): 2, 2, 1, 1 tokens; 2, 1 per ep rank on each dp half;
# 3, 3, 2, 2; 1, 1, 0, 0.
UNEVEN_TOKENS = {
    "tokens6_ep4": ((4,), 6, 4),
    "tokens6_dp2xep2": ((2, 2), 6, 3),
    "tokens10_ep4": ((4,), 10, 5),
    "tokens2_ep4": ((4,), 2, 4),
}


def _forward(name, tokens_split=True):
    """(function, [params, x], mesh, input placements, module, x): the
    experts' weights Shard(0) over ep, the router replicated, the tokens
    Shard(0) over every mesh axis (or, without ``tokens_split``, over dp
    only)."""
    shape, tokens, experts = {**CASES, **UNEVEN_TOKENS}[name]
    torch.manual_seed(0)
    module = GroupedMoEBlock(DIM, HIDDEN, experts, top_k=TOP_K, counts="bincount")
    return _forward_of(module, shape, tokens, tokens_split)


def _forward_of(module, shape, tokens, tokens_split=True):
    """``_forward``'s tuple for ``module`` (a block) on ``tokens`` tokens."""
    x = torch.randn(tokens, DIM)
    if len(shape) == 1:
        mesh, weights = Mesh(shape, ("ep",)), [S(0)]
        tok = [S(0)] if tokens_split else [R()]
    else:
        mesh, weights = Mesh(shape, ("dp", "ep")), [R(), S(0)]
        tok = [S(0), S(0)] if tokens_split else [S(0), R()]
    fn = lambda p, x: torch.func.functional_call(module, p, (x,))
    params = {k: v.detach() for k, v in module.named_parameters()}
    # In the order the parameters flatten (the dict's).
    ins = [weights if k.startswith("w") else [R()] * len(shape) for k in params] + [tok]
    return fn, [params, x], mesh, ins, module, x


def _traced(name, tmp_path, tokens_split=True):
    fn, args, mesh, ins, _, _ = _forward(name, tokens_split)
    path = tmp_path / f"{name}.mlir"
    path.write_text(trace(fn, args, mesh, ins, None, name=name))
    return path


_COLLECTIVE = re.compile(r"shardx\.(all_reduce|all_gather|all_to_all|reduce_scatter"
                         r"|ragged_all_to_all|permute)\b")


@pytest.mark.parametrize("name", sorted(CASES) + sorted(UNEVEN_TOKENS))
def test_forward_matches_eager_and_unsharded(name):
    """Sharded, unsharded and eager agree; to a few ulps, not to the bit
    (each rank sums its tokens' rows in another order than the unsharded
    program's sort)."""
    fn, (params, _), mesh, ins, module, x = _forward(name)
    want = module(x).detach()
    sharded = shardx.compile(fn, mesh, ins)(params, x).to_torch()
    whole = shardx.compile(fn, None)(params, x).to_torch()
    np.testing.assert_allclose(sharded.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sharded, whole, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CASES))
def test_local_program_exchanges_rows(name, tmp_path, build_dir):
    """The local program's collectives over ep: the per-expert counts (an
    even all-to-all), the dispatch and the combine (ragged, both given
    their receive counts); the tokens are never gathered and the experts'
    outputs never all-reduced."""
    path = _traced(name, tmp_path)
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    found = _COLLECTIVE.findall(local)
    assert sorted(found) == ["all_reduce", "all_to_all", "ragged_all_to_all",
                             "ragged_all_to_all"], found
    # The one all-reduce sums the index checks' failure counts (the
    # bincount's range checks over each rank's choices), not rows.
    reduced = re.findall(r"shardx\.all_reduce [^\n]*: (tensor<[^>]*>)", local)
    assert reduced == ["tensor<5xi64>"], reduced
    assert len(re.findall(r"shardx\.ragged_all_to_all [^\n]* recv_counts = ", local)) == 2, local


def _plan(path, build_dir, dispatch):
    passes = ["--shardx-canonicalize", "--shardx-propagate"]
    passes += ["--shardx-ragged-dispatch"] if dispatch else []
    return run_tool([f"{build_dir}/bin/shardx-opt", path, *passes, "--shardx-ragged-experts",
                     "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"])


_RESHARD = re.compile(r"remark: plan (\[[^\]]*\]) -> (\[[^\]]*\]) for tensor<[^>]*>: "
                      r"\d+ steps?, \d+ collectives?, (\d+) bytes/rank")
_EXCHANGE = re.compile(r"remark: ragged dispatch: shardx\.(ragged_all_to_all|all_to_all) of the "
                       r"[a-z -]+ tensor<(\d+)x?(\d*)x(f32|i64)> over (\d+) ranks, 1 collective, "
                       r"(\d+) bytes/rank")


@pytest.mark.parametrize("name", sorted(CASES))
def test_plan_moves_the_routed_rows(name, tmp_path, build_dir):
    """print-plan: the dispatch and the combine each move, at an even split
    of the routed rows, ``(n - 1) / n`` of a rank's ``T k / ranks`` rows of
    ``dim`` f32 (the real counts exist at run time), and the per-expert
    counts ``(n - 1) / n`` of ``n * ceil(E / n)`` int64s; together fewer
    bytes over ep than the propagated plan's reshards without the pass (the
    routing gathered, the experts' outputs all-reduced)."""
    shape, tokens, experts = CASES[name]
    n, ranks = shape[-1], int(np.prod(shape))
    items = tokens * TOP_K // ranks
    path = _traced(name, tmp_path)
    text = _plan(path, build_dir, dispatch=True)
    exchanges = sorted((kind, int(a), int(b or 1), int(g), int(nbytes))
                       for kind, a, b, _, g, nbytes in _EXCHANGE.findall(text))
    slots = n * -(-experts // n)
    rows = (items, DIM, n, (n - 1) * items * DIM * 4 // n)
    assert exchanges == sorted([("all_to_all", slots, 1, n, (n - 1) * slots * 8 // n),
                                ("ragged_all_to_all", *rows), ("ragged_all_to_all", *rows)]), text
    after = sum(int(b) for _, _, b in _RESHARD.findall(text)) + sum(e[-1] for e in exchanges)
    before = sum(int(b) for _, _, b in _RESHARD.findall(_plan(path, build_dir, dispatch=False)))
    assert after < before, (after, before)


@pytest.mark.parametrize("name", ["ep2", "uneven_ep2", "uneven_ep4", "uneven_dp2xep2",
                                  "tokens6_ep4", "tokens6_dp2xep2"])
def test_sharded_matches_unsharded_on_mpi(name, tmp_path, build_dir):
    shape = {**CASES, **UNEVEN_TOKENS}[name][0]
    check_on_mpi(build_dir, _traced(name, tmp_path), int(np.prod(shape)))


@pytest.mark.parametrize("name", sorted(UNEVEN_TOKENS))
def test_uneven_tokens_exchange_padded_rows(name, tmp_path, build_dir):
    """Tokens that do not divide over the ranks (propagation keeps the
    flattened choices whole): the forward is still rewritten, each rank's
    tokens padded to the most any rank holds, ``ceil(T / ranks)``; its
    program moves no f32 but the two ragged exchanges (propagation still
    gathers the int64 choices for the ``bincount``'s range checks, priced
    in the plan), and print-plan prices the two exchanges at
    ``(n - 1) / n`` of ``ceil(T / ranks) k`` rows (the padding is never
    sent, so the real bytes are at most that), fewer bytes than the
    propagated plan without the pass."""
    shape, tokens, experts = UNEVEN_TOKENS[name]
    n, ranks = shape[-1], int(np.prod(shape))
    path = _traced(name, tmp_path)
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    moved = re.findall(r"shardx\.(all_gather|all_reduce|exchange|all_to_all|ragged_all_to_all|"
                       r"reduce_scatter|permute) [^\n]*x(f32|i64)>$", local, re.M)
    assert sorted(k for k, t in moved if t == "f32") == ["ragged_all_to_all"] * 2, moved
    items = -(-tokens // ranks) * TOP_K
    text = _plan(path, build_dir, dispatch=True)
    exchanges = sorted((kind, int(a), int(b or 1), int(g), int(nbytes))
                       for kind, a, b, _, g, nbytes in _EXCHANGE.findall(text))
    slots = n * -(-experts // n)
    rows = ("ragged_all_to_all", items, DIM, n, (n - 1) * items * DIM * 4 // n)
    assert exchanges == sorted([("all_to_all", slots, 1, n, (n - 1) * slots * 8 // n),
                                rows, rows]), text
    after = sum(int(b) for _, _, b in _RESHARD.findall(text)) + sum(e[-1] for e in exchanges)
    before = sum(int(b) for _, _, b in _RESHARD.findall(_plan(path, build_dir, dispatch=False)))
    assert after < before, (after, before)


def test_tokens_whole_over_ep_are_not_dispatched(tmp_path, build_dir):
    """With the tokens replicated over ep (split over dp only) every rank
    routes the same tokens: the pass leaves the program to propagation's
    plan and shardx-ragged-experts (no ragged exchange)."""
    local = run_tool([f"{build_dir}/bin/shardx-opt", _traced("dp2xep2", tmp_path, False),
                      "--shardx-spmd"])
    assert "ragged_all_to_all" not in local and "ragged_dispatch" not in local


def test_unmatched_forms_keep_the_propagated_plan():
    """Where the pass does not match, the program runs propagation's plan,
    and its numbers are still eager's: ``histc`` counts (a float binning the
    pass does not read as ``bincount``), forward and train step, with the
    tokens split over ep."""
    from shardx.train import TrainStep
    from shardx_dev.testing.steps import assert_steps_match_eager
    import torch.nn.functional as F

    torch.manual_seed(0)
    module = GroupedMoEBlock(DIM, HIDDEN, 4, top_k=TOP_K, counts="histc")
    x = torch.randn(8, DIM)
    mesh = Mesh((2,), ("ep",))
    fn = lambda p, x: torch.func.functional_call(module, p, (x,))
    params = {k: v.detach() for k, v in module.named_parameters()}
    ins = [[S(0)] if k.startswith("w") else [R()] for k in params] + [[S(0)]]
    got = shardx.compile(fn, mesh, ins)(params, x).to_torch()
    np.testing.assert_allclose(got.numpy(), module(x).detach().numpy(), rtol=1e-5, atol=1e-6)

    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    w = {"w1": [S(0)], "w2": [S(0)], "w3": [S(0)]}
    ins, outs = step.placements(mesh, w, [[S(0)]], [S(0)])
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, step.example_args([x], torch.randn_like(x)), "step")


# The train step: a linear layer before the block (its input's gradient
# flows back through the dispatch), the block, MSE loss, SGD.
TRAIN_CASES = ["ep2", "ep4", "dp2xep2", "uneven_ep2", "uneven_dp2xep2"]


def _train(name):
    """(step, mesh, in placements, out placements, example args)."""
    shape, tokens, experts = {**CASES, **UNEVEN_TOKENS}[name]
    return _train_of(lambda: GroupedMoEBlock(DIM, HIDDEN, experts, top_k=TOP_K,
                                             counts="bincount"), shape, tokens)


def _train_of(block, shape, tokens):
    """``_train``'s tuple for the block ``block()`` on ``tokens`` tokens."""
    from shardx.train import TrainStep
    import torch.nn.functional as F

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(DIM, DIM, bias=False), block())
    x = torch.randn(tokens, DIM)
    if len(shape) == 1:
        mesh, weights, tok = Mesh(shape, ("ep",)), [S(0)], [S(0)]
    else:
        mesh, weights, tok = Mesh(shape, ("dp", "ep")), [R(), S(0)], [S(0), S(0)]
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    ins, outs = step.placements(mesh, {f"1.{w}": weights for w in ("w1", "w2", "w3")},
                                [tok], tok)
    return step, mesh, ins, outs, step.example_args([x], torch.randn_like(x))


def _traced_train(name, tmp_path):
    step, mesh, ins, outs, args = _train(name)
    path = tmp_path / f"train_{name}.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=f"train_{name}"))
    return path


@pytest.mark.parametrize("name", TRAIN_CASES)
def test_train_step_matches_eager_and_unsharded(name):
    """Two SGD steps of the sharded program against eager PyTorch (loss
    and every parameter, the router's and the linear layer's included:
    their gradients flow through the gates' and the rows' gradients), and
    the first step's against the unsharded program's."""
    from shardx_dev.testing.steps import assert_steps_match_eager

    step, mesh, ins, outs, args = _train(name)
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, name)
    loss, params, _ = f(*args)
    whole_loss, whole_params, _ = shardx.compile(step, None)(*args)
    torch.testing.assert_close(loss.to_torch(), whole_loss.to_torch(), rtol=1e-5, atol=1e-6)
    for a, b in zip(params, whole_params):
        torch.testing.assert_close(a.to_torch(), b.to_torch(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", TRAIN_CASES)
def test_train_step_exchanges_rows(name, tmp_path, build_dir):
    """The local train step moves the routed rows four times over ep, each
    a ragged all-to-all given its receive counts: the tokens' rows out and
    the experts' outputs back (forward), the output gradient's rows out and
    the rows' gradients back (backward); the rows are never all-gathered
    and the experts' gradients are all-reduced over dp only (the data
    parallel sum), never over ep."""
    local = run_tool([f"{build_dir}/bin/shardx-opt", _traced_train(name, tmp_path),
                      "--shardx-spmd"])
    ragged = re.findall(r"shardx\.ragged_all_to_all [^\n]* recv_counts = [^\n]*"
                        r"axes = \[(\d)\]", local)
    ep = str(len(CASES[name][0]) - 1)
    assert ragged == [ep] * 4, ragged
    gathered = re.findall(r"shardx\.all_gather [^\n]*: (tensor<[^>]*>)", local)
    assert all(t.endswith("xi64>") for t in gathered), gathered
    for axes, t in re.findall(r"shardx\.all_reduce [^\n]* axes = \[([\d, ]+)\][^\n]*: "
                              r"(tensor<[^>]*>)", local):
        if re.match(r"tensor<\d+x\d+x\d+xf32", t):
            assert axes == "0" and ep == "1", (axes, t)


@pytest.mark.parametrize("name", TRAIN_CASES)
def test_train_step_plan_moves_the_routed_rows(name, tmp_path, build_dir):
    """print-plan: four ragged exchanges of ``(n - 1) / n`` of a rank's ``T
    k / ranks`` rows of ``dim`` f32 and one of the per-expert counts. On the
    2x2 mesh the experts' gradients (each dp rank's tokens') are then
    all-reduced over dp, ``2 (dp - 1) / dp`` of a rank's ``ceil(E / ep)``
    experts' weights each, the data-parallel sum. Without them, fewer bytes
    than the propagated plan without the pass, which all-gathers the
    routing and the rows over ep and all-reduces the experts' outputs and
    their gradients (on the 2x2 mesh it also gathers the rows over dp and
    runs each expert's rows on every dp rank: at this size, fewer bytes
    than the dp sum of the weights' gradients)."""
    shape, tokens, experts = CASES[name]
    n, ranks = shape[-1], int(np.prod(shape))
    items = tokens * TOP_K // ranks
    path = _traced_train(name, tmp_path)
    text = _plan(path, build_dir, dispatch=True)
    exchanges = sorted((kind, int(a), int(b or 1), int(g), int(nbytes))
                       for kind, a, b, _, g, nbytes in _EXCHANGE.findall(text))
    slots = n * -(-experts // n)
    rows = ("ragged_all_to_all", items, DIM, n, (n - 1) * items * DIM * 4 // n)
    assert exchanges == sorted([("all_to_all", slots, 1, n, (n - 1) * slots * 8 // n)]
                               + [rows] * 4), text
    reshards = _RESHARD.findall(text)
    dp_sums = [int(b) for frm, to, b in reshards if (frm, to) == ("[P(sum), S(0)]", "[R, S(0)]")]
    if len(shape) == 2:
        dp = shape[0]
        weights = -(-experts // n) * DIM * HIDDEN * 4
        assert dp_sums == [2 * (dp - 1) * weights // dp] * 3, text
    else:
        assert dp_sums == [], text
    after = sum(int(b) for _, _, b in reshards) - sum(dp_sums) + sum(e[-1] for e in exchanges)
    before = sum(int(b) for _, _, b in _RESHARD.findall(_plan(path, build_dir, dispatch=False)))
    assert after < before, (after, before)


@pytest.mark.parametrize("name", ["ep2", "uneven_dp2xep2"])
def test_train_step_matches_unsharded_on_mpi(name, tmp_path, build_dir):
    check_on_mpi(build_dir, _traced_train(name, tmp_path), int(np.prod(CASES[name][0])))


def test_uneven_tokens_train_step_keeps_the_propagated_plan(tmp_path, build_dir):
    """A train step with tokens that do not divide over the ranks is not
    matched (the gates' gradient leaves by item, and an item split that
    follows the tokens' has no layout on the flattened ``[T k]``): it runs
    propagation's plan, no ragged exchange, and matches eager."""
    from shardx_dev.testing.steps import assert_steps_match_eager

    local = run_tool([f"{build_dir}/bin/shardx-opt", _traced_train("tokens6_ep4", tmp_path),
                      "--shardx-spmd"])
    assert "ragged_all_to_all" not in local
    step, mesh, ins, outs, args = _train("tokens6_ep4")
    assert_steps_match_eager(shardx.compile(step, mesh, ins, outs), step, args, "tokens6_ep4")


@pytest.mark.parametrize("shape", [(2,), (2, 2)])
def test_two_blocks_train_step(shape, tmp_path, build_dir):
    """Two blocks in a row (a linear layer, block, block; SGD): both
    dispatches are rewritten, one routing after the other (the second
    block's routing, which propagation kept whole, read in the tokens'
    split: a slice), eight ragged exchanges, and the step matches eager."""
    from shardx.train import TrainStep
    from shardx_dev.testing.steps import assert_steps_match_eager
    import torch.nn.functional as F

    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(DIM, DIM, bias=False),
                                 GroupedMoEBlock(DIM, HIDDEN, 4, top_k=TOP_K),
                                 GroupedMoEBlock(DIM, HIDDEN, 4, top_k=TOP_K))
    x = torch.randn(8, DIM)
    if len(shape) == 1:
        mesh, weights, tok = Mesh(shape, ("ep",)), [S(0)], [S(0)]
    else:
        mesh, weights, tok = Mesh(shape, ("dp", "ep")), [R(), S(0)], [S(0), S(0)]
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    ins, outs = step.placements(
        mesh, {f"{i}.{w}": weights for i in (1, 2) for w in ("w1", "w2", "w3")}, [tok], tok)
    args = step.example_args([x], torch.randn_like(x))
    path = tmp_path / "two.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name="two"))
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    assert len(re.findall(r"shardx\.ragged_all_to_all ", local)) == 8, local
    assert_steps_match_eager(shardx.compile(step, mesh, ins, outs), step, args, "two blocks")


class _SkewedBlock(GroupedMoEBlock):
    """A router bias sends every token to experts 0 and 1: on ep4 ranks 0
    and 1 receive every row, ranks 2 and 3 none (zero-sized exchanges)."""

    def route(self, x):
        bias = torch.tensor([100.0, 50.0] + [0.0] * (self.experts - 2))
        probs = torch.softmax(self.router(x) + bias, dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        return weights / weights.sum(-1, keepdim=True), chosen


class _AuxLossBlock(GroupedMoEBlock):
    """The router's probabilities also read by a load-balancing term added to
    the output (their other user)."""

    def forward(self, x):
        probs = torch.softmax(self.router(x), dim=-1)
        return super().forward(x) + 0.1 * (probs.mean(0) ** 2).sum()


class _RowsReturnedBlock(GroupedMoEBlock):
    """The routed rows' outputs returned with the block's output."""

    def forward(self, x):
        weights, chosen = self.route(x)
        flat = chosen.reshape(-1)
        offs = torch.cumsum(torch.bincount(flat, minlength=self.experts), dim=0,
                            dtype=torch.int32)
        order = torch.argsort(flat, stable=True)
        token = order // self.top_k
        ys = torch._grouped_mm(x[token], self.w1, offs=offs)
        return torch.zeros(x.shape[0], ys.shape[1]).index_add(0, token, ys), ys


# name: (block, mesh shape, tokens, train step, ragged exchanges expected).
# Forwards whose tokens do not divide (3 on ep2: 2, 1; 7 on ep4: 2, 2, 2,
# 1; 3 on 2x2: 1, 1, 1, 0, a rank with no token), top-3 (forward and
# train step), skewed routing (padded on ep4; the train step on 2x2 with
# each dp rank's own tokens), the router's probabilities read by a
# load-balancing term, and forms the pass leaves to propagation: top-1
# (``order // 1`` folds away: no token generic) and the routed rows returned.
OTHER_FORMS = {
    "tokens3_ep2": (GroupedMoEBlock, (2,), 3, False, 2),
    "tokens7_ep4": (GroupedMoEBlock, (4,), 7, False, 2),
    "tokens3_dp2xep2": (GroupedMoEBlock, (2, 2), 3, False, 2),
    "top3_ep2": (lambda: GroupedMoEBlock(DIM, HIDDEN, 4, top_k=3), (2,), 8, False, 2),
    "top3_train_ep2": (lambda: GroupedMoEBlock(DIM, HIDDEN, 4, top_k=3), (2,), 8, True, 4),
    "skewed_tokens5_ep4": (_SkewedBlock, (4,), 5, False, 2),
    "skewed_train_dp2xep2": (_SkewedBlock, (2, 2), 8, True, 4),
    "aux_loss_train_dp2xep2": (_AuxLossBlock, (2, 2), 8, True, 4),
    "top1_ep2": (lambda: GroupedMoEBlock(DIM, HIDDEN, 4, top_k=1), (2,), 8, False, 0),
    "rows_returned_ep2": (_RowsReturnedBlock, (2,), 8, False, 0),
}


@pytest.mark.parametrize("name", sorted(OTHER_FORMS))
def test_other_forms_match_eager(name, tmp_path, build_dir):
    """Each form is rewritten (its ragged exchanges in the local program) or
    left to propagation (none), and its numbers are eager's either way:
    forward outputs, or two SGD steps' loss and parameters."""
    from shardx_dev.testing.steps import assert_steps_match_eager

    block, shape, tokens, train, ragged = OTHER_FORMS[name]
    make = block if isinstance(block, type) else None
    if make:
        block = lambda: make(DIM, HIDDEN, 4, top_k=TOP_K)
    path = tmp_path / f"{name}.mlir"
    if train:
        step, mesh, ins, outs, args = _train_of(block, shape, tokens)
        path.write_text(trace(step, args, mesh, ins, outs, name=name))
    else:
        torch.manual_seed(0)
        fn, args, mesh, ins, module, x = _forward_of(block(), shape, tokens)
        path.write_text(trace(fn, args, mesh, ins, None, name=name))
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    assert len(re.findall(r"shardx\.ragged_all_to_all ", local)) == ragged, local
    if train:
        assert_steps_match_eager(shardx.compile(step, mesh, ins, outs), step, args, name)
        return
    got = shardx.compile(fn, mesh, ins)(*args)
    want = module(x)
    for g, w in zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,)))):
        np.testing.assert_allclose(g.to_torch().numpy(), w.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)
