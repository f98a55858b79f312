//===- NcclCommunicator.cpp - One rank per process and GPU on NCCL --------===//
//
// Part of ShardX.
//
// The `nccl` backend. NCCL is opened at run time (dlopen/dlsym, through the
// CUDA runtime's library search) and the few NCCL types and functions used
// are declared here, so neither building nor linking needs NCCL.
//
// The world communicator is created in NCCL's non-blocking mode
// (ncclConfig_t.blocking = 0) from the unique id rank 0 hands out through
// the bootstrap; the communicator of each group of mesh axes is split from
// it on first use (ncclCommSplit, color: the group's first global rank,
// key: the rank's index in the group). Every collective:
//   1. makes the collective stream wait for the compute stream (an event),
//   2. enqueues the NCCL calls on the collective stream (send/recv pairs in
//      one ncclGroupStart/End for the uneven and point-to-point forms),
//   3. polls ncclCommGetAsyncError and the collective stream until the work
//      is done, an error is reported, or the timeout passes; on an error or
//      a timeout every communicator of the rank is aborted (ncclCommAbort)
//      and the call fails with the cause, and so do all later calls,
//   4. makes the compute stream wait for the collective stream (an event).
// The host waits in step 3 so that a dead or silent peer is a bounded
// error; the compute stream's queued work runs on meanwhile.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Nccl.h"

#include "shardx/Runtime/Cuda.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

namespace shardx::rt {
namespace {

//===----------------------------------------------------------------------===//
// The NCCL API used here (declared here: no NCCL header)
//===----------------------------------------------------------------------===//

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

// ncclDataType_t and ncclRedOp_t values.
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

int64_t envInt(std::initializer_list<const char *> names, int64_t fallback) {
  for (const char *name : names)
    if (const char *v = std::getenv(name); v && *v) {
      char *end = nullptr;
      long long x = std::strtoll(v, &end, 10);
      if (!*end && x >= 0)
        return x;
    }
  return fallback;
}

//===----------------------------------------------------------------------===//
// The communicator
//===----------------------------------------------------------------------===//

class NcclCommunicator : public Communicator {
public:
  NcclCommunicator(std::vector<int64_t> meshShape, int64_t rank, double timeout,
                   ncclComm_t world, void *stream)
      : Communicator(std::move(meshShape), rank), timeout(timeout),
        world(world), stream(stream), nccl(loaded().nccl) {}

  ~NcclCommunicator() override {
    if (barrierBuffer)
      shardx_rt_cuda_free(barrierBuffer);
    if (scratch)
      shardx_rt_cuda_free(scratch);
    // Destroy without ncclCommFinalize, which waits for peers that may be
    // gone: every collective completed before its call returned. Aborted
    // communicators were freed by ncclCommAbort.
    if (!aborted) {
      for (auto &[axes, comm] : groups)
        if (comm != world)
          nccl.commDestroy(comm);
      nccl.commDestroy(world);
    }
  }

  const char *getBackendName() const override { return "nccl"; }

  /// Waits for `comm`'s pending non-blocking call (init, split, group end).
  Status waitComm(ncclComm_t comm, const std::string &what) {
    auto start = std::chrono::steady_clock::now();
    for (;;) {
      ncclResult_t r = kNcclInProgress;
      nccl.commGetAsyncError(comm, &r);
      if (r == kNcclSuccess)
        return Status::ok();
      if (r != kNcclInProgress)
        return fail(what + ": " + describe(r, comm));
      if (elapsed(start) > timeout)
        return fail(what + " did not finish in " + seconds() +
                    " (a rank died, stopped answering or never started)");
      std::this_thread::yield();
    }
  }

  Status allGather(const void *send, void *recv,
                   const std::vector<size_t> &counts, DType type,
                   const std::vector<int64_t> &axes) override {
    return run(
        "all_gather", axes, counts.size(), [&](ncclComm_t c, int64_t me) {
          int t = ncclType(type);
          size_t bytes = dtypeSize(type);
          bool even = true;
          for (size_t n : counts)
            even &= n == counts[0];
          if (even)
            return nccl.allGather(send, recv, counts[0], t, c, stream);
          // Uneven: every member sends its piece to every member.
          size_t offset = 0;
          ncclResult_t r = nccl.groupStart();
          for (size_t j = 0; j < counts.size() && r == kNcclSuccess; ++j) {
            if (counts[me])
              r = nccl.send(send, counts[me], t, int(j), c, stream);
            if (counts[j] && r == kNcclSuccess)
              r = nccl.recv(static_cast<char *>(recv) + offset * bytes,
                            counts[j], t, int(j), c, stream);
            offset += counts[j];
          }
          ncclResult_t end = nccl.groupEnd();
          return r != kNcclSuccess ? r : end;
        });
  }

