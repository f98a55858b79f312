"""The per-rank memory model (docs/Memory.md) against the runtime's measured
peak: ``CompiledFunction.memory_profile()`` and the meter of the CPU
programs' allocation functions (``shardx_rt_host_mem_*``)."""


import pytest
import torch
import torch.nn.functional as F

import shardx
from shardx_dev import models
from shardx.placements import Mesh, Replicate as R, Shard as S
from shardx_dev.meter import measured_peaks


def _step():
    torch.manual_seed(0)
    step = shardx.TrainStep(models.mlp(32, 128, 32), F.mse_loss, "sgd", lr=0.1, momentum=0.9)
    return step, step.example_args([torch.randn(64, 32)], torch.randn(64, 32))


def _measured(compiled, args):
    """Each rank's peak of program-allocated bytes over a warm call."""
    return measured_peaks(compiled, args)


@pytest.mark.parametrize("sharded", [False, True])
def test_modeled_peak_is_within_ten_percent_of_measured(sharded):
    # Tests that the model of the bufferized program predicts the largest
    # rank's measured high-water mark within 10%, unsharded and on a 2x2
    # mesh (batch over dp, Megatron over tp), and that the tensor-level
    # model (shardx-print-plan's) is an upper bound of it.
    step, args = _step()
    if sharded:
        mesh = Mesh((2, 2), ("dp", "tp"))
        ins, outs = step.placements(mesh, {"0.weight": [R(), S(0)], "0.bias": [R(), S(0)],
                                           "2.weight": [R(), S(1)]}, [[S(0), R()]], [S(0), R()])
        compiled = shardx.compile(step, mesh=mesh, in_placements=ins, out_placements=outs)
    else:
        compiled = shardx.compile(step, mesh=None)
    peaks = _measured(compiled, args)
    assert len(peaks) >= (4 if sharded else 1)  # the ranks, and any other allocating thread
    measured = max(peaks)
    profile = compiled.memory_profile()[0]
    assert profile["bufferized"]
    assert 0.9 <= profile["allocated_peak_bytes"] / measured <= 1.1, (profile, peaks)
    tensors = compiled.memory_profile("tensors")[0]
    assert not tensors["bufferized"]
    assert tensors["allocated_peak_bytes"] >= 0.9 * measured
    # The arguments: parameters and momentum buffers by their torch.state.
    roles = profile["by_role"]
    assert roles["parameters"] == roles["optimizer state"] > 0
    assert profile["peak_bytes"] == profile["argument_bytes"] + profile["allocated_peak_bytes"]
    assert len(profile["timeline"]) > 0 and max(profile["timeline"]) == profile["peak_bytes"]


def test_memory_profile_needs_a_compiled_program_and_a_known_level():
    # Tests the errors: no program yet, a level that does not exist.
    step, args = _step()
    compiled = shardx.compile(step, mesh=None)
    with pytest.raises(RuntimeError, match="no compiled program"):
        compiled.memory_profile()
    compiled(*args)
    with pytest.raises(ValueError, match="level"):
        compiled.memory_profile("bytes")


def test_report_draws_the_modeled_memory(tmp_path):
    # Tests that the HTML report's memory section shows the same peak as
    # the model of the local program (shardx-print-plan's) and draws the
    # bytes alive per op.
    import os
    from shardx.jit import memory_profile
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    with open(os.path.join(root, "examples", "mlp_dp_tp_train.mlir")) as f:
        text = f.read()
    out = tmp_path / "report.html"
    shardx.report(text, str(out))
    html = out.read_text()
    profile = memory_profile(text, "cpu", "tensors")[0]
    assert '<section id="memory">' in html
    assert f'data-peak-bytes="{profile["peak_bytes"]}"' in html
    assert html.count('class="memory-plot"') == 1
    # The peak of the copy lowered to buffers, as the JIT's default level.
    lowered = memory_profile(text, "cpu", "buffers")[0]
    assert f'class="buffer-peak" data-bytes="{lowered["peak_bytes"]}"' in html
