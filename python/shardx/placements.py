"""DTensor-style placements and device meshes, spelled as ShardX layouts.

The classes mirror ``torch.distributed.tensor``: a ``Mesh`` has a shape and
axis names; a tensor's layout is one placement per mesh axis (``Shard(d)``,
``StridedShard(d, split_factor)``, ``Replicate()``, ``Partial(op)``).
``layout_text`` turns them into the ``#shardx.layout<...>`` attribute text
that ``shardx-opt`` parses (and prints back in canonical form).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Tuple

REDUCE_OPS = ("sum", "avg", "max", "min", "prod")


class PlacementError(ValueError):
    """A placement, mesh or layout that is not well formed."""


class Placement:
    """Base class of the placements of one tensor on one mesh axis."""

    def spelling(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.spelling()


@dataclass(frozen=True, repr=False)
class Shard(Placement):
    """Split tensor dim ``dim`` evenly (torch.chunk) over the mesh axis."""

    dim: int

    def __post_init__(self):
        if not isinstance(self.dim, int) or isinstance(self.dim, bool):
            raise PlacementError(f"Shard dim must be an int, got {self.dim!r}")

    def spelling(self) -> str:
        return f"S({self.dim})"


@dataclass(frozen=True, repr=False)
class StridedShard(Placement):
    """DTensor's _StridedShard: split dim ``dim`` with ``split_factor``
    (the number of blocks that a later, inner split of the same dim makes)."""

    dim: int
    split_factor: int

    def __post_init__(self):
        if not isinstance(self.dim, int) or isinstance(self.dim, bool):
            raise PlacementError(f"StridedShard dim must be an int, got {self.dim!r}")
        if not isinstance(self.split_factor, int) or self.split_factor < 1:
            raise PlacementError(
                f"StridedShard split_factor must be a positive int, got {self.split_factor!r}")

    def spelling(self) -> str:
        return f"SS({self.dim}, {self.split_factor})"


@dataclass(frozen=True, repr=False)
class Replicate(Placement):
    """Every rank of the mesh axis holds the whole tensor."""

    def spelling(self) -> str:
        return "R"


@dataclass(frozen=True, repr=False)
class Partial(Placement):
    """Every rank holds a term; the tensor is their reduction with ``op``."""

    op: str = "sum"

    def __post_init__(self):
        if self.op not in REDUCE_OPS:
            raise PlacementError(
                f"Partial op must be one of {', '.join(REDUCE_OPS)}, got {self.op!r}")

    def spelling(self) -> str:
        return f"P({self.op})"


_IDENT_OK = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


@dataclass(frozen=True)
class Mesh:
    """A logical device mesh: ``Mesh((2, 4), ("dp", "tp"))``."""

    shape: Tuple[int, ...]
    axis_names: Tuple[str, ...] = ()
    name: str = "mesh"

    def __init__(self, shape: Sequence[int], axis_names: Sequence[str] = (), name: str = "mesh"):
        shape = tuple(shape)
        if not shape or any(not isinstance(s, int) or s < 1 for s in shape):
            raise PlacementError(f"mesh shape must be positive ints, got {shape!r}")
        axis_names = tuple(axis_names) or tuple(f"a{i}" for i in range(len(shape)))
        if len(axis_names) != len(shape):
            raise PlacementError(
                f"mesh has {len(shape)} axes but {len(axis_names)} axis names")
        if len(set(axis_names)) != len(axis_names):
            raise PlacementError(f"mesh axis names repeat: {axis_names!r}")
        if not name or not set(name) <= _IDENT_OK:
            raise PlacementError(f"mesh name must be an identifier, got {name!r}")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "axis_names", axis_names)
        object.__setattr__(self, "name", name)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def op_text(self) -> str:
        """The ``shardx.mesh`` op declaring this mesh."""
        names = ", ".join(f'"{a}"' for a in self.axis_names)
        return f"shardx.mesh @{self.name}(shape = {'x'.join(map(str, self.shape))}, axes = [{names}])"


def check_placements(mesh: Mesh, placements: Sequence[Placement], rank: int,
                     what: str = "tensor") -> Tuple[Placement, ...]:
    """Checks ``placements`` against ``mesh`` and a tensor of rank ``rank``
    and returns them as a tuple; raises PlacementError naming ``what``."""
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise PlacementError(
            f"{what}: {len(placements)} placements for a mesh with {mesh.ndim} axes "
            f"({', '.join(mesh.axis_names)}); give one placement per mesh axis")
    for axis, p in enumerate(placements):
        if not isinstance(p, Placement):
            raise PlacementError(f"{what}: placement {p!r} on mesh axis {axis} is not a Placement")
        if isinstance(p, (Shard, StridedShard)):
            if not -rank <= p.dim < rank or rank == 0:
                raise PlacementError(
                    f"{what}: {p.spelling()} on mesh axis '{mesh.axis_names[axis]}' is out of "
                    f"range for a tensor of rank {rank}")
    return tuple(_normalize(p, rank) for p in placements)


def _normalize(p: Placement, rank: int) -> Placement:
    if isinstance(p, Shard) and p.dim < 0:
        return Shard(p.dim + rank)
    if isinstance(p, StridedShard) and p.dim < 0:
        return StridedShard(p.dim + rank, p.split_factor)
    return p


def layout_text(mesh: Mesh, placements: Sequence[Placement], rank: int | None = None) -> str:
    """The ``#shardx.layout`` attribute of ``placements`` on ``mesh``."""
    if rank is not None:
        placements = check_placements(mesh, placements, rank)
    elif len(placements) != mesh.ndim:
        raise PlacementError(
            f"{len(placements)} placements for a mesh with {mesh.ndim} axes")
    body = ", ".join(p.spelling() for p in placements)
    return f"#shardx.layout<@{mesh.name}, [{body}]>"
