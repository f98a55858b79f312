"""shardx-auto-shard with activation recomputation under a budget: budget ->
plan -> recomputation -> modeled step time and peak (docs/Memory.md,
"Automatic sharding under a budget", Recomputation).

    SHARDX_BUILD=build python3 bench/auto_shard_recompute_bench.py [--models block,llama]
        [--ranks 2,4,8] [--old BIN]

Per model (one pre-norm transformer block, one Llama-style block: those of
bench/auto_shard_bench.py, batch 16) on a 1-D mesh of each number of ranks,
with the cost settings of python/tests/test_auto_shard.py: the smallest peak
the pass finds without recomputation (``recompute=false``) and with it, and
budgets from the first to the second (at it, a third and two thirds of the
way down, and at the smallest with recomputation). For each budget the
plan, the policy it needs, its copies and their modeled compute, and its
modeled step time and peak; with ``--old BIN`` (a shardx-opt before
recomputation was priced) that binary's answer on the same program. Every
figure is the pass's model (not a measurement), so it does not depend on
the machine.
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(__file__))

from auto_shard_bench import auto_shard, program, summary  # noqa: E402


def smallest(text: str, options: str = "", opt=None) -> int:
    kw = {"opt": opt} if opt else {}
    proc, _, _, _ = auto_shard(text, f"memory-budget=1 {options}", **kw)
    m = re.search(r"the smallest modeled peak found is (\d+) bytes", proc.stderr)
    if not m:
        raise SystemExit(proc.stderr)
    return int(m.group(1))


def row(data) -> str:
    p = data["plan"]
    return (f"{summary(data)} | {p.get('recompute', 'none')} | {p.get('recomputed_ops', 0)} | "
            f"{p.get('recompute_us', 0):.1f} | {p['time']:.1f} | {p['peak']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="block,llama")
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--old", default="", help="a shardx-opt to run on the same programs")
    a = ap.parse_args()
    print("| model | ranks | budget (bytes) | build | plan | recompute | ops recomputed | "
          "recompute (us) | modeled step (us) | modeled peak (bytes) |")
    print("| --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: |")
    for kind in a.models.split(","):
        for ranks in map(int, a.ranks.split(",")):
            text = program(kind, 1, (ranks,))
            plain = smallest(text, "recompute=false")
            low = smallest(text)
            budgets = [("none", 0), ("smallest without", plain)]
            if low < plain:
                budgets += [("1/3 down", plain - (plain - low) // 3),
                            ("2/3 down", plain - 2 * (plain - low) // 3),
                            ("smallest with", low)]
            for name, budget in budgets:
                builds = [("this", "")] + ([("before", a.old)] if a.old else [])
                for build, opt in builds:
                    kw = {"opt": opt} if opt else {}
                    proc, data, _, _ = auto_shard(text, f"memory-budget={budget}", **kw)
                    label = f"{name} ({budget})" if budget else name
                    if proc.returncode != 0:
                        m = re.search(r"smallest modeled peak found is (\d+)", proc.stderr)
                        print(f"| {kind} | {ranks} | {label} | {build} | no plan fits "
                              f"(smallest {m.group(1) if m else '?'}) | | | | | |")
                        continue
                    print(f"| {kind} | {ranks} | {label} | {build} | {row(data)} |")
                    sys.stdout.flush()


if __name__ == "__main__":
    main()
