"""The element types of ShardX tensors, as Python sees them.

The runtime's table (``rt::kDTypes``, include/shardx/Runtime/DType.h) owns
the element types: their names (MLIR's spelling, the program description's
``dtype``), sizes and kinds. This module is the one place Python maps those
names to torch and numpy dtypes. The runtime binding exports its table
(``_shardx_rt.dtypes()``) and ``python/tests/test_dtypes.py`` checks this
one against it; the table is written here, not read from the binding,
because the importer (``shardx.trace``) works without a build.

The torch and numpy names follow the DLPack kinds the binding gives each
type (``dlpackType`` in python/bindings/Arrays.cpp): a float of n bits is
``float<n>``, bf16 is ``bfloat16`` (numpy has none: a bf16 array reaches
numpy as its bits, uint16), an integer of n bits is ``int<n>`` and i1 is
``bool``. MLIR's ``index`` is no tensor element type here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np


@dataclass(frozen=True)
class DType:
    """One element type."""

    #: MLIR's spelling ("f32", "bf16", "i1", ...).
    name: str
    #: The torch dtype's name (``getattr(torch, torch_name)``).
    torch_name: str
    #: The numpy dtype's name; None where numpy has none (bf16).
    numpy_name: Optional[str]
    bytes: int
    is_float: bool


#: In ``rt::DType`` order, without ``index``.
DTYPES: Tuple[DType, ...] = (
    DType("f32", "float32", "float32", 4, True),
    DType("f64", "float64", "float64", 8, True),
    DType("i32", "int32", "int32", 4, False),
    DType("i64", "int64", "int64", 8, False),
    DType("bf16", "bfloat16", None, 2, True),
    DType("f16", "float16", "float16", 2, True),
    DType("i16", "int16", "int16", 2, False),
    DType("i8", "int8", "int8", 1, False),
    DType("i1", "bool", "bool", 1, False),
)

BY_NAME: Dict[str, DType] = {d.name: d for d in DTYPES}
# Keyed by str(torch dtype) ("torch.float32"), so that numpy callers need
# not import torch.
_BY_TORCH: Dict[str, str] = {"torch." + d.torch_name: d.name for d in DTYPES}
_BY_NUMPY: Dict[np.dtype, str] = {np.dtype(d.numpy_name): d.name for d in DTYPES
                                  if d.numpy_name is not None}
#: MLIR integers are signless: the importer emits torch's uint8 as i8 (and
#: its casts from uint8 as unsigned ones). The runtime takes no uint8.
_SIGNLESS = {"torch.uint8": "i8"}


def get(name: str) -> DType:
    """The element type MLIR spells ``name``; TypeError if ShardX has none."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise TypeError(f"unsupported dtype '{name}'") from None


def from_torch(dtype, signless: bool = False) -> str:
    """The name of a torch dtype's element type; TypeError if ShardX has
    none. ``signless``: also torch's unsigned uint8, as i8 (the importer's
    view of MLIR's signless integers)."""
    key = str(dtype)
    name = _BY_TORCH.get(key) or (_SIGNLESS.get(key) if signless else None)
    if name is None:
        raise TypeError(f"unsupported dtype {dtype}")
    return name


def from_numpy(dtype) -> str:
    """The name of a numpy dtype's element type; TypeError if ShardX has none."""
    try:
        return _BY_NUMPY[np.dtype(dtype)]
    except (KeyError, TypeError):
        raise TypeError(f"unsupported dtype {dtype}") from None


def name_of(t) -> str:
    """The element type name of a torch tensor's or numpy array's dtype."""
    if isinstance(t, np.ndarray):
        return from_numpy(t.dtype)
    return from_torch(t.dtype)


def torch_dtype(name: str):
    """The torch dtype of element type ``name``; TypeError if ShardX has none."""
    import torch
    return getattr(torch, get(name).torch_name)


def torch_names() -> Tuple[str, ...]:
    """The torch dtypes ShardX holds, as ``torch.<name>``."""
    return tuple("torch." + d.torch_name for d in DTYPES)


def as_torch(array: np.ndarray, name: str):
    """A torch tensor over ``array`` (no copy) holding element type ``name``:
    a bf16 array, which numpy holds as its uint16 bits, is viewed as
    ``torch.bfloat16``."""
    import torch
    t = torch.from_numpy(array)
    return t.view(torch.bfloat16) if name == "bf16" else t