  Status reduceScatter(const void *send, void *recv,
                       const std::vector<size_t> &counts, DType type,
                       ReduceOp op, const std::vector<int64_t> &axes) override {
    return run(
        "reduce_scatter", axes, counts.size(), [&](ncclComm_t c, int64_t me) {
          int t = ncclType(type), o = ncclOp(op);
          size_t bytes = dtypeSize(type);
          bool even = true;
          for (size_t n : counts)
            even &= n == counts[0];
          if (even)
            return nccl.reduceScatter(send, recv, counts[0], t, o, c, stream);
          // Uneven: one reduce per piece, rooted at its owner.
          size_t offset = 0;
          ncclResult_t r = nccl.groupStart();
          for (size_t j = 0; j < counts.size() && r == kNcclSuccess; ++j) {
            if (counts[j])
              r = nccl.reduce(static_cast<const char *>(send) + offset * bytes,
                              int64_t(j) == me ? recv : nullptr, counts[j], t,
                              o, int(j), c, stream);
            offset += counts[j];
          }
          ncclResult_t end = nccl.groupEnd();
          return r != kNcclSuccess ? r : end;
        });
  }

  Status allReduce(const void *send, void *recv, size_t count, DType type,
                   ReduceOp op, const std::vector<int64_t> &axes) override {
    return run("all_reduce", axes, kAnySize, [&](ncclComm_t c, int64_t) {
      return nccl.allReduce(send, recv, count, ncclType(type), ncclOp(op), c,
                            stream);
    });
  }

  Status allToAll(const void *send, const std::vector<size_t> &sendCounts,
                  void *recv, const std::vector<size_t> &recvCounts, DType type,
                  const std::vector<int64_t> &axes) override {
    if (sendCounts.size() != recvCounts.size())
      return Status::error("nccl: all_to_all with " +
                           std::to_string(sendCounts.size()) +
                           " send counts and " +
                           std::to_string(recvCounts.size()) + " recv counts");
    return run(
        "all_to_all", axes, sendCounts.size(), [&](ncclComm_t c, int64_t) {
          int t = ncclType(type);
          size_t bytes = dtypeSize(type), sendOffset = 0, recvOffset = 0;
          ncclResult_t r = nccl.groupStart();
          for (size_t j = 0; j < sendCounts.size() && r == kNcclSuccess; ++j) {
            if (sendCounts[j])
              r = nccl.send(static_cast<const char *>(send) +
                                sendOffset * bytes,
                            sendCounts[j], t, int(j), c, stream);
            if (recvCounts[j] && r == kNcclSuccess)
              r = nccl.recv(static_cast<char *>(recv) + recvOffset * bytes,
                            recvCounts[j], t, int(j), c, stream);
            sendOffset += sendCounts[j];
            recvOffset += recvCounts[j];
          }
          ncclResult_t end = nccl.groupEnd();
          return r != kNcclSuccess ? r : end;
        });
  }

  Status permute(const void *send, void *recv, size_t count, DType type,
                 const std::vector<std::pair<int64_t, int64_t>> &pairs,
                 const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes, "permute"); !s)
      return s;
    int64_t members = static_cast<int64_t>(getGroup(axes).size());
    int64_t me = getGroupIndex(axes);
    bool isTarget = false;
    for (auto [source, target] : pairs) {
      if (source < 0 || source >= members || target < 0 || target >= members)
        return Status::error("nccl: permute pair (" + std::to_string(source) +
                             ", " + std::to_string(target) +
                             ") outside a group of " + std::to_string(members));
      isTarget |= target == me;
    }
    // A send buffer that overlaps the receive buffer is copied first; a
    // member that is no target receives zeros (both on the compute stream,
    // which the collective stream then waits for).
    send = stageIfOverlapping(send, count * dtypeSize(type), recv,
                              count * dtypeSize(type));
    if (!isTarget && count)
      mgpuMemset32(recv, 0, count * dtypeSize(type) / 4, nullptr);
    return run("permute", axes, kAnySize, [&](ncclComm_t c, int64_t) {
      int t = ncclType(type);
      ncclResult_t r = nccl.groupStart();
      for (auto [source, target] : pairs) {
        if (!count || r != kNcclSuccess)
          break;
        if (source == me)
          r = nccl.send(send, count, t, int(target), c, stream);
        if (target == me && r == kNcclSuccess)
          r = nccl.recv(recv, count, t, int(source), c, stream);
      }
      ncclResult_t end = nccl.groupEnd();
      return r != kNcclSuccess ? r : end;
    });
  }

