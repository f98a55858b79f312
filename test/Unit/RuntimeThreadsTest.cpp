//===- RuntimeThreadsTest.cpp - The threads backend -----------------------===//
//
// Part of ShardX.
//
// Runs the conformance checks on the threads backend (skip list: none) and
// checks its failure behaviour: a failing or silent rank stops every rank
// with a message naming it, within the timeout.
//
//===----------------------------------------------------------------------===//

#include "Conformance.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

using namespace shardx;
using namespace shardx::rt;

namespace {

void expectAllOk(const std::vector<Status> &statuses) {
  for (size_t r = 0; r < statuses.size(); ++r)
    EXPECT_TRUE(statuses[r]) << "rank " << r << ": " << statuses[r].message();
}

class ThreadsConformance
    : public ::testing::TestWithParam<std::vector<int64_t>> {};

} // namespace

TEST_P(ThreadsConformance, AllGather) {
  expectAllOk(runThreads(GetParam(), conformance::checkAllGather<float>));
  expectAllOk(runThreads(GetParam(), conformance::checkAllGather<int64_t>));
}

TEST_P(ThreadsConformance, Reductions) {
  expectAllOk(runThreads(GetParam(), conformance::checkReductions<float>));
  expectAllOk(runThreads(GetParam(), conformance::checkReductions<double>));
  expectAllOk(runThreads(GetParam(), conformance::checkReductions<int32_t>));
  expectAllOk(runThreads(GetParam(), conformance::checkReductions<int64_t>));
}

TEST_P(ThreadsConformance, LargeAllReduce) {
  expectAllOk(runThreads(GetParam(), conformance::checkLargeAllReduce<float>));
  expectAllOk(
      runThreads(GetParam(), conformance::checkLargeAllReduce<int64_t>));
}

TEST_P(ThreadsConformance, NanMaxMin) {
  expectAllOk(runThreads(GetParam(), conformance::checkNanMaxMin<float>));
  expectAllOk(runThreads(GetParam(), conformance::checkNanMaxMin<double>));
}

TEST_P(ThreadsConformance, HalfFloatSums) {
  expectAllOk(runThreads(GetParam(), conformance::checkHalfFloatSums));
}

TEST_P(ThreadsConformance, AsyncAllReduce) {
  expectAllOk(runThreads(GetParam(), conformance::checkAsyncAllReduce<float>));
  expectAllOk(
      runThreads(GetParam(), conformance::checkAsyncAllReduce<int64_t>));
}

// With the communication thread (forced on) and without (forced off: the
// starts run synchronously, as the auto policy does on a host without a
// spare core per rank).
TEST_P(ThreadsConformance, AsyncGatherScatter) {
  for (const char *mode : {"on", "off"}) {
    setenv("SHARDX_ASYNC_COLLECTIVES", mode, 1);
    expectAllOk(
        runThreads(GetParam(), conformance::checkAsyncGatherScatter<float>));
    expectAllOk(
        runThreads(GetParam(), conformance::checkAsyncGatherScatter<int64_t>));
    expectAllOk(
        runThreads(GetParam(), conformance::checkAsyncAllReduce<float>));
  }
  unsetenv("SHARDX_ASYNC_COLLECTIVES");
}

TEST_P(ThreadsConformance, AllToAll) {
  expectAllOk(runThreads(GetParam(), conformance::checkAllToAll<float>));
  expectAllOk(runThreads(GetParam(), conformance::checkAllToAll<int32_t>));
}

TEST_P(ThreadsConformance, Exchange) {
  expectAllOk(runThreads(GetParam(), conformance::checkExchange<float>));
  expectAllOk(runThreads(GetParam(), conformance::checkExchange<int64_t>));
}

TEST_P(ThreadsConformance, PermuteBroadcastBarrier) {
  expectAllOk(
      runThreads(GetParam(), conformance::checkPermuteBroadcast<double>));
}

INSTANTIATE_TEST_SUITE_P(Meshes, ThreadsConformance,
                         ::testing::Values(std::vector<int64_t>{1},
                                           std::vector<int64_t>{4},
                                           std::vector<int64_t>{2, 3},
                                           std::vector<int64_t>{2, 2, 2}));

