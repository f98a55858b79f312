//===- CudaRuntime.cpp - Entry points of CUDA artifacts -------------------===//
//
// Part of ShardX.
//
// What the host code of a `--target=cuda` artifact calls: the `mgpu*` entry
// points that MLIR's gpu-to-llvm lowering emits (module load, kernel
// launch, stream, memory, copies), the cuBLAS GEMMs of the contractions
// (`shardx_rt_cuda_gemm_*`); `shardx_rt_invoke` is DeviceEntry.cpp's
// (ShardXRuntimeCudaCode), the collectives CompiledCode.cpp's, the
// libraries are found by CudaLibraries.cpp and the launcher's buffers
// staged by EntryStaging.cpp. No CUDA library is
// linked: the driver (libcuda.so.1) and cuBLAS are opened at run time, so
// an artifact loads on a machine without a GPU and its first call fails
// with "no CUDA driver: ...".
//
// Each calling thread (a rank) has its own stream and cuBLAS handle on
// device 0's primary context. Device memory comes from a caching
// allocator: freed blocks are kept per stream and size and reused by the
// next allocation of that size on that stream.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Cuda.h"

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <glob.h>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

//===----------------------------------------------------------------------===//
// The driver and cuBLAS APIs used here (declared here: no CUDA headers)
//===----------------------------------------------------------------------===//

using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using cublasHandle_t = struct cublasContext *;
using cublasStatus_t = int;
using shardx::rt::resolveSymbol;

constexpr int kCublasOpN = 0, kCublasOpT = 1;
constexpr int kCudaR32F = 0, kCudaR16F = 2, kCudaR16BF = 14;
constexpr int kCublasCompute32F = 68;
constexpr int kCublasGemmDefault = -1;

struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  CUresult (*cuModuleLoadData)(CUmodule *, const void *);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, CUstream, void **,
                             void **);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*cuMemsetD16Async)(CUdeviceptr, unsigned short, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuMemHostAlloc)(void **, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void *);
};

struct Cublas {
  cublasStatus_t (*create)(cublasHandle_t *);
  cublasStatus_t (*setStream)(cublasHandle_t, CUstream);
  cublasStatus_t (*gemmStridedBatchedEx)(cublasHandle_t, int, int, int, int,
                                         int, const void *, const void *, int,
                                         int, long long, const void *, int, int,
                                         long long, const void *, void *, int,
                                         int, long long, int, int, int);
};

void *openLibrary(const char *envVar, const std::vector<std::string> &names,
                  std::string &tried) {
  return shardx::rt::openCudaLibrary(envVar, names, tried, false);
}

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

struct State {
  std::once_flag once;
  std::string error; // empty: initialized
  Driver cu{};
  CUcontext context = nullptr;
  std::string deviceName;
  /// The device: shardx_rt_cuda_select_device's ordinal modulo the count.
  int requestedOrdinal = 0;
  int ordinal = 0;

  std::once_flag cublasOnce;
  std::string cublasError;
  Cublas blas{};

  std::mutex mutex;
  /// Free blocks per stream and size; the size of every live block.
  std::map<std::pair<CUstream, size_t>, std::vector<CUdeviceptr>> freeBlocks;
  std::unordered_map<CUdeviceptr, std::pair<CUstream, size_t>> liveBlocks;
  size_t cachedBytes = 0;
};

State &state() {
  static State *s = new State; // never destroyed: module dtors may run late
  return *s;
}

std::string describe(CUresult r) {
  const char *text = nullptr;
  if (state().cu.cuGetErrorString)
    state().cu.cuGetErrorString(r, &text);
  if (!text && r == 34)
    text = "CUDA_ERROR_STUB_LIBRARY: the toolkit's stub, not a driver";
  else if (!text && r == 100)
    text = "CUDA_ERROR_NO_DEVICE";
  return "CUDA error " + std::to_string(r) +
         (text ? std::string(" (") + text + ")" : "");
}

