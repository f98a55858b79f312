//===- CudaLocal.h - N ranks on one GPU -------------------------*- C++ -*-===//
//
// Part of ShardX.
//
// The `cuda-local` backend (library ShardXRuntimeCudaLocal): every rank is a
// thread of this process on CUDA device 0, and the collectives take device
// buffers. NCCL refuses two ranks on one device, so this is how multi-rank
// GPU programs run on a single GPU. No CUDA build or link dependency.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_CUDALOCAL_H
#define SHARDX_RUNTIME_CUDALOCAL_H

#include "shardx/Runtime/Communicator.h"

#include <memory>

namespace shardx::rt {

/// Runs `body` on every rank of `meshShape` as threads of this process,
/// each with a `cuda-local` communicator whose collectives read and write
/// device memory (device-to-device copies and reduction kernels on the
/// rank's stream, completed before the group meets). Where no GPU can be
/// used every rank fails with the driver's error ("no CUDA driver: ...").
std::vector<Status>
runCudaLocal(const std::vector<int64_t> &meshShape,
             const std::function<Status(Communicator &)> &body,
             double timeoutSeconds = 60.0);

/// A communicator that takes host buffers and runs `inner`'s collectives
/// (which take device buffers) on device copies of them: the host-staged
/// reshard steps of CUDA artifacts and the conformance suite's adaptor.
/// `inner` must outlive it.
std::unique_ptr<Communicator> stageHostBuffers(Communicator &inner);

/// Whether this build holds the reduction kernels (nvcc was found when it
/// was configured); without them reductions fail with a message saying so.
bool cudaLocalHasKernels();

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_CUDALOCAL_H
