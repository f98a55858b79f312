//===- HostEntry.cpp - shardx_rt_invoke of CPU artifacts ------------------===//
//
// Part of ShardX.
//
// The program memory of CPU artifacts: host buffers, the program's own
// pointers. Its own object file in ShardXRuntime: a CUDA artifact, which
// links ShardXRuntimeCudaCode (cuda/DeviceEntry.cpp) first, takes that
// library's `shardx_rt_invoke` and never pulls this one in.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"
#include "shardx/Runtime/ProgramMemory.h"

#include <cstring>

namespace {

using namespace shardx::rt;

class HostMemory : public ProgramMemory {
public:
  MemorySpace getMemorySpace() const override { return MemorySpace::Host; }
  void copy(void *to, const void *from, size_t bytes) override {
    if (bytes && to != from)
      std::memcpy(to, from, bytes);
  }
  void zero(void *to, size_t bytes) override {
    if (bytes)
      std::memset(to, 0, bytes);
  }
};

} // namespace

extern "C" int shardx_rt_invoke(void (*entry)(void **), void **args,
                                shardx_rt_comm *comm, char *error,
                                int64_t errorSize) {
  HostMemory memory;
  return reportInvocation(
      invokeProgram(entry, args, reinterpret_cast<Communicator *>(comm),
                    memory, FaultPlan::fromEnvironment()),
      error, errorSize);
}