void initialize(State &s) {
  std::string tried;
  void *lib =
      openLibrary("SHARDX_CUDA_DRIVER", {"libcuda.so.1", "libcuda.so"}, tried);
  if (!lib) {
    s.error = "no CUDA driver: cannot load libcuda.so.1 (set "
              "SHARDX_CUDA_DRIVER to its path); tried:" +
              tried;
    return;
  }
  Driver &cu = s.cu;
  std::string err;
  bool ok =
      resolveSymbol(lib, cu.cuInit, "cuInit", err) &&
      resolveSymbol(lib, cu.cuDeviceGet, "cuDeviceGet", err) &&
      resolveSymbol(lib, cu.cuDeviceGetCount, "cuDeviceGetCount", err) &&
      resolveSymbol(lib, cu.cuDeviceGetName, "cuDeviceGetName", err) &&
      resolveSymbol(lib, cu.cuDevicePrimaryCtxRetain,
                    "cuDevicePrimaryCtxRetain", err) &&
      resolveSymbol(lib, cu.cuCtxSetCurrent, "cuCtxSetCurrent", err) &&
      resolveSymbol(lib, cu.cuGetErrorString, "cuGetErrorString", err) &&
      resolveSymbol(lib, cu.cuModuleLoadData, "cuModuleLoadData", err) &&
      resolveSymbol(lib, cu.cuModuleUnload, "cuModuleUnload", err) &&
      resolveSymbol(lib, cu.cuModuleGetFunction, "cuModuleGetFunction", err) &&
      resolveSymbol(lib, cu.cuFuncSetAttribute, "cuFuncSetAttribute", err) &&
      resolveSymbol(lib, cu.cuLaunchKernel, "cuLaunchKernel", err) &&
      resolveSymbol(lib, cu.cuStreamCreate, "cuStreamCreate", err) &&
      resolveSymbol(lib, cu.cuStreamSynchronize, "cuStreamSynchronize", err) &&
      resolveSymbol(lib, cu.cuMemAlloc, "cuMemAlloc_v2", err) &&
      resolveSymbol(lib, cu.cuMemFree, "cuMemFree_v2", err) &&
      resolveSymbol(lib, cu.cuMemcpyAsync, "cuMemcpyAsync", err) &&
      resolveSymbol(lib, cu.cuMemsetD32Async, "cuMemsetD32Async", err) &&
      resolveSymbol(lib, cu.cuMemsetD16Async, "cuMemsetD16Async", err) &&
      resolveSymbol(lib, cu.cuMemsetD8Async, "cuMemsetD8Async", err) &&
      resolveSymbol(lib, cu.cuStreamQuery, "cuStreamQuery", err) &&
      resolveSymbol(lib, cu.cuEventCreate, "cuEventCreate", err) &&
      resolveSymbol(lib, cu.cuEventRecord, "cuEventRecord", err) &&
      resolveSymbol(lib, cu.cuStreamWaitEvent, "cuStreamWaitEvent", err) &&
      resolveSymbol(lib, cu.cuEventDestroy, "cuEventDestroy_v2", err) &&
      resolveSymbol(lib, cu.cuStreamDestroy, "cuStreamDestroy_v2", err) &&
      resolveSymbol(lib, cu.cuEventQuery, "cuEventQuery", err) &&
      resolveSymbol(lib, cu.cuMemHostAlloc, "cuMemHostAlloc", err) &&
      resolveSymbol(lib, cu.cuMemFreeHost, "cuMemFreeHost", err);
  if (!ok) {
    s.error = "no CUDA driver: libcuda " + err;
    return;
  }
  if (CUresult r = cu.cuInit(0)) {
    s.error = "no CUDA driver: cuInit failed: " + describe(r);
    return;
  }
  int count = 0;
  if (CUresult r = cu.cuDeviceGetCount(&count); r || count == 0) {
    s.error = "no CUDA driver: no CUDA device" +
              (r ? ": " + describe(r) : std::string());
    return;
  }
  CUdevice dev;
  char name[256] = {0};
  // $SHARDX_CUDA_DEVICE (set by shardx_rt_cuda_select_device, so that an
  // artifact's copy of this runtime opens the launcher's device).
  if (const char *d = std::getenv("SHARDX_CUDA_DEVICE"); d && *d)
    s.requestedOrdinal = std::max(0, std::atoi(d));
  s.ordinal = s.requestedOrdinal % count;
  std::string which = "CUDA device " + std::to_string(s.ordinal);
  if (CUresult r = cu.cuDeviceGet(&dev, s.ordinal))
    s.error = "cannot open " + which + ": " + describe(r);
  else if (CUresult r = cu.cuDevicePrimaryCtxRetain(&s.context, dev))
    s.error = "cannot create a context on " + which + ": " + describe(r);
  else if (cu.cuDeviceGetName(name, sizeof(name) - 1, dev) == 0)
    s.deviceName = name;
}

