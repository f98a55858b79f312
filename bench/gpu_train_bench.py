"""A GPT train step on one GPU: `shardx.compile(..., backend="cuda")`
against PyTorch eager and torch.compile on the same GPU, in one run.

    # any machine (no GPU): trace, compile for CUDA, export AOT packages
    ~/.cache/shardx/venv/bin/python bench/gpu_train_bench.py --build-only [--dir DIR]
    # the GPU machine (PyTorch with CUDA, the binding in $SHARDX_BUILD/python)
    python3 bench/gpu_train_bench.py [--dir DIR] [--steps 10] [--no-torch-compile]

The step (defaults: GPT-2 small): a GPT of `--layers` 12 pre-norm blocks,
width `--dim` 768, `--heads` 12, causal attention, GELU MLP of 4 x width,
learned positions, LM head tied to the token embedding (vocabulary 50304),
batch `--batch` 8 x sequence `--seq` 1024, cross-entropy, AdamW (lr 3e-4,
weight decay 0.1), under autocast bf16 (GEMMs and activations in bf16;
parameters, loss and update in f32). The same step, built from the same
seed, runs three ways:

- ShardX: the build half traces it (`shardx.TrainStep`, autocast on the
  CPU) and precompiles it for `backend="cuda"` on one rank (`gpt_1`) and
  on two cuda-local ranks of a data-parallel mesh (`gpt_dp2`, batch split),
  exporting each as an AOT package (`CompiledFunction.export`); the run
  half loads them with `shardx.load` (no compiler on the GPU host) and
  trains with the parameters and AdamW state donated from step to step.
  Today's GPU backends keep ShardedTensors in host memory: each call
  stages its inputs to the device and its outputs back, and that is
  counted in ShardX's time.
- eager: the module on the GPU with `torch.optim.AdamW` (fused off) under
  `torch.autocast("cuda", torch.bfloat16)`.
- torch.compile: the same eager step function compiled (inductor, default
  mode), its compile time reported apart.

Eager and torch.compile run first; then PyTorch's cached memory is given
back and each ShardX package runs, its artifact released after it (each
CUDA artifact's runtime has its own cache of device blocks).

Each is timed as the median of `--steps` steps after warm-ups (CUDA
synchronized), reported as tokens/s, with ratios against eager and
torch.compile and the model FLOP utilization (6 x parameters + 12 x
layers x width x sequence FLOPs per token over the GPU's bf16 dense peak,
989 TFLOP/s for an H100/H200 SXM unless `--peak-tflops`). Numerics: the
first step's loss of ShardX on 1 rank against eager's (bf16: relative
3e-2), and the 2-rank losses against the 1-rank ones (same tolerance).
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

VOCAB = 50304
TOLERANCE = 3e-2


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, layers, dim, heads, seq, device="cpu"):
        super().__init__()
        self.device = device
        self.wte = nn.Embedding(VOCAB, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        with torch.autocast(self.device, dtype=torch.bfloat16):
            x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.ln(x), self.wte.weight)
        return logits.float()


def lm_loss(logits, target):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def model_of(args, device="cpu"):
    torch.manual_seed(0)
    return GPT(args.layers, args.dim, args.heads, args.seq, device)


def batches_of(args, n):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randint(0, VOCAB, (args.batch, args.seq), generator=gen),
             torch.randint(0, VOCAB, (args.batch, args.seq), generator=gen)) for _ in range(n)]


def flops_per_token(model, args):
    params = sum(p.numel() for p in model.parameters())
    return 6 * params + 12 * args.layers * args.dim * args.seq, params


def build(args):
    import shardx
    from shardx import Mesh, Replicate, Shard, TrainStep
    os.makedirs(args.dir, exist_ok=True)
    model = model_of(args)
    step = TrainStep(model, lm_loss, "adamw", lr=3e-4, weight_decay=0.1)
    (ids, target), = batches_of(args, 1)
    params, state, inputs, target = step.example_args([ids], target)
    for name, mesh in (("gpt_1", None), ("gpt_dp2", Mesh((2,), ("dp",)))):
        start = time.perf_counter()
        pl = (None, None)
        if mesh is not None:
            pl = step.placements(mesh, {}, [[Shard(0)]], [Shard(0)])
        fn = shardx.compile(step, mesh, *pl, donate=(0, 1), backend="cuda", name="gpt")
        fn.precompile(params, state, inputs, target)
        fn.export(os.path.join(args.dir, name + ".shardx"))
        print(f"{name}: traced, compiled for CUDA and exported in "
              f"{time.perf_counter() - start:.1f} s ({fn.first_call_timing})", flush=True)
    with open(os.path.join(args.dir, "config.json"), "w") as f:
        json.dump({k: getattr(args, k) for k in ("layers", "dim", "heads", "seq", "batch")}, f)


def timed(fn, steps, warmup):
    """Median seconds of `steps` calls of fn() after `warmup` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def profile_step(one, top):
    """One more step under PyTorch's profiler (CUPTI sees every kernel of
    the process, the ShardX runtime's included): the GPU time by kernel
    name, its `top` names, and the step's GPU busy time against its wall
    time."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        one()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    rows = {}
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = getattr(e, "self_cuda_time_total", 0)
        if us and us > 0:
            rows[e.key] = (e.count, us)
    busy = sum(t for _, t in rows.values()) / 1e3
    print(f"profile: step wall {wall * 1e3:.1f} ms, GPU busy {busy:.1f} ms "
          f"({len(rows)} kernel names, {sum(c for c, _ in rows.values())} launches)")
    for name, (count, total) in sorted(rows.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {total / 1e3:8.2f} ms {count:5d}x  {name[:90]}")


def run(args):
    import shardx
    from shardx import TrainStep
    with open(os.path.join(args.dir, "config.json")) as f:
        for k, v in json.load(f).items():
            setattr(args, k, v)
    if not torch.cuda.is_available():
        print("gpu_train_bench: no CUDA device (PyTorch sees none)")
        return 1
    tokens = args.batch * args.seq
    data = batches_of(args, args.steps + 2)
    rows, ok = {}, True

    # Eager and torch.compile on the GPU.
    dev = torch.device("cuda")
    gpu_data = [(i.to(dev), t.to(dev)) for i, t in data]

    def trainer(compiled):
        model = model_of(args, "cuda").to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=True)
        cell = {"k": 0, "losses": []}

        def train_step(ids, target):
            loss = lm_loss(model(ids), target)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()
        fn = torch.compile(train_step) if compiled else train_step

        def one():
            ids, target = gpu_data[cell["k"] % len(gpu_data)]
            cell["k"] += 1
            cell["losses"].append(fn(ids, target))
        return one, cell

    def measure_torch(compiled):
        one, cell = trainer(compiled)
        compile_s = None
        if compiled:
            start = time.perf_counter()
            one()
            torch.cuda.synchronize()
            compile_s = time.perf_counter() - start
        return timed(one, args.steps, 1), [float(x) for x in cell["losses"]], compile_s

    rows["eager"], eager_losses, _ = measure_torch(False)
    print(f"eager: peak GPU memory allocated {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB",
          flush=True)
    if not args.no_torch_compile:
        rows["torch.compile"], _, compile_s = measure_torch(True)
        print(f"torch.compile: first call (compile) {compile_s:.1f} s", flush=True)
    # PyTorch's cached blocks back to the driver: the ShardX runtime
    # allocates with the driver, not PyTorch's allocator.
    import gc
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()

    # ShardX: the packages, parameters and state from the same seed.
    cpu_model = model_of(args)
    step = TrainStep(cpu_model, lm_loss, "adamw", lr=3e-4, weight_decay=0.1)

    def measure_shardx(name):
        fn = shardx.load(os.path.join(args.dir, name + ".shardx"), backend="cuda")
        params, state, _, _ = step.example_args([data[0][0]], data[0][1])
        cell = {"p": params, "s": state, "k": 0, "losses": []}

        def one():
            ids, target = data[cell["k"] % len(data)]
            cell["k"] += 1
            loss, cell["p"], cell["s"] = fn(cell["p"], cell["s"], (ids,), target)
            cell["losses"].append(loss.item())
        start = time.perf_counter()
        one()
        first = time.perf_counter() - start
        seconds = timed(one, args.steps, 1)
        if args.profile:
            profile_step(one, args.profile)
        # The runtime's caching allocator keeps the step's blocks: what the
        # GPU holds now is about the step's peak.
        free, total = torch.cuda.mem_get_info()
        print(f"{name}: first call {first:.2f} s, then {seconds * 1e3:.1f} ms/step; GPU memory "
              f"in use after the steps {(total - free) / 2**30:.1f} GiB", flush=True)
        return seconds, cell["losses"], fn.mesh.size

    losses = {}
    for name in args.packages.split(","):
        seconds, losses[name], ranks = measure_shardx(name)
        rows[f"shardx ({ranks} cuda rank{'s' if ranks > 1 else ''})"] = seconds
        # Its artifact released: the runtime's cached device blocks go back
        # (each artifact has its own cache).
        gc.collect()

    free, total = torch.cuda.mem_get_info()
    print(f"GPU memory in use after the ShardX runs: {(total - free) / 2**30:.1f} GiB", flush=True)

    fpt, n_params = flops_per_token(cpu_model, args)
    peak = args.peak_tflops * 1e12
    print(f"\nGPT {args.layers} layers, width {args.dim}, {args.heads} heads, {n_params / 1e6:.1f} M "
          f"parameters, batch {args.batch} x seq {args.seq}, AdamW, autocast bf16, "
          f"on {torch.cuda.get_device_name()}")
    print(f"{'':26} {'ms/step':>9} {'tokens/s':>11} {'MFU':>7} {'eager/x':>8}")
    for name, s in rows.items():
        print(f"{name:26} {s * 1e3:>9.1f} {tokens / s:>11.0f} {fpt * tokens / s / peak:>6.1%} "
              f"{rows['eager'] / s:>8.2f}")
    if "torch.compile" in rows:
        for name in rows:
            if name.startswith("shardx"):
                print(f"{name} tokens/s / torch.compile tokens/s: "
                      f"{rows['torch.compile'] / rows[name]:.3f} (goal >= 1)")

    def rel(a, b):
        return abs(a - b) / max(abs(b), 1e-6)
    first = rel(losses["gpt_1"][0], eager_losses[0])
    print(f"first-step loss: shardx {losses['gpt_1'][0]:.5f}, eager {eager_losses[0]:.5f} "
          f"(relative {first:.1e}, tolerance {TOLERANCE:g})")
    ok &= first <= TOLERANCE
    if "gpt_dp2" in losses:
        worst = max(rel(a, b) for a, b in zip(losses["gpt_dp2"], losses["gpt_1"]))
        print(f"2 ranks vs 1 rank, {len(losses['gpt_1'])} steps: max relative loss difference "
              f"{worst:.1e} (tolerance {TOLERANCE:g})")
        ok &= worst <= TOLERANCE
    print("gpu_train_bench: " + ("ok" if ok else "NUMERICS FAILED"))
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--dir", default=os.path.join(ROOT, "build-gpu-train-bench"))
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--no-torch-compile", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after timing, profile one ShardX step and print its N "
                         "costliest kernels (GPU time by name)")
    ap.add_argument("--packages", default="gpt_1,gpt_dp2",
                    help="the ShardX packages to run (gpt_1 is needed for the loss check)")
    args = ap.parse_args(argv)
    return build(args) or 0 if args.build_only else run(args)


if __name__ == "__main__":
    sys.exit(main())
