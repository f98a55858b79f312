"""Checks ragged-rows-3d.mlir's outputs (12x2x3 f32 .npy files, read
without numpy): the rows each rank received and the way back. Prints the
number of elements that differ from the expected ones."""
import struct
import sys


def floats(path, count):
    data = open(path, "rb").read()
    return list(struct.unpack(f"<{count}f", data[-4 * count:]))


def row(s, r):
    return [100 * s + 10 * r + 3 * a + b + 1 for a in range(2) for b in range(3)]


zero = [0.0] * 6
# Member 0 receives row 0 of members 0 and 1; member 1 rows 1 and 2 of
# each. The way back returns each member its rows 0-2, zeros after.
received = row(0, 0) + row(1, 0) + zero * 4 + row(0, 1) + row(0, 2) + row(1, 1) + row(1, 2) + zero * 2
back = row(0, 0) + row(0, 1) + row(0, 2) + zero * 3 + row(1, 0) + row(1, 1) + row(1, 2) + zero * 3
got = floats(sys.argv[1], 72) + floats(sys.argv[2], 72)
print("differ:", sum(g != e for g, e in zip(got, received + back)))