TEST(Threads, ConformanceChecksCanFail) {
  // A check must fail when the collective is wrong: a "communicator" that
  // claims success without moving data.
  auto statuses = runThreads({2}, [](Communicator &c) -> Status {
    std::vector<size_t> counts = {3, 3};
    std::vector<float> send(3, 1.0f), recv(6, 0.0f);
    // Skip the collective: the recv buffer stays zero.
    return conformance::expectEqual(c, "all_gather", recv,
                                    std::vector<float>(6, 1.0f));
  });
  EXPECT_FALSE(statuses[0]);
  EXPECT_FALSE(statuses[1]);
}

TEST(Threads, FailingRankStopsEveryRank) {
  auto start = std::chrono::steady_clock::now();
  auto statuses = runThreads(
      {4},
      [](Communicator &c) -> Status {
        if (c.getRank() == 2)
          return Status::error("bad input shape 3x5, expected 4x5");
        std::vector<float> x(4, 1.0f), y(4);
        return c.allReduce(x.data(), y.data(), 4, DType::F32, ReduceOp::Sum,
                           {0});
      },
      /*timeoutSeconds=*/10.0);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_LT(seconds, 5.0) << "the failure must not wait for the timeout";
  EXPECT_EQ(statuses[2].message(), "bad input shape 3x5, expected 4x5");
  for (int r : {0, 1, 3}) {
    ASSERT_FALSE(statuses[r]);
    EXPECT_NE(statuses[r].message().find(
                  "rank 2 failed: bad input shape 3x5, expected 4x5"),
              std::string::npos)
        << statuses[r].message();
  }
}

TEST(Threads, FailingRankStopsStartedCollectives) {
  // Ranks 0, 1 and 3 have an all_reduce in flight on their communication
  // threads when rank 2 fails: each wait returns rank 2's cause, at once.
  auto start = std::chrono::steady_clock::now();
  auto statuses = runThreads(
      {4},
      [](Communicator &c) -> Status {
        std::vector<float> x(1 << 16, 1.0f), y(1 << 16);
        if (c.getRank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          return Status::error("out of memory in the backward pass");
        }
        int64_t request = -1;
        if (Status s = c.allReduceStart(x.data(), y.data(), x.size(),
                                        DType::F32, ReduceOp::Sum, {0},
                                        request);
            !s)
          return s;
        return c.wait(request);
      },
      /*timeoutSeconds=*/10.0);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_LT(seconds, 5.0) << "the failure must not wait for the timeout";
  for (int r : {0, 1, 3}) {
    ASSERT_FALSE(statuses[r]);
    EXPECT_NE(statuses[r].message().find(
                  "rank 2 failed: out of memory in the backward pass"),
              std::string::npos)
        << statuses[r].message();
  }
}

TEST(Threads, StartedCollectiveOfSilentRankTimesOut) {
  auto statuses = runThreads(
      {2},
      [](Communicator &c) -> Status {
        if (c.getRank() == 1)
          return Status::ok(); // never joins the collective
        std::vector<double> x(8, 1.0), y(8);
        int64_t request = -1;
        if (Status s = c.allReduceStart(x.data(), y.data(), 8, DType::F64,
                                        ReduceOp::Max, {0}, request);
            !s)
          return s;
        return c.wait(request);
      },
      /*timeoutSeconds=*/0.3);
  EXPECT_TRUE(statuses[1]);
  ASSERT_FALSE(statuses[0]);
  EXPECT_NE(statuses[0].message().find("timed out after"), std::string::npos)
      << statuses[0].message();
}

TEST(Threads, SilentRankTimesOut) {
  auto statuses = runThreads(
      {2, 2},
      [](Communicator &c) -> Status {
        if (c.getRank() == 3)
          return Status::ok(); // never joins the collective
        std::vector<int32_t> x(2, 1), y(8);
        return c.allGather(x.data(), y.data(), {2, 2, 2, 2}, DType::I32,
                           {0, 1});
      },
      /*timeoutSeconds=*/0.3);
  EXPECT_TRUE(statuses[3]);
  for (int r : {0, 1, 2}) {
    ASSERT_FALSE(statuses[r]);
    EXPECT_NE(statuses[r].message().find("timed out after"), std::string::npos)
        << statuses[r].message();
  }
}

/// What the ranks of PeerStillReadingKeepsFailedRankWaiting share.
struct ReadAfterAbort {
  std::mutex mutex;
  std::condition_variable wake;
  const void *rank1Send = nullptr;
  bool rank0Reading = false;
  bool rank1Returned = false;
  bool rank1ReturnedWhileRead = false;
};

