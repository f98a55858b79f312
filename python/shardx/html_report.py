"""The HTML sharding report from Python (docs/Report.md).

``report(program, "out.html")`` runs ``shardx-opt --shardx-report`` on a
traced program (the MLIR text ``shardx.trace`` returns, or a path to a
``.mlir`` file): one self-contained HTML page with the mesh, every
argument's and result's layout drawn as device blocks, every reshard with
its plan, bytes per rank and modeled time, totals per collective kind and
mesh axis, and what the whole-graph refinement changed.
"""

import os
import tempfile
from typing import Optional, Sequence

from .artifact import ToolError, run_tool


class ReportError(RuntimeError):
    """shardx-opt could not write the report (its diagnostics are the message)."""


def report(program: str, output: str, *, title: Optional[str] = None,
           passes: Sequence[str] = ()) -> str:
    """Writes the sharding report of ``program`` to ``output``; returns ``output``.

    ``program`` is MLIR text or the path of a ``.mlir`` file. Without
    ``passes`` the report runs propagation and reshard insertion itself;
    ``passes`` (e.g. ``["--shardx-propagate=refine=false",
    "--shardx-insert-reshards"]``) run before it instead.
    """
    output = os.path.abspath(output)
    with tempfile.TemporaryDirectory(prefix="shardx-report") as tmp:
        if os.path.exists(program) and not program.lstrip().startswith(("module", "func", "shardx", "//")):
            src = program
        else:
            src = os.path.join(tmp, "program.mlir")
            with open(src, "w") as f:
                f.write(program)
        option = f"output={output}" + (f" title={{{title}}}" if title else "")
        try:
            run_tool("shardx-opt", [src, *passes, f"--shardx-report={option}", "-o", os.devnull])
        except ToolError as e:
            raise ReportError(e.stderr.strip() or str(e)) from None
    return output
