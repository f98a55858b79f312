"""Runs reshard pairs and random programs through the real back end.

Every batch of pairs is one module with one function ``@sweep``: argument i
has the layout ``src_i`` and result i the layout ``dst_i``. The body returns
the arguments (``shardx-insert-reshards`` then plans one reshard per pair) or,
for about half of the pairs, spells the reshard as ``shardx.redistribute``.
``shardx-run --check`` compiles the module sharded and unsharded, runs both
on the same global inputs and compares every output, so one compile checks a
whole batch.

Outcomes, per pair or program:

* ``matched``: compiled, ran, every output equal to the unsharded run;
* ``mismatched``: ran, an output differs (``MISMATCH``);
* ``rejected``: refused at compile time with a diagnostic that names the
  pair (``Cannot reshard: ...``, an invalid layout);
* ``compile_error``: any other compile-time diagnostic;
* ``run_error``: the run stopped with an error message;
* ``crashed``: a signal, a timeout, or a non-zero exit without a diagnostic;

Where ``shardx-run`` cannot assemble a target (Partial with different ops on
several axes; a probe asks it), the pair is checked as ``src -> dst -> R``:
the reshard to ``dst`` then one to replicated, in one function.

A compile diagnostic names its pair by source line (each argument, result
and redistribute has its own line); a failure that names no pair is
isolated by bisection, down to single pairs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .layouts import Pair, mesh_text, tensor_text

OUTCOMES = ("matched", "mismatched", "rejected", "compile_error", "run_error", "crashed")
FAILURES = ("mismatched", "compile_error", "run_error", "crashed")

_LOC = re.compile(r'loc\("[^"]*":(\d+):(\d+)\): error: (.*)')
_PLAIN_LOC = re.compile(r'\.mlir:(\d+):(\d+): error: (.*)')
# "output 3 #shardx.layout<...>: max abs err 0.5, max rel err 1[, 2 of 7 differ] MISMATCH"
_OUTPUT = re.compile(r"^output (\d+) (.*?): max abs err (\S+), max rel err ([^,\s]+)(.*) "
                     r"(ok|MISMATCH)$")
_CRASH = re.compile(r"Stack dump:|PLEASE submit a bug report|exited on signal|"
                    r"Segmentation fault|Aborted|core dumped|terminate called")


def layout_attr(spelling_text: str) -> str:
    return f"#shardx.layout<@mesh, {spelling_text}>"


def uses_redistribute(p: Pair) -> bool:
    """Half of the pairs, chosen by a stable hash, spell their reshard as
    ``shardx.redistribute``; the others return the argument."""
    return zlib.crc32(p.key().encode()) % 2 == 1


def batch_module(pairs: Sequence[Pair], form: str = "mixed") -> Tuple[str, Dict[int, int]]:
    """The module of one batch and a map from source line to pair index."""
    mesh = pairs[0].mesh
    lines = [f"shardx.mesh @mesh(shape = {mesh_text(mesh)})", "func.func @sweep("]
    line_of: Dict[int, int] = {}
    for i, p in enumerate(pairs):
        sep = "," if i + 1 < len(pairs) else ""
        lines.append(f"    %a{i}: {tensor_text(p.shape, p.dtype)} "
                     f"{{shardx.layout = {layout_attr(p.src_spelling.text())}}}{sep}")
        line_of[len(lines)] = i
    lines.append("  ) -> (")
    for i, p in enumerate(pairs):
        sep = "," if i + 1 < len(pairs) else ""
        lines.append(f"    {tensor_text(p.shape, p.dtype)} "
                     f"{{shardx.layout = {layout_attr(p.dst_spelling.text())}}}{sep}")
        line_of[len(lines)] = i
    lines.append("  ) {")
    names = []
    for i, p in enumerate(pairs):
        if form == "redistribute" or (form == "mixed" and uses_redistribute(p)):
            lines.append(f"  %r{i} = shardx.redistribute %a{i} : {tensor_text(p.shape, p.dtype)} "
                         f"from {layout_attr(p.src_spelling.text())} "
                         f"to {layout_attr(p.dst_spelling.text())}")
            line_of[len(lines)] = i
            names.append(f"%r{i}")
        else:
            names.append(f"%a{i}")
    types = ", ".join(tensor_text(p.shape, p.dtype) for p in pairs)
    lines.append(f"  return {', '.join(names)} : {types}")
    lines.append("}")
    return "\n".join(lines) + "\n", line_of


@dataclass
class RunResult:
    rc: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False


class Runner:
    """Runs ``shardx-run --check`` on a module, on threads or under mpirun."""

    def __init__(self, bin_dir: str, backend: str = "threads", seed: int = 1,
                 timeout: float = 600.0, collective_timeout: float = 20.0,
                 mpirun: str = "mpirun --allow-run-as-root --oversubscribe",
                 workdir: Optional[str] = None):
        self.bin_dir = bin_dir
        self.backend = backend
        self.seed = seed
        self.timeout = timeout
        self.collective_timeout = collective_timeout
        self.mpirun = mpirun
        self.workdir = workdir
        self.env: Optional[Dict[str, str]] = None
        self.runs = 0
        self.seconds = 0.0
        self._lock = threading.Lock()

    def run(self, module_text: str, ranks: int, extra: Sequence[str] = ()) -> RunResult:
        fd, path = tempfile.mkstemp(suffix=".mlir", prefix="sweep", dir=self.workdir)
        with os.fdopen(fd, "w") as f:
            f.write(module_text)
        try:
            cmd = [os.path.join(self.bin_dir, "shardx-run"), path, "--check",
                   "--seed", str(self.seed), "--timeout", str(self.collective_timeout),
                   "--int-range", "1000",
                   *extra]
            if self.backend == "mpi":
                cmd = self.mpirun.split() + ["-np", str(ranks)] + cmd + ["--backend", "mpi"]
            for attempt in range(4):
                res = self._run_once(cmd)
                # A rebuild of the runtime archives under a running sweep
                # makes a link fail: wait and run again.
                if not re.search(r"error: linking .* failed|cannot load", res.stderr) or attempt == 3:
                    return res
                time.sleep(30)
            return res
        finally:
            os.unlink(path)

    def _run_once(self, cmd: List[str]) -> RunResult:
        start = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, errors="replace", start_new_session=True,
                                cwd=self.workdir, env=self.env)
        try:
            out, err = proc.communicate(timeout=self.timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            timed_out = True
        seconds = time.monotonic() - start
        with self._lock:
            self.runs += 1
            self.seconds += seconds
        return RunResult(proc.returncode, out, err, seconds, timed_out)

    def snapshot(self, directory: str, lock: str = "/tmp/shardx-build.lock") -> None:
        """Runs a copy of shardx-run and of the runtime archive it links into
        every artifact, taken while no build holds ``lock``: a long sweep is
        not disturbed by rebuilds of the tree it tests."""
        os.makedirs(directory, exist_ok=True)
        archive = os.path.join(os.path.dirname(self.bin_dir), "lib", "Runtime",
                               "libShardXRuntime.a")
        blas = os.path.join(os.path.dirname(archive), "libShardXRuntimeBlas.a")
        copy = f"cp {os.path.join(self.bin_dir, 'shardx-run')} {directory}/"
        if os.path.exists(archive):
            copy += f" && cp {archive} {blas} {directory}/"
        if os.path.exists(lock):
            subprocess.run(["flock", lock, "sh", "-c", copy], check=True)
        else:
            subprocess.run(["sh", "-c", copy], check=True)
        self.bin_dir = directory
        self.env = dict(os.environ)
        if os.path.exists(archive):
            self.env["SHARDX_RUNTIME_ARCHIVE"] = os.path.join(directory, "libShardXRuntime.a")


def _crash_frame(text: str) -> str:
    """The first stack frame in ShardX or MLIR code of an LLVM stack dump."""
    for line in text.splitlines():
        if re.match(r"\s*#\d+ ", line) and ("shardx" in line or "mlir::" in line) \
                and "SignalHandler" not in line and "PrintStackTrace" not in line:
            m = re.search(r"\s((?:mlir|shardx|\(anonymous namespace\))::[^(]*)", line)
            return m.group(1).strip() if m else line.strip()
    return ""


def _crash_reason(res: RunResult) -> str:
    text = res.stderr + "\n" + res.stdout
    if res.timed_out:
        return f"timed out after {res.seconds:.0f} s"
    reason = f"exit status {res.rc} without a diagnostic"
    if res.rc < 0:
        try:
            reason = f"killed by {signal.Signals(-res.rc).name}"
        except ValueError:
            reason = f"killed by signal {-res.rc}"
    else:
        for line in text.splitlines():
            if re.search(r"exited on signal|Segmentation fault|Aborted|terminate called", line):
                reason = line.strip()
                break
    for line in text.splitlines():
        m = re.search(r"(Assertion .* failed|LLVM ERROR: .*|UNREACHABLE .*)", line)
        if m:
            return f"{reason}: {m.group(1)}"
    frame = _crash_frame(text)
    return f"{reason} in {frame}" if frame else reason


def _is_crash(res: RunResult) -> bool:
    return res.timed_out or res.rc < 0 or bool(_CRASH.search(res.stderr + res.stdout))


def first_error(text: str) -> str:
    for line in text.splitlines():
        if "error" in line:
            return line.strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return lines[-1].strip() if lines else ""


def classify_unnamed(res: RunResult) -> Tuple[str, str]:
    """The outcome of a run that failed without naming a pair (the run of a
    single pair or program)."""
    if _is_crash(res):
        return "crashed", _crash_reason(res)
    if "check FAILED" in res.stdout:
        return "mismatched", first_error(res.stdout) or "check FAILED"
    message = first_error(res.stderr + "\n" + res.stdout)
    if "shardx-run: error:" in message:
        return "run_error", message.split("shardx-run: error:", 1)[1].strip()
    if "error:" in message:
        return "compile_error", re.sub(r'^.*?error: ', "", message)
    return "crashed", _crash_reason(res)


def normalize_message(message: str) -> str:
    """A message with its numbers, names, paths and layouts blanked: the
    failure class."""
    m = re.sub(r'loc\("[^"]*":\d+:\d+\): ', "", message)
    m = re.sub(r"#shardx\.layout<[^>]*>", "<layout>", m)
    m = re.sub(r"\[[^\]]*\]", "[..]", m)
    m = re.sub(r"/\S+", "<path>", m)
    m = re.sub(r"0x[0-9a-f]+", "0x..", m)
    m = re.sub(r"\b\d+(\.\d+)?(e[-+]?\d+)?\b", "N", m)
    m = re.sub(r"tensor<[^>]*>", "tensor<..>", m)
    m = re.sub(r"memref<[^>]*>", "memref<..>", m)
    return m.strip()


def _is_rejection(message: str) -> bool:
    return "Cannot reshard" in message or "invalid layout" in message.lower()


def classify_batch(pairs: Sequence[Pair], line_of: Dict[int, int],
                   res: RunResult) -> Tuple[Dict[int, Tuple[str, str]], bool]:
    """Per pair index: (outcome, detail) from one run; the bool says that the
    run failed in a way that names no pair (bisect)."""
    outcomes: Dict[int, Tuple[str, str]] = {}
    if _is_crash(res):
        return outcomes, True
    for line in res.stdout.splitlines():
        m = _OUTPUT.match(line.strip())
        if not m or int(m.group(1)) >= len(pairs):
            continue
        i = int(m.group(1))
        p = pairs[i]
        want = layout_attr(p.dst.text())
        if m.group(2) != want:
            p.extra["layout_text"] = f"shardx-run prints {m.group(2)}; the sweep's model says {want}"
        if m.group(6) == "ok":
            outcomes[i] = ("matched", "")
        else:
            outcomes[i] = ("mismatched",
                           f"max abs err {m.group(3)}, max rel err {m.group(4)}{m.group(5)}")
    if len(outcomes) == len(pairs) and ("check passed" in res.stdout
                                        or "check FAILED" in res.stdout):
        return outcomes, False
    outcomes.clear()
    for line in res.stderr.splitlines():
        m = _LOC.search(line) or _PLAIN_LOC.search(line)
        if not m:
            continue
        i = line_of.get(int(m.group(1)))
        if i is None or i in outcomes:
            continue
        message = m.group(3).strip()
        outcomes[i] = ("rejected" if _is_rejection(message) else "compile_error", message)
    return outcomes, not outcomes


class PairSweep:
    """Runs pairs in batches, isolating failures."""

    def __init__(self, runner: Runner, batch: int = 24, form: str = "mixed",
                 jobs: int = 1, log: Callable[[str], None] = print):
        self.runner = runner
        self.batch = batch
        self.form = form
        self.jobs = jobs
        self.log = log
        self.done = 0
        self.total = 0
        self._lock = threading.Lock()
        self._last_log = 0.0

    def run_pairs(self, pairs: List[Pair]) -> None:
        """Sets ``outcome`` and ``detail`` of every pair."""
        groups: Dict[Tuple, List[Pair]] = {}
        for p in pairs:
            groups.setdefault((p.mesh, p.dtype), []).append(p)
        batches = []
        for group in groups.values():
            for start in range(0, len(group), self.batch):
                batches.append(group[start:start + self.batch])
        self.total = sum(len(b) for b in batches)
        self.done = 0
        self._last_log = time.monotonic()
        if self.jobs <= 1:
            for b in batches:
                self._run(b)
        else:
            with ThreadPoolExecutor(self.jobs) as pool:
                list(pool.map(self._run, batches))

    journal: Optional[str] = None

    def _write_journal(self, pairs: List[Pair]) -> None:
        if not self.journal:
            return
        import json
        with self._lock, open(self.journal, "a") as f:
            for p in pairs:
                f.write(json.dumps({"key": p.key(), "family": p.family, "outcome": p.outcome,
                                    "detail": p.detail}) + "\n")

    def _progress(self, n: int) -> None:
        with self._lock:
            self.done += n
            now = time.monotonic()
            if now - self._last_log > 30:
                self._last_log = now
                self.log(f"  {self.done}/{self.total} pairs, {self.runner.runs} runs, "
                         f"{self.runner.seconds:.0f} s in shardx-run")

    def _run(self, pairs: List[Pair]) -> None:
        if not pairs:
            return
        ranks = 1
        for n in pairs[0].mesh:
            ranks *= n
        text, line_of = batch_module(pairs, self.form)
        res = self.runner.run(text, ranks)
        outcomes, unnamed = classify_batch(pairs, line_of, res)
        if unnamed:
            if len(pairs) == 1:
                pairs[0].outcome, pairs[0].detail = classify_unnamed(res)
                pairs[0].extra["output_tail"] = (res.stderr + res.stdout)[-2000:]
                self._write_journal(pairs)
                self._progress(1)
                return
            mid = len(pairs) // 2
            self._run(pairs[:mid])
            self._run(pairs[mid:])
            return
        rest, done = [], []
        for i, p in enumerate(pairs):
            if i in outcomes:
                p.outcome, p.detail = outcomes[i]
                done.append(p)
            else:
                rest.append(p)
        self._write_journal(done)
        self._progress(len(done))
        # A compile error stopped the batch: the rest has not run. Halves
        # keep the recompiles few where errors are dense.
        if len(rest) > 8:
            mid = len(rest) // 2
            self._run(rest[:mid])
            self._run(rest[mid:])
        elif rest:
            self._run(rest)


def reproducer(p: Pair) -> str:
    """A one-pair module that reproduces a pair's outcome."""
    text, _ = batch_module([p], "mixed")
    return text


