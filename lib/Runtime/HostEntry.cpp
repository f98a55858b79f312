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

namespace {

using namespace shardx::rt;

/// Host buffers, the program's own pointers.
using HostMemory = HostMemoryOps<ProgramMemory>;

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
