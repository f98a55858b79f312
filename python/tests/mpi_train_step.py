"""Run by test_jit.py under ``mpirun -np 2``: a train step compiled with
``backend="mpi"`` (each process one rank of a dp mesh), three steps against
eager PyTorch in every process, then a ShardedTensor's local shard. Writes
``rank R ok`` and the losses to ``<argv[2]>/rank<R>`` (a file: the job's
forwarded stdout may lose lines when it is aborted); then a fourth step with
a failure injected on rank 1, which ends the job naming the rank."""

import os
import sys
sys.path.insert(0, sys.argv[1])
import torch
import torch.nn as nn
import torch.nn.functional as F
import shardx
from shardx import Mesh, Replicate, Shard, ShardedTensor
from shardx.train import TrainStep

torch.manual_seed(0)
mesh = Mesh((2,), ("dp",))
step = TrainStep(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8)), F.mse_loss,
                 "sgd", lr=0.1, momentum=0.9)
ins, outs = step.placements(mesh, {}, [[Shard(0)]], [Shard(0)])
f = shardx.compile(step, mesh, ins, outs, backend="mpi", donate=(0, 1))
params, state, inputs, target = step.example_args([torch.randn(4, 8)], torch.randn(4, 8))
rank = f._session.process_rank
p, s, ep, es = params, state, params, state
losses = []
for i in range(3):
    loss, p, s = f(p, s, inputs, target)
    el, ep, es = step.run_eager(ep, es, inputs, target)
    losses.append(loss.item())
    torch.testing.assert_close(torch.tensor(losses[-1]), el.detach(), rtol=1e-5, atol=1e-6)
    for a, b in zip(p, ep):
        torch.testing.assert_close(a.to_torch(), b.detach(), rtol=1e-5, atol=1e-6)
x = ShardedTensor.from_torch(inputs[0], mesh, [Shard(0)], backend="mpi")
assert x.local(rank).shape == (2, 8)
torch.testing.assert_close(torch.from_numpy(x.local(rank).copy()), inputs[0][2 * rank:2 * rank + 2])
try:
    x.local(1 - rank)
    raise AssertionError("another rank's shard was readable")
except ValueError as e:
    assert "lives in another process" in str(e), e
with open(os.path.join(sys.argv[2], f"rank{rank}"), "w") as out:
    out.write(f"rank {rank} ok " + " ".join(f"{l:.6f}" for l in losses))
x.full()  # a collective: both files are written before the failure
os.environ["SHARDX_TEST_FAIL_RANK"] = "1"
f(p, s, inputs, target)
print(f"rank {rank} survived the injected failure", flush=True)
