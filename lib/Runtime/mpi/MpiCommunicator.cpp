//===- MpiCommunicator.cpp - Ranks as MPI processes -----------------------===//
//
// Part of ShardX.
//
// Each group over mesh axes is an MPI communicator split from
// MPI_COMM_WORLD (color: the coordinates off the group's axes; key: the
// index in the group), created on first use. Data moves as bytes; reductions
// use MPI's typed ops, avg as a sum divided by the group size. A watchdog
// thread ends the job when a collective outlives the timeout.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Mpi.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

namespace shardx::rt {

Status initMpi(int *argc, char ***argv) {
  int provided = 0;
  if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) !=
      MPI_SUCCESS)
    return Status::error("MPI_Init_thread failed");
  return Status::ok();
}

void finalizeMpi() { MPI_Finalize(); }

namespace {

MPI_Datatype mpiType(DType type) {
  switch (type) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I32:
    return MPI_INT32_T;
  case DType::I64:
    return MPI_INT64_T;
  case DType::BF16:
  case DType::F16: {
    // Two bytes each, told apart by their own handles (created after
    // MPI_Init, kept for the process); reduced only by runtime ops.
    static MPI_Datatype bf16 = MPI_DATATYPE_NULL, f16 = MPI_DATATYPE_NULL;
    MPI_Datatype &t = type == DType::BF16 ? bf16 : f16;
    if (t == MPI_DATATYPE_NULL) {
      MPI_Type_contiguous(2, MPI_BYTE, &t);
      MPI_Type_commit(&t);
    }
    return t;
  }
  case DType::I16:
  case DType::I8:
  case DType::I1:
  case DType::Index: // not collective types (isCollectiveType)
    break;
  }
  return MPI_BYTE;
}

/// An MPI user op reducing with the runtime's own rule (reduceInto), so that
/// max and min propagate NaN as arith.maximumf/minimumf and the threads
/// backend do (MPI_MAX and MPI_MIN keep or drop a NaN depending on the
/// order of the ranks).
template <ReduceOp Op>
void runtimeReduceOp(void *in, void *inout, int *len, MPI_Datatype *type) {
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64, DType::BF16,
                  DType::F16})
    if (*type == mpiType(t))
      return reduceInto(inout, in, static_cast<size_t>(*len), t, Op);
}

/// The MPI op of `op` on `type`: MPI's own sum and product, the runtime's
/// rule for max and min (NaN) and for every bf16/f16 reduction (each step
/// combines in f32 and rounds).
MPI_Op mpiOp(ReduceOp op, DType type) {
  // Created on first use (after MPI_Init), kept for the process.
  static MPI_Op sumOp = MPI_OP_NULL, prodOp = MPI_OP_NULL, maxOp = MPI_OP_NULL,
                minOp = MPI_OP_NULL;
  auto runtimeOp = [](MPI_Op &handle, MPI_User_function *fn) {
    if (handle == MPI_OP_NULL)
      MPI_Op_create(fn, /*commute=*/1, &handle);
    return handle;
  };
  bool half = isHalfFloat(type);
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Avg:
    return half ? runtimeOp(sumOp, &runtimeReduceOp<ReduceOp::Sum>) : MPI_SUM;
  case ReduceOp::Max:
    return runtimeOp(maxOp, &runtimeReduceOp<ReduceOp::Max>);
  case ReduceOp::Min:
    return runtimeOp(minOp, &runtimeReduceOp<ReduceOp::Min>);
  case ReduceOp::Prod:
    return half ? runtimeOp(prodOp, &runtimeReduceOp<ReduceOp::Prod>)
                : MPI_PROD;
  }
  return MPI_SUM;
}