/// Initializes the driver once; the error, or empty.
const std::string &ensureDriver() {
  State &s = state();
  std::call_once(s.once, [&] { initialize(s); });
  return s.error;
}

using shardx::rt::cudaFatal;

/// The driver, with this thread's context current (aborts the process with
/// the reason when there is none).
Driver &driver() {
  const std::string &error = ensureDriver();
  if (!error.empty())
    cudaFatal("%s", error.c_str());
  static thread_local bool current = false;
  if (!current) {
    if (CUresult r = state().cu.cuCtxSetCurrent(state().context))
      cudaFatal("cuCtxSetCurrent: %s", describe(r).c_str());
    current = true;
  }
  return state().cu;
}

void check(CUresult r, const char *what) {
  if (r)
    cudaFatal("%s: %s", what, describe(r).c_str());
}

/// This thread's stream (one per rank).
CUstream threadStream() {
  static thread_local CUstream stream = nullptr;
  if (!stream)
    check(driver().cuStreamCreate(&stream, /*CU_STREAM_NON_BLOCKING=*/1),
          "cuStreamCreate");
  return stream;
}

Cublas &cublas() {
  State &s = state();
  std::call_once(s.cublasOnce, [&] {
    std::string tried;
    void *lib = openLibrary("SHARDX_CUBLAS",
                            {"libcublas.so.13", "libcublas.so.12",
                             "libcublas.so.11", "libcublas.so"},
                            tried);
    if (!lib) {
      s.cublasError = "cannot load cuBLAS (set SHARDX_CUBLAS); tried:" + tried;
      return;
    }
    std::string err;
    if (!resolveSymbol(lib, s.blas.create, "cublasCreate_v2", err) ||
        !resolveSymbol(lib, s.blas.setStream, "cublasSetStream_v2", err) ||
        !resolveSymbol(lib, s.blas.gemmStridedBatchedEx,
                       "cublasGemmStridedBatchedEx", err))
      s.cublasError = "cuBLAS: " + err;
  });
  if (!s.cublasError.empty())
    cudaFatal("%s", s.cublasError.c_str());
  return s.blas;
}

cublasHandle_t threadCublas() {
  static thread_local cublasHandle_t handle = nullptr;
  if (!handle) {
    driver();
    if (int r = cublas().create(&handle))
      cudaFatal("cublasCreate failed (status %d)", r);
    if (int r = cublas().setStream(handle, threadStream()))
      cudaFatal("cublasSetStream failed (status %d)", r);
  }
  return handle;
}

//===----------------------------------------------------------------------===//
// Modules: loaded on first use, so that loading an artifact needs no GPU
//===----------------------------------------------------------------------===//

struct LazyModule {
  const void *image;
  /// A copy of a binary image that was not 8-byte aligned (the driver reads
  /// a fat binary's and an ELF's header fields in place).
  std::vector<uint64_t> aligned;
  std::once_flag once;
  CUmodule module = nullptr;
};

CUmodule loaded(LazyModule *m) {
  std::call_once(m->once, [&] {
    check(driver().cuModuleLoadData(&m->module, m->image), "cuModuleLoadData");
  });
  return m->module;
}

//===----------------------------------------------------------------------===//
// GEMMs on cuBLAS
//===----------------------------------------------------------------------===//

template <int N> struct MemRef {
  char *allocated;
  char *aligned;
  int64_t offset;
  int64_t sizes[N];
  int64_t strides[N];
};

