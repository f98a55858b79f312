"""Activation recomputation through ``shardx.compile(..., recompute=...)``
and the model's own ``torch.utils.checkpoint`` (docs/Compiler.md): the same
numbers bit for bit, a lower measured peak, and the policy in the cache
key."""

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.utils.checkpoint import checkpoint

import shardx
from shardx_dev import models
from shardx.importer import regions_enabled, tracing
from shardx.placements import Mesh, Replicate as R, Shard as S
from shardx_dev.examples import block_tp_placements
from shardx_dev.meter import measured_peaks


def _block_step():
    torch.manual_seed(0)
    step = shardx.TrainStep(models.Block(32, 4, 128), F.mse_loss, "adam", lr=1e-3)
    x, y = torch.randn(4, 32, 32), torch.randn(4, 32, 32)
    return step, step.example_args([x], y)


def _compiled(step, recompute):
    mesh = Mesh((2,), ("tp",))
    ins, outs = block_tp_placements(step, mesh)
    return shardx.compile(step, mesh=mesh, in_placements=ins, out_placements=outs,
                          recompute=recompute)


def _torch(t):
    return t.to_torch() if isinstance(t, shardx.ShardedTensor) else t


def _peak(compiled, args):
    """The largest rank's measured peak of program-allocated bytes."""
    return max(measured_peaks(compiled, args))


def test_selective_recomputation_is_bitwise_equal_and_lowers_the_measured_peak():
    # Tests that a tp-sharded transformer block train step compiled with
    # selective recomputation returns exactly the outputs of the one without
    # (two steps, the second from the first's state), that the eager step
    # agrees with both, and that the runtime measures a lower peak.
    step, args = _block_step()
    results, peaks = {}, {}
    for policy in ("none", "selective"):
        compiled = _compiled(step, policy)
        first = compiled(*args)
        second = compiled(*args)
        results[policy] = [_torch(t) for t in pytree.tree_leaves((first, second))]
        peaks[policy] = _peak(compiled, args)
    assert len(results["none"]) == len(results["selective"]) > 10
    for a, b in zip(results["none"], results["selective"]):
        assert torch.equal(a, b)
    with shardx.eager_context():
        eager = pytree.tree_leaves(step(*args))
    for a, b in zip(eager, results["none"][:len(eager)]):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4)  # f32 Adam, another summation order
    assert peaks["selective"] < 0.9 * peaks["none"], peaks


def test_policy_is_checked_and_keyed():
    # Tests that an unknown policy is a ValueError before any trace, and
    # that two policies compile two artifacts (the policy is in the key).
    step, args = _block_step()
    with pytest.raises(ValueError, match="recompute='most' is not a policy"):
        _compiled(step, "most")
    paths = set()
    for policy in ("none", "aggressive"):
        compiled = _compiled(step, policy)
        compiled(*args)
        paths.add(list(compiled._executables.values())[-1].path)
    assert len(paths) == 2


def _compiled_budget(step, budget):
    mesh = Mesh((2,), ("tp",))
    ins, outs = block_tp_placements(step, mesh)
    return shardx.compile(step, mesh=mesh, in_placements=ins, out_placements=outs,
                          recompute="budget", recompute_budget=budget)


def test_budget_recomputation_is_bitwise_equal_and_lowers_the_measured_peak():
    # Tests that the memory-budget policy (an impossible budget: every copy
    # that lowers the modeled activation peak) returns exactly the outputs
    # of no recomputation with a lower measured peak, that a budget the step
    # fits already measures the same peak as none, and that the budget is in
    # the cache key (three artifacts).
    step, args = _block_step()
    results, peaks, paths = {}, {}, set()
    for budget in (None, 0, 1 << 40):
        compiled = (_compiled(step, "none") if budget is None
                    else _compiled_budget(step, budget))
        first = compiled(*args)
        second = compiled(*args)
        results[budget] = [_torch(t) for t in pytree.tree_leaves((first, second))]
        peaks[budget] = _peak(compiled, args)
        paths.add(list(compiled._executables.values())[-1].path)
    assert len(paths) == 3
    for budget in (0, 1 << 40):
        assert len(results[budget]) == len(results[None]) > 10
        for a, b in zip(results[None], results[budget]):
            assert torch.equal(a, b)
    assert peaks[0] < 0.9 * peaks[None], peaks
    # A budget the step fits makes no copy: the same program as none's. The
    # runtime's meter is not exact to the byte between runs of one program
    # on threads (the clean-clone CI measured 450104 against 450088); a copy
    # of this block moves the peak by kilobytes.
    assert abs(peaks[1 << 40] - peaks[None]) <= 1024, peaks


