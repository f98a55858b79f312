"""The memory model (docs/Memory.md) against the runtime's measured peak.

For each program (train steps of the examples' MLP, FSDP x TP MLP and
transformer block at sizes where buffers are KiBs to MiBs, and of the zoo's
GPT-2 and Llama configurations), unsharded and sharded: ``shardx.compile``
compiles it, one call warms the buffer cache, then the runtime's meter
(``shardx_rt_host_mem_reset`` / ``shardx_rt_host_mem_peaks``, counted in the
allocation functions of the generated code) measures each rank's high-water
mark of program-allocated bytes over a second call. The model's number is
``allocated_peak_bytes`` of ``CompiledFunction.memory_profile()``: the peak
of the bytes the program allocates (the arguments, which the caller holds,
are counted apart in ``argument_bytes``).

    SHARDX_BUILD=build python3 bench/memory_model_bench.py [--quick] [--json FILE]

prints one row per program and mesh: modeled, measured (the largest rank's
peak) and their ratio; exits 1 when a ratio is outside [0.9, 1.1].
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from typing import Callable, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import shardx  # noqa: E402
from shardx_dev import models  # noqa: E402
from shardx.placements import Mesh, Replicate as R, Shard as S, StridedShard as SS  # noqa: E402
from shardx_dev.meter import measured_peaks  # noqa: E402



class Case:
    def __init__(self, name: str, build: Callable, mesh: Optional[Mesh], params=None, batch=None,
                 constraints=None):
        self.name, self.build, self.mesh = name, build, mesh
        self.params, self.batch, self.constraints = params or {}, batch, constraints

    def run(self) -> dict:
        step, inputs, target = self.build()
        args = step.example_args(inputs, target)
        if self.mesh is None:
            compiled = shardx.compile(step, mesh=None)
        else:
            ins, outs = step.placements(self.mesh, self.params, [self.batch] * len(inputs),
                                        self.batch)
            compiled = shardx.compile(step, mesh=self.mesh, in_placements=ins,
                                      out_placements=outs)
        ctx = self.constraints(step.module) if self.constraints else contextlib.nullcontext()
        with ctx:
            peaks = measured_peaks(compiled, args)
        profile = compiled.memory_profile("buffers")[0]
        tensors = compiled.memory_profile("tensors")[0]
        measured = max(peaks + [0])
        modeled = profile["allocated_peak_bytes"]
        return {"model": self.name, "mesh": "1" if self.mesh is None else "x".join(map(str, self.mesh.shape)),
                "modeled": modeled, "measured": measured,
                "ratio": modeled / measured if measured else float("nan"),
                "tensor_modeled": tensors["allocated_peak_bytes"],
                "tensor_ratio": tensors["allocated_peak_bytes"] / measured if measured else float("nan"),
                "arguments": profile["argument_bytes"], "peak_op": profile["peak_op"],
                "threads": len(peaks)}


def _mlp(hidden: int, batch: int):
    def build():
        torch.manual_seed(0)
        step = shardx.TrainStep(models.mlp(64, hidden, 64), F.mse_loss, "sgd", lr=0.1, momentum=0.9)
        return step, [torch.randn(batch, 64)], torch.randn(batch, 64)
    return build


def _fsdp_mlp(dim: int, hidden: int, batch: int):
    def build():
        torch.manual_seed(0)
        step = shardx.TrainStep(models.mlp(dim, hidden, dim, act=nn.GELU), F.mse_loss, "adamw",
                                foreach=True, lr=1e-3, weight_decay=0.01)
        return step, [torch.randn(batch, dim)], torch.randn(batch, dim)
    return build


def _block(dim: int, heads: int, hidden: int, batch: int, seq: int):
    def build():
        torch.manual_seed(0)
        step = shardx.TrainStep(models.Block(dim, heads, hidden), F.mse_loss, "adam", lr=1e-3)
        return step, [torch.randn(batch, seq, dim)], torch.randn(batch, seq, dim)
    return build


class _Stack(nn.Module):
    """`n` transformer blocks (regionally traced: one function called per
    layer), each through torch.utils.checkpoint when `checkpointed`."""

    def __init__(self, n: int, dim: int, heads: int, hidden: int, checkpointed: bool):
        super().__init__()
        self.blocks = nn.ModuleList([models.Block(dim, heads, hidden) for _ in range(n)])
        self.checkpointed = checkpointed

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint
        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.checkpointed else b(x)
        return x


def _stack(n: int, dim: int, heads: int, hidden: int, batch: int, seq: int, checkpointed: bool):
    def build():
        torch.manual_seed(0)
        step = shardx.TrainStep(_Stack(n, dim, heads, hidden, checkpointed), F.mse_loss, "adam",
                                lr=1e-3)
        return step, [torch.randn(batch, seq, dim)], torch.randn(batch, seq, dim)
    return build


def _zoo(model: str, **config):
    def build():
        import transformers as T
        from shardx_dev import zoo
        torch.manual_seed(0)
        if model == "gpt2":
            cfg = T.GPT2Config(vocab_size=config["vocab"], n_positions=config["seq"],
                               n_embd=config["dim"], n_layer=2, n_head=4, resid_pdrop=0.0,
                               embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
                               attn_implementation="eager")
            module = zoo.CausalLM(T.GPT2LMHeadModel(cfg).eval())
        else:
            cfg = T.LlamaConfig(vocab_size=config["vocab"], hidden_size=config["dim"],
                                intermediate_size=2 * config["dim"], num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2,
                                max_position_embeddings=config["seq"], bos_token_id=0,
                                eos_token_id=0, attn_implementation="eager")
            module = zoo.CausalLM(T.LlamaForCausalLM(cfg).eval())
        step = shardx.TrainStep(module, zoo.lm_loss, "adamw", lr=zoo.LR, weight_decay=0.01)
        b, s = config["batch"], config["seq"]
        return (step, [torch.randint(0, config["vocab"], (b, s))],
                torch.randint(0, config["vocab"], (b, s)))
    return build


def _megatron(names, col, row, tp_axis, ndim, col_dim=0, row_dim=1):
    from shardx_dev import zoo
    return zoo._megatron(names, col, row, tp_axis, ndim, col_dim, row_dim)


def cases(quick: bool) -> List[Case]:
    m1, m2 = Mesh((2,), ("tp",)), Mesh((2, 2), ("dp", "tp"))
    rep1, rep2 = [R()], [R(), R()]
    mlp = _mlp(512, 256)
    mlp_tp = {"0.weight": [R(), S(0)], "0.bias": [R(), S(0)], "2.weight": [R(), S(1)],
              "2.bias": [R(), R()]}
    fsdp = _fsdp_mlp(128, 512, 512)
    fsdp_tp = {"0.weight": [SS(0, 2), S(0)], "0.bias": [SS(0, 2), S(0)],
               "2.weight": [S(0), S(1)], "2.bias": [S(0), R()]}
    block = _block(128, 4, 512, 4, 64)
    col, row = [S(0)], [S(1)]
    block_tp = {"attn.q.weight": col, "attn.q.bias": col, "attn.k.weight": col,
                "attn.k.bias": col, "attn.v.weight": col, "attn.v.bias": col,
                "attn.out.weight": row, "fc1.weight": col, "fc1.bias": col, "fc2.weight": row}
    out = [Case("mlp 64-512-64 b256", mlp, None),
           Case("mlp 64-512-64 b256", mlp, m2, mlp_tp, [S(0), R()]),
           Case("mlp dp only", mlp, Mesh((2,), ("dp",)), {}, [S(0)]),
           Case("fsdp x tp mlp 128-512", fsdp, None),
           Case("fsdp x tp mlp 128-512", fsdp, m2, fsdp_tp, [S(0), R()]),
           Case("transformer block d128", block, None),
           Case("transformer block d128", block, m1, block_tp, rep1)]
    stack_tp = {f"blocks.{k}.{name}": p for k in range(4) for name, p in block_tp.items()}
    for checkpointed in (False, True):
        stack = _stack(4, 128, 4, 512, 4, 64, checkpointed)
        name = "4 blocks d128" + (", checkpointed" if checkpointed else "")
        out += [Case(name, stack, None), Case(name, stack, m1, stack_tp, rep1)]
    if quick:
        return out
    gpt2 = _zoo("gpt2", vocab=512, seq=64, dim=128, batch=4)
    gcol, grow = ["attn.c_attn", "mlp.c_fc"], ["attn.c_proj", "mlp.c_proj"]
    llama = _zoo("llama", vocab=512, seq=64, dim=128, batch=4)
    lcol = ["q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"]
    lrow = ["o_proj", "down_proj"]

    def zoo_case(name, build, mesh, plan, batch):
        case = Case(name, build, mesh, None, batch)
        original = case.run

        def run():
            step, _, _ = build()
            case.params = plan(step.param_names)
            return original()
        case.run = run
        return case

    out += [Case("gpt2 2L d128", gpt2, None),
            zoo_case("gpt2 2L d128", gpt2, m1, lambda ns: _megatron(ns, gcol, grow, 0, 1, 1, 0), rep1),
            zoo_case("gpt2 2L d128", gpt2, m2, lambda ns: _megatron(ns, gcol, grow, 1, 2, 1, 0),
                     [S(0), R()]),
            Case("llama 2L d128", llama, None),
            zoo_case("llama 2L d128", llama, m1, lambda ns: _megatron(ns, lcol, lrow, 0, 1), rep1),
            zoo_case("llama 2L d128", llama, m2, lambda ns: _megatron(ns, lcol, lrow, 1, 2),
                     [S(0), R()])]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the MLPs and the block only")
    parser.add_argument("--json", help="also write the rows to this file")
    opts = parser.parse_args(argv)
    rows = []
    print(f"{'model':<26} {'mesh':>5} {'modeled':>10} {'measured':>10} {'ratio':>6} "
          f"{'tensors':>10} {'ratio':>6}  arguments")
    for case in cases(opts.quick):
        row = case.run()
        rows.append(row)
        print(f"{row['model']:<26} {row['mesh']:>5} {row['modeled']:>10} {row['measured']:>10} "
              f"{row['ratio']:>6.3f} {row['tensor_modeled']:>10} {row['tensor_ratio']:>6.3f}  "
              f"{row['arguments']}", flush=True)
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=1)
    bad = [r for r in rows if not 0.9 <= r["ratio"] <= 1.1]
    if bad:
        print(f"{len(bad)} of {len(rows)} outside 10%", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
