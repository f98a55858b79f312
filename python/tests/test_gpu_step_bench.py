"""bench/gpu_step_bench.py where no CUDA device is present: the run half
exits 1 with a message saying so (the benchmark itself runs on a GPU
machine; its --build-only half ends with a dry run on the CPU)."""

import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_a_cuda_device_the_run_fails_saying_so(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "gpu_step_bench.py"),
                           "--dir", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "error: no CUDA device (torch.cuda.is_available() is False)" in proc.stderr
