//===- RuntimeNcclTest.cpp - The nccl backend and its bootstrap -----------===//
//
// Part of ShardX.
//
// The file-store bootstrap (runs everywhere: threads and processes hand an
// id around, a missing rank 0 is a timeout naming the file, a stale key and
// bad environments are errors), NCCL's loading (every function the backend
// uses resolves in the libnccl.so.2 found), and the conformance checks on
// the nccl backend through stageHostBuffers (skip list: NanMaxMin, NCCL's
// max/min drop NaN; HalfFloatSums, NCCL rounds bf16/f16 at every step).
// The adaptor starts its all_reduces on the device copies, so AsyncAllReduce
// runs the stream-ordered start and wait; SynchronousCollectives runs with
// SHARDX_GPU_SYNC_COLLECTIVES=1 (the host waits for every collective).
//
// The conformance tests run one rank per process and GPU: started N times
// with SHARDX_RANK, SHARDX_WORLD_SIZE and SHARDX_STORE_DIR set (the file
// store), a mesh of N devices runs; alone, the process is a world of 1 and
// runs mesh 1. A mesh whose size is not the world's is skipped saying so,
// and without a usable GPU every check is skipped with "no CUDA device:
// <the driver's reason>".
//
//===----------------------------------------------------------------------===//

#include "Conformance.h"

#include "shardx/Runtime/Bootstrap.h"
#include "shardx/Runtime/Cuda.h"
#include "shardx/Runtime/CudaLocal.h"
#include "shardx/Runtime/Nccl.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

using namespace shardx;
using namespace shardx::rt;

namespace {

/// A fresh folder, removed with the process's other ones at exit.
std::string makeTempDir() {
  static struct Dirs {
    std::vector<std::string> paths;
    ~Dirs() {
      for (const std::string &p : paths)
        std::filesystem::remove_all(p);
    }
  } dirs;
  char dir[] = "/tmp/shardx-store-XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  dirs.paths.push_back(dir);
  return dir;
}

//===----------------------------------------------------------------------===//
// The file store
//===----------------------------------------------------------------------===//

TEST(FileStore, ThreadsReceiveRankZerosBytes) {
  std::string dir = makeTempDir();
  constexpr int kRanks = 4;
  std::vector<std::string> got(kRanks);
  std::vector<Status> statuses(kRanks);
  std::vector<std::thread> threads;
  for (int r = kRanks - 1; r >= 0; --r) // readers start before the writer
    threads.emplace_back([&, r] {
      auto store = createFileStoreBootstrap(r, kRanks, dir, 10.0);
      char id[128] = {0};
      if (r == 0)
        for (int i = 0; i < 128; ++i)
          id[i] = static_cast<char>(i * 7 + 1);
      statuses[r] = store->broadcast("id-0", id, sizeof(id));
      got[r].assign(id, sizeof(id));
    });
  for (std::thread &t : threads)
    t.join();
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(statuses[r]) << statuses[r].message();
    EXPECT_EQ(got[r], got[0]) << "rank " << r;
  }
  EXPECT_EQ(got[0][5], static_cast<char>(36));
}

