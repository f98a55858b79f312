//===- RuntimeBufferCacheTest.cpp - The CPU programs' buffer cache --------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/BufferCache.h"
#include "shardx/Runtime/CApi.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

extern "C" {
void *_mlir_memref_to_llvm_alloc(uint64_t bytes);
void *_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment, uint64_t bytes);
void _mlir_memref_to_llvm_free(void *ptr);
}

namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

/// Each test starts from an empty cache with the default bound.
class BufferCache : public ::testing::Test {
protected:
  void SetUp() override {
    shardx_rt_host_cache_set_limit(2048 * kMiB);
    shardx_rt_host_cache_trim();
  }
  void TearDown() override { shardx_rt_host_cache_trim(); }
};

TEST_F(BufferCache, FreedBlockIsReused) {
  void *p = _mlir_memref_to_llvm_alloc(8 * kMiB);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, 8 * kMiB);
  _mlir_memref_to_llvm_free(p);
  EXPECT_GE(shardx_rt_host_cached_bytes(), 8 * kMiB);
  void *q = _mlir_memref_to_llvm_alloc(8 * kMiB);
  EXPECT_EQ(q, p);
  EXPECT_EQ(shardx_rt_host_cached_bytes(), 0u);
  shardx_rt_host_free(q); // what the executor calls on returned buffers
  EXPECT_GE(shardx_rt_host_cached_bytes(), 8 * kMiB);
}

TEST_F(BufferCache, SmallBlocksAreLeftToMalloc) {
  _mlir_memref_to_llvm_free(_mlir_memref_to_llvm_alloc(64 * 1024));
  EXPECT_EQ(shardx_rt_host_cached_bytes(), 0u);
}

TEST_F(BufferCache, OnlyABlockOfAboutTheSizeIsTaken) {
  void *big = _mlir_memref_to_llvm_alloc(16 * kMiB);
  _mlir_memref_to_llvm_free(big);
  // A quarter of the block: a new allocation, the block stays cached.
  void *small = _mlir_memref_to_llvm_alloc(4 * kMiB);
  EXPECT_NE(small, big);
  EXPECT_GE(shardx_rt_host_cached_bytes(), 16 * kMiB);
  // Within 1/8 below the block's size: the block.
  void *near = _mlir_memref_to_llvm_alloc(15 * kMiB);
  EXPECT_EQ(near, big);
  _mlir_memref_to_llvm_free(small);
  _mlir_memref_to_llvm_free(near);
}

TEST_F(BufferCache, LimitBoundsTheCache) {
  shardx_rt_host_cache_set_limit(10 * kMiB);
  void *a = _mlir_memref_to_llvm_alloc(8 * kMiB);
  void *b = _mlir_memref_to_llvm_alloc(8 * kMiB);
  _mlir_memref_to_llvm_free(a);
  _mlir_memref_to_llvm_free(b); // over the bound: freed, not cached
  EXPECT_GE(shardx_rt_host_cached_bytes(), 8 * kMiB);
  EXPECT_LE(shardx_rt_host_cached_bytes(), 10 * kMiB);
  shardx_rt_host_cache_set_limit(0); // 0 disables the cache
  shardx_rt_host_cache_trim();
  _mlir_memref_to_llvm_free(_mlir_memref_to_llvm_alloc(8 * kMiB));
  EXPECT_EQ(shardx_rt_host_cached_bytes(), 0u);
}

TEST_F(BufferCache, TrimFreesEveryCachedBlock) {
  for (int i = 0; i < 3; ++i)
    _mlir_memref_to_llvm_free(_mlir_memref_to_llvm_alloc((4 + i) * kMiB));
  EXPECT_GE(shardx_rt_host_cached_bytes(), 15 * kMiB);
  shardx_rt_host_cache_trim();
  EXPECT_EQ(shardx_rt_host_cached_bytes(), 0u);
}

