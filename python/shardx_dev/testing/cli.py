"""Command line of the back-end sweep (``scripts/backend_sweep.py``)."""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import tempfile
import time
import zlib
from collections import Counter, defaultdict
from typing import Dict, List, Sequence, Tuple

from .layouts import (MESH_SHAPES, REDUCE_OPS, Pair, enumerate_layouts, explicit_size_layouts,
                      mesh_pairs, mesh_text, parse_mesh)
from .programs import random_programs, programs_module
from .sweep import (FAILURES, OUTCOMES, PairSweep, ProgramSweep, Runner, normalize_message,
                    reproducer)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
DEFAULT_MESHES = "4,2x2,2x3,3x2,2x2x2,5"


def sample_pairs(meshes: Sequence[Tuple[int, ...]], n: int, seed: int) -> Dict[Tuple, List[Pair]]:
    """``n`` pairs spread evenly over the meshes (a mesh with fewer pairs
    than its share gives the rest to the others), each mesh's share drawn
    at random with ``seed``."""
    every = {m: list(mesh_pairs(m)) for m in meshes}
    share: Dict[Tuple, int] = {m: 0 for m in meshes}
    left, open_meshes = n, list(meshes)
    while left > 0 and open_meshes:
        each = max(1, left // len(open_meshes))
        for m in list(open_meshes):
            take = min(each, len(every[m]) - share[m], left)
            share[m] += take
            left -= take
            if share[m] == len(every[m]):
                open_meshes.remove(m)
            if left == 0:
                break
    out = {}
    for m in meshes:
        rng = random.Random(seed * 7919 + zlib.crc32(mesh_text(m).encode()))
        out[m] = rng.sample(every[m], share[m]) if share[m] < len(every[m]) else every[m]
    return out


def set_dtypes(pairs: Sequence[Pair], dtypes: Sequence[str]) -> None:
    if list(dtypes) == ["f32"]:
        return
    for p in pairs:
        p.dtype = dtypes[zlib.crc32(p.key().encode()) % len(dtypes)]


def smallest(items):
    """The item that makes the smallest reproducer."""
    def size(x):
        ranks = 1
        for n in x.mesh:
            ranks *= n
        if isinstance(x, Pair):
            numel = 1
            for s in x.shape:
                numel *= s
            return (ranks, numel, len(x.src_spelling.text()) + len(x.dst_spelling.text()))
        return (ranks, len(x.body), 0)
    return min(items, key=size)


def classify(items) -> List[dict]:
    """Failure classes: (outcome, normalized message), largest first."""
    classes = defaultdict(list)
    for x in items:
        if x.outcome not in ("matched",):
            classes[(x.outcome, normalize_message(x.detail))].append(x)
    out = []
    for (outcome, message), xs in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        ex = smallest(xs)
        per_mesh = Counter(mesh_text(x.mesh) for x in xs)
        entry = {"outcome": outcome, "class": message, "count": len(xs),
                 "per_mesh": dict(sorted(per_mesh.items())),
                 "example": {"mesh": mesh_text(ex.mesh), "detail": ex.detail}}
        if "output_tail" in ex.extra:
            entry["example"]["output_tail"] = ex.extra["output_tail"]
        entry["items"] = [x.key() for x in xs]
        if isinstance(ex, Pair):
            entry["example"].update({
                "shape": list(ex.shape), "dtype": ex.dtype, "family": ex.family,
                "src": ex.src_spelling.text(), "dst": ex.dst_spelling.text(),
                "src_canonical": ex.src.text(), "dst_canonical": ex.dst.text(),
                "reproducer": reproducer(ex)})
            per_family = Counter(x.family for x in xs)
            entry["per_family"] = dict(sorted(per_family.items()))
        else:
            entry["example"].update({"program": ex.index, "ops": ex.ops,
                                     "reproducer": programs_module([ex])[0]})
        out.append(entry)
    return out


def print_table(log, title: str, rows: Dict[str, Counter], totals: Counter) -> None:
    cols = ["generated", "executed", *OUTCOMES]
    log(f"\n{title}")
    log(f"  {'mesh':<8}" + "".join(f"{c:>14}" for c in cols))
    for name, c in list(rows.items()) + [("total", totals)]:
        executed = c["matched"] + c["mismatched"]
        vals = [c["generated"], executed] + [c[o] for o in OUTCOMES]
        log(f"  {name:<8}" + "".join(f"{v:>14}" for v in vals))


def check_model(bin_dir: str, meshes, log) -> int:
    """Compares the sweep's layout model with the dialect: every spelling
    the sweep writes, parsed and printed by shardx-opt, must print as the
    model's canonical text. Returns the number of disagreements."""
    bad = total = 0
    for mesh in meshes:
        spellings = []
        for rank, shape in ((1, (16,)), (2, (8, 6))):
            # Every spelling that reaches a layout, not just the one the
            # sweep picks: SS, order and strides each resolve the same way.
            spellings += enumerate_layouts(mesh, rank, REDUCE_OPS, every_spelling=True)
            spellings += explicit_size_layouts(mesh, shape, 6, 1)
        lines = [f"shardx.mesh @mesh(shape = {mesh_text(mesh)})"]
        for _, sp in spellings:
            lines.append(f'"test.op"() {{l = #shardx.layout<@mesh, {sp.text()}>}} : () -> ()')
        with tempfile.NamedTemporaryFile("w", suffix=".mlir", delete=False) as f:
            f.write("\n".join(lines) + "\n")
        try:
            out = subprocess.run([os.path.join(bin_dir, "shardx-opt"), "--allow-unregistered-dialect",
                                  "--mlir-print-local-scope", f.name],
                                 capture_output=True, text=True)
        finally:
            os.unlink(f.name)
        printed = re.findall(r"#shardx\.layout<@mesh, (.*)>\}", out.stdout)
        if out.returncode != 0 or len(printed) != len(spellings):
            log(f"mesh {mesh_text(mesh)}: shardx-opt failed: {out.stderr.strip()[:500]}")
            bad += 1
            continue
        for (layout, sp), text in zip(spellings, printed):
            total += 1
            if text != layout.text():
                bad += 1
                if bad <= 10:
                    log(f"mesh {mesh_text(mesh)}: {sp.text()} prints as {text}, "
                        f"the model says {layout.text()}")
    log(f"layout model: {total} spellings, {total - bad} agree with shardx-opt, {bad} disagree")
    return bad


def summary_line(log, what: str, totals: Counter) -> None:
    failed = sum(totals[o] for o in FAILURES)
    log(f"{what}: {totals['generated']} generated, {totals['matched']} matched, "
        f"{totals['rejected']} rejected with a diagnostic, {failed} failed")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="backend_sweep.py",
        description="Differential execution of the compiled back end: every reshard pair of the "
                    "sweep (or a sample) and random programs, sharded against unsharded with "
                    "shardx-run --check (docs/Testing.md).")
    ap.add_argument("--meshes", default=DEFAULT_MESHES,
                    help=f"comma-separated meshes (default {DEFAULT_MESHES})")
    ap.add_argument("--sample", type=int, default=None,
                    help="run N pairs spread over the meshes (default: every pair; 0: none)")
    ap.add_argument("--programs", type=int, default=0, help="also run K random programs")
    ap.add_argument("--seed", type=int, default=1, help="seed of the sample, programs and inputs")
    ap.add_argument("--backend", choices=["threads", "mpi"], default="threads")
    ap.add_argument("--dtypes", default="f32",
                    help="element types, one per pair by a stable hash (f32,f64,i32,i64)")
    ap.add_argument("--form", choices=["mixed", "return", "redistribute"], default="mixed",
                    help="how a pair's reshard is written (default: half each)")
    ap.add_argument("--batch", type=int, default=24, help="pairs per compile (default 24)")
    ap.add_argument("--program-batch", type=int, default=6, help="programs per compile")
    ap.add_argument("--jobs", type=int, default=1, help="batches run at once (default 1)")
    ap.add_argument("--bin-dir", default=os.path.join(os.environ.get(
        "SHARDX_BUILD", os.path.join(ROOT, "build")), "bin"))
    ap.add_argument("--mpirun", default="mpirun --allow-run-as-root --oversubscribe")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per shardx-run")
    ap.add_argument("--collective-timeout", type=float, default=20)
    ap.add_argument("--out", help="write the JSON report here")
    ap.add_argument("--repro-dir", help="write one reproducer .mlir per failure class here")
    ap.add_argument("--snapshot", metavar="DIR",
                    help="run copies of shardx-run and the runtime archive taken into DIR "
                         "(under the build lock): rebuilds do not disturb a long sweep")
    ap.add_argument("--check-model", action="store_true",
                    help="check the sweep's layout model against shardx-opt's printing and exit")
    ap.add_argument("--journal", metavar="FILE",
                    help="append one JSON line per finished pair (to watch a long sweep)")
    ap.add_argument("--only-failed", metavar="REPORT",
                    help="run only the pairs that did not match in an earlier --out REPORT "
                         "(same meshes and dtypes)")
    ap.add_argument("--self-test", action="store_true",
                    help="check the classification of made-up shardx-run outputs and exit")
    ap.add_argument("--list", action="store_true", help="print the pair counts and exit")
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)

    log = (lambda *a: None) if args.quiet else (lambda s: print(s, flush=True))
    if args.self_test:
        from .sweep import self_test
        problems = self_test()
        for p in problems:
            print(f"self-test: {p}")
        print(f"self-test: {'FAILED' if problems else 'passed'}")
        return 1 if problems else 0
    meshes = [parse_mesh(m) for m in args.meshes.split(",") if m]
    for m in meshes:
        if m not in MESH_SHAPES:
            ap.error(f"mesh {mesh_text(m)} is not in the sweep: {', '.join(map(mesh_text, MESH_SHAPES))}")
    if not os.path.exists(os.path.join(args.bin_dir, "shardx-run")):
        ap.error(f"no shardx-run in {args.bin_dir} (--bin-dir)")
    dtypes = args.dtypes.split(",")
    if args.check_model:
        return 1 if check_model(args.bin_dir, meshes, log) else 0

    if args.sample is None:
        by_mesh = {m: list(mesh_pairs(m)) for m in meshes}
    elif args.sample > 0:
        by_mesh = sample_pairs(meshes, args.sample, args.seed)
    else:
        by_mesh = {}
    if args.list:
        for m, ps in by_mesh.items():
            print(f"{mesh_text(m)}: {len(ps)} pairs {dict(Counter(p.family for p in ps))}")
        return 0
    for ps in by_mesh.values():
        set_dtypes(ps, dtypes)
    if args.only_failed:
        with open(args.only_failed) as f:
            old = json.load(f)
        keys = {k for c in old.get("pairs", {}).get("classes", []) for k in c.get("items", [])}
        by_mesh = {m: [p for p in ps if p.key() in keys] for m, ps in by_mesh.items()}
    pairs = [p for ps in by_mesh.values() for p in ps]

    runner = Runner(args.bin_dir, backend=args.backend, seed=args.seed, timeout=args.timeout,
                    collective_timeout=args.collective_timeout, mpirun=args.mpirun)
    if args.snapshot:
        runner.snapshot(args.snapshot)
    start = time.monotonic()
    report = {"config": {"meshes": [mesh_text(m) for m in meshes], "sample": args.sample,
                         "seed": args.seed, "backend": args.backend, "dtypes": dtypes,
                         "form": args.form, "batch": args.batch, "programs": args.programs}}
    status = 0
    if pairs:
        log(f"{len(pairs)} pairs on {args.backend}, batches of {args.batch}")
        sweep = PairSweep(runner, args.batch, args.form, args.jobs, log)
        sweep.journal = args.journal
        sweep.run_pairs(pairs)
        rows: Dict[str, Counter] = {}
        totals = Counter()
        for m, ps in by_mesh.items():
            c = Counter(p.outcome for p in ps)
            c["generated"] = len(ps)
            rows[mesh_text(m)] = c
            totals.update(c)
        print_table(log, f"pairs ({args.backend}):", rows, totals)
        summary_line(log, "pairs", totals)
        classes = classify(pairs)
        report["pairs"] = {
            "per_mesh": {k: {o: v[o] for o in ["generated", *OUTCOMES]} for k, v in rows.items()},
            "total": {o: totals[o] for o in ["generated", *OUTCOMES]},
            "per_family": {f: dict(Counter(p.outcome for p in pairs if p.family == f))
                           for f in sorted({p.family for p in pairs})},
            "classes": classes}
        notes = [p.extra["layout_text"] for p in pairs if "layout_text" in p.extra]
        if notes:
            report["pairs"]["model_disagreements"] = notes[:50]
            log(f"\nwarning: {len(notes)} outputs print another layout than the sweep's model, "
                f"e.g. {notes[0]}")
        if any(totals[o] for o in FAILURES):
            status = 1
    if args.programs:
        progs = random_programs(args.programs, args.seed, meshes)
        log(f"\n{len(progs)} random programs on {args.backend}")
        ProgramSweep(runner, args.program_batch, log).run_programs(progs)
        rows = {}
        totals = Counter()
        for m in meshes:
            ps = [p for p in progs if p.mesh == m]
            if ps:
                c = Counter(p.outcome for p in ps)
                c["generated"] = len(ps)
                rows[mesh_text(m)] = c
                totals.update(c)
        print_table(log, f"random programs ({args.backend}):", rows, totals)
        summary_line(log, "programs", totals)
        report["programs"] = {
            "per_mesh": {k: {o: v[o] for o in ["generated", *OUTCOMES]} for k, v in rows.items()},
            "total": {o: totals[o] for o in ["generated", *OUTCOMES]},
            "classes": classify(progs)}
        if any(totals[o] for o in FAILURES):
            status = 1
    report["seconds"] = round(time.monotonic() - start, 1)
    report["shardx_run_calls"] = runner.runs
    all_classes = report.get("pairs", {}).get("classes", []) + \
        report.get("programs", {}).get("classes", [])
    paths = {}
    if args.repro_dir:
        os.makedirs(args.repro_dir, exist_ok=True)
        for i, c in enumerate(all_classes):
            kind = "pair" if "src" in c["example"] else "program"
            path = os.path.join(args.repro_dir, f"{i:02d}-{c['outcome']}-{kind}.mlir")
            with open(path, "w") as f:
                f.write(f"// {c['outcome']} ({c['count']}): {c['class']}\n"
                        f"// {c['example']['detail']}\n" + c["example"]["reproducer"])
            paths[i] = path
    if all_classes:
        log("\nclasses (outcome, count, message; smallest example):")
        for i, c in enumerate(all_classes):
            ex = c["example"]
            what = (f"mesh {ex['mesh']}, {ex.get('dtype', 'f32')} {'x'.join(map(str, ex['shape']))}: "
                    f"{ex['src']} -> {ex['dst']}" if "src" in ex else
                    f"mesh {ex['mesh']}, program {ex['program']}: {', '.join(ex['ops'])}")
            log(f"  {c['outcome']:<13} {c['count']:>6}  {c['class']}\n{'':>22}e.g. {what}")
            if i in paths:
                log(f"{'':>22}reproducer: {paths[i]}")
    log(f"\n{runner.runs} shardx-run calls, {report['seconds']:.0f} s"
        + ("" if status == 0 else "; FAILURES (exit 1)"))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
    return status
