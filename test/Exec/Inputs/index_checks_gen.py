"""Prints test/Exec/Inputs/index-checks.mlir (run from the repository
root: PYTHONPATH=python python test/Exec/Inputs/index_checks_gen.py, less
its three comment lines): the importer's
program for an embedding lookup, a gather, an accumulating index_put and a
bincount with index checks (trace(..., index_checks=True)), the index split
over a 2-rank data-parallel mesh."""
import torch, torch.nn.functional as F, shardx
from shardx import Shard
from shardx.importer import trace

def f(w, idx, x, g, b):
    e = F.embedding(idx, w)
    y = torch.gather(x, 1, g)
    z = torch.zeros(8, 4).index_put((idx,), e, accumulate=True)
    return e.sum(0), y, z, torch.bincount(b, minlength=4)

m = shardx.Mesh((2,), ("dp",))
args = [torch.randn(8, 4), torch.tensor([1, 2, 3, 4]), torch.randn(4, 5),
        torch.tensor([[0, 4]] * 4), torch.tensor([0, 1, 3, 3])]
print(trace(f, args, m, [None, [Shard(0)], [Shard(0)], [Shard(0)], [Shard(0)]], None,
            name="index_checks", index_checks=True, regions=False), end="")
