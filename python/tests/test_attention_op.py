"""``scaled_dot_product_attention`` traced as ``shardx.attention`` (and its
backward as ``attention_dq`` / ``attention_dkv``, importer/attention.py):
outputs and the gradients of q, k and v against eager PyTorch, causal or
not, with grouped-query heads (``enable_gqa``), an explicit scale, 3-D
inputs, and the sequence split over 2 thread ranks, evenly and not. The
backward ops take the rows' log-sum-exp, not the probabilities: the traced
program passes no ``[.., Sq, Sk]`` tensor from the forward to the backward
(checked on the program's text)."""

import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate as R, Shard as S
from shardx.importer import trace
from shardx.importer.attention import composite, flash_precision
from shardx_dev.testing.steps import run_tool

CASES = {
    # name: (q shape, k shape, v width, sdpa keyword arguments)
    "causal": ((2, 4, 8, 16), (2, 4, 8, 16), 16, dict(is_causal=True)),
    "full": ((2, 4, 8, 16), (2, 4, 8, 16), 12, dict()),
    "gqa_causal": ((1, 4, 8, 8), (1, 2, 8, 8), 8, dict(is_causal=True, enable_gqa=True)),
    "scale": ((1, 2, 6, 8), (1, 2, 10, 8), 4, dict(scale=0.3)),
    # PyTorch's top-left causal mask when queries and keys differ in count.
    "causal_rect": ((1, 2, 6, 8), (1, 2, 10, 8), 4, dict(is_causal=True)),
    "three_dims": ((3, 8, 16), (3, 8, 16), 16, dict(is_causal=True)),
    "uneven": ((1, 2, 7, 8), (1, 2, 7, 8), 8, dict(is_causal=True)),
    # Long enough to run in pieces unsharded (shardx-ring-attention's
    # piece-rows, 128): 4 x 4 pieces of 128 rows, 10 of them computed; 3 of
    # 2 x 2 of 192 with grouped-query heads.
    "causal_long": ((1, 2, 512, 8), (1, 2, 512, 8), 8, dict(is_causal=True)),
    "gqa_causal_long": ((1, 4, 384, 8), (1, 2, 384, 8), 8,
                        dict(is_causal=True, enable_gqa=True)),
}


def _inputs(name, dtype):
    qs, ks, vw, _ = CASES[name]
    torch.manual_seed(0)
    return [torch.randn(*s, dtype=dtype, requires_grad=True)
            for s in (qs, ks, (*ks[:-1], vw))]


def _step(name):
    kwargs = CASES[name][3]

    def step(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        loss = (out * out.cos()).sum()
        return (out,) + torch.autograd.grad(loss, (q, k, v))
    return step


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(name, dtype):
    """Unsharded, and with the sequence (dim -2) of q, k and v split on 2
    ranks: the output and the three gradients."""
    step = _step(name)
    q, k, v = _inputs(name, dtype)
    want = step(q, k, v)
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-5)
    seq = S(q.dim() - 2)
    for mesh, placements in ((Mesh((1,)), None), (Mesh((2,), ("cp",)), [[seq]] * 3)):
        got = shardx.compile(step, mesh, placements)(q, k, v)
        for g, w, what in zip(got, want, ("out", "dq", "dk", "dv")):
            g = g.to_torch() if hasattr(g, "to_torch") else g
            torch.testing.assert_close(g, w, **tol, msg=lambda m: f"{name} {what} {mesh}: {m}")


@pytest.mark.parametrize("split", ["batch3", "heads3", "gqa_kv_heads", "gqa_uneven"])
def test_uneven_batch_and_heads(split):
    """Batch or heads split unevenly (3 over 2 ranks: a rank's batch or
    head count is dynamic in its program, and with grouped-query heads, 6
    over 3 key/value heads, so is their ratio: the code generation repeats
    the key/value heads there), and grouped-query heads split with their
    key/value heads evenly (4 query heads over 2 kv heads, 2 ranks)."""
    kwargs = dict(is_causal=True)
    if split == "batch3":
        shapes, placement = ((3, 2, 6, 8), (3, 2, 6, 8)), S(0)
    elif split == "heads3":
        shapes, placement = ((1, 3, 6, 8), (1, 3, 6, 8)), S(1)
    elif split == "gqa_uneven":
        shapes, placement = ((1, 6, 6, 8), (1, 3, 6, 8)), S(1)
        kwargs["enable_gqa"] = True
    else:
        shapes, placement = ((2, 4, 6, 8), (2, 2, 6, 8)), S(1)
        kwargs["enable_gqa"] = True
    torch.manual_seed(0)
    q, k = (torch.randn(*s, dtype=torch.float64, requires_grad=True) for s in shapes)
    v = torch.randn(*shapes[1], dtype=torch.float64, requires_grad=True)

    def step(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        return (out,) + torch.autograd.grad((out * out).sum(), (q, k, v))
    want = step(q, k, v)
    got = shardx.compile(step, Mesh((2,)), [[placement]] * 3)(q, k, v)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.to_torch(), w, rtol=1e-10, atol=1e-12)


