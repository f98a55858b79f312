"""Activation recomputation through ``shardx.compile(..., recompute=...)``
(docs/Compiler.md): the same numbers bit for bit, a lower measured peak, and
the policy in the cache key."""

import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree

import shardx
from shardx_dev import models
from shardx.placements import Mesh
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
