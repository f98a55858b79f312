"""Sharded train step against the unsharded compiled program and against
PyTorch eager, on CPU, all measured in one run.

    ~/.cache/shardx/venv/bin/python bench/train_step_bench.py [--hidden 4096]
        [--batch 32] [--ranks 1 2] [--repeat 5] [--model mlp|block]
        [--seq 128] [--heads 8]

For each rank count the train step is traced with Megatron placements over a
1-D tp mesh: `mlp` is Linear-ReLU-Linear (hidden x hidden weights) with MSE
and SGD; `block` is a pre-norm transformer block (models.Block: attention
written in ops + GELU MLP of 4 x hidden) on batch x seq tokens with MSE and
Adam, q/k/v/fc1 column- and out/fc2 row-parallel. It is compiled sharded and
unsharded by shardx-run, both run `--repeat` times on the same inputs (the
sharded one on N threads ranks, checked against the unsharded one), and the
median times are compared; PyTorch eager runs the same step. The ranks share
the machine's cores: the executor gives OpenBLAS cores/ranks threads per
rank (its default), the unsharded program and PyTorch get all cores.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from shardx import Mesh, Replicate as R, Shard as S, TrainStep, trace  # noqa: E402
from shardx_dev import models  # noqa: E402
from shardx_dev.planrun import input_files  # noqa: E402
from shardx.artifact import find_tool  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", choices=["mlp", "block"], default="mlp")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--heads", type=int, default=8)
    args = ap.parse_args()
    cores = os.cpu_count() or 1
    h = args.hidden
    torch.manual_seed(0)
    col, row = [S(0)], [S(1)]
    if args.model == "mlp":
        module = models.mlp(h, h, h)
        step = TrainStep(module, F.mse_loss, "sgd", lr=0.01)
        x, y = torch.randn(args.batch, h), torch.randn(args.batch, h)
        placements = {"0.weight": col, "0.bias": col, "2.weight": row}
        title = f"MLP train step: hidden {h}, batch {args.batch}, SGD"
    else:
        module = models.Block(h, args.heads, 4 * h)
        step = TrainStep(module, F.mse_loss, "adam", lr=1e-3)
        x, y = torch.randn(args.batch, args.seq, h), torch.randn(args.batch, args.seq, h)
        placements = {f"attn.{n}.{p}": col for n in "qkv" for p in ("weight", "bias")}
        placements.update({"attn.out.weight": row, "fc1.weight": col, "fc1.bias": col,
                           "fc2.weight": row})
        title = (f"Transformer block train step: dim {h}, {args.heads} heads, MLP {4 * h}, "
                 f"batch {args.batch} x seq {args.seq}, Adam")
    example = step.example_args([x], y)

    # PyTorch eager on the same step.
    torch.set_num_threads(cores)
    eager = []
    for _ in range(args.repeat + 1):
        t = time.perf_counter()
        step.run_eager(*example)
        eager.append(time.perf_counter() - t)
    eager_s = statistics.median(eager[1:])

    print(f"{title}; {cores} cores; median of {args.repeat} runs")
    rows = []
    baseline = None
    for n in args.ranks:
        mesh = Mesh((n,), ("tp",))
        ins, outs = step.placements(mesh, placements, [[R()]], [R()])
        text = trace(step, example, mesh, ins, outs, name=f"{args.model}_step")
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "step.mlir")
            with open(src, "w") as f:
                f.write(text)
            # The executor gives each rank cores / ranks BLAS threads
            # (SHARDX_NUM_THREADS and OPENBLAS_NUM_THREADS would override it).
            env = {k: v for k, v in os.environ.items()
                   if k not in ("OPENBLAS_NUM_THREADS", "SHARDX_NUM_THREADS")}
            # On the values eager runs on (planrun.input_files: random
            # weights in [-1, 1) make subnormal probabilities).
            proc = subprocess.run([find_tool("shardx-run"), src, "--check", "--repeat", str(args.repeat),
                                   "--rtol", "1e-3", "--atol", "1e-4", input_files(example, d)],
                                  capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            print(proc.stdout, proc.stderr, file=sys.stderr)
            return 1
        sharded = float(re.search(r"outputs, ([0-9.]+) ms", proc.stdout).group(1))
        unsharded = float(re.search(r"unsharded: 1 rank, ([0-9.]+) ms", proc.stdout).group(1))
        if n == 1 or baseline is None:
            baseline = unsharded  # every core given to OpenBLAS
        rows.append((n, sharded))
    e = eager_s * 1e3
    print(f"unsharded compiled program: {baseline:.1f} ms; PyTorch eager: {e:.1f} ms "
          f"(eager/unsharded {e / baseline:.2f})")
    print(f"{'ranks':>5} {'sharded ms':>11} {'unsharded/sharded':>18} {'eager/sharded':>14}")
    for n, sharded in rows:
        print(f"{n:>5} {sharded:>11.1f} {baseline / sharded:>18.2f} {e / sharded:>14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
