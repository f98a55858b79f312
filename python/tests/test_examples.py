"""The traced examples in examples/ are what scripts/gen_examples.sh makes,
and they verify in shardx-opt; the importer's command line works."""

import os
import subprocess
import sys

import pytest

from shardx import examples
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
        "    return shardx.TraceSpec(lambda x: torch.cumsum(x, 0), (torch.randn(3),))\n")
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
    assert "aten.cumsum" in proc.stderr and "user.py" in proc.stderr
