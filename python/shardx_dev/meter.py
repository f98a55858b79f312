"""The runtime's memory meter (docs/Memory.md) read from Python: the
allocation functions of CPU artifacts count each thread's live bytes and
high-water mark, which the binding's ``Artifact.host_mem_reset`` /
``host_mem_peaks`` / ``host_mem_live`` reset and read (the artifact's own
``shardx_rt_host_mem_reset`` / ``shardx_rt_host_mem_peaks``)."""

from __future__ import annotations

from typing import List


def measured_peaks(compiled, args) -> List[int]:
    """Each rank's (thread's) peak of program-allocated bytes over one warm
    call of ``compiled`` (a ``shardx.compile`` result) on ``args``: a first
    call compiles and fills the buffer cache, the meter is reset, and the
    second call is measured."""
    compiled(*args)
    artifact = compiled._last_executable().artifact
    artifact.host_mem_reset()
    out = compiled(*args)
    del out
    peaks = artifact.host_mem_peaks()
    if not peaks:
        raise RuntimeError(f"measured_peaks: the second call of {compiled.name} did not run "
                           f"the artifact of its first (recompiles: "
                           f"{compiled.recompile_reasons})")
    return peaks


def bytes_left_after_call(compiled, args) -> int:
    """The program-allocated bytes still allocated after one warm call of
    ``compiled`` on ``args`` and the release of its outputs (summed over the
    threads): 0 unless the compiled program leaks buffers."""
    compiled(*args)
    artifact = compiled._last_executable().artifact
    artifact.host_mem_reset()
    out = compiled(*args)
    del out
    return sum(artifact.host_mem_live())