TEST_F(BufferCache, AlignedAllocationsAreAligned) {
  // A cached block that is not 4 KiB aligned is not handed out for one.
  for (int i = 0; i < 4; ++i) {
    void *p = _mlir_memref_to_llvm_aligned_alloc(4096, 4 * kMiB);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
    _mlir_memref_to_llvm_free(p);
    _mlir_memref_to_llvm_free(_mlir_memref_to_llvm_alloc(4 * kMiB + 16));
  }
}

TEST_F(BufferCache, ReleaseWithFreeIsValid) {
  // Every buffer is a malloc block: a caller that does not know the cache
  // (the ctypes loader) frees it with free().
  std::free(_mlir_memref_to_llvm_alloc(8 * kMiB));
  EXPECT_EQ(shardx_rt_host_cached_bytes(), 0u);
}

TEST_F(BufferCache, TensorDataReusesFreedBlocks) {
  // The executor's tensors (HostData) allocate through the same cache.
  using Bytes = std::vector<char, shardx::rt::CachingAllocator<char>>;
  const char *first;
  {
    Bytes a(8 * kMiB, 1);
    first = a.data();
  }
  EXPECT_GE(shardx_rt_host_cached_bytes(), 8 * kMiB);
  Bytes b(8 * kMiB);
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(b[8 * kMiB - 1], 0); // value-initialized as std::vector says
}

TEST_F(BufferCache, MeterCountsEachThreadsLiveBytesAndPeak) {
  // Tests that the meter keeps one count per thread (a rank of the threads
  // backend) and that its peak is the high-water mark of live bytes.
  shardx_rt_host_mem_reset();
  void *a = _mlir_memref_to_llvm_alloc(4 * kMiB);
  void *b = _mlir_memref_to_llvm_alloc(2 * kMiB);
  _mlir_memref_to_llvm_free(a);
  void *c = _mlir_memref_to_llvm_aligned_alloc(64, kMiB);
  std::thread other([] {
    _mlir_memref_to_llvm_free(_mlir_memref_to_llvm_alloc(16 * kMiB));
  });
  other.join();
  int64_t peaks[4] = {0}, live[4] = {0};
  ASSERT_EQ(shardx_rt_host_mem_peaks(peaks, live, 4), 2);
  // Usable sizes: at least what was asked, at most a page more per block.
  EXPECT_GE(peaks[0], int64_t(6 * kMiB));
  EXPECT_LE(peaks[0], int64_t(6 * kMiB + 2 * 4096));
  EXPECT_GE(live[0], int64_t(3 * kMiB));
  EXPECT_LE(live[0], int64_t(3 * kMiB + 2 * 4096));
  EXPECT_GE(peaks[1], int64_t(16 * kMiB));
  EXPECT_EQ(live[1], 0);
  _mlir_memref_to_llvm_free(b);
  _mlir_memref_to_llvm_free(c);
  ASSERT_EQ(shardx_rt_host_mem_peaks(nullptr, live, 1), 2);
  EXPECT_EQ(live[0], 0);
  // A reset starts every count again from zero.
  shardx_rt_host_mem_reset();
  EXPECT_EQ(shardx_rt_host_mem_peaks(peaks, live, 4), 0);
}

TEST(BufferCacheDeathTest, EnvironmentZeroDisablesTheCache) {
  // A fresh process (threadsafe style re-runs the binary), so the cache
  // reads the variable on its first use.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("SHARDX_BUFFER_CACHE_MB", "0", 1);
        _mlir_memref_to_llvm_free(_mlir_memref_to_llvm_alloc(8 * kMiB));
        std::exit(shardx_rt_host_cached_bytes() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        setenv("SHARDX_BUFFER_CACHE_MB", "4", 1);
        _mlir_memref_to_llvm_free(_mlir_memref_to_llvm_alloc(8 * kMiB));
        _mlir_memref_to_llvm_free(_mlir_memref_to_llvm_alloc(2 * kMiB));
        uint64_t cached = shardx_rt_host_cached_bytes();
        std::exit(cached >= 2 * kMiB && cached <= 4 * kMiB ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

} // namespace
