//===- CollectivesBench.cpp - Collective bandwidth of the threads backend -===//
//
// Part of ShardX.
//
// Measures all_gather, reduce_scatter, all_reduce and all_to_all of the
// threads backend for message sizes 1 KiB .. MAX, reported the nccl-tests
// way (algbw = bytes / time; busbw = algbw * the collective's bus factor:
// (n-1)/n for all_gather, reduce_scatter and all_to_all, 2(n-1)/n for
// all_reduce).
//
// busbw is a per-rank figure (nccl-tests compare it with one rank's link),
// and in the threads backend all n ranks move data through one memory at
// once. So the baseline is the memcpy bandwidth one rank gets while every
// rank copies `bytes` at the same time: the same threads, the same buffers
// and the same timing as the collective, alternated with it (best of
// kRepeats each). `ratio` is busbw over that. The memcpy bandwidth of one
// thread on an otherwise idle process is printed too (`memcpy1`, `ratio1`):
// with more ranks than cores it bounds what no collective can reach, since
// n ranks must together move about n times as many bytes.
//
// Usage: shardx-collectives-bench [ranks] [max-bytes]
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

using namespace shardx;
using namespace shardx::rt;
using Clock = std::chrono::steady_clock;

/// Measurement rounds per size and collective; each alternates the memcpy
/// baseline with the collective, and the best round of each counts (other
/// jobs on a shared machine only ever slow a round down).
static constexpr int kRepeats = 3;

/// One thread's memcpy bandwidth, nothing else running in this process.
static double memcpyBandwidth(size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes);
  int iters = std::max<int>(3, static_cast<int>((256 << 20) / bytes));
  std::memcpy(b.data(), a.data(), bytes);
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) {
    a[i % bytes] = static_cast<char>(i);
    std::memcpy(b.data(), a.data(), bytes);
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count() / iters;
  return bytes / s / 1e9;
}

int main(int argc, char **argv) {
  int64_t ranks = argc > 1 ? std::atoll(argv[1]) : 4;
  size_t maxBytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10)
                             : static_cast<size_t>(64) << 20;
  std::printf("# threads backend, %lld ranks; memcpy: per rank, all %lld "
              "ranks copying at once; ratio = busbw / memcpy; memcpy1: one "
              "thread alone; ratio1 = busbw / memcpy1\n",
              static_cast<long long>(ranks), static_cast<long long>(ranks));
  std::printf("%-15s %12s %10s %10s %10s %10s %7s %11s %7s\n", "collective",
              "bytes", "time_us", "algbw_GBs", "busbw_GBs", "memcpy_GBs",
              "ratio", "memcpy1_GBs", "ratio1");
  const char *names[] = {"all_gather", "reduce_scatter", "all_reduce",
                         "all_to_all"};
  for (size_t bytes = 1024; bytes <= maxBytes; bytes *= 8) {
    double memcpy1GBs = memcpyBandwidth(bytes);
    for (int kind = 0; kind < 4; ++kind) {
      size_t count = bytes / sizeof(float);
      size_t piece = count / ranks;
      int iters = std::max<int>(3, static_cast<int>((64 << 20) / bytes));
      // Per round and rank: seconds per memcpy and per collective.
      std::vector<std::vector<double>> copySeconds(kRepeats,
                                                   std::vector<double>(ranks));
      std::vector<std::vector<double>> callSeconds = copySeconds;
      auto statuses = runThreads({ranks}, [&](Communicator &c) -> Status {
        std::vector<float> in(count, 1.0f), out(count);
        std::vector<size_t> counts(ranks, piece);
        auto once = [&]() -> Status {
          switch (kind) {
          case 0:
            return c.allGather(in.data(), out.data(), counts, DType::F32, {0});
          case 1:
            return c.reduceScatter(in.data(), out.data(), counts, DType::F32,
                                   ReduceOp::Sum, {0});
          case 2:
            return c.allReduce(in.data(), out.data(), count, DType::F32,
                               ReduceOp::Sum, {0});
          default:
            return c.allToAll(in.data(), counts, out.data(), counts, DType::F32,
                              {0});
          }
        };
        if (Status s = once(); !s) // warm-up
          return s;
        for (int round = 0; round < kRepeats; ++round) {
          if (Status s = c.barrier({0}); !s)
            return s;
          auto t0 = Clock::now();
          for (int i = 0; i < iters; ++i) {
            in[i % count] = 1.0f;
            std::memcpy(out.data(), in.data(), count * sizeof(float));
          }
          copySeconds[round][c.getRank()] =
              std::chrono::duration<double>(Clock::now() - t0).count() / iters;
          if (Status s = c.barrier({0}); !s)
            return s;
          t0 = Clock::now();
          for (int i = 0; i < iters; ++i)
            if (Status s = once(); !s)
              return s;
          callSeconds[round][c.getRank()] =
              std::chrono::duration<double>(Clock::now() - t0).count() / iters;
        }
        return Status::ok();
      });
      for (const Status &s : statuses)
        if (!s) {
          std::fprintf(stderr, "%s\n", s.message().c_str());
          return 1;
        }
      // A round takes as long as its slowest rank; keep the best round.
      auto best = [](const std::vector<std::vector<double>> &rounds) {
        double t = std::numeric_limits<double>::infinity();
        for (const std::vector<double> &perRank : rounds)
          t = std::min(t, *std::max_element(perRank.begin(), perRank.end()));
        return t;
      };
      double t = best(callSeconds);
      double memcpyGBs = count * sizeof(float) / best(copySeconds) / 1e9;
      double n = static_cast<double>(ranks);
      double algbw = bytes / t / 1e9;
      double factor = kind == 2 ? 2 * (n - 1) / n : (n - 1) / n;
      double busbw = algbw * factor;
      std::printf(
          "%-15s %12zu %10.1f %10.3f %10.3f %10.3f %7.3f %11.3f %7.3f\n",
          names[kind], bytes, t * 1e6, algbw, busbw, memcpyGBs,
          busbw / memcpyGBs, memcpy1GBs, busbw / memcpy1GBs);
    }
  }
  return 0;
}
