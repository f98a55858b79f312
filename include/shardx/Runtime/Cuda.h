//===- Cuda.h - The CUDA runtime of ShardX artifacts ------------*- C++ -*-===//
//
// Part of ShardX.
//
// The entry points of lib/Runtime/cuda (library ShardXRuntimeCuda): what
// launchers call, and what the host code of `--target=cuda` artifacts calls
// (MLIR's `mgpu*` names, the cuBLAS GEMMs). No CUDA header or library is
// needed to build or link it: the driver and cuBLAS are opened at run time.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_CUDA_H
#define SHARDX_RUNTIME_CUDA_H

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardx::rt {
/// Opens the first of `names` found: the path in `$envVar` (a file, or a
/// folder holding one of the names), the loader path, then PyTorch's wheel
/// folders (nvidia/*/lib); with `envOnly`, a set `$envVar` is the only place
/// tried. Appends what failed to `tried`. How the driver, cuBLAS and NCCL
/// are found.
void *openCudaLibrary(const char *envVar, const std::vector<std::string> &names,
                      std::string &tried, bool envOnly);

/// Prints "shardx: " and the printf-formatted message to stderr and ends
/// the process with exit status 1: how the CUDA runtime's entry points
/// (CudaRuntime.cpp, Attention.cpp) fail, since compiled code has no error
/// path from them.
[[noreturn]] void cudaFatal(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/// Lets `function` (a CUfunction) use `bytes` of dynamic shared memory
/// (cuFuncSetAttribute), needed above 48 KiB.
void setMaxDynamicSmem(void *function, int32_t bytes);

/// Sets `fn` to the symbol `name` of the opened library `lib`; false, with
/// "missing symbol <name>" in `error`, when it has none.
template <typename F>
bool resolveSymbol(void *lib, F &fn, const char *name, std::string &error) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn)
    error = std::string("missing symbol ") + name;
  return fn != nullptr;
}
} // namespace shardx::rt