  Status broadcast(void *buffer, size_t count, DType type, int64_t root,
                   const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes, "broadcast"); !s)
      return s;
    int64_t members = static_cast<int64_t>(getGroup(axes).size());
    if (root < 0 || root >= members)
      return Status::error("nccl: broadcast root " + std::to_string(root) +
                           " outside a group of " + std::to_string(members));
    return run("broadcast", axes, kAnySize, [&](ncclComm_t c, int64_t) {
      return nccl.broadcast(buffer, buffer, count, ncclType(type), int(root), c,
                            stream);
    });
  }

  Status barrier(const std::vector<int64_t> &axes) override {
    if (!barrierBuffer)
      barrierBuffer = shardx_rt_cuda_alloc(sizeof(int32_t));
    return run("barrier", axes, kAnySize, [&](ncclComm_t c, int64_t) {
      return nccl.allReduce(barrierBuffer, barrierBuffer, 1,
                            ncclType(DType::I32), ncclOp(ReduceOp::Sum), c,
                            stream);
    });
  }

  void abort(const std::string &why) override {
    if (aborted)
      return;
    aborted = true;
    cause = why;
    for (auto &[axes, comm] : groups)
      if (comm != world)
        nccl.commAbort(comm);
    nccl.commAbort(world);
  }

private:
  static double elapsed(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  }

  std::string seconds() const {
    std::ostringstream os;
    os << timeout << " s";
    return os.str();
  }

  std::string describe(ncclResult_t r, ncclComm_t comm) const {
    std::string text = nccl.getErrorString(r);
    if (const char *last = nccl.getLastError(comm); last && *last)
      text += std::string(" (") + last + ")";
    return text;
  }

  /// `send`, or a copy of it in this rank's scratch buffer (queued on the
  /// compute stream) when it overlaps `recv`.
  const void *stageIfOverlapping(const void *send, size_t sendBytes,
                                 const void *recv, size_t recvBytes) {
    auto s = reinterpret_cast<uintptr_t>(send);
    auto r = reinterpret_cast<uintptr_t>(recv);
    if (!sendBytes || !recvBytes || s + sendBytes <= r || r + recvBytes <= s)
      return send;
    if (scratchBytes < sendBytes) {
      if (scratch)
        shardx_rt_cuda_free(scratch);
      scratch = shardx_rt_cuda_alloc(static_cast<int64_t>(sendBytes));
      scratchBytes = sendBytes;
    }
    mgpuMemcpy(scratch, const_cast<void *>(send), sendBytes, nullptr);
    return scratch;
  }

  /// Aborts every communicator of this rank and fails with `what`.
  Status fail(const std::string &what) {
    std::string message = "nccl: rank " + std::to_string(rank) + ": " + what;
    abort(message);
    return Status::error(message);
  }

  /// The communicator of this rank's group over `axes` (split from the
  /// world on first use; every rank asks for the same axes in the same
  /// order, as SPMD programs do).
  Status groupComm(const std::vector<int64_t> &axes, ncclComm_t &comm) {
    auto it = groups.find(axes);
    if (it != groups.end()) {
      comm = it->second;
      return Status::ok();
    }
    std::vector<int64_t> members = getGroup(axes);
    if (static_cast<int64_t>(members.size()) == size) {
      // The whole world: the world communicator when its order is the
      // group's order (axes in mesh order).
      bool identity = true;
      for (size_t i = 0; i < members.size(); ++i)
        identity &= members[i] == int64_t(i);
      if (identity) {
        groups[axes] = comm = world;
        return Status::ok();
      }
    }
    int64_t color = members[0];
    for (int64_t m : members)
      color = std::min(color, m);
    NcclConfig config = nonBlockingConfig();
    ncclComm_t split = nullptr;
    ncclResult_t r = nccl.commSplit(world, int(color), int(getGroupIndex(axes)),
                                    &split, &config);
    if (r != kNcclSuccess && r != kNcclInProgress)
      return fail("ncclCommSplit: " + describe(r, world));
    if (Status s = waitComm(split ? split : world, "ncclCommSplit"); !s)
      return s;
    groups[axes] = comm = split;
    return Status::ok();
  }

  /// Steps 1-4 of the file comment around `enqueue(comm, groupIndex)`.
  /// `members`, unless kAnySize, is checked against the group's size.
  static constexpr size_t kAnySize = ~size_t(0);
  template <typename F>
  Status run(const char *op, const std::vector<int64_t> &axes, size_t members,
             F enqueue) {
    if (aborted)
      return Status::error(cause);
    if (Status s = checkAxes(axes, op); !s)
      return s;
    if (members != kAnySize && members != getGroup(axes).size())
      return Status::error(
          std::string("nccl: ") + op + " with " + std::to_string(members) +
          " counts over a group of " + std::to_string(getGroup(axes).size()));
    ncclComm_t comm = nullptr;
    if (Status s = groupComm(axes, comm); !s)
      return s;
    void *compute = shardx_rt_cuda_stream();
    shardx_rt_cuda_stream_wait(stream, compute);
    ncclResult_t r = enqueue(comm, getGroupIndex(axes));
    if (r != kNcclSuccess && r != kNcclInProgress)
      return fail(std::string(op) + ": " + describe(r, comm));
    if (Status s = waitComm(comm, op); !s)
      return s;
    auto start = std::chrono::steady_clock::now();
    char error[1024];
    for (;;) {
      int q = shardx_rt_cuda_stream_query(stream, error, sizeof(error));
      if (q == 0)
        break;
      if (q < 0)
        return fail(std::string(op) + ": " + error);
      ncclResult_t async = kNcclSuccess;
      nccl.commGetAsyncError(comm, &async);
      if (async != kNcclSuccess && async != kNcclInProgress)
        return fail(std::string(op) + ": " + describe(async, comm));
      if (elapsed(start) > timeout)
        return fail(std::string(op) + " did not finish in " + seconds() +
                    " (a rank died or stopped answering)");
      std::this_thread::yield();
    }
    shardx_rt_cuda_stream_wait(compute, stream);
    return Status::ok();
  }

  double timeout;
  ncclComm_t world;
  void *stream;
  const Nccl &nccl;
  std::map<std::vector<int64_t>, ncclComm_t> groups;
  void *barrierBuffer = nullptr;
  void *scratch = nullptr;
  size_t scratchBytes = 0;
  bool aborted = false;
  std::string cause;
};

} // namespace

