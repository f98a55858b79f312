//===- BufferCache.cpp - Caching allocator of CPU program buffers ---------===//
//
// Part of ShardX.
//
// CPU artifacts lower memref allocation to MLIR's generic functions
// (`finalize-memref-to-llvm{use-generic-functions}`), defined here on the
// artifact's BufferCache: every buffer is a malloc block, and a freed block
// of 1 MiB or more is kept for the next allocation of about its size. A
// training step allocates the same buffers on every run; glibc serves
// blocks above its mmap threshold (at most 32 MiB, and always on rank
// threads for blocks above 64 MiB) with fresh mappings, so without the
// cache each run page-faults and zeroes its weight-sized buffers again.
//
// The same functions count each thread's live program bytes and their
// high-water mark (AllocationMeter; `shardx_rt_host_mem_*`), which
// docs/Memory.md compares with the compiler's memory model.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/BufferCache.h"
#include "shardx/Runtime/CApi.h"

using shardx::rt::AllocationMeter;
using shardx::rt::BufferCache;

namespace {

/// This artifact's program buffers, counted (never destroyed, as the cache).
AllocationMeter &meter() {
  static AllocationMeter *m = new AllocationMeter;
  return *m;
}

void *counted(void *ptr) {
  meter().add(static_cast<int64_t>(BufferCache::blockSize(ptr)));
  return ptr;
}

void release(void *ptr) {
  if (!ptr)
    return;
  meter().sub(static_cast<int64_t>(BufferCache::blockSize(ptr)));
  BufferCache::get().release(ptr);
}

} // namespace

extern "C" {

void *_mlir_memref_to_llvm_alloc(uint64_t bytes) {
  return counted(BufferCache::get().allocate(bytes));
}

void *_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment, uint64_t bytes) {
  return counted(BufferCache::get().allocate(bytes, alignment));
}

void _mlir_memref_to_llvm_free(void *ptr) { release(ptr); }

void shardx_rt_host_free(void *ptr) { release(ptr); }

void shardx_rt_host_mem_reset(void) { meter().reset(); }

int64_t shardx_rt_host_mem_peaks(int64_t *peaks, int64_t *live, int64_t n) {
  return meter().read(peaks, live, n);
}

void shardx_rt_host_cache_trim(void) { BufferCache::get().trim(); }

uint64_t shardx_rt_host_cached_bytes(void) {
  return BufferCache::get().cachedBytes();
}

void shardx_rt_host_cache_set_limit(uint64_t bytes) {
  BufferCache::get().setLimit(bytes);
}

} // extern "C"
