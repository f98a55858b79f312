"""Regional tracing (python/shardx/importer/regions.py): a repeated block is
traced once and called per layer; the compiled step computes bit for bit
what the step traced without regions computes, and matches eager."""

import os
import re
import sys
import types

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import shardx
from shardx import Mesh, Replicate, Shard
from shardx.importer import regions, regions_enabled, trace
from shardx.train import TrainStep

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import compile_latency_bench as gpt  # noqa: E402

R, S = Replicate(), Shard


def calls(text, name=""):
    """(forward calls, backward calls, region functions) of a traced module,
    of the regions whose symbol has ``name``."""
    return (len(re.findall(rf"func\.call @shardx_region_\w*{name}\w*_fwd\(", text)),
            len(re.findall(rf"func\.call @shardx_region_\w*{name}\w*_bwd\(", text)),
            len(re.findall(rf"func\.func private @shardx_region_\w*{name}", text)))


def leaves(out):
    import torch.utils._pytree as pytree
    return [t.to_torch() if hasattr(t, "to_torch") else t for t in pytree.tree_leaves(out)]


def assert_bit_identical(a, b):
    assert len(a) == len(b)
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, i
        assert torch.equal(x, y), f"output {i} differs: max {float((x - y).abs().max())}"


# -- the GPT-style step of bench/compile_latency_bench.py ---------------------

def _gpt(layers):
    names, args = gpt.example(layers)
    mesh = Mesh((2, 2), ("dp", "tp"))
    pl = gpt.placements(names, shardx)
    ins = pl + pl + pl + [[S(0), R], [S(0), R]]
    outs = [[R, R]] + pl + pl + pl
    return gpt.make_step(names), mesh, ins, outs, args


def test_deep_gpt_step_compiles_for_cuda_with_one_set_of_kernels(tmp_path):
    # Tests that the cuda target compiles the step 16 layers deep (its
    # gradient norm, 12 sums a layer fused into one kernel, passed more
    # parameter bytes than a PTX 8.0 kernel may take from 15 layers on),
    # and that its kernels do not grow with depth: each bucket slot's copy
    # is one kernel, and the layers are calls (docs/Compiler.md). Measured
    # from 3 layers: the step 2 layers deep has fewer distinct kernels than
    # any deeper one (118; 123, 123, 124, 125 at 3, 8, 16, 32 layers).
    import subprocess
    from shardx.artifact import find_tool
    kernels = {}
    for layers in (3, 16):
        step, mesh, ins, outs, args = _gpt(layers)
        src, ptx = tmp_path / f"gpt{layers}.mlir", tmp_path / f"gpt{layers}.ptx"
        src.write_text(trace(step, args, mesh, ins, outs))
        done = subprocess.run([find_tool("shardx-compile"), str(src), "--target=cuda",
                               "--emit=ptx", "-o", str(ptx)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        kernels[layers] = ptx.read_text().count(".entry ")
    assert 0 < kernels[3] <= kernels[16] <= kernels[3] + 4, kernels


def test_gpt_step_traces_one_region_and_calls_it_per_layer():
    step, mesh, ins, outs, args = _gpt(3)
    text = trace(step, args, mesh, ins, outs)
    assert calls(text, "bench_block") == (3, 3, 2)
    blocks = [r for r in regions.REGIONS.values() if "bench_block" in r.name]
    assert len(blocks) == 1
    assert blocks[0].backward is not None and blocks[0].num_outputs == 1
    # The AdamW update (no grad): forward only, one region per parameter
    # shape, one call per parameter.
    n_params = len(args[0])
    assert calls(text, "bench_adamw") == (n_params, 0, len(regions.REGIONS) - 1)
    assert all(r.backward is None for r in regions.REGIONS.values() if r is not blocks[0])
    inline = trace(step, args, mesh, ins, outs, regions=False)
    assert calls(inline) == (0, 0, 0)
    # The inline program is today's: one function, no calls.
    assert inline.count("func.func") == 1


def test_gpt_step_is_bit_identical_to_the_inline_trace_and_matches_eager():
    step, mesh, ins, outs, args = _gpt(3)
    results = {}
    for on in (True, False):
        with regions_enabled(on):
            f = shardx.compile(step, mesh, ins, outs, name=f"gpt_regions_{on}")
            results[on] = leaves(f(*args))
            assert bool(regions.REGIONS) == on  # the JIT's trace took them
    assert_bit_identical(results[True], results[False])
    ref = leaves(step(*args))
    torch.testing.assert_close(results[True][0], ref[0].detach(), rtol=1e-5, atol=0)
    # AdamW's first step is about lr * sign(g): where a gradient is near
    # zero, its last bits move the update by up to lr (1e-3).
    for x, y in zip(results[True], ref):
        torch.testing.assert_close(x, y.detach(), rtol=1e-4, atol=1e-4)


# -- a Llama-style model: nn.ModuleList found automatically ---------------------

class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * cos + torch.cat((-x2, x1), -1) * sin


class LlamaLayer(nn.Module):
    def __init__(self, d, heads, hidden, seq, tag=0):
        super().__init__()
        self.heads, self.tag = heads, tag
        self.attn_norm = RMSNorm(d)
        self.q, self.k = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.v, self.o = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
        self.mlp_norm = RMSNorm(d)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)
        hd = d // heads
        freq = 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd))
        ang = torch.outer(torch.arange(seq).float(), freq)
        self.register_buffer("cos", torch.cat((ang, ang), -1).cos(), persistent=False)
        self.register_buffer("sin", torch.cat((ang, ang), -1).sin(), persistent=False)

    def forward(self, x):
        b, s, d = x.shape
        h = self.attn_norm(x)

        def split(t):
            return t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
        q = rotate(split(self.q(h)), self.cos, self.sin)
        k = rotate(split(self.k(h)), self.cos, self.sin)
        y = F.scaled_dot_product_attention(q, k, split(self.v(h)), is_causal=True)
        x = x + self.o(y.transpose(1, 2).reshape(b, s, d))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, layers=3, d=32, heads=4, hidden=64, seq=8, vocab=64, tags=None):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        tags = tags or [0] * layers
        self.layers = nn.ModuleList(LlamaLayer(d, heads, hidden, seq, t) for t in tags)
        self.norm = RMSNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


