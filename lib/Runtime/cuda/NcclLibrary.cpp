//===- NcclLibrary.cpp - The NCCL API the nccl backend uses ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "NcclLibrary.h"

#include "shardx/Runtime/Cuda.h"

#include <climits>
#include <cstring>
#include <string>

namespace shardx::rt::nccl {

NcclConfig nonBlockingConfig() {
  NcclConfig c;
  std::memset(&c, 0, sizeof(c)); // the tail padding too
  c.size = sizeof(NcclConfig);
  c.magic = 0xcafebeef;
  c.version = 21800; // NCCL_VERSION(2, 18, 0): the fields above
  c.blocking = 0;
  c.cgaClusterSize = c.minCTAs = c.maxCTAs = c.splitShare = INT_MIN;
  c.netName = nullptr;
  return c;
}

int ncclType(DType type) {
  switch (type) {
  case DType::F32:
    return 7; // ncclFloat32
  case DType::F64:
    return 8; // ncclFloat64
  case DType::I32:
    return 2; // ncclInt32
  case DType::I64:
    return 4; // ncclInt64
  case DType::BF16:
    return 9; // ncclBfloat16
  case DType::F16:
    return 6; // ncclFloat16
  case DType::I16:
  case DType::I8:
  case DType::I1:
  case DType::Index: // not collective types (isCollectiveType)
    break;
  }
  return -1;
}

int ncclOp(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
    return 0; // ncclSum
  case ReduceOp::Prod:
    return 1; // ncclProd
  case ReduceOp::Max:
    return 2; // ncclMax
  case ReduceOp::Min:
    return 3; // ncclMin
  case ReduceOp::Avg:
    return 4; // ncclAvg (NCCL >= 2.10)
  }
  return -1;
}

Loaded &loaded() {
  static Loaded *l = new Loaded; // never destroyed
  std::call_once(l->once, [] {
    Loaded &s = *l;
    std::string tried;
    void *lib = openCudaLibrary("SHARDX_NCCL", {"libnccl.so.2", "libnccl.so"},
                                tried, /*envOnly=*/true);
    if (!lib) {
      s.error = "no NCCL: cannot load libnccl.so.2 (set SHARDX_NCCL to its "
                "path); tried:" +
                tried;
      return;
    }
    Nccl &n = s.nccl;
    std::string err;
    bool ok =
        resolveSymbol(lib, n.getVersion, "ncclGetVersion", err) &&
        resolveSymbol(lib, n.getUniqueId, "ncclGetUniqueId", err) &&
        resolveSymbol(lib, n.commInitRankConfig, "ncclCommInitRankConfig",
                      err) &&
        resolveSymbol(lib, n.commSplit, "ncclCommSplit", err) &&
        resolveSymbol(lib, n.commAbort, "ncclCommAbort", err) &&
        resolveSymbol(lib, n.commFinalize, "ncclCommFinalize", err) &&
        resolveSymbol(lib, n.commDestroy, "ncclCommDestroy", err) &&
        resolveSymbol(lib, n.commGetAsyncError, "ncclCommGetAsyncError", err) &&
        resolveSymbol(lib, n.getErrorString, "ncclGetErrorString", err) &&
        resolveSymbol(lib, n.getLastError, "ncclGetLastError", err) &&
        resolveSymbol(lib, n.allReduce, "ncclAllReduce", err) &&
        resolveSymbol(lib, n.allGather, "ncclAllGather", err) &&
        resolveSymbol(lib, n.reduceScatter, "ncclReduceScatter", err) &&
        resolveSymbol(lib, n.reduce, "ncclReduce", err) &&
        resolveSymbol(lib, n.broadcast, "ncclBroadcast", err) &&
        resolveSymbol(lib, n.send, "ncclSend", err) &&
        resolveSymbol(lib, n.recv, "ncclRecv", err) &&
        resolveSymbol(lib, n.groupStart, "ncclGroupStart", err) &&
        resolveSymbol(lib, n.groupEnd, "ncclGroupEnd", err);
    if (!ok) {
      s.error = "no NCCL: " + err + " (NCCL 2.18 or later is needed)";
      return;
    }
    n.getVersion(&n.version);
    if (n.version < 21800)
      s.error = "no NCCL: version " + std::to_string(n.version) +
                " found, 2.18 or later is needed (ncclCommSplit)";
  });
  return *l;
}

} // namespace shardx::rt::nccl