RING = ["causal", "full", "gqa_causal", "scale", "causal_rect"]


@pytest.mark.parametrize("ranks", [2, 4])
@pytest.mark.parametrize("name", RING)
def test_ring_attention_matches_eager(name, ranks, build_dir):
    """The sequence of q, k and v split over 2 and 4 ranks, with
    ``ring_attention_bytes=0``. On these small shapes propagation gathers
    K and V for the forward and for attention_dq (and q for
    attention_dkv, whose keys stay split): where the keys divide evenly,
    those two run as rings (shardx-ring-attention: n attention ops each,
    attention_dq's own block as 3 quarters where causal, K and V permuted
    n - 1 times per ring); unevenly too (10 keys over 4
    ranks: 3, 3, 3, 1), the padding masked by its key positions (made up
    where the attention is not causal). f64 against eager: the output and
    the three gradients. (test_context_parallel checks the rings of a Llama block,
    the backward's dK and dV included.)"""
    step = _step(name)
    q, k, v = _inputs(name, torch.float64)
    want = step(q, k, v)
    mesh = Mesh((ranks,), ("cp",))
    placements = [[S(2)]] * 3
    got = shardx.compile(step, mesh, placements, ring_attention_bytes=0)(q, k, v)
    for g, w, what in zip(got, want, ("out", "dq", "dk", "dv")):
        torch.testing.assert_close(g.to_torch(), w, rtol=1e-10, atol=1e-12,
                                   msg=lambda m: f"{name} {what} on {ranks}: {m}")
    text = trace(step, (q, k, v), mesh, placements, None, name="ring")
    local = run_tool([f"{build_dir}/bin/shardx-opt", "-", "--shardx-spmd=ring-attention-bytes=0"],
                     input=text)
    ops = {op: local.count(f"shardx.{op} ")
           for op in ("attention", "attention_dq", "attention_dkv", "permute", "all_gather",
                      "reduce_scatter")}
    # attention_dq's query positions are torch.arange's split by a chunk,
    # known at compile time and the keys' own: where causal, its own
    # block runs as the 3 quarters the mask shows (docs/Rules.md, "Zig-zag
    # load balancing"). The forward here reads every query (q gathered).
    calls = ranks + 2 if name in ("causal", "gqa_causal") else ranks
    assert ops["attention"] == ranks and ops["attention_dq"] == calls, ops
    assert ops["permute"] == 2 * 2 * (ranks - 1), ops
    if k.shape[2] % ranks and "is_causal" not in CASES[name][3]:
        # Uneven and not causal: the padding masked by made-up positions.
        assert "causal(" in local and "9223372036854775806" in local


def test_ring_attention_threshold(build_dir):
    """The ring is used only where the gathered K and V take at least
    ring-attention-bytes per rank (32 MiB by default): 2 x [2, 4, 8, 16]
    f32 is 8 KiB."""
    step = _step("causal")
    q, k, v = _inputs("causal", torch.float32)
    text = trace(step, (q, k, v), Mesh((2,), ("cp",)), [[S(2)]] * 3, None, name="ring")
    for option, ring in (("", False), ("=ring-attention-bytes=8192", True),
                         ("=ring-attention-bytes=8193", False),
                         ("=ring-attention-bytes=-1", False)):
        local = run_tool([f"{build_dir}/bin/shardx-opt", "-", f"--shardx-spmd{option}"],
                         input=text)
        assert local.count("shardx.attention ") == (2 if ring else 1), option
        assert ("shardx.permute" in local) == ring, option
    with pytest.raises(ValueError, match="ring_attention_bytes"):
        shardx.compile(step, Mesh((2,)), ring_attention_bytes=-1)


