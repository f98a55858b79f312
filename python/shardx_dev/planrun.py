"""What the parallel-style benchmarks (bench/halo_bench.py, cp_bench.py,
moe_bench.py) run on a traced step: print-plan's remarks, and the sharded
step against the unsharded one timed in one ``shardx-run --check`` run."""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from typing import Sequence, Tuple

from shardx.artifact import find_tool


class PlanRunError(RuntimeError):
    """A tool failed on the benchmark's program (its output is the message)."""


def print_plan(src: str) -> str:
    """The remarks of ``--shardx-propagate --shardx-insert-reshards
    --shardx-print-plan`` on the program at ``src``."""
    r = subprocess.run([find_tool("shardx-opt"), src, "--shardx-propagate",
                        "--shardx-insert-reshards", "--shardx-print-plan", "-o", os.devnull],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise PlanRunError(r.stderr[-2000:])
    return r.stderr


def input_files(example, folder: str) -> str:
    """shardx-run's ``--inputs`` for the traced step's example arguments
    (its tensors, in the program's argument order: pytree leaves), written
    as .npy files into ``folder``.

    A benchmark runs the step on the values it was traced with, as eager
    does: shardx-run's default random inputs (weights uniform in [-1, 1))
    make attention logits of hundreds, whose softmax underflows into
    subnormal floats, which Intel cores compute by microcode assists (the
    transformer block's step took 82 instead of 38 ms on a Sapphire
    Rapids core, 2026-11-29)."""
    import numpy as np
    import torch.utils._pytree as pytree
    paths = []
    for i, t in enumerate(pytree.tree_leaves(example)):
        path = os.path.join(folder, f"in{i}.npy")
        np.save(path, t.detach().numpy() if hasattr(t, "detach") else np.asarray(t))
        paths.append(path)
    return "--inputs=" + ",".join(paths)


def check_and_time(src: str, repeat: int, extra: Sequence[str] = ()) -> Tuple[float, float]:
    """(sharded, unsharded) step time in ms, each the median of ``repeat``
    runs, from one ``shardx-run --check`` of the program at ``src`` on the
    threads backend (``extra``: more shardx-run options, such as
    ``input_files``'). The check's tolerances are 10x the tool's default:
    these steps are larger than the tests' and sum in other orders."""
    r = subprocess.run([find_tool("shardx-run"), src, "--check", "--repeat", str(repeat),
                        "--rtol", "1e-3", "--atol", "1e-4", *extra], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise PlanRunError(r.stdout[-2000:] + r.stderr[-2000:])
    sharded = float(re.search(r"outputs, ([0-9.]+) ms", r.stdout).group(1))
    unsharded = float(re.search(r"unsharded: 1 rank, ([0-9.]+) ms", r.stdout).group(1))
    return sharded, unsharded


def plan_and_time(text: str, repeat: int, extra: Sequence[str] = (),
                  example=None) -> Tuple[str, float, float]:
    """print_plan and check_and_time (with ``extra``) of the program
    ``text`` (written to a temporary file), run on ``example``'s values
    where given (``input_files``): (remarks, sharded ms, unsharded ms)."""
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "step.mlir")
        with open(src, "w") as f:
            f.write(text)
        if example is not None:
            extra = [*extra, input_files(example, d)]
        return (print_plan(src), *check_and_time(src, repeat, extra))


def buffer_peak(text: str, spmd_options: str = "") -> int:
    """The modeled peak bytes per rank of the program ``text`` at the
    buffer level (docs/Memory.md), after ``--shardx-spmd`` with
    ``spmd_options`` (as shardx-compile runs it: collectives scheduled)."""
    opt = find_tool("shardx-opt")
    spmd = " ".join(["schedule-collectives=true", spmd_options]).strip()
    r = subprocess.run([opt, "-", f"--shardx-spmd={spmd}", "-mlir-print-debuginfo"],
                       input=text, capture_output=True, text=True)
    if r.returncode != 0:
        raise PlanRunError(r.stderr[-2000:])
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "memory.json")
        m = subprocess.run([opt, "-", f"--shardx-print-plan=memory-level=buffers "
                            f"memory-json={path}", "-o", os.devnull], input=r.stdout,
                           capture_output=True, text=True)
        if m.returncode != 0:
            raise PlanRunError(m.stderr[-2000:])
        import json
        with open(path) as f:
            return max(fn["peak_bytes"] for fn in json.load(f))
