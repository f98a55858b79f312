"""Propagation + reshard insertion time on generated N-layer transformer
train steps (forward, backward, Adam), against the upstream MLIR
`sharding-propagation` pass on the same program written in the upstream
`shard` dialect, measured in one run.

    ~/.cache/shardx/venv/bin/python bench/propagation_bench.py [--layers 1 8 32]

Each program is N pre-norm transformer blocks (attention written in ops +
GELU MLP, dim 64, 4 heads) with Megatron placements on a tp=2 mesh, traced
by the importer. Times are the passes' own wall times from `--mlir-timing`
(median of --repeat runs): ShardX's shardx-propagate + shardx-insert-reshards
(shardx-opt), upstream's sharding-propagation (mlir-opt) on the same ops
with the same argument shardings as `shard.shard` annotations.

The whole-graph refinement is measured against the pass in program order
alone (`--shardx-propagate=refine=false`) in the same run: the time of
both, and the total reshard cost each leaves (alpha-beta model, from
`--shardx-propagate=print-cost`).

With `--baseline PATH` (another build's shardx-opt, e.g. a copy taken
before a change), the same two pipelines are timed with that binary too,
interleaved with ours in the same run, and the ratio baseline/ours is
reported (above 1: ours is faster).
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from shardx import Mesh, Replicate as R, Shard as S, TrainStep, trace  # noqa: E402
from shardx_dev import models  # noqa: E402
from shardx.artifact import find_tool  # noqa: E402

MLIR_OPT = "/usr/lib/llvm-22/bin/mlir-opt"


class MLPBlock(nn.Module):
    """Residual GELU MLP block (no reshapes: upstream can take it)."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(x)))


def program(layers: int, kind: str) -> str:
    torch.manual_seed(0)
    if kind == "transformer":
        module = nn.Sequential(*[models.Block(64, 4, 128) for _ in range(layers)])
        x, y = torch.randn(2, 8, 64), torch.randn(2, 8, 64)
    else:
        module = nn.Sequential(*[MLPBlock(64, 128) for _ in range(layers)])
        x, y = torch.randn(16, 64), torch.randn(16, 64)
    step = TrainStep(module, F.mse_loss, "adam", lr=1e-3)
    col, row = [S(0)], [S(1)]
    placements = {}
    for i in range(layers):
        if kind == "transformer":
            for n in ("q", "k", "v"):
                placements[f"{i}.attn.{n}.weight"] = col
                placements[f"{i}.attn.{n}.bias"] = col
            placements[f"{i}.attn.out.weight"] = row
        placements[f"{i}.fc1.weight"] = col
        placements[f"{i}.fc1.bias"] = col
        placements[f"{i}.fc2.weight"] = row
    mesh = Mesh((2,), ("tp",))
    ins, outs = step.placements(mesh, placements, [[R()]], [R()])
    return trace(step, step.example_args([x], y), mesh, ins, outs, name="step")


def to_upstream(text: str) -> str:
    """The same program in the upstream shard dialect: the mesh as a grid,
    argument layouts as shard.shard annotations at the function's start."""
    text = re.sub(r'shardx\.mesh @mesh\(shape = (\d+), axes = \[[^\]]*\]\)', r'shard.grid @mesh(shape = \1)', text)
    lines = text.split("\n")
    out, annotations = [], []
    in_sig = False
    for line in lines:
        m = re.match(r'\s+%arg(\d+): (tensor<[^>]*>) \{shardx\.layout = #shardx\.layout<@mesh, \[([^\]]*)\]>'
                     r'(?:, ([^}]*))?\}(.*)$', line)
        if line.startswith("func.func"):
            in_sig = True
        if in_sig and m:
            idx, ty, pl, attrs, comma = m.groups()
            # Other argument attributes (a train step's torch.state) stay.
            out.append(f"    %arg{idx}: {ty}{' {' + attrs + '}' if attrs else ''}{comma}")
            sm = re.match(r'S\((\d+)\)', pl)
            if sm:
                d = int(sm.group(1))
                axes = ", ".join(["[]"] * d + ["[0]"])
                annotations.append((idx, ty, axes))
            continue
        if in_sig and line.strip().startswith("-> ("):
            line = re.sub(r' \{shardx\.layout = #shardx\.layout<[^>]*>\}', "", line)
            out.append(line)
            for idx, ty, axes in annotations:
                out.append(f"  %sh{idx} = shard.sharding @mesh split_axes = [{axes}] : !shard.sharding")
                out.append(f"  %sarg{idx} = shard.shard %arg{idx} to %sh{idx} : {ty}")
            in_sig = False
            continue
        out.append(line)
    body = "\n".join(out)
    head, sep, rest = body.partition("!shard.sharding\n")
    # Uses of annotated arguments go through the annotation.
    names = {idx for idx, _, _ in annotations}
    sig_end = body.index(") {\n") + 4 if ") {\n" in body else 0
    pre, post = body[:sig_end], body[sig_end:]
    post = re.sub(r'%arg(\d+)\b', lambda m: f"%sarg{m.group(1)}" if m.group(1) in names else m.group(0), post)
    post = re.sub(r'shard\.shard %sarg(\d+) to', r'shard.shard %arg\1 to', post)
    return pre + post


