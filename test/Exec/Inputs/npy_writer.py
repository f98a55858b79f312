"""Writes .npy files (format 1.0, little-endian, C order) without numpy,
which lit's Python does not have: for the input scripts of test/Exec."""

import struct

CODES = {"f32": ("<f4", "<f"), "i32": ("<i4", "<i"), "i64": ("<i8", "<q")}


def save(path, shape, dtype, values):
    """Writes `values` (row-major, len = prod(shape)) of `dtype` (f32, i32 or
    i64) as a `shape` array to `path`."""
    code, fmt = CODES[dtype]
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    header = f"{{'descr': '{code}', 'fortran_order': False, 'shape': ({dims}), }}"
    header += " " * (-(len(header) + 11) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(b"".join(struct.pack(fmt, v) for v in values))
