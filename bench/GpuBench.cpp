//===- GpuBench.cpp - GEMMs and NCCL collectives: runtime vs direct -------===//
//
// Part of ShardX.
//
// Two ratios, each measured in one run against the library called directly
// on the same GPU, buffers and stream:
//
//   shardx-gpu-bench gemm [M N K [f32|bf16|f16]]   (default 8192^3, f32)
//     C = A B through the runtime's entry point of compiled code
//     (_mlir_ciface_shardx_rt_cuda_gemm_<t>: memref descriptors, cuBLAS
//     GemmStridedBatchedEx on the rank's stream) vs cublasGemmEx with the
//     same operands, types and CUBLAS_COMPUTE_32F (bf16/f16: A, B and C in
//     the 16-bit type, f32 accumulation); TFLOP/s of each and runtime /
//     direct.
//
//   shardx-gpu-bench nccl [max-bytes]   (default 256 MiB)
//     all_reduce, all_gather and reduce_scatter (f32, out of place) through
//     the nccl communicator vs ncclAllReduce/AllGather/ReduceScatter called
//     directly on a communicator of the same ranks, reported the nccl-tests
//     way (algbw = bytes / time, busbw = algbw * 2(n-1)/n for all_reduce,
//     (n-1)/n for the others); ratio = runtime busbw / direct busbw. The
//     direct calls are timed back to back with one wait at the end, as
//     nccl-tests do; the runtime's collectives each wait for completion
//     (the bounded wait that catches a dead rank), so small messages show
//     that cost. One process per GPU, started like the nccl backend's
//     other users (SHARDX_RANK, SHARDX_WORLD_SIZE, SHARDX_STORE_DIR; alone,
//     a world of one).
//
// Without a usable GPU (or NCCL, for nccl) it prints "skipped: <reason>"
// and exits 0. Best of kRepeats rounds per figure.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Bootstrap.h"
#include "shardx/Runtime/Cuda.h"
#include "shardx/Runtime/Nccl.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <string>
#include <vector>

using namespace shardx;
using namespace shardx::rt;
using Clock = std::chrono::steady_clock;

extern "C" {
struct MemRef2 {
  char *allocated;
  char *aligned;
  int64_t offset;
  int64_t sizes[2];
  int64_t strides[2];
};
void _mlir_ciface_shardx_rt_cuda_gemm_f32(MemRef2 *a, MemRef2 *b, MemRef2 *c,
                                          int32_t accumulate);
void _mlir_ciface_shardx_rt_cuda_gemm_bf16(MemRef2 *a, MemRef2 *b, MemRef2 *c,
                                           int32_t accumulate);
void _mlir_ciface_shardx_rt_cuda_gemm_f16(MemRef2 *a, MemRef2 *b, MemRef2 *c,
                                          int32_t accumulate);
}

namespace {

constexpr int kRepeats = 5;

/// Waits for `stream` (fails the process on a driver error).
void wait(void *stream) {
  char error[1024];
  for (;;) {
    int q = shardx_rt_cuda_stream_query(stream, error, sizeof(error));
    if (q == 0)
      return;
    if (q < 0) {
      std::fprintf(stderr, "shardx-gpu-bench: %s\n", error);
      std::exit(1);
    }
  }
}

template <typename F> double bestSeconds(int iters, void *stream, F body) {
  body(); // warm-up
  wait(stream);
  double best = 1e30;
  for (int r = 0; r < kRepeats; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i)
      body();
    wait(stream);
    best = std::min(
        best, std::chrono::duration<double>(Clock::now() - t0).count() / iters);
  }
  return best;
}

void *symbol(void *lib, const char *name) {
  void *f = dlsym(lib, name);
  if (!f) {
    std::fprintf(stderr, "shardx-gpu-bench: missing symbol %s\n", name);
    std::exit(1);
  }
  return f;
}

