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
import re
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


def remove_dead_ops(ops: List[Op], module_text: Callable[[List[str]], str]) -> List[Op]:
    """The ops of ``ops`` that MLIR's ``remove-dead-values`` keeps, in
    order. ``module_text(op_texts)`` is the module around the given
    rendered ops."""
    if not ops:
        return ops
    global _warned
    opt = shardx_opt()
    if opt is None:
        if not _warned:
            log.warning("shardx-opt not found (build ShardX or set SHARDX_BUILD): the imported "
                        "program keeps its dead ops")
            _warned = True
        return ops
    probe = module_text([op.render(f'"{_PROBE}{i}"') for i, op in enumerate(ops)])
    from ..artifact import ToolError, run_tool
    try:
        out = run_tool(
            # Unregistered ops: the region calls' probes (region_import.CallOp).
            opt, ["-", PIPELINE, "--allow-unregistered-dialect", "--mlir-print-debuginfo",
                  "--mlir-print-local-scope", "--mlir-elide-elementsattrs-if-larger=16", "-o", "-"],
            input=probe)
    except ToolError as e:
        raise ImportError_("shardx-opt rejected the imported program (an importer bug; please "
                           f"report it with the program):\n{e.stderr.strip() or e}") from None
    live = {int(i) for i in _PROBE_LOC.findall(out)}
    return [op for i, op in enumerate(ops) if i in live]