TEST(FileStore, ProcessesReceiveRankZerosBytes) {
  std::string dir = makeTempDir();
  constexpr int kRanks = 3;
  std::vector<pid_t> children;
  for (int r = 0; r < kRanks; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Exit code: 0 when this rank holds rank 0's bytes for both keys.
      auto store = createFileStoreBootstrap(r, kRanks, dir, 10.0);
      for (int key = 0; key < 2; ++key) {
        int64_t value = r == 0 ? 1000 + key : -1;
        if (!store->broadcast("id-" + std::to_string(key), &value,
                              sizeof(value)))
          _exit(2);
        if (value != 1000 + key)
          _exit(3);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
}

TEST(FileStore, AMissingRankZeroIsATimeoutNamingTheFile) {
  std::string dir = makeTempDir();
  auto store = createFileStoreBootstrap(1, 2, dir, 0.2);
  int64_t value = 0;
  Status s = store->broadcast("id-0", &value, sizeof(value));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "file store: rank 1 waited 0.2 s for " + dir +
                             "/id-0 (rank 0 writes it; is rank 0 running, "
                             "with the same SHARDX_STORE_DIR?)");
}

TEST(FileStore, AStaleKeyIsAnError) {
  std::string dir = makeTempDir();
  int64_t value = 7;
  ASSERT_TRUE(createFileStoreBootstrap(0, 1, dir, 1.0)
                  ->broadcast("id-0", &value, sizeof(value)));
  Status s = createFileStoreBootstrap(0, 1, dir, 1.0)
                 ->broadcast("id-0", &value, sizeof(value));
  ASSERT_FALSE(s);
  EXPECT_NE(s.message().find("exists (left by an earlier job?)"),
            std::string::npos)
      << s.message();
  // A reader expecting another size is told so.
  int32_t small = 0;
  Status r = createFileStoreBootstrap(1, 2, dir, 1.0)
                 ->broadcast("id-0", &small, sizeof(small));
  ASSERT_FALSE(r);
  EXPECT_NE(r.message().find("holds 8 bytes, not 4"), std::string::npos)
      << r.message();
}

TEST(FileStore, TheEnvironmentIsChecked) {
  std::string error;
  unsetenv("SHARDX_RANK");
  setenv("SHARDX_WORLD_SIZE", "2", 1);
  EXPECT_EQ(createFileStoreBootstrapFromEnv(1.0, error), nullptr);
  EXPECT_NE(error.find("SHARDX_RANK is not set"), std::string::npos) << error;
  setenv("SHARDX_RANK", "two", 1);
  EXPECT_EQ(createFileStoreBootstrapFromEnv(1.0, error), nullptr);
  EXPECT_NE(error.find("SHARDX_RANK must be a whole number, not 'two'"),
            std::string::npos)
      << error;
  setenv("SHARDX_RANK", "2", 1);
  setenv("SHARDX_STORE_DIR", "/tmp", 1);
  EXPECT_EQ(createFileStoreBootstrapFromEnv(1.0, error), nullptr);
  EXPECT_NE(error.find("SHARDX_RANK 2 is not below SHARDX_WORLD_SIZE 2"),
            std::string::npos)
      << error;
  setenv("SHARDX_RANK", "1", 1);
  setenv("SHARDX_STORE_DIR", "/nonexistent/store", 1);
  EXPECT_EQ(createFileStoreBootstrapFromEnv(1.0, error), nullptr);
  EXPECT_NE(error.find("/nonexistent/store is not a writable folder"),
            std::string::npos)
      << error;
  std::string dir = makeTempDir();
  setenv("SHARDX_STORE_DIR", dir.c_str(), 1);
  auto store = createFileStoreBootstrapFromEnv(1.0, error);
  ASSERT_NE(store, nullptr) << error;
  EXPECT_EQ(store->getRank(), 1);
  EXPECT_EQ(store->getWorldSize(), 2);
  unsetenv("SHARDX_RANK");
  unsetenv("SHARDX_WORLD_SIZE");
  unsetenv("SHARDX_STORE_DIR");
}

//===----------------------------------------------------------------------===//
// NCCL
//===----------------------------------------------------------------------===//

TEST(Nccl, EveryFunctionResolvesInTheLibraryFound) {
  Status s = loadNccl();
  if (!s && s.message().find("cannot load") != std::string::npos)
    GTEST_SKIP() << s.message();
  ASSERT_TRUE(s) << s.message();
  EXPECT_GE(ncclVersion(), 21800);
}

/// The world of this process: from the file-store environment, or a world
/// of one in a fresh folder.
Bootstrap &world() {
  static std::unique_ptr<Bootstrap> store = [] {
    std::string error;
    if (std::getenv("SHARDX_WORLD_SIZE")) {
      auto s = createFileStoreBootstrapFromEnv(120.0, error);
      if (!s) {
        std::fprintf(stderr, "%s\n", error.c_str());
        std::exit(1);
      }
      return s;
    }
    return createFileStoreBootstrap(0, 1, makeTempDir(), 120.0);
  }();
  return *store;
}

/// Why the nccl checks cannot run here, or empty.
std::string cannotRun(const std::vector<int64_t> &mesh) {
  char error[4096];
  if (shardx_rt_cuda_init(error, sizeof(error)))
    return std::string("no CUDA device: ") + error;
  if (Status s = loadNccl(); !s)
    return s.message();
  int64_t size = 1;
  for (int64_t n : mesh)
    size *= n;
  if (size != world().getWorldSize())
    return "a mesh of " + std::to_string(size) +
           " devices needs as many processes (this world has " +
           std::to_string(world().getWorldSize()) +
           "; start one per GPU with SHARDX_RANK, SHARDX_WORLD_SIZE and "
           "SHARDX_STORE_DIR)";
  return "";
}

void runStaged(const std::vector<int64_t> &mesh,
               Status (*check)(Communicator &)) {
  std::string error;
  std::unique_ptr<Communicator> comm =
      createNcclCommunicator(mesh, world(), 60.0, error);
  ASSERT_NE(comm, nullptr) << error;
  EXPECT_STREQ(comm->getBackendName(), "nccl");
  std::unique_ptr<Communicator> staged = stageHostBuffers(*comm);
  Status s = check(*staged);
  EXPECT_TRUE(s) << "rank " << comm->getRank() << ": " << s.message();
}

class NcclConformance : public ::testing::TestWithParam<std::vector<int64_t>> {
};

#define SKIP_UNLESS_RUNNABLE()                                                 \
  if (std::string why = cannotRun(GetParam()); !why.empty())                   \
  GTEST_SKIP() << why

TEST_P(NcclConformance, AllGather) {
  SKIP_UNLESS_RUNNABLE();
  runStaged(GetParam(), conformance::checkAllGather<float>);
  runStaged(GetParam(), conformance::checkAllGather<int64_t>);
}

TEST_P(NcclConformance, Reductions) {
  SKIP_UNLESS_RUNNABLE();
  runStaged(GetParam(), conformance::checkReductions<float>);
  runStaged(GetParam(), conformance::checkReductions<double>);
  runStaged(GetParam(), conformance::checkReductions<int32_t>);
  runStaged(GetParam(), conformance::checkReductions<int64_t>);
}

TEST_P(NcclConformance, LargeAllReduce) {
  SKIP_UNLESS_RUNNABLE();
  runStaged(GetParam(), conformance::checkLargeAllReduce<float>);
  runStaged(GetParam(), conformance::checkLargeAllReduce<int64_t>);
}

TEST_P(NcclConformance, AsyncAllReduce) {
  SKIP_UNLESS_RUNNABLE();
  runStaged(GetParam(), conformance::checkAsyncAllReduce<float>);
  runStaged(GetParam(), conformance::checkAsyncAllReduce<int64_t>);
}

// The host-waiting mode kept for debugging (SHARDX_GPU_SYNC_COLLECTIVES=1,
// read when the communicator is created) gives the same results.
TEST_P(NcclConformance, SynchronousCollectives) {
  SKIP_UNLESS_RUNNABLE();
  setenv("SHARDX_GPU_SYNC_COLLECTIVES", "1", 1);
  runStaged(GetParam(), conformance::checkReductions<float>);
  runStaged(GetParam(), conformance::checkAsyncAllReduce<float>);
  runStaged(GetParam(), conformance::checkPermuteBroadcast<double>);
  unsetenv("SHARDX_GPU_SYNC_COLLECTIVES");
}

TEST_P(NcclConformance, AsyncGatherScatter) {
  SKIP_UNLESS_RUNNABLE();
  runStaged(GetParam(), conformance::checkAsyncGatherScatter<float>);
  runStaged(GetParam(), conformance::checkAsyncGatherScatter<int64_t>);
}

// Skip list: NanMaxMin. NCCL's f32/f64 max and min are fmaxf/fminf (and
// fmax/fmin; NVIDIA/nccl src/device/reduce_kernel.h), which return the
// other operand when one is NaN, where the other backends propagate NaN.
TEST_P(NcclConformance, NanMaxMin) {
  GTEST_SKIP() << "skip list: NCCL's max/min drop NaN (fmaxf/fminf), the "
                  "other backends propagate it";
  runStaged(GetParam(), conformance::checkNanMaxMin<float>);
  runStaged(GetParam(), conformance::checkNanMaxMin<double>);
}

// Skip list: HalfFloatSums. NCCL reduces bf16/f16 in the wire type, one
// rounding per step of its ring or tree, where the other backends sum the
// members in f32 and round once; the check's ties tell the two apart.
TEST_P(NcclConformance, HalfFloatSums) {
  GTEST_SKIP() << "skip list: NCCL rounds bf16/f16 sums at every step, the "
                  "other backends accumulate in f32 and round once";
  runStaged(GetParam(), conformance::checkHalfFloatSums);
}

TEST_P(NcclConformance, AllToAll) {
  SKIP_UNLESS_RUNNABLE();
  runStaged(GetParam(), conformance::checkAllToAll<float>);
  runStaged(GetParam(), conformance::checkAllToAll<int32_t>);
}

TEST_P(NcclConformance, Exchange) {
  SKIP_UNLESS_RUNNABLE();
  runStaged(GetParam(), conformance::checkExchange<float>);
  runStaged(GetParam(), conformance::checkExchange<int64_t>);
}

TEST_P(NcclConformance, PermuteBroadcastBarrier) {
  SKIP_UNLESS_RUNNABLE();
  runStaged(GetParam(), conformance::checkPermuteBroadcast<double>);
}

INSTANTIATE_TEST_SUITE_P(Meshes, NcclConformance,
                         ::testing::Values(std::vector<int64_t>{1},
                                           std::vector<int64_t>{4},
                                           std::vector<int64_t>{2, 3},
                                           std::vector<int64_t>{2, 2, 2}));

TEST(Nccl, WithoutAGpuTheCommunicatorIsNotCreated) {
  char error[4096];
  if (!shardx_rt_cuda_init(error, sizeof(error)))
    GTEST_SKIP() << "a CUDA device is present";
  if (Status s = loadNccl(); !s)
    GTEST_SKIP() << s.message();
  std::string why;
  auto comm = createNcclCommunicator({1}, world(), 1.0, why);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(why, error);
  EXPECT_NE(why.find("no CUDA driver"), std::string::npos) << why;
}

TEST(Nccl, AMeshOfAnotherSizeIsAnError) {
  std::string why;
  auto comm = createNcclCommunicator({2, 2}, world(), 1.0, why);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(why, "the program's mesh has 4 devices but the file store has " +
                     std::to_string(world().getWorldSize()) + " ranks");
}

} // namespace
