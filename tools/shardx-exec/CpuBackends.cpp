//===- CpuBackends.cpp - The backends of shardx-exec and shardx-run -------===//
//
// Part of ShardX.
//
// The one place where the CPU executors' backends depend on the build:
// `threads` always; `mpi`, and `nccl` with it (a process per GPU under
// mpirun, the NCCL id by MPI_Bcast, or the file store), only where CMake
// found MPI (SHARDX_ENABLE_MPI, which defines SHARDX_HAVE_MPI: a configure
// option, so it stays a preprocessor condition, here only). NCCL and the
// CUDA driver are opened at run time: this links no CUDA library.
// cuda-local is shardx-gpu-exec's.
//
//===----------------------------------------------------------------------===//

#include "ExecCommon.h"

#ifdef SHARDX_HAVE_MPI
#include "shardx/Runtime/Mpi.h"
#endif

using namespace shardx;
using namespace shardx::tools;

static BackendTable makeBackends() {
  BackendTable table;
  Backend cudaLocal = missingBackend(
      "cuda-local", "this build has no cuda-local backend (use shardx-gpu-exec)");
#ifdef SHARDX_HAVE_MPI
  Backend mpi;
  mpi.name = "mpi";
  mpi.connect = rt::createMpiCommunicator;
  mpi.reportsBlocked = true;
  // Under mpirun (MPI initialized by initMpiIfRequested): the NCCL id by
  // MPI_Bcast; otherwise the file store from the environment.
  auto mpiBootstrap = []() -> std::unique_ptr<rt::Bootstrap> {
    return rt::isMpiInitialized() ? rt::createMpiBootstrap() : nullptr;
  };
  table.backends = {threadsBackend(), std::move(mpi), std::move(cudaLocal),
                    ncclBackend(mpiBootstrap)};
  table.initProcesses = rt::initMpi;
  table.finalizeProcesses = rt::finalizeMpi;
#else
  table.backends = {
      threadsBackend(), missingBackend("mpi", "this build has no mpi backend"),
      std::move(cudaLocal),
      missingBackend("nccl",
                     "this build has no nccl backend (use shardx-gpu-exec)")};
#endif
  return table;
}

const BackendTable &tools::getBackends() {
  static const BackendTable table = makeBackends();
  return table;
}
