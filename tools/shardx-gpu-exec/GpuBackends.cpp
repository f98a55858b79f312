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
  Backend threads;
  threads.name = "threads";
  threads.rankThreads = rt::runThreads;
  threads.reportsBlocked = true;
  table.backends.push_back(std::move(threads));
  Backend cudaLocal;
  cudaLocal.name = "cuda-local";
  cudaLocal.rankThreads = rt::runCudaLocal;
  table.backends.push_back(std::move(cudaLocal));
  table.backends.push_back(ncclBackend());
  table.backends.push_back(
      missingBackend("mpi", "this build has no mpi backend"));
  return table;
}

const BackendTable &tools::getBackends() {
  static const BackendTable table = makeBackends();
  return table;
}