def test_budget_is_checked():
    # Tests that the budget policy needs a budget, a budget needs the
    # policy, and a budget is a non-negative int, each a ValueError before
    # any trace.
    step, _ = _block_step()
    mesh = Mesh((2,), ("tp",))
    with pytest.raises(ValueError, match="go together"):
        shardx.compile(step, mesh=mesh, recompute="budget")
    with pytest.raises(ValueError, match="go together"):
        shardx.compile(step, mesh=mesh, recompute="selective", recompute_budget=100)
    for bad in (-1, 1.5, "1MiB", True):
        with pytest.raises(ValueError, match="expected a non-negative int"):
            shardx.compile(step, mesh=mesh, recompute="budget", recompute_budget=bad)


class _Stack(torch.nn.Module):
    """Transformer blocks in a row, each through torch.utils.checkpoint
    (non-reentrant, as torchtitan and Hugging Face call it) or not."""

    def __init__(self, checkpointed: bool):
        super().__init__()
        self.checkpointed = checkpointed
        self.blocks = torch.nn.ModuleList([models.Block(32, 4, 128) for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x


def _stack_step(checkpointed: bool):
    torch.manual_seed(0)
    return shardx.TrainStep(_Stack(checkpointed), F.mse_loss, "adam", lr=1e-3)


def _stack_compiled(step, sharded: bool):
    if not sharded:
        return shardx.compile(step, Mesh((1,), ("dp",)))
    mesh = Mesh((2,), ("tp",))
    col, row = [S(0)], [S(1)]
    per_block = {"attn.q.weight": col, "attn.q.bias": col, "attn.k.weight": col,
                 "attn.k.bias": col, "attn.v.weight": col, "attn.v.bias": col,
                 "attn.out.weight": row, "fc1.weight": col, "fc1.bias": col, "fc2.weight": row}
    ins, outs = step.placements(mesh, {f"blocks.{i}.{n}": p for i in range(3)
                                       for n, p in per_block.items()}, [[R()]], [R()])
    return shardx.compile(step, mesh=mesh, in_placements=ins, out_placements=outs)


def _two_steps(fn, args):
    """The results of a step and of a second step from its parameters and
    state (a recomputation that read the module's own parameters, not the
    step's, would differ there)."""
    loss, params, state = fn(*args)
    params = [_torch(p) for p in params]
    state = pytree.tree_map(_torch, state)
    second = fn(params, state, *args[2:])
    return [_torch(t) for t in pytree.tree_leaves(((loss, params, state), second))]


@pytest.mark.parametrize("sharded", [False, True], ids=["one_rank", "tp2"])
def test_torch_checkpoint_is_recomputed_bitwise_equal_with_a_lower_peak(sharded):
    # Tests that a stack of transformer blocks whose forward calls each block
    # through torch.utils.checkpoint (non-reentrant) traces on fake tensors,
    # compiles to a program that recomputes each block at its backward (the
    # runtime measures a lower peak than the same stack without checkpoints,
    # both traced without regions) and returns, over two steps, exactly what
    # the stack without checkpoints returns under ShardX, and what eager
    # PyTorch returns with and without the checkpoints.
    x, y = torch.randn(4, 32, 32), torch.randn(4, 32, 32)
    results, peaks, eager = {}, {}, {}
    for checkpointed in (False, True):
        step = _stack_step(checkpointed)
        args = step.example_args([x], y)
        with regions_enabled(False):
            compiled = _stack_compiled(step, sharded)
            results[checkpointed] = _two_steps(compiled, args)
        assert tracing.last_mode == "fake"
        peaks[checkpointed] = _peak(compiled, args)
        with shardx.eager_context():
            eager[checkpointed] = _two_steps(step, args)
    assert len(results[True]) == len(results[False]) > 100
    for a, b in zip(results[False], results[True]):
        assert torch.equal(a, b)
    for a, b in zip(eager[False], eager[True]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(eager[True], results[True]):
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-4)  # f32 Adam, another summation order
    assert peaks[True] < 0.8 * peaks[False], peaks


def test_torch_checkpoint_traces_with_regions_on():
    # Tests that with regional tracing on (the default), a block called
    # through torch.utils.checkpoint is traced inline (fake tensors, no
    # region function for it) and still matches the stack without
    # checkpoints bit for bit.
    x, y = torch.randn(4, 32, 32), torch.randn(4, 32, 32)
    out = {}
    for checkpointed in (False, True):
        step = _stack_step(checkpointed)
        args = step.example_args([x], y)
        with regions_enabled(True):
            text = shardx.trace(step, args, name="stack")
            assert tracing.last_mode == "fake"
            out[checkpointed] = [_torch(t) for t in
                                 pytree.tree_leaves(_stack_compiled(step, False)(*args))]
        assert ("shardx_region" in text) == (not checkpointed)
        assert ("shardx.checkpoint.2" in text) == checkpointed
    for a, b in zip(out[False], out[True]):
        assert torch.equal(a, b)
