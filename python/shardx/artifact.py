"""Load and call ShardX artifacts (shared objects from ``shardx-compile``).

An artifact exports ``_mlir_ciface_<name>`` for each entry point and a JSON
description ``shardx_program_info`` (names, input/output shapes and dtypes,
layouts). Inputs are passed as memref descriptors of numpy arrays; outputs
come back as memrefs the program allocated, which are copied into numpy
arrays and freed.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
from typing import Dict, List, Sequence

import numpy as np

_NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i64": np.int64,
       "i32": np.int32, "i16": np.int16, "i8": np.int8, "i1": np.bool_}


def _descriptor_type(rank: int):
    fields = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p), ("offset", ctypes.c_int64)]
    if rank:
        fields += [("sizes", ctypes.c_int64 * rank), ("strides", ctypes.c_int64 * rank)]
    return type(f"MemRef{rank}D", (ctypes.Structure,), {"_fields_": fields})


class ArtifactError(RuntimeError):
    pass


class Function:
    def __init__(self, lib: ctypes.CDLL, info: dict):
        self.name = info["name"]
        self.inputs = info["inputs"]
        self.outputs = info["outputs"]
        try:
            self._fn = getattr(lib, f"_mlir_ciface_{self.name}")
        except AttributeError:
            raise ArtifactError(f"artifact has no entry point {self.name}") from None
        self._fn.restype = None
        # Results are malloc blocks: the artifact's buffer cache takes them
        # back for the next call (docs/Runtime.md); free() where it has none.
        self._free = getattr(lib, "shardx_rt_host_free", None) or ctypes.CDLL(None).free
        self._free.argtypes = [ctypes.c_void_p]
        self._free.restype = None

    def __call__(self, *args: np.ndarray) -> List[np.ndarray]:
        if len(args) != len(self.inputs):
            raise ArtifactError(f"{self.name} takes {len(self.inputs)} inputs, got {len(args)}")
        keep = []
        ptrs = []
        for i, (a, spec) in enumerate(zip(args, self.inputs)):
            dtype = _NP.get(spec["dtype"])
            if dtype is None:
                raise ArtifactError(f"input {i}: dtype {spec['dtype']} has no numpy equivalent here")
            a = np.require(np.asarray(a, dtype=dtype), requirements='C')
            shape = spec["shape"]
            if len(shape) != a.ndim or any(s not in (-1, d) for s, d in zip(shape, a.shape)):
                raise ArtifactError(f"{self.name}: input {i} has shape {list(a.shape)}, expected {shape}")
            d = _descriptor_type(a.ndim)()
            d.allocated = d.aligned = a.ctypes.data
            d.offset = 0
            for k in range(a.ndim):
                d.sizes[k] = a.shape[k]
                d.strides[k] = a.strides[k] // a.itemsize
            keep.append(a)
            keep.append(d)
            ptrs.append(ctypes.pointer(d))
        out_types = [_descriptor_type(len(o["shape"])) for o in self.outputs]
        if len(out_types) == 1:
            res = out_types[0]()
            call_args = [ctypes.pointer(res)] + ptrs
            descs = [res]
        elif out_types:
            Res = type("Results", (ctypes.Structure,), {"_fields_": [(f"r{i}", t) for i, t in enumerate(out_types)]})
            res = Res()
            call_args = [ctypes.pointer(res)] + ptrs
            descs = [getattr(res, f"r{i}") for i in range(len(out_types))]
        else:
            call_args = ptrs
            descs = []
        self._fn(*call_args)
        inputs = {a.ctypes.data for a in keep if isinstance(a, np.ndarray)}
        outs = []
        to_free = set()
        for d, spec in zip(descs, self.outputs):
            dtype = np.dtype(_NP[spec["dtype"]])
            rank = len(spec["shape"])
            shape = tuple(d.sizes[k] for k in range(rank))
            strides = tuple(d.strides[k] for k in range(rank))
            n = int(np.prod(shape)) if shape else 1
            if n == 0:
                outs.append(np.zeros(shape, dtype))
            else:
                base = d.aligned + d.offset * dtype.itemsize
                extent = 1 + sum((sz - 1) * st for sz, st in zip(shape, strides))
                flat = np.frombuffer((ctypes.c_char * (extent * dtype.itemsize)).from_address(base), dtype=dtype)
                arr = np.lib.stride_tricks.as_strided(flat, shape, tuple(st * dtype.itemsize for st in strides))
                outs.append(np.array(arr, copy=True))
            if d.allocated and d.allocated not in inputs:
                to_free.add(d.allocated)
        for p in to_free:
            self._free(p)
        return outs


class Artifact:
    """A loaded artifact: ``Artifact(path).functions[name](*arrays)``."""

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self.lib = ctypes.CDLL(self.path)
        try:
            raw = ctypes.c_char_p.in_dll(self.lib, "shardx_program_info")
        except ValueError:
            raise ArtifactError(f"{path} is not a ShardX artifact (no shardx_program_info)") from None
        text = ctypes.cast(ctypes.addressof(raw), ctypes.c_char_p).value.decode()
        self.info = json.loads(text)
        self.functions: Dict[str, Function] = {f["name"]: Function(self.lib, f) for f in self.info["functions"]}

    def __getitem__(self, name: str) -> Function:
        return self.functions[name]


def find_tool(name: str) -> str:
    """Path of a ShardX tool: the installed package's (``pip install .``:
    shardx/_bin), else $SHARDX_BUILD/bin, else the repository's build/bin,
    else PATH."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    for d in [os.path.join(here, "_bin"),
              os.path.join(os.environ.get("SHARDX_BUILD", os.path.join(root, "build")), "bin")]:
        p = os.path.join(d, name)
        if os.path.exists(p):
            return p
    p = shutil.which(name)
    if p is None:
        raise ArtifactError(f"{name} not found: build ShardX first (bash scripts/test.sh)")
    return p


def compile_mlir(mlir_text: str, out_path: str, extra: Sequence[str] = ()) -> str:
    """Runs shardx-compile on ``mlir_text``; returns ``out_path``."""
    src = out_path + ".mlir"
    with open(src, "w") as f:
        f.write(mlir_text)
    proc = subprocess.run([find_tool("shardx-compile"), src, "-o", out_path, *extra],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise ArtifactError(f"shardx-compile failed:\n{proc.stderr}")
    return out_path
