"""Dropless expert parallelism chosen by the compiler: the forward of
``shardx_dev.grouped_moe.GroupedMoEBlock`` (torchtitan's global form)
compiled by ``shardx.compile`` with the experts' weights Shard(0) over
``ep`` and, in the same run on the same thread ranks,

- ``split``: the tokens Shard(0) over every mesh axis, so
  shardx-ragged-dispatch dispatches and combines the routed rows by
  ``shardx.ragged_all_to_all`` (each rank routes its own tokens);
- ``whole``: the tokens replicated over ``ep`` (Shard(0) over ``dp`` on
  the 2x2), propagation's plan with shardx-ragged-experts (every rank of
  an ep group routes all its tokens, the combine all-reduced);
- ``one``: the unsharded program (one rank);

each checked against eager first, then timed: medians of --repeat runs in
one process, the sharded ones as ratios to ``one``. The compute of
``split`` is its worst-case receive buffer's (each rank's experts run over
ep times its routed rows, masked by expert), so neither sharded plan is
expected to beat one rank at these sizes on a shared CPU; the figures say
what the two plans cost against each other.

Without ``--train``, on the 1-D meshes, also torchtitan's dropless
dispatch written out in eager PyTorch on that many gloo processes (one
thread each; ``--torch``, default on; bench/dropless_moe_bench.py's
worker: per-expert counts by a small all_to_all_single, then the rows, the
local experts, the rows back): the same block and tokens, its output
checked against eager, and ``split`` as a ratio to it (below 1: ShardX is
faster).

With ``--train`` the program is a train step instead (a linear layer
before the block, MSE loss, SGD; the backward's dispatch and combine by
the same pass under ``split``), checked against eager's loss and
parameters after one step.

    ~/.cache/shardx/venv/bin/python bench/ragged_dispatch_bench.py [--tokens 64] [--repeat 5] [--train]
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import shardx  # noqa: E402
from shardx import Mesh, Replicate as R, Shard as S  # noqa: E402
from shardx_dev.grouped_moe import GroupedMoEBlock  # noqa: E402

MESHES = {"ep2": (2,), "ep4": (4,), "dp2xep2": (2, 2)}


def median_seconds(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def placements(shape, params, split, train=None):
    if train is not None:
        if len(shape) == 1:
            mesh, weights, tok = Mesh(shape, ("ep",)), [S(0)], [S(0)] if split else [R()]
        else:
            mesh, weights = Mesh(shape, ("dp", "ep")), [R(), S(0)]
            tok = [S(0), S(0)] if split else [S(0), R()]
        return (mesh,) + train.placements(
            mesh, {f"1.{w}": weights for w in ("w1", "w2", "w3")}, [tok], tok)
    if len(shape) == 1:
        mesh, weights, tok = Mesh(shape, ("ep",)), [S(0)], [S(0)] if split else [R()]
    else:
        mesh, weights = Mesh(shape, ("dp", "ep")), [R(), S(0)]
        tok = [S(0), S(0)] if split else [S(0), R()]
    ins = [weights if k.startswith("w") else [R()] * len(shape) for k in params] + [tok]
    return mesh, ins


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--meshes", default="ep2,ep4,dp2xep2")
    ap.add_argument("--train", action="store_true", help="a train step (linear, block, MSE, SGD)")
    ap.add_argument("--torch", action=argparse.BooleanOptionalAction, default=True,
                    help="the forward's 1-D meshes against torchtitan's scheme on gloo")
    args = ap.parse_args()
    args.grouped = True  # the block dropless_moe_bench's gloo worker builds
    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = GroupedMoEBlock(args.dim, args.hidden, args.experts, top_k=2)
    x = torch.randn(args.tokens, args.dim)
    step = None
    if args.train:
        from shardx.train import TrainStep
        import torch.nn.functional as F
        step = TrainStep(torch.nn.Sequential(torch.nn.Linear(args.dim, args.dim, bias=False),
                                             module), F.mse_loss, "sgd", lr=0.1)
        call = step.example_args([x], torch.randn_like(x))
        fn = step
        loss, new_params, _ = step.run_eager(*call)
        want = [loss.detach().numpy()] + [p.detach().numpy() for p in new_params]
    else:
        params = {k: v.detach() for k, v in module.named_parameters()}
        call = (params, x)
        fn = lambda p, x: torch.func.functional_call(module, p, (x,))
        want = [module(x).detach().numpy()]

    def timed(f):
        out = f(*call)
        got = [out[0]] + list(out[1]) if args.train else [out]
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.to_torch().numpy(), w, rtol=1e-4, atol=1e-5)
        return median_seconds(lambda: f(*call), args.repeat)

    one = timed(shardx.compile(fn, None))
    print(f"{'train step' if args.train else 'forward'}: tokens {args.tokens}, dim {args.dim}, "
          f"hidden {args.hidden}, experts {args.experts}, top-2; one rank {one * 1e3:.2f} ms "
          f"(median of {args.repeat})")
    gloo = args.torch and not args.train
    print(f"{'mesh':8} {'split ms':>9} {'/one':>6} {'whole ms':>9} {'/one':>6} {'split/whole':>12}"
          + (f" {'torch gloo ms':>14} {'split/torch':>12}" if gloo else ""))
    for name in args.meshes.split(","):
        shape = MESHES[name]
        t = {}
        for split in (True, False):
            if args.train:
                mesh, ins, outs = placements(shape, None, split, step)
                t[split] = timed(shardx.compile(fn, mesh, ins, outs))
            else:
                mesh, ins = placements(shape, call[0], split)
                t[split] = timed(shardx.compile(fn, mesh, ins))
        line = (f"{name:8} {t[True] * 1e3:9.2f} {t[True] / one:6.2f} {t[False] * 1e3:9.2f} "
                f"{t[False] / one:6.2f} {t[True] / t[False]:12.2f}")
        if gloo and len(shape) == 1:
            from dropless_moe_bench import torch_dropless
            y, ms = torch_dropless(args, shape[0])
            np.testing.assert_allclose(y, want[0], rtol=1e-4, atol=1e-5)
            line += f" {ms * 1e3:14.2f} {t[True] / ms:12.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