int gemmBench(int argc, char **argv) {
  int64_t m = argc > 2 ? std::atoll(argv[2]) : 8192;
  int64_t n = argc > 3 ? std::atoll(argv[3]) : 8192;
  int64_t k = argc > 4 ? std::atoll(argv[4]) : 8192;
  std::string dtype = argc > 5 ? argv[5] : "f32";
  // cudaDataType and the runtime's entry point per element type.
  struct Kind {
    int cudaType, bytes;
    void (*entry)(MemRef2 *, MemRef2 *, MemRef2 *, int32_t);
  };
  Kind kind;
  if (dtype == "f32")
    kind = {0, 4, _mlir_ciface_shardx_rt_cuda_gemm_f32};
  else if (dtype == "bf16")
    kind = {14, 2, _mlir_ciface_shardx_rt_cuda_gemm_bf16};
  else if (dtype == "f16")
    kind = {2, 2, _mlir_ciface_shardx_rt_cuda_gemm_f16};
  else {
    std::fprintf(stderr,
                 "shardx-gpu-bench: gemm type must be f32, bf16 or "
                 "f16, not '%s'\n",
                 dtype.c_str());
    return 1;
  }
  if (m <= 0 || n <= 0 || k <= 0) {
    std::fprintf(stderr, "shardx-gpu-bench: gemm sizes must be positive\n");
    return 1;
  }
  std::string tried;
  void *lib = openCudaLibrary(
      "SHARDX_CUBLAS",
      {"libcublas.so.13", "libcublas.so.12", "libcublas.so.11", "libcublas.so"},
      tried, false);
  if (!lib) {
    std::printf("skipped: no cuBLAS; tried:%s\n", tried.c_str());
    return 0;
  }
  using Handle = void *;
  auto create =
      reinterpret_cast<int (*)(Handle *)>(symbol(lib, "cublasCreate_v2"));
  auto setStream = reinterpret_cast<int (*)(Handle, void *)>(
      symbol(lib, "cublasSetStream_v2"));
  auto gemmEx = reinterpret_cast<int (*)(
      Handle, int, int, int, int, int, const void *, const void *, int, int,
      const void *, int, int, const void *, void *, int, int, int, int)>(
      symbol(lib, "cublasGemmEx"));
  void *stream = shardx_rt_cuda_stream();
  Handle handle = nullptr;
  if (create(&handle) || setStream(handle, stream)) {
    std::fprintf(stderr, "shardx-gpu-bench: cublasCreate failed\n");
    return 1;
  }
  auto *a = static_cast<char *>(shardx_rt_cuda_alloc(m * k * kind.bytes));
  auto *b = static_cast<char *>(shardx_rt_cuda_alloc(k * n * kind.bytes));
  auto *c = static_cast<char *>(shardx_rt_cuda_alloc(m * n * kind.bytes));
  // 0.0078125 in each type.
  if (kind.bytes == 4) {
    mgpuMemset32(a, 0x3c000000, m * k, nullptr);
    mgpuMemset32(b, 0x3c000000, k * n, nullptr);
  } else {
    unsigned short bits = dtype == "bf16" ? 0x3c00 : 0x2000;
    mgpuMemset16(a, bits, m * k, nullptr);
    mgpuMemset16(b, bits, k * n, nullptr);
  }
  MemRef2 ma{a, a, 0, {m, k}, {k, 1}}, mb{b, b, 0, {k, n}, {n, 1}},
      mc{c, c, 0, {m, n}, {n, 1}};
  int iters = 10;
  double runtime =
      bestSeconds(iters, stream, [&] { kind.entry(&ma, &mb, &mc, 0); });
  float one = 1, zero = 0;
  // Row-major C = A B is column-major C^T = B^T A^T.
  constexpr int kOpN = 0, kCompute32F = 68, kDefault = -1;
  int t = kind.cudaType;
  double direct = bestSeconds(iters, stream, [&] {
    gemmEx(handle, kOpN, kOpN, int(n), int(m), int(k), &one, b, t, int(n), a, t,
           int(k), &zero, c, t, int(n), kCompute32F, kDefault);
  });
  double flops = 2.0 * m * n * k;
  std::printf("# %s GEMM %lldx%lldx%lld (f32 accumulation) on %s\n",
              dtype.c_str(), (long long)m, (long long)n, (long long)k,
              shardx_rt_cuda_device_name());
  std::printf("%-10s %12s %12s\n", "path", "time_ms", "TFLOP/s");
  std::printf("%-10s %12.3f %12.2f\n", "runtime", runtime * 1e3,
              flops / runtime / 1e12);
  std::printf("%-10s %12.3f %12.2f\n", "cublas", direct * 1e3,
              flops / direct / 1e12);
  std::printf("ratio runtime/cublas: %.3f\n", direct / runtime);
  return 0;
}

