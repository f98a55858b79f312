"""The model zoo (shardx_dev/zoo.py): models people train, built from small
configs with random weights, each a whole AdamW train step traced, compiled,
run unsharded for 2 steps and compared with eager PyTorch (batch norm's
running statistics included); the sharding plans (Megatron TP, DP, DP x TP
and FSDP x TP with StridedShard on a 2x2 mesh) run on CPU threads and are
compared with the unsharded run and with eager. A failure names the model, the plan,
the step and the first mismatching output.

Programs are compiled at -O0: LLVM's -O3 is most of the compile time of these
programs (ResNet-18: 3 s of CPU at -O0, 48 s at -O3) and changes their
rounding only in float sums (vectorized at -O3, docs/Compiler.md). Each model is traced once: its unsharded run is the plan's
trace compiled --unsharded."""

import pytest
import torch

from shardx_dev import zoo

# (model, plans, dtype). Torchvision's full ResNet-18 runs in f64: in f32,
# eager PyTorch itself differs from its f64 run by 2 lr on dozens of weights
# after one AdamW step (batch norm over 4 values; docs/Importer.md).
CASES = [
    ("gpt2", ("tp2",), torch.float32),
    # Dropout 0.1: the seed is the program's last input (shardx-exec runs
    # it), eager draws ShardX's numbers (shardx.same_random).
    ("gpt2_dropout", ("tp2",), torch.float32),
    ("llama", ("dp2xtp2", "fsdp2xtp2", "tp2sp"), torch.float32),
    ("bert", ("tp2",), torch.float32),
    ("mixtral", (), torch.float32),
    ("resnet_tiny", ("dp2", "tp2"), torch.float32),
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


def test_train_step_running_stats_are_eager_modules_buffers():
    """TrainStep's batch norm statistics (state["buffers"]) are what the
    module's own training-mode forward leaves in its buffers."""
    import copy

    import shardx
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                            torch.nn.LazyLinear(2))
    x, y = torch.randn(2, 3, 6, 6), torch.randn(2, 2)
    m(x)  # materializes the lazy layer
    ref = copy.deepcopy(m)
    step = shardx.TrainStep(m, torch.nn.functional.mse_loss, "adamw", lr=0.01)
    assert step.buffer_names == ["1.running_mean", "1.running_var", "1.num_batches_tracked"]
    _, _, state = step.run_eager(*step.example_args([x], y))
    ref(x)
    for name, got in zip(step.buffer_names, state["buffers"]):
        want = dict(ref.named_buffers())[name]
        assert torch.equal(got, want), name
    assert int(state["buffers"][2]) == int(dict(m.named_buffers())["1.num_batches_tracked"]) + 1