/// A cuBLAS view of the last two dims of `m`: row-major (`rowMajor`) or
/// column-major with leading dimension `ld`.
template <int N>
void gemmView(const MemRef<N> *m, const char *name, bool &rowMajor,
              int64_t &ld) {
  int64_t rows = m->sizes[N - 2], cols = m->sizes[N - 1];
  int64_t sr = m->strides[N - 2], sc = m->strides[N - 1];
  if (sc == 1 && sr >= std::max<int64_t>(1, cols)) {
    rowMajor = true;
    ld = std::max<int64_t>(1, sr);
    return;
  }
  if (sr == 1 && sc >= std::max<int64_t>(1, rows)) {
    rowMajor = false;
    ld = std::max<int64_t>(1, sc);
    return;
  }
  cudaFatal("GEMM operand %s has strides [%lld, %lld]: no unit stride", name,
            (long long)sr, (long long)sc);
}

/// C = A * B (+ C when `accumulate`) on cuBLAS, batched over dim 0 when
/// N = 3, accumulated in f32. A and B have cuBLAS data type `type` and
/// element size `bytes`, C `cType` and `cBytes` (f32 for a bf16/f16 GEMM
/// whose result is not rounded to its inputs' type).
template <int N>
void gemm(MemRef<N> *a, MemRef<N> *b, MemRef<N> *c, int32_t accumulate,
          int type, int bytes, int cType, int cBytes) {
  int64_t batch = N == 3 ? c->sizes[0] : 1;
  int64_t m = c->sizes[N - 2], n = c->sizes[N - 1], k = a->sizes[N - 1];
  if (m == 0 || n == 0 || batch == 0)
    return;
  bool ra, rb, rc;
  int64_t lda, ldb, ldc;
  gemmView(a, "A", ra, lda);
  gemmView(b, "B", rb, ldb);
  gemmView(c, "C", rc, ldc);
  int64_t sa = N == 3 ? a->strides[0] : 0, sb = N == 3 ? b->strides[0] : 0,
          sc = N == 3 ? c->strides[0] : 0;
  const char *pa = a->aligned + a->offset * bytes;
  const char *pb = b->aligned + b->offset * bytes;
  char *pc = c->aligned + c->offset * cBytes;
  for (int64_t v : {m, n, k, lda, ldb, ldc, batch})
    if (v > INT32_MAX)
      cudaFatal("GEMM dimension %lld exceeds cuBLAS's int range", (long long)v);
  float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  cublasHandle_t h = threadCublas();
  int r;
  if (rc) {
    // Row-major C is column-major C^T = B^T A^T: a row-major operand is its
    // own transpose in column-major terms.
    r = cublas().gemmStridedBatchedEx(
        h, rb ? kCublasOpN : kCublasOpT, ra ? kCublasOpN : kCublasOpT, int(n),
        int(m), int(k), &alpha, pb, type, int(ldb), sb, pa, type, int(lda), sa,
        &beta, pc, cType, int(ldc), sc, int(batch), kCublasCompute32F,
        kCublasGemmDefault);
  } else {
    r = cublas().gemmStridedBatchedEx(
        h, ra ? kCublasOpT : kCublasOpN, rb ? kCublasOpT : kCublasOpN, int(m),
        int(n), int(k), &alpha, pa, type, int(lda), sa, pb, type, int(ldb), sb,
        &beta, pc, cType, int(ldc), sc, int(batch), kCublasCompute32F,
        kCublasGemmDefault);
  }
  if (r)
    cudaFatal("cublasGemmStridedBatchedEx failed (status %d)", r);
}

/// A stream or event query's result: 0 done, 1 not yet, -1 an error, whose
/// description goes to `error` (of `errorSize` bytes, when given).
int queryResult(CUresult r, char *error, int64_t errorSize) {
  if (r == 0)
    return 0;
  if (r == /*CUDA_ERROR_NOT_READY=*/600)
    return 1;
  if (error && errorSize > 0) {
    std::strncpy(error, describe(r).c_str(), errorSize - 1);
    error[errorSize - 1] = '\0';
  }
  return -1;
}

