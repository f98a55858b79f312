"""ShardX Python frontend: DTensor-style placements and the PyTorch importer.

The importer (the ``shardx.importer`` package) and the training-step helpers
load PyTorch; they are imported on first use, so that ``import shardx`` alone
(placements, layouts) does not.
"""

from ._version import __version__
from .placements import (Mesh, Partial, Placement, PlacementError, Replicate, Shard,
                         StridedShard, check_placements, layout_text)

_LAZY = {
    "trace": ("importer", "trace"),
    "TraceSpec": ("importer", "TraceSpec"),
    "TraceError": ("importer", "ImportError_"),
    "UnsupportedOpError": ("importer", "UnsupportedOpError"),
    "TrainStep": ("train", "TrainStep"),
    "eager_context": ("train", "eager_context"),
    "report": ("html_report", "report"),
    "compile": ("jit", "compile"),
    "constrain": ("constraint", "constrain"),
    "same_random": ("importer.rng", "same_random"),
    "cache_stats": ("jit", "cache_stats"),
    "MissingEntryError": ("jit", "MissingEntryError"),
    "export": ("aot", "export"),
    "load": ("aot", "load"),
    "PackageError": ("aot", "PackageError"),
    "ShardedTensor": ("sharded_tensor", "ShardedTensor"),
    "RankError": ("sharded_tensor", "RankError"),
    "DonatedError": ("sharded_tensor", "DonatedError"),
    **{n: ("checkpoint", n) for n in ("save_checkpoint", "load_checkpoint", "latest_checkpoint", "CheckpointError")},
    "DTensorInteropError": ("dtensor", "DTensorInteropError"),
    "plan_from_parallel_styles": ("dtensor", "plan_from_parallel_styles"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module 'shardx' has no attribute {name!r}")


__all__ = ["Mesh", "Partial", "Placement", "PlacementError", "Replicate", "Shard", "StridedShard",
           "check_placements", "layout_text", *_LAZY]
