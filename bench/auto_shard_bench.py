"""shardx-auto-shard: solve time against depth, and budget -> plan -> modeled
and measured step time and peak (docs/Memory.md, "Automatic sharding under a
budget").

    SHARDX_BUILD=build python3 bench/auto_shard_bench.py [--depths 1,2,4] [--mesh 2x4]
        [--budgets mlp,block,llama] [--ranks 2,4,8] [--old BIN] [--depth-budget BYTES]

Depth table: a Llama-style train step (Adam) of ``layers``
``shardx_dev.models.LlamaBlock`` (RMSNorm, RoPE, grouped-query causal
attention, SwiGLU MLP; dim 16, 4 heads, 2 KV heads, hidden 32) and a final
RMSNorm, traced with a mesh and no layouts, on the mesh ``--mesh``; the
pass runs with the cost settings of python/tests/test_auto_shard.py (a slow
device and network, so that these small models trade compute against
collectives as large models do). Solve time is the pass's own
(``solve_seconds`` of its JSON, wall) and the CPU seconds of the
shardx-opt process (parsing and printing included), on this machine;
``--old BIN`` runs that shardx-opt on the same programs in the same run;
``--depth-budget BYTES`` runs it under a memory budget (default none). The
"plan" column is the plan's choice per group (the JSON's), to compare the
two builds' plans. From 5 layers the pass prices plans on the step cut to
3 layers and extrapolates by its middle layer's share (under a budget the
peak from the cuts to 3 and 4 layers: the "cut" column; docs/Memory.md). The
"phases" column is the plans priced per phase of the solve (the JSON's
``phases``: unary and pair terms of each round, the solves, the final
descent). The issue's figure is ``--depths 32 --mesh 2x4`` (32 layers on 8
ranks).

Budget table: per model (an MLP, one pre-norm transformer block, one
Llama-style block) and number of ranks (a 1-D mesh), budgets from none to
the smallest peak the pass finds, with the pass's default costs (the
mesh's hints, what ``shardx.compile(..., memory_budget=)`` uses). Modeled:
the pass's step time and peak. Measured: the step compiled by
``shardx.compile(step, mesh, memory_budget=B)`` and run on CPU threads, the
median of 5 calls (a time of this machine, not of the modeled device), and
its peak: the runtime meter's largest per-rank peak of program-allocated
bytes (shardx_dev.meter, as bench/memory_model_bench.py) plus the
arguments' bytes per rank, which the modeled peak also counts.
"""

import argparse
import json
import os
import re
import resource
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