/// The calling thread's page-locked arena for small host inputs (at most
/// kLargestStaged bytes each), made once, bump-allocated between two
/// staging_reset calls (queued copies may read it until the stream is
/// synchronized). Larger inputs go from pageable memory through the driver
/// (docs/Runtime.md). Never freed: the context takes it at exit.
struct PinnedStaging {
  static constexpr size_t kArenaBytes = size_t(16) << 20;
  static constexpr size_t kLargestStaged = size_t(4) << 20;
  char *arena = nullptr;
  size_t used = 0;
  /// Room for `bytes` in the arena, or null (then copy from pageable).
  char *take(size_t bytes) {
    size_t need = (bytes + 255) & ~size_t(255);
    if (bytes > kLargestStaged || used + need > kArenaBytes)
      return nullptr;
    if (!arena) {
      void *p = nullptr;
      if (driver().cuMemHostAlloc(&p, kArenaBytes, 0))
        return nullptr;
      arena = static_cast<char *>(p);
    }
    char *p = arena + used;
    used += need;
    return p;
  }
  void reset() { used = 0; }
};

PinnedStaging &pinnedStaging() {
  static thread_local PinnedStaging staging;
  return staging;
}

} // namespace

//===----------------------------------------------------------------------===//
// C entry points
//===----------------------------------------------------------------------===//

extern "C" {

int shardx_rt_cuda_init(char *error, int64_t errorSize) {
  const std::string &e = ensureDriver();
  if (e.empty())
    return 0;
  if (error && errorSize > 0) {
    std::strncpy(error, e.c_str(), errorSize - 1);
    error[errorSize - 1] = '\0';
  }
  return 1;
}

const char *shardx_rt_cuda_device_name() {
  return ensureDriver().empty() ? state().deviceName.c_str() : "";
}

int shardx_rt_cuda_select_device(int ordinal) {
  ordinal = ordinal < 0 ? 0 : ordinal;
  setenv("SHARDX_CUDA_DEVICE", std::to_string(ordinal).c_str(), 1);
  ensureDriver();
  return state().ordinal;
}

void *shardx_rt_cuda_stream() {
  driver();
  return threadStream();
}

void *shardx_rt_cuda_stream_create() {
  CUstream stream = nullptr;
  check(driver().cuStreamCreate(&stream, /*CU_STREAM_NON_BLOCKING=*/1),
        "cuStreamCreate");
  return stream;
}

void shardx_rt_cuda_stream_wait(void *waiter, void *signaller) {
  Driver &cu = driver();
  // One event per thread, recorded again for each wait: a stream waits for
  // the record that was last when it was told to wait (cuStreamWaitEvent),
  // so a later record does not move an earlier wait. Saves an event
  // creation and destruction per collective.
  thread_local CUevent event = nullptr;
  if (!event)
    check(cu.cuEventCreate(&event, /*CU_EVENT_DISABLE_TIMING=*/2),
          "cuEventCreate");
  check(cu.cuEventRecord(event, static_cast<CUstream>(signaller)),
        "cuEventRecord");
  check(cu.cuStreamWaitEvent(static_cast<CUstream>(waiter), event, 0),
        "cuStreamWaitEvent");
}

void shardx_rt_cuda_stream_destroy(void *stream) {
  // Best effort, like the events: after a failure the context may hold an
  // error. Work still queued on the stream completes first.
  driver().cuStreamDestroy(static_cast<CUstream>(stream));
}

int shardx_rt_cuda_stream_query(void *stream, char *error, int64_t errorSize) {
  return queryResult(driver().cuStreamQuery(static_cast<CUstream>(stream)),
                     error, errorSize);
}

void *shardx_rt_cuda_event_create() {
  CUevent event = nullptr;
  check(driver().cuEventCreate(&event, /*CU_EVENT_DISABLE_TIMING=*/2),
        "cuEventCreate");
  return event;
}

void shardx_rt_cuda_event_record(void *event, void *stream) {
  check(driver().cuEventRecord(static_cast<CUevent>(event),
                               static_cast<CUstream>(stream)),
        "cuEventRecord");
}

void shardx_rt_cuda_stream_wait_event(void *stream, void *event) {
  check(driver().cuStreamWaitEvent(static_cast<CUstream>(stream),
                                   static_cast<CUevent>(event), 0),
        "cuStreamWaitEvent");
}

int shardx_rt_cuda_event_query(void *event, char *error, int64_t errorSize) {
  return queryResult(driver().cuEventQuery(static_cast<CUevent>(event)), error,
                     errorSize);
}

void shardx_rt_cuda_event_destroy(void *event) {
  // Best effort: after a failed collective the context may hold an error.
  driver().cuEventDestroy(static_cast<CUevent>(event));
}

void shardx_rt_cuda_copy_on(void *dst, const void *src, int64_t bytes,
                            void *stream) {
  if (bytes > 0)
    check(driver().cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                                 reinterpret_cast<CUdeviceptr>(src),
                                 static_cast<size_t>(bytes),
                                 static_cast<CUstream>(stream)),
          "cuMemcpyAsync");
}

