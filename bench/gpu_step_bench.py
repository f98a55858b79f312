"""Compiled train steps on one GPU against PyTorch eager on the same GPU, in
f32 and bf16, measured in one run.

    # any machine (no GPU): trace and compile the artifacts into DIR
    ~/.cache/shardx/venv/bin/python bench/gpu_step_bench.py --build-only [--dir DIR]
    # the GPU machine (PyTorch with CUDA; DIR carried from the build)
    python bench/gpu_step_bench.py [--dir DIR] [--repeat 20] [--steps mlp_2048,block]

Steps (each in f32 and under autocast bf16: GEMMs and activations in bf16,
parameters, loss and update in f32): the MLP Linear-ReLU-Linear at hidden
2048 and 4096, batch 64, MSE and SGD; the pre-norm transformer block
(models.Block: attention in ops + GELU MLP of 4 x dim) at dim 1024, 16
heads, batch 4 x seq 256, MSE and Adam (tracing runs the step once on the
CPU, whose bf16 GEMMs are slow: the block is traced in about 5 minutes). The build half traces each step
unsharded (a mesh of 1), compiles it with `shardx-compile --target=cuda
--unsharded` and copies bin/shardx-gpu-exec next to the artifacts (DIR
holds no inputs: the largest step's are 128 MiB, over what a GPU machine
is carried; the run half makes them from the same seed).

The run half needs DIR, this repository's python/ (models, TrainStep) and
PyTorch with CUDA; without a CUDA device it exits 1 saying so. Per step it
writes the inputs as .npy, runs the artifact with `shardx-gpu-exec
--backend cuda-local --repeat N` (median of N runs after a warm-up), the
same with `--resident` (inputs staged once, the step run N times on the
device buffers) and the same step eagerly on the GPU (median of N,
synchronized), checks the resident run's outputs (the loss and what is linear in the gradients: SGD's new
parameters, Adam's first moments) against the eager ones (f32: 1e-3, bf16: 3e-2 of each output's largest magnitude, or
of 1e-6 / 1e-4 where that is smaller: zero gradients are rounding noise) and
prints eager/compiled for the resident step (what a training loop with
its parameters on the GPU sees). As a second comparison, a whole call of
the artifact, which copies its inputs from the host and its outputs back
(the ABI of `shardx_entry_<f>`), against the eager step timed with the
same copies ("eager+copies": inputs to the GPU, step, outputs to the
host).
"""

import argparse
import ctypes
import json
import os
import re
import shutil
import statistics
import struct
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

from shardx import TrainStep  # noqa: E402
from shardx_dev import models  # noqa: E402

# name, model, dim, batch, dtype ("f32" or "bf16").
STEPS = [(f"{m}_{d}_{t}", m, d, b, t)
         for m, d, b in (("mlp", 2048, 64), ("mlp", 4096, 64), ("block", 1024, 4))
         for t in ("f32", "bf16")]
HEADS, SEQ = 16, 256
# The largest difference of an output allowed, relative to its largest
# magnitude or to FLOOR where that is smaller: a gradient that is zero up to
# rounding (attention's key bias: softmax ignores a shift of every score)
# and its Adam moments are noise in both runs.
TOLERANCE = {"f32": 1e-3, "bf16": 3e-2}
FLOOR = {"f32": 1e-6, "bf16": 1e-4}


class Autocast(nn.Module):
    """`inner` with its forward under autocast bf16 on `device` (cpu to
    trace, cuda to run eagerly); the output cast back to f32. No autocast
    when `dtype` is None."""

    def __init__(self, inner, dtype):
        super().__init__()
        self.inner = inner
        self.dtype = dtype
        self.device = "cpu"

    def forward(self, x):
        if self.dtype is None:
            return self.inner(x)
        with torch.autocast(self.device, dtype=self.dtype):
            out = self.inner(x)
        return out.float()


def make_step(model, dim, batch, dtype):
    """The step, its wrapper and its example arguments (on the CPU), the
    same for a seed on every machine."""
    torch.manual_seed(0)
    if model == "mlp":
        inner = models.mlp(dim, dim, dim)
        wrapper = Autocast(inner, torch.bfloat16 if dtype == "bf16" else None)
        step = TrainStep(wrapper, F.mse_loss, "sgd", lr=0.01)
        x, y = torch.randn(batch, dim), torch.randn(batch, dim)
    else:
        inner = models.Block(dim, HEADS, 4 * dim)
        wrapper = Autocast(inner, torch.bfloat16 if dtype == "bf16" else None)
        step = TrainStep(wrapper, F.mse_loss, "adam", lr=1e-3)
        x, y = torch.randn(batch, SEQ, dim), torch.randn(batch, SEQ, dim)
    return step, wrapper, step.example_args([x], y)


def describe(model, dim, batch, dtype):
    if model == "mlp":
        return f"MLP hidden {dim}, batch {batch}, SGD, {dtype}"
    return f"block dim {dim}, {HEADS} heads, MLP {4 * dim}, batch {batch} x seq {SEQ}, Adam, {dtype}"


