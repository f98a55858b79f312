"""Compile time of `--shardx-spmd` against upstream MLIR's
`sharding-propagation` + `shard-partition`, per op, measured in one run.

    ~/.cache/shardx/venv/bin/python bench/compile_time_bench.py \
        [--chain 100 200 400 800 1600 3200] [--layers 1 2 4 8 16 32] \
        [--baseline OLD-shardx-opt] [--no-verify] [--repeat 3]

Programs:
- chain L: L Megatron MLP layers (fill, matmul with W1 split by columns,
  ReLU, fill, matmul with W2 split by rows: 5 ops per layer) that all reuse
  the same two weights, so W1, W2, the zero and the two `tensor.empty`
  shapes each have L or 2L consumers. Written directly as MLIR in both
  dialects: ShardX (`shardx.layout` on the arguments) and upstream `shard`
  (`shard.grid`, `shard.sharding` + `shard.shard` on the weights, the result
  annotated replicated for its users). Both reach Megatron's schedule: one
  all-reduce per layer.
- transformer N: the traced pre-norm transformer train steps of
  bench/propagation_bench.py (forward, backward, Adam; Megatron placements
  on tp=2). Upstream cannot take them (`tensor.expand_shape` /
  `collapse_shape` have no upstream sharding interface).

Times are each tool's pipeline time from `--mlir-timing` (total less parsing
and printing; the IR verifier that both tools run after every pass counts,
unless --no-verify), median of --repeat runs, per top-level op of the
input. `--baseline` times another shardx-opt (e.g. a build of an older
commit) on the same inputs in the same run, for before/after figures; it
is skipped on chains longer than --baseline-max-chain; baseline/shardx above 1
means this build is faster. For the transformers the
total reshard cost left by the refinement (`print-cost`) is printed too.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from propagation_bench import MLIR_OPT, find_tool, program, to_upstream  # noqa: E402

UPSTREAM_PIPELINE = "builtin.module(func.func(sharding-propagation,shard-partition))"


def chain(layers: int, dialect: str, batch=16, dim=64, hidden=128) -> str:
    """L Megatron MLP layers reusing the same two weights."""
    tx = f"tensor<{batch}x{dim}xf32>"
    th = f"tensor<{batch}x{hidden}xf32>"
    tw1 = f"tensor<{dim}x{hidden}xf32>"
    tw2 = f"tensor<{hidden}x{dim}xf32>"
    out = []
    if dialect == "shardx":
        def lay(p):
            return f" {{shardx.layout = #shardx.layout<@mesh, [{p}]>}}"
        out += ['shardx.mesh @mesh(shape = 2, axes = ["tp"])',
                "func.func @chain(",
                f"    %x0: {tx}{lay('R')},",
                f"    %w1: {tw1}{lay('S(1)')},",
                f"    %w2: {tw2}{lay('S(0)')})",
                f"    -> ({tx}{lay('R')}) {{"]
    else:
        out += ["shard.grid @mesh(shape = 2)",
                f"func.func @chain(%x0: {tx}, %a1: {tw1}, %a2: {tw2}) -> {tx} {{",
                "  %s1 = shard.sharding @mesh split_axes = [[], [0]] : !shard.sharding",
                f"  %w1 = shard.shard %a1 to %s1 : {tw1}",
                "  %s2 = shard.sharding @mesh split_axes = [[0]] : !shard.sharding",
                f"  %w2 = shard.shard %a2 to %s2 : {tw2}"]
    out += ["  %zero = arith.constant 0.0 : f32",
            f"  %eh = tensor.empty() : {th}",
            f"  %ex = tensor.empty() : {tx}"]
    ident = "affine_map<(d0, d1) -> (d0, d1)>"
    for i in range(layers):
        out += [
            f"  %f{i} = linalg.fill ins(%zero : f32) outs(%eh : {th}) -> {th}",
            f"  %h{i} = linalg.matmul ins(%x{i}, %w1 : {tx}, {tw1}) outs(%f{i} : {th}) -> {th}",
            f"  %r{i} = linalg.generic {{indexing_maps = [{ident}, {ident}], "
            f"iterator_types = [\"parallel\", \"parallel\"]}} ins(%h{i} : {th}) outs(%eh : {th}) {{",
            "  ^bb0(%a: f32, %o: f32):",
            "    %m = arith.maximumf %a, %zero : f32",
            "    linalg.yield %m : f32",
            f"  }} -> {th}",
            f"  %g{i} = linalg.fill ins(%zero : f32) outs(%ex : {tx}) -> {tx}",
            f"  %x{i + 1} = linalg.matmul ins(%r{i}, %w2 : {th}, {tw2}) outs(%g{i} : {tx}) -> {tx}"]
    if dialect == "shardx":
        out.append(f"  return %x{layers} : {tx}")
    else:
        out += ["  %sr = shard.sharding @mesh split_axes = [[]] : !shard.sharding",
                f"  %y = shard.shard %x{layers} to %sr annotate_for_users : {tx}",
                f"  return %y : {tx}"]
    out.append("}")
    return "\n".join(out) + "\n"


def count_ops(text: str) -> int:
    """Top-level ops of the function body (results named at two spaces)."""
    return sum(1 for line in text.split("\n") if re.match(r"  %\S+ = ", line))


def pipeline_time(cmd, verify: bool) -> float:
    """Seconds of the pass pipeline: total less parser and printer."""
    args = cmd + ["--mlir-timing", "--mlir-timing-display=list", "-o", "/dev/null"]
    if not verify:
        args.append("--verify-each=false")
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    total, io = None, 0.0
    for line in proc.stderr.splitlines():
        m = re.match(r"\s+([0-9.]+) \(\s*[0-9.]+%\)\s+(.*)$", line)
        if not m:
            continue
        if m.group(2) == "Total":
            total = float(m.group(1))
        elif m.group(2) in ("Parser", "Output"):
            io += float(m.group(1))
    if total is None:
        raise RuntimeError("no timing report:\n" + proc.stderr[-2000:])
    return total - io


def reshard_cost(opt: str, path: str) -> str:
    proc = subprocess.run([opt, path, "--shardx-propagate=print-cost", "-o", "/dev/null"],
                          capture_output=True, text=True)
    m = re.search(r"([0-9.]+) us after", proc.stderr)
    return m.group(1) if m else "-"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chain", type=int, nargs="*", default=[100, 200, 400, 800, 1600, 3200])
    ap.add_argument("--layers", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32],
                    help="transformer blocks of propagation_bench.py")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-verify", action="store_true",
                    help="--verify-each=false for both tools")
    ap.add_argument("--baseline", help="another shardx-opt, timed on the same inputs")
    ap.add_argument("--baseline-max-chain", type=int, default=200,
                    help="longest chain the baseline runs on (the old refinement "
                         "took 70 s at 400 layers)")
    args = ap.parse_args()
    opt = find_tool("shardx-opt")
    verify = not args.no_verify
    inputs = [("chain", n) for n in args.chain] + [("transformer", n) for n in args.layers]

    print(f"verifier after each pass: {'on' if verify else 'off'}; median of {args.repeat}")
    head = f"{'program':>16} {'ops':>7} {'shardx ms':>10} {'us/op':>7}"
    if args.baseline:
        head += f" {'baseline ms':>12} {'us/op':>8} {'baseline/shardx':>16}"
    head += f" {'upstream ms':>12} {'us/op':>7} {'upstream/shardx':>16} {'cost us':>9}"
    print(head)
    with tempfile.TemporaryDirectory() as d:
        for kind, n in inputs:
            if kind == "chain":
                ours_text, up_text = chain(n, "shardx"), chain(n, "upstream")
            else:
                ours_text = program(n, "transformer")
                up_text = to_upstream(ours_text)
            ops = count_ops(ours_text)
            ours, up = os.path.join(d, "ours.mlir"), os.path.join(d, "up.mlir")
            with open(ours, "w") as f:
                f.write(ours_text)
            with open(up, "w") as f:
                f.write(up_text)
            # Interleaved, so that load on the machine hits all tools alike.
            times = {"ours": [], "base": [], "up": []}
            up_error = None
            for _ in range(args.repeat):
                times["ours"].append(pipeline_time([opt, ours, "--shardx-spmd"], verify))
                if args.baseline and (kind != "chain" or n <= args.baseline_max_chain):
                    times["base"].append(pipeline_time([args.baseline, ours, "--shardx-spmd"], verify))
                if up_error is None:
                    try:
                        times["up"].append(pipeline_time(
                            [MLIR_OPT, up, f"--pass-pipeline={UPSTREAM_PIPELINE}"], verify))
                    except RuntimeError as e:
                        why = re.search(r"error: (.*)", str(e))
                        up_error = why.group(1) if why else "error"
            t = {k: statistics.median(v) if v else None for k, v in times.items()}
            row = f"{kind + ' ' + str(n):>16} {ops:>7} {t['ours'] * 1e3:>10.1f} {t['ours'] * 1e6 / ops:>7.1f}"
            if args.baseline:
                row += (f" {t['base'] * 1e3:>12.1f} {t['base'] * 1e6 / ops:>8.1f}"
                        f" {t['base'] / t['ours']:>16.2f}" if t["base"] is not None
                        else f" {'(skipped)':>12} {'':>8} {'':>16}")
            if t["up"] is not None:
                row += f" {t['up'] * 1e3:>12.1f} {t['up'] * 1e6 / ops:>7.1f} {t['up'] / t['ours']:>16.2f}"
            else:
                row += f" {'fails':>12} {'':>7} {'':>16}"
            row += f" {reshard_cost(opt, ours) if kind == 'transformer' else '':>9}"
            print(row, flush=True)
            if up_error and kind == "chain":
                print(f"  upstream: {up_error}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
