"""Compile and call ShardX artifacts (shared objects from ``shardx-compile``).

- ``find_tool``: where the ShardX tools are.
- ``run_tool``: the one way Python runs the other tools (``shardx-opt`` for
  the importer's dead-op removal, the memory model, automatic sharding and
  the HTML report; ``shardx-compile --print-build-id``), and ``run_compiler``
  the one way it runs ``shardx-compile`` (``shardx.compile``,
  ``compile_mlir``): a progress bar on long compiles, the pipeline's timing.
  Both raise ``ToolError`` with the tool's diagnostics. The tools are
  processes by design: the runtime binding links no MLIR or LLVM, so that
  it travels to GPU hosts without them.
- ``Artifact(path)[name](*arrays)``: calls an entry point on numpy arrays
  through the runtime binding's loader (``_shardx_rt.Artifact``, which reads
  the program description ``shardx_program_info``): inputs are scattered by
  their layouts over the artifact's mesh (threads in this process), outputs
  assembled into global numpy arrays.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np


class ArtifactError(RuntimeError):
    pass


class ToolError(ArtifactError):
    """A ShardX tool failed: ``what`` it ran, its diagnostics (``stderr``)
    and exit status (``returncode``; None where it did not run to the end)."""

    def __init__(self, what: str, stderr: str, returncode: Optional[int]):
        self.what, self.stderr, self.returncode = what, stderr, returncode
        super().__init__(f"{what} failed:\n{stderr}" if stderr.strip()
                         else f"{what} exited with {returncode}")


def find_tool(name: str) -> str:
    """Path of a ShardX tool: the installed package's (``pip install .``:
    shardx/_bin), else $SHARDX_BUILD/bin, else the repository's build/bin,
    else PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    for d in [os.path.join(here, "_bin"),
              os.path.join(os.environ.get("SHARDX_BUILD", os.path.join(root, "build")), "bin")]:
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    p = shutil.which(name)
    if p is None:
        raise ArtifactError(f"{name} not found: build ShardX first (bash scripts/test.sh)")
    return p


