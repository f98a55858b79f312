"""ShardX Python frontend: DTensor-style placements and the PyTorch importer."""

from .placements import (Mesh, Partial, Placement, PlacementError, Replicate, Shard,
                         StridedShard, check_placements, layout_text)
from .importer import ImportError_ as TraceError, TraceSpec, UnsupportedOpError, trace
from .train import TrainStep, eager_context

__all__ = ["Mesh", "Partial", "Placement", "PlacementError", "Replicate", "Shard", "StridedShard",
           "check_placements", "layout_text", "TraceError", "TraceSpec", "UnsupportedOpError",
           "trace", "TrainStep", "eager_context"]
