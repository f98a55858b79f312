//===- EntryStaging.cpp - The launcher's buffers of CUDA artifacts --------===//
//
// Part of ShardX.
//
// What an artifact's `shardx_entry_<f>(argv)` and `shardx_entry_<f>_resident`
// do around the program (Cuda.h): copy the launcher's host buffers to the
// device and the results back, and time device-resident runs. Built on the
// runtime's C entry points (CudaRuntime.cpp) only.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Cuda.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {

[[noreturn]] void fatal(const char *message) {
  std::fprintf(stderr, "shardx: %s\n", message);
  std::fflush(stderr);
  std::_Exit(1);
}


/// One buffer of an entry point's calling convention.
struct Buffer {
  int64_t rank;
  int64_t bytes;
};

/// "O<rank>:<bytes> ... I<rank>:<bytes> ..." (see lib/Compiler/GpuTransforms.cpp).
void parseSignature(const char *sig, std::vector<Buffer> &outputs,
                    std::vector<Buffer> &inputs) {
  const char *p = sig;
  while (*p) {
    char kind = *p++;
    char *end;
    long long rank = std::strtoll(p, &end, 10);
    long long bytes = *end == ':' ? std::strtoll(end + 1, &end, 10) : 0;
    (kind == 'O' ? outputs : inputs).push_back({rank, bytes});
    p = end;
    while (*p == ' ')
      ++p;
  }
}

/// Elements from the aligned pointer to one past the last element of a
/// memref descriptor {allocated, aligned, offset, sizes, strides}.
int64_t extentOf(const int64_t *desc, int64_t rank) {
  int64_t last = desc[2];
  for (int64_t d = 0; d < rank; ++d) {
    if (desc[3 + d] == 0)
      return 0;
    last += (desc[3 + d] - 1) * desc[3 + rank + d];
  }
  return last + 1;
}

/// The device-side arguments of one call, between stage_in and stage_out.
struct StagedCall {
  std::vector<void *> argv;
  std::vector<int64_t> results;
  std::vector<std::vector<int64_t>> descs;
  std::vector<void *> staged;

  /// The device buffers of the program's results (their allocated
  /// pointers, `outputs` giving the descriptors' ranks), each once and
  /// without the staged inputs a result may be.
  std::vector<void *> resultBuffers(const std::vector<Buffer> &outputs) const {
    std::vector<void *> buffers;
    size_t w = 0;
    for (const Buffer &o : outputs) {
      auto *p = reinterpret_cast<void *>(results[w]);
      if (std::find(staged.begin(), staged.end(), p) == staged.end() &&
          std::find(buffers.begin(), buffers.end(), p) == buffers.end())
        buffers.push_back(p);
      w += 3 + 2 * o.rank;
    }
    return buffers;
  }

  /// Records the call under its argv (what the wrapper passes back).
  void *enroll() {
    std::lock_guard<std::mutex> lock(mutex());
    calls()[argv.data()] = this;
    return argv.data();
  }
  static std::mutex &mutex() {
    static std::mutex m;
    return m;
  }
  static std::unordered_map<void *, StagedCall *> &calls() {
    static auto *c = new std::unordered_map<void *, StagedCall *>;
    return *c;
  }
  static StagedCall *lookup(void *key) {
    std::lock_guard<std::mutex> lock(mutex());
    auto it = calls().find(key);
    if (it == calls().end())
      fatal("shardx_rt_cuda_stage_out without stage_in");
    return it->second;
  }
  static void release(StagedCall *call) {
    std::lock_guard<std::mutex> lock(mutex());
    calls().erase(call->argv.data());
    delete call;
  }
};

} // namespace

