"""``shardx.compile`` on the GPU backends (``cuda``, ``nccl``) where no GPU is:
the program compiles for CUDA (and exports), and a call fails with the
driver's reason, never a hang, a crash or a number. On a machine with a GPU
the same calls run and are checked against eager instead
(scripts/gpu_check.sh --run runs the JIT's train steps there)."""

import json
import os
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
import torch

import shardx
from shardx import Mesh, Replicate, Shard
from shardx.sharded_tensor import RankError, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


HAS_GPU = None
_PROBE = """
import sys
sys.path.insert(0, {python!r})
import torch, shardx
from shardx.sharded_tensor import RankError
try:
    shardx.compile(lambda x: x + 1, None, backend="cuda", name="probe")(torch.ones(2))
    print("gpu")
except RankError as e:
    print("none" if "no CUDA driver" in str(e) else f"error: {{e}}")
"""


def has_gpu() -> bool:
    """Whether the cuda backend can run here (a driver and a GPU): a probe
    program in a process of its own, so that a run that hangs instead of
    failing (a world that ends under a posted run) fails this test file
    after 180 s instead of stopping the suite."""
    global HAS_GPU
    if HAS_GPU is None:
        import tempfile
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, SHARDX_CACHE_DIR=cache, PYTHONWARNINGS="ignore")
            try:
                proc = subprocess.run(
                    [sys.executable, "-c", _PROBE.format(python=os.path.join(ROOT, "python"))],
                    capture_output=True, text=True, timeout=180, env=env)
            except subprocess.TimeoutExpired:
                pytest.fail("a cuda-backend call hung instead of failing or running")
        answer = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        assert proc.returncode == 0 and answer in ("gpu", "none"), proc.stdout + proc.stderr
        HAS_GPU = answer == "gpu"
    return HAS_GPU


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDX_CACHE_DIR", str(tmp_path / "cache"))


def _step(x, w):
    return torch.relu(x @ w).sum(), x @ w


def test_cuda_backend_compiles_for_cuda_and_reports_the_missing_driver(tmp_path):
    mesh = Mesh((2,), ("tp",))
    f = shardx.compile(_step, mesh, [[Replicate()], [Shard(1)]], backend="cuda")
    x, w = torch.randn(4, 8), torch.randn(8, 6)
    if has_gpu():
        loss, y = f(x, w)
        ref_loss, ref_y = _step(x, w)
        # Results stay on the GPU: to_torch gives CUDA tensors.
        assert loss.on_device and y.on_device and y.to_torch().is_cuda
        np.testing.assert_allclose(loss.to_torch().cpu().numpy(), ref_loss.numpy(), rtol=1e-5)
        np.testing.assert_allclose(y.to_torch().cpu().numpy(), ref_y.numpy(), rtol=1e-5,
                                   atol=1e-6)
        return
    with pytest.raises(RankError, match="no CUDA driver"):
        f(x, w)
    # The entry was compiled, for CUDA, before the run failed.
    metas = [json.load(open(os.path.join(tmp_path, "cache", n)))
             for n in os.listdir(tmp_path / "cache") if n.endswith(".json")]
    assert [m["target"] for m in metas] == ["cuda-sm_90"]
    so = os.path.join(tmp_path, "cache", metas[0]["key"] + ".so")
    data = open(so, "rb").read()
    # Device code (a fatbin or PTX for sm_90) and the host entry point.
    assert b"sm_90" in data and b"shardx_entry_jit__step" in data
    # A second call fails the same way (the session starts a fresh world).
    with pytest.raises(RankError, match="no CUDA driver"):
        f(x, w)
    assert f.compiles == 1


def test_cuda_local_is_the_cuda_backend():
    f = shardx.compile(_step, None, backend="cuda-local")
    assert f.backend == "cuda"


def test_gpu_chip_is_checked(monkeypatch):
    monkeypatch.setenv("SHARDX_GPU_CHIP", "volta")
    f = shardx.compile(_step, None, backend="cuda")
    with pytest.raises(ValueError, match="SHARDX_GPU_CHIP='volta'"):
        f.precompile(torch.randn(4, 8), torch.randn(8, 6))


def test_cuda_precompile_and_export_need_no_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("SHARDX_GPU_CHIP", "sm_80")
    mesh = Mesh((2,), ("tp",))
    f = shardx.compile(_step, mesh, [[Replicate()], [Shard(1)]], backend="cuda")
    f.precompile(torch.randn(4, 8), torch.randn(8, 6))
    assert f.compiles == 1
    pkg = f.export(str(tmp_path / "step.shardx"))
    with zipfile.ZipFile(pkg) as z:
        blobs = [z.read(n) for n in z.namelist() if n.endswith(".so")]
    assert len(blobs) == 1 and b"sm_80" in blobs[0]


