"""Activation recomputation (``shardx-compile --recompute``): modeled
activation memory, step time and bitwise equality, against no
recomputation, in one run.

For a pre-norm transformer block train step (``models.Block``, Adam) traced
at a size where activations dominate, unsharded and with Megatron
placements on 2 tp ranks, and each policy (none, selective, aggressive):

- the memory model (docs/Memory.md) on the bufferized program, in the
  order shardx-compile runs it: the most bytes of forward values
  (activations) alive at once, and the allocated peak;
- the step time: ``shardx-exec`` on random inputs (the best of several
  runs), as a ratio to no recomputation;
- the outputs on the same inputs, which must equal no recomputation's bit
  for bit (the script exits 1 otherwise).

    SHARDX_BUILD=build python3 bench/recompute_bench.py [--dim 64 --seq 64 ...]
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
import torch.nn.functional as F  # noqa: E402

from shardx_dev import models  # noqa: E402
from shardx.importer import trace  # noqa: E402
from shardx.placements import Mesh  # noqa: E402
from shardx_dev.examples import block_tp_placements  # noqa: E402
from shardx.train import TrainStep  # noqa: E402

POLICIES = ("none", "selective", "aggressive")

# shardx-codegen-cpu up to the freeing of buffers (lib/Compiler/Pipelines.cpp:
# buildBufferizationPipeline, then BLAS calls and deallocation), then the
# memory model.
CODEGEN_TO_BUFFERS = (
    "shardx-widen-accumulation{{contractions=true}},shardx-convert-to-runtime,"
    "shardx-drop-meshes,func.func(convert-elementwise-to-linalg),canonicalize,cse,"
    "shardx-fuse-tensor-ops,canonicalize,cse,shardx-recompute-activations{{policy={policy}}},"
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


def memory(path: str, policy: str, work: str, sharded: bool) -> dict:
    out = os.path.join(work, f"memory-{policy}-{int(sharded)}.json")
    pipeline = CODEGEN_TO_BUFFERS.format(policy=policy, json=out)
    spmd = ["--shardx-spmd=schedule-collectives=true"] if sharded else []
    local = os.path.join(work, f"local-{int(sharded)}.mlir")
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", metavar="DIR", help="write the programs, artifacts and memory "
                    "profiles to DIR instead of a temporary folder")
    args = ap.parse_args()
    ok = True
    print(f"block dim {args.dim}, {args.heads} heads, hidden {args.hidden}, "
          f"batch {args.batch}, seq {args.seq}")
    print("| mesh | policy | activations peak | vs none | allocated peak "
          "| vs none | step ms | vs none | outputs |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    with (tempfile.TemporaryDirectory() if not args.keep
          else contextlib.nullcontext(args.keep)) as work:
        os.makedirs(work, exist_ok=True)
        for sharded in (False, True):
            path = os.path.join(work, f"block-{int(sharded)}.mlir")
            with open(path, "w") as f:
                f.write(program(args, sharded))
            ranks = 2 if sharded else 1
            base = {}
            for policy in POLICIES:
                so = os.path.join(work, f"{policy}-{int(sharded)}.so")
                subprocess.run([tool("shardx-compile"), path, f"--recompute={policy}", "-o", so],
                               check=True, capture_output=True)
                prof = memory(path, policy, work, sharded)
                outdir = os.path.join(work, f"out-{policy}-{int(sharded)}")
                os.makedirs(outdir, exist_ok=True)
                ms = step_ms(so, ranks, outdir, args.runs)
                act, alloc = activation_peak(prof), prof["allocated_peak_bytes"]
                same = "-"
                if policy == "none":
                    base = {"act": act, "alloc": alloc, "ms": ms, "out": outdir}
                else:
                    names = sorted(os.listdir(base["out"]))
                    same = all(open(os.path.join(base["out"], n), "rb").read() ==
                               open(os.path.join(outdir, n), "rb").read() for n in names)
                    ok &= same and sorted(os.listdir(outdir)) == names
                    same = "bitwise equal" if same else "DIFFER"
                print(f"| {'tp2' if sharded else 'one rank'} | {policy} | "
                      f"{act / 1024:.1f} KiB | {act / max(base['act'], 1):.2f} | "
                      f"{alloc / 1024:.1f} KiB | {alloc / max(base['alloc'], 1):.2f} | "
                      f"{ms:.2f} | {ms / base['ms']:.2f} | {same} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
