"""Layout constraints inside a traced function: ``shardx.constrain``.

``y = shardx.constrain(x, [Shard(1), Replicate()])`` says that ``x`` must
have these placements (one per mesh axis of the trace's mesh) at this point
of the program, like ``DTensor.redistribute`` or Shardy's
``sharding_constraint``. Eagerly it is the identity (a copy); ``shardx.trace``
turns it into ``shardx.annotate``, a hard constraint of propagation, so a
plan can place activations as well as parameters: sequence parallelism puts
the norms' inputs in ``Shard(seq)`` this way (forward hooks on the norm
modules, see ``shardx_dev.zoo``). Its gradient passes through unchanged (the
propagation gives it its layout). Traced without a mesh, it constrains
nothing.
"""

from __future__ import annotations

import re
from typing import Sequence, Tuple

import torch

from .placements import Partial, Placement, PlacementError, Replicate, Shard, StridedShard


@torch.library.custom_op("shardx::constrain", mutates_args=())
def _constrain(x: torch.Tensor, placements: str) -> torch.Tensor:
    return x.clone()


@_constrain.register_fake
def _(x, placements):
    return torch.empty_like(x)


def _backward(ctx, grad):
    return grad, None


_constrain.register_autograd(_backward)


def constrain(x: torch.Tensor, placements: Sequence[Placement]) -> torch.Tensor:
    """``x`` with ``placements`` (one per mesh axis) required at this point."""
    placements = tuple(placements)
    for p in placements:
        if not isinstance(p, Placement):
            raise PlacementError(f"constrain: {p!r} is not a Placement")
    return _constrain(x, "; ".join(p.spelling() for p in placements))


_SPELLING = re.compile(r"^(?:S\((-?\d+)\)|SS\((-?\d+), (\d+)\)|(R)|P\((\w+)\))$")


def parse_placements(text: str) -> Tuple[Placement, ...]:
    """The placements of a ``constrain`` op's spelling ("S(1); R")."""
    out = []
    for part in text.split("; "):
        m = _SPELLING.match(part)
        if not m:
            raise PlacementError(f"constrain: bad placement spelling {part!r}")
        if m.group(1) is not None:
            out.append(Shard(int(m.group(1))))
        elif m.group(2) is not None:
            out.append(StridedShard(int(m.group(2)), int(m.group(3))))
        elif m.group(4):
            out.append(Replicate())
        else:
            out.append(Partial(m.group(5)))
    return tuple(out)
