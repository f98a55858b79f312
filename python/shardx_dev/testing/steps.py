"""What the parallel-style tests (test_halo, test_context_parallel,
test_expert_parallel) check the same way: a tool run that must succeed, a
traced program's sharded run against its unsharded compile under mpirun,
and a compiled train step against eager PyTorch over several steps; and
two tensors equal bit for bit (test_sorts, test_elementwise_edges)."""

from __future__ import annotations

import shutil
import subprocess
from typing import Optional, Sequence

import numpy as np


def run_tool(cmd: Sequence, input: Optional[str] = None) -> str:
    """Runs `cmd` (`input` on its stdin); fails the test with its output
    unless it exits 0."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600,
                       input=input)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout + r.stderr


def check_on_mpi(build_dir: str, path, ranks: int, extra: Sequence = ()) -> None:
    """`shardx-run --check` of the program at `path` on `ranks` mpi
    processes (`extra`: more shardx-run options): the sharded run against
    the unsharded one. Skips the test where OpenMPI is not installed."""
    import pytest

    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("needs OpenMPI")
    out = run_tool([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", ranks,
                    f"{build_dir}/bin/shardx-run", path, "--backend", "mpi", "--check", *extra])
    assert "check passed" in out and "MISMATCH" not in out, out


def assert_steps_match_eager(f, step, args, what: str, steps: int = 2, rtol: float = 1e-4,
                             atol: float = 1e-5) -> None:
    """Runs the compiled train step `f` and `step` in eager PyTorch for
    `steps` steps from the same `args` (parameters, optimizer state,
    inputs, target), each from its own previous state, and compares the
    loss (to rtol 1e-5) and every parameter after each step."""
    params, state, inputs, target = args
    sharded, eager = (params, state), (params, state)
    for i in range(steps):
        loss, p, s = f(sharded[0], sharded[1], inputs, target)
        el, ep, es = step.run_eager(eager[0], eager[1], inputs, target)
        np.testing.assert_allclose(loss.to_torch().numpy(), el.detach().numpy(), rtol=1e-5,
                                   atol=1e-6, err_msg=f"{what} step {i}: loss")
        for j, (a, b) in enumerate(zip(p, ep)):
            np.testing.assert_allclose(a.to_torch().numpy(), b.detach().numpy(), rtol=rtol,
                                       atol=atol, err_msg=f"{what} step {i}: parameter {j}")
        sharded, eager = (p, s), (ep, es)


def same_bits(a, b) -> bool:
    """Whether tensors ``a`` and ``b`` have one dtype and shape and equal
    elements, NaN where NaN."""
    return a.dtype == b.dtype and a.shape == b.shape and bool(
        ((a == b) | (a != a) & (b != b)).all())