void shardx_rt_cuda_zero_on(void *dst, int64_t bytes, void *stream) {
  if (bytes > 0)
    check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(dst), 0,
                                   static_cast<size_t>(bytes),
                                   static_cast<CUstream>(stream)),
          "cuMemsetD8Async");
}

void shardx_rt_cuda_cache_trim() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.freeBlocks.empty() || !s.error.empty())
    return;
  Driver &cu = driver();
  // Each block's stream first (a block is free once the work queued on its
  // stream before its release is done), not cuMemFree's implicit wait.
  for (auto &[key, blocks] : s.freeBlocks) {
    if (!blocks.empty())
      cu.cuStreamSynchronize(key.first);
    for (CUdeviceptr b : blocks)
      cu.cuMemFree(b);
  }
  s.freeBlocks.clear();
  s.cachedBytes = 0;
}

int64_t shardx_rt_cuda_cached_bytes() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return static_cast<int64_t>(state().cachedBytes);
}

void shardx_rt_cuda_synchronize() {
  check(driver().cuStreamSynchronize(threadStream()), "cuStreamSynchronize");
}

void *shardx_rt_cuda_alloc(int64_t bytes) {
  return mgpuMemAlloc(static_cast<uint64_t>(bytes), nullptr, false);
}

void shardx_rt_cuda_free(void *ptr) { mgpuMemFree(ptr, nullptr); }

void shardx_rt_cuda_staging_reset() { pinnedStaging().reset(); }

void shardx_rt_cuda_stage_to_device(void *dst, const void *src, int64_t bytes) {
  if (bytes <= 0)
    return;
  // From pageable memory the driver returns once `src` may be reused.
  const void *from = src;
  if (char *pinned = pinnedStaging().take(static_cast<size_t>(bytes))) {
    std::memcpy(pinned, src, static_cast<size_t>(bytes));
    from = pinned;
  }
  check(driver().cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                               reinterpret_cast<CUdeviceptr>(from),
                               static_cast<size_t>(bytes), threadStream()),
        "cuMemcpyAsync");
}

void shardx_rt_cuda_copy(void *dst, const void *src, int64_t bytes) {
  mgpuMemcpy(dst, const_cast<void *>(src), static_cast<size_t>(bytes), nullptr);
  shardx_rt_cuda_synchronize();
}

int shardx_rt_set_compute_threads(int) { return 0; }

//===----------------------------------------------------------------------===//
// MLIR's GPU runtime entry points (as gpu-to-llvm and the LLVM translation
// of gpu.binary / gpu.launch_func call them)
//===----------------------------------------------------------------------===//

/// `data` is PTX (NUL-terminated; `size` 0), a cubin or a fat binary of
/// `size` bytes (the cuda target's kernels are a fat binary of the chip's
/// code and the PTX, docs/Compiler.md), loaded by cuModuleLoadData at the
/// first use.
void *mgpuModuleLoad(void *data, size_t size) {
  auto *m = new LazyModule;
  m->image = data;
  if (size && reinterpret_cast<uintptr_t>(data) % alignof(uint64_t)) {
    m->aligned.resize((size + sizeof(uint64_t) - 1) / sizeof(uint64_t));
    std::memcpy(m->aligned.data(), data, size);
    m->image = m->aligned.data();
  }
  return m;
}