#===----------------------------------------------------------------------===#
# .npy without numpy (f32 only: every input and output of these steps)
#===----------------------------------------------------------------------===#

def write_npy(path, t):
    t = t.detach().to("cpu", torch.float32).clone(memory_format=torch.contiguous_format)
    dims = [str(n) for n in t.shape]
    shape = "(" + (dims[0] + "," if len(dims) == 1 else ", ".join(dims)) + ")"
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(ctypes.string_at(t.data_ptr(), t.numel() * 4))


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<H", data[8:10])[0]
    header = data[10:10 + n].decode()
    if "'<f4'" not in header:
        raise ValueError(f"{path}: not f32 ({header.strip()})")
    shape = tuple(int(s) for s in re.search(r"'shape': \(([^)]*)\)", header).group(1).split(",") if s.strip())
    return torch.frombuffer(bytearray(data[10 + n:]), dtype=torch.float32).reshape(shape)


#===----------------------------------------------------------------------===#
# Build half
#===----------------------------------------------------------------------===#

def build(out_dir):
    from shardx import Mesh, Replicate as R, trace
    from shardx.artifact import find_tool
    compile_tool, exe = find_tool("shardx-compile"), find_tool("shardx-gpu-exec")
    os.makedirs(os.path.join(out_dir, "bin"), exist_ok=True)
    shutil.copy2(exe, os.path.join(out_dir, "bin", "shardx-gpu-exec"))
    mesh = Mesh((1,), ("x",))
    built = []
    for name, model, dim, batch, dtype in STEPS:
        step, _, example = make_step(model, dim, batch, dtype)
        ins, outs = step.placements(mesh, {}, [[R()]], [R()])
        t = time.perf_counter()
        text = trace(step, example, mesh, ins, outs, name=name)
        src = os.path.join(out_dir, name + ".mlir")
        with open(src, "w") as f:
            f.write(text)
        proc = subprocess.run([compile_tool, "--target=cuda", "--unsharded", src, "-o",
                               os.path.join(out_dir, name + ".so")], capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"error: shardx-compile --target=cuda {src} failed:\n{proc.stderr}", file=sys.stderr)
            return 1
        print(f"{name}: traced and compiled in {time.perf_counter() - t:.1f} s", flush=True)
        built.append(name)
    with open(os.path.join(out_dir, "steps.json"), "w") as f:
        json.dump(built, f)
    # A dry run of the run half on the CPU: the f32 MLP and block steps
    # (SGD, and Adam with its scalar step counts) compiled for the CPU, fed
    # the run half's .npy inputs by shardx-exec, against eager.
    for name, model, dim, batch, dtype in (STEPS[0], STEPS[4]):
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run([compile_tool, "--unsharded",
                                   os.path.join(out_dir, name + ".mlir"),
                                   "-o", os.path.join(tmp, name + ".so")],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                print(f"error: shardx-compile {name}.mlir failed:\n{proc.stderr}", file=sys.stderr)
                return 1
            (compiled_ms,), eager_ms, _, err = run_step(
                [[find_tool("shardx-exec"), os.path.join(tmp, name + ".so")]], name, model, dim,
                batch, dtype, 1, "cpu", tmp)
        ok = err <= TOLERANCE[dtype]
        print(f"dry run on the CPU ({name}): compiled {compiled_ms:.1f} ms, eager "
              f"{eager_ms:.1f} ms, max err {err:.1e} {'ok' if ok else 'MISMATCH'}", flush=True)
        if not ok:
            return 1
    for name in built:
        os.remove(os.path.join(out_dir, name + ".mlir"))
    size = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(out_dir) for fn in fns)
    print(f"{out_dir}: {size / 2**20:.1f} MiB; on a GPU machine: "
          f"python bench/gpu_step_bench.py --dir {out_dir}")
    return 0


#===----------------------------------------------------------------------===#
# Run half
#===----------------------------------------------------------------------===#

