#!/usr/bin/env python3
"""The ragged all-to-all programs of scripts/gpu_check.sh (its build half).

    ragged_gpu_check.py BIN DIR

For each form (ragged-counted.mlir: the counts exchanged; ragged-known.mlir:
given the counts it receives) on 2 and on 4 ranks and over ep of a (dp, ep)
2x2 mesh (two groups side by side, as experts beside data parallelism),
makes DIR/ragged_<form>_<mesh> as the build half makes a traced program's
folder: program.mlir (the template
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
FORMS = ("counted", "known")
# name: (mesh, all its axes, the group axes, the groups (ranks in member
# order; rank = the linear index over all the mesh's axes), c, the rows a
# rank holds (operand and result)). c[r][j]: the rows rank r sends to
# member j of its group. Uneven, with zeros: rank 0 sends none to itself;
# on 4 ranks rank 2 sends nothing at all (and still receives) and rank 1
# sends to 2 of the 4; on 2x2 rank 2 (dp 1, ep 0) sends none to rank 3.
MESHES = {
    "2": ("2", "[0]", "[0]", [[0, 1]], [[0, 3], [2, 1]], 5),
    "4": ("4", "[0]", "[0]", [[0, 1, 2, 3]],
          [[0, 3, 1, 2], [2, 0, 0, 4], [0, 0, 0, 0], [1, 2, 2, 1]], 8),
    "2x2": ('2x2, axes = ["dp", "ep"]', "[0, 1]", "[1]", [[0, 1], [2, 3]],
            [[0, 3], [2, 1], [1, 0], [4, 2]], 6),
}

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


def group_of(groups, rank):
    """(the ranks of rank's group in member order, rank's member index)."""
    for g in groups:
        if rank in g:
            return g, g.index(rank)
    sys.exit("rank %d is in no group" % rank)


def received_counts(groups, c, rank):
    """What rank receives from each member of its group."""
    g, j = group_of(groups, rank)
    return [c[s][j] for s in g]


def inputs(mesh):
    """x (ranks x rows x COLS, values in [1, 2): no row is zeros), c."""
    _, _, _, groups, c, r = MESHES[mesh]
    rng = random.Random(len(c))
    x = [[[f32(1 + rng.random()) for _ in range(COLS)] for _ in range(r)]
         for _ in range(len(c))]
    for rank in range(len(c)):
        if sum(c[rank]) > r or sum(received_counts(groups, c, rank)) > r:
            sys.exit("MESHES[%r]: rank %d sends or receives more than %d "
                     "rows" % (mesh, rank, r))
    return x, c


def answer(form, mesh, x, c):
    """The outputs the program must give, as (descr, shape, values)."""
    _, _, _, groups, _, r = MESHES[mesh]
    p, n = len(c), len(c[0])
    zero = [0.0] * COLS
    received, back = [], []
    for rank in range(p):
        g, j = group_of(groups, rank)
        rows = []
        for s in g:  # from each member in order, at its offset for j
            off = sum(c[s][:j])
            rows += x[s][off:off + c[s][j]]
        received += rows + [zero] * (r - len(rows))
    for s in range(p):
        sent = sum(c[s])
        back += x[s][:sent] + [zero] * (r - sent)
    flat = lambda rows: [v for row in rows for v in row]
    outs = [("<f4", (p * r, COLS), flat(received)),
            ("<f4", (p * r, COLS), flat(back))]
    if form == "counted":
        outs.append(("<i8", (p * n,), [v for rank in range(p)
                                       for v in received_counts(groups, c,
                                                                rank)]))
        outs.append(("<i8", (p * n,), [v for row in c for v in row]))
    return outs


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout)
        sys.exit("error: %s exited with %d" % (" ".join(cmd), p.returncode))
    return p.stdout


def make(bindir, out, form, mesh):
    name = "ragged_%s_%s" % (form, mesh)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    shape, axes_all, axes, groups, c, r = MESHES[mesh]
    p, n = len(c), len(c[0])
    with open(os.path.join(HERE, "ragged-%s.mlir" % form)) as f:
        text = f.read()
    for key, value in (("@MESH@", shape), ("@ALL@", axes_all),
                       ("@AXES@", axes), ("@PR@", p * r), ("@PN@", p * n),
                       ("@P@", p), ("@N@", n), ("@R@", r)):
        text = text.replace(key, str(value))
    program = os.path.join(d, "program.mlir")
    with open(program, "w") as f:
        f.write(text)
    x, c = inputs(mesh)
    paths = [os.path.join(d, "in0.npy"), os.path.join(d, "in1.npy")]
    write_npy(paths[0], "<f4", (p, r, COLS),
              [v for m in x for row in m for v in row])
    write_npy(paths[1], "<i8", (p, n), [v for row in c for v in row])
    if form == "known":
        paths.append(os.path.join(d, "in2.npy"))
        write_npy(paths[2], "<i8", (p, n),
                  [v for rank in range(p)
                   for v in received_counts(groups, c, rank)])
    # The CPU reference: the same program on the threads backend.
    cpu = os.path.join(d, "cpu")
    os.makedirs(cpu, exist_ok=True)
    run([os.path.join(bindir, "shardx-compile"), program, "-o",
         os.path.join(cpu, "cpu.so")])
    run([os.path.join(bindir, "shardx-exec"), os.path.join(cpu, "cpu.so"),
         "--inputs", ",".join(paths), "--outputs", cpu, "--timeout", "60"])
    want = answer(form, mesh, x, c)
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
    moved = sum(c[s][j] for s in range(p) for j in range(n)
                if group_of(groups, s)[0][j] != s)
    print("%s: CPU reference (threads, %d ranks) = the answer, %d outputs; "
          "%d rows moved between ranks each way; local.so" %
          (name, p, len(want), moved))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: ragged_gpu_check.py BIN DIR")
    for form in FORMS:
        for mesh in MESHES:
            make(sys.argv[1], sys.argv[2], form, mesh)


if __name__ == "__main__":
    main()
