"""Types, constants and SSA values of the emitted MLIR: dtype names, exact
scalar literals, affine maps, and ``Value`` (one tensor SSA value)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence, Tuple

import torch


class UnsupportedOpError(NotImplementedError):
    """An aten op (or a form of one) that the importer cannot express."""


class ImportError_(ValueError):
    """Bad arguments to ``trace``."""


# ----------------------------------------------------------------------------
# Types and constants
# ----------------------------------------------------------------------------

_ELEM = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16",
    torch.bfloat16: "bf16", torch.int64: "i64", torch.int32: "i32",
    torch.int16: "i16", torch.int8: "i8", torch.uint8: "i8", torch.bool: "i1",
}
_INT_VIEW = {torch.float32: torch.int32, torch.float64: torch.int64,
             torch.float16: torch.int16, torch.bfloat16: torch.int16}
_HEX_DIGITS = {torch.float32: 8, torch.float64: 16, torch.float16: 4, torch.bfloat16: 4}


def elem_type(dtype: torch.dtype) -> str:
    try:
        return _ELEM[dtype]
    except KeyError:
        raise UnsupportedOpError(f"dtype {dtype} is not supported") from None


def tensor_type(shape: Sequence[int], dtype: torch.dtype) -> str:
    dims = "".join(f"{d}x" for d in shape)
    return f"tensor<{dims}{elem_type(dtype)}>"


def is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point


def const_literal(value, dtype: torch.dtype) -> str:
    """Exact MLIR literal of python ``value`` converted as torch converts a
    scalar to ``dtype``."""
    if dtype == torch.bool:
        return "true" if bool(value) else "false"
    if is_float(dtype):
        bits = torch.tensor(float(value), dtype=dtype).view(_INT_VIEW[dtype]).item()
        nbits = 4 * _HEX_DIGITS[dtype]
        bits &= (1 << nbits) - 1
        return f"0x{bits:0{_HEX_DIGITS[dtype]}X}"
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
