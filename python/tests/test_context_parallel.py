"""Context parallelism: a Llama-style decoder block (models.LlamaBlock:
RMSNorm, RoPE, grouped-query attention with a causal mask, SwiGLU MLP) in a
train step (forward, backward, SGD) with its activations split on the
sequence dim over 2 and 4 ranks. Only the input and target are laid out
(Shard(1)): propagation keeps the norms, RoPE, the queries, the softmax rows
and the MLP split on the sequence and gathers only the keys and values
(docs/Rules.md, "Context parallelism"). Each program is checked against
eager PyTorch on the threads backend (shardx.compile, two steps) and against
its unsharded compile under mpirun on the mpi backend (shardx-run --check);
the uneven cases split 30 positions over 4 ranks (8, 8, 8, 6) and 10
(3, 3, 3, 1). The sdpa_ cases run the same block's attention as
torchtitan's Llama does, F.scaled_dot_product_attention(is_causal=True),
which the importer traces as shardx.attention (and its backward ops): the
causal mask is the positions of the rows and keys, split with them, and the
plan of the written-out block follows from the same sequence split."""

import re

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S
from shardx import context_parallel as cp
from shardx.importer import trace
from shardx.train import TrainStep
from shardx_dev import models
from shardx_dev.testing.steps import assert_steps_match_eager, check_on_mpi, run_tool

DIM, HEADS, KV_HEADS, HIDDEN = 32, 4, 2, 64
HD = DIM // HEADS
CASES = {
    # name: (ranks, batch, sequence)
    "seq64_cp2": (2, 1, 64),
    "seq32_cp4": (4, 1, 32),
    "uneven30_cp4": (4, 1, 30),
    # 31 positions on 2 ranks (16, 15): as at 32 on 2 (docs/Rules.md), K
    # is gathered at the scores' operand, V at the key/value heads.
    "uneven31_cp2": (2, 1, 31),
    # Too short to gain: the cost model mixes (the block's input and the
    # repeated K and V gathered, each collective's latency outweighing its
    # bytes); checked for its numbers only.
    "uneven10_cp4": (4, 1, 10),
    # F.scaled_dot_product_attention(is_causal=True) (LlamaBlock(sdpa=True)),
    # traced as shardx.attention.
    "sdpa_seq64_cp2": (2, 1, 64),
    "sdpa_seq32_cp4": (4, 1, 32),
    "sdpa_uneven30_cp4": (4, 1, 30),
    "sdpa_uneven31_cp2": (2, 1, 31),
}
SDPA = sorted(c for c in CASES if c.startswith("sdpa_"))
# K gathered at the scores' operand, V at the key/value heads.
K_AT_SCORES = ["uneven31_cp2"]
CP_PLANS = sorted(set(CASES) - {"uneven10_cp4"} - set(K_AT_SCORES))


def _step(name):
    ranks, batch, seq = CASES[name]
    torch.manual_seed(0)
    module = models.LlamaBlock(DIM, HEADS, KV_HEADS, HIDDEN, sdpa=name in SDPA)
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    x, y = torch.randn(batch, seq, DIM), torch.randn(batch, seq, DIM)
    mesh = Mesh((ranks,), ("cp",))
    ins, outs = step.placements(mesh, {}, [[S(1)]], [S(1)])
    return step, mesh, ins, outs, step.example_args([x], y)


@pytest.fixture(scope="module", params=sorted(CASES))
def program(request, tmp_path_factory):
    step, mesh, ins, outs, args = _step(request.param)
    path = tmp_path_factory.mktemp("cp") / f"{request.param}.mlir"
    path.write_text(trace(step, args, mesh, ins, outs, name=request.param))
    return request.param, path


PLAN = re.compile(r"remark: plan (\[.*?\]) -> (\[.*?\])(?:, [^f]*)? for tensor<([0-9x]+)xf32>: "
                  r".*?, (\d+) bytes/rank")


def plan_reshards(path, build_dir):
    """(from, to, shape, bytes/rank) of every reshard print-plan prices
    above zero bytes."""
    out = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-propagate",
                    "--shardx-insert-reshards", "--shardx-print-plan", "-o", "/dev/null"])
    found = [(a, b, tuple(int(d) for d in s.split("x")), int(n))
             for a, b, s, n in PLAN.findall(out)]
    return [r for r in found if r[3] > 0], out


