"""Expert parallelism: step time of a Mixtral-style MoE block train step
(models.MoEBlock: router, top-2 softmax gating, SiLU-gated experts, GShard
capacity dispatch into an [E, G, C, D] buffer; forward, backward, SGD) with
the experts' weights split on E over 2 and 4 thread ranks ("ep") and over
"ep" of a 2x2 (dp, ep) mesh, the token groups split over every rank, each
against the same program unsharded on one rank, measured in one run by
`shardx-run --check --repeat` (threads backend). For each mesh the plan's
communication per rank from `shardx-print-plan`: the all-to-alls of the
expert buffer against the routed tokens' bytes (each rank sends the slots
of the other ranks' experts, capacity-padded), and the whole plan's bytes
with the buffer stated in the token layout (``buffer=``, EP) against the
plan propagation chooses without it (today's plan for the same inputs).

    ~/.cache/shardx/venv/bin/python bench/moe_bench.py [--dim 64] [--hidden 128] [--repeat 5]

The ratio unsharded/sharded above 1 means the ranks beat one; on a machine
with fewer cores than ranks they share cores and the ratio says more about
the overhead than about the scaling. There is no DTensor EP to compare on
CPU: PyTorch has no expert-parallel style in torch.distributed.tensor.parallel,
and torchtitan's (its MoE's all_to_all_single dispatch) is not a package
this environment installs.
"""

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from shardx import Mesh, Replicate as R, Shard as S, TrainStep, trace  # noqa: E402
from shardx.artifact import find_tool  # noqa: E402
from shardx_dev import models  # noqa: E402

MESHES = {
    # name: (shape, axis names, expert weights', tokens', buffer's placements)
    "ep2": ((2,), ("ep",), [S(0)], [S(0)], [S(1)]),
    "ep4": ((4,), ("ep",), [S(0)], [S(0)], [S(1)]),
    "dp2xep2": ((2, 2), ("dp", "ep"), [R(), S(0)], [S(0), S(0)], [S(1), S(0)]),
}

_PLAN = re.compile(r"remark: plan (\[[^\]]*\])(?:, strides = \{[^}]*\})? -> (\[[^\]]*\])"
                   r"(?:, strides = \{[^}]*\})? for tensor<([0-9x]+)xf32>: \d+ steps?, (\d+) "
                   r"collectives?, (\d+) bytes/rank")


def program(args, mesh_name, constrain):
    shape, axes, weights, tokens, buffer = MESHES[mesh_name]
    torch.manual_seed(0)
    module = models.MoEBlock(args.dim, args.hidden, args.experts, top_k=2,
                             capacity=args.capacity, buffer=buffer if constrain else None)
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    x = torch.randn(args.groups, args.tokens, args.dim)
    y = torch.randn(args.groups, args.tokens, args.dim)
    mesh = Mesh(shape, axes)
    ins, outs = step.placements(mesh, {"w1": weights, "w2": weights, "w3": weights}, [tokens],
                                tokens)
    return trace(step, step.example_args([x], y), mesh, ins, outs, name=f"moe_{mesh_name}")


def plan_bytes(src, buffer_numel):
    """(buffer all-to-alls' bytes, every plan's bytes, collectives) per rank."""
    out = subprocess.run([find_tool("shardx-opt"), src, "--shardx-propagate",
                          "--shardx-insert-reshards", "--shardx-print-plan", "-o", os.devnull],
                         capture_output=True, text=True, check=True).stderr
    a2a, total, colls = [], 0, 0
    for src_l, dst_l, dims, n, nbytes in _PLAN.findall(out):
        total += int(nbytes)
        colls += int(n)
        if (math.prod(int(d) for d in dims.split("x")) == buffer_numel and n == "1"
                and not re.search(r"R|P", src_l + dst_l)):
            a2a.append(int(nbytes))
    return a2a, total, colls


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=8, help="token groups (split over the ranks)")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per group")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--capacity", type=int, default=None,
                    help="slots per expert and group (default: GShard's 1.25 * 2 * tokens / experts)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--meshes", default="ep2,ep4,dp2xep2")
    args = ap.parse_args()
    if args.capacity is None:
        args.capacity = math.ceil(1.25 * 2 * args.tokens / args.experts)
    print(f"MoEBlock train step: {args.groups} groups x {args.tokens} tokens, dim {args.dim}, "
          f"hidden {args.hidden}, {args.experts} experts, top-2, capacity {args.capacity}, SGD; "
          f"{os.cpu_count()} cores; median of {args.repeat} runs (threads backend)")
    buffer_numel = args.experts * args.groups * args.capacity * args.dim
    with tempfile.TemporaryDirectory() as d:
        for name in args.meshes.split(","):
            shape = MESHES[name][0]
            ranks, ep = math.prod(shape), shape[-1]
            routed = 4 * buffer_numel // ranks * (ep - 1) // ep
            figures = {}
            for constrain in (True, False):
                src = os.path.join(d, f"{name}_{constrain}.mlir")
                with open(src, "w") as f:
                    f.write(program(args, name, constrain))
                figures[constrain] = plan_bytes(src, buffer_numel)
            run = subprocess.run([find_tool("shardx-run"), os.path.join(d, f"{name}_True.mlir"),
                                  "--check", "--repeat", str(args.repeat), "--rtol", "1e-3",
                                  "--atol", "1e-4"], capture_output=True, text=True)
            if run.returncode != 0:
                print(run.stdout[-2000:], run.stderr[-2000:], file=sys.stderr)
                return 1
            sharded = float(re.search(r"outputs, ([0-9.]+) ms", run.stdout).group(1))
            unsharded = float(re.search(r"unsharded: 1 rank, ([0-9.]+) ms", run.stdout).group(1))
            (a2a, total, colls), (fa2a, ftotal, fcolls) = figures[True], figures[False]
            print(f"{name} {'x'.join(map(str, shape))}: EP plan {len(a2a)} buffer all-to-alls of "
                  f"{sorted(set(a2a))} bytes/rank (routed tokens: {routed}), {colls} collectives, "
                  f"{total} bytes/rank in all; unconstrained plan {len(fa2a)} buffer all-to-alls, "
                  f"{fcolls} collectives, {ftotal} bytes/rank")
            print(f"    unsharded {unsharded:.2f} ms, sharded {sharded:.2f} ms, "
                  f"unsharded/sharded {unsharded / sharded:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
