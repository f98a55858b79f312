"""The model zoo: models people train, built from small configs with random
weights (nothing is downloaded), traced as whole AdamW train steps, compiled,
run unsharded and sharded on CPU threads and checked against eager PyTorch.

``python3 -m shardx_dev.zoo [names...]`` prints the zoo table (docs/Importer.md);
``python/tests/test_zoo.py`` asserts it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree

from shardx import dtypes
from shardx.placements import Mesh, Replicate, Shard, StridedShard

VOCAB = 64
LR = 1e-2
# f32, two AdamW steps. Adam's first step moves each element by about
# lr * sign(grad) (m / sqrt(v) = g / |g|), so an element whose gradient is
# near rounding level moves by a fraction of lr that rounding decides:
# parameters are compared with atol = 5% of lr (a wrong gradient sign or a
# wrong step is an error of about lr or more), optimizer state with atol =
# 1e-4 of its largest magnitude after step 1 and 1e-2 after step 2 (whose
# gradients are taken at parameters that may differ by those 5% of lr),
# everything with rtol 1e-3, the loss 1e-4.
RTOL, PARAM_ATOL, STATE_ATOL = 1e-3, 5e-2 * LR, {1: 1e-4, 2: 1e-2}
LOSS_RTOL = 1e-4
# f64 (``--dtype f64``): the same near-zero gradients are resolved, so every
# output is checked tightly (the decomposed ResNet-18 graph run in PyTorch
# f64 differs from eager by at most 3e-9 after 2 steps).
TOL64 = dict(rtol=1e-7, param_atol=1e-5 * LR, state_atol={1: 1e-7, 2: 1e-7}, loss_rtol=1e-10)
# Parameters whose gradient is zero in exact arithmetic (softmax is invariant
# to a shift of all keys, so the key bias gets none): Adam turns the rounding
# noise into steps of up to lr either way, so they are checked to 2 lr a step.
ILL_CONDITIONED = {"gpt2": ["attn.c_attn.bias"], "gpt2_dropout": ["attn.c_attn.bias"],
                   "bert": ["attention.self.key.bias"],
                   "vit": ["self_attention.in_proj_bias"]}


class CausalLM(nn.Module):
    """A transformers model returning its logits (the loss is the user's)."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.m = model

    def forward(self, ids):
        return self.m(input_ids=ids).logits


def lm_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


class Recurrent(nn.Module):
    """``nn.LSTM`` / ``nn.GRU`` (2 layers) and a linear head."""

    def __init__(self, cls, inp: int = 8, hidden: int = 16, out: int = 4):
        super().__init__()
        self.rnn = cls(inp, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, out)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


def _tokens(b=2, s=8):
    return [torch.randint(0, VOCAB, (b, s))], torch.randint(0, VOCAB, (b, s))


def _gpt2():
    import transformers as T
    cfg = T.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                       bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    return CausalLM(T.GPT2LMHeadModel(cfg).eval()), lm_loss, *_tokens()


def _gpt2_dropout():
    """GPT-2 in training mode with dropout 0.1 (embeddings, attention
    probabilities, residuals): random numbers from ShardX's generator
    (importer/rng.py), eager drawing the same ones (``ZooRun.SEED``)."""
    import transformers as T
    cfg = T.GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=2,
                       resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1,
                       bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    return CausalLM(T.GPT2LMHeadModel(cfg).train()), lm_loss, *_tokens()


def _llama():
    import transformers as T
    cfg = T.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16,
                        bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    return CausalLM(T.LlamaForCausalLM(cfg).eval()), lm_loss, *_tokens()


def _bert():
    import transformers as T
    cfg = T.BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                       intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0, attn_implementation="eager")
    return CausalLM(T.BertForMaskedLM(cfg).eval()), lm_loss, *_tokens()


def mixtral_config(experts: int = 4):
    """The zoo's Mixtral: top-2 routing over ``experts`` SiLU-gated
    experts, run by transformers' default ``grouped_mm`` experts (tokens
    sorted by expert, counts by ``histc``, one grouped matmul per
    projection; traced as under ``torch.compile``, f32 weights take its
    ``grouped_mm_fallback`` custom op: importer/ops/moe_ops.py)."""
    import transformers as T
    return T.MixtralConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=32, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=experts,
                           num_experts_per_tok=2, max_position_embeddings=16, bos_token_id=0,
                           eos_token_id=0, attn_implementation="eager")


