//===- DeviceEntry.cpp - shardx_rt_invoke of CUDA artifacts ---------------===//
//
// Part of ShardX.
//
// The program memory of CUDA artifacts: device memory of this artifact's
// CUDA runtime (the launcher's copy of the runtime has its own). The
// communicator is told the rank's stream (orderAfterStream): a
// stream-ordered one (nccl) orders its collectives after the stream's work
// and the stream after them with events, and the run ends with its
// `finish` (the errors of collectives still in flight); for the others
// (cuda-local) every collective first waits for the rank's stream. The
// steps that pack on the host stage through host memory (stageHostBuffers).
// Linked into CUDA artifacts before ShardXRuntime (whose HostEntry.cpp
// they then do not pull in).
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"
#include "shardx/Runtime/Cuda.h"
#include "shardx/Runtime/CudaLocal.h"
#include "shardx/Runtime/ProgramMemory.h"

namespace {

using namespace shardx::rt;

class DeviceMemory : public ProgramMemory {
public:
  MemorySpace getMemorySpace() const override { return MemorySpace::Device; }

  Status open() override {
    char error[2048] = {0};
    if (shardx_rt_cuda_init(error, sizeof(error)))
      return Status::error(error);
    return Status::ok();
  }

  void attach(Communicator &comm) override {
    streamOrdered = comm.orderAfterStream(shardx_rt_cuda_stream());
  }

  void settle() override {
    if (!streamOrdered)
      shardx_rt_cuda_synchronize();
  }

  void copy(void *to, const void *from, size_t bytes) override {
    if (bytes && to != from)
      shardx_rt_cuda_copy(to, from, static_cast<int64_t>(bytes));
  }

  void zero(void *to, size_t bytes) override {
    if (bytes)
      shardx_rt_cuda_zero_on(to, static_cast<int64_t>(bytes),
                             shardx_rt_cuda_stream());
  }

  std::unique_ptr<Communicator> stageHost(Communicator &comm) override {
    return stageHostBuffers(comm);
  }

  Status close(Communicator *comm) override {
    // The collectives still in flight first (their errors fail the run),
    // then the host waits for the rank's stream, which waits for them:
    // after a failure too, so that no queued work outlives the run.
    Status finished = comm ? comm->finish() : Status::ok();
    shardx_rt_cuda_synchronize();
    return finished;
  }

private:
  /// Whether the communicator orders its collectives after the rank's
  /// stream itself (nccl).
  bool streamOrdered = false;
};

} // namespace

extern "C" int shardx_rt_invoke(void (*entry)(void **), void **args,
                                shardx_rt_comm *comm, char *error,
                                int64_t errorSize) {
  DeviceMemory memory;
  return reportInvocation(
      invokeProgram(entry, args, reinterpret_cast<Communicator *>(comm),
                    memory, FaultPlan::fromEnvironment()),
      error, errorSize);
}
