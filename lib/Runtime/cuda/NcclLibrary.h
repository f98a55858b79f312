//===- NcclLibrary.h - The NCCL API the nccl backend uses -------*- C++ -*-===//
//
// Part of ShardX.
//
// The few NCCL types and functions NcclCommunicator.cpp calls, declared
// here (no NCCL header), and the library opened at run time (dlopen/dlsym
// through the CUDA runtime's library search). Private to lib/Runtime/cuda.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_RUNTIME_CUDA_NCCLLIBRARY_H
#define SHARDX_LIB_RUNTIME_CUDA_NCCLLIBRARY_H

#include "shardx/Runtime/Communicator.h"

#include <cstddef>
#include <mutex>
#include <string>

namespace shardx::rt::nccl {

using ncclResult_t = int;
using ncclComm_t = struct ncclComm *;
using cudaStream_t = void *;
constexpr ncclResult_t kNcclSuccess = 0, kNcclInProgress = 7;

struct NcclUniqueId {
  char internal[128];
};

/// The prefix of ncclConfig_t up to splitShare, as NCCL 2.18 declared it;
/// NCCL reads the fields that `version` says the caller supplied and
/// defaults the later ones.
struct NcclConfig {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char *netName;
  int splitShare;
};

struct Nccl {
  ncclResult_t (*getVersion)(int *);
  ncclResult_t (*getUniqueId)(NcclUniqueId *);
  ncclResult_t (*commInitRankConfig)(ncclComm_t *, int, NcclUniqueId, int,
                                     NcclConfig *);
  ncclResult_t (*commSplit)(ncclComm_t, int, int, ncclComm_t *, NcclConfig *);
  ncclResult_t (*commAbort)(ncclComm_t);
  ncclResult_t (*commFinalize)(ncclComm_t);
  ncclResult_t (*commDestroy)(ncclComm_t);
  ncclResult_t (*commGetAsyncError)(ncclComm_t, ncclResult_t *);
  const char *(*getErrorString)(ncclResult_t);
  const char *(*getLastError)(ncclComm_t);
  ncclResult_t (*allReduce)(const void *, void *, size_t, int, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*allGather)(const void *, void *, size_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*reduceScatter)(const void *, void *, size_t, int, int,
                                ncclComm_t, cudaStream_t);
  ncclResult_t (*reduce)(const void *, void *, size_t, int, int, int,
                         ncclComm_t, cudaStream_t);
  ncclResult_t (*broadcast)(const void *, void *, size_t, int, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*send)(const void *, size_t, int, int, ncclComm_t,
                       cudaStream_t);
  ncclResult_t (*recv)(void *, size_t, int, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*groupStart)();
  ncclResult_t (*groupEnd)();
  int version = 0;
};

struct Loaded {
  std::once_flag once;
  std::string error;
  Nccl nccl{};
};

/// A config of NCCL's non-blocking mode (the world communicator's).
NcclConfig nonBlockingConfig();
/// ncclDataType_t and ncclRedOp_t values (-1: none).
int ncclType(DType type);
int ncclOp(ReduceOp op);
/// NCCL, opened once; `error` says why it could not be.
Loaded &loaded();

} // namespace shardx::rt::nccl

#endif // SHARDX_LIB_RUNTIME_CUDA_NCCLLIBRARY_H
