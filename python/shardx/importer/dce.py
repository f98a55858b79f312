"""Dead-code removal by MLIR.

Handlers emit ops that nothing may use: the aten graph has dead nodes, and
the emitter's own shortcuts leave some behind (reshaping a value back to
the shape it was reshaped from reuses the original, so the reshape is
unused). The importer does not decide what is dead itself: MLIR's
``remove-dead-values`` pass, run by ``shardx-opt`` on the emitted module,
does, with each op's side effects from its own definition (every op the
importer emits is side-effect free, so an op is dead when no live op uses
its results, transitively).

To keep the importer's own text (its SSA names, location aliases and exact
literals, which the committed example programs and the compile cache keys
are made of), the module goes to ``shardx-opt`` with each top-level op at a
probe location ``loc("shardx.importer.op<i>")``; the ops whose probe
location is still in the printed result are the live ones, and the importer
prints those. Nested ops (the bodies of ``linalg.generic``) are kept as
emitted.

Without ``shardx-opt`` (no build: ``$SHARDX_BUILD/bin``, the repository's
``build/bin``, ``PATH``) every op is kept, with a warning: the program is
still valid, and ``shardx-spmd`` and ``shardx-compile`` canonicalize (which
erases dead ops) before propagation.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import tempfile
from typing import Callable, List, Optional

from .emitter import Op
from .values import ImportError_

log = logging.getLogger("shardx.importer")

PIPELINE = "--remove-dead-values"
PROBE = _PROBE = "shardx.importer.op"
_PROBE_LOC = re.compile(r'loc\("' + re.escape(_PROBE) + r'(\d+)"\)')
_warned = False


def shardx_opt() -> Optional[str]:
    """The path of ``shardx-opt``, or None where ShardX is not built."""
    from ..artifact import ArtifactError, find_tool
    try:
        return find_tool("shardx-opt")
    except ArtifactError:
        return None


def start_removing_dead_ops(ops: List[Op],
                            module_text: Callable[[List[str]], str]) -> Callable[[], List[Op]]:
    """Finds the ops of ``ops`` that MLIR's ``remove-dead-values`` keeps, in
    order (``module_text(op_texts)`` is the module around the given
    rendered ops): ``shardx-opt`` runs (the probe and its result in files,
    so that it needs nothing from this process until it ends) while the
    caller goes on; the returned function waits for it and returns the
    live ops (an ``ImportError_`` where the tool rejects the
    probe). The trace removes the region functions' dead ops and the
    step's in two such runs at once, and collects its garbage meanwhile
    (``module._trace``)."""
    if not ops:
        return lambda: ops
    global _warned
    opt = shardx_opt()
    if opt is None:
        if not _warned:
            log.warning("shardx-opt not found (build ShardX or set SHARDX_BUILD): the imported "
                        "program keeps its dead ops")
            _warned = True
        return lambda: ops
    probe = module_text([op.render(f'"{_PROBE}{i}"') for i, op in enumerate(ops)])
    folder = tempfile.mkdtemp(prefix="shardx-dce-")
    src, dst = os.path.join(folder, "probe.mlir"), os.path.join(folder, "live.mlir")
    try:
        with open(src, "w") as f:
            f.write(probe)
        proc = subprocess.Popen(
            # Unregistered ops: the region calls' probes (region_import.CallOp).
            [opt, src, PIPELINE, "--allow-unregistered-dialect", "--mlir-print-debuginfo",
             "--mlir-print-local-scope", "--mlir-elide-elementsattrs-if-larger=16", "-o", dst],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise _rejected(str(e)) from None

    def live_ops() -> List[Op]:
        try:
            _, err = proc.communicate()
            if proc.returncode != 0:
                raise _rejected(err.strip() or f"shardx-opt exited with {proc.returncode}")
            with open(dst) as f:
                out = f.read()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        live = {int(i) for i in _PROBE_LOC.findall(out)}
        return [op for i, op in enumerate(ops) if i in live]
    return live_ops


def _rejected(detail: str) -> ImportError_:
    return ImportError_("shardx-opt rejected the imported program (an importer bug; please "
                        f"report it with the program):\n{detail}")
