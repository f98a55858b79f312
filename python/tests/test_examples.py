"""The traced examples in examples/ are what scripts/gen_examples.sh makes,
and they verify in shardx-opt; the importer's command line works; the
Adam/AdamW train steps check (sharded against unsharded) on their real
example inputs, NaN-free."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from shardx_dev import examples
from shardx.artifact import find_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


PROGRAMS = [("examples", n) for n in sorted(examples.EXAMPLES)] + \
    [("test/Programs", n) for n in sorted(examples.TEST_PROGRAMS)]


@pytest.mark.parametrize("where,name", PROGRAMS, ids=[n for _, n in PROGRAMS])
def test_example_up_to_date(where, name):
    path = os.path.join(ROOT, where, name)
    with open(path) as f:
        checked_in = f.read()
    assert checked_in == examples.generate(name), \
        f"{where}/{name} is stale: run bash scripts/gen_examples.sh"
    proc = subprocess.run([find_tool("shardx-opt"), path], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_command_line(tmp_path):
    script = tmp_path / "user.py"
    script.write_text(
        "import torch\n"
        "import shardx\n"
        "def spec():\n"
        "    mesh = shardx.Mesh((2,), ('tp',))\n"
        "    w = torch.randn(4, 6)\n"
        "    def f(x):\n"
        "        return torch.tanh(x @ w)\n"
        "    return shardx.TraceSpec(f, (torch.randn(3, 4),), mesh, [[shardx.Shard(0)]], [[shardx.Shard(0)]])\n"
        "def bad():\n"
        "    return shardx.TraceSpec(lambda x: torch.special.bessel_j0(x), (torch.randn(3),))\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    out = tmp_path / "out.mlir"
    proc = subprocess.run([sys.executable, "-m", "shardx.importer", f"{script}:spec", "-o", str(out)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert "shardx.mesh @mesh(shape = 2" in text and "linalg.matmul" in text and "math.tanh" in text
    assert subprocess.run([find_tool("shardx-opt"), str(out)], capture_output=True).returncode == 0
    proc = subprocess.run([sys.executable, "-m", "shardx.importer", f"{script}:bad"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 1
    assert "aten.special_bessel_j0" in proc.stderr and "user.py" in proc.stderr


def test_command_line_traces_under_the_spec_sequence_order(tmp_path):
    # Tests that a TraceSpec's sequence_order reaches the trace: the causal
    # attention masks by the rows' positions, written as a constant, where
    # without it they are the rows' order (an iota).
    script = tmp_path / "user.py"
    script.write_text(
        "import torch, torch.nn.functional as F\n"
        "import shardx\n"
        "def f(q, k, v):\n"
        "    return F.scaled_dot_product_attention(q, k, v, is_causal=True)\n"
        "def spec(order=None):\n"
        "    x = torch.randn(1, 2, 4, 8, dtype=torch.float64)\n"
        "    return shardx.TraceSpec(f, (x, x, x), sequence_order=order)\n"
        "def zigzag():\n"
        "    return spec([0, 3, 1, 2])\n")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    texts = {}
    for fn in ("spec", "zigzag"):
        out = tmp_path / f"{fn}.mlir"
        proc = subprocess.run([sys.executable, "-m", "shardx.importer", f"{script}:{fn}", "-o",
                               str(out)], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        texts[fn] = out.read_text()
    # The positions' constant, as MLIR prints an i64 tensor's bytes.
    order = 'dense<"0x' + np.array([0, 3, 1, 2], "<i8").tobytes().hex().upper() + '">'
    assert order in texts["zigzag"]
    assert order not in texts["spec"] and "shardx.attention" in texts["spec"]


def _adam_programs():
    names = []
    for where, programs in (("examples", examples.EXAMPLES), ("test/Programs", examples.TEST_PROGRAMS)):
        for name in sorted(programs):
            fn = examples.spec(name).fn
            if getattr(fn, "optimizer", None) in ("adam", "adamw"):
                names.append((where, name))
    return names


# Outputs known to be ill-conditioned on the real inputs, by program: the
# new value of a parameter whose gradient is zero up to rounding. Adam's
# first step from zero state moves each parameter by about lr * g / (|g| +
# eps), so rounding noise in g (the sharded program sums in another order)
# moves it by up to lr either way. attn.k.bias: softmax is invariant to a
# shift of all keys, so the key bias gets no gradient.
ILL_CONDITIONED = {"transformer_block_tp.mlir": ["attn.k.bias"]}


@pytest.mark.parametrize("where,name", _adam_programs(), ids=[n for _, n in _adam_programs()])
def test_adam_step_checks_on_example_inputs(tmp_path, where, name):
    """shardx-run --check with the program's own example inputs (initial
    parameters, zero optimizer state, the traced batch): every output
    finite in both runs and equal within tolerance."""
    spec = examples.spec(name)
    paths = examples.write_inputs(name, str(tmp_path))
    assert len(paths) == len(examples.example_inputs(name))
    proc = subprocess.run([find_tool("shardx-run"), os.path.join(ROOT, where, name), "--check",
                           "--inputs", ",".join(paths)], capture_output=True, text=True)
    assert "NaN/Inf" not in proc.stdout, proc.stdout
    assert f"inputs: {len(paths)} .npy files" in proc.stdout, proc.stdout
    # Output 1 + i is the new value of parameter i (after the loss).
    skip = {1 + spec.fn.param_names.index(p) for p in ILL_CONDITIONED.get(name, [])}
    lines = re.findall(r"^output (\d+)[^:]*: max abs err (\S+), .* (ok|MISMATCH)$", proc.stdout, re.M)
    assert len(lines) == 1 + 3 * len(spec.fn.param_names) + len(spec.fn.param_names), proc.stdout
    for index, max_abs, verdict in lines:
        if int(index) in skip:
            assert float(max_abs) <= spec.fn.hp["lr"], proc.stdout
        else:
            assert verdict == "ok", proc.stdout
    assert proc.returncode == (1 if skip else 0), proc.stdout + proc.stderr