int ncclBench(int argc, char **argv) {
  size_t maxBytes =
      argc > 2 ? std::strtoull(argv[2], nullptr, 10) : size_t(256) << 20;
  if (Status s = openNcclDevice(); !s) {
    std::printf("skipped: %s\n", s.message().c_str());
    return 0;
  }
  std::string error;
  std::unique_ptr<Bootstrap> world;
  std::string tempDir; // a world of one's store, removed at the end
  if (std::getenv("SHARDX_WORLD_SIZE"))
    world = createFileStoreBootstrapFromEnv(120.0, error);
  else {
    char dir[] = "/tmp/shardx-bench-XXXXXX";
    if (!mkdtemp(dir)) {
      std::fprintf(stderr, "shardx-gpu-bench: mkdtemp failed\n");
      return 1;
    }
    tempDir = dir;
    world = createFileStoreBootstrap(0, 1, dir, 120.0);
  }
  if (!world) {
    std::fprintf(stderr, "shardx-gpu-bench: %s\n", error.c_str());
    return 1;
  }
  int64_t n = world->getWorldSize(), rank = world->getRank();
  std::unique_ptr<Communicator> comm =
      createNcclCommunicator({n}, *world, 120.0, error);
  if (!comm) {
    std::fprintf(stderr, "shardx-gpu-bench: %s\n", error.c_str());
    return 1;
  }
  // The direct side: the same library, its own (blocking) communicator.
  std::string tried;
  void *lib = openCudaLibrary("SHARDX_NCCL", {"libnccl.so.2", "libnccl.so"},
                              tried, true);
  struct Id {
    char internal[128];
  } id{};
  using Comm = void *;
  auto getUniqueId =
      reinterpret_cast<int (*)(Id *)>(symbol(lib, "ncclGetUniqueId"));
  auto initRank = reinterpret_cast<int (*)(Comm *, int, Id, int)>(
      symbol(lib, "ncclCommInitRank"));
  auto allReduce =
      reinterpret_cast<int (*)(const void *, void *, size_t, int, int, Comm,
                               void *)>(symbol(lib, "ncclAllReduce"));
  auto allGather =
      reinterpret_cast<int (*)(const void *, void *, size_t, int, Comm,
                               void *)>(symbol(lib, "ncclAllGather"));
  auto reduceScatter =
      reinterpret_cast<int (*)(const void *, void *, size_t, int, int, Comm,
                               void *)>(symbol(lib, "ncclReduceScatter"));
  if (rank == 0)
    getUniqueId(&id);
  if (Status s = world->broadcast("bench-direct-id", &id, sizeof(id)); !s) {
    std::fprintf(stderr, "shardx-gpu-bench: %s\n", s.message().c_str());
    return 1;
  }
  Comm direct = nullptr;
  if (int r = initRank(&direct, int(n), id, int(rank))) {
    std::fprintf(stderr, "shardx-gpu-bench: ncclCommInitRank failed (%d)\n", r);
    return 1;
  }
  void *stream = shardx_rt_cuda_stream();
  auto *send = static_cast<char *>(shardx_rt_cuda_alloc(maxBytes));
  auto *recv = static_cast<char *>(shardx_rt_cuda_alloc(maxBytes * n));
  mgpuMemset32(send, 0, maxBytes / 4, nullptr);
  constexpr int kF32 = 7, kSum = 0;
  if (rank == 0) {
    std::printf("# nccl: %lld ranks, f32, out of place, best of %d; "
                "ratio = runtime busbw / direct NCCL busbw\n",
                (long long)n, kRepeats);
    std::printf("%-15s %12s %12s %12s %12s %12s %8s\n", "collective", "bytes",
                "rt_us", "rt_busbw", "nccl_us", "nccl_busbw", "ratio");
  }
  const char *names[] = {"all_reduce", "all_gather", "reduce_scatter"};
  for (int kind = 0; kind < 3; ++kind)
    for (size_t bytes = 1024; bytes <= maxBytes; bytes *= 4) {
      size_t count = bytes / 4;
      // bytes: the larger of the send and receive buffers, as nccl-tests.
      size_t piece = kind == 0 ? count : count / n;
      if (!piece)
        continue;
      std::vector<size_t> counts(n, piece);
      int iters = bytes < (size_t(1) << 20) ? 100 : 20;
      auto viaRuntime = [&] {
        Status s = kind == 0 ? comm->allReduce(send, recv, count, DType::F32,
                                               ReduceOp::Sum, {0})
                   : kind == 1
                       ? comm->allGather(send, recv, counts, DType::F32, {0})
                       : comm->reduceScatter(send, recv, counts, DType::F32,
                                             ReduceOp::Sum, {0});
        if (!s) {
          std::fprintf(stderr, "shardx-gpu-bench: %s\n", s.message().c_str());
          std::exit(1);
        }
      };
      auto viaNccl = [&] {
        int r =
            kind == 0 ? allReduce(send, recv, count, kF32, kSum, direct, stream)
            : kind == 1
                ? allGather(send, recv, piece, kF32, direct, stream)
                : reduceScatter(send, recv, piece, kF32, kSum, direct, stream);
        if (r) {
          std::fprintf(stderr, "shardx-gpu-bench: NCCL error %d\n", r);
          std::exit(1);
        }
      };
      double rt = bestSeconds(iters, stream, viaRuntime);
      double nc = bestSeconds(iters, stream, viaNccl);
      size_t moved = kind == 0 ? bytes : piece * 4 * n;
      double factor = kind == 0 ? 2.0 * (n - 1) / n : double(n - 1) / n;
      if (n == 1)
        factor = 1; // one rank: report algbw
      double rtBus = moved / rt / 1e9 * factor,
             ncBus = moved / nc / 1e9 * factor;
      if (rank == 0)
        std::printf("%-15s %12zu %12.1f %12.2f %12.1f %12.2f %8.3f\n",
                    names[kind], moved, rt * 1e6, rtBus, nc * 1e6, ncBus,
                    rtBus / ncBus);
    }
  if (!tempDir.empty())
    std::filesystem::remove_all(tempDir);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "gemm" && mode != "nccl") {
    std::fprintf(stderr,
                 "usage: shardx-gpu-bench gemm [M N K] | nccl [max-bytes]\n"
                 "       (gemm M N K TYPE: TYPE is f32, the default, bf16 or "
                 "f16)\n");
    return 1;
  }
  if (mode == "gemm" && argc > 5 && std::strcmp(argv[5], "f32") &&
      std::strcmp(argv[5], "bf16") && std::strcmp(argv[5], "f16")) {
    std::fprintf(stderr,
                 "shardx-gpu-bench: gemm type must be f32, bf16 or f16, not "
                 "'%s'\n",
                 argv[5]);
    return 1;
  }
  char error[4096];
  if (shardx_rt_cuda_init(error, sizeof(error))) {
    std::printf("skipped: no CUDA device: %s\n", error);
    return 0;
  }
  return mode == "gemm" ? gemmBench(argc, argv) : ncclBench(argc, argv);
}
