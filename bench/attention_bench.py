"""Attention as one op against the math backend's ops: step time of a
Llama-style block's train step (models.LlamaBlock with
F.scaled_dot_product_attention(is_causal=True): RMSNorm, RoPE, grouped-query
causal attention, SwiGLU; forward, backward, SGD) traced with SDPA as
``shardx.attention`` (the default, importer/attention.py) and traced as the
math backend's ops (``composite(False)``), both through ``shardx.compile``
on CPU threads, unsharded and with the sequence split over ``--ranks``,
the two interleaved in one run (medians of ``--repeat`` steps), and PyTorch
eager on the same step.

    ~/.cache/shardx/venv/bin/python bench/attention_bench.py [--seq 256 1024] [--ranks 1 2]

The ratio math/composite above 1 means the composite op's step is faster.
``--pieces`` also times the composite step with its attention computed
whole (``attention_piece_rows=0``) against the default, which runs an
unsharded causal attention by the pieces of at least 128 rows its mask
shows (docs/Rules.md, "Causal attention in pieces"): whole/composite above
1 means the pieces are faster.
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import shardx  # noqa: E402
from shardx import Mesh, Shard as S, TrainStep  # noqa: E402
from shardx.importer.attention import composite  # noqa: E402
from shardx_dev import models  # noqa: E402


def measure(args, seq, ranks):
    torch.manual_seed(0)
    block = models.LlamaBlock(args.dim, args.heads, args.kv_heads, args.hidden, sdpa=True)
    step = TrainStep(block, F.mse_loss, "sgd", lr=0.1)
    x, y = torch.randn(1, seq, args.dim), torch.randn(1, seq, args.dim)
    mesh = Mesh((ranks,), ("cp",))
    ins, outs = step.placements(mesh, {}, [[S(1)]], [S(1)])
    example = step.example_args([x], y)
    runs = {}
    for form in ("composite", "math") + (("whole",) if args.pieces else ()):
        with composite(form != "math"):
            f = shardx.compile(step, mesh, ins, outs, name=f"attention_bench_{form}",
                               attention_piece_rows=0 if form == "whole" else None)
            f(*example)  # compile
        runs[form] = f
    # The two compiled forms interleaved (they share the machine's noise);
    # eager after them, not between: PyTorch's OpenMP threads spin for a
    # while after each op and would slow the call that follows.
    times = {form: [] for form in runs}
    for _ in range(args.repeat):
        for form, f in runs.items():
            start = time.perf_counter()
            f(*example)
            times[form].append(time.perf_counter() - start)
    times["eager"] = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        step.run_eager(*example)
        times["eager"].append(time.perf_counter() - start)
    return {form: statistics.median(t) * 1e3 for form, t in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq", type=int, nargs="+", default=[256, 1024])
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--pieces", action="store_true",
                   help="also time the composite step with its attention whole")
    args = p.parse_args()
    print(f"LlamaBlock({args.dim}, {args.heads} heads, {args.kv_heads} kv heads, {args.hidden}), "
          f"causal SDPA, batch 1; {os.cpu_count()} cores; medians of {args.repeat} steps")
    print("positions  ranks  composite ms  math ms  eager ms  math/composite  eager/composite"
          + ("  whole ms  whole/composite" if args.pieces else ""))
    for seq in args.seq:
        for ranks in args.ranks:
            t = measure(args, seq, ranks)
            print(f"{seq:9d}  {ranks:5d}  {t['composite']:12.2f}  {t['math']:7.2f}  {t['eager']:8.2f}"
                  f"  {t['math'] / t['composite']:14.2f}  {t['eager'] / t['composite']:15.2f}"
                  + (f"  {t['whole']:8.2f}  {t['whole'] / t['composite']:15.2f}"
                     if args.pieces else ""))


if __name__ == "__main__":
    main()
