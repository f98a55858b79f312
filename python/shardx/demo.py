"""The README's main command: train a small model with ``shardx.compile`` on
a 2x2 dp x tp mesh of CPU threads and check every step's loss against eager
PyTorch.

    python3 -m shardx.demo [--steps 300] [--plot build/train_loss.png]

The model is an MLP (32 -> 128 -> 32, GELU) learning a fixed random teacher
network with MSE and SGD with momentum; the batch is split over dp, fc1 is
column- and fc2 row-parallel over tp (Megatron). Parameters and momentum
stay on the ranks between steps (donated: written into the old buffers); each step moves
only the batch in and the loss out. The same steps run in eager PyTorch,
and the two loss curves must agree to rtol 1e-5 (f32); both are saved as a
PNG.
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m shardx.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--plot", default="train_loss.png", help="where to save the loss curves (PNG)")
    args = ap.parse_args(argv)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from tqdm import tqdm

    import shardx
    from shardx import Mesh, Replicate as R, Shard as S, TrainStep, eager_context

    # Tiny ops: PyTorch's intra-op threads only contend with each other
    # (10x slower eager steps on a busy 2-core machine).
    torch.set_num_threads(1)
    torch.manual_seed(0)
    mesh = Mesh((2, 2), ("dp", "tp"))
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32))
    teacher = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 32)).requires_grad_(False)
    step = TrainStep(model, F.mse_loss, "sgd", lr=args.lr, momentum=0.9)
    ins, outs = step.placements(mesh, {
        "0.weight": [R(), S(0)], "0.bias": [R(), S(0)],   # fc1 column-parallel over tp
        "2.weight": [R(), S(1)],                          # fc2 row-parallel over tp
    }, [[S(0), R()]], [S(0), R()])                        # batch over dp
    train = shardx.compile(step, mesh, ins, outs, donate=(0, 1))

    gen = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(args.steps):
        x = torch.randn(args.batch, 32, generator=gen)
        batches.append((x, teacher(x)))
    params, state, _, _ = step.example_args([batches[0][0]], batches[0][1])

    print(f"[shardx] MLP 32-128-32 (GELU), SGD momentum 0.9, batch {args.batch}, "
          f"{args.steps} steps on a 2x2 dp x tp mesh ({mesh.size} CPU thread ranks)")
    start = time.perf_counter()
    sharded, p, s = [], params, state
    bar = tqdm(batches, desc="shardx (2x2 threads)", unit="step", file=sys.stdout, mininterval=0.5)
    for i, (x, y) in enumerate(bar):
        loss, p, s = train(p, s, (x,), y)
        sharded.append(loss.item())
        if i == 0:
            compiled_at = time.perf_counter()
        if i % 10 == 0:
            bar.set_postfix(loss=f"{sharded[-1]:.5f}", refresh=False)
    bar.close()
    sharded_time = time.perf_counter() - compiled_at
    eager, p, s = [], params, state
    bar = tqdm(batches, desc="eager PyTorch      ", unit="step", file=sys.stdout, mininterval=0.5)
    eager_start = time.perf_counter()
    with eager_context():
        for i, (x, y) in enumerate(bar):
            loss, p, s = step(p, s, (x,), y)
            eager.append(loss.item())
            if i % 10 == 0:
                bar.set_postfix(loss=f"{eager[-1]:.5f}", refresh=False)
    bar.close()
    eager_time = time.perf_counter() - eager_start

    a, b = np.array(sharded), np.array(eager)
    rel = np.abs(a - b) / np.abs(b)
    print(f"[shardx] first step (trace + compile or cache load + run): {compiled_at - start:.1f} s; "
          f"then {(args.steps - 1) / sharded_time:.0f} steps/s sharded, "
          f"{args.steps / eager_time:.0f} steps/s eager (1 thread); "
          f"compile cache: {shardx.cache_stats.hits} hit(s), {shardx.cache_stats.misses} miss(es)")
    print(f"{'step':>6} {'shardx loss':>14} {'eager loss':>14} {'rel diff':>10}")
    for i in sorted(set(list(range(0, args.steps, max(1, args.steps // 6))) + [args.steps - 1])):
        print(f"{i:>6} {a[i]:>14.7f} {b[i]:>14.7f} {rel[i]:>10.2e}")
    plt.figure(figsize=(7, 4))
    plt.plot(b, label="eager PyTorch", linewidth=3, alpha=0.5)
    plt.plot(a, "--", label="shardx.compile (2x2 dp x tp, threads)")
    plt.yscale("log")
    plt.xlabel("step")
    plt.ylabel("MSE loss")
    plt.title(f"Sharded vs eager training (max rel diff {rel.max():.1e})")
    plt.legend()
    plt.tight_layout()
    plt.savefig(args.plot, dpi=100)
    print(f"[shardx] loss curves saved to {os.path.abspath(args.plot)}")
    ok = bool((rel <= args.rtol).all())
    print(f"[shardx] sharded loss {'matches' if ok else 'DOES NOT match'} eager at every step: "
          f"max rel diff {rel.max():.2e} (rtol {args.rtol:g}), "
          f"loss {b[0]:.4f} -> {b[-1]:.4f}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
