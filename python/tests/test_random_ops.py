"""Random ops under ``shardx.compile`` (importer/rng.py): dropout, ``rand``,
``randn``, ``randint``, ``bernoulli``, ``normal``, ``uniform_``,
``exponential_`` draw from ShardX's counter-based generator. Checked: their
distributions; a sharded run draws the unsharded run's numbers exactly, uneven
splits included; a compiled call equals the function run eagerly under
``shardx.same_random()`` (the same seed from PyTorch's generator), a GPT-2
train step with dropout included; a new seed each call, repeatable under
``torch.manual_seed``; a package loaded without PyTorch draws new seeds too;
the ops ShardX has no form of are refused by name."""

import math

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S


def _draws(x):
    return (F.dropout(x, 0.25, training=True), torch.rand_like(x), torch.randn(x.shape),
            torch.randint(3, 10, x.shape), torch.bernoulli(torch.sigmoid(x)),
            torch.empty_like(x).uniform_(-2.0, 3.0), torch.empty_like(x).normal_(1.0, 0.5),
            torch.empty_like(x).exponential_(2.0), torch.normal(x, 0.1),
            torch.rand(x.shape, dtype=torch.float64), torch.randn_like(x, dtype=torch.bfloat16))


def test_distributions():
    torch.manual_seed(0)
    x = torch.randn(128, 96)
    out = [t.to_torch() for t in shardx.compile(_draws, None)(x)]
    drop, u, n, i, b, uu, nn_, e, nx, u64, nbf = out
    kept = drop != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.01
    torch.testing.assert_close(drop[kept], x[kept] / 0.75)
    assert 0.0 <= u.min().item() and u.max().item() < 1.0 and abs(u.mean().item() - 0.5) < 0.01
    assert abs(n.mean().item()) < 0.02 and abs(n.std().item() - 1.0) < 0.02
    assert i.dtype == torch.int64 and i.min().item() == 3 and i.max().item() == 9
    counts = torch.bincount(i.flatten() - 3).float()
    assert (counts / counts.mean() - 1).abs().max().item() < 0.06
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    assert abs(b.mean().item() - torch.sigmoid(x).mean().item()) < 0.01
    assert -2.0 <= uu.min().item() and uu.max().item() < 3.0 and abs(uu.mean().item() - 0.5) < 0.03
    assert abs(nn_.mean().item() - 1.0) < 0.01 and abs(nn_.std().item() - 0.5) < 0.01
    assert e.min().item() > 0 and abs(e.mean().item() - 0.5) < 0.01
    assert abs((nx - x).std().item() - 0.1) < 0.002
    assert u64.dtype == torch.float64 and 0.0 <= u64.min().item() and u64.max().item() < 1.0
    assert nbf.dtype == torch.bfloat16 and abs(nbf.float().std().item() - 1.0) < 0.02
    # Different streams are not the same numbers.
    assert not torch.equal(u, torch.rand_like(x)) and (u - out[5].sub(-2.0).div(5.0)).abs().max() > 0.5


@pytest.mark.parametrize("shape", [(8, 6), (7, 5)])
def test_sharded_runs_draw_the_unsharded_numbers(shape):
    """Row, column and 2-d splits, even and uneven: the same numbers, bit
    for bit."""
    x = torch.randn(*shape)
    torch.manual_seed(1)
    want = [t.to_torch() for t in shardx.compile(_draws, None)(x)]
    for mesh, placements in [(Mesh((2,), ("dp",)), [[S(0)]]), (Mesh((3,), ("tp",)), [[S(1)]]),
                             (Mesh((2, 2), ("dp", "tp")), [[S(0), S(1)]])]:
        torch.manual_seed(1)
        got = [t.to_torch() for t in shardx.compile(_draws, mesh, placements)(x)]
        for k, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g, w), (mesh.shape, k)


def test_new_numbers_each_call_repeatable_under_manual_seed():
    f = shardx.compile(lambda x: F.dropout(x, 0.5, training=True) + torch.rand_like(x), None)
    x = torch.ones(16, 16)
    torch.manual_seed(7)
    a, b = f(x).to_torch(), f(x).to_torch()
    torch.manual_seed(7)
    c = f(x).to_torch()
    assert not torch.equal(a, b) and torch.equal(a, c)
    assert f.compiles == 1


