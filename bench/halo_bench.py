"""Spatial (domain) parallelism: step time of a U-Net-like CNN train step
(models.HaloUNet: 3x3 convolutions, ReLU, pooling, upsampling, skip
connection; forward, backward, SGD) with H and W split over a 2x2 mesh
(halo exchanges, docs/Rules.md "Windowed ops"), against the same program
unsharded on one rank, measured in one run by `shardx-run --check
--repeat` (threads backend), plus the plan's communication per rank from
`shardx-print-plan` (halo bytes and reshard bytes).

    ~/.cache/shardx/venv/bin/python bench/halo_bench.py [--side 64] [--width 8] [--repeat 5] [--model strided]

`--model strided` is models.StridedUNet: the downsampling is a stride-2 3x3
convolution (its input gradient a stride-2 insert and a stride-1
convolution), so the halos include stride-2 windows (one row before each
shard, none after). In a group of two each halo exchange sends every rank
the rows its windows read past its shard's edge (`max(low, high)` rows of
the local row extent), the lower bound; the plan should move no activation
otherwise (reshard bytes are the weights' and gradients').

The ratio unsharded/sharded above 1 means the 4 ranks beat one; on a
machine with fewer than 4 cores the ranks share cores and the ratio says
more about the overhead than about the scaling.
"""

import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from shardx import Mesh, Shard as S, TrainStep, trace  # noqa: E402
from shardx_dev.planrun import PlanRunError, plan_and_time  # noqa: E402
from shardx_dev import models  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--side", type=int, default=64, help="image height and width")
    ap.add_argument("--width", type=int, default=8, help="channels of the hidden layers")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--model", choices=("unet", "strided"), default="unet")
    args = ap.parse_args()
    torch.manual_seed(0)
    module = (models.HaloUNet(width=args.width) if args.model == "unet"
              else models.StridedUNet(width=args.width))
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    x = torch.randn(args.batch, 2, args.side, args.side)
    y = torch.randn(args.batch, 2, args.side, args.side)
    mesh = Mesh((2, 2), ("h", "w"))
    ins, outs = step.placements(mesh, {}, [[S(2), S(3)]], [S(2), S(3)])
    example = step.example_args([x], y)
    text = trace(step, example, mesh, ins, outs, name="unet_step")
    try:
        plan, sharded, unsharded = plan_and_time(text, args.repeat, example=example)
    except PlanRunError as e:
        print(e, file=sys.stderr)
        return 1
    halos = [int(b) for b in re.findall(r"remark: halo .*: (\d+) bytes/rank", plan)]
    reshards = [int(b) for b in re.findall(r"remark: plan .*?, (\d+) bytes/rank", plan)]
    print(f"{type(module).__name__} train step: batch {args.batch}, {args.side}x{args.side}, width {args.width}, "
          f"SGD; 2x2 mesh (H, W split); {os.cpu_count()} cores; median of {args.repeat} runs")
    print(f"plan: {len(halos)} halo exchanges, {sum(halos)} bytes/rank; {len(reshards)} reshards, "
          f"{sum(reshards)} bytes/rank")
    print(f"unsharded {unsharded:.2f} ms, sharded {sharded:.2f} ms, "
          f"unsharded/sharded {unsharded / sharded:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
