import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


def _pin_openblas_kernels():
    """On an AVX-512 host, OpenBLAS's AVX2 (Haswell) GEMM kernels for the
    whole suite, its subprocesses included.

    Several tests check two compilations of one step bit for bit (regional
    tracing against the inline trace, torch.utils.checkpoint against none)
    where the two programs call BLAS with the same product in another form
    (an operand transposed or materialized). OpenBLAS's AVX-512 (SkylakeX)
    kernels, which it picks on such a host, round those forms differently;
    its AVX2 kernels do not, and every x86-64 host with AVX-512 has AVX2.
    Set before anything loads OpenBLAS (it reads the variable once). A
    value the caller set is kept (docs/Testing.md)."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split() for line in f if line.startswith("flags")), [])
    except OSError:
        return
    if "avx512f" in flags and "avx2" in flags and "fma" in flags:
        os.environ["OPENBLAS_CORETYPE"] = "Haswell"


_pin_openblas_kernels()


@pytest.fixture(scope="session")
def build_dir():
    d = os.environ.get("SHARDX_BUILD", os.path.join(ROOT, "build"))
    if not os.path.exists(os.path.join(d, "bin", "shardx-opt")):
        pytest.fail(f"ShardX is not built in {d}: run bash scripts/test.sh")
    return d


def _fake_world_of_4():
    """A fake process group of 4 ranks (no communication: DTensor's
    placement logic and parallelize_module only), left as it was found."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group("fake", rank=0, world_size=4, store=FakeStore())
    yield
    if owned:
        dist.destroy_process_group()


fake_world = pytest.fixture(_fake_world_of_4)
fake_world_module = pytest.fixture(scope="module")(_fake_world_of_4)