def test_compiled_calls_equal_eager_under_same_random():
    torch.manual_seed(2)
    x, w = torch.randn(8, 16), torch.randn(16, 16) * 0.3

    def step(x, w):
        w = w.detach().requires_grad_(True)
        h = F.dropout(torch.tanh(x @ w), 0.3, training=True)
        h = h + 0.1 * torch.randn_like(h) + torch.rand(8, 16) * F.dropout(torch.ones(8, 16), 0.5)
        loss = (h * h).sum()
        return loss.detach(), torch.autograd.grad(loss, w)[0]
    for args in [(None,), (Mesh((2,), ("dp",)), [[S(0)], [R()]]),
                 (Mesh((2,), ("tp",)), [[R()], [S(1)]])]:
        f = shardx.compile(step, *args)
        for seed in (10, 11):
            torch.manual_seed(seed)
            got = [t.to_torch() for t in f(x, w)]
            torch.manual_seed(seed)
            with shardx.same_random():
                want = step(x, w)
            for g, e in zip(got, want):
                torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_gpt2_train_step_with_dropout_matches_eager(attn):
    """HF GPT-2 with its default-like dropout (embeddings, attention
    probabilities, residuals) in training mode, AdamW: unsharded and
    Megatron TP over 2 ranks, against eager under ``same_random``. The
    layers draw random numbers, so they are traced inline, not as one
    region called per layer (which would draw one mask for all)."""
    import transformers as T
    from shardx_dev import zoo
    from shardx.train import TrainStep
    torch.manual_seed(0)
    cfg = T.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                       resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, bos_token_id=0,
                       eos_token_id=0, attn_implementation=attn)
    model = zoo.CausalLM(T.GPT2LMHeadModel(cfg).train())
    inputs, target = zoo._tokens()
    step = TrainStep(model, zoo.lm_loss, "adamw", lr=1e-2)
    args = step.example_args(inputs, target)
    text = shardx.trace(step, args)
    assert "shardx_region" not in text and text.count("arith.constant 30 : i64") >= 3
    tp2 = next(p for p in zoo.plans("gpt2") if p.name == "tp2")
    ins, outs = step.placements(tp2.mesh, tp2.params(step.param_names), [tp2.batch] * len(inputs),
                                tp2.batch)
    losses = []
    for f in (shardx.compile(step, None), shardx.compile(step, tp2.mesh, ins, outs)):
        torch.manual_seed(3)
        loss, params, _ = f(*args)
        torch.manual_seed(3)
        with shardx.same_random():
            eager_loss, eager_params, _ = step.run_eager(*args)
        torch.testing.assert_close(loss.to_torch(), eager_loss.detach(), rtol=1e-5, atol=1e-6)
        for g, e in zip(params, eager_params):
            # AdamW's first step moves each weight by about lr: 2e-4 is 2%
            # of a step, for gradients near 0 whose rounding flips m / sqrt(v).
            torch.testing.assert_close(g.to_torch(), e.detach(), rtol=1e-4, atol=2e-4)
        losses.append(loss.to_torch().item())
    model.eval()
    assert abs(step.run_eager(*args)[0].item() - losses[0]) > 1e-4  # dropout did drop


def test_the_seed_is_the_programs_last_input():
    text = shardx.trace(lambda x: F.dropout(x, 0.5, training=True), [torch.ones(4, 4)])
    header = text[:text.index(")")]
    assert header.rstrip().endswith("%arg1: tensor<i64>")


def test_ops_without_a_generator_form_are_refused():
    with pytest.raises(shardx.UnsupportedOpError, match="randperm"):
        shardx.compile(lambda x: x[torch.randperm(4)], None)(torch.ones(4, 2))
    with pytest.raises(shardx.UnsupportedOpError, match="multinomial"):
        shardx.compile(lambda x: torch.multinomial(torch.softmax(x, 1), 2), None)(torch.ones(4, 3))


def test_checkpointed_dropout_draws_the_forward_mask_again():
    """torch.utils.checkpoint restores PyTorch's generator state before
    computing the block again for the backward, and with it ShardX's
    stream count: the recomputation draws the forward's mask, so the
    gradient is the one without the checkpoint (it was 17.6 off)."""
    from torch.utils.checkpoint import checkpoint
    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(16, 16) * 0.3

    def block(h, w):
        return F.dropout(torch.tanh(h @ w), 0.5, training=True)

    def step(x, w, ckpt=True):
        w = w.detach().requires_grad_(True)
        h = checkpoint(block, x, w, use_reentrant=False) if ckpt else block(x, w)
        h = F.dropout(h, 0.2, training=True)
        loss = (h * h).sum()
        return loss.detach(), torch.autograd.grad(loss, w)[0]
    torch.manual_seed(1)
    got = [t.to_torch() for t in shardx.compile(step, None)(x, w)]
    for ckpt in (True, False):
        torch.manual_seed(1)
        with shardx.same_random():
            want = step(x, w, ckpt)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("aliased", [False, True])
def test_random_entries_keep_eager_in_place_and_aliasing(aliased):
    """An entry with random ops runs from Python (the seed is written
    before each call): an input updated in place, and the same tensor
    passed twice, still end as eager leaves them, with eager's results
    under same_random."""
    def f(x, y):
        x.add_(F.dropout(y, 0.5, training=True))
        return x * 2, y
    compiled = shardx.compile(f, None)
    base = torch.randn(4, 6)
    for _ in range(2):
        a = base.clone()
        b = a if aliased else base.clone() + 1
        a2 = base.clone()
        b2 = a2 if aliased else base.clone() + 1
        torch.manual_seed(11)
        got = compiled(a, b)
        torch.manual_seed(11)
        with shardx.same_random():
            want = f(a2, b2)
        for g, w in zip(got, want):
            assert torch.equal(g.to_torch() if hasattr(g, "to_torch") else g, w)
        assert torch.equal(a, a2) and torch.equal(b, b2)