def _chunk_bytes(ranks, seq, other):
    """Bytes a rank receives when the other ranks send their torch.chunk
    blocks of a sequence-split f32 tensor (an all-gather, priced at the
    largest block's rows as print-plan does; a reduce-scatter is priced at
    (n - 1) / n of the tensor)."""
    return (ranks - 1) * -(-seq // ranks) * other * 4


@pytest.mark.parametrize("program", CP_PLANS, indirect=True)
def test_plan_gathers_only_keys_and_values(program, build_dir):
    """Ring attention's bytes: in the forward, each rank receives the other
    ranks' blocks of K and V once (all-gathers over the sequence, at the
    key/value heads: before the grouped-query repeat, which then runs on
    every rank); in the backward, dK and dV are reduce-scattered back to
    their sequence blocks (after the repeat's sum). Nothing else moves an
    activation: the rest are the weight gradients' all-reduces and the
    loss's."""
    name, path = program
    ranks, batch, seq = CASES[name]
    reshards, out = plan_reshards(path, build_dir)
    gathers = [r for r in reshards if r[0].startswith("[S(") and r[1] == "[R]"]
    kv = (batch, seq, KV_HEADS, HD)
    assert [(g[0], g[2], g[3]) for g in gathers] == \
        [("[S(1)]", kv, _chunk_bytes(ranks, seq, batch * KV_HEADS * HD))] * 2, gathers
    scatters = [r for r in reshards if r[0] == "[P(sum)]" and r[1].startswith("[S(")]
    assert [(s[1], s[2], s[3]) for s in scatters] == \
        [("[S(1)]", kv, (ranks - 1) * seq * batch * KV_HEADS * HD * 4 // ranks)] * 2, scatters
    params = {tuple(p.shape) for p in models.LlamaBlock(DIM, HEADS, KV_HEADS, HIDDEN).parameters()}
    params |= {tuple(reversed(s)) for s in params}  # gradients of transposed weights
    others = [r for r in reshards if r not in gathers and r not in scatters]
    assert all(r[:2] == ("[P(sum)]", "[R]") and (r[2] in params or r[2] == ())
               for r in others), others
    assert len(reshards) == len(gathers) + len(scatters) + len(others)


@pytest.mark.parametrize("program", K_AT_SCORES, indirect=True)
def test_short_plan_gathers_k_at_scores(program, build_dir):
    """Causal SDPA on the sequence split: the same plan as the block with
    the attention written out, but for where K is gathered. The math
    backend scales q and k by the root of the scale each, so K's chain from
    the key/value heads to the scores' operand (repeat, transposes, scale,
    collapse to [batch * heads, head dim, positions]) holds one more op on
    the repeated heads; on these short sequences the cost model keeps K's
    gather at the scores' operand (heads / kv_heads times the bytes, split
    on its last dim) rather than replicate the chain. So does the written-out
    block at 31 positions on 2 ranks (its K chain's transposes outweigh
    the bytes, as at 32). V is gathered at the key/value heads, dK and dV
    reduce-scattered there; nothing else moves an activation."""
    name, path = program
    ranks, batch, seq = CASES[name]
    reshards, out = plan_reshards(path, build_dir)
    kv = (batch, seq, KV_HEADS, HD)
    kt = (batch * HEADS, HD, seq)
    gathers = sorted(r for r in reshards if r[0].startswith("[S(") and r[1] == "[R]")
    assert gathers == sorted([("[S(1)]", "[R]", kv, _chunk_bytes(ranks, seq, batch * KV_HEADS * HD)),
                              ("[S(2)]", "[R]", kt, _chunk_bytes(ranks, seq, batch * HEADS * HD))]), \
        gathers
    scatters = [r for r in reshards if r[0] == "[P(sum)]" and r[1].startswith("[S(")]
    assert [(s[1], s[2], s[3]) for s in scatters] == \
        [("[S(1)]", kv, (ranks - 1) * seq * batch * KV_HEADS * HD * 4 // ranks)] * 2, scatters
    params = {tuple(p.shape) for p in models.LlamaBlock(DIM, HEADS, KV_HEADS, HIDDEN).parameters()}
    params |= {tuple(reversed(s)) for s in params}
    others = [r for r in reshards if r not in gathers and r not in scatters]
    assert all(r[:2] == ("[P(sum)]", "[R]") and (r[2] in params or r[2] == ())
               for r in others), others


@pytest.mark.parametrize("ranks,batch,seq", [(2, 1, 256), (4, 2, 64)])
def test_sdpa_long_sequence_gathers_at_key_value_heads(tmp_path, build_dir, ranks, batch, seq):
    """With more positions (256 on 2 ranks, or 2 sequences of 64 on 4) the
    gathers' bytes outweigh the replicated chain: K and V are both gathered
    at the key/value heads, (n-1)/n of each, ring attention's forward bytes,
    and dK, dV reduce-scattered there (checked for its plan only)."""
    torch.manual_seed(0)
    step = TrainStep(models.LlamaBlock(DIM, HEADS, KV_HEADS, HIDDEN, sdpa=True),
                     F.mse_loss, "sgd", lr=0.1)
    x, y = torch.randn(batch, seq, DIM), torch.randn(batch, seq, DIM)
    mesh = Mesh((ranks,), ("cp",))
    ins, outs = step.placements(mesh, {}, [[S(1)]], [S(1)])
    path = tmp_path / f"sdpa_b{batch}_seq{seq}_cp{ranks}.mlir"
    path.write_text(trace(step, step.example_args([x], y), mesh, ins, outs, name="sdpa256"))
    reshards, _ = plan_reshards(path, build_dir)
    kv = (batch, seq, KV_HEADS, HD)
    moved = [r for r in reshards if r[2] == kv]
    half = (ranks - 1) * seq * batch * KV_HEADS * HD * 4 // ranks
    assert sorted(moved) == sorted([("[S(1)]", "[R]", kv, half)] * 2
                                   + [("[P(sum)]", "[S(1)]", kv, half)] * 2), moved
    assert all(r[:2] == ("[P(sum)]", "[R]") for r in reshards if r not in moved), reshards


@pytest.mark.parametrize("program", CP_PLANS + K_AT_SCORES, indirect=True)
def test_causal_mask_and_rotary_angles_stay_split(program, build_dir):
    """The causal mask and the rotary angles are built from positions
    (iota): each rank builds its own rows from its offset
    (shardx.axis_index); no reshard of a position, mask or angle moves
    bytes (only K, V and gradients do, as above)."""
    name, path = program
    _, out = plan_reshards(path, build_dir)
    # The positions are split where they are made (R -> S, no bytes; under
    # SDPA's math backend the mask's positions are made split, with no
    # reshard at all); the float reshards (angles, mask values) are only
    # those of the plan tests above, which admit no others.
    ints = re.findall(r"remark: plan .* for tensor<[0-9x]+x(?:i1|i64)>: .*?, (\d+) bytes/rank", out)
    assert (ints or name in SDPA) and all(b == "0" for b in ints), ints
    local = run_tool([f"{build_dir}/bin/shardx-opt", path, "--shardx-spmd"])
    assert "shardx.axis_index" in local
    # SDPA is shardx.attention, its causal mask the positions of its rows
    # and keys: each rank's attention reads its own query positions
    # ([s/n], dynamic where the split is uneven) and every key's ([s]),
    # and no rank builds a mask.
    ranks, _, seq = CASES[name]
    rows = seq // ranks if seq % ranks == 0 else "?"
    if name in SDPA:
        attention = [line for line in local.splitlines() if "shardx.attention " in line]
        assert len(attention) == 1, attention
        assert f"tensor<{rows}xi64>, tensor<{seq}xi64> -> " in attention[0], attention
        assert "xi1>" not in local


def test_sharded_matches_unsharded_on_mpi(program, build_dir):
    name, path = program
    check_on_mpi(build_dir, path, CASES[name][0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_steps_match_eager(name):
    step, mesh, ins, outs, args = _step(name)
    f = shardx.compile(step, mesh, ins, outs)
    assert_steps_match_eager(f, step, args, name)


# -- ring attention ----------------------------------------------------------
# The sdpa_ cases with ring_attention_bytes=0 (shardx-ring-attention; docs/
# Rules.md, "Ring attention"): the forward attention and its backward pair
# run as rings over the blocks of K and V that the plan above gathers; an
# uneven split's blocks are padded to the largest (torch.chunk's: 8, 8, 8,
# 6 of 30; 16, 15 of 31), the padding masked by its key positions.
RING = ["sdpa_seq64_cp2", "sdpa_seq32_cp4", "sdpa_uneven30_cp4", "sdpa_uneven31_cp2"]


@pytest.mark.parametrize("program", RING, indirect=True)
def test_ring_attention_program(program, build_dir):
    """Each rank's program: n attention ops (its queries over each block of
    keys), n attention_dq and n attention_dkv (one ring of the backward
    pair), K and V permuted n - 1 times per ring, the dK and dV
    accumulators n times; no gather of K or V (all_gather, or the uneven
    exchange) and no reduce-scatter of dK or dV remains, so every
    activation collective is a permute of one [1, ceil(s/n), kv heads,
    head dim] block."""
    name, path = program
    ranks, batch, seq = CASES[name]
    local = run_tool([f"{build_dir}/bin/shardx-opt", path,
                      "--shardx-spmd=ring-attention-bytes=0"])
    count = {op: len(re.findall(rf"shardx\.{op} ", local))
             for op in ("attention", "attention_dq", "attention_dkv", "permute", "all_gather",
                        "reduce_scatter", "exchange")}
    assert count == dict(attention=ranks, attention_dq=ranks, attention_dkv=ranks,
                         permute=4 * (ranks - 1) + 2 * ranks, all_gather=0,
                         reduce_scatter=0, exchange=0), count
    block = -(-seq // ranks)
    permutes = re.findall(r"shardx\.permute .* : (tensor<[^>]*>)", local)
    assert permutes == [f"tensor<{batch}x{block}x{KV_HEADS}x{HD}xf32>"] * len(permutes), \
        permutes
    # Each block's attention reads the rank's query positions (s/n, dynamic
    # where uneven) and the block's key positions.
    rows = seq // ranks if seq % ranks == 0 else "?"
    attention = [line for line in local.splitlines() if "shardx.attention " in line]
    assert all(f"tensor<{rows}xi64>, tensor<{block}xi64> -> " in a for a in attention), \
        attention


@pytest.mark.parametrize("name", RING)
def test_ring_attention_steps_match_eager(name):
    step, mesh, ins, outs, args = _step(name)
    f = shardx.compile(step, mesh, ins, outs, ring_attention_bytes=0)
    assert_steps_match_eager(f, step, args, name)


@pytest.mark.parametrize("program", RING, indirect=True)
def test_ring_attention_matches_unsharded_on_mpi(program, build_dir):
    name, path = program
    check_on_mpi(build_dir, path, CASES[name][0], ["--ring-attention-bytes=0"])


# -- zig-zag load balancing --------------------------------------------------
# The sequence in zig-zag order (shardx.context_parallel): rank r holds
# chunks r and 2n - 1 - r of 2n, the rotary angles read the rows' positions
# and the step is compiled under sequence_order, so every causal attention
# masks by them. The ring then computes only the quarters of each block
# the mask shows: 3 of the own block's 4 and 2 of every other's.
ZIGZAG = [(2, 64), (4, 32), (4, 64)]


def _zigzag_step(ranks, seq):
    torch.manual_seed(0)
    module = models.LlamaBlock(DIM, HEADS, KV_HEADS, HIDDEN, sdpa=True)
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    x, y = torch.randn(1, seq, DIM), torch.randn(1, seq, DIM)
    mesh = Mesh((ranks,), ("cp",))
    ins, outs = step.placements(mesh, {}, [[S(1)], [S(0)]], [S(1)])
    order = cp.zigzag_order(seq, ranks)
    zz = step.example_args([cp.zigzag(x, 1, ranks), order], cp.zigzag(y, 1, ranks))
    return step, mesh, ins, outs, order, zz, step.example_args([x], y)


def _zigzag_program(tmp_path, ranks, seq):
    """The zig-zag step's program, traced under its order, written to a file."""
    step, mesh, ins, outs, order, zz, _ = _zigzag_step(ranks, seq)
    path = tmp_path / "zz.mlir"
    with cp.sequence_order(order):
        path.write_text(trace(step, zz, mesh, ins, outs, name="zz"))
    return path


@pytest.mark.parametrize("ranks,seq", ZIGZAG)
@pytest.mark.parametrize("ring", [0, None], ids=["ring", "gather"])
def test_zigzag_matches_eager_in_order(ranks, seq, ring):
    """The compiled step on the reordered data (as a ring, and with the
    default's K and V gathers, each attention op by the calls its mask
    shows) against eager PyTorch on the data in its own order: the loss (a
    mean over positions) and every parameter after two steps agree; without
    the order (a mask in the rows' order) the loss differs."""
    step, mesh, ins, outs, order, zz, plain = _zigzag_step(ranks, seq)
    f = shardx.compile(step, mesh, ins, outs, ring_attention_bytes=ring, sequence_order=order)
    params, state, inputs, target = zz
    _, _, plain_inputs, plain_target = plain
    ours, eager = (params, state), (params, state)
    for i in range(2):
        loss, p, s = f(ours[0], ours[1], inputs, target)
        el, ep, es = step.run_eager(eager[0], eager[1], plain_inputs, plain_target)
        torch.testing.assert_close(loss.to_torch(), el.detach(), rtol=1e-5, atol=1e-6)
        for a, b in zip(p, ep):
            torch.testing.assert_close(a.to_torch(), b.detach(), rtol=1e-4, atol=1e-5)
        ours, eager = (p, s), (ep, es)
    unordered = shardx.compile(step, mesh, ins, outs, ring_attention_bytes=ring)
    loss = unordered(params, state, inputs, target)[0].to_torch()
    first = step.run_eager(params, state, plain_inputs, plain_target)[0].detach()
    # (at the tolerance the ordered step meets above)
    assert not torch.allclose(loss, first, rtol=1e-5, atol=1e-6), (loss, first)


@pytest.mark.parametrize("ring", [0, None], ids=["ring", "gather"])
def test_zigzag_with_data_parallel_matches_eager_in_order(ring, build_dir):
    """A (dp, cp) 2x2 mesh: 2 sequences over dp, each in zig-zag order over
    cp; the pieces are the 2-rank case's (5 calls of each op per rank)."""
    torch.manual_seed(0)
    module = models.LlamaBlock(DIM, HEADS, KV_HEADS, HIDDEN, sdpa=True)
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    x, y = torch.randn(2, 32, DIM), torch.randn(2, 32, DIM)
    mesh = Mesh((2, 2), ("dp", "cp"))
    ins, outs = step.placements(mesh, {}, [[S(0), S(1)], [R(), S(0)]], [S(0), S(1)])
    order = cp.zigzag_order(32, 2)
    params, state, inputs, target = step.example_args([cp.zigzag(x, 1, 2), order],
                                                      cp.zigzag(y, 1, 2))
    _, _, plain_inputs, plain_target = step.example_args([x], y)
    f = shardx.compile(step, mesh, ins, outs, ring_attention_bytes=ring, sequence_order=order)
    loss, p, _ = f(params, state, inputs, target)
    el, ep, _ = step.run_eager(params, state, plain_inputs, plain_target)
    torch.testing.assert_close(loss.to_torch(), el.detach(), rtol=1e-5, atol=1e-6)
    for a, b in zip(p, ep):
        torch.testing.assert_close(a.to_torch(), b.detach(), rtol=1e-4, atol=1e-5)
    with cp.sequence_order(order):
        text = trace(step, (params, state, inputs, target), mesh, ins, outs, name="zz")
    local = run_tool([f"{build_dir}/bin/shardx-opt", "-",
                      f"--shardx-spmd=ring-attention-bytes={-1 if ring is None else ring}"],
                     input=text)
    assert len(re.findall(r"shardx\.attention_dkv ", local)) == 5


@pytest.mark.parametrize("ranks,seq", [(2, 64), (4, 32)])
def test_zigzag_ring_program_computes_the_shown_quarters(tmp_path, build_dir, ranks, seq):
    """Each rank's program under the zig-zag order: 3 + 2 (n - 1) attention
    calls (and as many of each backward op) of a quarter of a block each,
    the queries' and keys' halves [s/2n] rows; the permutes are the plain
    ring's."""
    path = _zigzag_program(tmp_path, ranks, seq)
    local = run_tool([f"{build_dir}/bin/shardx-opt", str(path),
                      "--shardx-spmd=ring-attention-bytes=0"])
    calls = 3 + 2 * (ranks - 1)
    half = seq // (2 * ranks)
    count = {op: len(re.findall(rf"shardx\.{op} ", local))
             for op in ("attention", "attention_dq", "attention_dkv", "permute", "all_gather")}
    assert count == dict(attention=calls, attention_dq=calls, attention_dkv=calls,
                         permute=4 * (ranks - 1) + 2 * ranks, all_gather=0), count
    attention = [line for line in local.splitlines() if "shardx.attention" in line]
    assert all(f"tensor<{half}xi64>, tensor<{half}xi64> -> " in a for a in attention), attention


@pytest.mark.parametrize("ranks,seq", [(2, 64), (4, 32)])
def test_zigzag_gathered_attention_computes_the_shown_pieces(tmp_path, build_dir, ranks, seq):
    """Without a ring (the default below 32 MiB, and -1), each rank's
    attention over the gathered keys and both backward ops run by 2n + 1
    calls of [s/2n] queries and keys (its queries' halves against the
    2n chunks of keys its mask shows) where the rows' order computes 4n;
    K and V are gathered once, as before."""
    path = _zigzag_program(tmp_path, ranks, seq)
    half = seq // (2 * ranks)
    for option in ("33554432", "-1"):
        local = run_tool([f"{build_dir}/bin/shardx-opt", str(path),
                          f"--shardx-spmd=ring-attention-bytes={option}"])
        count = {op: len(re.findall(rf"shardx\.{op} ", local))
                 for op in ("attention", "attention_dq", "attention_dkv", "permute",
                            "all_gather")}
        assert count == dict(attention=2 * ranks + 1, attention_dq=2 * ranks + 1,
                             attention_dkv=2 * ranks + 1, permute=0, all_gather=2), count
        attention = [line for line in local.splitlines() if "shardx.attention" in line]
        assert all(f"tensor<{half}xi64>, tensor<{half}xi64> -> " in a for a in attention)


@pytest.mark.parametrize("ring", ["0", "-1"], ids=["ring", "gather"])
def test_zigzag_matches_unsharded_on_mpi(tmp_path, build_dir, ring):
    path = _zigzag_program(tmp_path, 4, 32)
    check_on_mpi(build_dir, path, 4, [f"--ring-attention-bytes={ring}"])


def test_sequence_order_refusals():
    """A bad order, and causal attentions it cannot mask by, are refused."""
    from shardx.importer.values import UnsupportedOpError
    with pytest.raises(ValueError, match="permutation"):
        shardx.compile(lambda x: x, Mesh((2,), ("cp",)), sequence_order=[0, 0, 1, 2])
    with pytest.raises(ValueError, match="1-D integer"):
        shardx.compile(lambda x: x, Mesh((2,), ("cp",)), sequence_order=torch.ones(4))
    with pytest.raises(ValueError, match="equal chunks"):
        cp.zigzag_order(30, 4)
    q = torch.randn(1, 2, 8, 4)

    def attend(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    order = cp.zigzag_order(8, 2)
    for args, why in (((q, q[:, :, :4], q[:, :, :4]), "4 keys"),
                      ((q.double(), q, q), "does not cover")):
        f = shardx.compile(attend, None, sequence_order=order)
        with pytest.raises(UnsupportedOpError, match=why):
            f(*args)
    # Not causal: the order does not matter, and is not needed.
    f = shardx.compile(lambda q: F.scaled_dot_product_attention(q, q, q), None,
                       sequence_order=order)
    torch.testing.assert_close(f(q).to_torch(), F.scaled_dot_product_attention(q, q, q))
    torch.testing.assert_close(cp.unzigzag(cp.zigzag(q, 2, 2), 2, 2), q)