/// Host memory whose rank 0, on reading rank 1's input, says so and then
/// gives rank 1 time to return before it reads (a failed collective must
/// not return while a peer still reads its buffers).
class ReadingOps : public HostMemoryOps<BufferOps> {
public:
  ReadingOps(int64_t rank, ReadAfterAbort &shared)
      : rank(rank), shared(shared) {}
  void copy(void *to, const void *from, size_t bytes) override {
    if (rank == 0) {
      std::unique_lock<std::mutex> lock(shared.mutex);
      if (from == shared.rank1Send && !shared.rank0Reading) {
        shared.rank0Reading = true;
        shared.wake.notify_all();
        // Correct code keeps rank 1 waiting until this copy ends: the wait
        // runs out (it only bounds how long a wrong rank 1 gets to return).
        shared.wake.wait_for(lock, std::chrono::seconds(1),
                             [&] { return shared.rank1Returned; });
        shared.rank1ReturnedWhileRead = shared.rank1Returned;
      }
    }
    HostMemoryOps::copy(to, from, bytes);
  }
  Status reduce(void *, const std::vector<const char *> &, size_t, DType,
                ReduceOp) override {
    return Status::error("ReadingOps does not reduce");
  }
  char *scratch(size_t bytes) override {
    if (buffer.size() < bytes)
      buffer.resize(bytes);
    return buffer.data();
  }

private:
  int64_t rank;
  ReadAfterAbort &shared;
  std::vector<char> buffer;
};

TEST(Threads, PeerStillReadingKeepsFailedRankWaiting) {
  // Ranks 0 and 1 pass the first meeting of an all_gather; while rank 0
  // reads rank 1's input, rank 2 fails (the world aborts). Rank 1's
  // all_gather fails at its second meeting but must not return (and let
  // its caller free the input) before rank 0 has read it, however long
  // that takes: longer here than the world's timeout.
  ReadAfterAbort shared;
  auto statuses = runThreadsWith(
      {2, 2}, "threads",
      [&](int64_t rank) -> std::unique_ptr<BufferOps> {
        return std::make_unique<ReadingOps>(rank, shared);
      },
      [&](Communicator &c) -> Status {
        std::vector<int32_t> x(4, static_cast<int32_t>(c.getRank())), y(8);
        switch (c.getRank()) {
        case 2: {
          std::unique_lock<std::mutex> lock(shared.mutex);
          shared.wake.wait_for(lock, std::chrono::seconds(30),
                               [&] { return shared.rank0Reading; });
          return Status::error("rank 2 gave up");
        }
        case 3:
          return Status::ok();
        case 1: {
          std::lock_guard<std::mutex> lock(shared.mutex);
          shared.rank1Send = x.data();
          break;
        }
        default:
          break;
        }
        Status s = c.allGather(x.data(), y.data(), {4, 4}, DType::I32, {1});
        if (c.getRank() == 1) {
          std::lock_guard<std::mutex> lock(shared.mutex);
          shared.rank1Returned = true;
          shared.wake.notify_all();
        }
        return s;
      },
      /*timeoutSeconds=*/0.2);
  EXPECT_TRUE(shared.rank0Reading);
  EXPECT_FALSE(shared.rank1ReturnedWhileRead)
      << "rank 1's all_gather returned while rank 0 read its input";
  EXPECT_FALSE(statuses[0]);
  EXPECT_FALSE(statuses[1]);
  EXPECT_FALSE(statuses[2]);
}

TEST(Threads, MismatchedSizesAreErrors) {
  auto statuses = runThreads({2}, [](Communicator &c) -> Status {
    std::vector<float> x(4, 1.0f), y(4);
    size_t count = c.getRank() == 0 ? 4 : 3;
    return c.allReduce(x.data(), y.data(), count, DType::F32, ReduceOp::Sum,
                       {0});
  });
  for (const Status &s : statuses) {
    ASSERT_FALSE(s);
    EXPECT_NE(s.message().find("passed different sizes"), std::string::npos)
        << s.message();
  }
}

TEST(Threads, BadAxesAreErrors) {
  auto statuses =
      runThreads({2}, [](Communicator &c) -> Status { return c.barrier({1}); });
  for (const Status &s : statuses) {
    ASSERT_FALSE(s);
    EXPECT_NE(s.message().find("mesh axis 1 is out of range"),
              std::string::npos)
        << s.message();
  }
}
