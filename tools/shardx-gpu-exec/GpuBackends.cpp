//===- GpuBackends.cpp - The backends of shardx-gpu-exec ------------------===//
//
// Part of ShardX.
//
// shardx-gpu-exec links no MPI: `threads`, `cuda-local` (every rank a
// thread on one GPU) and `nccl` (a process per GPU, the NCCL id through
// the file store of SHARDX_RANK / SHARDX_WORLD_SIZE / SHARDX_STORE_DIR).
//
//===----------------------------------------------------------------------===//

#include "ExecCommon.h"

#include "shardx/Runtime/CudaLocal.h"

using namespace shardx;
using namespace shardx::tools;

static BackendTable makeBackends() {
  BackendTable table;
  table.backends = {
      threadsBackend(),
      rankThreadsBackend("cuda-local", rt::runCudaLocal,
                         /*reportsBlocked=*/false),
      ncclBackend(),
      missingBackend("mpi", "this build has no mpi backend"),
  };
  return table;
}

const BackendTable &tools::getBackends() {
  static const BackendTable table = makeBackends();
  return table;
}
