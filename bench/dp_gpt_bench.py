"""A GPT train step under data parallelism against the same step on one
rank, on the CPU (thread ranks), both measured in one run.

    ~/.cache/shardx/venv/bin/python bench/dp_gpt_bench.py [--steps 6]
        [--layers 2] [--dim 128] [--heads 4] [--seq 128] [--batch 8]

The step is bench/gpu_train_bench.py's GPT (learned positions, LM head tied
to the token embedding, vocabulary 50304, cross-entropy, AdamW) in f32 (on
the CPU a bf16 GEMM is a loop nest), compiled by `shardx.compile` for
`backend="threads"` on a 1-D dp mesh of 2 ranks with the tokens and targets
`Shard(0)` and the parameters replicated, and on one rank. Each runs
`--steps` steps on the same batches from the same parameters; the median
time of the steps after the first two is reported, with the ratio dp2 /
1 rank and the largest relative difference of the two runs' losses. The
two ranks share the machine's cores, so the ratio is what the plan's
communication and duplicated work cost, not a speedup: the plan that
all-gathered the logits and ran the log-softmax on every row on every
rank gave 0.92-0.93, the one that keeps them split 0.76-0.77 (2 cores,
bench/README.md, "Data parallelism: the logits stay split").
"""

import argparse
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import gpu_train_bench as gpt  # noqa: E402


def forward_f32(self, ids):
    """GPT.forward without autocast."""
    x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
    for block in self.blocks:
        x = block(x)
    return F.linear(self.ln(x), self.wte.weight)


def main(argv=None):
    import shardx
    from shardx import Mesh, Shard, TrainStep
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)
    model = gpt.model_of(args)
    type(model).forward = forward_f32
    step = TrainStep(model, gpt.lm_loss, "adamw", lr=3e-4, weight_decay=0.1)
    data = gpt.batches_of(args, args.steps + 2)
    params, state, _, _ = step.example_args([data[0][0]], data[0][1])
    rows = {}
    for name, mesh in (("dp2", Mesh((2,), ("dp",))), ("1 rank", None)):
        pl = (None, None) if mesh is None else step.placements(mesh, {}, [[Shard(0)]],
                                                               [Shard(0)])
        fn = shardx.compile(step, mesh, *pl, backend="threads", name="dp_gpt_bench")
        losses, times = [], []
        for i, (ids, target) in enumerate(data):
            start = time.perf_counter()
            loss = fn(params, state, (ids,), target)[0]
            elapsed = time.perf_counter() - start
            losses.append(float(loss.full() if hasattr(loss, "full") else loss))
            if i >= 2:
                times.append(elapsed)
        rows[name] = (statistics.median(times), losses)
        print(f"{name}: {rows[name][0] * 1e3:.1f} ms/step (median of {len(times)})", flush=True)
    worst = max(abs(a - b) / abs(b) for a, b in zip(rows["dp2"][1], rows["1 rank"][1]))
    print(f"dp2 / 1 rank: {rows['dp2'][0] / rows['1 rank'][0]:.2f}; "
          f"losses' largest relative difference {worst:.1e}")
    ok = worst <= 1e-5
    print("dp_gpt_bench: " + ("ok" if ok else "LOSSES DIFFER"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