class ProgramSweep:
    """Runs random programs, several per module, isolating failures."""

    def __init__(self, runner: Runner, batch: int = 6, log: Callable[[str], None] = print):
        self.runner = runner
        self.batch = batch
        self.log = log

    def run_programs(self, progs: list) -> None:
        groups: Dict[Tuple, list] = {}
        for p in progs:
            groups.setdefault(p.mesh, []).append(p)
        for group in groups.values():
            for start in range(0, len(group), self.batch):
                self._run(group[start:start + self.batch])

    def _run(self, progs: list) -> None:
        from .programs import programs_module
        if not progs:
            return
        ranks = 1
        for n in progs[0].mesh:
            ranks *= n
        text, line_of, out_prog = programs_module(progs)
        res = self.runner.run(text, ranks)
        outcomes: Dict[int, Tuple[str, str]] = {}
        unnamed = _is_crash(res)
        if not unnamed:
            seen = 0
            for line in res.stdout.splitlines():
                m = _OUTPUT.match(line.strip())
                if not m or int(m.group(1)) >= len(out_prog):
                    continue
                seen += 1
                i = out_prog[int(m.group(1))]
                if m.group(6) == "MISMATCH":
                    outcomes[i] = ("mismatched", f"output {m.group(1)} {m.group(2)}: max abs err "
                                                 f"{m.group(3)}, max rel err {m.group(4)}{m.group(5)}")
                else:
                    outcomes.setdefault(i, ("matched", ""))
            if seen != len(out_prog) or not ("check passed" in res.stdout
                                             or "check FAILED" in res.stdout):
                outcomes.clear()
                for line in res.stderr.splitlines():
                    m = _LOC.search(line) or _PLAIN_LOC.search(line)
                    if not m:
                        continue
                    i = line_of.get(int(m.group(1)))
                    if i is not None and i not in outcomes:
                        message = m.group(3).strip()
                        outcomes[i] = ("rejected" if _is_rejection(message)
                                       else "compile_error", message)
                unnamed = not outcomes
        if unnamed:
            if len(progs) == 1:
                progs[0].outcome, progs[0].detail = classify_unnamed(res)
                progs[0].extra["output_tail"] = (res.stderr + res.stdout)[-2000:]
                return
            mid = len(progs) // 2
            self._run(progs[:mid])
            self._run(progs[mid:])
            return
        rest = []
        for i, p in enumerate(progs):
            if i in outcomes:
                p.outcome, p.detail = outcomes[i]
            else:
                rest.append(p)
        self._run(rest)


