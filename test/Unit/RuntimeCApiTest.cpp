//===- RuntimeCApiTest.cpp - The runtime's C ABI --------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"

#include <gtest/gtest.h>

#include <random>

using namespace shardx;
using namespace shardx::rt;

extern "C" int shardx_test_c_all_reduce(shardx_rt_comm *comm);

TEST(CApi, CollectivesFromC) {
  auto statuses = runThreads({2, 2}, [](Communicator &c) -> Status {
    if (int rc = shardx_test_c_all_reduce(getCHandle(c)))
      return Status::error("C all_reduce check failed with " +
                           std::to_string(rc));
    return Status::ok();
  });
  for (const Status &s : statuses)
    EXPECT_TRUE(s) << s.message();
}

TEST(CApi, CollectivesAndQueries) {
  auto statuses = runThreads({2, 3}, [](Communicator &c) -> Status {
    shardx_rt_comm *h = getCHandle(c);
    int64_t axes[1] = {1};
    if (shardx_rt_axis_index(h, axes, 1) != c.getCoords()[1])
      return Status::error("axis_index");
    // all_gather of one i64 per member over axis 1.
    int64_t mine = shardx_rt_rank(h), all[3];
    int64_t counts[3] = {1, 1, 1};
    if (shardx_rt_all_gather(h, &mine, all, counts, 3, SHARDX_RT_I64, axes, 1))
      return Status::error(shardx_rt_last_error(h));
    for (int64_t i = 0; i < 3; ++i)
      if (all[i] != c.getCoords()[0] * 3 + i)
        return Status::error("all_gather value");
    // permute: member i sends to i + 1 (mod 3).
    int64_t pairs[6] = {0, 1, 1, 2, 2, 0}, got = -1;
    if (shardx_rt_permute(h, &mine, &got, 1, SHARDX_RT_I64, pairs, 3, axes, 1))
      return Status::error(shardx_rt_last_error(h));
    int64_t from = (c.getCoords()[1] + 2) % 3;
    if (got != c.getCoords()[0] * 3 + from)
      return Status::error("permute value");
    // broadcast from member 2, then a barrier.
    double value = static_cast<double>(mine);
    if (shardx_rt_broadcast(h, &value, 1, SHARDX_RT_F64, 2, axes, 1) ||
        shardx_rt_barrier(h, axes, 1))
      return Status::error(shardx_rt_last_error(h));
    if (value != c.getCoords()[0] * 3 + 2)
      return Status::error("broadcast value");
    return Status::ok();
  });
  for (const Status &s : statuses)
    EXPECT_TRUE(s) << s.message();
}

TEST(CApi, BadCallsReportErrors) {
  auto statuses = runThreads({2}, [](Communicator &c) -> Status {
    shardx_rt_comm *h = getCHandle(c);
    int64_t axes[1] = {0};
    float x = 1, y = 0;
    if (shardx_rt_all_reduce(h, &x, &y, 1, /*dtype=*/9, SHARDX_RT_SUM, axes,
                             1) == 0 ||
        std::string(shardx_rt_last_error(h)) != "all_reduce: unknown dtype 9")
      return Status::error("bad dtype not reported: " +
                           std::string(shardx_rt_last_error(h)));
    if (shardx_rt_all_reduce(h, &x, &y, 1, SHARDX_RT_F32, /*reduce=*/7, axes,
                             1) == 0)
      return Status::error("bad reduction not reported");
    int64_t badAxes[1] = {3};
    if (shardx_rt_barrier(h, badAxes, 1) == 0 ||
        std::string(shardx_rt_last_error(h))
                .find("mesh axis 3 is out of "
                      "range") == std::string::npos)
      return Status::error("bad axis not reported");
    return Status::ok();
  });
  for (const Status &s : statuses)
    EXPECT_TRUE(s) << s.message();
}

namespace {
template <typename T>
void naiveGemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha,
               const std::vector<T> &a, int64_t lda, const std::vector<T> &b,
               int64_t ldb, T beta, std::vector<T> &c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      T acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += (ta ? a[p * lda + i] : a[i * lda + p]) *
               (tb ? b[j * ldb + p] : b[p * ldb + j]);
      c[i * ldc + j] = alpha * acc + beta * c[i * ldc + j];
    }
}
} // namespace

