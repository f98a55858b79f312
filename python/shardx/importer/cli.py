"""The command line: ``python3 -m shardx.importer script.py:function -o
out.mlir``, where ``function()`` returns a ``TraceSpec`` or the keyword
arguments of ``trace``."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from ..placements import PlacementError
from .module import TraceSpec, trace, trace_spec
from .values import ImportError_, UnsupportedOpError


def _load(target: str):
    if ":" not in target:
        raise SystemExit(f"error: expected script.py:function, got {target!r}")
    path, func = target.rsplit(":", 1)
    spec = importlib.util.spec_from_file_location("_shardx_user_script", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"error: cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not hasattr(mod, func):
        raise SystemExit(f"error: {path} has no function {func!r}")
    return getattr(mod, func)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m shardx.importer",
                                description="Trace a PyTorch program into a ShardX MLIR program.")
    p.add_argument("target", help="script.py:function; the function returns a TraceSpec or trace() kwargs")
    p.add_argument("-o", "--output", default="-", help="output file (default: stdout)")
    args = p.parse_args(argv)
    spec = _load(args.target)()
    try:
        if isinstance(spec, TraceSpec):
            text = trace_spec(spec)
        elif isinstance(spec, dict):
            text = trace(**spec)
        else:
            raise SystemExit("error: the function must return a shardx.TraceSpec or a dict of trace() arguments")
    except (UnsupportedOpError, PlacementError, ImportError_) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w") as f:
            f.write(text)
    return 0