def _mixtral():
    """A Mixture-of-Experts LM (``mixtral_config``)."""
    import transformers as T
    return CausalLM(T.MixtralForCausalLM(mixtral_config()).eval()), lm_loss, *_tokens()


def _resnet18():
    import torchvision
    return (torchvision.models.resnet18(num_classes=4), F.cross_entropy,
            [torch.randn(4, 3, 16, 16)], torch.randint(0, 4, (4,)))


def _resnet_tiny():
    """ResNet-18's parts at a width that compiles in seconds: torchvision's
    stem (conv 3x3 here, BatchNorm, ReLU, max pool), two ``BasicBlock``s
    (the second strided, with the 1x1 downsample), average pool and head."""
    from torchvision.models.resnet import BasicBlock
    down = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2, bias=False), nn.BatchNorm2d(16))
    m = nn.Sequential(nn.Conv2d(3, 8, 3, stride=1, padding=1, bias=False), nn.BatchNorm2d(8),
                      nn.ReLU(), nn.MaxPool2d(3, 2, 1), BasicBlock(8, 8), BasicBlock(8, 16, 2, down),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 4))
    return m, F.cross_entropy, [torch.randn(4, 3, 16, 16)], torch.randint(0, 4, (4,))


def _vit():
    import torchvision
    m = torchvision.models.VisionTransformer(image_size=16, patch_size=8, num_layers=2, num_heads=2,
                                             hidden_dim=32, mlp_dim=64, num_classes=4)
    return m, F.cross_entropy, [torch.randn(2, 3, 16, 16)], torch.randint(0, 4, (2,))


def _lstm():
    return Recurrent(nn.LSTM), F.mse_loss, [torch.randn(2, 5, 8)], torch.randn(2, 5, 4)


def _gru():
    return Recurrent(nn.GRU), F.mse_loss, [torch.randn(2, 5, 8)], torch.randn(2, 5, 4)


# name -> () -> (module, loss_fn, inputs, target); built under manual_seed(0).
MODELS: Dict[str, Callable] = {
    "gpt2": _gpt2, "gpt2_dropout": _gpt2_dropout, "llama": _llama, "bert": _bert, "mixtral": _mixtral, "resnet18": _resnet18,
    "resnet_tiny": _resnet_tiny, "vit": _vit,
    "lstm": _lstm, "gru": _gru,
}


def build(name: str, dtype: torch.dtype = torch.float32, seed: int = 0):
    """(module, loss_fn, inputs, target) of a zoo model, its parameters and
    floating-point inputs in ``dtype``."""
    torch.manual_seed(seed)
    m, loss, ins, tgt = MODELS[name]()
    if dtype != torch.float32:
        cast = lambda t: t.to(dtype) if t.is_floating_point() else t
        m, ins, tgt = m.to(dtype), [cast(t) for t in ins], cast(tgt)
    return m, loss, ins, tgt


# ----------------------------------------------------------------------------
# Sharding plans (parameter name -> placements per mesh axis)
# ----------------------------------------------------------------------------


def _megatron(param_names: Sequence[str], col: Sequence[str], row: Sequence[str], tp_axis: int,
              ndim: int, col_dim: int = 0, row_dim: int = 1) -> Dict[str, list]:
    """Megatron TP as ``parallelize_module`` plans give it: column-parallel
    weights (and biases) split on their output features, row-parallel
    weights on their input features."""
    plan = {}
    for n in param_names:
        place = [Replicate()] * ndim
        leaf = n.rsplit(".", 2)
        mod, kind = ".".join(leaf[:-1]), leaf[-1]
        if any(mod.endswith(c) for c in col):
            place[tp_axis] = Shard(col_dim if kind == "weight" else 0)
        elif any(mod.endswith(r) for r in row) and kind == "weight":
            place[tp_axis] = Shard(row_dim)
        else:
            continue
        plan[n] = place
    return plan


def _fsdp_tp(param_names: Sequence[str], col: Sequence[str], row: Sequence[str]) -> Dict[str, list]:
    """FSDP x TP on a (dp, tp) mesh as ``fully_shard`` after
    ``parallelize_module`` lays parameters out: every parameter split on
    dim 0 over dp, after Megatron TP's split over tp; a column-parallel
    weight, already split on dim 0 by tp, is split over dp within each tp
    block (``_StridedShard(0, split_factor=2)``)."""
    plan = {}
    tp = _megatron(param_names, col, row, 1, 2)
    for n in param_names:
        place = tp.get(n, [Replicate(), Replicate()])
        place[0] = StridedShard(0, 2) if place[1] == Shard(0) else Shard(0)
        plan[n] = place
    return plan