TEST(CApi, GemmsMatchANaiveLoop) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> dist(-1, 1);
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      int64_t m = 5, n = 7, k = 3, batch = 3;
      int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 1;
      int64_t sa = (ta ? k : m) * lda, sb = (tb ? n : k) * ldb, sc = m * ldc;
      std::vector<double> a(batch * sa), b(batch * sb), c(batch * sc);
      for (auto *v : {&a, &b, &c})
        for (double &x : *v)
          x = dist(rng);
      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()),
          cf(c.begin(), c.end());
      std::vector<double> want = c;
      for (int64_t i = 0; i < batch; ++i) {
        std::vector<double> ai(a.begin() + i * sa, a.begin() + (i + 1) * sa),
            bi(b.begin() + i * sb, b.begin() + (i + 1) * sb),
            ci(want.begin() + i * sc, want.begin() + (i + 1) * sc);
        naiveGemm<double>(ta, tb, m, n, k, 1.5, ai, lda, bi, ldb, 0.5, ci, ldc);
        std::copy(ci.begin(), ci.end(), want.begin() + i * sc);
      }
      ASSERT_EQ(shardx_rt_dgemm_batched(batch, ta, tb, m, n, k, 1.5, a.data(),
                                        lda, sa, b.data(), ldb, sb, 0.5,
                                        c.data(), ldc, sc),
                0);
      ASSERT_EQ(shardx_rt_sgemm_batched(batch, ta, tb, m, n, k, 1.5f, af.data(),
                                        lda, sa, bf.data(), ldb, sb, 0.5f,
                                        cf.data(), ldc, sc),
                0);
      for (size_t i = 0; i < want.size(); ++i) {
        // Only the n of every ldc columns are written.
        EXPECT_NEAR(c[i], want[i], 1e-12) << "dgemm ta=" << ta << " tb=" << tb;
        EXPECT_NEAR(cf[i], want[i], 1e-5) << "sgemm ta=" << ta << " tb=" << tb;
      }
    }
}

TEST(CApi, GemmRejectsBadShapes) {
  std::vector<float> a(6), b(6), c(4);
  // lda smaller than k.
  EXPECT_NE(shardx_rt_sgemm(0, 0, 2, 2, 3, 1, a.data(), 2, b.data(), 2, 0,
                            c.data(), 2),
            0);
  EXPECT_NE(
      shardx_rt_dgemm(0, 0, -1, 2, 3, 1, nullptr, 3, nullptr, 2, 0, nullptr, 2),
      0);
  EXPECT_NE(shardx_rt_sgemm_batched(-1, 0, 0, 2, 2, 3, 1, a.data(), 3, 0,
                                    b.data(), 2, 0, 0, c.data(), 2, 0),
            0);
}

//===----------------------------------------------------------------------===//
// Compiled programs' runtime calls (CompiledCode.cpp): a failed call fails
// the run, later calls move nothing and zero their outputs, the run returns
// the error
//===----------------------------------------------------------------------===//

extern "C" {
void shardx_rt_cg_all_reduce_f32(float *, float *, int64_t, int64_t, int64_t,
                                 float *, float *, int64_t, int64_t, int64_t,
                                 int32_t, int64_t *, int64_t *, int64_t,
                                 int64_t, int64_t);
int64_t shardx_rt_cg_all_reduce_start_f32(float *, float *, int64_t, int64_t,
                                          int64_t, float *, float *, int64_t,
                                          int64_t, int64_t, int32_t, int64_t *,
                                          int64_t *, int64_t, int64_t,
                                          int64_t);
void shardx_rt_cg_wait_f32(int64_t, float *, float *, int64_t, int64_t,
                           int64_t, float *, float *, int64_t, int64_t,
                           int64_t);
}

#include "shardx/Runtime/ProgramMemory.h"

#include <atomic>
#include <cstring>