def run_tool(tool: str, args: Sequence[str], input: Optional[str] = None,
             what: Optional[str] = None, timeout: Optional[float] = None) -> str:
    """Runs ShardX tool ``tool`` (a name for ``find_tool``, or a path) with
    ``args`` and ``input`` on its stdin (None: none), and returns its stdout.
    ToolError (``what``, default the tool's name, "failed:" and its stderr)
    when it exits with an error, cannot be started or runs past
    ``timeout`` seconds."""
    path = tool if os.sep in tool else find_tool(tool)
    what = what or os.path.basename(tool)
    try:
        proc = subprocess.run([path, *args], input=input, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL if input is None else None,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError(what, f"no answer in {timeout} s", None) from None
    except OSError as e:
        raise ToolError(what, str(e), None) from None
    if proc.returncode != 0:
        raise ToolError(what, proc.stderr, proc.returncode)
    return proc.stdout


#: The progress line of shardx-compile (Progress.h), whole: "[shardx-compile]
#: compiling kernels 12/40..." after a "\r\x1b[K" that clears the line.
_PROGRESS = re.compile(r"compiling kernels (\d+)/(\d+)\.\.\.")
_PROGRESS_LINE = re.compile(r"\r\x1b\[K(?:\[shardx-compile\][^\r\n]*?\.\.\.)?")


def _timing_seconds(report, names) -> Dict[str, float]:
    """Wall seconds of the named top-level entries of an MLIR JSON timing
    report (``shardx-compile --timing-json``)."""
    out = {}
    for entry in report if isinstance(report, list) else []:
        if isinstance(entry, dict) and entry.get("name") in names:
            out[names[entry["name"]]] = float(entry.get("wall", {}).get("duration", 0.0))
    return out


def run_compiler(src: str, out: str, args: Sequence[str] = (),
                 timing: Optional[Dict[str, float]] = None, tool: Optional[str] = None,
                 meanwhile: Optional[Callable[[], None]] = None) -> None:
    """Runs ``shardx-compile src -o out args...``; a long compile shows a
    progress bar of the object units (kernels) compiled (tqdm, on a
    terminal). The SPMD pipeline's and code generation's seconds go into
    ``timing``. A failed compile raises ArtifactError with the tool's
    diagnostics (ToolError). ``meanwhile()`` runs once the tool has
    started."""
    try:
        from tqdm import tqdm
    except ImportError:  # no bar without tqdm
        tqdm = None
    tool = tool or find_tool("shardx-compile")
    fd, timing_json = tempfile.mkstemp(prefix="shardx-timing.", suffix=".json")
    os.close(fd)
    env = dict(os.environ, SHARDX_PROGRESS="1")
    bar = None
    try:
        proc = subprocess.Popen([tool, src, "-o", out, f"--timing-json={timing_json}", *args],
                                stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env)
        chunks, tail = [], ""
        try:
            if meanwhile is not None:
                meanwhile()
            while True:
                data = proc.stderr.read1(4096)
                if not data:
                    break
                chunks.append(data)
                # A progress record may straddle two reads: keep a tail.
                tail = (tail + data.decode(errors="replace"))[-256:]
                found = _PROGRESS.findall(tail)
                if found and tqdm is not None:
                    done, total = map(int, found[-1])
                    if bar is None and total > 1:
                        bar = tqdm(total=total, desc="shardx: compiling kernels", unit="kernel",
                                   leave=False, disable=None)
                    if bar is not None:
                        bar.update(max(0, done - bar.n))
            proc.wait()
        except BaseException:
            proc.kill()
            proc.wait()
            raise
        finally:
            proc.stderr.close()
        # What the tool said, without its progress line.
        stderr = _PROGRESS_LINE.sub("", b"".join(chunks).decode(errors="replace"))
        if proc.returncode != 0:
            raise ToolError("shardx-compile", stderr, proc.returncode)
        if timing is not None:
            try:
                with open(timing_json) as f:
                    report = json.load(f)
                timing.update(_timing_seconds(report, {"spmd pipeline": "spmd",
                                                       "codegen": "codegen"}))
            except (OSError, ValueError):
                pass  # no timing: the compile itself succeeded
    finally:
        if bar is not None:
            bar.close()
        os.unlink(timing_json)


def compile_mlir(mlir_text: str, out_path: str, extra: Sequence[str] = ()) -> str:
    """Runs shardx-compile on ``mlir_text`` (kept as ``out_path``.mlir);
    returns ``out_path``."""
    src = out_path + ".mlir"
    with open(src, "w") as f:
        f.write(mlir_text)
    run_compiler(src, out_path, extra)
    return out_path


def raise_failed_check(checks: Sequence[tuple], code: int, who: str) -> None:
    """Raises eager's error for index check ``code - 1`` (``checks``:
    (exception name, message) in code order; code 0: every check passed,
    nothing raised): ``IndexError`` or ``RuntimeError`` with eager's
    message (docs/Importer.md, "Index checks")."""
    if code == 0:
        return
    if not 1 <= code <= len(checks):
        raise ArtifactError(f"{who}: check code {code} of {len(checks)} checks (a ShardX bug)")
    exc, message = checks[code - 1]
    raise {"IndexError": IndexError}.get(exc, RuntimeError)(message)


class Function:
    """One entry point of an Artifact: ``fn(*arrays)`` returns its outputs
    as numpy arrays (a bf16 output as its bits, uint16).

    An entry with index checks (``trace()``'s default) returns its outputs
    without the checks' code, and raises eager's error instead where a
    check failed (``index_checks``: the checks, (exception, message) in
    code order)."""

    def __init__(self, compiled, name: str):
        self._compiled = compiled
        self.name = name
        self.inputs = compiled.inputs(name)
        self.outputs = compiled.outputs(name)
        found = compiled.index_checks(name)
        self._check_output = None if found is None else found[0]
        self.index_checks: List[tuple] = [] if found is None else list(found[1])
        if self._check_output is not None:
            del self.outputs[self._check_output]

    def __call__(self, *args) -> List[np.ndarray]:
        if len(args) != len(self.inputs):
            raise ArtifactError(f"{self.name} takes {len(self.inputs)} inputs, got {len(args)}")
        arrays = [np.require(np.asarray(a), requirements="C") for a in args]
        try:
            outs = [np.array(o) for o in self._compiled.run(self.name, arrays)]
        except ValueError as e:  # a wrong dtype or shape
            raise ArtifactError(f"{self.name}: {e}") from None
        if self._check_output is not None:
            code = outs.pop(self._check_output)
            raise_failed_check(self.index_checks, int(code.reshape(())), self.name)
        return outs


class Artifact:
    """A loaded artifact: ``Artifact(path)[name](*arrays)``."""

    def __init__(self, path: str):
        from .sharded_tensor import runtime
        rt = runtime()
        self.path = os.path.abspath(path)
        try:
            self._compiled = rt.Artifact(self.path)
        except rt.LoadError as e:
            raise ArtifactError(str(e)) from None
        self.entry_points: List[str] = list(self._compiled.entry_points)
        self.functions: Dict[str, Function] = {
            n: Function(self._compiled, n) for n in self.entry_points}

    def __getitem__(self, name: str) -> Function:
        return self.functions[name]
