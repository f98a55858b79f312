//===- Nccl.h - The nccl backend --------------------------------*- C++ -*-===//
//
// Part of ShardX.
//
// One rank per process and GPU on NCCL (library ShardXRuntimeNccl). NCCL is
// opened at run time like the driver and cuBLAS ($SHARDX_NCCL, the loader
// path's libnccl.so.2, PyTorch's nvidia/nccl/lib): nothing of NCCL is
// needed to build or link it. The ncclUniqueId comes from a Bootstrap
// (shardx/Runtime/Bootstrap.h). Collectives take device buffers.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_NCCL_H
#define SHARDX_RUNTIME_NCCL_H

#include "shardx/Runtime/Bootstrap.h"
#include "shardx/Runtime/Communicator.h"

#include <memory>

namespace shardx::rt {

/// Loads NCCL (once per process): ok, or "no NCCL: cannot load ..." with
/// what was tried. A set $SHARDX_NCCL is the only place tried.
Status loadNccl();
/// Loads NCCL, then opens the GPU numbered by the local rank
/// ($SHARDX_LOCAL_RANK, $OMPI_COMM_WORLD_LOCAL_RANK, $LOCAL_RANK,
/// $SHARDX_RANK, else 0) modulo the device count: ok, or "no NCCL: ...",
/// "no CUDA driver: ..." or the device's error.
Status openNcclDevice();
/// The loaded NCCL's version (e.g. 22805), or 0.
int ncclVersion();

/// This process's rank of `meshShape` (whose size must be the bootstrap's
/// world size): openNcclDevice(), then creates the world communicator in
/// NCCL's non-blocking mode with the id rank 0 broadcasts. Returns null with
/// "no NCCL: ...", "no CUDA driver: ..." or NCCL's error in `error`. A
/// collective that does not finish within `timeoutSeconds`, or fails,
/// aborts the communicators (ncclCommAbort) and fails with the cause.
std::unique_ptr<Communicator>
createNcclCommunicator(const std::vector<int64_t> &meshShape,
                       Bootstrap &bootstrap, double timeoutSeconds,
                       std::string &error);

/// The nccl communicator of this process's rank as the executors make it:
/// NCCL and the GPU opened first (their absence is the error to report),
/// then the id through `bootstrap`, or where it is null through the file
/// store of the environment (SHARDX_RANK, SHARDX_WORLD_SIZE,
/// SHARDX_STORE_DIR). Null with the reason in `error`.
std::unique_ptr<Communicator>
connectNccl(const std::vector<int64_t> &meshShape,
            std::unique_ptr<Bootstrap> bootstrap, double timeoutSeconds,
            std::string &error);

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_NCCL_H