def pass_time(cmd, name_re, repeat):
    times = []
    for _ in range(repeat):
        proc = subprocess.run(cmd + ["--mlir-timing", "--mlir-timing-display=list", "-o", "/dev/null"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        total = 0.0
        for line in proc.stderr.splitlines():
            m = re.match(r'\s+([0-9.]+) \(\s*[0-9.]+%\)\s+(.*)$', line)
            if m and re.search(name_re, m.group(2)):
                total += float(m.group(1))
        times.append(total)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model", choices=["transformer", "mlp"], default="transformer")
    ap.add_argument("--baseline", help="another shardx-opt to time against, in the same run")
    args = ap.parse_args()
    print(f"{'layers':>6} {'ops':>7} {'order ms':>9} {'shardx ms':>10} {'us/op':>7} "
          f"{'cost order us':>14} {'cost shardx us':>15} {'upstream ms':>12} {'upstream/shardx':>16}"
          + (f" {'base order ms':>14} {'base ms':>8} {'base/ours order':>16} {'base/ours':>10}"
             if args.baseline else ""))
    for n in args.layers:
        text = program(n, args.model)
        ops = sum(1 for l in text.split("\n") if re.match(r"  %\S+ = ", l))
        with tempfile.TemporaryDirectory() as d:
            ours = os.path.join(d, "ours.mlir")
            up = os.path.join(d, "upstream.mlir")
            with open(ours, "w") as f:
                f.write(text)
            with open(up, "w") as f:
                f.write(to_upstream(text))
            names = r"PropagatePass|InsertReshardsPass|shardx-propagate|shardx-insert-reshards"
            t_order = pass_time([find_tool("shardx-opt"), ours, "--shardx-propagate=refine=false",
                                 "--shardx-insert-reshards"], names, args.repeat)
            t_ours = pass_time([find_tool("shardx-opt"), ours, "--shardx-propagate", "--shardx-insert-reshards"],
                               names, args.repeat)
            baseline = ""
            if args.baseline:
                # Interleaved: the baseline's timings between two of ours
                # (ours is the mean of the two medians), so drift in the
                # machine's load hits both sides alike.
                b_order = pass_time([args.baseline, ours, "--shardx-propagate=refine=false",
                                     "--shardx-insert-reshards"], names, args.repeat)
                b_full = pass_time([args.baseline, ours, "--shardx-propagate", "--shardx-insert-reshards"],
                                   names, args.repeat)
                t_order = statistics.median([t_order, pass_time(
                    [find_tool("shardx-opt"), ours, "--shardx-propagate=refine=false",
                     "--shardx-insert-reshards"], names, args.repeat)])
                t_ours = statistics.median([t_ours, pass_time(
                    [find_tool("shardx-opt"), ours, "--shardx-propagate", "--shardx-insert-reshards"],
                    names, args.repeat)])
                baseline = (f" {b_order * 1e3:>14.1f} {b_full * 1e3:>8.1f} {b_order / t_order:>16.2f}"
                            f" {b_full / t_ours:>10.2f}")
            proc = subprocess.run([find_tool("shardx-opt"), ours, "--shardx-propagate=print-cost", "-o", "/dev/null"],
                                  capture_output=True, text=True, check=True)
            m = re.search(r"reshard cost ([0-9.]+) us in program order, ([0-9.]+) us after", proc.stderr)
            cost_order, cost_ours = (float(m.group(1)), float(m.group(2))) if m else (0.0, 0.0)
            try:
                t_up = pass_time([MLIR_OPT, up, "--pass-pipeline=builtin.module(func.func(sharding-propagation))"],
                                 r"ShardingPropagation|sharding-propagation", args.repeat)
                up_text, ratio = f"{t_up * 1e3:>12.1f}", f"{t_up / t_ours:>16.2f}"
            except RuntimeError as e:
                why = re.search(r"error: (.*)", str(e))
                up_text, ratio = f"{'fails':>12}", f"  ({why.group(1) if why else 'error'})"
        print(f"{n:>6} {ops:>7} {t_order * 1e3:>9.1f} {t_ours * 1e3:>10.1f} {t_ours * 1e6 / ops:>7.1f} "
              f"{cost_order:>14.1f} {cost_ours:>15.1f} {up_text} {ratio}{baseline}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
