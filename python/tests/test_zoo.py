"""The model zoo (shardx/zoo.py): models people train, built from small
configs with random weights, each a whole AdamW train step traced, compiled,
run unsharded for 2 steps and compared with eager PyTorch (batch norm's
running statistics included); the sharding plans (Megatron TP, DP, DP x TP
and FSDP x TP with StridedShard on a 2x2 mesh) run on CPU threads and are
compared with the unsharded run and with eager. A failure names the model, the plan,
the step and the first mismatching output.

Programs are compiled at -O0: LLVM's -O3 is most of the compile time of these
programs (ResNet-18: 3 s at -O0, 90 s at -O3 on 2 cores) and does not change
their rounding. Each model is traced once: its unsharded run is the plan's
trace compiled --unsharded."""

import pytest
import torch

from shardx import zoo

# (model, plans, dtype). Torchvision's full ResNet-18 runs in f64: in f32,
# eager PyTorch itself differs from its f64 run by 2 lr on dozens of weights
# after one AdamW step (batch norm over 4 values; docs/Importer.md).
CASES = [
    ("gpt2", ("tp2",), torch.float32),
    ("llama", ("dp2xtp2", "fsdp2xtp2"), torch.float32),
    ("bert", ("tp2",), torch.float32),
    ("mixtral", (), torch.float32),
    ("resnet_tiny", ("dp2",), torch.float32),
    ("resnet18", (), torch.float64),
    ("vit", (), torch.float32),
    ("lstm", (), torch.float32),
    ("gru", (), torch.float32),
]


@pytest.mark.parametrize("model,plans,dtype", CASES,
                         ids=["-".join([m, *p]) + ("-f64" if d == torch.float64 else "") for m, p, d in CASES])
def test_zoo_matches_eager_and_unsharded(tmp_path, build_dir, model, plans, dtype):
    results = zoo.run_model(model, plans, workdir=str(tmp_path), dtype=dtype, opt_level=0)
    assert [r.plan for r in results] == ["unsharded", *plans], results[-1].error
    for r in results:
        assert r.traced and r.compiled and r.ops > 0, r.error
        assert r.matches_eager, r.error
        if r.plan != "unsharded":
            assert r.matches_unsharded, r.error
            assert sum(r.collectives.values()) > 0, "a sharded train step needs collectives"
