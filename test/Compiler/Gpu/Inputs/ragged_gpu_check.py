#!/usr/bin/env python3
"""The ragged all-to-all programs of scripts/gpu_check.sh (its build half).

    ragged_gpu_check.py BIN DIR

For each form (ragged-counted.mlir: the counts exchanged; ragged-known.mlir:
given the counts it receives) on 2 and on 4 ranks, makes DIR/ragged_<form>_<n>
as the build half makes a traced program's folder: program.mlir (the template
with its sizes), in<i>.npy (the rows and the counts), ref<i>.npy (the outputs
of BIN/shardx-exec on the CPU's threads backend) and local.so (BIN/shardx-
compile --target=cuda of the same program: the run half runs it on
cuda-local against ref<i>.npy). Before it compiles for CUDA it checks the CPU
outputs against the answer computed here from the inputs alone, exactly, and
fails naming the first difference.

Pure Python (no numpy): lit's Python runs it too (gpu-check.test).
"""

import ast
import os
import random
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
COLS = 3  # elements a row
# c[s][j]: the rows member s sends to member j. Uneven, with zeros: member 0
# sends none to itself; on 4 ranks member 2 sends nothing at all (and still
# receives) and member 1 sends to 2 of the 4.
COUNTS = {
    2: [[0, 3], [2, 1]],
    4: [[0, 3, 1, 2], [2, 0, 0, 4], [0, 0, 0, 0], [1, 2, 2, 1]],
}
ROWS = {2: 5, 4: 8}  # rows a member holds (operand and result)
FORMS = ("counted", "known")

NPY_TYPES = {"<f4": "f", "<i8": "q"}


def write_npy(path, descr, shape, values):
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %r, }" % (
        descr, tuple(shape))
    pad = (64 - (10 + len(header) + 1) % 64) % 64
    header = (header + " " * pad + "\n").encode("latin1")
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header)
        f.write(struct.pack("<%d%s" % (len(values), NPY_TYPES[descr]),
                            *values))


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x93NUMPY":
        sys.exit("%s: not a .npy file" % path)
    if data[6] == 1:
        size, start = struct.unpack("<H", data[8:10])[0], 10
    else:
        size, start = struct.unpack("<I", data[8:12])[0], 12
    header = ast.literal_eval(data[start:start + size].decode("latin1"))
    descr, shape = header["descr"], tuple(header["shape"])
    if descr not in NPY_TYPES or header["fortran_order"]:
        sys.exit("%s: unexpected %r" % (path, header))
    count = 1
    for d in shape:
        count *= d
    body = data[start + size:]
    values = struct.unpack("<%d%s" % (count, NPY_TYPES[descr]),
                           body[:count * struct.calcsize(NPY_TYPES[descr])])
    return descr, shape, list(values)


def f32(v):
    return struct.unpack("<f", struct.pack("<f", v))[0]


def inputs(n):
    """x (n members x ROWS x COLS, values in [1, 2): no row is zeros), c."""
    rng = random.Random(n)
    r = ROWS[n]
    x = [[[f32(1 + rng.random()) for _ in range(COLS)] for _ in range(r)]
         for _ in range(n)]
    c = COUNTS[n]
    for s in range(n):
        if sum(c[s]) > r or sum(c[t][s] for t in range(n)) > r:
            sys.exit("COUNTS[%d]: member %d sends or receives more than %d "
                     "rows" % (n, s, r))
    return x, c


def answer(form, n, x, c):
    """The outputs the program must give, as (descr, shape, values)."""
    r = ROWS[n]
    zero = [0.0] * COLS
    received, back = [], []
    for j in range(n):
        rows = []
        for s in range(n):  # from each member in order, at its offset for j
            off = sum(c[s][:j])
            rows += x[s][off:off + c[s][j]]
        received += rows + [zero] * (r - len(rows))
    for s in range(n):
        sent = sum(c[s])
        back += x[s][:sent] + [zero] * (r - sent)
    flat = lambda rows: [v for row in rows for v in row]
    outs = [("<f4", (n * r, COLS), flat(received)),
            ("<f4", (n * r, COLS), flat(back))]
    if form == "counted":
        outs.append(("<i8", (n * n,),
                     [c[s][j] for j in range(n) for s in range(n)]))
        outs.append(("<i8", (n * n,), [v for row in c for v in row]))
    return outs


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout)
        sys.exit("error: %s exited with %d" % (" ".join(cmd), p.returncode))
    return p.stdout


def make(bindir, out, form, n):
    name = "ragged_%s_%d" % (form, n)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    r = ROWS[n]
    with open(os.path.join(HERE, "ragged-%s.mlir" % form)) as f:
        text = f.read()
    for key, value in (("@NR@", n * r), ("@NN@", n * n), ("@N@", n),
                       ("@R@", r)):
        text = text.replace(key, str(value))
    program = os.path.join(d, "program.mlir")
    with open(program, "w") as f:
        f.write(text)
    x, c = inputs(n)
    paths = [os.path.join(d, "in0.npy"), os.path.join(d, "in1.npy")]
    write_npy(paths[0], "<f4", (n, r, COLS),
              [v for m in x for row in m for v in row])
    write_npy(paths[1], "<i8", (n, n), [v for row in c for v in row])
    if form == "known":
        paths.append(os.path.join(d, "in2.npy"))
        write_npy(paths[2], "<i8", (n, n),
                  [c[s][j] for j in range(n) for s in range(n)])
    # The CPU reference: the same program on the threads backend.
    cpu = os.path.join(d, "cpu")
    os.makedirs(cpu, exist_ok=True)
    run([os.path.join(bindir, "shardx-compile"), program, "-o",
         os.path.join(cpu, "cpu.so")])
    run([os.path.join(bindir, "shardx-exec"), os.path.join(cpu, "cpu.so"),
         "--inputs", ",".join(paths), "--outputs", cpu, "--timeout", "60"])
    want = answer(form, n, x, c)
    for i, (descr, shape, values) in enumerate(want):
        got = os.path.join(cpu, "ragged.out%d.npy" % i)
        gdescr, gshape, gvalues = read_npy(got)
        if (gdescr, gshape) != (descr, shape):
            sys.exit("error: %s: output %d is %s %r, expected %s %r" %
                     (name, i, gdescr, gshape, descr, shape))
        for k, (g, w) in enumerate(zip(gvalues, values)):
            if g != w:
                sys.exit("error: %s: the CPU's output %d differs from the "
                         "answer at element %d: %r, expected %r" %
                         (name, i, k, g, w))
        os.replace(got, os.path.join(d, "ref%d.npy" % i))
    shutil.rmtree(cpu)
    run([os.path.join(bindir, "shardx-compile"), "--target=cuda", program,
         "-o", os.path.join(d, "local.so")])
    moved = sum(c[s][j] for s in range(n) for j in range(n) if s != j)
    print("%s: CPU reference (threads, %d ranks) = the answer, %d outputs; "
          "%d rows moved between ranks each way; local.so" %
          (name, n, len(want), moved))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: ragged_gpu_check.py BIN DIR")
    for form in FORMS:
        for n in sorted(COUNTS):
            make(sys.argv[1], sys.argv[2], form, n)


if __name__ == "__main__":
    main()