class MpiCommunicator : public Communicator {
public:
  MpiCommunicator(std::vector<int64_t> meshShape, int64_t rank,
                  double timeoutSeconds)
      : Communicator(std::move(meshShape), rank), timeout(timeoutSeconds),
        watchdog([this] { watch(); }) {
    // The ranks on this host: the processes that can share memory.
    MPI_Comm local;
    int localRanks = 1;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0,
                            MPI_INFO_NULL, &local) == MPI_SUCCESS) {
      MPI_Comm_size(local, &localRanks);
      MPI_Comm_free(&local);
    }
    // Blocking and non-blocking collectives never match each other (MPI-3
    // 5.12), so the ranks agree: async only when every rank can afford it
    // (hosts of different sizes, uneven bindings, the variable set on some
    // ranks only).
    int mine = asyncCollectivesEnabled(localRanks) ? 1 : 0, all = mine;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    asynchronous = all == 1;
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(progressMutex);
      stopProgress = true;
    }
    if (progress.joinable())
      progress.join();
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wake.notify_all();
    watchdog.join();
    for (auto &[axes, comm] : groups)
      MPI_Comm_free(&comm);
  }

  const char *getBackendName() const override { return "mpi"; }
  MemorySpace getMemorySpace() const override { return MemorySpace::Host; }

  void abort(const std::string &cause) override {
    std::fprintf(stderr, "shardx: rank %lld failed: %s\n",
                 static_cast<long long>(rank), cause.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

  Status allGather(const void *send, void *recv,
                   const std::vector<size_t> &counts, DType type,
                   const std::vector<int64_t> &axes) override {
    Guard guard(*this, "all_gather");
    MPI_Comm comm;
    std::vector<int> bytes, displs;
    if (Status s =
            prepare("all_gather", axes, counts, type, comm, bytes, displs);
        !s)
      return s;
    int me = static_cast<int>(getGroupIndex(axes));
    return check("all_gather",
                 MPI_Allgatherv(send, bytes[me], MPI_BYTE, recv, bytes.data(),
                                displs.data(), MPI_BYTE, comm));
  }

  Status reduceScatter(const void *send, void *recv,
                       const std::vector<size_t> &counts, DType type,
                       ReduceOp op, const std::vector<int64_t> &axes) override {
    Guard guard(*this, "reduce_scatter");
    MPI_Comm comm;
    std::vector<int> bytes, displs;
    if (Status s =
            prepare("reduce_scatter", axes, counts, type, comm, bytes, displs);
        !s)
      return s;
    std::vector<int> elems(counts.begin(), counts.end());
    Status s = check("reduce_scatter",
                     MPI_Reduce_scatter(send, recv, elems.data(), mpiType(type),
                                        mpiOp(op, type), comm));
    if (s && op == ReduceOp::Avg)
      divideBy(recv, counts[getGroupIndex(axes)], type,
               static_cast<int64_t>(counts.size()));
    return s;
  }

  /// The group communicator of an all_reduce over `axes`, whose `count`
  /// must fit one MPI call.
  Status allReduceComm(const std::vector<int64_t> &axes, size_t count,
                       MPI_Comm &comm) {
    if (Status s = groupComm("all_reduce", axes, comm); !s)
      return s;
    if (count > INT_MAX)
      return Status::error("all_reduce on rank " + std::to_string(rank) +
                           ": too many elements for one MPI call");
    return Status::ok();
  }

  Status allReduce(const void *send, void *recv, size_t count, DType type,
                   ReduceOp op, const std::vector<int64_t> &axes) override {
    Guard guard(*this, "all_reduce");
    MPI_Comm comm;
    if (Status s = allReduceComm(axes, count, comm); !s)
      return s;
    Status s = check("all_reduce",
                     MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv,
                                   static_cast<int>(count), mpiType(type),
                                   mpiOp(op, type), comm));
    if (s && op == ReduceOp::Avg)
      divideBy(recv, count, type, static_cast<int64_t>(getGroup(axes).size()));
    return s;
  }

  Status allToAll(const void *send, const std::vector<size_t> &sendCounts,
                  void *recv, const std::vector<size_t> &recvCounts, DType type,
                  const std::vector<int64_t> &axes) override {
    Guard guard(*this, "all_to_all");
    MPI_Comm comm;
    std::vector<int> sendBytes, sendDispls, recvBytes, recvDispls;
    if (Status s = prepare("all_to_all", axes, sendCounts, type, comm,
                           sendBytes, sendDispls);
        !s)
      return s;
    if (Status s = prepare("all_to_all", axes, recvCounts, type, comm,
                           recvBytes, recvDispls);
        !s)
      return s;
    return check("all_to_all",
                 MPI_Alltoallv(send, sendBytes.data(), sendDispls.data(),
                               MPI_BYTE, recv, recvBytes.data(),
                               recvDispls.data(), MPI_BYTE, comm));
  }

  Status permute(const void *send, void *recv, size_t count, DType type,
                 const std::vector<std::pair<int64_t, int64_t>> &pairs,
                 const std::vector<int64_t> &axes) override {
    Guard guard(*this, "permute");
    MPI_Comm comm;
    if (Status s = groupComm("permute", axes, comm); !s)
      return s;
    size_t bytes = count * dtypeSize(type);
    int64_t me = getGroupIndex(axes);
    int64_t n = static_cast<int64_t>(getGroup(axes).size());
    std::vector<char> result(bytes, 0);
    std::vector<MPI_Request> requests;
    for (auto [source, target] : pairs) {
      if (source < 0 || target < 0 || source >= n || target >= n)
        return Status::error("permute on rank " + std::to_string(rank) +
                             ": pair index out of range");
      if (target == me && source == me) {
        std::memcpy(result.data(), send, bytes);
        continue;
      }
      if (target == me) {
        requests.emplace_back();
        MPI_Irecv(result.data(), static_cast<int>(bytes), MPI_BYTE,
                  static_cast<int>(source), 7, comm, &requests.back());
      }
      if (source == me) {
        requests.emplace_back();
        MPI_Isend(send, static_cast<int>(bytes), MPI_BYTE,
                  static_cast<int>(target), 7, comm, &requests.back());
      }
    }
    Status s =
        check("permute", MPI_Waitall(static_cast<int>(requests.size()),
                                     requests.data(), MPI_STATUSES_IGNORE));
    if (s)
      std::memcpy(recv, result.data(), bytes);
    return s;
  }

  Status broadcast(void *buffer, size_t count, DType type, int64_t root,
                   const std::vector<int64_t> &axes) override {
    Guard guard(*this, "broadcast");
    MPI_Comm comm;
    if (Status s = groupComm("broadcast", axes, comm); !s)
      return s;
    if (root < 0 || root >= static_cast<int64_t>(getGroup(axes).size()))
      return Status::error("broadcast on rank " + std::to_string(rank) +
                           ": root " + std::to_string(root) +
                           " is out of range");
    return check("broadcast",
                 MPI_Bcast(buffer, static_cast<int>(count * dtypeSize(type)),
                           MPI_BYTE, static_cast<int>(root), comm));
  }

  /// MPI_Iallreduce; the progress thread tests it while the rank computes
  /// (Open MPI moves a non-blocking collective's data only inside MPI
  /// calls). Synchronous when the policy gives the rank no spare core.
  Status allReduceStart(const void *send, void *recv, size_t count,
                        DType type, ReduceOp op,
                        const std::vector<int64_t> &axes,
                        int64_t &request) override {
    if (!asynchronous)
      return Communicator::allReduceStart(send, recv, count, type, op, axes,
                                          request);
    Guard guard(*this, "all_reduce");
    MPI_Comm comm;
    if (Status s = allReduceComm(axes, count, comm); !s)
      return s;
    Pending p{"all_reduce", recv, count, type, op == ReduceOp::Avg,
              static_cast<int64_t>(getGroup(axes).size())};
    return startPending(
        std::move(p),
        [&](MPI_Request *r) {
          return MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv,
                                static_cast<int>(count), mpiType(type),
                                mpiOp(op, type), comm, r);
        },
        request);
  }

  /// MPI_Iallgatherv in bytes, as allGather.
  Status allGatherStart(const void *send, void *recv,
                        const std::vector<size_t> &counts, DType type,
                        const std::vector<int64_t> &axes,
                        int64_t &request) override {
    if (!asynchronous)
      return Communicator::allGatherStart(send, recv, counts, type, axes,
                                          request);
    Guard guard(*this, "all_gather");
    MPI_Comm comm;
    Pending p{"all_gather", recv, 0, type, false, 0};
    if (Status s = prepare("all_gather", axes, counts, type, comm, p.counts,
                           p.displs);
        !s)
      return s;
    int me = static_cast<int>(getGroupIndex(axes));
    // The count and displacement arrays live in the pending entry until
    // the collective completes, as MPI requires.
    return startPending(
        std::move(p),
        [&](MPI_Request *r, Pending &stored) {
          return MPI_Iallgatherv(send, stored.counts[me], MPI_BYTE, recv,
                                 stored.counts.data(), stored.displs.data(),
                                 MPI_BYTE, comm, r);
        },
        request);
  }

  /// MPI_Ireduce_scatter in elements, as reduceScatter.
  Status reduceScatterStart(const void *send, void *recv,
                            const std::vector<size_t> &counts, DType type,
                            ReduceOp op, const std::vector<int64_t> &axes,
                            int64_t &request) override {
    if (!asynchronous)
      return Communicator::reduceScatterStart(send, recv, counts, type, op,
                                              axes, request);
    Guard guard(*this, "reduce_scatter");
    MPI_Comm comm;
    std::vector<int> bytes, displs;
    if (Status s =
            prepare("reduce_scatter", axes, counts, type, comm, bytes, displs);
        !s)
      return s;
    int64_t me = getGroupIndex(axes);
    Pending p{"reduce_scatter", recv, counts[me], type, op == ReduceOp::Avg,
              static_cast<int64_t>(counts.size())};
    p.counts.assign(counts.begin(), counts.end());
    return startPending(
        std::move(p),
        [&](MPI_Request *r, Pending &stored) {
          return MPI_Ireduce_scatter(send, recv, stored.counts.data(),
                                     mpiType(type), mpiOp(op, type), comm, r);
        },
        request);
  }

  Status wait(int64_t request) override {
    if (!asynchronous)
      return Communicator::wait(request);
    Guard guard(*this, "wait");
    std::lock_guard<std::mutex> lock(progressMutex);
    auto it = pending.find(request);
    if (it == pending.end())
      return Status::error("mpi: wait for unknown request " +
                           std::to_string(request));
    Pending p = std::move(it->second);
    pending.erase(it);
    Status s = check(p.op, MPI_Wait(&p.request, MPI_STATUS_IGNORE));
    if (s && p.average)
      divideBy(p.recv, p.count, p.type, p.groupSize);
    return s;
  }

  Status barrier(const std::vector<int64_t> &axes) override {
    Guard guard(*this, "barrier");
    MPI_Comm comm;
    if (Status s = groupComm("barrier", axes, comm); !s)
      return s;
    return check("barrier", MPI_Barrier(comm));
  }

