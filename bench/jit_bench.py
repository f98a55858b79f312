"""shardx.compile's call path, measured against baselines in the same run.

    ~/.cache/shardx/venv/bin/python bench/jit_bench.py [--steps 500]
        [--tiny-repeat 15] [--loop-steps 100] [--hidden 256] [--batch 64] [--repeat 3]

1. Per-step overhead on a tiny program (nn.Linear(8, 8), MSE, SGD, batch
   4 split over a 2-rank dp mesh): the compiled callable called from Python
   with every input a resident ShardedTensor and the parameters donated,
   against `shardx-jit-call-bench` running the same artifact from C++ on
   the same Session code with the outputs fed back the same way. Both time
   `--steps` steps after a warm-up, alternated over `--tiny-repeat` rounds,
   best round of each (the machine is shared: the minimum is the figure
   least disturbed by other processes); the ratio is Python / C++ (goal
   <= 1.2). Also the calling thread's own CPU time per step on each side
   (the rank threads excluded), which the load disturbs less: the
   difference is what the Python layer costs.
2. The calling thread's CPU per call of a tiny function of two torch CPU
   tensors (`a * b + 1`, 8x8, replicated on 2 ranks): the C++ call path
   with its checks of each torch argument (contiguous strides, storage
   offset 0, no grad required or set, not an inference tensor), the
   arguments copied in and the output returned, and the same with `a` an
   `nn.Parameter` (requires grad); `--only torch-args` runs it alone (for
   an A/B of two builds).
3. `--only lifted`: a function closing over `nn.Linear(8, 8)` (its
   parameters lifted to inputs of the program, read at each call): the
   calling thread's CPU per call with the parameters unchanged, and the
   wall time per step of a loop that runs an SGD step on them outside
   the function after each call (`--lifted-steps` steps; code that
   guards parameters by value compiles each step there).
4. `--only batchnorm`: a function closing over `nn.Linear(8, 8)` and
   `nn.BatchNorm1d(8)` in training mode (batch 4 split over 2 ranks),
   whose running statistics and `num_batches_tracked` the call writes back
   (from Python, `_call_guarded`): the calling thread's CPU per call,
   against the same module in eval mode (no write: the C++ call path) and
   eager's training-mode call of the module.
5. Steps/s of a `--loop-steps` training loop (MLP 64 -> hidden -> 64, SGD
   with momentum, batch over dp and Megatron over tp on a 2x2 mesh): state
   kept on the ranks (only the batch goes in, the loss comes out) against
   the same loop gathering every output to torch and scattering it again
   each step (what shardx-run / shardx-exec do per call).

The loop measurement is the best of `--repeat` rounds, alternated.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

import shardx  # noqa: E402
from shardx import Mesh, Replicate as R, Shard as S, ShardedTensor, TrainStep  # noqa: E402
from shardx.artifact import find_tool  # noqa: E402


def tiny(steps: int, repeat: int):
    torch.manual_seed(0)
    mesh = Mesh((2,), ("dp",))
    step = TrainStep(nn.Linear(8, 8), F.mse_loss, "sgd", lr=0.01)
    ins, outs = step.placements(mesh, {}, [[S(0)]], [S(0)])
    f = shardx.compile(step, mesh, ins, outs, donate=(0,))
    params, state, inputs, target = step.example_args([torch.randn(4, 8)], torch.randn(4, 8))
    params = [ShardedTensor.from_torch(p, mesh, [R()]) for p in params]
    x = ShardedTensor.from_torch(inputs[0], mesh, [S(0)])
    y = ShardedTensor.from_torch(target, mesh, [S(0)])
    for _ in range(50):
        _, params, state = f(params, state, (x,), y)
    exe = next(iter(f._executables.values()))
    # Outputs (loss, w, b) -> inputs (w, b, x, y): w and b fed back.
    feed = ",".join(f"{o}:{i}" for i, o in exe.donated)
    py, cpp, py_cpu, cpp_cpu = [], [], [], []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            _, params, state = f(params, state, (x,), y)
        py.append((time.perf_counter() - start) / steps * 1e6)
        py_cpu.append((time.thread_time() - cpu) / steps * 1e6)
        out = subprocess.run([find_tool("shardx-jit-call-bench"), exe.path, "--steps", str(steps),
                              "--feed", feed], capture_output=True, text=True, check=True).stdout
        cpp.append(float(re.search(r"per_step_us ([\d.]+)", out).group(1)))
        cpp_cpu.append(float(re.search(r"caller_cpu_us ([\d.]+)", out).group(1)))
    return min(py), min(cpp), min(py_cpu), min(cpp_cpu)


def torch_args(steps: int, repeat: int):
    """CPU per call with two plain tensors, and with the first an
    ``nn.Parameter`` (requires grad)."""
    mesh = Mesh((2,), ("dp",))
    f = shardx.compile(lambda a, b: a * b + 1, mesh)
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    res = []
    for first in (a, nn.Parameter(a.clone())):
        for _ in range(50):
            f(first, b)
        assert f._plan is not None, "not on the C++ call path"
        cpu = []
        for _ in range(repeat):
            start = time.thread_time()
            for _ in range(steps):
                f(first, b)
            cpu.append((time.thread_time() - start) / steps * 1e6)
        res.append(min(cpu))
    return res


def lifted(steps: int, repeat: int, loop_steps: int):
    torch.manual_seed(0)
    mesh = Mesh((2,), ("dp",))
    m = nn.Linear(8, 8)
    f = shardx.compile(lambda x: m(x), mesh)
    x = torch.randn(4, 8)
    for _ in range(50):
        f(x)
    cpu = []
    for _ in range(repeat):
        start = time.thread_time()
        for _ in range(steps):
            f(x)
        cpu.append((time.thread_time() - start) / steps * 1e6)
    opt = torch.optim.SGD(m.parameters(), lr=0.01)
    compiles = f.compiles
    start = time.perf_counter()
    for _ in range(loop_steps):
        f(x)
        opt.zero_grad()
        m(x).sum().backward()
        opt.step()
    per_step = (time.perf_counter() - start) / loop_steps
    return min(cpu), per_step, f.compiles - compiles


def batchnorm(steps: int, repeat: int):
    """CPU per call of a training-mode BatchNorm step (statistics written
    back), of the same module in eval mode, and of eager's training-mode
    call."""
    torch.manual_seed(0)
    mesh = Mesh((2,), ("dp",))
    m = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
    f = shardx.compile(lambda x: m(x), mesh, [[S(0)]])
    x = torch.randn(4, 8)

    def per_call(call):
        for _ in range(50):
            call(x)
        cpu = []
        for _ in range(repeat):
            start = time.thread_time()
            for _ in range(steps):
                call(x)
            cpu.append((time.thread_time() - start) / steps * 1e6)
        return min(cpu)
    train = per_call(f)
    m.eval()
    evaluation = per_call(f)
    assert f._plan is not None, "eval mode: not on the C++ call path"
    m.train()
    with torch.no_grad():
        eager = per_call(m)
    return train, evaluation, eager, f.compiles


def loop(steps: int, hidden: int, batch: int, repeat: int):
    torch.manual_seed(0)
    mesh = Mesh((2, 2), ("dp", "tp"))
    step = TrainStep(nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 64)),
                     F.mse_loss, "sgd", lr=0.01, momentum=0.9)
    ins, outs = step.placements(mesh, {"0.weight": [R(), S(0)], "0.bias": [R(), S(0)],
                                       "2.weight": [R(), S(1)]}, [[S(0), R()]], [S(0), R()])
    persistent = shardx.compile(step, mesh, ins, outs, donate=(0, 1))
    roundtrip = shardx.compile(step, mesh, ins, outs)
    params0, state0, _, _ = step.example_args([torch.randn(batch, 64)], torch.randn(batch, 64))
    batches = [(torch.randn(batch, 64), torch.randn(batch, 64)) for _ in range(steps)]

    def run_persistent():
        p, s = params0, state0
        for x, y in batches:
            loss, p, s = persistent(p, s, (x,), y)
            loss.item()
        return loss.item()

    def run_roundtrip():
        p, s = params0, state0
        for x, y in batches:
            loss, p, s = roundtrip(p, s, (x,), y)
            loss.item()
            p, s = pytree.tree_map(lambda t: t.to_torch(), (p, s))
        return loss.item()

    a, b = run_persistent(), run_roundtrip()  # compile (cache) and warm up
    assert abs(a - b) <= 1e-5 * abs(b), (a, b)
    per, rt = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        run_persistent()
        per.append(steps / (time.perf_counter() - start))
        start = time.perf_counter()
        run_roundtrip()
        rt.append(steps / (time.perf_counter() - start))
    return max(per), max(rt)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--tiny-repeat", type=int, default=15)
    ap.add_argument("--loop-steps", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lifted-steps", type=int, default=20)
    ap.add_argument("--only", choices=("tiny", "torch-args", "lifted", "batchnorm", "loop"))
    args = ap.parse_args()
    os.environ.setdefault("SHARDX_CACHE_DIR", tempfile.mkdtemp(prefix="shardx-jit-bench."))
    if args.only in (None, "tiny"):
        py, cpp, py_cpu, cpp_cpu = tiny(args.steps, args.tiny_repeat)
        print(f"tiny step (Linear 8x8, SGD, 2 ranks): python {py:.1f} us/step, "
              f"C++ {cpp:.1f} us/step, python/C++ {py / cpp:.2f}x (goal <= 1.2x); "
              f"calling thread's CPU: python {py_cpu:.1f} us/step, C++ {cpp_cpu:.1f} us/step")
    if args.only in (None, "torch-args"):
        plain, param = torch_args(args.steps, args.tiny_repeat)
        print(f"torch arguments (a * b + 1, 8x8, 2 ranks): calling thread's CPU "
              f"{plain:.1f} us/call; a an nn.Parameter: {param:.1f} us/call")
    if args.only in (None, "lifted"):
        cpu, per_step, compiles = lifted(args.steps, args.tiny_repeat, args.lifted_steps)
        print(f"lifted parameters (nn.Linear(8, 8) closed over, 2 ranks): calling thread's CPU "
              f"{cpu:.1f} us/call; with an SGD step outside after each call "
              f"{per_step * 1e3:.2f} ms/step, {compiles} compiles in {args.lifted_steps} steps")
    if args.only in (None, "batchnorm"):
        train, evaluation, eager, compiles = batchnorm(args.steps, args.tiny_repeat)
        print(f"BatchNorm1d written back (Linear 8x8 + BatchNorm1d, batch 4 over 2 ranks): "
              f"calling thread's CPU {train:.1f} us/call in training mode, {evaluation:.1f} "
              f"us/call in eval mode (C++ call path), eager training mode {eager:.1f} us/call; "
              f"{compiles} compiles")
    if args.only in ("tiny", "torch-args", "lifted", "batchnorm"):
        return 0
    per, rt = loop(args.loop_steps, args.hidden, args.batch, args.repeat)
    print(f"{args.loop_steps}-step loop (MLP 64-{args.hidden}-64, batch {args.batch}, 2x2 mesh): "
          f"state on the ranks {per:.1f} steps/s, gather+scatter every step {rt:.1f} steps/s, "
          f"{per / rt:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
