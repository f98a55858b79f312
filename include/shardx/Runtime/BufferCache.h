//===- BufferCache.h - A cache of freed large host buffers ------*- C++ -*-===//
//
// Part of ShardX.
//
// Keeps freed malloc blocks of 1 MiB or more for the next allocation of
// about their size (docs/Runtime.md, "Buffers of CPU programs"). Header
// only, with no link dependency between the binaries that include it (the
// artifacts, the executor); its instance is an STB_GNU_UNIQUE symbol that
// the dynamic linker merges, so a process has one cache.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_BUFFERCACHE_H
#define SHARDX_RUNTIME_BUFFERCACHE_H

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace shardx::rt {

/// Free blocks by usable size, thread safe (ranks are threads of one
/// process, and a rank's results are freed by the thread that collects
/// them). Every block is a malloc block, so free() may release any of them.
class BufferCache {
public:
  /// Blocks below this size are left to malloc, whose heap reuses them.
  static constexpr size_t kMinCachedBytes = size_t(1) << 20;
  /// The bound unless SHARDX_BUFFER_CACHE_MB says otherwise.
  static constexpr size_t kDefaultLimitBytes = size_t(2) << 30;

  BufferCache() : limit(limitFromEnvironment()) {}
  ~BufferCache() { trim(); }
  BufferCache(const BufferCache &) = delete;
  BufferCache &operator=(const BufferCache &) = delete;

  /// This binary's cache. Never destroyed: a buffer freed while the process
  /// exits (by a rank thread winding down, or a static object's destructor)
  /// must still find it; its blocks go back to the system with the process.
  static BufferCache &get() {
    static BufferCache *cache = new BufferCache;
    return *cache;
  }

  /// A cached block of `bytes` to `bytes` + 1/8 with the given alignment
  /// (a power of two), else a new one.
  void *allocate(size_t bytes, size_t alignment = 1) {
    if (bytes >= kMinCachedBytes)
      if (void *ptr = take(bytes, alignment))
        return ptr;
    if (alignment <= alignof(std::max_align_t))
      return std::malloc(bytes);
    return std::aligned_alloc(alignment,
                              (bytes + alignment - 1) / alignment * alignment);
  }

  /// Keeps `ptr` for a later allocation while the cache stays within its
  /// bound, else frees it.
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

  /// Frees every cached block.
  void trim() {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto &[size, ptr] : blocks)
      std::free(ptr);
    blocks.clear();
    cached = 0;
  }

  /// The usable size of the cached blocks.
  size_t cachedBytes() {
    std::lock_guard<std::mutex> lock(mutex);
    return cached;
  }

  /// Replaces the bound (0 disables the cache; cached blocks stay).
  void setLimit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    limit = bytes;
  }

private:
  /// The usable size of malloc block `ptr`; 0 where the C library cannot
  /// tell, which disables the cache.
  static size_t usableSize(void *ptr) {
#if defined(__GLIBC__)
    return malloc_usable_size(ptr);
#else
    (void)ptr;
    return 0;
#endif
  }

  /// SHARDX_BUFFER_CACHE_MB in bytes, else the default.
  static size_t limitFromEnvironment() {
    const char *env = std::getenv("SHARDX_BUFFER_CACHE_MB");
    if (!env || !*env)
      return kDefaultLimitBytes;
    return static_cast<size_t>(std::strtoull(env, nullptr, 10)) << 20;
  }

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

/// A std::allocator whose large blocks go through BufferCache::get().
template <typename T> struct CachingAllocator {
  using value_type = T;
  CachingAllocator() = default;
  template <typename U> CachingAllocator(const CachingAllocator<U> &) {}
  T *allocate(size_t n) {
    void *ptr = BufferCache::get().allocate(n * sizeof(T), alignof(T));
    if (!ptr)
      throw std::bad_alloc();
    return static_cast<T *>(ptr);
  }
  void deallocate(T *ptr, size_t) { BufferCache::get().release(ptr); }
  template <typename U> bool operator==(const CachingAllocator<U> &) const {
    return true;
  }
  template <typename U> bool operator!=(const CachingAllocator<U> &) const {
    return false;
  }
};

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_BUFFERCACHE_H
