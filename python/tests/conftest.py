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
