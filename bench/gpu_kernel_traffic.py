"""The cuda target's kernel launches and the bytes of their buffers, for
one train step, counted in the compiled program (no GPU needed).

    ~/.cache/shardx/venv/bin/python bench/gpu_kernel_traffic.py
        [--build DIR ...] [--program FILE] [--top 15] [--layers 12 ...]

The step is bench/gpu_train_bench.py's GPT-2-small train step on one rank
(its shape flags, default 12 layers, width 768, batch 8 x 1024, bf16
autocast), traced and compiled by `shardx.compile(backend="cuda")`, or the
global program in `--program`. Each `--build` (a build directory; default
$SHARDX_BUILD, else build/) compiles it with its own `shardx-opt`
(`--shardx-spmd`, then `--shardx-codegen-cuda` up to the outlined kernels)
and the script counts, over the host code's `gpu.launch_func`s: the
launches and the sum over each launch of the sizes of the buffers it is
passed. That sum is a static upper bound of the bytes the step's
generated kernels read and write (a gather counts its whole table; cuBLAS
and the fused attention are not kernels here and not counted): a pass
that writes a tensor out and passes that fusion would have saved shows up
as the tensor's size, read and written. With two builds, the second over
the first (goal < 1 for a change meant to move fewer bytes).
"""

import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

ELEMENT_BYTES = {"f64": 8, "i64": 8, "index": 8, "f32": 4, "i32": 4,
                 "bf16": 2, "f16": 2, "i16": 2, "i8": 1, "i1": 1}


def buffer_bytes(memref):
    """The bytes of a statically shaped `memref<...>` type, else None."""
    dims = memref[len("memref<"):].split(",")[0].rstrip(">").split("x")
    count = 1
    for dim in dims[:-1]:
        if dim == "?":
            return None
        count *= int(dim)
    return count * ELEMENT_BYTES.get(dims[-1], 4)


def launches(ir):
    """(kernel, bytes of its buffers) per gpu.launch_func of `ir`."""
    out = []
    for line in ir.splitlines():
        if "gpu.launch_func" not in line or "args(" not in line:
            continue
        kernel = re.search(r"@\w+::@(\w+)", line).group(1)
        types = re.findall(r":\s*(memref<[^>]*(?:<[^>]*>[^>]*)*>)", line.split("args(", 1)[1])
        out.append((kernel, sum(buffer_bytes(t) or 0 for t in types)))
    return out


def outlined(build, program):
    """The program after the cuda target's kernel outlining by `build`."""
    opt = os.path.join(build, "bin", "shardx-opt")
    spmd = subprocess.run([opt, "--shardx-spmd", program], check=True,
                          capture_output=True, text=True).stdout
    done = subprocess.run([opt, "--shardx-codegen-cuda",
                           "--mlir-print-ir-after=shardx-merge-kernel-modules",
                           "-o", os.devnull], input=spmd, check=True,
                          capture_output=True, text=True)
    return done.stderr


def traced_program(args, folder):
    """The global program shardx.compile hands shardx-compile for the GPT
    step (from the JIT cache of a fresh cache folder)."""
    os.environ["SHARDX_CACHE_DIR"] = folder
    import shardx
    from shardx import TrainStep
    import gpu_train_bench as gpt
    model = gpt.model_of(args)
    step = TrainStep(model, gpt.lm_loss, "adamw", lr=3e-4, weight_decay=0.1)
    (ids, target), = gpt.batches_of(args, 1)
    params, state, inputs, target = step.example_args([ids], target)
    fn = shardx.compile(step, None, donate=(0, 1), backend="cuda", name="gpt")
    fn.precompile(params, state, inputs, target)
    programs = glob.glob(os.path.join(folder, "**", "*.mlir"), recursive=True)
    if len(programs) != 1:
        raise SystemExit(f"expected one program in the JIT cache {folder}, found {programs}")
    return programs[0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="append",
                    help="a build directory (repeatable; default $SHARDX_BUILD or build/)")
    ap.add_argument("--program", help="a global program (default: trace the GPT step)")
    ap.add_argument("--top", type=int, default=15, help="kernels listed by bytes")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args(argv)
    builds = args.build or [os.environ.get("SHARDX_BUILD") or os.path.join(ROOT, "build")]
    with tempfile.TemporaryDirectory() as folder:
        program = args.program or traced_program(args, folder)
        totals = []
        for build in builds:
            found = launches(outlined(build, program))
            total = sum(b for _, b in found)
            totals.append((len(found), total))
            print(f"{build}: {len(found)} launches of {len({k for k, _ in found})} kernels, "
                  f"{total / 1e9:.1f} GB of buffers", flush=True)
            per = collections.defaultdict(lambda: [0, 0])
            for kernel, b in found:
                per[kernel][0] += 1
                per[kernel][1] += b
            for kernel, (n, b) in sorted(per.items(), key=lambda kv: -kv[1][1])[:args.top]:
                print(f"  {kernel:40s} {n:5d} launches {b / 1e9:8.2f} GB")
    if len(totals) == 2:
        (n0, b0), (n1, b1) = totals
        print(f"second / first: launches {n1 / n0:.3f}, bytes {b1 / b0:.3f}")


if __name__ == "__main__":
    main()