extern "C" {

/// Loads the CUDA driver (libcuda.so.1: $SHARDX_CUDA_DRIVER, the loader
/// path, PyTorch's wheel folders) and opens the device ($SHARDX_CUDA_DEVICE,
/// default 0). Returns 0, or 1 with
/// "no CUDA driver: ..." (or the device error) in `error`.
int shardx_rt_cuda_init(char *error, int64_t errorSize);
/// Picks the device the process uses: `ordinal` modulo the device count,
/// when called before the first use of the driver (as a one-rank-per-GPU
/// backend does with its local rank); sets $SHARDX_CUDA_DEVICE, which every
/// copy of this runtime in the process (an artifact links its own) reads
/// when it opens the driver (device 0 without it). Returns the device used.
int shardx_rt_cuda_select_device(int ordinal);
/// The calling thread's stream (the compute stream of its rank), a new
/// non-blocking stream, and a wait of `waiter` for the work queued so far on
/// `signaller` (an event recorded on one and waited for by the other).
void *shardx_rt_cuda_stream();
void *shardx_rt_cuda_stream_create();
/// Destroys a stream of shardx_rt_cuda_stream_create once its queued work
/// is done (best effort: no error after a failure).
void shardx_rt_cuda_stream_destroy(void *stream);
void shardx_rt_cuda_stream_wait(void *waiter, void *signaller);
/// 0 when `stream`'s work is done, 1 while it runs, -1 on an error (the
/// driver's message in `error`).
int shardx_rt_cuda_stream_query(void *stream, char *error, int64_t errorSize);
/// Events (created without timing) for stream-ordered collectives: record
/// on `stream`, make `stream` wait for one, query (0 done, 1 pending, -1
/// on an error, the driver's message in `error`) and destroy (a pending
/// event may be destroyed: the waits already made keep what they need;
/// errors are ignored).
void *shardx_rt_cuda_event_create();
void shardx_rt_cuda_event_record(void *event, void *stream);
void shardx_rt_cuda_stream_wait_event(void *stream, void *event);
int shardx_rt_cuda_event_query(void *event, char *error, int64_t errorSize);
void shardx_rt_cuda_event_destroy(void *event);
/// A device-to-device copy and a zero fill of `bytes` queued on `stream`
/// (not the calling thread's).
void shardx_rt_cuda_copy_on(void *dst, const void *src, int64_t bytes,
                            void *stream);
void shardx_rt_cuda_zero_on(void *dst, int64_t bytes, void *stream);
/// The device's name ("" without a driver).
const char *shardx_rt_cuda_device_name();
/// Bytes the caching allocator holds in free blocks.
int64_t shardx_rt_cuda_cached_bytes();
/// Gives the cached free blocks back to the driver (after the device has
/// finished with them). Each CUDA artifact holds its own copy of this
/// runtime and so its own cache: the executor calls it when an artifact is
/// released, so that the next one can use the memory.
void shardx_rt_cuda_cache_trim();
/// Device memory for launchers (the caching allocator) and copies between
/// host and device (synchronous).
void *shardx_rt_cuda_alloc(int64_t bytes);
void shardx_rt_cuda_free(void *ptr);
void shardx_rt_cuda_copy(void *dst, const void *src, int64_t bytes);
/// Waits for the calling thread's stream.
void shardx_rt_cuda_synchronize();
/// A host-to-device copy queued on the calling thread's stream, ahead of
/// the work queued after it; the caller may reuse `src` on return. Small
/// copies (at most 4 MiB) go through the thread's page-locked staging
/// arena (16 MiB) and run asynchronously; larger ones, and what does not
/// fit, are copied from pageable memory by the driver. The arena is reused
/// only after shardx_rt_cuda_staging_reset, which the caller calls once
/// the stream has been synchronized since the copies.
void shardx_rt_cuda_stage_to_device(void *dst, const void *src, int64_t bytes);
void shardx_rt_cuda_staging_reset();

/// What an artifact's `shardx_entry_<f>(argv)` does around the program:
/// `stage_in` copies the launcher's input buffers (host memref descriptors
/// in argv, as for CPU artifacts) to the device and returns the argv of
/// device descriptors; `stage_out` copies the results into malloc'ed host
/// buffers described in the launcher's result slot (argv[0]) and frees the
/// device buffers. `signature`: per output then input "O|I<rank>:<bytes>".
void *shardx_rt_cuda_stage_in(void **argv, const char *signature);
void shardx_rt_cuda_stage_out(void **argv, void *staged, const char *signature);

/// What an artifact's `shardx_entry_<f>_resident(argv)` does (the launcher's
/// ABI, for `shardx-gpu-exec --resident`): stage_in once, then `device`
/// (the artifact's `shardx_entry_<f>_device`, the program on device
/// descriptors) once as a warm-up and `repeat` times more, each run timed
/// from the host between stream synchronizations, the results of every run
/// but the last freed; then stage_out. `resident_config` sets `repeat`
/// (default 1) for the calling thread; `resident_times` copies up to `n`
/// times (seconds) of its last resident call and returns how many it had.
void shardx_rt_cuda_run_resident(void **argv, const char *signature,
                                 void (*device)(void **));
void shardx_rt_cuda_resident_config(int64_t repeat);
int64_t shardx_rt_cuda_resident_times(double *out, int64_t n);

// MLIR's GPU runtime entry points, as the generated host code calls them.
void *mgpuModuleLoad(void *data, size_t size);
void *mgpuModuleLoadJIT(void *data, int optLevel);
void mgpuModuleUnload(void *module);
void *mgpuModuleGetFunction(void *module, const char *name);
void mgpuLaunchKernel(void *function, intptr_t gridX, intptr_t gridY,
                      intptr_t gridZ, intptr_t blockX, intptr_t blockY,
                      intptr_t blockZ, int32_t smem, void *stream,
                      void **params, void **extra, size_t paramsCount);
void *mgpuStreamCreate();
void mgpuStreamDestroy(void *stream);
void mgpuStreamSynchronize(void *stream);
void *mgpuMemAlloc(uint64_t bytes, void *stream, bool isHostShared);
void mgpuMemFree(void *ptr, void *stream);
void mgpuMemcpy(void *dst, void *src, size_t bytes, void *stream);
void mgpuMemset32(void *dst, unsigned value, size_t count, void *stream);
void mgpuMemset16(void *dst, unsigned short value, size_t count, void *stream);
void mgpuSetDefaultDevice(int32_t device);
}

#endif // SHARDX_RUNTIME_CUDA_H
