"""Communication/compute overlap (`shardx-bucket-collectives` +
`shardx-schedule-collectives`) on and off, on the same train steps,
measured in one run.

    ~/.cache/shardx/venv/bin/python bench/overlap_bench.py [--layers 4]
        [--width 512] [--batch 512] [--ranks 2 4] [--backend threads mpi]
        [--repeat 10] [--async-collectives auto on off]

Two steps, each an MLP of `--layers` Linear+Tanh layers of `--width` with
MSE and SGD: DP (batch split over a 1-D dp mesh of N ranks) and DP x TP
(a dp x 2 mesh, Megatron column/row-parallel weight pairs over tp).
`shardx-run --check` compiles each with the passes (bucketing and
scheduling: all-reduces start as early and are waited for as late as
dependencies allow) and without them (`--bucket-collectives=false
--schedule-collectives=false`), checks both against the unsharded program
and reports the median step time and the median exposed communication
(time the ranks spend blocked in collectives and waits, mean over ranks)
of `--repeat` runs; the variants alternate three times and the best median
of each is kept. Ratios: step time off/on (above 1: the passes are faster)
and exposed communication on/off (below 0.5: more than halved). The passes'
runs take SHARDX_ASYNC_COLLECTIVES from `--async-collectives` (a row per
value: `auto`, the runtime's policy, runs started collectives on a
communication/progress thread only with two CPUs per local rank; `on`
forces that thread, `off` runs starts synchronously). The load average
(`os.getloadavg`) is printed before and after.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from shardx import Mesh, Partial as P, Replicate as R, Shard as S, TrainStep, trace  # noqa: E402
from shardx.artifact import find_tool  # noqa: E402


def run(src, backend, ranks, repeat, passes, async_mode="auto"):
    flag = str(passes).lower()
    cmd = [find_tool("shardx-run"), src, "--check", "--repeat", str(repeat),
           f"--bucket-collectives={flag}", f"--schedule-collectives={flag}",
           "--backend", backend]
    if backend == "mpi":
        cmd = [shutil.which("mpirun") or "mpirun", "--allow-run-as-root", "--oversubscribe",
               "-np", str(ranks)] + cmd
    env = dict(os.environ, SHARDX_ASYNC_COLLECTIVES=async_mode)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0 or "check passed" not in proc.stdout:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    step = float(re.search(r"outputs, ([0-9.]+) ms", proc.stdout).group(1))
    exposed = float(re.search(r"exposed communication: ([0-9.]+) ms", proc.stdout).group(1))
    return step, exposed


def model(layers, width):
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.Tanh()]
    return nn.Sequential(*mods)


def trace_step(kind, ranks, args):
    torch.manual_seed(0)
    step = TrainStep(model(args.layers, args.width), F.mse_loss, "sgd", lr=0.01)
    x = torch.randn(args.batch, args.width)
    y = torch.randn(args.batch, args.width)
    example = step.example_args([x], y)
    if kind == "dp":
        mesh = Mesh((ranks,), ("dp",))
        ins, outs = step.placements(mesh, {}, [[S(0)]], [S(0)])
        outs[0] = [P("sum")]
    else:
        mesh = Mesh((ranks // 2, 2), ("dp", "tp"))
        params = {}
        for i in range(args.layers):
            # Column-parallel then row-parallel Linear pairs (Megatron).
            col = i % 2 == 0
            params[f"{2 * i}.weight"] = [R(), S(0) if col else S(1)]
            params[f"{2 * i}.bias"] = [R(), S(0) if col else R()]
        ins, outs = step.placements(mesh, params, [[S(0), R()]], [S(0), R()])
        outs[0] = [P("sum"), R()]
    return trace(step, example, mesh, ins, outs, name=f"{kind}_step")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--backend", nargs="+", default=["threads", "mpi"])
    ap.add_argument("--steps", nargs="+", default=["dp", "dp_tp"])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--async-collectives", nargs="+", default=["auto"],
                    choices=["auto", "on", "off"])
    args = ap.parse_args()
    print("load average %.2f %.2f %.2f, %d CPUs" % (os.getloadavg() + (len(os.sched_getaffinity(0)),)))
    print(f"train steps: {args.layers} x Linear({args.width}) + Tanh, batch {args.batch}, SGD; "
          f"median of {args.repeat} runs, best of 3 alternations; passes = bucketing + scheduling")
    print(f"{'step':>6} {'ranks':>5} {'backend':>8} {'async':>5} {'off ms':>8} {'on ms':>8} {'off/on':>7} "
          f"{'exp off':>8} {'exp on':>8} {'on/off':>7}")
    with tempfile.TemporaryDirectory() as d:
        for kind in args.steps:
            for ranks in args.ranks:
                if kind == "dp_tp" and ranks < 4:
                    continue  # a dp x tp mesh needs 4 ranks
                src = os.path.join(d, f"{kind}_{ranks}.mlir")
                with open(src, "w") as f:
                    f.write(trace_step(kind, ranks, args))
                for backend in args.backend:
                    for mode in args.async_collectives:
                        off, on = [], []
                        for _ in range(3):
                            off.append(run(src, backend, ranks, args.repeat, False))
                            on.append(run(src, backend, ranks, args.repeat, True, mode))
                        t_off, t_on = min(t for t, _ in off), min(t for t, _ in on)
                        e_off, e_on = min(e for _, e in off), min(e for _, e in on)
                        print(f"{kind:>6} {ranks:>5} {backend:>8} {mode:>5} {t_off:>8.3f} "
                              f"{t_on:>8.3f} {t_off / t_on:>7.2f} {e_off:>8.3f} {e_on:>8.3f} "
                              f"{e_on / e_off if e_off else float('nan'):>7.2f}", flush=True)
    print("load average %.2f %.2f %.2f" % os.getloadavg())
    return 0


if __name__ == "__main__":
    sys.exit(main())
