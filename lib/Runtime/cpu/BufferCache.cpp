//===- BufferCache.cpp - Caching allocator of CPU program buffers ---------===//
//
// Part of ShardX.
//
// CPU artifacts lower memref allocation to MLIR's generic functions
// (`finalize-memref-to-llvm{use-generic-functions}`), defined here: every
// buffer is a malloc block, and a freed block of 1 MiB or more is kept in a
// process-wide cache (per copy of the runtime, i.e. per artifact) for the
// next allocation of about its size. A training step allocates the same
// buffers on every run; glibc serves blocks above its mmap threshold (at
// most 32 MiB, and always on rank threads for blocks above 64 MiB) with
// fresh mappings, so without the cache each run page-faults and zeroes its
// weight-sized buffers again.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace {

/// Blocks below this size are left to malloc, whose heap reuses them.
constexpr size_t kMinCachedBytes = size_t(1) << 20;

/// The cache's bound unless SHARDX_BUFFER_CACHE_MB says otherwise.
constexpr size_t kDefaultLimitBytes = size_t(2) << 30;

/// The usable size of malloc block `ptr` (0 where the C library cannot
/// tell, which disables the cache).
size_t usableSize(void *ptr) {
#if defined(__GLIBC__)
  return malloc_usable_size(ptr);
#else
  (void)ptr;
  return 0;
#endif
}

/// SHARDX_BUFFER_CACHE_MB in bytes (0 disables the cache), else the default.
size_t limitFromEnvironment() {
  const char *env = std::getenv("SHARDX_BUFFER_CACHE_MB");
  if (!env || !*env)
    return kDefaultLimitBytes;
  return static_cast<size_t>(std::strtoull(env, nullptr, 10)) << 20;
}

/// Free blocks by usable size, thread safe (ranks are threads of one
/// process, and a rank's outputs are freed by the thread that collects
/// them).
class BufferCache {
public:
  BufferCache() : limit(limitFromEnvironment()) {}
  ~BufferCache() { trim(); }

  static BufferCache &get() {
    static BufferCache cache;
    return cache;
  }

  /// A cached block of `bytes` to `bytes` + 1/8 with the given alignment,
  /// else a new one.
  void *allocate(size_t bytes, size_t alignment) {
    if (bytes >= kMinCachedBytes)
      if (void *ptr = take(bytes, alignment))
        return ptr;
    if (alignment <= alignof(std::max_align_t))
      return std::malloc(bytes);
    return std::aligned_alloc(alignment,
                              (bytes + alignment - 1) / alignment * alignment);
  }

  /// Keeps `ptr` for a later allocation while the cache stays under its
  /// limit, else frees it.
  void release(void *ptr) {
    if (!ptr)
      return;
    size_t size = usableSize(ptr);
    if (size >= kMinCachedBytes) {
      std::lock_guard<std::mutex> lock(mutex);
      if (cached + size <= limit) {
        blocks.emplace(size, ptr);
        cached += size;
        return;
      }
    }
    std::free(ptr);
  }

  void trim() {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto &[size, ptr] : blocks)
      std::free(ptr);
    blocks.clear();
    cached = 0;
  }

  size_t cachedBytes() {
    std::lock_guard<std::mutex> lock(mutex);
    return cached;
  }

  void setLimit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    limit = bytes;
  }

private:
  void *take(size_t bytes, size_t alignment) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto it = blocks.lower_bound(bytes);
         it != blocks.end() && it->first <= bytes + bytes / 8; ++it) {
      if (reinterpret_cast<uintptr_t>(it->second) % alignment != 0)
        continue;
      void *ptr = it->second;
      cached -= it->first;
      blocks.erase(it);
      return ptr;
    }
    return nullptr;
  }

  std::mutex mutex;
  std::multimap<size_t, void *> blocks;
  size_t cached = 0;
  size_t limit;
};

} // namespace

extern "C" {

void *_mlir_memref_to_llvm_alloc(uint64_t bytes) {
  return BufferCache::get().allocate(bytes, 1);
}

void *_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment, uint64_t bytes) {
  return BufferCache::get().allocate(bytes, alignment);
}

void _mlir_memref_to_llvm_free(void *ptr) { BufferCache::get().release(ptr); }

void shardx_rt_host_free(void *ptr) { BufferCache::get().release(ptr); }

void shardx_rt_host_cache_trim(void) { BufferCache::get().trim(); }

uint64_t shardx_rt_host_cached_bytes(void) {
  return BufferCache::get().cachedBytes();
}

void shardx_rt_host_cache_set_limit(uint64_t bytes) {
  BufferCache::get().setLimit(bytes);
}

} // extern "C"
