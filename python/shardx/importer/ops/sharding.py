"""ShardX's own traced ops: ``shardx.constrain`` as ``shardx.annotate``."""

from __future__ import annotations

import torch

from ...constraint import parse_placements
from ...placements import check_placements, layout_text
from ..registry import handles
from ..tracing import _user_line
from ..values import Value


@handles(torch.ops.shardx.constrain.default)
def _constrain(imp, node, args, kwargs):
    """``shardx.constrain(x, placements)``: a ``shardx.annotate`` on the
    trace's mesh (nothing without one)."""
    x, spelling = args
    if imp.mesh is None:
        return x
    placements = check_placements(imp.mesh, parse_placements(spelling), x.rank,
                                  f"shardx.constrain (from {_user_line(node)})")
    layout = layout_text(imp.mesh, placements)
    return Value(imp.em.emit(f"shardx.annotate {x.name} : {x.type} to {layout}"), x.shape, x.dtype)