@dataclass
class Plan:
    """A sharding of a zoo model's train step on a mesh."""

    name: str
    mesh: Mesh
    params: Callable[[Sequence[str]], Dict[str, list]]
    batch: list  # placements of the inputs and target (batch dim split or not)
    # Megatron TP's column- and row-parallel modules (name suffixes), for
    # the same plan in DTensor (``shardx_dev.zoo_dtensor``).
    col: Sequence[str] = ()
    row: Sequence[str] = ()
    # Layouts of activations: (module name suffix, placements) pairs; the
    # inputs and outputs of those modules are constrained to the placements
    # (``shardx.constrain`` in forward hooks while tracing).
    activations: Sequence[Tuple[str, list]] = ()

    @contextlib.contextmanager
    def constraints(self, module: nn.Module):
        """Forward hooks that constrain the activations while tracing."""
        from shardx.constraint import constrain

        def pin(x, placements):
            return constrain(x, placements) if isinstance(x, torch.Tensor) else x

        handles = []
        for name, mod in module.named_modules():
            for suffix, placements in self.activations:
                if name.endswith(suffix):
                    handles.append(mod.register_forward_pre_hook(
                        lambda m, args, p=placements: tuple(pin(a, p) for a in args)))
                    handles.append(mod.register_forward_hook(
                        lambda m, args, out, p=placements: pin(out, p)))
        if self.activations and not handles:
            raise ValueError(f"plan {self.name}: no module matches {self.activations}")
        try:
            yield
        finally:
            for h in handles:
                h.remove()


def plans(model: str) -> List[Plan]:
    m1 = Mesh((2,), ("tp",))
    m2 = Mesh((2, 2), ("dp", "tp"))
    r1, r2 = [Replicate()], [Replicate(), Replicate()]
    if model in ("gpt2", "gpt2_dropout"):
        # GPT-2's Conv1D stores weights as (in, out): column-parallel is Shard(1).
        col, row = ["attn.c_attn", "mlp.c_fc"], ["attn.c_proj", "mlp.c_proj"]
        return [Plan("tp2", m1, lambda ns: _megatron(ns, col, row, 0, 1, 1, 0), r1, col, row),
                Plan("dp2xtp2", m2, lambda ns: _megatron(ns, col, row, 1, 2, 1, 0), [Shard(0), Replicate()],
                     col, row)]
    if model == "llama":
        col = ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"]
        row = ["o_proj", "down_proj"]
        return [Plan("tp2", m1, lambda ns: _megatron(ns, col, row, 0, 1), r1, col, row),
                Plan("dp2xtp2", m2, lambda ns: _megatron(ns, col, row, 1, 2), [Shard(0), Replicate()], col, row),
                Plan("fsdp2xtp2", m2, lambda ns: _fsdp_tp(ns, col, row), [Shard(0), Replicate()], col, row),
                # Sequence parallel (Megatron-SP, DTensor's SequenceParallel):
                # the RMSNorms' inputs and outputs split on the sequence dim.
                Plan("tp2sp", m1, lambda ns: _megatron(ns, col, row, 0, 1), r1, col, row,
                     activations=[("layernorm", [Shard(1)]), ("model.norm", [Shard(1)])])]
    if model == "bert":
        col = ["attention.self.query", "attention.self.key", "attention.self.value", "intermediate.dense"]
        row = ["attention.output.dense", "output.dense"]
        return [Plan("tp2", m1, lambda ns: _megatron([n for n in ns if "attention.output" in n or
                                                       "layer." in n], col, row, 0, 1), r1, col, row)]
    if model == "resnet_tiny":
        # Channel parallel: each block's first conv (and its batch norm)
        # split on output channels, the second on input channels (Megatron
        # for convolutions: one pending sum a block).
        col, row = ["conv1", "bn1"], ["conv2"]
        return [Plan("dp2", Mesh((2,), ("dp",)), lambda ns: {}, [Shard(0)]),
                Plan("tp2", m1, lambda ns: _megatron(ns, col, row, 0, 1), r1, col, row)]
    if model in ("resnet18", "vit"):
        return [Plan("dp2", Mesh((2,), ("dp",)), lambda ns: {}, [Shard(0)])]
    return []


# ----------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------