def median_time(fn, repeat, device):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    fn()  # warm-up
    sync()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_step(commands, name, model, dim, batch, dtype, repeat, device, tmp):
    """Runs each of `commands` (an executor and the artifact) on the step's
    inputs and the step eagerly on `device`: the list of compiled ms (one
    per command), eager ms, eager+copies ms, and the largest difference of
    the last command's outputs relative to each output's largest
    magnitude."""
    step, wrapper, example = make_step(model, dim, batch, dtype)
    flat, _ = pytree.tree_flatten(tuple(example))
    inputs = []
    for i, t in enumerate(flat):
        inputs.append(os.path.join(tmp, f"in{i}.npy"))
        write_npy(inputs[-1], t)
    outdir = os.path.join(tmp, "out")
    os.makedirs(outdir, exist_ok=True)
    env = dict(os.environ)
    if device == "cuda" and "SHARDX_CUBLAS" not in env:
        # cuBLAS from this PyTorch's wheels, wherever they are installed.
        wheels = os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), "nvidia",
                              "cublas", "lib")
        if os.path.isdir(wheels):
            env["SHARDX_CUBLAS"] = wheels
    compiled_ms = []
    for command in commands:
        proc = subprocess.run(command + ["--inputs", ",".join(inputs), "--outputs", outdir],
                              capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed:\n{proc.stdout}{proc.stderr}")
        compiled_ms.append(float(re.search(r"outputs in ([0-9.]+) ms", proc.stdout).group(1)))

    wrapper.device = device
    wrapper.to(device)
    to = lambda d: lambda t: t.to(d) if isinstance(t, torch.Tensor) else t  # noqa: E731
    on_device = pytree.tree_map(to(device), example)
    eager_ms = 1e3 * median_time(lambda: step.run_eager(*on_device), repeat, device)

    def with_copies():
        out = step.run_eager(*pytree.tree_map(to(device), example))
        pytree.tree_map(to("cpu"), out)
    copies_ms = 1e3 * median_time(with_copies, repeat, device)

    # The compiled outputs against the eager ones on the same inputs: the
    # loss and what is linear in the gradients (SGD's new parameters, Adam's
    # first moments). Adam's new parameters and second moments are not
    # checked: where a gradient is rounding noise, its update is +-lr in
    # either run whatever the noise's size.
    loss, params, state = step.run_eager(*on_device)
    want, _ = pytree.tree_flatten((loss, params, state))
    checked, _ = pytree.tree_flatten(
        (True, [step.optimizer == "sgd"] * len(params),
         {k: [k in ("exp_avg", "momentum_buffer")] * len(v) for k, v in state.items()}))
    worst = 0.0
    for i, (w, check) in enumerate(zip(want, checked)):
        if not check:
            continue
        got = read_npy(os.path.join(outdir, f"{name}.out{i}.npy"))
        w = w.detach().float().cpu().reshape(got.shape)
        scale = max(w.abs().max().item(), FLOOR[dtype])
        worst = max(worst, (got - w).abs().max().item() / scale)
    return compiled_ms, eager_ms, copies_ms, worst


def run(out_dir, repeat, only):
    if not torch.cuda.is_available():
        print("error: no CUDA device (torch.cuda.is_available() is False): the benchmark "
              "runs on a GPU machine; --build-only makes its artifacts anywhere", file=sys.stderr)
        return 1
    manifest = os.path.join(out_dir, "steps.json")
    if not os.path.exists(manifest):
        print(f"error: no {manifest}: run bench/gpu_step_bench.py --build-only --dir {out_dir} "
              "first", file=sys.stderr)
        return 1
    with open(manifest) as f:
        built = set(json.load(f))
    print(f"{torch.cuda.get_device_name()}; PyTorch {torch.__version__}; median of {repeat} runs "
          "after a warm-up")
    print("compiled: the step on device-resident buffers (shardx-gpu-exec --resident); "
          "call: a whole call of the artifact, host copies included, against eager+copies")
    print(f"{'step':<66} {'compiled ms':>11} {'eager ms':>9} {'eager/comp':>10} "
          f"{'call ms':>8} {'eager+copies':>12} {'(eager+copies)/call':>19} {'max err':>8}")
    failed = 0
    for name, model, dim, batch, dtype in STEPS:
        if name not in built or (only and not any(o in name for o in only)):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            try:
                command = [os.path.join(out_dir, "bin", "shardx-gpu-exec"),
                           os.path.join(out_dir, name + ".so"), "--backend", "cuda-local",
                           "--repeat", str(repeat)]
                (call, c), e, ec, err = run_step([command, command + ["--resident"]], name, model,
                                                 dim, batch, dtype, repeat, "cuda", tmp)
            except RuntimeError as ex:
                print(f"{describe(model, dim, batch, dtype):<66} FAILED: {ex}")
                failed += 1
                continue
        ok = err <= TOLERANCE[dtype]
        failed += not ok
        print(f"{describe(model, dim, batch, dtype):<66} {c:>11.2f} {e:>9.2f} {e / c:>10.2f} "
              f"{call:>8.2f} {ec:>12.2f} {ec / call:>19.2f} {err:>8.1e}"
              f"{'' if ok else ' MISMATCH'}", flush=True)
    return 1 if failed else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-only", action="store_true",
                    help="trace and compile the artifacts into --dir (no GPU needed)")
    ap.add_argument("--dir", default=os.path.join(ROOT, "build-gpu-bench"))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--steps", default="",
                    help="run only the steps whose name contains one of these comma-separated "
                         "words (mlp_2048, bf16, block, ...)")
    args = ap.parse_args()
    if args.build_only:
        return build(os.path.realpath(args.dir))
    return run(os.path.realpath(args.dir), args.repeat, [w for w in args.steps.split(",") if w])


if __name__ == "__main__":
    sys.exit(main())