def lm_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def _llama(tags=None):
    torch.manual_seed(0)
    model = Llama(tags=tags)
    step = TrainStep(model, lm_loss, "sgd", lr=0.1, momentum=0.9)
    mesh = Mesh((2, 2), ("dp", "tp"))
    plan = {}
    for n, _ in model.named_parameters():
        if n.endswith((".q.weight", ".k.weight", ".v.weight", ".gate.weight", ".up.weight")):
            plan[n] = [R, S(0)]
        elif n.endswith((".o.weight", ".down.weight")):
            plan[n] = [R, S(1)]
    tokens = torch.randint(0, 64, (4, 8))
    target = torch.randint(0, 64, (4, 8))
    ins, outs = step.placements(mesh, plan, [[S(0), R]], [S(0), R])
    return step, mesh, ins, outs, step.example_args([tokens], target)


def test_llama_module_list_is_found_and_bit_identical_to_inline():
    step, mesh, ins, outs, args = _llama()
    text = trace(step, args, mesh, ins, outs)
    assert calls(text)[:2] == (3, 3)
    results = {}
    for on in (True, False):
        with regions_enabled(on):
            f = shardx.compile(step, mesh, ins, outs, name=f"llama_regions_{on}")
            results[on] = leaves(f(*args))
            assert bool(regions.REGIONS) == on  # the JIT's trace found the ModuleList
    assert_bit_identical(results[True], results[False])
    ref = leaves(step.run_eager(*args))
    for x, y in zip(results[True], ref):
        torch.testing.assert_close(x, y.detach(), rtol=1e-4, atol=1e-5)
    # The backward ops of a region keep their phase: the step's report and
    # recomputation read it.
    bwd = text[text.index("_bwd("):]
    assert 'fused<"backward">' in text and re.search(r"loc\(#loc\d+\)", bwd)


def test_children_that_differ_are_traced_inline():
    # A per-layer plain attribute (like Hugging Face's layer_idx) makes each
    # child's trace its own: no region.
    step, mesh, ins, outs, args = _llama(tags=[0, 1, 2])
    assert calls(trace(step, args, mesh, ins, outs)) == (0, 0, 0)
    # Two of three alike are still not one ModuleList of identical children.
    step, mesh, ins, outs, args = _llama(tags=[0, 0, 1])
    assert calls(trace(step, args, mesh, ins, outs)) == (0, 0, 0)


def test_opt_outs(monkeypatch):
    step, mesh, ins, outs, args = _llama()
    assert calls(trace(step, args, mesh, ins, outs, regions=False)) == (0, 0, 0)
    with regions_enabled(False):
        assert calls(trace(step, args, mesh, ins, outs)) == (0, 0, 0)
    monkeypatch.setenv("SHARDX_REGIONS", "0")
    assert calls(trace(step, args, mesh, ins, outs)) == (0, 0, 0)
    # An explicit argument wins over the variable.
    assert calls(trace(step, args, mesh, ins, outs, regions=True))[:2] == (3, 3)