@dataclass
class Result:
    model: str
    plan: str = "unsharded"
    traced: bool = False
    compiled: bool = False
    ops: int = 0
    compile_s: float = 0.0
    matches_eager: Optional[bool] = None
    matches_unsharded: Optional[bool] = None
    collectives: Dict[str, int] = field(default_factory=dict)
    bytes_per_rank: int = 0
    error: str = ""


def _tool(name):
    from shardx.artifact import find_tool
    return find_tool(name)


def count_ops(mlir: str) -> int:
    body = mlir.split("func.func", 1)[1]
    return len(re.findall(r"^\s*(?:%\S+ = )?[a-z_]+\.[a-z_.0-9]+", body, re.M)) - 1


def compare(outs, ref, what: str, names: Sequence[str], loose: Sequence[str] = (),
            step: int = 1) -> Optional[str]:
    """None when equal within tolerance, else the first mismatching output
    (by index and name). Output 0 is the loss; ``loose`` names outputs
    checked only to 2 lr a step (their optimizer state to 1e-6). f64
    outputs are checked to ``TOL64``."""
    if len(outs) != len(ref):
        return f"{what}: {len(outs)} outputs, expected {len(ref)}"
    for i, (o, r) in enumerate(zip(outs, ref)):
        o, r = np.asarray(o), np.asarray(r)
        name = names[i] if i < len(names) else f"output {i}"
        if o.shape != r.shape:
            return f"{what}: output {i} ({name}) has shape {o.shape}, expected {r.shape}"
        t64 = r.dtype == np.float64
        rtol_, param_atol, state_atol, loss_rtol = ((TOL64["rtol"], TOL64["param_atol"], TOL64["state_atol"],
                                                    TOL64["loss_rtol"]) if t64 else
                                                   (RTOL, PARAM_ATOL, STATE_ATOL, LOSS_RTOL))
        if i == 0:
            rtol, atol = loss_rtol, 0.0
        elif "[" in name:  # optimizer state
            rtol, atol = rtol_, state_atol[min(step, 2)] * float(np.abs(r).max(initial=0.0))
        else:
            rtol, atol = rtol_, param_atol
        if not t64 and any(name.endswith(l) for l in loose):
            rtol, atol = 0.0, 2 * LR * step
        elif not t64 and any(name.endswith(l + "]") for l in loose):  # their moments: rounding noise
            rtol, atol = 0.0, 1e-6
        if not np.allclose(o, r, rtol=rtol, atol=atol):
            err = np.abs(o.astype(np.float64) - r.astype(np.float64)).max()
            return f"{what}: output {i} ({name}) differs (max abs err {err:.3g})"
    return None