def self_test() -> List[str]:
    """Checks the classification on made-up shardx-run output (a mismatch, a
    compile error on a pair's line, a rejection, a crash). Returns the
    problems found."""
    from .layouts import Spelling, from_spelling
    mesh = (2,)
    sp_s, sp_r = Spelling((("S", 0),)), Spelling((("R",),))
    pairs = [Pair("all", mesh, (4,), "f32", from_spelling(a, mesh), from_spelling(b, mesh), a, b)
             for a, b in ((sp_s, sp_r), (sp_r, sp_s), (sp_s, sp_s))]
    _, line_of = batch_module(pairs, "return")
    problems = []

    def expect(what, res, want, unnamed=False):
        got, got_unnamed = classify_batch(pairs, line_of, res)
        got = {i: o for i, (o, _) in got.items()}
        if got != want or got_unnamed != unnamed:
            problems.append(f"{what}: got {got} (unnamed {got_unnamed}), want {want}")

    out = "\n".join(f"output {i} {layout_attr(p.dst.text())}: max abs err {e}, max rel err {e}{v}"
                    for i, (p, e, v) in enumerate(zip(pairs, ["0", "0.5", "0"],
                                                      [" ok", ", 1 of 4 differ MISMATCH", " ok"])))
    expect("mismatch", RunResult(1, "sweep: 2 ranks\n" + out + "\ncheck FAILED\n", "", 1.0),
           {0: "matched", 1: "mismatched", 2: "matched"})
    line = [l for l, i in line_of.items() if i == 2][0]
    expect("compile error", RunResult(1, "", f'loc("x.mlir":{line}:5): error: no lowering\n', 1.0),
           {2: "compile_error"})
    line = [l for l, i in line_of.items() if i == 1][0]
    expect("rejection", RunResult(1, "", f'loc("x.mlir":{line}:5): error: Cannot reshard: a -> b\n',
                                  1.0), {1: "rejected"})
    expect("crash", RunResult(-11, out, "Stack dump:\n", 1.0), {}, unnamed=True)
    expect("no diagnostic", RunResult(3, "", "", 1.0), {}, unnamed=True)
    outcome = classify_unnamed(RunResult(-11, "", "Stack dump:\n", 1.0))[0]
    if outcome != "crashed":
        problems.append(f"a signal classifies as {outcome}")
    outcome = classify_unnamed(RunResult(1, "", "shardx-run: error: rank 1: boom\n", 1.0))[0]
    if outcome != "run_error":
        problems.append(f"a run error classifies as {outcome}")
    return problems