Status loadNccl() {
  const std::string &e = loaded().error;
  return e.empty() ? Status::ok() : Status::error(e);
}

Status openNcclDevice() {
  if (Status s = loadNccl(); !s)
    return s;
  shardx_rt_cuda_select_device(static_cast<int>(
      envInt({"SHARDX_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "LOCAL_RANK",
              "SHARDX_RANK"},
             0)));
  char driverError[4096];
  if (shardx_rt_cuda_init(driverError, sizeof(driverError)))
    return Status::error(driverError);
  return Status::ok();
}

int ncclVersion() { return loaded().error.empty() ? loaded().nccl.version : 0; }

std::unique_ptr<Communicator>
createNcclCommunicator(const std::vector<int64_t> &meshShape,
                       Bootstrap &bootstrap, double timeoutSeconds,
                       std::string &error) {
  int64_t size = 1;
  for (int64_t n : meshShape)
    size *= n;
  int64_t rank = bootstrap.getRank();
  if (size != bootstrap.getWorldSize()) {
    error = "the program's mesh has " + std::to_string(size) +
            " devices but the " + bootstrap.getName() + " has " +
            std::to_string(bootstrap.getWorldSize()) + " ranks";
    return nullptr;
  }
  if (Status s = openNcclDevice(); !s) {
    error = s.message();
    return nullptr;
  }
  const Nccl &nccl = loaded().nccl;
  NcclUniqueId id{};
  if (rank == 0)
    if (ncclResult_t r = nccl.getUniqueId(&id)) {
      error = std::string("nccl: ncclGetUniqueId: ") + nccl.getErrorString(r);
      return nullptr;
    }
  // One key per communicator a process creates (every rank creates the
  // same ones in the same order).
  static std::atomic<int> created{0};
  std::string key = "shardx-nccl-id-" + std::to_string(created++);
  if (Status s = bootstrap.broadcast(key, &id, sizeof(id)); !s) {
    error = s.message();
    return nullptr;
  }
  NcclConfig config = nonBlockingConfig();
  ncclComm_t world = nullptr;
  ncclResult_t r =
      nccl.commInitRankConfig(&world, int(size), id, int(rank), &config);
  if (r != kNcclSuccess && r != kNcclInProgress) {
    error = std::string("nccl: ncclCommInitRankConfig on rank ") +
            std::to_string(rank) + ": " + nccl.getErrorString(r);
    if (world)
      nccl.commAbort(world);
    return nullptr;
  }
  auto comm = std::make_unique<NcclCommunicator>(
      meshShape, rank, timeoutSeconds, world, shardx_rt_cuda_stream_create());
  if (Status s = comm->waitComm(world, "ncclCommInitRankConfig"); !s) {
    error = s.message();
    return nullptr;
  }
  return comm;
}

} // namespace shardx::rt
