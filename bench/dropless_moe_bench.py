"""Capacity-free (dropless) expert parallelism: the forward of the zoo's
Mixtral-style block (models.MoEBlock(capacity=None)) as the local program
of shardx_dev.dropless_moe (dispatch and combine by
shardx.ragged_all_to_all with the counts the routing gives at run time),
compiled once per mesh and run on thread ranks: experts over 2 and 4
ranks ("ep") and over "ep" of a 2x2 (dp, ep) mesh, each against the same
program on one rank (mesh (1,): the exchanges move nothing) and against
the block's eager forward, medians of --repeat runs in one process. Each
run is checked against eager first. For each mesh: the rows the exchanges
move between ranks (the routed items whose expert is on another rank, the
only rows sent), their bytes (the same rows each way; besides them the
dispatch sends each member its per-expert counts, and the rows' exchanges
are given the counts they receive), and the receive buffer each rank
holds (the worst case, every item of its ep group). On the 1-D meshes also torchtitan's
dropless scheme written out in eager PyTorch on gloo (``--torch``, default
on; torchtitan is not installed here): per-expert counts by a small
``all_to_all_single``, rows by ``all_to_all_single`` with those split
sizes, experts on the sorted runs; checked against eager, timed in the
same run.

    ~/.cache/shardx/venv/bin/python bench/dropless_moe_bench.py [--tokens 256] [--repeat 5]
        [--baseline OLD/dropless_moe.py]

Each mesh also says the runtime collectives of one MoE layer's forward
(from the program text: the per-expert counts' all-to-all, and each
ragged all-to-all, which is two collectives, counts then rows, unless it
is given the counts it receives; the gathered output and the moved-row
total, which only the check reads, are not counted). ``--baseline``: a
file holding another ``local_program`` (e.g. an older dropless_moe.py),
compiled and timed in the same run, with its collectives.

The bench times the forward only (the program's backward,
``local_program(backward=True)``, is checked in test_dropless_moe.py). The local experts run on the
whole worst-case buffer, masked: ep times the compute of the routed rows
per local expert, the price of static shapes, so the sharded step is not
expected to beat one rank at these sizes; the figures say what the
exchange costs and moves. Eager runs on one torch thread.
"""

import argparse
import math
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from shardx.artifact import Artifact, compile_mlir  # noqa: E402
from shardx_dev import models  # noqa: E402
from shardx_dev.dropless_moe import local_program, moved_rows, placement  # noqa: E402

MESHES = {"one": (1,), "ep2": (2,), "ep4": (4,), "dp2xep2": (2, 2)}


def layer_collectives(program):
    """The runtime collectives of the MoE layer in ``program`` (a
    local_program's text): one per shardx.all_to_all, two per
    shardx.ragged_all_to_all that exchanges the counts, one per one given
    them."""
    n = 0
    for line in program.splitlines():
        if "shardx.all_to_all" in line:
            n += 1
        elif "shardx.ragged_all_to_all" in line:
            n += 1 if " recv_counts = " in line else 2
    return n


