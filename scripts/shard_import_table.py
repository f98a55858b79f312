#!/usr/bin/env python3
"""Measures the import of upstream MLIR `shard` programs (docs/ShardImport.md).

For every program of the upstream-style suite
(test/Conversion/ShardToShardX/Inputs/upstream-suite.mlir, one `//--- name`
section each):

* import:    `shardx-opt --shardx-import-shard` succeeds;
* partition: `shardx-opt --shardx-import-shard --shardx-spmd` succeeds, and
             the collectives of ShardX's plan, by kind;
* run:       `shardx-run --check` (threads) passes: sharded outputs match
             the unsharded run of the same program;
* upstream:  `mlir-opt-22` runs upstream's sharding-propagation and
             shard-partition (then canonicalize) on the same input, and the
             shard collectives of its output, by kind.

Prints a Markdown table; `--write-doc` puts it between the table markers of
docs/ShardImport.md. Needs no torch: the venv's (or any) Python 3, a ShardX
build ($SHARDX_BUILD or --build, default ./build) and mlir-opt-22.

    ~/.cache/shardx/venv/bin/python scripts/shard_import_table.py --write-doc
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUITE = os.path.join(ROOT, "test", "Conversion", "ShardToShardX", "Inputs",
                     "upstream-suite.mlir")
DOC = os.path.join(ROOT, "docs", "ShardImport.md")
BEGIN, END = "<!-- shard-import-table begin -->", "<!-- shard-import-table end -->"

UPSTREAM_PIPELINE = ("builtin.module(func.func(sharding-propagation,"
                     "shard-partition),canonicalize)")

TOSA_LOWERING = ("builtin.module(func.func(tosa-to-linalg-named,tosa-to-linalg,"
                 "tosa-to-arith,tosa-to-tensor))")

# Ops that move data between devices, and local steps (no communication).
SHARDX_COMM = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
               "permute", "broadcast", "exchange", "send", "recv"]
SHARDX_LOCAL = ["chunk", "partition_value", "axis_index", "local_size"]
SHARD_COMM = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
              "broadcast", "gather", "scatter", "reduce", "shift", "send",
              "recv", "update_halo"]
SHARD_LOCAL = ["all_slice", "process_multi_index", "process_linear_index",
               "neighbors_linear_indices", "shard_shape"]


def split_suite(path):
    """The suite's `//--- name.mlir` sections, in order: [(name, text)]."""
    sections, name, lines = [], None, []
    with open(path) as f:
        for line in f:
            m = re.match(r"^//--- (\S+)\.mlir\s*$", line)
            if m:
                if name:
                    sections.append((name, "".join(lines)))
                name, lines = m.group(1), []
            elif name:
                lines.append(line)
    if name:
        sections.append((name, "".join(lines)))
    return sections


def run(cmd, timeout=300):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", "timed out after %d s" % timeout


def count_ops(text, dialect, kinds):
    """Counts `dialect.kind` ops (and their `_start` forms) in printed IR."""
    counts = collections.Counter()
    pattern = re.compile(r"^\s*(?:%[^=]*=\s*)?" + re.escape(dialect) +
                         r"\.(\w+)\b", re.M)
    for m in pattern.finditer(text):
        kind = m.group(1)
        if kind.endswith("_start"):
            kind = kind[: -len("_start")]
        if kind in kinds:
            counts[kind] += 1
    return counts


def fmt_counts(counts, kinds):
    parts = ["%s %d" % (k, counts[k]) for k in kinds if counts[k]]
    return ", ".join(parts) if parts else "none"


def first_error(stderr):
    """The first diagnostic's message, without the file position."""
    for line in stderr.splitlines():
        m = re.search(r"error: (.*)", line)
        if m:
            return m.group(1).strip()
    return stderr.strip().splitlines()[0] if stderr.strip() else "failed"


def short(msg, n=70):
    msg = msg.replace("|", "/")
    return msg if len(msg) <= n else msg[: n - 1] + "…"


def upstream_status(rc, stderr):
    if rc is None:
        return "timeout", stderr
    if rc < 0 or "Stack dump" in stderr or "PLEASE submit a bug report" in stderr:
        return "crash", "crashes in shard-partition" if "partition" in stderr.lower() \
            else "crashes"
    if rc != 0:
        return "error", first_error(stderr)
    return "ok", ""


