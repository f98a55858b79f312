"""The importer: every covered module / loss / optimizer imports, verifies in
shardx-opt, and the unsharded imported program (compiled by shardx-compile
and run on the CPU) matches PyTorch eager on the loss, the gradients' effect
(updated parameters) and the optimizer state."""

import os
import re
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree

import shardx
from shardx.artifact import Artifact, compile_mlir, find_tool

from shardx_dev import models

RTOL, ATOL = 1e-5, 1e-6


def check_program(tmp_path, step, args, rtol=RTOL, atol=ATOL):
    text = shardx.trace(step, args)
    src = tmp_path / "prog.mlir"
    src.write_text(text)
    proc = subprocess.run([find_tool("shardx-opt"), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    so = compile_mlir(text, str(tmp_path / "prog.so"))
    art = Artifact(so)
    name = art.entry_points[0]
    flat = [a.detach().numpy() for a in pytree.tree_leaves(args)]
    outs = art[name](*flat)
    ref = [r.detach().numpy() for r in pytree.tree_leaves(step.run_eager(*args))]
    assert len(outs) == len(ref)
    for i, (o, r) in enumerate(zip(outs, ref)):
        assert o.shape == r.shape, f"output {i}"
        np.testing.assert_allclose(o, r, rtol=rtol, atol=atol, err_msg=f"output {i} of {len(ref)}")
    return text


def seeded(fn):
    torch.manual_seed(0)
    return fn()


MODULES = {
    "linear_relu": lambda: (models.mlp(act=nn.ReLU), F.mse_loss, [torch.randn(4, 8)], torch.randn(4, 8)),
    "gelu": lambda: (models.mlp(act=nn.GELU), F.mse_loss, [torch.randn(4, 8)], torch.randn(4, 8)),
    "tanh": lambda: (models.mlp(act=nn.Tanh), F.mse_loss, [torch.randn(4, 8)], torch.randn(4, 8)),
    "silu": lambda: (models.mlp(act=nn.SiLU), F.mse_loss, [torch.randn(4, 8)], torch.randn(4, 8)),
    "layernorm": lambda: (nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)),
                          F.mse_loss, [torch.randn(5, 8)], torch.randn(5, 4)),
    "softmax_ce": lambda: (nn.Sequential(nn.Linear(8, 6), nn.Softmax(-1), nn.Linear(6, 5)),
                           F.cross_entropy, [torch.randn(4, 8)], torch.randint(0, 5, (4,))),
    "embedding_log_softmax": lambda: (models.EmbeddingLM(11, 8), models.nll,
                                      [torch.randint(0, 11, (2, 3))], torch.randint(0, 11, (2, 3))),
    "attention_ops": lambda: (models.Attention(8, 2), F.mse_loss, [torch.randn(2, 3, 8)], torch.randn(2, 3, 8)),
    "block": lambda: (models.Block(8, 2, 16), F.mse_loss, [torch.randn(2, 3, 8)], torch.randn(2, 3, 8)),
    "multihead_attention": lambda: (models.MHA(8, 2).eval(), F.mse_loss, [torch.randn(2, 3, 8)],
                                    torch.randn(2, 3, 8)),
    "transformer_encoder_layer": lambda: (
        nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval(),
        F.mse_loss, [torch.randn(2, 3, 8)], torch.randn(2, 3, 8)),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_train_step_sgd(tmp_path, name):
    module, loss, inputs, target = seeded(MODULES[name])
    step = shardx.TrainStep(module, loss, "sgd", lr=0.1, momentum=0.9)
    check_program(tmp_path, step, step.example_args(inputs, target))


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("foreach", [False, True], ids=["for_loop", "foreach"])
def test_optimizers(tmp_path, optimizer, foreach):
    module, loss, inputs, target = seeded(MODULES["gelu"])
    hp = dict(lr=0.01, weight_decay=0.01)
    if optimizer == "sgd":
        hp["momentum"] = 0.9
    step = shardx.TrainStep(module, loss, optimizer, foreach=foreach, **hp)
    args = step.example_args(inputs, target)
    text = check_program(tmp_path, step, args)
    # The update is in the program, not folded: Adam's state is an output.
    assert text.count("linalg.matmul") >= 4


def test_two_steps_chain(tmp_path):
    """The program's outputs feed its next call (state flows through)."""
    module, loss, inputs, target = seeded(MODULES["tanh"])
    step = shardx.TrainStep(module, loss, "adam", lr=0.01)
    args = step.example_args(inputs, target)
    so = compile_mlir(shardx.trace(step, args), str(tmp_path / "p.so"))
    fn = next(iter(Artifact(so).functions.values()))
    flat = [a.numpy() for a in pytree.tree_leaves(args)]
    ref_args = args
    for _ in range(2):
        outs = fn(*flat)
        loss_ref, p_ref, st_ref = step.run_eager(*ref_args)
        ref = [t.numpy() for t in pytree.tree_leaves((loss_ref, p_ref, st_ref))]
        for o, r in zip(outs, ref):
            np.testing.assert_allclose(o, r, rtol=RTOL, atol=ATOL)
        ref_args = (p_ref, st_ref, args[2], args[3])
        flat = outs[1:] + [a.numpy() for a in pytree.tree_leaves(args[2:])]


def test_forward_only_function(tmp_path):
    torch.manual_seed(0)
    w = torch.randn(8, 4)

    def f(x, y):
        return torch.relu(x @ w) * y.sum(0, keepdim=True), torch.cat([x, x], 1).amax(1)

    x, y = torch.randn(3, 8), torch.randn(3, 4)
    so = compile_mlir(shardx.trace(f, (x, y)), str(tmp_path / "f.so"))
    outs = Artifact(so)["f"](x.numpy(), y.numpy())
    for o, r in zip(outs, f(x, y)):
        np.testing.assert_allclose(o, r.numpy(), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gemm_transposes_and_fusion(tmp_path, dtype):
    """Transposed GEMM operands become BLAS views and a transposed GEMM
    result is computed transposed (shardx-fuse-tensor-ops,
    shardx-contractions-to-blas); elementwise chains fuse, a value read twice
    is computed once. Checked against PyTorch, not against another ShardX
    run."""
    torch.manual_seed(0)

    def f(x, w, a, b, c):
        h = torch.relu(x @ w.t() + 1.0)            # B transposed, fused epilogue
        g = x.t() @ h                               # A transposed
        r = (x @ w.t()).t() * 2.0                   # result transposed, then scaled
        s = torch.tanh(h) + h.exp()                 # h read twice
        bt = torch.bmm(a, b.transpose(1, 2))        # batched, B transposed
        at = torch.bmm(a.transpose(1, 2), c).transpose(1, 2)  # A and result transposed
        return g, r, s, bt, at, (h @ w).sum()

    args = (torch.randn(6, 5, dtype=dtype), torch.randn(7, 5, dtype=dtype),
            torch.randn(3, 4, 5, dtype=dtype), torch.randn(3, 2, 5, dtype=dtype),
            torch.randn(3, 4, 6, dtype=dtype))
    so = compile_mlir(shardx.trace(f, args), str(tmp_path / "f.so"))
    outs = Artifact(so)["f"](*[a.numpy() for a in args])
    refs = f(*args)
    assert len(outs) == len(refs)
    for i, (o, r) in enumerate(zip(outs, refs)):
        assert o.shape == tuple(r.shape), f"output {i}"
        np.testing.assert_allclose(o, r.numpy(), rtol=1e-5, atol=1e-5, err_msg=f"output {i}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_vectorized_reductions_and_math(tmp_path, dtype):
    """Row reductions (shardx-lower-reductions: accumulators in registers,
    reassociated float sums) and f32 exp/erf/tanh (shardx-approximate-math:
    polynomials) against PyTorch: softmax with a -inf causal mask, layer
    norm, both GELUs, row max/sum/mean on sizes that are no multiple of the
    vector width, column sums, integer sums, and exp/erf/tanh on tails,
    +-inf and NaN."""
    torch.manual_seed(0)

    def f(x, y, z, n):
        mask = torch.full((37, 37), float("-inf"), dtype=x.dtype).triu(1)
        p = torch.softmax(x @ x.transpose(1, 2) + mask, dim=-1)
        ln = torch.nn.functional.layer_norm(y, (53,))
        g = torch.nn.functional.gelu(y) + torch.nn.functional.gelu(y, approximate="tanh")
        rows = y.amax(-1) + y.sum(-1) * y.mean(-1)
        cols = y.sum(0)
        return p, ln, g, rows, cols, torch.exp(z), torch.erf(z), torch.tanh(z), n.sum(-1)

    tails = [float("inf"), float("-inf"), float("nan"), 88.7, 88.8, -87.0, -104.0, 9.0, -9.0, 0.0]
    z = torch.cat([torch.randn(200, dtype=dtype) * 20, torch.tensor(tails, dtype=dtype)])
    args = (torch.randn(3, 37, 19, dtype=dtype), torch.randn(29, 53, dtype=dtype) * 3,
            z, torch.randint(-1000, 1000, (5, 41), dtype=torch.int64))
    so = compile_mlir(shardx.trace(f, args), str(tmp_path / "f.so"))
    outs = Artifact(so)["f"](*[a.numpy() for a in args])
    refs = f(*args)
    assert len(outs) == len(refs)
    for i, (o, r) in enumerate(zip(outs, refs)):
        assert o.shape == tuple(r.shape), f"output {i}"
        if r.dtype == torch.int64:
            np.testing.assert_array_equal(o, r.numpy(), err_msg=f"output {i}")
            continue
        np.testing.assert_allclose(o, r.numpy(), rtol=1e-5, atol=1e-6, err_msg=f"output {i}")
    # Masked probabilities are exactly zero, NaN stays NaN.
    assert (outs[0][:, 0, 1:] == 0).all()
    assert np.isnan(outs[5][-8]) and np.isnan(outs[6][-8]) and np.isnan(outs[7][-8])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_other_dtypes_import_and_verify(tmp_path, dtype):
    module, loss, inputs, target = seeded(MODULES["layernorm"])
    module = module.to(dtype)
    step = shardx.TrainStep(module, loss, "sgd", lr=0.1)
    args = step.example_args([inputs[0].to(dtype)], target.to(dtype))
    text = shardx.trace(step, args)
    elt = {torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64"}[dtype]
    assert f"x{elt}>" in text
    src = tmp_path / "p.mlir"
    src.write_text(text)
    proc = subprocess.run([find_tool("shardx-opt"), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    if dtype == torch.float64:
        check_program(tmp_path, step, args, rtol=1e-10, atol=1e-12)


def test_optimizer_state_is_named(tmp_path):
    """TrainStep marks each optimizer state argument with its PyTorch name
    (torch.state), which shardx-run uses to draw meaningful random inputs;
    the program still verifies and the marks survive shardx-opt."""
    module, loss, inputs, target = seeded(MODULES["tanh"])
    step = shardx.TrainStep(module, loss, "adam", lr=0.01)
    text = shardx.trace(step, step.example_args(inputs, target))
    n = len(step.param_names)
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert text.count(f'{{torch.state = "{key}"}}') == n
    assert text.count("torch.state") == 3 * n
    src = tmp_path / "p.mlir"
    src.write_text(text)
    proc = subprocess.run([find_tool("shardx-opt"), str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("torch.state") == 3 * n


def test_arg_attrs():
    x = torch.randn(3)
    text = shardx.trace(lambda a, b: a * b, (x, x), arg_attrs=[None, {"torch.note": 'a "b"'}])
    assert '%arg1: tensor<3xf32> {torch.note = "a \\"b\\""}' in text
    with pytest.raises(ValueError, match="not in the shardx dialect"):
        shardx.trace(lambda a: a, (x,), arg_attrs=[{"shardx.role": "x"}])
    with pytest.raises(ValueError, match="dialect-prefixed"):
        shardx.trace(lambda a: a, (x,), arg_attrs=[{"role": "x"}])
    with pytest.raises(ValueError, match="2 argument attribute entries for 1"):
        shardx.trace(lambda a: a, (x,), arg_attrs=[None, None])


def test_source_locations_and_phases(build_dir, tmp_path):
    """Every traced op carries the user's source line and its train-step phase
    in its location (``loc(fused<"backward">["file":line:0])``); a backward op
    has the line of the forward op it differentiates; the locations survive
    shardx-opt, whose diagnostics then name the Python line."""
    m = models.Block(8, 2, 16)
    step = shardx.TrainStep(m, F.mse_loss, "adam", lr=0.1)
    text = shardx.trace(step, step.example_args([torch.randn(2, 3, 8)], torch.randn(2, 3, 8)))
    aliases = dict(re.findall(r"^(#loc\d+) = loc\((.*)\)$", text, re.M))
    # Each op's last line (a region op's closing one) ends in its location.
    ends = [l for l in re.findall(r"^  (?:%\w+ = |\} -> ).*", text, re.M) if not l.endswith("{")]
    assert ends and all(re.search(r" loc\(#loc\d+\)$", l) for l in ends), \
        [l for l in ends if not l.endswith(")")][:3]
    by_phase = {}
    for alias, loc in aliases.items():
        phase, pos = re.fullmatch(r'fused<"(\w+)">\[(.*)\]', loc).groups()
        by_phase.setdefault(phase, set()).add(pos)
    assert set(by_phase) == {"forward", "backward", "optimizer"}
    block_lines = {p for p in by_phase["forward"] if p.startswith('"shardx_dev/models.py"')}
    assert len(block_lines) >= 5  # q/k/v, attention, out, the MLP, ...
    # Backward ops come from the same model lines as the forward ones.
    assert block_lines <= by_phase["backward"]
    src = os.path.join(os.path.dirname(models.__file__), "models.py")
    code = open(src).read().splitlines()
    forward_lines = {i + 1 for i, l in enumerate(code) if re.match(r"\s+(return |\w+(, \w+)* = )", l)}
    for pos in block_lines:
        line = int(re.match(r'"shardx_dev/models.py":(\d+):0', pos).group(1))
        assert line in forward_lines, code[line - 1]  # a statement that computes
    # shardx-opt keeps them, and its remarks point at the Python lines (the
    # traced Megatron block example).
    prog = os.path.join(os.path.dirname(os.path.dirname(src)), "..", "examples",
                        "transformer_block_tp.mlir")
    proc = subprocess.run([find_tool("shardx-opt"), prog, "--inline", "--shardx-propagate",
                           "--shardx-insert-reshards", "--shardx-print-plan", "-o", os.devnull],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^shardx_dev/models\.py:\d+:0: remark: plan", proc.stderr, re.M), proc.stderr[:2000]


class _SPBlock(nn.Module):
    """A norm whose output is constrained to sequence-split rows."""

    def __init__(self):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(8), nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x):
        h = shardx.constrain(self.ln(x), [shardx.Shard(1)])
        return x + self.fc2(F.gelu(self.fc1(h)))


def test_constrain_is_an_annotation(build_dir, tmp_path):
    """``shardx.constrain`` is the identity eagerly (gradient included),
    ``shardx.annotate`` in a trace on a mesh (nothing without one), and a
    program it constrains checks sharded against unsharded; bad placements
    name the source line."""
    torch.manual_seed(0)
    x = torch.randn(2, 4, 8, requires_grad=True)
    y = shardx.constrain(x, [shardx.Shard(1)])
    assert torch.equal(y, x)
    y.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))

    step = shardx.TrainStep(_SPBlock(), F.mse_loss, "sgd", lr=0.1)
    args = step.example_args([torch.randn(2, 4, 8)], torch.randn(2, 4, 8))
    assert "shardx.annotate" not in shardx.trace(step, args)
    mesh = shardx.Mesh((2,), ("tp",))
    S, R = shardx.Shard, shardx.Replicate
    ins, outs = step.placements(mesh, {"fc1.weight": [S(0)], "fc1.bias": [S(0)], "fc2.weight": [S(1)]},
                                [[S(1)]], [S(1)])
    text = shardx.trace(step, args, mesh, ins, outs)
    assert re.search(r"shardx\.annotate %\w+ : tensor<2x4x8xf32> to #shardx\.layout<@mesh, \[S\(1\)\]>", text)
    prog = tmp_path / "sp.mlir"
    prog.write_text(text)
    proc = subprocess.run([find_tool("shardx-run"), str(prog), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0 and "check passed" in proc.stdout, proc.stdout + proc.stderr
    # Sequence parallelism: the pending sums are reduce-scattered onto rows.
    plan = subprocess.run([find_tool("shardx-opt"), str(prog), "--inline", "--shardx-propagate",
                           "--shardx-insert-reshards", "--shardx-print-plan", "-o", os.devnull],
                          capture_output=True, text=True, check=True).stderr
    assert re.search(r"plan \[P\(sum\)\] -> \[S\(0\)\]", plan), plan

    class Bad(nn.Module):
        def forward(self, x):
            return shardx.constrain(x, [S(3)])
    bad = shardx.TrainStep(nn.Sequential(nn.Linear(8, 8), Bad()), F.mse_loss, "sgd")
    bargs = bad.example_args([torch.randn(2, 8)], torch.randn(2, 8))
    bins, bouts = bad.placements(mesh, {}, [[R()]], [R()])
    with pytest.raises(shardx.PlacementError, match=r"shardx.constrain \(from .*test_importer.py.*out of range"):
        shardx.trace(bad, bargs, mesh, bins, bouts)


def _unused_intermediate(x, y):
    unused = (torch.exp(x) * 3.0).sum()  # noqa: F841  (dead: exp, multiply, sum)
    z = x.view(16).view(4, 4)  # the importer reuses x: the flattening is dead
    return z + y


def test_dead_ops_are_removed(build_dir, tmp_path):
    """A traced function with an unused intermediate: the aten ops computing
    it (exp, the multiply, the sum with its fill) and the reshape the
    emitter leaves unused are gone, removed by MLIR's remove-dead-values
    (shardx/importer/dce.py); what is left computes the function."""
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    text = shardx.trace(_unused_intermediate, (x, y))
    for dead in ("math.exp", "arith.mulf", "linalg.fill", "tensor.collapse_shape"):
        assert dead not in text, dead
    assert text.count("linalg.generic") == 1 and "arith.addf" in text
    art = Artifact(compile_mlir(text, str(tmp_path / "f.so")))
    (out,) = art["_unused_intermediate"](x.numpy(), y.numpy())
    np.testing.assert_allclose(out, (x + y).numpy(), rtol=0, atol=0)


def test_dead_ops_without_shardx_opt(monkeypatch, caplog):
    """Without shardx-opt the importer keeps every op (the compiler's
    canonicalize drops them) and says so once; a shardx-opt that fails is a
    TraceError with its diagnostic, not a crash."""
    import shardx.importer.dce as dce
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    monkeypatch.setattr(dce, "shardx_opt", lambda: None)
    monkeypatch.setattr(dce, "_warned", False)
    with caplog.at_level("WARNING", logger="shardx.importer"):
        text = shardx.trace(_unused_intermediate, (x, y))
    assert "math.exp" in text and "tensor.collapse_shape" in text
    assert "shardx-opt not found" in caplog.text
    monkeypatch.undo()
    monkeypatch.setattr(dce, "PIPELINE", "--no-such-pass")
    with pytest.raises(shardx.TraceError, match="shardx-opt rejected the imported program"):
        shardx.trace(_unused_intermediate, (x, y))


def _huge_step(x, w):
    w = w.detach().requires_grad_(True)
    loss = torch.tanh(x @ w).square().mean()
    (g,) = torch.autograd.grad(loss, w)
    return loss.detach(), w.detach() - 0.1 * g


def test_trace_is_shape_only(monkeypatch):
    """Tracing runs no kernel: a train step over two 2^20 x 2^20 inputs
    (4 TiB each in f32, expanded from one element) traces on fake tensors,
    where any real matmul, tanh or gradient would have to allocate 4 TiB.
    The real-tensor fallback is switched off, so it cannot hide a refusal."""
    import shardx.importer.tracing as tracing
    passes = tracing._trace_passes

    def fake_only(fn, flat_args, treedef, fake, **kwargs):
        assert fake, "traced on real tensors"
        return passes(fn, flat_args, treedef, fake, **kwargs)
    monkeypatch.setattr(tracing, "_trace_passes", fake_only)
    n = 1 << 20
    x = torch.full((), 0.5).expand(n, n)
    w = torch.full((), 0.25).expand(n, n)
    text = shardx.trace(_huge_step, (x, w))
    assert tracing.last_mode == "fake"
    assert f"%arg0: tensor<{n}x{n}xf32>" in text and f"tensor<{n}x{n}xf32>" in text.split("->")[1]
    assert text.count("linalg.matmul") == 2 and "math.tanh" in text


def test_trace_keeps_constants_and_inputs(tmp_path):
    """On fake tensors the program still holds the real values of the
    tensors the function closes over or creates (dense constants), and the
    function runs on fake copies of the inputs: an in-place update changes
    the program's result, not the caller's tensor."""
    import shardx.importer.tracing as tracing
    scale = torch.tensor([[0.5, -1.25], [2.0, 3.0]])

    def closes_over(x):
        x.mul_(scale)
        return x + torch.tensor([1.5, 2.5])
    x = torch.ones(2, 2)
    text = shardx.trace(closes_over, (x,))
    assert tracing.last_mode == "fake"
    assert torch.equal(x, torch.ones(2, 2))
    for t in (scale, torch.tensor([1.5, 2.5])):
        assert f'dense<"0x{t.numpy().tobytes().hex().upper()}">' in text
    art = Artifact(compile_mlir(text, str(tmp_path / "consts.so")))
    (out,) = art["closes_over"](x.numpy())
    np.testing.assert_array_equal(out, closes_over(x.clone()).numpy())


def _scaled_by_max(x):
    return x * float(x.numpy().max())  # reads memory: fake tensors have none


def _scaled_by_sum(x):
    return x * x.sum().item()


def test_trace_falls_back_to_real_tensors(tmp_path, caplog):
    """A function that fake tensors cannot run is traced on the real ones,
    as before, and says why (the exception and the user's line); one that
    reads a value into Python is a TraceError naming the line (real tensors
    refuse it too)."""
    import shardx.importer.tracing as tracing
    x = torch.tensor([1.0, 2.5, -3.0])
    with caplog.at_level("WARNING", logger="shardx.importer"):
        text = shardx.trace(_scaled_by_max, (x,))
    assert tracing.last_mode == "real"
    assert re.search(r"fake tensors refused _scaled_by_max \(RuntimeError: .*numpy.* "
                     r"\(from .*test_importer.py:\d+\)\); tracing on the real tensors", caplog.text)
    assert "arith.constant 0x40200000 : f32" in text  # 2.5, the example's maximum
    art = Artifact(compile_mlir(text, str(tmp_path / "max.so")))
    (out,) = art["_scaled_by_max"](x.numpy())
    np.testing.assert_array_equal(out, (x * 2.5).numpy())
    with pytest.raises(shardx.TraceError, match=r"_scaled_by_sum reads a tensor's value into "
                       r"Python \(aten._local_scalar_dense.*\(from .*test_importer.py:\d+\)"):
        shardx.trace(_scaled_by_sum, (x,))