@pytest.mark.parametrize("name,calls", [("causal_long", 10), ("gqa_causal_long", 3),
                                        ("causal", 1)])
def test_long_causal_attention_runs_in_pieces(name, calls, build_dir):
    """Unsharded, a causal attention whose positions are torch.arange's runs
    by the pieces its mask shows (at least 128 rows each, at most 8 a side):
    each of the three ops is that many calls; piece-rows=0 keeps one."""
    q, k, v = _inputs(name, torch.float64)
    text = trace(_step(name), (q, k, v), None, None, None, name="pieces")
    for option, want in (("", calls), ("{piece-rows=0}", 1)):
        local = run_tool([f"{build_dir}/bin/shardx-opt", "-", "--pass-pipeline",
                          f"builtin.module(shardx-ring-attention{option})"], input=text)
        for op in ("attention", "attention_dq", "attention_dkv"):
            assert local.count(f"shardx.{op} ") == want, (op, option)


def test_attention_piece_rows_option():
    """shardx.compile's attention_piece_rows: 0 computes the op whole (the
    numbers of both forms match eager), a negative count is refused."""
    step = _step("causal_long")
    q, k, v = _inputs("causal_long", torch.float64)
    want = step(q, k, v)
    for rows in (0, 256):
        got = shardx.compile(step, None, attention_piece_rows=rows)(q, k, v)
        for a, b in zip(got, want):
            torch.testing.assert_close(a.to_torch(), b.detach(), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="attention_piece_rows"):
        shardx.compile(step, None, attention_piece_rows=-1)


def test_program_keeps_no_probabilities():
    """The traced step: one shardx.attention, one attention_dq and one
    attention_dkv, and no [B, H, Sq, Sk] tensor; with composite(False) the
    math backend's ops, which pass the probabilities to the backward."""
    step = _step("causal")
    q, k, v = _inputs("causal", torch.float32)
    mesh = Mesh((2,), ("cp",))
    placements = [[S(2)]] * 3
    text = trace(step, (q, k, v), mesh, placements, None, name="attention")
    for op in ("shardx.attention ", "shardx.attention_dq ", "shardx.attention_dkv "):
        assert text.count(op) == 1, op
    assert "tensor<2x4x8x8xf32>" not in text  # no [B, H, Sq, Sk] tensor
    with composite(False):
        math = trace(step, (q, k, v), mesh, placements, None, name="attention")
    assert "shardx.attention" not in math and "tensor<2x4x8x8xf32>" in math


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["causal", "full", "gqa_causal", "uneven"])
def test_products_sharded_matches_unsharded_and_eager(name, dtype):
    """bf16/f16 attention traced under flash_precision (the GPU backends'
    tracing) is the composite op with ``products = bf16|f16``, which the
    cpu target writes with every product's operands rounded: unsharded,
    heads split on 2 ranks and the sequence split on 2 (rings) against each
    other, and against eager under flash_precision (the custom ops' own
    numbers), the output and the three gradients."""
    step = _step(name)
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in _inputs(name, torch.float32))
    runs = {}
    with flash_precision():
        text = trace(step, (q, k, v), Mesh((1,)), None, None, name="products")
        want = step(q, k, v)
        for key, mesh, placements, kw in (
                ("one", Mesh((1,)), None, {}),
                ("heads", Mesh((2,)), [[S(1)]] * 3, {}),
                ("ring", Mesh((2,), ("cp",)), [[S(2)]] * 3, dict(ring_attention_bytes=0))):
            got = shardx.compile(step, mesh, placements, **kw)(q, k, v)
            runs[key] = [g.to_torch() if hasattr(g, "to_torch") else g for g in got]
    products = "bf16" if dtype == torch.bfloat16 else "f16"
    assert text.count(f"products = {products}") == 3, text
    eps = torch.finfo(dtype).eps
    for key, got in runs.items():
        for g, w, e, what in zip(got, want, runs["one"], ("out", "dq", "dk", "dv")):
            assert g.dtype == dtype and not torch.isnan(g).any()
            scale = w.abs().max().item()
            # One ulp of the dtype per element between summation orders.
            torch.testing.assert_close(g.float(), e.float(), rtol=2 * eps, atol=2 * eps * scale,
                                       msg=lambda m: f"{name} {what} {key} vs unsharded: {m}")
            torch.testing.assert_close(g.float(), w.float(), rtol=2 * eps, atol=2 * eps * scale,
                                       msg=lambda m: f"{name} {what} {key} vs eager: {m}")


