"""Types, constants and SSA values of the emitted MLIR: dtype names, exact
scalar literals, affine maps, and ``Value`` (one tensor SSA value)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import torch

from .. import dtypes


class UnsupportedOpError(NotImplementedError):
    """An aten op (or a form of one) that the importer cannot express."""


class ImportError_(ValueError):
    """Bad arguments to ``trace``."""


# ----------------------------------------------------------------------------
# Types and constants
# ----------------------------------------------------------------------------

def elem_type(dtype: torch.dtype) -> str:
    """MLIR's element type of ``dtype`` (``shardx.dtypes``; torch's uint8 as
    the signless i8)."""
    try:
        return dtypes.from_torch(dtype, signless=True)
    except TypeError:
        raise UnsupportedOpError(f"dtype {dtype} is not supported") from None


def tensor_type(shape: Sequence[int], dtype: torch.dtype) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{elem_type(dtype)}>"


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def string_literal(text: str) -> str:
    """``text`` as an MLIR string literal: quoted, with backslashes and
    double quotes escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def const_literal(value, dtype: torch.dtype) -> str:
    """Exact MLIR literal of python ``value`` converted as torch converts a
    scalar to ``dtype``."""
    if dtype == torch.bool:
        return "true" if bool(value) else "false"
    if is_float(dtype):
        nbits = 8 * dtypes.get(elem_type(dtype)).bytes
        bits = torch.tensor(float(value), dtype=dtype).view(getattr(torch, f"int{nbits}")).item()
        bits &= (1 << nbits) - 1
        return f"0x{bits:0{nbits // 4}X}"
    return str(int(value))


@dataclass
class Value:
    """An SSA value of tensor type emitted for an FX node."""

    name: str
    shape: Tuple[int, ...]
    dtype: torch.dtype
    # The value this one is a reshape of (so reshaping back is free).
    reshape_of: Optional["Value"] = field(default=None, repr=False, compare=False)

    @property
    def type(self) -> str:
        return tensor_type(self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.shape)


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _amap(nd: int, exprs: Sequence[str]) -> str:
    dims = ", ".join(f"d{i}" for i in range(nd))
    return f"affine_map<({dims}) -> ({', '.join(exprs)})>"
