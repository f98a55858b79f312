#!/usr/bin/env python3
"""Seeds the fuzz corpora from the lit tests.

Every `test/**/*.mlir` file is split on `// -----` (as --split-input-file
does) and its comment lines (RUN, CHECK, expected-error) are dropped:

  --target spmd    one module per case;
  --target layout  per case, its `shardx.mesh` lines followed by each layout
                   it uses (`#A : tensor<...>`), and each reshard
                   (`#A to #B : tensor<...>`).

Files are named after a hash of their content, so reseeding an existing
corpus adds nothing twice.
"""

import argparse
import hashlib
import os
import re
import sys

SPLIT = re.compile(r"^// -----\s*$", re.MULTILINE)
TENSOR = re.compile(r"tensor<[^<>]*>")
REDISTRIBUTE = re.compile(r"(tensor<[^<>]*>)\s+from\s+(#shardx\.layout<)")


def balanced(text, start):
    """The end of the `<...>` that opens at `text[start - 1]`."""
    depth = 1
    i = start
    while i < len(text) and depth:
        depth += {"<": 1, ">": -1}.get(text[i], 0)
        i += 1
    return i


def layouts(line):
    """(begin, end) of every `#shardx.layout<...>` of a line."""
    spans = []
    start = line.find("#shardx.layout<")
    while start >= 0:
        end = balanced(line, start + len("#shardx.layout<"))
        spans.append((start, end))
        start = line.find("#shardx.layout<", end)
    return spans


def cases(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for case in SPLIT.split(text):
        lines = [l for l in case.splitlines() if not l.lstrip().startswith("//")]
        body = "\n".join(lines).strip()
        if body:
            yield body + "\n"


def layout_inputs(case):
    lines = case.splitlines()
    meshes = "".join(l.strip() + "\n" for l in lines
                     if l.lstrip().startswith("shardx.mesh"))
    for line in lines:
        spans = layouts(line)
        types = TENSOR.findall(line)
        type_suffix = " : " + types[0] if types else ""
        for begin, end in spans:
            yield meshes + line[begin:end] + type_suffix + "\n"
        m = REDISTRIBUTE.search(line)
        if m and len(spans) >= 2:
            (b0, e0), (b1, e1) = spans[0], spans[1]
            yield (meshes + line[b0:e0] + " to " + line[b1:e1] + " : " +
                   m.group(1) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--target", choices=["spmd", "layout"], required=True)
    parser.add_argument("--out", required=True, help="corpus directory")
    parser.add_argument("tests", nargs="+", help="test directories or files")
    args = parser.parse_args()

    paths = []
    for root in args.tests:
        if os.path.isfile(root):
            paths.append(root)
            continue
        for dirpath, _, names in os.walk(root):
            paths += [os.path.join(dirpath, n) for n in names
                      if n.endswith(".mlir")]
    os.makedirs(args.out, exist_ok=True)
    written = set()
    for path in sorted(paths):
        for case in cases(path):
            inputs = [case] if args.target == "spmd" else layout_inputs(case)
            for data in inputs:
                name = hashlib.sha1(data.encode()).hexdigest()[:16]
                if name in written:
                    continue
                written.add(name)
                with open(os.path.join(args.out, name), "w",
                          encoding="utf-8") as f:
                    f.write(data)
    print(f"{len(written)} {args.target} inputs in {args.out}", file=sys.stderr)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