def load_program(path):
    """``local_program`` of the Python file at ``path``."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("baseline_dropless_moe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.local_program


def seconds(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median_seconds(fn, repeat):
    return statistics.median(seconds(fn) for _ in range(repeat))


def _torch_worker(rank, n, args, port, queue):
    """One gloo rank of torchtitan's dropless dispatch written out in eager
    PyTorch (forward): route this rank's tokens, sort the (token, choice)
    items by expert, exchange the per-rank counts with a small
    all_to_all_single, then the rows with all_to_all_single and those split
    sizes, run the local experts on their runs, send the rows back, un-sort
    and sum with the gates. Rank 0 gathers the output to check it."""
    import torch.distributed as dist
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    block, x = _block_and_tokens(args)
    _, ep, el = placement((n,), args.experts)
    rows = math.ceil(args.tokens / n)
    xl = x[rank * rows:(rank + 1) * rows]
    lo = rank * el
    w1, w3, w2 = (w[lo:lo + el].detach() for w in (block.w1, block.w3, block.w2))

    def forward():
        probs = torch.softmax(block.router(xl), dim=-1)
        gates, chosen = probs.topk(2, dim=-1)
        gates = gates / gates.sum(-1, keepdim=True)
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)
        items = xl.repeat_interleave(2, dim=0)[order]
        # Per-expert counts first (el per member), then the rows.
        ecount = torch.bincount(flat, minlength=n * el)
        recv_e = torch.empty_like(ecount)
        dist.all_to_all_single(recv_e, ecount)
        send = ecount.view(n, el).sum(1)
        recv = recv_e.view(n, el).sum(1)
        got = torch.empty(int(recv.sum()), args.dim)
        dist.all_to_all_single(got, items, recv.tolist(), send.tolist())
        # The received rows' experts: each sender's run is sorted by expert.
        ids = torch.repeat_interleave(torch.arange(el).repeat(n) + lo, recv_e)
        out = torch.zeros_like(got)
        for e in range(el):
            m = ids == lo + e
            if m.any():
                h = torch.nn.functional.silu(got[m] @ w1[e]) * (got[m] @ w3[e])
                out[m] = h @ w2[e]
        back = torch.empty_like(items)
        dist.all_to_all_single(back, out, send.tolist(), recv.tolist())
        y = torch.empty_like(back)
        y[order] = back
        return (y.reshape(-1, 2, args.dim) * gates[..., None]).sum(1)

    with torch.no_grad():
        y = forward()
        parts = [torch.empty(rows, args.dim) for _ in range(n)]
        dist.all_gather(parts, torch.cat([y, torch.zeros(rows - y.shape[0], args.dim)]))
        times = []
        for _ in range(args.repeat):
            dist.barrier()
            t0 = time.perf_counter()
            forward()
            times.append(time.perf_counter() - t0)
    if rank == 0:
        queue.put((torch.cat(parts)[:args.tokens].numpy(), statistics.median(times)))
    dist.destroy_process_group()


def torch_dropless(args, n):
    """(output, median forward seconds) of the eager scheme on n gloo ranks."""
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    procs = mp.start_processes(_torch_worker, args=(n, args, port, queue), nprocs=n, join=False,
                               start_method="spawn")
    # Read before joining: rank 0's put blocks on the pipe until it is read
    # once the output is larger than the pipe's buffer (64 KiB: the default
    # 256 tokens x 64 f32).
    result = queue.get()
    while not procs.join():
        pass
    return result


def _block_and_tokens(args):
    """The block and tokens of the run: models.MoEBlock, or with
    ``args.grouped`` (bench/ragged_dispatch_bench.py) GroupedMoEBlock, whose
    router and w1/w3/w2 the worker reads the same way."""
    torch.manual_seed(0)
    if getattr(args, "grouped", False):
        from shardx_dev.grouped_moe import GroupedMoEBlock
        block = GroupedMoEBlock(args.dim, args.hidden, args.experts, top_k=2)
    else:
        block = models.MoEBlock(args.dim, args.hidden, args.experts, top_k=2, capacity=None)
    return block, torch.randn(args.tokens, args.dim)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--meshes", default="ep2,ep4,dp2xep2")
    ap.add_argument("--torch", action=argparse.BooleanOptionalAction, default=True,
                    help="also time torchtitan's dropless scheme in eager PyTorch on gloo "
                         "(1-D meshes)")
    ap.add_argument("--baseline", help="a Python file with another local_program (e.g. the "
                    "dropless_moe.py of an earlier commit), timed in the same run")
    args = ap.parse_args()
    baseline = load_program(args.baseline) if args.baseline else None
    # Eager on one thread, as the one-rank program runs: torch's thread pool
    # otherwise competes with the rank threads on a small machine.
    torch.set_num_threads(1)
    block, x = _block_and_tokens(args)
    with torch.no_grad():
        ref = block(x[None])[0].numpy()
        eager = median_seconds(lambda: block(x[None]), args.repeat)
    inputs = [x.numpy(), block.router.weight.detach().numpy(), block.w1.detach().numpy(),
              block.w3.detach().numpy(), block.w2.detach().numpy()]
    print(f"tokens {args.tokens}, dim {args.dim}, hidden {args.hidden}, experts {args.experts}, "
          f"top-2: {2 * args.tokens} routed items; eager forward {eager * 1e3:.2f} ms")
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ["one"] + args.meshes.split(","):
            shape = MESHES[name]
            program = local_program(args.tokens, args.dim, args.hidden, args.experts, shape)
            path = compile_mlir(program, os.path.join(tmp, f"{name}.so"))
            fn = Artifact(path)["moe"]
            y, rows = fn(*inputs)
            np.testing.assert_allclose(y[:args.tokens], ref, rtol=1e-4, atol=1e-5)
            old = None
            if baseline and name != "one":
                old_program = baseline(args.tokens, args.dim, args.hidden, args.experts, shape)
                old_fn = Artifact(compile_mlir(old_program,
                                               os.path.join(tmp, f"{name}.old.so")))["moe"]
                np.testing.assert_allclose(old_fn(*inputs)[0][:args.tokens], ref, rtol=1e-4,
                                           atol=1e-5)
                old = (old_program, old_fn)
            # Interleaved, in turns first, so that both see the same load.
            times[name], old_times = [], []
            for i in range(args.repeat):
                if old and i % 2:
                    old_times.append(seconds(lambda: old[1](*inputs)))
                times[name].append(seconds(lambda: fn(*inputs)))
                if old and not i % 2:
                    old_times.append(seconds(lambda: old[1](*inputs)))
            times[name] = statistics.median(times[name])
            n_all, ep, _ = placement(shape, args.experts)
            with torch.no_grad():
                moved = moved_rows(block, x, shape)
            assert float(rows) == moved, (name, float(rows), moved)
            buffer = ep * math.ceil(args.tokens / n_all) * 2
            print(f"{name:8s} mesh {str(shape):7s} {times[name] * 1e3:8.2f} ms  "
                  f"one rank / this {times['one'] / times[name]:.2f}  "
                  f"eager / this {eager / times[name]:.2f}  moved rows {moved} "
                  f"({moved * args.dim * 4} B each way, all ranks)  "
                  f"receive buffer {buffer} rows/rank  "
                  f"collectives per layer {layer_collectives(program)}")
            if old:
                t_old = statistics.median(old_times)
                print(f"{'':8s} baseline {t_old * 1e3:8.2f} ms  baseline / this "
                      f"{t_old / times[name]:.2f}  collectives per layer "
                      f"{layer_collectives(old[0])}")
            if args.torch and len(shape) == 1:
                ty, tt = torch_dropless(args, shape[0])
                np.testing.assert_allclose(ty, ref, rtol=1e-4, atol=1e-5)
                print(f"{'':8s} torchtitan's scheme on gloo {tt * 1e3:8.2f} ms  "
                      f"torch / ShardX {tt / times[name]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