void *mgpuModuleLoadJIT(void *data, int) { return mgpuModuleLoad(data, 0); }

void mgpuModuleUnload(void *module) {
  // Runs from the artifact's destructors, possibly after the driver shut
  // down: the module goes with the context.
  delete static_cast<LazyModule *>(module);
}

void *mgpuModuleGetFunction(void *module, const char *name) {
  CUfunction fn = nullptr;
  check(driver().cuModuleGetFunction(
            &fn, loaded(static_cast<LazyModule *>(module)), name),
        "cuModuleGetFunction");
  return fn;
}

void mgpuLaunchKernel(void *function, intptr_t gridX, intptr_t gridY,
                      intptr_t gridZ, intptr_t blockX, intptr_t blockY,
                      intptr_t blockZ, int32_t smem, void *stream,
                      void **params, void **extra, size_t) {
  if (gridX == 0 || gridY == 0 || gridZ == 0)
    return;
  check(driver().cuLaunchKernel(
            static_cast<CUfunction>(function), unsigned(gridX), unsigned(gridY),
            unsigned(gridZ), unsigned(blockX), unsigned(blockY),
            unsigned(blockZ), unsigned(smem), static_cast<CUstream>(stream),
            params, extra),
        "cuLaunchKernel");
}

void *mgpuStreamCreate() {
  driver();
  return threadStream();
}

void mgpuStreamDestroy(void *) {}

void mgpuStreamSynchronize(void *) {
  // gpu-to-llvm synchronizes after every launch. All work of a rank is on
  // its one stream and the host never reads device memory before
  // shardx_rt_cuda_stage_out (which synchronizes), so stream order is
  // enough: launches queue back to back.
}

void *mgpuMemAlloc(uint64_t bytes, void *, bool) {
  Driver &cu = driver();
  CUstream stream = threadStream();
  // Sizes round up to 512 bytes (and to 2 MiB above 1 MiB), so that blocks
  // are reused across nearby sizes.
  size_t size = std::max<uint64_t>(bytes, 1);
  size = size > (1u << 20) ? (size + (2u << 20) - 1) & ~size_t((2u << 20) - 1)
                           : (size + 511) & ~size_t(511);
  State &s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.freeBlocks.find({stream, size});
    if (it != s.freeBlocks.end() && !it->second.empty()) {
      CUdeviceptr p = it->second.back();
      it->second.pop_back();
      s.cachedBytes -= size;
      s.liveBlocks[p] = {stream, size};
      return reinterpret_cast<void *>(p);
    }
  }
  CUdeviceptr p = 0;
  CUresult r = cu.cuMemAlloc(&p, size);
  if (r) {
    // Out of memory: give the cached blocks back and try once more.
    std::lock_guard<std::mutex> lock(s.mutex);
    check(cu.cuStreamSynchronize(stream), "cuStreamSynchronize");
    for (auto &[key, blocks] : s.freeBlocks)
      for (CUdeviceptr b : blocks)
        cu.cuMemFree(b);
    s.freeBlocks.clear();
    s.cachedBytes = 0;
    check(cu.cuMemAlloc(&p, size), "cuMemAlloc");
  }
  std::lock_guard<std::mutex> lock(s.mutex);
  s.liveBlocks[p] = {stream, size};
  return reinterpret_cast<void *>(p);
}

void mgpuMemFree(void *ptr, void *) {
  if (!ptr)
    return;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.liveBlocks.find(reinterpret_cast<CUdeviceptr>(ptr));
  if (it == s.liveBlocks.end())
    cudaFatal("mgpuMemFree of %p, which the runtime did not allocate", ptr);
  // Stream order makes the block free for later work on its own stream.
  s.freeBlocks[it->second].push_back(it->first);
  s.cachedBytes += it->second.second;
  s.liveBlocks.erase(it);
}

