"""Gradient bucketing (`shardx-bucket-collectives`) on and off, on the same
data-parallel train step, measured in one run.

    ~/.cache/shardx/venv/bin/python bench/bucket_bench.py [--layers 8]
        [--width 64] [--batch 64] [--ranks 4] [--backend threads mpi]
        [--repeat 20]

The step is an MLP of `--layers` Linear+Tanh layers of `--width` (2 x
layers parameters, each with its own gradient all-reduce) with MSE and SGD,
the batch split over a 1-D dp mesh of `--ranks`. `shardx-run --check`
compiles it with and without bucketing (`--bucket-collectives`), checks
both against the unsharded program and reports the median step time of
`--repeat` runs; the two variants alternate three times and the best median
of each is kept. Prints the all-reduces per step and the time ratio
(unbucketed / bucketed: above 1 means bucketing is faster).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from shardx import Mesh, Partial as P, Shard as S, TrainStep, trace  # noqa: E402
from shardx.artifact import find_tool  # noqa: E402


def count_all_reduces(src: str, bucket: bool) -> int:
    opt = find_tool("shardx-opt")
    out = subprocess.run([opt, src, f"--shardx-spmd=bucket-collectives={str(bucket).lower()}"],
                         capture_output=True, text=True, check=True).stdout
    return len(re.findall(r"shardx\.all_reduce", out))


def run(src: str, backend: str, ranks: int, repeat: int, bucket: bool) -> float:
    cmd = [find_tool("shardx-run"), src, "--check", "--repeat", str(repeat),
           f"--bucket-collectives={str(bucket).lower()}", "--backend", backend]
    if backend == "mpi":
        cmd = [shutil.which("mpirun") or "mpirun", "--allow-run-as-root", "--oversubscribe",
               "-np", str(ranks)] + cmd
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return float(re.search(r"outputs, ([0-9.]+) ms", proc.stdout).group(1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--backend", nargs="+", default=["threads", "mpi"])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [nn.Linear(args.width, args.width), nn.Tanh()]
    step = TrainStep(nn.Sequential(*layers), F.mse_loss, "sgd", lr=0.01)
    x, y = torch.randn(args.batch, args.width), torch.randn(args.batch, args.width)
    example = step.example_args([x], y)
    mesh = Mesh((args.ranks,), ("dp",))
    ins, outs = step.placements(mesh, {}, [[S(0)]], [S(0)])
    outs[0] = [P("sum")]
    text = trace(step, example, mesh, ins, outs, name="dp_step")
    print(f"DP train step: {args.layers} x Linear({args.width}) + Tanh, batch {args.batch}, "
          f"SGD, dp={args.ranks}; median of {args.repeat} runs, best of 3 alternations")
    print(f"{'backend':>8} {'all-reduces':>12} {'bucketed':>9} {'off ms':>8} {'on ms':>8} "
          f"{'off/on':>7}")
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "step.mlir")
        with open(src, "w") as f:
            f.write(text)
        n_off, n_on = count_all_reduces(src, False), count_all_reduces(src, True)
        for backend in args.backend:
            off, on = [], []
            for _ in range(3):
                off.append(run(src, backend, args.ranks, args.repeat, False))
                on.append(run(src, backend, args.ranks, args.repeat, True))
            print(f"{backend:>8} {n_off:>12} {n_on:>9} {min(off):>8.3f} {min(on):>8.3f} "
                  f"{min(off) / min(on):>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
