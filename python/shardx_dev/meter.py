"""The runtime's memory meter (docs/Memory.md) read from Python: the
allocation functions of CPU artifacts count each thread's live bytes and
high-water mark (``shardx_rt_host_mem_reset`` / ``shardx_rt_host_mem_peaks``
of the runtime's C API)."""

from __future__ import annotations

import ctypes
from typing import List


def measured_peaks(compiled, args) -> List[int]:
    """Each rank's (thread's) peak of program-allocated bytes over one warm
    call of ``compiled`` (a ``shardx.compile`` result) on ``args``: a first
    call compiles and fills the buffer cache, the meter is reset, and the
    second call is measured."""
    compiled(*args)
    lib = ctypes.CDLL(list(compiled._executables.values())[-1].path)
    lib.shardx_rt_host_mem_peaks.restype = ctypes.c_int64
    lib.shardx_rt_host_mem_peaks.argtypes = [ctypes.POINTER(ctypes.c_int64),
                                             ctypes.c_void_p, ctypes.c_int64]
    lib.shardx_rt_host_mem_reset()
    out = compiled(*args)
    del out
    peaks = (ctypes.c_int64 * 256)()
    n = lib.shardx_rt_host_mem_peaks(peaks, None, 256)
    return [peaks[i] for i in range(min(n, 256))]
