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

#include <algorithm>
#include <atomic>
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

  /// The usable size of malloc block `ptr` (0 for null, or where the C
  /// library cannot tell).
  static size_t blockSize(void *ptr) { return ptr ? usableSize(ptr) : 0; }

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

/// Live bytes of program buffers and their high-water mark, per thread (a
/// rank of the threads backend is a thread): what docs/Memory.md's model
/// predicts, measured. A thread counts the usable size of the blocks it
/// allocates and frees in its own slot (a relaxed atomic add; the slot is
/// found through a thread-local index), so a block freed by another thread
/// (a result the executor frees) lowers that thread's count. `reset` starts
/// a new generation: every thread takes a fresh slot at its next
/// allocation, counting from zero (blocks allocated before and freed after
/// make a count negative; the peak stays at least 0).
class AllocationMeter {
public:
  /// Threads counted per generation; later ones share slots (modulo).
  static constexpr int64_t kSlots = 256;

  void add(int64_t bytes) {
    Slot &s = slot();
    int64_t live = s.live.fetch_add(bytes, std::memory_order_relaxed) + bytes;
    if (live > s.peak.load(std::memory_order_relaxed))
      s.peak.store(live, std::memory_order_relaxed);
  }
  void sub(int64_t bytes) {
    slot().live.fetch_sub(bytes, std::memory_order_relaxed);
  }

  /// Zeroes every slot and starts a new generation.
  void reset() {
    std::lock_guard<std::mutex> lock(mutex);
    for (Slot &s : slots) {
      s.live.store(0, std::memory_order_relaxed);
      s.peak.store(0, std::memory_order_relaxed);
    }
    used.store(0, std::memory_order_relaxed);
    generation.fetch_add(1, std::memory_order_acq_rel);
  }

  /// The number of threads that allocated since the last reset; writes the
  /// first `n` of their peaks (bytes, in the order they first allocated)
  /// to `peaks` and of their live counts to `live` (either may be null).
  int64_t read(int64_t *peaks, int64_t *live, int64_t n) {
    int64_t count = std::min(used.load(std::memory_order_acquire), kSlots);
    for (int64_t i = 0; i < count && i < n; ++i) {
      if (peaks)
        peaks[i] = slots[i].peak.load(std::memory_order_relaxed);
      if (live)
        live[i] = slots[i].live.load(std::memory_order_relaxed);
    }
    return count;
  }

private:
  struct Slot {
    std::atomic<int64_t> live{0};
    std::atomic<int64_t> peak{0};
  };

  Slot &slot() {
    // Per binary (each artifact has its own meter and its own copy of
    // these): the meter this thread last counted in, its generation and
    // the slot it took there.
    thread_local const AllocationMeter *owner = nullptr;
    thread_local uint64_t ownerGeneration = 0;
    thread_local int64_t index = 0;
    uint64_t current = generation.load(std::memory_order_acquire);
    if (owner != this || ownerGeneration != current) {
      owner = this;
      ownerGeneration = current;
      index = used.fetch_add(1, std::memory_order_acq_rel) % kSlots;
    }
    return slots[index];
  }

  std::mutex mutex;
  Slot slots[kSlots];
  std::atomic<int64_t> used{0};
  std::atomic<uint64_t> generation{1};
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