def test_nccl_precompile_and_export_need_no_launcher_or_gpu(tmp_path, monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "PMI_RANK", "PMI_SIZE", "SHARDX_RANK", "SHARDX_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    f = shardx.compile(_step, Mesh((2,), ("tp",)), [[Replicate()], [Shard(1)]], backend="nccl")
    f.precompile(torch.randn(4, 8), torch.randn(8, 6))
    pkg = f.export(str(tmp_path / "step.shardx"))
    assert os.path.getsize(pkg) > 0
    # The session (and the launcher's environment) is needed at the call.
    with pytest.raises(ValueError, match="torchrun --nproc-per-node 2"):
        f(torch.randn(4, 8), torch.randn(8, 6))


def test_nccl_needs_a_launcher_for_several_ranks(monkeypatch):
    for var in ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                "PMI_RANK", "PMI_SIZE", "SHARDX_RANK", "SHARDX_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    f = shardx.compile(_step, Mesh((2,), ("tp",)), [[Replicate()], [Shard(1)]], backend="nccl")
    with pytest.raises(ValueError, match="torchrun --nproc-per-node 2"):
        f(torch.randn(4, 8), torch.randn(8, 6))


def test_nccl_world_size_must_match_the_mesh(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    f = shardx.compile(_step, Mesh((2,), ("tp",)), [[Replicate()], [Shard(1)]], backend="nccl")
    with pytest.raises(ValueError, match="has 2 ranks but the launcher started 3"):
        f(torch.randn(4, 8), torch.randn(8, 6))


def test_nccl_world_of_one():
    f = shardx.compile(_step, None, backend="nccl")
    x, w = torch.randn(4, 8), torch.randn(8, 6)
    if has_gpu():
        loss, _ = f(x, w)
        np.testing.assert_allclose(loss.to_torch().cpu().numpy(), _step(x, w)[0].numpy(),
                                   rtol=1e-5)
        return
    with pytest.raises(RuntimeError, match="no CUDA driver|no NCCL"):
        f(x, w)


def test_gpu_sessions_keep_results_on_the_device():
    """The GPU sessions are device-resident, the CPU ones are not; only
    CUDA arrays become device shards, and only on a GPU session."""
    from shardx.sharded_tensor import device_shards, session
    mesh = Mesh((2,), ("x",))
    cpu = session(mesh, "threads")
    assert not cpu.device_resident
    assert device_shards(cpu, mesh, torch.ones(4), None) is None
    with pytest.raises(ValueError, match="does not run on a GPU"):
        cpu.device_shards([np.ones(4, np.float32)] * 2, "f32", None, [4])
    gpu = runtime().Session.cuda_local([2])
    assert gpu.device_resident
    # A CPU tensor is staged by the caller, not taken as device memory.
    assert device_shards(gpu, mesh, torch.ones(4), None) is None
    with pytest.raises(ValueError, match="not a C-contiguous CUDA array"):
        gpu.device_shards([np.ones(4, np.float32)] * 2, "f32", None, [4])
    host = shardx.ShardedTensor.from_torch(torch.arange(4.0), mesh, [Shard(0)])
    assert not host.on_device and not host.to_torch().is_cuda
    if not has_gpu():
        return
    t = torch.arange(24.0, device="cuda").reshape(6, 4)
    for placements in ([Shard(0)], [Shard(1)], [Replicate()]):
        st = shardx.ShardedTensor.from_torch(t, mesh, placements, backend="cuda")
        assert st.on_device
        back = st.to_torch()
        assert back.is_cuda and torch.equal(back, t)


def test_torchrun_nccl_fails_cleanly_without_gpus(tmp_path):
    if has_gpu():
        pytest.skip("a GPU is here: two ranks would need two GPUs (NCCL refuses two on one)")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.join(ROOT, 'python')!r})
        import torch, shardx
        from shardx import Mesh, Replicate, Shard
        f = shardx.compile(lambda x, w: (x @ w).sum(), Mesh((2,), ("tp",)),
                           [[Replicate()], [Shard(1)]], backend="nccl")
        print(f(torch.randn(4, 8), torch.randn(8, 6)).item())
    """))
    env = dict(os.environ, SHARDX_CACHE_DIR=str(tmp_path / "cache"), PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           "--master-port", str(_free_port()), str(script)],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode != 0
    assert "no CUDA driver" in proc.stderr or "no NCCL" in proc.stderr, proc.stderr[-2000:]
    assert "Segmentation fault" not in proc.stderr and "core dumped" not in proc.stderr


def test_cuda_device_index_wraps_as_the_runtime_does(monkeypatch):
    # A launcher may number local ranks past one host's GPUs; the runtime
    # opens $SHARDX_CUDA_DEVICE modulo the count, and tensors are matched
    # against the same device.
    from shardx.sharded_tensor import cuda_device_index
    monkeypatch.setenv("SHARDX_CUDA_DEVICE", "3")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert cuda_device_index() == 1
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert cuda_device_index() == 3
