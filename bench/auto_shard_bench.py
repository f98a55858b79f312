"""shardx-auto-shard: solve time against depth, and budget -> plan -> modeled
step time and peak (docs/Memory.md, "Automatic sharding under a budget").

    SHARDX_BUILD=build python3 bench/auto_shard_bench.py [--depths 1,2,4] [--ranks 8]

Each program is a train step (Adam) of a stack of ``shardx_dev.models.Block``
pre-norm transformer blocks, traced with a mesh and no layouts; the pass runs
with the cost settings of python/tests/test_auto_shard.py (a slow device and
network, so that these small models trade compute against collectives as
large models do). Solve time is the pass's own (`solve_seconds` of its
JSON), on this machine. The budget table also runs each plan on CPU
threads (shardx-run, median of 5 runs): a measured time on this machine,
not the modeled device.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from shardx.importer import trace  # noqa: E402
from shardx.placements import Mesh  # noqa: E402
from shardx.train import TrainStep  # noqa: E402
from shardx_dev import models  # noqa: E402

BUILD = os.environ.get("SHARDX_BUILD", "build")
OPT = os.path.join(BUILD, "bin", "shardx-opt")
COSTS = "compute-rate=1e9 bandwidth=1e8 latency=2e-5"


def program(layers: int, ranks: int, dim=16, hidden=32, batch=16) -> str:
    torch.manual_seed(0)
    module = nn.Sequential(*[models.Block(dim, 4, hidden) for _ in range(layers)])
    x, y = torch.randn(batch, 4, dim), torch.randn(batch, 4, dim)
    step = TrainStep(module, F.mse_loss, "adam", lr=1e-3)
    return trace(step, step.example_args([x], y), Mesh((ranks,), ("x",)), name="step")


RUN = os.path.join(BUILD, "bin", "shardx-run")


def auto_shard(text: str, options: str = "", ranks: int = 0):
    """Runs the pass; with `ranks`, also runs the plan on that many threads
    (shardx-run, median of 5) and returns its measured time in ms."""
    with tempfile.TemporaryDirectory() as d:
        src, js, out = (os.path.join(d, n) for n in ("in.mlir", "auto.json", "out.mlir"))
        with open(src, "w") as f:
            f.write(text)
        t0 = time.perf_counter()
        proc = subprocess.run([OPT, f"--shardx-auto-shard={COSTS} auto-json={js} {options}", src,
                               "-o", out], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        data = json.load(open(js)) if os.path.exists(js) else None
        measured = None
        if ranks and proc.returncode == 0:
            run = subprocess.run([RUN, f"--ranks={ranks}", "--repeat=5", out], capture_output=True, text=True)
            m = re.search(r"outputs, ([0-9.]+) ms", run.stdout + run.stderr)
            measured = float(m.group(1)) if m else None
    return proc, data, wall, measured


def summary(data) -> str:
    plan = {g["name"]: g["choices"][c] for g, c in zip(data["groups"], data["plan"]["choices"])}
    inputs = plan.pop("inputs", "[R]")
    sharded = sum(1 for c in plan.values() if c != "[R]")
    return f"inputs {inputs}, {sharded}/{len(plan)} parameter groups sharded"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="1,2,4")
    ap.add_argument("--ranks", type=int, default=8)
    args = ap.parse_args(argv)

    print(f"## Solve time against depth ({args.ranks} ranks, 1-D mesh)\n")
    print("| layers | parameter groups | plans priced | solve (s) | modeled step (us) | peak (bytes) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for depth in [int(d) for d in args.depths.split(",")]:
        proc, data, wall, _ = auto_shard(program(depth, args.ranks))
        if proc.returncode:
            print(proc.stderr, file=sys.stderr)
            return 1
        print(f"| {depth} | {len(data['groups'])} | {data['priced_plans']} | {data['solve_seconds']:.2f} "
              f"| {data['plan']['time']:.1f} | {data['plan']['peak']} |")

    ranks = 4
    text = program(1, ranks)
    print(f"\n## Budget -> plan (transformer block, {ranks} ranks)\n")
    proc, free, _, free_ms = auto_shard(text, ranks=ranks)
    low_proc, _, _, _ = auto_shard(text, "memory-budget=1")
    low = int(re.search(r"smallest modeled peak found is (\d+)", low_proc.stderr).group(1))
    top = free["plan"]["peak"]
    print("| budget (bytes) | plan | modeled step (us) | modeled peak (bytes) | measured step (ms, threads) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    print(f"| none | {summary(free)} | {free['plan']['time']:.1f} | {top} | {free_ms} |")
    for frac in (0.75, 0.5, 0.25, 0.0):
        budget = int(low + frac * (top - low))
        proc, data, _, ms = auto_shard(text, f"memory-budget={budget}", ranks=ranks)
        if proc.returncode:
            print(f"| {budget} | no plan fits | | | |")
            continue
        print(f"| {budget} | {summary(data)} | {data['plan']['time']:.1f} | {data['plan']['peak']} | {ms} |")
    print(f"| {low - 1} | no plan fits (smallest peak found {low}) | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