class ZooRun:
    """One zoo model's train step: traced, compiled, run for ``steps`` steps
    and compared with eager PyTorch (and, for a plan, with the unsharded run)."""

    def __init__(self, model: str, workdir: str, optimizer: str = "adamw",
                 dtype: torch.dtype = torch.float32, opt_level: int = 3):
        import shardx
        self.model = model
        self.workdir = workdir
        self.opt_level = opt_level
        self.module, self.loss, self.inputs, self.target = build(model, dtype)
        self.step = shardx.TrainStep(self.module, self.loss, optimizer, lr=LR, weight_decay=0.01)
        params = self.step.param_names
        self.names = ["loss"] + params + [f"{k}[{(self.step.buffer_names if k == 'buffers' else params)[i]}]"
                                          for k, v in self.step.initial_state().items() for i in range(len(v))]
        self.args = self.step.example_args(self.inputs, self.target)
        # A second batch for step 2 (same shapes), from another seed.
        _, _, self.inputs2, self.target2 = build(model, dtype, seed=1)

    #: The random ops' seed of step k (dropout: importer/rng.py), the last
    #: input of a program that draws random numbers; eager draws the same
    #: numbers under ``shardx.same_random(SEED + k)``.
    SEED = 1000

    def trace(self, plan: Optional[Plan] = None) -> str:
        import shardx
        from shardx.importer import module as importer_module
        if plan is None:
            text = shardx.trace(self.step, self.args, name="train_step")
        else:
            ins, outs = self.step.placements(plan.mesh, plan.params(self.step.param_names),
                                             [plan.batch] * len(self.inputs), plan.batch)
            with plan.constraints(self.step.module):
                text = shardx.trace(self.step, self.args, plan.mesh, ins, outs, name="train_step")
        self.random = importer_module.last_seed is not None
        return text

    def eager(self, steps: int) -> List[List[np.ndarray]]:
        res = []
        params, state = self.args[0], self.args[1]
        import shardx
        for k in range(steps):
            ins, tgt = (self.inputs, self.target) if k == 0 else (self.inputs2, self.target2)
            with shardx.same_random(self.SEED + k):
                out = self.step.run_eager([p.clone() for p in params], {key: [t.clone() for t in v]
                                          for key, v in state.items()}, tuple(ins), tgt)
            res.append([t.detach().numpy().copy() for t in pytree.tree_leaves(out)])
            params, state = out[1], out[2]
        return res

    def _step_inputs(self, k: int, prev: Optional[List[np.ndarray]]) -> List[np.ndarray]:
        ins, tgt = (self.inputs, self.target) if k == 0 else (self.inputs2, self.target2)
        batch = [t.numpy() for t in pytree.tree_leaves((tuple(ins), tgt))]
        if prev is None:
            state = [t.detach().numpy() for t in pytree.tree_leaves((self.args[0], self.args[1]))]
        else:
            state = prev[1:]
        seed = [np.array(self.SEED + k, dtype=np.int64)] if getattr(self, "random", False) else []
        return [np.array(a, order="C") for a in state + batch] + seed

    def compile(self, text: str, tag: str, extra: Sequence[str] = ()):
        from shardx.artifact import compile_mlir
        so = os.path.join(self.workdir, f"{self.model}_{tag}.so")
        t = time.time()
        compile_mlir(text, so, [f"-O{self.opt_level}", *extra])
        return so, time.time() - t

    def run_unsharded(self, so: str, steps: int) -> List[List[np.ndarray]]:
        from shardx.artifact import Artifact
        fn = Artifact(so)["train_step"]
        res, prev = [], None
        for k in range(steps):
            prev = [np.array(o) for o in fn(*self._step_inputs(k, prev))]
            res.append(prev)
        return res

    def run_sharded(self, so: str, ranks: int, steps: int) -> List[List[np.ndarray]]:
        res, prev = [], None
        for k in range(steps):
            d = os.path.join(self.workdir, f"step{k}")
            os.makedirs(os.path.join(d, "out"), exist_ok=True)
            paths = []
            for i, a in enumerate(self._step_inputs(k, prev)):
                paths.append(os.path.join(d, f"in{i}.npy"))
                np.save(paths[-1], a)
            proc = subprocess.run([_tool("shardx-exec"), so, "--ranks", str(ranks), "--inputs",
                                   ",".join(paths), "--outputs", os.path.join(d, "out")],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"shardx-exec failed:\n{proc.stdout}\n{proc.stderr}")
            files = sorted(os.listdir(os.path.join(d, "out")),
                           key=lambda f: int(re.findall(r"\d+", f)[-1]))
            prev = [np.load(os.path.join(d, "out", f)) for f in files]
            res.append(prev)
        return res

    def plan_collectives(self, text: str):
        """Collectives by kind and the bytes each rank sends, from
        ``--shardx-print-plan``."""
        src = os.path.join(self.workdir, "plan.mlir")
        with open(src, "w") as f:
            f.write(text)
        p1 = subprocess.run([_tool("shardx-opt"), src, "--shardx-propagate", "--shardx-insert-reshards"],
                            capture_output=True, text=True, check=True)
        p2 = subprocess.run([_tool("shardx-opt"), "--shardx-print-plan", "-o", os.devnull],
                            input=p1.stdout, capture_output=True, text=True, check=True)
        return parse_plan(p2.stdout + p2.stderr)


def parse_plan(text: str):
    kinds: Dict[str, int] = {}
    total = 0
    for m in re.finditer(r"^\s+(all_gather|reduce_scatter|all_reduce|all_to_all|permute|broadcast)\b"
                         r"[^\n]*?: (\d+) bytes/rank", text, re.M):
        kinds[m.group(1)] = kinds.get(m.group(1), 0) + 1
        total += int(m.group(2))
    return kinds, total