namespace {

/// What the test program computes on one rank: a started all_reduce (sum)
/// of `in` into `started`, its wait, then an all_reduce of `in` into `sync`.
struct Program {
  std::vector<float> in, started, sync;
};

void runProgram(void **args) {
  auto &p = *static_cast<Program *>(args[0]);
  int64_t axes[1] = {0};
  auto n = static_cast<int64_t>(p.in.size());
  float *in = p.in.data(), *started = p.started.data(), *sync = p.sync.data();
  int64_t request = shardx_rt_cg_all_reduce_start_f32(
      in, in, 0, n, 1, started, started, 0, n, 1, SHARDX_RT_SUM, axes, axes, 0,
      1, 1);
  shardx_rt_cg_wait_f32(request, in, in, 0, n, 1, started, started, 0, n, 1);
  shardx_rt_cg_all_reduce_f32(in, in, 0, n, 1, sync, sync, 0, n, 1,
                              SHARDX_RT_SUM, axes, axes, 0, 1, 1);
}

/// Host memory that says it is a GPU's (a CUDA artifact's buffers); counts
/// its closes in `closes` where given.
class PretendDeviceMemory : public HostMemoryOps<ProgramMemory> {
public:
  MemorySpace getMemorySpace() const override { return MemorySpace::Device; }
  Status close(Communicator *) override {
    if (closes)
      ++*closes;
    return Status::ok();
  }
  std::atomic<int> *closes = nullptr;
};

enum class Memory { ThroughInvoke, Host, PretendDevice };

/// Runs the program on 4 threads ranks (each `in` holds rank + 1, outputs
/// start at -1) with `faults`; each rank's status and program. The runs'
/// closes of their memory are counted in `closes` where given.
std::vector<Status> runOnFourRanks(std::vector<Program> &programs,
                                   const FaultPlan &faults, Memory memory,
                                   std::atomic<int> *closes = nullptr) {
  programs.assign(4, Program());
  return runThreads(
      {4},
      [&](Communicator &c) -> Status {
        Program &p = programs[c.getRank()];
        p.in.assign(3, static_cast<float>(c.getRank() + 1));
        p.started.assign(3, -1);
        p.sync.assign(3, -1);
        void *args[1] = {&p};
        if (memory == Memory::ThroughInvoke) {
          char error[256];
          if (shardx_rt_invoke(runProgram, args, getCHandle(c), error,
                               sizeof(error)))
            return Status::error(error);
          return Status::ok();
        }
        PretendDeviceMemory device;
        struct HostMemory : PretendDeviceMemory {
          MemorySpace getMemorySpace() const override {
            return MemorySpace::Host;
          }
        } host;
        device.closes = host.closes = closes;
        ProgramMemory &m = memory == Memory::Host
                               ? static_cast<ProgramMemory &>(host)
                               : device;
        return invokeProgram(runProgram, args, &c, m, faults);
      },
      /*timeoutSeconds=*/20);
}

} // namespace

TEST(CompiledCode, CollectivesThroughInvoke) {
  std::vector<Program> programs;
  auto statuses = runOnFourRanks(programs, {}, Memory::ThroughInvoke);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(statuses[r]) << statuses[r].message();
    for (float v : programs[r].started)
      EXPECT_EQ(v, 10);
    for (float v : programs[r].sync)
      EXPECT_EQ(v, 10);
  }
}

TEST(CompiledCode, FailureInFlightFailsTheRunAndZeroesLaterOutputs) {
  std::vector<Program> programs;
  FaultPlan faults;
  faults.failInFlight = 2;
  std::atomic<int> closes{0};
  auto statuses = runOnFourRanks(programs, faults, Memory::Host, &closes);
  // A failed run still closes its memory (on a GPU: drains its stream).
  EXPECT_EQ(closes.load(), 4);
  EXPECT_EQ(statuses[2].message(),
            "rank 2: injected failure with a collective in flight "
            "(SHARDX_TEST_FAIL_IN_FLIGHT)");
  for (size_t r = 0; r < 4; ++r) {
    // Every rank fails: the world is aborted before its all_reduce.
    ASSERT_FALSE(statuses[r]) << "rank " << r;
    EXPECT_NE(statuses[r].message().find("injected failure"),
              std::string::npos)
        << statuses[r].message();
    // The failed rank's outputs, and every rank's output of the failed
    // all_reduce, are zeros (no stale or partial numbers).
    for (float v : programs[r].sync)
      EXPECT_EQ(v, 0) << "rank " << r;
  }
  for (float v : programs[2].started)
    EXPECT_EQ(v, 0);
}

TEST(CompiledCode, FailureBeforeRunRunsNothing) {
  std::vector<Program> programs;
  FaultPlan faults;
  faults.failBeforeRun = 1;
  std::atomic<int> closes{0};
  auto statuses = runOnFourRanks(programs, faults, Memory::Host, &closes);
  EXPECT_EQ(closes.load(), 4);
  EXPECT_EQ(statuses[1].message(),
            "rank 1: injected failure (SHARDX_TEST_FAIL_RANK)");
  for (float v : programs[1].sync)
    EXPECT_EQ(v, -1); // never ran
  for (size_t r = 0; r < 4; ++r)
    EXPECT_FALSE(statuses[r]) << "rank " << r;
}

TEST(CompiledCode, DeviceBuffersOnAHostBackendFail) {
  std::vector<Program> programs;
  auto statuses = runOnFourRanks(programs, {}, Memory::PretendDevice);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(statuses[r].message(),
              "rank " + std::to_string(r) +
                  ": a CUDA artifact's collectives take device buffers: run "
                  "it on the cuda-local or nccl backend (shardx-gpu-exec), "
                  "not threads");
    for (float v : programs[r].started)
      EXPECT_EQ(v, 0);
    for (float v : programs[r].sync)
      EXPECT_EQ(v, 0);
  }
}