def test_forward_only_region_and_fallbacks():
    model = Llama()
    model.eval()
    tokens = torch.randint(0, 64, (2, 8))

    def infer(tokens):
        with torch.no_grad():
            return model(tokens)
    text = trace(infer, (tokens,))
    assert calls(text) == (3, 0, 1)
    f = shardx.compile(infer, Mesh((2,), ("dp",)), [[S(0)]], [[S(0)]], name="llama_infer")
    out = leaves(f(tokens))[0]
    torch.testing.assert_close(out, infer(tokens), rtol=1e-5, atol=1e-6)

    # A marked function with a non-tensor argument that is not a plain value,
    # or that returns a non-tensor, is called inline.
    @torch.compiler.nested_compile_region
    def scale(x, how):
        return x * how.k

    @torch.compiler.nested_compile_region
    def pair(x):
        return x + 1, "tag"

    def g(x):
        y, _ = pair(scale(x, types.SimpleNamespace(k=2.0)))
        return pair(y)[0] * 3
    x = torch.randn(4)
    text = trace(g, (x,))
    assert calls(text) == (0, 0, 0)


def test_nested_compile_region_with_plain_arguments():
    @torch.compiler.nested_compile_region
    def layer(x, w, act):
        return getattr(torch, act)(x @ w)

    def step(x, ws):
        ws = [w.detach().requires_grad_(True) for w in ws]
        y = x
        for w in ws:
            y = layer(y, w, "tanh")
        y = layer(y, ws[0], "sigmoid")  # another plain argument: another region
        loss = y.sum()
        return loss, torch.autograd.grad(loss, ws)
    torch.manual_seed(0)
    args = (torch.randn(4, 8), [torch.randn(8, 8) * 0.3 for _ in range(3)])
    text = trace(step, args)
    # The first call's x does not require grad: its own signature.
    assert calls(text) == (4, 4, 6)
    assert len(regions.REGIONS) == 3
    f = shardx.compile(step, Mesh((2,), ("dp",)), name="tanh_chain")
    got = leaves(f(*args))
    ref = leaves(step(*args))
    with regions_enabled(False):
        inline = leaves(shardx.compile(step, Mesh((2,), ("dp",)), name="tanh_chain_inline")(*args))
    assert_bit_identical(got, inline)
    for x, y in zip(got, ref):
        torch.testing.assert_close(x, y.detach(), rtol=1e-5, atol=1e-6)


# -- what a region call would lose: state updates, hooks, per-child differences --

class LinBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.l, self.bn = nn.Linear(8, 8), nn.BatchNorm1d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.l(x)))


class Lin(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x):
        y = torch.relu(self.l(x))
        return y * 2 if self.training else y