private:
  /// A started collective: what its wait finishes (an average's division)
  /// and the count arrays MPI reads until it completes.
  struct Pending {
    const char *op;
    void *recv;
    size_t count;
    DType type;
    bool average;
    int64_t groupSize;
    std::vector<int> counts = {}, displs = {};
    MPI_Request request = MPI_REQUEST_NULL;
  };

  /// Stores `p`, calls `start` on its request (and the stored entry, whose
  /// arrays stay put until the wait), and wakes the progress thread.
  template <typename Start>
  Status startPending(Pending p, Start start, int64_t &request) {
    std::lock_guard<std::mutex> lock(progressMutex);
    int64_t id = nextRequest;
    Pending &stored = pending.emplace(id, std::move(p)).first->second;
    int code;
    if constexpr (std::is_invocable_v<Start, MPI_Request *, Pending &>)
      code = start(&stored.request, stored);
    else
      code = start(&stored.request);
    if (Status s = check(stored.op, code); !s) {
      pending.erase(id);
      return s;
    }
    request = nextRequest++;
    if (!progress.joinable())
      progress = std::thread([this] { makeProgress(); });
    return Status::ok();
  }

  /// While collectives are pending, tests them every few microseconds (a
  /// finished request becomes MPI_REQUEST_NULL, which MPI_Wait returns at
  /// once for).
  void makeProgress() {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(progressMutex);
        if (stopProgress)
          return;
        for (auto &[id, p] : pending) {
          int done = 0;
          if (p.request != MPI_REQUEST_NULL)
            MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
        }
      }
      std::this_thread::sleep_for(std::chrono::microseconds(
          pendingCount() ? 20 : 1000));
    }
  }

  size_t pendingCount() {
    std::lock_guard<std::mutex> lock(progressMutex);
    return pending.size();
  }

  /// Marks a collective in flight for the watchdog (no wake-up: the
  /// watchdog polls, so a collective costs two uncontended atomic stores).
  struct Guard {
    Guard(MpiCommunicator &c, const char *op) : c(c) {
      c.current.store(op, std::memory_order_relaxed);
      c.sinceNs.store(
          std::chrono::steady_clock::now().time_since_epoch().count(),
          std::memory_order_relaxed);
      c.busy.store(true, std::memory_order_release);
    }
    ~Guard() { c.busy.store(false, std::memory_order_release); }
    MpiCommunicator &c;
  };

  void watch() {
    auto poll = std::chrono::duration<double>(std::min(timeout / 4, 0.1));
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      wake.wait_for(lock, poll);
      if (stopping || !busy.load(std::memory_order_acquire))
        continue;
      auto since = std::chrono::steady_clock::time_point(
          std::chrono::steady_clock::duration(
              sinceNs.load(std::memory_order_relaxed)));
      double waited = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - since)
                          .count();
      if (waited >= timeout && busy.load(std::memory_order_acquire)) {
        std::fprintf(stderr,
                     "shardx: rank %lld timed out after %g s waiting for its "
                     "group in %s\n",
                     static_cast<long long>(rank), timeout,
                     current.load(std::memory_order_relaxed));
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
        std::_Exit(1);
      }
    }
  }

  Status check(const char *op, int code) const {
    if (code == MPI_SUCCESS)
      return Status::ok();
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    return Status::error(std::string(op) + " on rank " + std::to_string(rank) +
                         ": " + std::string(text, length));
  }

  Status groupComm(const char *op, const std::vector<int64_t> &axes,
                   MPI_Comm &comm) {
    if (Status s = checkAxes(axes, op); !s)
      return s;
    auto it = groups.find(axes);
    if (it != groups.end()) {
      comm = it->second;
      return Status::ok();
    }
    // Color: this rank's coordinates off the group's axes.
    int color = 0;
    for (size_t a = 0; a < meshShape.size(); ++a) {
      bool inGroup = false;
      for (int64_t g : axes)
        inGroup |= g == static_cast<int64_t>(a);
      color = color * static_cast<int>(meshShape[a]) +
              (inGroup ? 0 : static_cast<int>(coords[a]));
    }
    if (Status s = check(
            op, MPI_Comm_split(MPI_COMM_WORLD, color,
                               static_cast<int>(getGroupIndex(axes)), &comm));
        !s)
      return s;
    groups.emplace(axes, comm);
    return Status::ok();
  }

  Status prepare(const char *op, const std::vector<int64_t> &axes,
                 const std::vector<size_t> &counts, DType type, MPI_Comm &comm,
                 std::vector<int> &bytes, std::vector<int> &displs) {
    if (Status s = groupComm(op, axes, comm); !s)
      return s;
    if (counts.size() != getGroup(axes).size())
      return Status::error(
          std::string(op) + " on rank " + std::to_string(rank) + ": " +
          std::to_string(counts.size()) + " counts for a group of " +
          std::to_string(getGroup(axes).size()));
    size_t offset = 0;
    for (size_t c : counts) {
      size_t b = c * dtypeSize(type);
      if (offset + b > INT_MAX)
        return Status::error(std::string(op) + " on rank " +
                             std::to_string(rank) +
                             ": too many bytes for one MPI call");
      bytes.push_back(static_cast<int>(b));
      displs.push_back(static_cast<int>(offset));
      offset += b;
    }
    return Status::ok();
  }

  double timeout;
  std::map<std::vector<int64_t>, MPI_Comm> groups;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::atomic<bool> busy{false};
  std::atomic<const char *> current{""};
  std::atomic<int64_t> sinceNs{0};
  std::thread watchdog;
  /// Whether starts are non-blocking (asyncCollectivesEnabled for the
  /// ranks on this host); otherwise they run synchronously and there is no
  /// progress thread.
  bool asynchronous = false;
  /// Started collectives by request, and the thread that progresses them.
  std::mutex progressMutex;
  std::map<int64_t, Pending> pending;
  int64_t nextRequest = 0;
  bool stopProgress = false;
  std::thread progress;
};

} // namespace

std::unique_ptr<Communicator>
createMpiCommunicator(const std::vector<int64_t> &meshShape,
                      double timeoutSeconds, std::string &error) {
  int size = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int64_t devices = 1;
  for (int64_t n : meshShape)
    devices *= n;
  if (devices != size) {
    error = "the mesh has " + std::to_string(devices) +
            " devices but MPI_COMM_WORLD has " + std::to_string(size) +
            " processes";
    return nullptr;
  }
  return std::make_unique<MpiCommunicator>(meshShape, rank, timeoutSeconds);
}

} // namespace shardx::rt