void mgpuMemcpy(void *dst, void *src, size_t bytes, void *) {
  Driver &cu = driver();
  check(cu.cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(dst),
                         reinterpret_cast<CUdeviceptr>(src), bytes,
                         threadStream()),
        "cuMemcpyAsync");
}

void mgpuMemset32(void *dst, unsigned value, size_t count, void *) {
  check(driver().cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(dst), value,
                                  count, threadStream()),
        "cuMemsetD32Async");
}

void mgpuMemset16(void *dst, unsigned short value, size_t count, void *) {
  check(driver().cuMemsetD16Async(reinterpret_cast<CUdeviceptr>(dst), value,
                                  count, threadStream()),
        "cuMemsetD16Async");
}

void mgpuSetDefaultDevice(int32_t) {}

//===----------------------------------------------------------------------===//
// Buffers of the generated host code (finalize-memref-to-llvm with generic
// allocation functions): device memory
//===----------------------------------------------------------------------===//

void *_mlir_memref_to_llvm_alloc(uint64_t bytes) {
  return mgpuMemAlloc(bytes, nullptr, false);
}

void *_mlir_memref_to_llvm_aligned_alloc(uint64_t alignment, uint64_t bytes) {
  // Blocks are 512-byte aligned (cuMemAlloc's 256 at least).
  if (alignment > 256)
    cudaFatal("device buffer alignment %llu is not supported",
              (unsigned long long)alignment);
  return mgpuMemAlloc(bytes, nullptr, false);
}

void _mlir_memref_to_llvm_free(void *ptr) { mgpuMemFree(ptr, nullptr); }

/// A constant's host global into its device buffer.
void shardx_rt_cuda_memcpy(intptr_t dst, intptr_t src, intptr_t bytes) {
  mgpuMemcpy(reinterpret_cast<void *>(dst), reinterpret_cast<void *>(src),
             static_cast<size_t>(bytes), nullptr);
}

//===----------------------------------------------------------------------===//
// Contractions
//===----------------------------------------------------------------------===//

// `<t>`: A, B and C of type t; `<t>_f32`: A and B of type t, C f32 (a GEMM
// of widened bf16/f16 operands, shardx-narrow-gemm-operands).
#define SHARDX_CUDA_GEMM(SUFFIX, TYPE, BYTES, CTYPE, CBYTES)                   \
  void _mlir_ciface_shardx_rt_cuda_gemm_##SUFFIX(                              \
      MemRef<2> *a, MemRef<2> *b, MemRef<2> *c, int32_t accumulate) {          \
    gemm<2>(a, b, c, accumulate, TYPE, BYTES, CTYPE, CBYTES);                  \
  }                                                                            \
  void _mlir_ciface_shardx_rt_cuda_gemm_batched_##SUFFIX(                      \
      MemRef<3> *a, MemRef<3> *b, MemRef<3> *c, int32_t accumulate) {          \
    gemm<3>(a, b, c, accumulate, TYPE, BYTES, CTYPE, CBYTES);                  \
  }

SHARDX_CUDA_GEMM(f32, kCudaR32F, 4, kCudaR32F, 4)
SHARDX_CUDA_GEMM(f16, kCudaR16F, 2, kCudaR16F, 2)
SHARDX_CUDA_GEMM(bf16, kCudaR16BF, 2, kCudaR16BF, 2)
SHARDX_CUDA_GEMM(f16_f32, kCudaR16F, 2, kCudaR32F, 4)
SHARDX_CUDA_GEMM(bf16_f32, kCudaR16BF, 2, kCudaR32F, 4)

#undef SHARDX_CUDA_GEMM

} // extern "C"

void shardx::rt::cudaFatal(const char *fmt, ...) {
  std::fprintf(stderr, "shardx: ");
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  std::_Exit(1);
}

void shardx::rt::setMaxDynamicSmem(void *function, int32_t bytes) {
  check(driver().cuFuncSetAttribute(
            static_cast<CUfunction>(function),
            /*CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=*/8, bytes),
        "cuFuncSetAttribute");
}
