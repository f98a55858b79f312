"""Context parallelism: step time of a Llama-style block's train step
(models.LlamaBlock: RMSNorm, RoPE, grouped-query causal attention, SwiGLU;
forward, backward, SGD) with the sequence split over 2 and 4 ranks
(docs/Rules.md, "Context parallelism"), against the same program unsharded
on one rank, measured in one run by `shardx-run --check --repeat` (threads
backend), plus the plan's communication per rank from `shardx-print-plan`:
the K/V all-gathers and dK/dV reduce-scatters (the attention's), the
other reshards (weight gradients and loss), and ring attention's bytes on
the same shapes for comparison.

    ~/.cache/shardx/venv/bin/python bench/cp_bench.py [--seq 256] [--dim 64] [--repeat 5] [--sdpa]

``--sdpa`` runs the block's attention as F.scaled_dot_product_attention
(is_causal=True), as torchtitan's Llama does (LlamaBlock(sdpa=True)).
``--ring`` (with ``--sdpa``) also times the same step with its attention
as ring attention (shardx-run --ring-attention-bytes=0; docs/Rules.md,
"Ring attention"): ``--rounds`` runs of each form alternated, each against
its own unsharded run, the median speedups compared (gather/ring above 1:
the ring is faster); and prints both forms' modeled buffer-level peak per
rank (docs/Memory.md). The steps run on the example's values
(planrun.input_files).
``--zigzag`` (with ``--sdpa``) times the step on the sequence in its rows'
order against the step on the same data in zig-zag order
(shardx.context_parallel: rank r holds chunks r and 2n - 1 - r of 2n, the
step compiled under its sequence_order, the rotary angles read the rows'
positions), each as a ring and with K and V gathered
(--ring-attention-bytes=-1), the four alternated in the same way: in
order/zig-zag above 1 means the zig-zag order is faster. The zig-zag ring
computes 3 + 2 (n - 1) quarter blocks of attention per rank and the
zig-zag gather 2n + 1 pieces of the same size, where either in order
computes 4n.

The ratio unsharded/sharded above 1 means the ranks beat one; on a machine
with fewer cores than ranks the ranks share cores and the ratio says more
about the overhead than about the scaling.

PyTorch's own context parallelism (torch.distributed.tensor.experimental.
context_parallel, torchtitan's CP) does not run on CPU: on gloo it fails
with "Operator aten._scaled_dot_product_flash_attention_for_cpu.default does
not have a sharding strategy registered" (and under the math SDPA backend
with "aten.add.Tensor got mixed torch.Tensor and DTensor"); `--dtensor`
tries it and prints the error it gets.
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
from shardx_dev.planrun import (PlanRunError, buffer_peak, check_and_time,  # noqa: E402
                                input_files, plan_and_time)
from shardx_dev import models  # noqa: E402

PLAN = re.compile(r"remark: plan (\[.*?\]) -> (\[.*?\])(?:, [^f]*)? for tensor<[0-9x]+x\w+>: "
                  r".*?, (\d+) bytes/rank")


def measure(args, ranks):
    torch.manual_seed(0)
    block = models.LlamaBlock(args.dim, args.heads, args.kv_heads, args.hidden, sdpa=args.sdpa)
    step = TrainStep(block, F.mse_loss, "sgd", lr=0.1)
    x = torch.randn(args.batch, args.seq, args.dim)
    y = torch.randn(args.batch, args.seq, args.dim)
    mesh = Mesh((ranks,), ("cp",))
    ins, outs = step.placements(mesh, {}, [[S(1)]], [S(1)])
    example = step.example_args([x], y)
    text = trace(step, example, mesh, ins, outs, name="llama_cp")
    ring = None
    try:
        plan, sharded, unsharded = plan_and_time(text, args.repeat,
                                                 ["--ring-attention-bytes=-1"], example)
        if args.ring:
            # Gather and ring alternated, args.rounds runs each: each run's
            # speedup over its own unsharded run, the medians compared.
            import statistics
            import tempfile
            speedups = {"gather": [unsharded / sharded], "ring": []}
            times = {"gather": [sharded], "ring": []}
            with tempfile.TemporaryDirectory() as d:
                src = os.path.join(d, "step.mlir")
                with open(src, "w") as f:
                    f.write(text)
                inputs = input_files(example, d)
                for r in range(args.rounds):
                    for form, option in (("ring", "0"), ("gather", "-1")):
                        if form == "gather" and r == 0:
                            continue  # the run above
                        ms, base = check_and_time(
                            src, args.repeat, [f"--ring-attention-bytes={option}", inputs])
                        speedups[form].append(base / ms)
                        times[form].append(ms)
            ring = (statistics.median(times["gather"]), statistics.median(times["ring"]),
                    statistics.median(speedups["gather"]), statistics.median(speedups["ring"]),
                    buffer_peak(text, "ring-attention-bytes=-1"),
                    buffer_peak(text, "ring-attention-bytes=0"))
    except PlanRunError as e:
        print(e, file=sys.stderr)
        return None
    kv = sc = other = 0
    for a, b, n in PLAN.findall(plan):
        if a.startswith("[S(") and b == "[R]":
            kv += int(n)
        elif a == "[P(sum)]" and b.startswith("[S("):
            sc += int(n)
        else:
            other += int(n)
    return kv, sc, other, sharded, unsharded, ring


def measure_zigzag(args, ranks):
    """Per (data order, --ring-attention-bytes): the medians of the
    sharded ms and of unsharded/sharded, `args.rounds` runs of each of the
    four alternated."""
    import statistics
    import tempfile
    from shardx import context_parallel as cp
    torch.manual_seed(0)
    block = models.LlamaBlock(args.dim, args.heads, args.kv_heads, args.hidden, sdpa=True)
    step = TrainStep(block, F.mse_loss, "sgd", lr=0.1)
    x = torch.randn(args.batch, args.seq, args.dim)
    y = torch.randn(args.batch, args.seq, args.dim)
    mesh = Mesh((ranks,), ("cp",))
    order = cp.zigzag_order(args.seq, ranks)
    forms = {}
    ins, outs = step.placements(mesh, {}, [[S(1)]], [S(1)])
    example = step.example_args([x], y)
    forms["ring"] = (trace(step, example, mesh, ins, outs, name="llama_cp"), example)
    ins, outs = step.placements(mesh, {}, [[S(1)], [S(0)]], [S(1)])
    example = step.example_args([cp.zigzag(x, 1, ranks), order], cp.zigzag(y, 1, ranks))
    with cp.sequence_order(order):
        forms["zigzag"] = (trace(step, example, mesh, ins, outs, name="llama_cp"), example)
    runs = [(form, ring) for ring in ("0", "-1") for form in forms]
    times = {run: [] for run in runs}
    speedups = {run: [] for run in runs}
    with tempfile.TemporaryDirectory() as d:
        files = {}
        for form, (text, example) in forms.items():
            src = os.path.join(d, f"{form}.mlir")
            with open(src, "w") as f:
                f.write(text)
            folder = os.path.join(d, form)
            os.makedirs(folder)
            files[form] = (src, input_files(example, folder))
        for _ in range(args.rounds):
            for form, ring in runs:
                src, inputs = files[form]
                ms, base = check_and_time(src, args.repeat,
                                          [f"--ring-attention-bytes={ring}", inputs])
                times[form, ring].append(ms)
                speedups[form, ring].append(base / ms)
    med = statistics.median
    return {run: (med(times[run]), med(speedups[run])) for run in runs}


def try_dtensor_cp():
    """One causal SDPA under torch's context_parallel on a gloo group of 2
    (this process and a spawned one); returns the error it raises."""
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_dtensor_worker, args=(r, q)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    return sorted(set(q.get() for _ in procs if not q.empty()))


def _dtensor_worker(rank, queue):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29632")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("cp",))
    lin = torch.nn.Linear(8, 24)
    x = torch.randn(1, 32, 8)
    try:
        with context_parallel(mesh, buffers=[x], buffer_seq_dims=[1]):
            qkv = lin(x).view(1, x.shape[1], 3, 4, 2).unbind(2)
            q, k, v = (t.transpose(1, 2) for t in qkv)
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        queue.put("ran")
    except Exception as e:  # noqa: BLE001 - reported as the bench's finding
        queue.put(f"{type(e).__name__}: {e}".splitlines()[0][:300])
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sdpa", action="store_true",
                    help="attention as F.scaled_dot_product_attention(is_causal=True)")
    ap.add_argument("--ring", action="store_true",
                    help="also time the step with ring attention, and both forms' peaks")
    ap.add_argument("--rounds", type=int, default=3,
                    help="--ring: runs of each form, alternated")
    ap.add_argument("--zigzag", action="store_true",
                    help="time the step on the rows' order against zig-zag order, as a ring "
                         "and with gathers")
    ap.add_argument("--dtensor", action="store_true",
                    help="also try torch's context_parallel on gloo (CPU)")
    args = ap.parse_args()
    hd = args.dim // args.heads
    print(f"LlamaBlock train step: batch {args.batch}, seq {args.seq}, dim {args.dim}, "
          f"heads {args.heads} (kv {args.kv_heads}), hidden {args.hidden}, SGD, "
          f"{'causal SDPA' if args.sdpa else 'attention in ops'}; sequence split; "
          f"{os.cpu_count()} cores; median of {args.repeat} runs")
    if args.zigzag:
        print("ranks | form | in order ms (unsharded/sharded) | zig-zag ms (unsharded/sharded) | "
              f"in order/zig-zag; {args.rounds} rounds alternated, medians")
        for n in args.ranks:
            try:
                m = measure_zigzag(args, n)
            except PlanRunError as e:
                print(e, file=sys.stderr)
                return 1
            for form, ring in (("ring", "0"), ("gather", "-1")):
                (ms, up), (zz_ms, zz_up) = m["ring", ring], m["zigzag", ring]
                print(f"{n} | {form} | {ms:.2f} ({up:.2f}) | {zz_ms:.2f} ({zz_up:.2f}) | "
                      f"{zz_up / up:.2f}")
        return 0
    print("ranks | K/V all-gathers | dK/dV reduce-scatters | other reshards | ring attention "
          "K/V (repeated heads, kv heads) | unsharded ms | sharded ms | unsharded/sharded")
    for n in args.ranks:
        m = measure(args, n)
        if m is None:
            return 1
        kv, sc, other, sharded, unsharded, timed_ring = m
        chunk = -(-args.seq // n)
        ring = 2 * (n - 1) * chunk * args.batch * args.heads * hd * 4
        ring_kv = ring * args.kv_heads // args.heads
        print(f"{n} | {kv} B | {sc} B | {other} B | {ring} B, {ring_kv} B | {unsharded:.2f} | "
              f"{sharded:.2f} | {unsharded / sharded:.2f}")
        if timed_ring:
            gather_ms, ring_ms, gather_up, ring_up, gather_peak, ring_peak = timed_ring
            print(f"  {args.rounds} rounds, medians: gather {gather_ms:.2f} ms (unsharded/gather "
                  f"{gather_up:.2f}), ring {ring_ms:.2f} ms (unsharded/ring {ring_up:.2f}), "
                  f"gather/ring {ring_up / gather_up:.2f}; modeled peak per rank: gather "
                  f"{gather_peak / 2**20:.1f} MiB, ring {ring_peak / 2**20:.1f} MiB")
    if args.dtensor:
        print("torch context_parallel on gloo (CPU):", "; ".join(try_dtensor_cp()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
