import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))


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
