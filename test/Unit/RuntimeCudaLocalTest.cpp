//===- RuntimeCudaLocalTest.cpp - The cuda-local backend ------------------===//
//
// Part of ShardX.
//
// Runs the conformance checks on the cuda-local backend (N ranks on device
// 0; skip list: none) through an adaptor that stages the checks' host
// buffers to device buffers and back, so every collective moves and reduces
// device memory (the adaptor starts its all_reduces on the device copies,
// so AsyncAllReduce runs them on the ranks' communication threads and
// their streams). Without a usable GPU the conformance tests are skipped
// with the driver's reason ("no CUDA device: ..."), and the test that runs
// everywhere checks that every rank then fails with that reason.
//
//===----------------------------------------------------------------------===//

#include "Conformance.h"

#include "shardx/Runtime/Cuda.h"
#include "shardx/Runtime/CudaLocal.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

using namespace shardx;
using namespace shardx::rt;

namespace {

/// The driver's error, or empty when a GPU can be used.
std::string noDevice() {
  char error[4096];
  return shardx_rt_cuda_init(error, sizeof(error)) ? error : "";
}

#define SKIP_WITHOUT_GPU()                                                     \
  if (std::string why = noDevice(); !why.empty())                              \
  GTEST_SKIP() << "no CUDA device: " << why

/// Runs a conformance check on every rank of a cuda-local world.
std::vector<Status> runStaged(const std::vector<int64_t> &mesh,
                              Status (*check)(Communicator &)) {
  return runCudaLocal(mesh, [check](Communicator &c) {
    EXPECT_STREQ(c.getBackendName(), "cuda-local");
    std::unique_ptr<Communicator> staged = stageHostBuffers(c);
    return check(*staged);
  });
}

void expectAllOk(const std::vector<Status> &statuses) {
  for (size_t r = 0; r < statuses.size(); ++r)
    EXPECT_TRUE(statuses[r]) << "rank " << r << ": " << statuses[r].message();
}

class CudaLocalConformance
    : public ::testing::TestWithParam<std::vector<int64_t>> {};

} // namespace

TEST_P(CudaLocalConformance, AllGather) {
  SKIP_WITHOUT_GPU();
  expectAllOk(runStaged(GetParam(), conformance::checkAllGather<float>));
  expectAllOk(runStaged(GetParam(), conformance::checkAllGather<int64_t>));
}

TEST_P(CudaLocalConformance, Reductions) {
  SKIP_WITHOUT_GPU();
  expectAllOk(runStaged(GetParam(), conformance::checkReductions<float>));
  expectAllOk(runStaged(GetParam(), conformance::checkReductions<double>));
  expectAllOk(runStaged(GetParam(), conformance::checkReductions<int32_t>));
  expectAllOk(runStaged(GetParam(), conformance::checkReductions<int64_t>));
}

TEST_P(CudaLocalConformance, LargeAllReduce) {
  SKIP_WITHOUT_GPU();
  expectAllOk(runStaged(GetParam(), conformance::checkLargeAllReduce<float>));
  expectAllOk(runStaged(GetParam(), conformance::checkLargeAllReduce<int64_t>));
}

TEST_P(CudaLocalConformance, AsyncAllReduce) {
  SKIP_WITHOUT_GPU();
  expectAllOk(runStaged(GetParam(), conformance::checkAsyncAllReduce<float>));
  expectAllOk(runStaged(GetParam(), conformance::checkAsyncAllReduce<int64_t>));
}

TEST_P(CudaLocalConformance, AsyncGatherScatter) {
  SKIP_WITHOUT_GPU();
  expectAllOk(
      runStaged(GetParam(), conformance::checkAsyncGatherScatter<float>));
  expectAllOk(
      runStaged(GetParam(), conformance::checkAsyncGatherScatter<int64_t>));
}

TEST_P(CudaLocalConformance, NanMaxMin) {
  SKIP_WITHOUT_GPU();
  expectAllOk(runStaged(GetParam(), conformance::checkNanMaxMin<float>));
  expectAllOk(runStaged(GetParam(), conformance::checkNanMaxMin<double>));
}

TEST_P(CudaLocalConformance, HalfFloatSums) {
  SKIP_WITHOUT_GPU();
  expectAllOk(runStaged(GetParam(), conformance::checkHalfFloatSums));
}

TEST_P(CudaLocalConformance, AllToAll) {
  SKIP_WITHOUT_GPU();
  expectAllOk(runStaged(GetParam(), conformance::checkAllToAll<float>));
  expectAllOk(runStaged(GetParam(), conformance::checkAllToAll<int32_t>));
}

TEST_P(CudaLocalConformance, Exchange) {
  SKIP_WITHOUT_GPU();
  expectAllOk(runStaged(GetParam(), conformance::checkExchange<float>));
  expectAllOk(runStaged(GetParam(), conformance::checkExchange<int64_t>));
}

TEST_P(CudaLocalConformance, PermuteBroadcastBarrier) {
  SKIP_WITHOUT_GPU();
  expectAllOk(
      runStaged(GetParam(), conformance::checkPermuteBroadcast<double>));
}

INSTANTIATE_TEST_SUITE_P(Meshes, CudaLocalConformance,
                         ::testing::Values(std::vector<int64_t>{1},
                                           std::vector<int64_t>{4},
                                           std::vector<int64_t>{2, 3},
                                           std::vector<int64_t>{2, 2, 2}));

TEST(CudaLocal, ReductionKernelsAreBuiltIn) {
#ifndef SHARDX_BUILT_WITH_NVCC
  GTEST_SKIP() << "nvcc was not found when this build was configured";
#endif
  EXPECT_TRUE(cudaLocalHasKernels());
}

TEST(CudaLocal, WithoutAGpuEveryRankFailsWithTheReason) {
  std::string why = noDevice();
  if (why.empty())
    GTEST_SKIP() << "a CUDA device is present";
  bool ran = false;
  std::vector<Status> statuses = runCudaLocal({2, 2}, [&](Communicator &) {
    ran = true;
    return Status::ok();
  });
  EXPECT_FALSE(ran);
  ASSERT_EQ(statuses.size(), 4u);
  for (const Status &s : statuses) {
    EXPECT_FALSE(s);
    EXPECT_EQ(s.message(), why);
    EXPECT_NE(s.message().find("no CUDA driver"), std::string::npos)
        << s.message();
  }
}
