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
the overhead than about the scaling. PyTorch has no expert-parallel style
in torch.distributed.tensor.parallel (no DTensor EP), and torchtitan is
not a package this environment installs; on the 1-D meshes the bench also
runs torchtitan's scheme written out in eager PyTorch on gloo (``--torch``,
default on): the same block with each rank holding its experts' weights,
dispatch and combine by ``all_to_all_single`` (autograd through
torch.distributed.nn), the router's gradient all-reduced, SGD; its first
loss is checked against the unsharded eager loss, and its median step time
is put against ShardX's sharded one.
"""

import argparse
import math
import os
import re
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from shardx import Mesh, Replicate as R, Shard as S, TrainStep, trace  # noqa: E402
from shardx_dev.planrun import PlanRunError, check_and_time, print_plan  # noqa: E402
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
    module, x, y = _module_and_data(args, buffer if constrain else None)
    step = TrainStep(module, F.mse_loss, "sgd", lr=0.1)
    mesh = Mesh(shape, axes)
    ins, outs = step.placements(mesh, {"w1": weights, "w2": weights, "w3": weights}, [tokens],
                                tokens)
    return trace(step, step.example_args([x], y), mesh, ins, outs, name=f"moe_{mesh_name}")


def plan_bytes(src, buffer_numel):
    """(buffer all-to-alls' bytes, every plan's bytes, collectives) per rank."""
    out = print_plan(src)
    a2a, total, colls = [], 0, 0
    for src_l, dst_l, dims, n, nbytes in _PLAN.findall(out):
        total += int(nbytes)
        colls += int(n)
        if (math.prod(int(d) for d in dims.split("x")) == buffer_numel and n == "1"
                and not re.search(r"R|P", src_l + dst_l)):
            a2a.append(int(nbytes))
    return a2a, total, colls


def _torch_ep_worker(rank, n, args, port, queue):
    """One rank of the eager torch EP step (see the module documentation)."""
    import warnings
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_to_all_single
    warnings.simplefilter("ignore")  # torch.distributed.nn's deprecation notice, per call
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    module, x, y = _module_and_data(args, None)
    el, gl = args.experts // n, args.groups // n
    mine = slice(rank * el, (rank + 1) * el)
    params = [module.router.weight] + [
        torch.nn.Parameter(w[mine].detach().clone()) for w in (module.w1, module.w3, module.w2)]
    xl, yl = x[rank * gl:(rank + 1) * gl], y[rank * gl:(rank + 1) * gl]

    def a2a(t):
        t = t.contiguous()  # (an einsum's result may be a permuted view)
        return all_to_all_single(torch.empty_like(t), t)

    def step():
        dispatch, combine = module.route(xl)
        xe = a2a(torch.einsum("gsec,gsd->egcd", dispatch, xl))       # [n*el, gl, C, D]
        xe = xe.reshape(n, el, *xe.shape[1:]).transpose(0, 1).reshape(el, n * gl, *xe.shape[2:])
        ye = import_models().moe_experts(xe, *params[1:])             # [el, n*gl, C, D]
        ye = ye.reshape(el, n, gl, *ye.shape[2:]).transpose(0, 1).reshape(n * el, gl, *ye.shape[2:])
        out = torch.einsum("gsec,egcd->gsd", combine, a2a(ye))
        loss = ((out - yl) ** 2).sum() / y.numel()
        loss.backward()
        dist.all_reduce(params[0].grad)
        with torch.no_grad():
            for p in params:
                p -= 0.1 * p.grad
                p.grad = None
        total = loss.detach().clone()
        dist.all_reduce(total)
        return total.item()

    first = step()
    times = []
    for _ in range(args.repeat):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    if rank == 0:
        queue.put((first, statistics.median(times)))
    dist.destroy_process_group()


def import_models():
    return models


def torch_ep(args, n):
    """(first loss, median step ms) of the eager torch EP on n gloo ranks."""
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_torch_ep_worker, args=(n, args, port, queue), nprocs=n, join=True,
                       start_method="spawn")
    return queue.get()


def _module_and_data(args, buffer):
    torch.manual_seed(0)
    module = models.MoEBlock(args.dim, args.hidden, args.experts, top_k=2,
                             capacity=args.capacity, buffer=buffer)
    x = torch.randn(args.groups, args.tokens, args.dim)
    y = torch.randn(args.groups, args.tokens, args.dim)
    return module, x, y


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
    ap.add_argument("--torch", action=argparse.BooleanOptionalAction, default=True,
                    help="also run the eager torch EP on gloo (1-D meshes)")
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
            try:
                sharded, unsharded = check_and_time(os.path.join(d, f"{name}_True.mlir"),
                                                    args.repeat)
            except PlanRunError as e:
                print(e, file=sys.stderr)
                return 1
            (a2a, total, colls), (fa2a, ftotal, fcolls) = figures[True], figures[False]
            print(f"{name} {'x'.join(map(str, shape))}: EP plan {len(a2a)} buffer all-to-alls of "
                  f"{sorted(set(a2a))} bytes/rank (routed tokens: {routed}), {colls} collectives, "
                  f"{total} bytes/rank in all; unconstrained plan {len(fa2a)} buffer all-to-alls, "
                  f"{fcolls} collectives, {ftotal} bytes/rank")
            print(f"    unsharded {unsharded:.2f} ms, sharded {sharded:.2f} ms, "
                  f"unsharded/sharded {unsharded / sharded:.2f}")
            if args.torch and len(shape) == 1:
                module, x, y = _module_and_data(args, None)
                eager = F.mse_loss(module(x), y).item()
                loss, ms = torch_ep(args, ranks)
                print(f"    torch EP on gloo ({ranks} processes, all_to_all_single): {ms:.2f} ms, "
                      f"first loss {loss:.6f} (eager {eager:.6f}); torch/ShardX {ms / sharded:.2f}")
                if abs(loss - eager) > 1e-4 * abs(eager):
                    print("torch EP's loss differs from eager's", file=sys.stderr)
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