def measure(name, text, tools, workdir):
    path = os.path.join(workdir, name + ".mlir")
    with open(path, "w") as f:
        f.write(text)
    row = {"name": name}
    rc, _, err = run([tools["shardx-opt"], "--shardx-import-shard", path,
                      "-o", os.devnull])
    row["import"] = rc == 0
    row["why"] = "" if rc == 0 else first_error(err)
    row["partition"] = False
    row["run"] = False
    row["sx_comm"] = row["sx_local"] = ""
    if row["import"]:
        rc, out, err = run([tools["shardx-opt"], "--shardx-import-shard",
                            "--shardx-spmd", path])
        row["partition"] = rc == 0
        if rc == 0:
            row["sx_comm"] = fmt_counts(count_ops(out, "shardx", SHARDX_COMM),
                                        SHARDX_COMM)
            row["sx_local"] = fmt_counts(count_ops(out, "shardx", SHARDX_LOCAL),
                                         SHARDX_LOCAL)
        else:
            row["why"] = first_error(err)
    if row["partition"]:
        rc, out, err = run([tools["shardx-run"], path, "--check"])
        row["run"] = rc == 0 and "check passed" in out
        if not row["run"]:
            row["why"] = first_error(err) if err.strip() else "check failed"
    rc, out, err = run([tools["mlir-opt"], "--pass-pipeline=" + UPSTREAM_PIPELINE,
                        path])
    row["up"], row["up_why"] = upstream_status(rc, err)
    row["up_comm"] = row["up_local"] = ""
    if row["up"] == "ok":
        # TOSA's verifiers do not check the shapes of a matmul's operands
        # against each other; linalg's do: lower the partitioned program.
        part = os.path.join(workdir, name + ".upstream.mlir")
        with open(part, "w") as f:
            f.write(out)
        vrc, _, verr = run([tools["mlir-opt"], "--pass-pipeline=" + TOSA_LOWERING,
                            part, "-o", os.devnull])
        if vrc != 0:
            row["up"], row["up_why"] = "invalid", first_error(verr)
        row["up_comm"] = fmt_counts(count_ops(out, "shard", SHARD_COMM),
                                    SHARD_COMM)
        row["up_local"] = fmt_counts(count_ops(out, "shard", SHARD_LOCAL),
                                     SHARD_LOCAL)
    return row


def table(rows):
    yes = lambda b: "yes" if b else "no"
    out = ["| function | import | partition | run + check | ShardX collectives "
           "| ShardX local steps | upstream | upstream collectives "
           "| upstream local steps |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        up = r["up"] if r["up"] == "ok" else "%s: %s" % (r["up"], short(r["up_why"]))
        imp = yes(r["import"]) if r["import"] else "no: " + short(r["why"])
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["name"], imp, yes(r["partition"]) if r["import"] else "-",
            yes(r["run"]) if r["import"] else "-", r["sx_comm"] or "-",
            r["sx_local"] or "-", up, r["up_comm"] or "-", r["up_local"] or "-"))
    n = len(rows)
    summary = ("%d functions: %d import, %d partition, %d run and match the "
               "unsharded run. Upstream's sharding-propagation + shard-partition: "
               "%d ok, %d with output that does not verify once TOSA is lowered "
               "to linalg, %d errors, %d crashes." % (
                   n, sum(r["import"] for r in rows),
                   sum(r["partition"] for r in rows),
                   sum(r["run"] for r in rows),
                   sum(r["up"] == "ok" for r in rows),
                   sum(r["up"] == "invalid" for r in rows),
                   sum(r["up"] == "error" for r in rows),
                   sum(r["up"] == "crash" for r in rows)))
    return "\n".join(out) + "\n\n" + summary + "\n"


def find_tools(build):
    tools = {}
    for tool in ("shardx-opt", "shardx-run"):
        path = os.path.join(build, "bin", tool)
        if not os.path.exists(path):
            sys.exit("shard_import_table: %s not found (build ShardX, or set "
                     "--build / $SHARDX_BUILD)" % path)
        tools[tool] = path
    mlir_opt = shutil.which("mlir-opt-22") or "/usr/lib/llvm-22/bin/mlir-opt"
    if not os.path.exists(mlir_opt):
        sys.exit("shard_import_table: mlir-opt-22 not found (upstream's "
                 "partitioner for the comparison)")
    tools["mlir-opt"] = mlir_opt
    return tools


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get(
        "SHARDX_BUILD", os.path.join(ROOT, "build")))
    ap.add_argument("--suite", default=SUITE)
    ap.add_argument("--only", nargs="*", help="measure these functions only")
    ap.add_argument("--write-doc", action="store_true",
                    help="replace the table in docs/ShardImport.md")
    args = ap.parse_args()
    tools = find_tools(args.build)
    sections = split_suite(args.suite)
    if args.only:
        sections = [s for s in sections if s[0] in args.only]
    rows = []
    with tempfile.TemporaryDirectory(prefix="shard-import-") as workdir:
        for name, text in sections:
            print("measuring %s" % name, file=sys.stderr)
            rows.append(measure(name, text, tools, workdir))
    text = table(rows)
    print(text)
    if args.write_doc:
        with open(DOC) as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            sys.exit("shard_import_table: %s has no table markers" % DOC)
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(DOC, "w") as f:
            f.write(head + BEGIN + "\n" + text + END + tail)


if __name__ == "__main__":
    main()