class FinalNorm(nn.Module):
    """The stack's final RMSNorm, as models.LlamaBlock normalizes."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return models.LlamaBlock._norm(self, x, self.weight)


def llama(layers: int, dim=16, heads=4, hidden=32) -> nn.Module:
    """``layers`` models.LlamaBlock (RMSNorm, RoPE, grouped-query causal
    attention with 2 KV heads, SwiGLU MLP) and a final RMSNorm."""
    return nn.Sequential(*[models.LlamaBlock(dim, heads, 2, hidden) for _ in range(layers)],
                         FinalNorm(dim))


def step_of(kind: str, layers: int = 1, batch=16, dim=16, hidden=32):
    """(train step, example arguments) of an MLP, a transformer block or a
    Llama-style stack."""
    torch.manual_seed(0)
    if kind == "mlp":
        module = models.mlp(dim, hidden, dim)
        x, y = torch.randn(batch, dim), torch.randn(batch, dim)
    else:
        module = (nn.Sequential(*[models.Block(dim, 4, hidden) for _ in range(layers)])
                  if kind == "block" else llama(layers, dim, 4, hidden))
        x, y = torch.randn(batch, 4, dim), torch.randn(batch, 4, dim)
    step = TrainStep(module, F.mse_loss, "adam", lr=1e-3)
    return step, step.example_args([x], y)


def mesh_of(shape) -> Mesh:
    return Mesh(tuple(shape), ("dp", "tp")[:len(shape)] if len(shape) == 2 else ("x",))


def program(kind: str, layers: int, shape) -> str:
    step, args = step_of(kind, layers)
    return trace(step, args, mesh_of(shape), name="step")


RUN = os.path.join(BUILD, "bin", "shardx-run")


def auto_shard(text: str, options: str = "", ranks: int = 0, costs: str = COSTS, opt: str = OPT):
    """Runs the pass; with `ranks`, also runs the plan on that many threads
    (shardx-run, median of 5) and returns its measured time in ms."""
    with tempfile.TemporaryDirectory() as d:
        src, js, out = (os.path.join(d, n) for n in ("in.mlir", "auto.json", "out.mlir"))
        with open(src, "w") as f:
            f.write(text)
        t0 = time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([opt, f"--shardx-auto-shard={costs} auto-json={js} {options}", src,
                               "-o", out], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        data = json.load(open(js)) if os.path.exists(js) else None
        if data is not None:
            data["cpu_seconds"] = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
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


def measured(kind: str, shape, budget: int):
    """(median ms of 5 calls, measured peak bytes) of the step compiled by
    shardx.compile(..., memory_budget=budget) on threads."""
    import statistics
    import shardx
    from shardx_dev.meter import measured_peaks
    step, args = step_of(kind)
    f = shardx.compile(step, mesh_of(shape), memory_budget=budget)
    peaks = measured_peaks(f, args)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        f(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    arguments = f.memory_profile("tensors")[0]["argument_bytes"]
    return statistics.median(times), max(peaks) + arguments


def depth_table(depths, shape, old, budget=0):
    ranks = 1
    for s in shape:
        ranks *= s
    mesh = "x".join(map(str, shape))
    under = f", budget {budget} bytes" if budget else ""
    print(f"## Solve time against depth (Llama-style, {ranks} ranks, mesh {mesh}{under})\n")
    print("| build | layers | parameter groups | plans priced | cut | solve (s) | CPU (s) | search (s) "
          "| shardx-spmd (s) | modeled step (us) | modeled peak (bytes) | extrapolated step (us) "
          "| extrapolated peak (bytes) | plan | phases |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- "
          "| --- |")
    for depth in depths:
        text = program("llama", depth, shape)
        for name, binary in ([("before", old)] if old else []) + [("this", OPT)]:
            proc, data, wall, _ = auto_shard(text, f"memory-budget={budget}" if budget else "",
                                             opt=binary)
            if proc.returncode or not data:
                print(f"| {name} | {depth} | failed: {proc.stderr.strip()[:80]} | | | | | | | | | | | | |")
                continue
            cut = data.get("layer_cut")
            # Without a budget plans are priced by time alone: no
            # extrapolated peak (null).
            extra = (f"| {cut['extrapolated_time']:.1f} | {cut['extrapolated_peak'] or ''} "
                     if cut and "extrapolated_time" in cut else "| | ")
            plan = ",".join(map(str, data["plan"]["choices"]))
            # Plans per phase where this build reports them (not before it).
            phases = ", ".join(f"{k} {v['plans']}" for k, v in data.get("phases", {}).items()
                               if v["plans"])
            print(f"| {name} | {depth} | {len(data['groups'])} | {data['priced_plans']} "
                  f"| {', '.join(map(str, cut['depths'])) if cut else 'none'} "
                  f"| {data['solve_seconds']:.2f} | {data['cpu_seconds']:.2f} "
                  f"| {data.get('search_seconds', float('nan')):.2f} "
                  f"| {data.get('pipeline_seconds', float('nan')):.2f} "
                  f"| {data['plan']['time']:.1f} | {data['plan']['peak']} {extra}| {plan} | {phases} |",
                  flush=True)


def budget_table(kinds, ranks_list):
    print("\n## Budget -> plan (default costs; measured on CPU threads)\n")
    print("| model | ranks | budget (bytes) | plan | modeled step (us) | modeled peak (bytes) "
          "| measured step (ms) | measured peak (bytes) |")
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    for kind in kinds:
        for ranks in ranks_list:
            shape = (ranks,)
            text = program(kind, 1, shape)
            _, free, _, _ = auto_shard(text, costs="")
            low_proc, _, _, _ = auto_shard(text, "memory-budget=1", costs="")
            low = int(re.search(r"smallest modeled peak found is (\d+)", low_proc.stderr).group(1))
            top = free["plan"]["peak"]
            for label, budget in (("none", 0), ("", int(low + 0.5 * (top - low))), ("", low)):
                proc, data, _, _ = auto_shard(text, f"memory-budget={budget}" if budget else "",
                                              costs="")
                if proc.returncode:
                    print(f"| {kind} | {ranks} | {budget} | no plan fits | | | | |")
                    continue
                ms, peak = measured(kind, shape, budget or (1 << 40))
                print(f"| {kind} | {ranks} | {label or budget} | {summary(data)} "
                      f"| {data['plan']['time']:.1f} | {data['plan']['peak']} | {ms:.3f} | {peak} |",
                      flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", default="1,2,4", help="e.g. 2,4,8,16,32 (32 on --mesh 2x4: issue 34's figure)")
    ap.add_argument("--mesh", default="2x4")
    ap.add_argument("--old", default="", help="a shardx-opt to time on the same programs")
    ap.add_argument("--depth-budget", type=int, default=0,
                    help="the depth table's memory budget in bytes (0: none)")
    ap.add_argument("--budgets", default="mlp,block,llama", help="models of the budget table ('' for none)")
    ap.add_argument("--ranks", default="2,4,8")
    args = ap.parse_args(argv)
    if args.depths:
        depth_table([int(d) for d in args.depths.split(",")],
                    [int(s) for s in args.mesh.split("x")], args.old, args.depth_budget)
    if args.budgets:
        budget_table(args.budgets.split(","), [int(r) for r in args.ranks.split(",")])
    return 0


if __name__ == "__main__":
    sys.exit(main())