extern "C" {


void *shardx_rt_cuda_stage_in(void **argv, const char *signature) {
  std::vector<Buffer> outputs, inputs;
  parseSignature(signature, outputs, inputs);
  auto *call = new StagedCall;
  call->argv.reserve(1 + inputs.size());
  size_t resultWords = 0;
  for (const Buffer &o : outputs)
    resultWords += 3 + 2 * o.rank;
  call->results.assign(std::max<size_t>(resultWords, 1), 0);
  if (!outputs.empty())
    call->argv.push_back(call->results.data());
  size_t first = outputs.empty() ? 0 : 1;
  // The last call's stage_out synchronized the stream: the pinned staging
  // memory is free again.
  shardx_rt_cuda_staging_reset();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t *host = static_cast<const int64_t *>(argv[first + i]);
    int64_t rank = inputs[i].rank, bytes = inputs[i].bytes;
    std::vector<int64_t> desc(host, host + 3 + 2 * rank);
    int64_t extent = extentOf(desc.data(), rank);
    void *dev = mgpuMemAlloc(uint64_t(std::max<int64_t>(1, extent * bytes)),
                             nullptr, false);
    if (extent > 0)
      shardx_rt_cuda_stage_to_device(dev, reinterpret_cast<void *>(desc[1]),
                                     extent * bytes);
    call->staged.push_back(dev);
    desc[0] = desc[1] = reinterpret_cast<int64_t>(dev);
    call->descs.push_back(std::move(desc));
  }
  for (auto &d : call->descs)
    call->argv.push_back(d.data());
  return call->enroll();
}

void shardx_rt_cuda_stage_out(void **argv, void *staged,
                              const char *signature) {
  StagedCall *call = StagedCall::lookup(staged);
  std::vector<Buffer> outputs, inputs;
  parseSignature(signature, outputs, inputs);
  shardx_rt_cuda_synchronize();
  auto *hostResults = static_cast<int64_t *>(argv[0]);
  size_t w = 0;
  for (const Buffer &o : outputs) {
    int64_t *desc = call->results.data() + w;
    int64_t extent = extentOf(desc, o.rank);
    void *host = std::malloc(size_t(std::max<int64_t>(1, extent * o.bytes)));
    if (extent > 0)
      shardx_rt_cuda_copy(host, reinterpret_cast<void *>(desc[1]),
                          extent * o.bytes);
    std::memcpy(hostResults + w, desc, sizeof(int64_t) * (3 + 2 * o.rank));
    hostResults[w] = hostResults[w + 1] = reinterpret_cast<int64_t>(host);
    w += 3 + 2 * o.rank;
  }
  // Every device buffer once (a result may be returned twice, or be a
  // staged input).
  for (void *p : call->staged)
    mgpuMemFree(p, nullptr);
  for (void *p : call->resultBuffers(outputs))
    mgpuMemFree(p, nullptr);
  StagedCall::release(call);
}

//===----------------------------------------------------------------------===//
// Device-resident runs (shardx_entry_<f>_resident of the artifact)
//===----------------------------------------------------------------------===//

// Process-wide: the launcher sets them, rank threads run the program. With
// several ranks the times are those of the rank that finished last.
static std::mutex residentMutex;
static int64_t residentRepeat = 1;
static std::vector<double> residentTimes;

void shardx_rt_cuda_resident_config(int64_t repeat) {
  std::lock_guard<std::mutex> lock(residentMutex);
  residentRepeat = std::max<int64_t>(1, repeat);
}

int64_t shardx_rt_cuda_resident_times(double *out, int64_t n) {
  std::lock_guard<std::mutex> lock(residentMutex);
  int64_t have = static_cast<int64_t>(residentTimes.size());
  for (int64_t i = 0; i < std::min(have, n); ++i)
    out[i] = residentTimes[i];
  return have;
}

void shardx_rt_cuda_run_resident(void **argv, const char *signature,
                                 void (*device)(void **)) {
  void *staged = shardx_rt_cuda_stage_in(argv, signature);
  StagedCall *call = StagedCall::lookup(staged);
  std::vector<Buffer> outputs, inputs;
  parseSignature(signature, outputs, inputs);
  int64_t repeat;
  {
    std::lock_guard<std::mutex> lock(residentMutex);
    repeat = residentRepeat;
  }
  std::vector<double> times;
  shardx_rt_cuda_synchronize();
  for (int64_t run = 0; run <= repeat; ++run) {
    // The previous run's results go back to the cache, in stream order.
    if (run > 0)
      for (void *p : call->resultBuffers(outputs))
        mgpuMemFree(p, nullptr);
    auto start = std::chrono::steady_clock::now();
    device(static_cast<void **>(staged));
    shardx_rt_cuda_synchronize();
    std::chrono::duration<double> took =
        std::chrono::steady_clock::now() - start;
    if (run > 0)
      times.push_back(took.count());
  }
  shardx_rt_cuda_stage_out(argv, staged, signature);
  std::lock_guard<std::mutex> lock(residentMutex);
  residentTimes = std::move(times);
}

} // extern "C"
