//===- CudaLocalCommunicator.cpp - N ranks on one GPU ---------------------===//
//
// Part of ShardX.
//
// The `cuda-local` backend: the threads backend's collectives (publish,
// meet, move, meet; lib/Runtime/cpu/ThreadsCommunicator.cpp) with the data
// moved on the device. Each rank copies with cuMemcpyAsync on its own
// stream and reduces with the kernels of CollectiveKernels.cu (built by nvcc
// and ptxas, embedded as a fat binary, loaded on first use), and waits for
// its stream before every meeting after which peers read what it wrote, and
// before a collective returns. Every call goes through the entry points of
// the CUDA runtime (shardx/Runtime/Cuda.h), which open the driver at run
// time.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Cuda.h"
#include "shardx/Runtime/CudaLocal.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string>

namespace shardx::rt {
namespace {

// kCollectiveKernelsImage: CollectiveKernels.cu's fat binary (or PTX), only
// a NUL when nvcc was not found at configure time (CMakeLists.txt).
#include "CollectiveKernels.image.inc"

/// As in CollectiveKernels.cu.
constexpr size_t kMaxMembers = 16;
struct Inputs {
  const void *p[kMaxMembers];
};

/// The reduction kernel for `type` and `op` (loaded once per process).
void *reductionKernel(DType type, ReduceOp op) {
  static std::mutex mutex;
  static void *module = nullptr;
  static std::map<std::pair<DType, ReduceOp>, void *> kernels;
  std::lock_guard<std::mutex> lock(mutex);
  if (!module)
    module =
        mgpuModuleLoad(const_cast<unsigned char *>(kCollectiveKernelsImage),
                       sizeof(kCollectiveKernelsImage));
  void *&fn = kernels[{type, op}];
  if (!fn) {
    std::string name = std::string("shardx_reduce_") + stringifyDType(type) +
                       "_" + stringifyReduceOp(op);
    fn = mgpuModuleGetFunction(module, name.c_str());
  }
  return fn;
}

/// Device memory of this rank: copies and kernels on the calling thread's
/// stream (the runtime's one stream per thread).
class DeviceOps : public BufferOps {
public:
  MemorySpace getMemorySpace() const override { return MemorySpace::Device; }
  ~DeviceOps() override {
    if (buffer)
      shardx_rt_cuda_free(buffer);
  }

  void copy(void *to, const void *from, size_t bytes) override {
    if (bytes && to != from)
      mgpuMemcpy(to, const_cast<void *>(from), bytes, nullptr);
  }

  void zero(void *to, size_t bytes) override {
    // Every element type is a whole number of 32-bit words.
    if (bytes)
      mgpuMemset32(to, 0, bytes / 4, nullptr);
  }

  Status reduce(void *out, const std::vector<const char *> &in, size_t count,
                DType type, ReduceOp op) override {
    if (in.size() > kMaxMembers)
      return Status::error("cuda-local reduces over at most " +
                           std::to_string(kMaxMembers) + " ranks, not " +
                           std::to_string(in.size()));
    if (!cudaLocalHasKernels())
      return Status::error("cuda-local: this build has no reduction kernels "
                           "(nvcc was not found when it was configured)");
    if (count == 0)
      return Status::ok();
    Inputs inputs{};
    std::copy(in.begin(), in.end(), inputs.p);
    int n = static_cast<int>(in.size());
    int64_t elements = static_cast<int64_t>(count);
    void *params[] = {&out, &inputs, &n, &elements};
    constexpr int64_t kThreads = 256, kMaxBlocks = 4096;
    int64_t blocks =
        std::min<int64_t>((elements + kThreads - 1) / kThreads, kMaxBlocks);
    mgpuLaunchKernel(reductionKernel(type, op), blocks, 1, 1, kThreads, 1, 1, 0,
                     mgpuStreamCreate(), params, nullptr, 4);
    return Status::ok();
  }

  char *scratch(size_t bytes) override {
    if (capacity < bytes) {
      if (buffer) {
        shardx_rt_cuda_synchronize();
        shardx_rt_cuda_free(buffer);
      }
      buffer = static_cast<char *>(
          shardx_rt_cuda_alloc(static_cast<int64_t>(bytes)));
      capacity = bytes;
    }
    return buffer;
  }

  Status complete() override {
    shardx_rt_cuda_synchronize();
    return Status::ok();
  }

private:
  char *buffer = nullptr;
  size_t capacity = 0;
};

} // namespace

bool cudaLocalHasKernels() { return sizeof(kCollectiveKernelsImage) > 1; }

std::vector<Status>
runCudaLocal(const std::vector<int64_t> &meshShape,
             const std::function<Status(Communicator &)> &body,
             double timeoutSeconds) {
  char error[4096];
  if (shardx_rt_cuda_init(error, sizeof(error))) {
    int64_t size = 1;
    for (int64_t n : meshShape)
      size *= n;
    return std::vector<Status>(std::max<int64_t>(size, 1),
                               Status::error(error));
  }
  return runThreadsWith(
      meshShape, "cuda-local",
      [](int64_t) -> std::unique_ptr<BufferOps> {
        return std::make_unique<DeviceOps>();
      },
      body, timeoutSeconds);
}

} // namespace shardx::rt