def run_model(model: str, plan_names: Sequence[str] = (), steps: int = 2,
              workdir: Optional[str] = None, dtype: torch.dtype = torch.float32,
              opt_level: int = 3) -> List[Result]:
    """Traces, compiles and runs ``model`` unsharded and with each named
    plan, in ``dtype``, compiled at LLVM ``-O<opt_level>``; compares every run
    with eager PyTorch and each sharded run with the unsharded one. The model
    is built and run eagerly once, and the unsharded program is the first
    plan's trace compiled ``--unsharded`` (layouts dropped), so a model with
    one plan is traced once. Returns one ``Result`` per run, unsharded first;
    a run that raises stops there with the error recorded."""
    workdir = workdir or tempfile.mkdtemp(prefix=f"zoo_{model}_")
    run = ZooRun(model, workdir, dtype=dtype, opt_level=opt_level)
    by_name = {p.name: p for p in plans(model)}
    unknown = [n for n in plan_names if n not in by_name]
    if unknown:
        raise ValueError(f"{model} has no plan {unknown[0]!r} (plans: {sorted(by_name)})")
    loose = ILL_CONDITIONED.get(model, [])
    eager = run.eager(steps)
    results: List[Result] = []
    base = None
    texts: Dict[Optional[str], str] = {}
    for pn in [None, *plan_names]:
        res = Result(model, pn or "unsharded")
        results.append(res)
        try:
            plan = by_name[pn] if pn else None
            if pn is None and plan_names:
                texts[None] = texts[plan_names[0]] = run.trace(by_name[plan_names[0]])
            elif pn not in texts:
                texts[pn] = run.trace(plan)
            text = texts[pn]
            res.traced = True
            res.ops = count_ops(text)
            so, res.compile_s = run.compile(text, res.plan, ["--unsharded"] if plan is None else [])
            res.compiled = True
            if plan is None:
                got = base = run.run_unsharded(so, steps)
            else:
                res.collectives, res.bytes_per_rank = run.plan_collectives(text)
                got = run.run_sharded(so, plan.mesh.size, steps)
                errs = [compare(g, b, f"{model} {res.plan} step {k + 1} vs unsharded", run.names, loose, k + 1)
                        for k, (g, b) in enumerate(zip(got, base))]
                res.matches_unsharded = not any(errs)
                res.error = next((e for e in errs if e), "")
            errs = [compare(g, e, f"{model} {res.plan} step {k + 1} vs eager", run.names, loose, k + 1)
                    for k, (g, e) in enumerate(zip(got, eager))]
            res.matches_eager = not any(errs)
            res.error = res.error or next((e for e in errs if e), "")
        except Exception as e:  # the table records where it stops
            res.error = f"{model} {res.plan}: {type(e).__name__}: {str(e)[:300]}"
            if plan is None:
                break
    return results


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m shardx_dev.zoo", description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="*", default=sorted(MODELS))
    p.add_argument("--plans", action="store_true", help="also run every sharding plan")
    p.add_argument("--dtype", choices=["f32", "f64"], default="f32",
                   help="parameters and inputs in f32 (default) or f64")
    p.add_argument("-O", dest="opt_level", type=int, choices=range(4), default=3,
                   help="LLVM optimization level of shardx-compile (default 3)")
    args = p.parse_args(argv)
    dtype = dtypes.torch_dtype(args.dtype)
    print("| model | plan | traced | compiled | == unsharded | == eager | ops | collectives | "
          "bytes/rank | DTensor collectives | DTensor bytes/rank | compile s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for m in args.models:
        names = [pl.name for pl in plans(m)] if args.plans else []
        try:
            rs = run_model(m, names, dtype=dtype, opt_level=args.opt_level)
        except Exception as e:  # building or the eager run failed
            rs = [Result(m, error=f"{type(e).__name__}: {str(e)[:200]}")]
        for r in rs:
            fmt = lambda kinds: ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "-"
            yn = lambda b: "-" if b is None else ("yes" if b else "NO")
            dt_coll, dt_bytes = "-", "-"
            if r.plan != "unsharded":
                try:
                    from .zoo_dtensor import dtensor_collectives
                    kinds, total = dtensor_collectives(m, r.plan)
                    dt_coll, dt_bytes = fmt(kinds), str(total)
                except NotImplementedError as e:  # no such plan in DTensor
                    dt_coll = f"not run: {str(e)[:70]}"
                except Exception as e:
                    dt_coll = f"fails: {type(e).__name__}: {str(e)[:80]}"
            dt = "" if args.dtype == "f32" else f" ({args.dtype})"
            print(f"| {r.model}{dt} | {r.plan} | {yn(r.traced)} | {yn(r.compiled)} | "
                  f"{yn(r.matches_unsharded)} | {yn(r.matches_eager)} | {r.ops} | {fmt(r.collectives)} | "
                  f"{r.bytes_per_rank if r.plan != 'unsharded' else '-'} | {dt_coll} | {dt_bytes} | "
                  f"{r.compile_s:.1f} |" + (f" {r.error}" if r.error else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