@pytest.mark.parametrize("products", [1, 2], ids=["bf16", "f16"])
def test_products_rounding_in_f32(products):
    """The composite op with ``products`` called on f32 tensors that are not
    bf16/f16 values (so every rounding shows): the compiled op (unsharded
    and heads split on 2 ranks) against its eager numbers to f32
    precision, and both away from the op without ``products``."""
    from shardx.importer.attention import PRODUCT_NAMES
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16, requires_grad=True) for _ in range(3))
    pos = torch.arange(8)

    def step(q, k, v, products=products):
        out, _ = torch.ops.shardx.attention(q, k, v, pos, pos, 0.25, products)
        return (out,) + torch.autograd.grad((out * out.cos()).sum(), (q, k, v))
    want = step(q, k, v)
    plain = step(q, k, v, 0)
    text = trace(step, (q, k, v), Mesh((1,)), None, None, name="products_f32")
    assert text.count(f"products = {PRODUCT_NAMES[products]}") == 3
    for mesh, placements in ((Mesh((1,)), None), (Mesh((2,)), [[S(1)]] * 3)):
        got = shardx.compile(step, mesh, placements)(q, k, v)
        for g, w, p, what in zip(got, want, plain, ("out", "dq", "dk", "dv")):
            g = g.to_torch() if hasattr(g, "to_torch") else g
            torch.testing.assert_close(g, w, rtol=2e-5, atol=2e-5,
                                       msg=lambda m: f"{what} {mesh}: {m}")
            assert (g - p).abs().max() > 2e-4, what  # the roundings are there (10x the tolerance)


def test_other_calls_keep_math_ops():
    """A mask tensor, dropout and bf16 inputs are traced as the math
    backend's ops (and still match eager)."""
    q, k, v = _inputs("full", torch.float32)
    mask = torch.rand(8, 8) > 0.3
    mask[:, 0] = True

    def step(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    text = trace(step, (q, k, v), Mesh((1,)), None, None, name="masked")
    assert "shardx.attention" not in text
    got = shardx.compile(step, Mesh((1,)))(q, k, v)
    torch.testing.assert_close(got.to_torch() if hasattr(got, "to_torch") else got,
                               step(q, k, v), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_transformers_sdpa_models(name):
    """Hugging Face GPT-2 and Llama (4 heads over 2 key/value heads) with
    their default attention implementation, "sdpa" (the zoo's use "eager"):
    each layer's causal SDPA is one shardx.attention, and the SGD train step
    on 2 data-parallel ranks matches eager."""
    import transformers as T
    from shardx.train import TrainStep
    from shardx_dev.zoo import CausalLM, lm_loss, _tokens
    torch.manual_seed(0)
    if name == "gpt2":
        cfg = T.GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                           eos_token_id=0, attn_implementation="sdpa")
        model = CausalLM(T.GPT2LMHeadModel(cfg).eval())
    else:
        cfg = T.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                            max_position_embeddings=16, bos_token_id=0, eos_token_id=0,
                            attn_implementation="sdpa")
        model = CausalLM(T.LlamaForCausalLM(cfg).eval())
    inputs, target = _tokens()
    step = TrainStep(model, lm_loss, "sgd", lr=0.1)
    mesh = Mesh((2,), ("dp",))
    ins, outs = step.placements(mesh, {}, [[S(0)]], [S(0)])
    args = step.example_args(inputs, target)
    text = trace(step, args, mesh, ins, outs, name=name)
    assert text.count("shardx.attention ") == cfg.num_hidden_layers
    loss, params, _ = shardx.compile(step, mesh, ins, outs)(*args)
    eager_loss, eager_params, _ = step.run_eager(*args)
    torch.testing.assert_close(loss.to_torch(), eager_loss.detach(), rtol=1e-5, atol=1e-6)
    for got, want in zip(params, eager_params):
        torch.testing.assert_close(got.to_torch(), want.detach(), rtol=1e-4, atol=1e-6)
