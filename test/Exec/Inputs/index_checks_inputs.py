"""Writes .npy inputs of test/Exec/Inputs/index-checks.mlir (w, idx, x, g,
b: an [8, 4] f32 table, [4] embedding indices, a [4, 5] f32 tensor, [4, 2]
gather indices, [4] bincount values) into the directory argv[1], without
numpy: `good` ones (every index in range) and, per check, one index tensor
with one value out of range, on the second rank's half of the split
indices:

  idx_bad.npy  an embedding index of 10**9   (check 1, IndexError)
  g_bad.npy    a gather index of 5 in dim 1  (check 2, RuntimeError)
  b_bad.npy    a bincount value of -1        (check 4, RuntimeError)
"""
import os
import sys

from npy_writer import save

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
save(os.path.join(out, "w.npy"), (8, 4), "f32", [0.25 * i - 4 for i in range(32)])
save(os.path.join(out, "idx.npy"), (4,), "i64", [1, 2, 7, 4])
save(os.path.join(out, "idx_bad.npy"), (4,), "i64", [1, 2, 10**9, 4])
save(os.path.join(out, "x.npy"), (4, 5), "f32", [0.5 * i - 5 for i in range(20)])
save(os.path.join(out, "g.npy"), (4, 2), "i64", [0, 4, 1, 3, 2, 2, 4, 0])
save(os.path.join(out, "g_bad.npy"), (4, 2), "i64", [0, 4, 1, 3, 2, 2, 4, 5])
save(os.path.join(out, "b.npy"), (4,), "i64", [0, 1, 3, 3])
save(os.path.join(out, "b_bad.npy"), (4,), "i64", [0, 1, 3, -1])
