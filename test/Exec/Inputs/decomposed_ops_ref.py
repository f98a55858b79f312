"""Inputs and references of decomposed-ops.mlir's entry points, without
numpy (lit's Python has none): writes <entry>.in<i>.npy and
<entry>.ref<j>.npy into the folder argv[1]. The references are computed
here, element by element, independently of ShardX's lowering. Every f32
value is a multiple of 1/8, exact in f32."""

import math
import os
import struct
import sys

from npy_writer import save as write

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(entry, inputs, refs):
    for i, a in enumerate(inputs):
        write(os.path.join(out, f"{entry}.in{i}.npy"), *a)
    for j, a in enumerate(refs):
        write(os.path.join(out, f"{entry}.ref{j}.npy"), *a)


def table(rows, cols, seed):
    """rows x cols f32 values in [-4, 4), a multiple of 1/8, row-major."""
    return [((seed + 37 * k) % 64) / 8 - 4 for k in range(rows * cols)]


# Rows by i32 indices; the out-of-range ones (9, -1) read 0 (tensor.gather
# leaves them undefined).
t = table(8, 4, 1)
idx = [2, 9, -1]
ref = [t[r * 4 + c] if 0 <= r < 8 else 0.0 for r in idx for c in range(4)]
save("gather_rows", [((8, 4), "f32", t), ((3, 1), "i32", idx)], [((3, 1, 4), "f32", ref)])

# Elements by (row, column) pairs, rank-reduced to the indices' batch dims.
t = table(5, 6, 2)
pairs = [(0, 0), (4, 5), (2, 3), (1, 1), (3, 0), (0, 5)]
save("gather_points",
     [((5, 6), "f32", t), ((2, 3, 2), "i64", [v for p in pairs for v in p])],
     [((2, 3), "f32", [t[r * 6 + c] for r, c in pairs])])

# Columns of a table (split over 2 ranks by the program), transposed back.
t = table(6, 5, 3)
cols = [4, 0, 2, 2]
save("gather_sharded", [((6, 5), "f32", t), ((4, 1), "i32", cols)],
     [((6, 4), "f32", [t[r * 5 + c] for r in range(6) for c in cols])])

# Rows into a table; coordinate 8 is out of range and writes nothing.
s, d = table(3, 4, 4), table(8, 4, 5)
rows = [5, 0, 8]
ref = list(d)
for k, r in enumerate(rows):
    if 0 <= r < 8:
        ref[r * 4:r * 4 + 4] = s[k * 4:k * 4 + 4]
save("scatter_rows", [((3, 4), "f32", s), ((8, 4), "f32", d), ((3, 1), "i32", rows)],
     [((8, 4), "f32", ref)])

a = table(3, 4, 6)
bits = [struct.unpack("<i", struct.pack("<f", v))[0] for v in a]
save("bitcast", [((3, 4), "f32", a)], [((3, 4), "i32", bits)])

# 5x7 packed into 2x3 tiles: 6x9 padded with -1, tile (i, j) holds
# rows 2i..2i+1 and columns 3j..3j+2.
a = table(5, 7, 7)
packed = [a[(2 * i + r) * 7 + 3 * j + c] if 2 * i + r < 5 and 3 * j + c < 7 else -1.0
          for i in range(3) for j in range(3) for r in range(2) for c in range(3)]
save("pack_unpack", [((5, 7), "f32", a)], [((3, 3, 2, 3), "f32", packed), ((5, 7), "f32", a)])

a = table(3, 5, 8)
ref = []
for r in range(3):
    row = a[r * 5:r * 5 + 5]
    e = [math.exp(v - max(row)) for v in row]
    ref += [v / sum(e) for v in e]
save("softmax", [((3, 5), "f32", a)], [((3, 5), "f32", ref)])

# Integer division: C's truncating division, and where the divisor is 0 or
# (signed) -1 divides the most negative value, a division by 1.
MIN = -2**31
a = [7, -7, 7, MIN, 9, MIN]
b = [2, 2, 0, -1, -4, 0]


def trunc(x, d):
    q = abs(x) // abs(d)
    return q if (x < 0) == (d < 0) else -q


def wrap(x):
    return (x + 2**31) % 2**32 - 2**31


def safe(x, d, signed=True):
    return 1 if d == 0 or (signed and x == MIN and d == -1) else d


def unsigned(x):
    return x % 2**32


q = [wrap(trunc(x, safe(x, d))) for x, d in zip(a, b)]
r = [x - trunc(x, safe(x, d)) * safe(x, d) for x, d in zip(a, b)]
u = [wrap(unsigned(x) // unsigned(safe(x, d, False))) for x, d in zip(a, b)]
v = [wrap(unsigned(x) % unsigned(safe(x, d, False))) for x, d in zip(a, b)]
fl = [wrap(x // safe(x, d)) for x, d in zip(a, b)]
ce = [wrap(-(-x // safe(x, d))) for x, d in zip(a, b)]
save("int_division", [((6,), "i32", a), ((6,), "i32", b)],
     [((6,), "i32", t) for t in (q, r, u, v, fl, ce)])

a = table(1, 4, 9)
save("loop", [((4,), "f32", a)], [((4,), "f32", [8 * v for v in a])])

# Rows read by tensor.extract in a kernel; 10**9 and -5 are out of range
# and read 0 (shardx-guard-tensor-indices).
t = table(8, 4, 11)
idx = [1, 10**9, -5]
save("extract_oob", [((8, 4), "f32", t), ((3,), "i64", idx)],
     [((3, 4), "f32", [t[r * 4 + c] if 0 <= r < 8 else 0.0 for r in idx for c in range(4)])])

# Values written by tensor.insert; position 2**40 is out of range and writes
# nothing.
d, v = table(8, 1, 12), [0.5, -0.25]
pos = [6, 2**40]
ref = list(d)
for p, x in zip(pos, v):
    if 0 <= p < 8:
        ref[p] = x
save("insert_oob", [((8,), "f32", d), ((2,), "i64", pos), ((2,), "f32", v)],
     [((8,), "f32", ref)])