class Stack(nn.Module):
    def __init__(self, block, n=3):
        super().__init__()
        self.blocks = nn.ModuleList(block() for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def test_batch_norm_running_statistics_are_updated_per_layer():
    # A child that updates buffers in place (BatchNorm in training mode) is
    # traced inline: a region call would drop the updates.
    torch.manual_seed(0)
    step = TrainStep(Stack(LinBN), F.mse_loss, "sgd", lr=0.1)
    mesh = Mesh((2,), ("x",))
    ins, outs = step.placements(mesh, {}, [[R]], [R])
    args = step.example_args([torch.randn(16, 8)], torch.randn(16, 8))
    assert calls(trace(step, args, mesh, ins, outs)) == (0, 0, 0)
    got = leaves(shardx.compile(step, mesh, ins, outs, name="bn_regions")(*args))
    ref = leaves(step.run_eager(*args))
    assert len(got) == len(ref)
    for x, y in zip(got, ref):
        torch.testing.assert_close(x, y.detach(), rtol=1e-5, atol=1e-6)
    # In eval mode nothing is updated: one region, called per layer.
    model = Stack(LinBN).eval()
    x = torch.randn(4, 8)

    def infer(x):
        with torch.no_grad():
            return model(x)
    assert calls(trace(infer, (x,))) == (3, 0, 1)
    out = leaves(shardx.compile(infer, mesh, [[R]], [[R]], name="bn_eval")(x))[0]
    torch.testing.assert_close(out, infer(x), rtol=1e-5, atol=1e-6)


def test_marked_function_that_updates_an_argument_is_called_inline():
    @torch.compiler.nested_compile_region
    def bump(x, acc):
        acc.add_(x)
        return x * 2

    def g(x):
        acc = torch.zeros_like(x)
        return bump(bump(x, acc), acc), acc
    x = torch.randn(4, 8)
    assert calls(trace(g, (x,))) == (0, 0, 0)
    got = leaves(shardx.compile(g, Mesh((2,), ("x",)), name="bump")(x))
    for a, b in zip(got, g(x)):
        torch.testing.assert_close(a, b)

    # An in-place op on an input that requires grad: a leaf in the region's
    # own trace (where autograd refuses it), not in the step's.
    @torch.compiler.nested_compile_region
    def act(x):
        return x.relu_() * 2

    def step(x, w):
        w = w.detach().requires_grad_(True)
        return torch.autograd.grad(act(act(x @ w) @ w).sum(), [w])
    w = torch.randn(8, 8)
    assert calls(trace(step, (x, w))) == (0, 0, 0)
    got = leaves(shardx.compile(step, Mesh((2,), ("x",)), name="relu_")(x, w))
    torch.testing.assert_close(got[0], step(x, w)[0], rtol=1e-5, atol=1e-5)


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(8, 8)
        self.register_buffer("seen", torch.zeros(()))

    def forward(self, x):
        self.seen = self.seen + 1  # a new tensor, not an in-place update
        return self.l(x)


def test_child_that_assigns_a_buffer_is_traced_inline():
    model = Stack(Counting)
    x = torch.randn(4, 8)
    with torch.no_grad():
        assert calls(trace(lambda x: model(x), (x,))) == (0, 0, 0)


def _global_hook(model):
    target = model.blocks[2].l
    return torch.nn.modules.module.register_module_forward_hook(
        lambda mod, i, o: o * 3.0 if mod is target else None)


@pytest.mark.parametrize("how", [
    "forward_hook", "forward_pre_hook", "global_hook", "instance_forward", "one_in_eval",
])
def test_children_that_differ_in_hooks_forward_or_mode_are_traced_inline(how):
    torch.manual_seed(0)
    model = Stack(Lin)
    handle = None
    if how == "forward_hook":
        handle = model.blocks[2].l.register_forward_hook(lambda mod, i, o: o * 100.0)
    elif how == "forward_pre_hook":
        handle = model.blocks[1].l.register_forward_pre_hook(lambda mod, i: (i[0] * -1.0,))
    elif how == "global_hook":
        handle = _global_hook(model)
    elif how == "instance_forward":
        lin = model.blocks[1].l
        lin.forward = lambda x: nn.Linear.forward(lin, x) * 0.5
    else:
        model.blocks[1].eval()
    try:
        x = torch.randn(4, 8)

        def f(x):
            return model(x)
        assert calls(trace(f, (x,))) == (0, 0, 0)
        out = leaves(shardx.compile(f, Mesh((2,), ("x",)), [[R]], [[R]], name=f"lin_{how}")(x))[0]
        torch.testing.assert_close(out, f(x).detach(), rtol=1e-5, atol=1e-5)
    finally:
        if handle is not None:
            handle.remove()
    # Without the difference, the same stack takes one region.
    plain = Stack(Lin)
    assert calls(trace(lambda x: plain(x), (torch.randn(4, 8),)))[0] == 3


def test_backward_hook_makes_the_child_inline():
    model = Stack(Lin)
    assert regions._module_fingerprint(model.blocks[1]) is not None
    model.blocks[1].register_full_backward_hook(lambda mod, gi, go: (gi[0] * 0.5,))
    assert regions._module_fingerprint(model.blocks[1]) is None
    assert regions._module_fingerprint(model.blocks[0]) is not None


def test_frozen_layer_takes_its_own_region():
    # A child whose parameters do not require grad has its own signature:
    # blocks[0] (nothing requires grad, forward only), blocks[1] (its
    # parameters do) and blocks[2] (its input too) are three regions.
    torch.manual_seed(0)
    model = Stack(Lin)
    model.blocks[0].requires_grad_(False)
    ps = [p for p in model.parameters() if p.requires_grad]

    def f(x):
        return torch.autograd.grad(model(x).sum(), ps)
    x = torch.randn(4, 8)
    text = trace(f, (x,))
    assert calls(text) == (3, 2, 5)
    got = leaves(shardx.compile(f, Mesh((2,), ("x",)), name="frozen")(x))
    for a, b in zip(got, f(x)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_autocast_is_part_of_a_region_signature():
    # The same marked function under autocast computes in bf16: it must not
    # reuse the region traced outside autocast (nor the other way round).
    @torch.compiler.nested_compile_region
    def mm(x, w):
        return x @ w

    def f(x, w):
        a = mm(x, w)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            b = mm(x, w)
        return a, b
    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    text = trace(f, (x, w))
    assert calls(text) == (2, 0, 2)
    got = leaves(shardx.compile(f, Mesh((2,), ("dp",)), name="autocast_regions")(x, w))
    ref = f(x, w)
    assert got[1].dtype == torch.bfloat16
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-2, atol=1e-2)


# -- code generation keeps the calls (shardx-outline-calls) ---------------------

def _compile_text(text, tmp_path, *flags):
    """shardx-compile --emit=mlir of a traced program (the LLVM dialect)."""
    import subprocess
    from shardx.artifact import find_tool
    src = tmp_path / "step.mlir"
    src.write_text(text)
    out = tmp_path / "step.ll.mlir"
    subprocess.run([find_tool("shardx-compile"), str(src), "--emit=mlir", "-o", str(out),
                    *flags], check=True)
    return out.read_text()


def _outlined(llvm_text):
    """{function: calls} of the layer functions shardx-outline-calls made."""
    funcs = re.findall(r"llvm\.func @(shardx_call_[0-9a-f]+)\(", llvm_text)
    return {f: len(re.findall(rf"llvm\.call @{f}\(", llvm_text)) for f in funcs}


def test_gpt_step_layers_stay_calls_through_code_generation(tmp_path):
    # After the SPMD pipeline (which inlines the region calls), each layer's
    # forward, backward and each parameter shape's update is one function
    # again, called per layer: the first layer differs (it computes the
    # causal mask the later layers reuse) and stays inline. The compiled
    # step with those calls is bit-identical to the inline trace's
    # (test_gpt_step_is_bit_identical_to_the_inline_trace_and_matches_eager
    # runs it through shardx.compile, which takes this path).
    step, mesh, ins, outs, args = _gpt(4)
    outlined = _outlined(_compile_text(trace(step, args, mesh, ins, outs), tmp_path))
    assert len(outlined) >= 3 and all(n >= 2 for n in outlined.values())
    # Layers 2..4 share the forward and the backward function.
    assert max(outlined.values()) >= 3
    # The inline trace has no regions, so no marks: nothing is outlined.
    inline = trace(step, args, mesh, ins, outs, regions=False)
    assert _outlined(_compile_text(inline, tmp_path)) == {}


def test_region_called_with_different_layouts_is_compiled_per_layout(tmp_path):
    # One marked function called on a batch-sharded input (three times) and
    # on a replicated one: the SPMD pipeline shards each inlined call by its
    # own layouts, so the local bodies differ. The second and third
    # batch-sharded calls share a function; the first (which makes the
    # zero-filled tensor CSE shares with the later calls) and the replicated
    # call stay inline. Bit-identical to the inline trace, and matches eager.
    @torch.compiler.nested_compile_region
    def mlp(x, w1, w2):
        h = torch.tanh(x @ w1) * 0.5 + 1.0
        y = (h * h - h) @ w2
        return torch.relu(y + x) * 2.0 - x * 0.25

    def f(a, b, w1, w2, w3, w4):
        return mlp(mlp(mlp(a, w1, w2), w3, w4), w1, w2), mlp(b, w1, w2)

    torch.manual_seed(0)
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    ws = [torch.randn(16, 32) * 0.2, torch.randn(32, 16) * 0.2,
          torch.randn(16, 32) * 0.2, torch.randn(32, 16) * 0.2]
    mesh = Mesh((2, 2), ("dp", "tp"))
    col, row = [R, S(1)], [R, S(0)]
    ins = [[S(0), R], [R, R], col, row, col, row]
    outs = [[S(0), R], [R, R]]
    text = trace(f, (a, b, *ws), mesh, ins, outs)
    assert calls(text) == (4, 0, 1)
    outlined = _outlined(_compile_text(text, tmp_path))
    assert sorted(outlined.values()) == [2]
    results = {}
    for on in (True, False):
        with regions_enabled(on):
            g = shardx.compile(f, mesh, ins, outs, name=f"mlp_layouts_{on}")
            results[on] = leaves(g(a, b, *ws))
    assert_bit_identical(results[True], results[False])
    for x, y in zip(results[True], f(a, b, *ws)):
        torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)
