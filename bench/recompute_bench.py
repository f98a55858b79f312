"""Activation recomputation (``shardx-compile --recompute``): modeled
activation memory, step time and bitwise equality, against no
recomputation, in one run.

For a pre-norm transformer block train step (``models.Block``, Adam) traced
at a size where activations dominate, unsharded and with Megatron
placements on 2 tp ranks, and each policy (none, selective, aggressive,
and the memory-budget policy with budgets of 0.75 and 0.5 of none's modeled
activation peak, ``--recompute=budget --recompute-budget=BYTES``):

- the memory model (docs/Memory.md) on the bufferized program, in the
  order shardx-compile runs it: the most bytes of forward values
  (activations) alive at once, and the allocated peak;
- the step time: ``shardx-exec`` on random inputs (the best of several
  rounds, each running every row once), as a ratio to no recomputation;
- on one rank, the warm step time: the artifact loaded in this process,
  the best of several calls after a first (no page faults);
- the ops copied (the compiler's remarks);
- the outputs on the same inputs, which must equal no recomputation's bit
  for bit (the script exits 1 otherwise).

Then the same for a stack of ``--blocks`` blocks (4) whose forward calls
each block through ``torch.utils.checkpoint.checkpoint(block, x,
use_reentrant=False)``, compiled with ``--recompute=none`` (ShardX honors
the checkpoints: each block's forward is computed again at its backward),
against the stack without checkpoints under none and selective; the
outputs of every row must equal the stack without checkpoints under none
bit for bit.

    SHARDX_BUILD=build python3 bench/recompute_bench.py [--dim 64 --seq 64 --blocks 4 ...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from shardx_dev import models  # noqa: E402
from shardx.importer import trace  # noqa: E402
from shardx.placements import Mesh, Replicate as R, Shard as S  # noqa: E402
from shardx_dev.examples import block_tp_placements  # noqa: E402
from shardx.train import TrainStep  # noqa: E402

POLICIES = ("none", "selective", "aggressive")

# shardx-codegen-cpu up to the freeing of buffers (lib/Compiler/Pipelines.cpp:
# buildBufferizationPipeline, then BLAS calls and deallocation), then the
# memory model.
CODEGEN_TO_BUFFERS = (
    "shardx-widen-accumulation{{contractions=true}},shardx-convert-to-runtime,"
    "shardx-drop-meshes,func.func(convert-elementwise-to-linalg),canonicalize,cse,"
    "shardx-fuse-tensor-ops,canonicalize,cse,shardx-recompute-activations{{{policy}}},"
    "shardx-split-shared-empty-tensors,shardx-pack-slices-as-concat,"
    "one-shot-bufferize{{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}},canonicalize,cse,"
    "shardx-contractions-to-blas,shardx-deallocate-buffers,"
    "shardx-print-plan{{memory-json={json}}}")


def tool(name: str) -> str:
    build = os.environ.get("SHARDX_BUILD", os.path.join(os.path.dirname(HERE), "build"))
    return os.path.join(build, "bin", name)


def program(args, sharded: bool) -> str:
    torch.manual_seed(0)
    block = models.Block(args.dim, args.heads, args.hidden)
    step = TrainStep(block, F.mse_loss, "adam", lr=1e-3)
    x = torch.randn(args.batch, args.seq, args.dim)
    y = torch.randn(args.batch, args.seq, args.dim)
    if not sharded:
        return trace(step, step.example_args([x], y), name="block")
    mesh = Mesh((2,), ("tp",))
    ins, outs = block_tp_placements(step, mesh)
    return trace(step, step.example_args([x], y), mesh, ins, outs, name="block")


class Stack(nn.Module):
    """``n`` transformer blocks in a row, each called through
    ``torch.utils.checkpoint`` (non-reentrant) when ``checkpointed``."""

    def __init__(self, n: int, dim: int, heads: int, hidden: int, checkpointed: bool):
        super().__init__()
        self.checkpointed = checkpointed
        self.blocks = nn.ModuleList([models.Block(dim, heads, hidden) for _ in range(n)])

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


def stack_program(args, sharded: bool, checkpointed: bool) -> str:
    """The stack's Adam train step; Megatron placements per block on tp2.
    Traced without regions (the regional trace calls one function per
    block: the same program once inlined; a checkpointed block is traced
    inline anyway)."""
    torch.manual_seed(0)
    stack = Stack(args.blocks, args.dim, args.heads, args.hidden, checkpointed)
    step = TrainStep(stack, F.mse_loss, "adam", lr=1e-3)
    x = torch.randn(args.batch, args.seq, args.dim)
    y = torch.randn(args.batch, args.seq, args.dim)
    if not sharded:
        return trace(step, step.example_args([x], y), name="stack", regions=False)
    mesh = Mesh((2,), ("tp",))
    col, row = [S(0)], [S(1)]
    per_block = {"attn.q.weight": col, "attn.q.bias": col, "attn.k.weight": col,
                 "attn.k.bias": col, "attn.v.weight": col, "attn.v.bias": col,
                 "attn.out.weight": row, "fc1.weight": col, "fc1.bias": col,
                 "fc2.weight": row}
    params = {f"blocks.{i}.{n}": p for i in range(args.blocks) for n, p in per_block.items()}
    ins, outs = step.placements(mesh, params, [[R()]], [R()])
    return trace(step, step.example_args([x], y), mesh, ins, outs, name="stack", regions=False)


def activation_peak(profile: dict) -> int:
    """The most bytes of activation buffers alive at once."""
    events = []
    for b in profile["buffers"]:
        if b["role"] == "activations":
            events.append((b["first"], b["bytes"]))
            events.append((b["last"] + 1, -b["bytes"]))
    alive = peak = 0
    for _, delta in sorted(events):
        alive += delta
        peak = max(peak, alive)
    return peak


def policy_options(policy: str):
    """shardx-compile's options and the pass's options of a policy: a name,
    or ``budget=BYTES``."""
    if policy.startswith("budget="):
        budget = policy[len("budget="):]
        return ["--recompute=budget", f"--recompute-budget={budget}"], \
            f"policy=budget budget={budget}"
    return [f"--recompute={policy}"], f"policy={policy}"


def memory(path: str, policy: str, work: str, sharded: bool) -> dict:
    """The memory model of the step function (the program's first)."""
    tag = os.path.splitext(os.path.basename(path))[0]
    out = os.path.join(work, f"memory-{tag}-{policy.replace('=', '')}.json")
    pipeline = CODEGEN_TO_BUFFERS.format(policy=policy_options(policy)[1], json=out)
    spmd = ["--shardx-spmd=schedule-collectives=true"] if sharded else []
    local = os.path.join(work, f"local-{tag}.mlir")
    if sharded:
        subprocess.run([tool("shardx-opt"), path, *spmd, "-mlir-print-debuginfo", "-o", local],
                       check=True)
    else:
        local = path
    subprocess.run([tool("shardx-opt"), local, f"--pass-pipeline=builtin.module({pipeline})",
                    "-o", os.devnull], check=True, stderr=subprocess.DEVNULL)
    with open(out) as f:
        profiles = json.load(f)
    return profiles[0]


def step_ms(so: str, ranks: int, outdir: str, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        text = subprocess.run([tool("shardx-exec"), so, "--ranks", str(ranks), "--seed", "7",
                               "--outputs", outdir], check=True, capture_output=True,
                              text=True).stdout
        best = min(best, float(re.search(r"in ([0-9.]+) ms", text).group(1)))
    return best


def warm_ms(so: str, runs: int) -> float:
    """One rank's step in this process (``shardx.artifact``): a first call
    warms the buffer cache, then the best of ``runs`` calls (``shardx-exec``
    runs one step in a fresh process, which also faults the buffers in)."""
    import time
    import numpy as np
    from shardx.artifact import Artifact
    art = Artifact(so)
    fn = art[art.entry_points[0]]
    rng = np.random.default_rng(7)
    args = []
    for spec in fn.inputs:
        if spec["dtype"] != "f32":
            return float("nan")
        args.append(rng.standard_normal(spec["shape"]).astype(np.float32))
    fn(*args)
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def measure(rows, sharded: bool, work: str, runs: int) -> bool:
    """Prints one table row per (label, program path, policy); the first
    row is the baseline. The rows' artifacts run in turn, ``runs`` rounds
    (the best of each), so that the machine's load drifts over all of them
    alike. Returns whether every row's outputs equal the baseline's bit for
    bit."""
    ok = True
    ranks = 2 if sharded else 1
    done = []
    for label, path, policy in rows:
        tag = f"{os.path.splitext(os.path.basename(path))[0]}-{policy.replace('=', '')}"
        so = os.path.join(work, f"{tag}.so")
        remarks = subprocess.run([tool("shardx-compile"), path, *policy_options(policy)[0],
                                  "-o", so], check=True, capture_output=True, text=True).stderr
        copied = sum(int(n) for n in re.findall(r"recomputes (\d+) forward ops", remarks))
        prof = memory(path, policy, work, sharded)
        outdir = os.path.join(work, f"out-{tag}")
        os.makedirs(outdir, exist_ok=True)
        done.append(dict(label=label, so=so, copied=copied, out=outdir, ms=float("inf"),
                         act=activation_peak(prof), alloc=prof["allocated_peak_bytes"]))
    for _ in range(runs):
        for row in done:
            row["ms"] = min(row["ms"], step_ms(row["so"], ranks, row["out"], 1))
    for row in done:
        row["warm"] = float("nan") if sharded else warm_ms(row["so"], 3 * runs)
    base = done[0]
    names = sorted(os.listdir(base["out"]))
    for row in done:
        same = "-"
        if row is not base:
            same = all(open(os.path.join(base["out"], n), "rb").read() ==
                       open(os.path.join(row["out"], n), "rb").read() for n in names)
            ok &= same and sorted(os.listdir(row["out"])) == names
            same = "bitwise equal" if same else "DIFFER"
        print(f"| {'tp2' if sharded else 'one rank'} | {row['label']} | "
              f"{row['act'] / 1024:.1f} KiB | {row['act'] / max(base['act'], 1):.2f} | "
              f"{row['alloc'] / 1024:.1f} KiB | {row['alloc'] / max(base['alloc'], 1):.2f} | "
              f"{row['ms']:.2f} | {row['ms'] / base['ms']:.2f} | "
              + ("- | - | " if sharded else
                 f"{row['warm']:.2f} | {row['warm'] / base['warm']:.2f} | ")
              + f"{row['copied']} | {same} |",
              flush=True)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=4,
                    help="blocks of the checkpointed stack (0: the single block only)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", metavar="DIR", help="write the programs, artifacts and memory "
                    "profiles to DIR instead of a temporary folder")
    args = ap.parse_args()
    ok = True
    header = ("| mesh | policy | activations peak | vs none | allocated peak "
              "| vs none | step ms | vs none | warm step ms | vs none | ops recomputed "
              "| outputs |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    print(f"block dim {args.dim}, {args.heads} heads, hidden {args.hidden}, "
          f"batch {args.batch}, seq {args.seq}")
    print(header)
    with (tempfile.TemporaryDirectory() if not args.keep
          else contextlib.nullcontext(args.keep)) as work:
        os.makedirs(work, exist_ok=True)
        for sharded in (False, True):
            path = os.path.join(work, f"block-{int(sharded)}.mlir")
            with open(path, "w") as f:
                f.write(program(args, sharded))
            # The budgets: fractions of none's modeled activation peak (as
            # torchtitan's memory_budget is a fraction of the activations).
            none_act = activation_peak(memory(path, "none", work, sharded))
            budgets = [(f"budget {f:.2f} x none ({int(f * none_act)} B)",
                        f"budget={int(f * none_act)}") for f in (0.75, 0.5)]
            ok &= measure([(policy, path, policy) for policy in POLICIES]
                          + [(label, path, policy) for label, policy in budgets],
                          sharded, work, args.runs)
        if args.blocks:
            print(f"\n{args.blocks} blocks, each through torch.utils.checkpoint or not")
            print(header)
            for sharded in (False, True):
                paths = []
                for checkpointed in (False, True):
                    paths.append(os.path.join(work, f"stack{int(checkpointed)}-{int(sharded)}.mlir"))
                    with open(paths[-1], "w") as f:
                        f.write(stack_program(args, sharded, checkpointed))
                ok &= measure([("none", paths[0], "none"),
                               ("selective", paths[0], "selective"),
                               ("checkpoint per block", paths[1], "none"),
                               ("checkpoint per block + selective", paths[1], "selective")],
                              sharded, work, args.runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
