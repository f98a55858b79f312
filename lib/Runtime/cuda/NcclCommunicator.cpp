//===- NcclCommunicator.cpp - One rank per process and GPU on NCCL --------===//
//
// Part of ShardX.
//
// The `nccl` backend. NCCL is opened at run time (dlopen/dlsym, through the
// CUDA runtime's library search) and the few NCCL types and functions used
// are declared in NcclLibrary.h, so neither building nor linking needs NCCL.
//
// The world communicator is created in NCCL's non-blocking mode
// (ncclConfig_t.blocking = 0) from the unique id rank 0 hands out through
// the bootstrap; the communicator of each group of mesh axes is split from
// it on first use (ncclCommSplit, color: the group's first global rank,
// key: the rank's index in the group). Every collective:
//   1. makes the communication stream (one per rank) wait for the compute
//      stream (an event recorded on it),
//   2. enqueues the NCCL calls on the communication stream (send/recv
//      pairs in one ncclGroupStart/End for the uneven and point-to-point
//      forms),
//   3. records a done event on the communication stream, hands it to the
//      watchdog (Watchdog.h) and, unless it was started, makes the compute
//      stream wait for it.
// No host wait: the compute stream queues on behind the collective, and a
// started all_reduce (allReduceStart) overlaps what the program queues
// before its wait, which is again an event wait of the compute stream. The
// watchdog thread polls the done events and ncclCommGetAsyncError; when a
// collective fails, or is still running after the timeout, it aborts every
// communicator of the rank (ncclCommAbort, which also ends the kernels
// waiting for a dead peer) and every later call fails with the cause, and
// so does `finish`, which ends every run. With SHARDX_GPU_SYNC_COLLECTIVES=1
// the host waits for each collective instead (step 3 polls until the work
// is done, an error is reported, or the timeout passes), as before streams
// were ordered with events: for debugging.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Nccl.h"

#include "NcclLibrary.h"
#include "shardx/Runtime/Cuda.h"
#include "shardx/Runtime/Watchdog.h"

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace shardx::rt {

using namespace nccl;

namespace {

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

/// Whether SHARDX_GPU_SYNC_COLLECTIVES asks the host to wait for every
/// collective (1, or any value but 0 and empty).
bool synchronousFromEnv() {
  const char *v = std::getenv("SHARDX_GPU_SYNC_COLLECTIVES");
  return v && *v && std::strcmp(v, "0") != 0;
}

double monotonicSeconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class NcclCommunicator : public Communicator {
public:
  NcclCommunicator(std::vector<int64_t> meshShape, int64_t rank, double timeout,
                   ncclComm_t world, void *stream)
      : Communicator(std::move(meshShape), rank), timeout(timeout),
        world(world), stream(stream), compute(shardx_rt_cuda_stream()),
        nccl(loaded().nccl), synchronous(synchronousFromEnv()),
        watchdog(watchdogHooks(), timeout) {
    if (!synchronous)
      watcher = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    // Every collective done (or the world aborted) before anything goes.
    (void)finish();
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    wakeup.notify_all();
    if (watcher.joinable())
      watcher.join();
    // finish() saw every collective complete before the communicators are
    // destroyed. Aborted communicators were freed by ncclCommAbort, and the
    // buffers are left to the ending process (the device may be in an error
    // state).
    if (!aborted) {
      // The buffers go back to the allocator of this thread's stream: that
      // stream first waits for the communication stream.
      if (barrierBuffer || scratch)
        shardx_rt_cuda_stream_wait(shardx_rt_cuda_stream(), stream);
      if (barrierBuffer)
        shardx_rt_cuda_free(barrierBuffer);
      if (scratch)
        shardx_rt_cuda_free(scratch);
      for (auto &[axes, comm] : groups)
        if (comm != world)
          nccl.commDestroy(comm);
      nccl.commDestroy(world);
    }
    shardx_rt_cuda_stream_destroy(stream);
  }

  const char *getBackendName() const override { return "nccl"; }
  MemorySpace getMemorySpace() const override { return MemorySpace::Device; }

  bool orderAfterStream(void *s) override {
    std::lock_guard<std::mutex> lock(mutex);
    compute = s;
    return true;
  }

  /// Waits for the world communicator's creation.
  Status waitForInit() {
    std::lock_guard<std::mutex> lock(mutex);
    return waitComm(world, "ncclCommInitRankConfig");
  }

private:
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

public:
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
    return run("all_reduce", axes, kAnySize,
               allReduceCall(send, recv, count, type, op));
  }

  Status allReduceStart(const void *send, void *recv, size_t count,
                        DType type, ReduceOp op,
                        const std::vector<int64_t> &axes,
                        int64_t &request) override {
    if (synchronous)
      return Communicator::allReduceStart(send, recv, count, type, op, axes,
                                          request);
    if (Status s = run("all_reduce", axes, kAnySize,
                       allReduceCall(send, recv, count, type, op), &request);
        !s)
      return s;
    std::lock_guard<std::mutex> lock(mutex);
    started.insert(request);
    return Status::ok();
  }

  Status wait(int64_t request) override {
    if (synchronous)
      return Communicator::wait(request);
    std::lock_guard<std::mutex> lock(mutex);
    if (aborted)
      return Status::error(cause);
    if (!started.erase(request))
      return Status::error("backend nccl: wait for unknown request " +
                           std::to_string(request));
    void *done = nullptr;
    if (Status s = watchdog.lookup(request, done); !s)
      return Status::error("backend nccl: " + s.message());
    // Still tracked: the compute stream waits for it; else it is done.
    if (done)
      shardx_rt_cuda_stream_wait_event(compute, done);
    return check();
  }

  Status finish() override {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (aborted)
          return Status::error(cause);
        if (Status s = check(); !s)
          return s;
        if (!watchdog.inFlight())
          return Status::ok();
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
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
    size_t bytes = count * dtypeSize(type);
    return run("permute", axes, kAnySize, [&](ncclComm_t c, int64_t) {
      // On the communication stream, after the compute stream's work: a
      // send buffer that overlaps the receive buffer is copied first, and a
      // member that is no target receives zeros.
      const void *from = stageIfOverlapping(send, bytes, recv, bytes);
      if (!isTarget)
        shardx_rt_cuda_zero_on(recv, static_cast<int64_t>(bytes), stream);
      int t = ncclType(type);
      ncclResult_t r = nccl.groupStart();
      for (auto [source, target] : pairs) {
        if (!count || r != kNcclSuccess)
          break;
        if (source == me)
          r = nccl.send(from, count, t, int(target), c, stream);
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

  /// A one-int all_reduce, which the host waits for: a barrier is where the
  /// ranks meet, on either mode.
  Status barrier(const std::vector<int64_t> &axes) override {
    if (!barrierBuffer)
      barrierBuffer = shardx_rt_cuda_alloc(sizeof(int32_t));
    if (Status s =
            run("barrier", axes, kAnySize,
                [&](ncclComm_t c, int64_t) {
                  return nccl.allReduce(barrierBuffer, barrierBuffer, 1,
                                        ncclType(DType::I32),
                                        ncclOp(ReduceOp::Sum), c, stream);
                });
        !s)
      return s;
    return finish();
  }

  void abort(const std::string &why) override {
    std::lock_guard<std::mutex> lock(mutex);
    abortLocked(why);
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

  /// What the watchdog reads: the done events through the CUDA runtime,
  /// and the asynchronous error of every communicator of this rank.
  CollectiveWatchdog::Hooks watchdogHooks() {
    CollectiveWatchdog::Hooks h;
    h.query = [](void *event, std::string &error) {
      char text[1024] = {0};
      int q = shardx_rt_cuda_event_query(event, text, sizeof(text));
      if (q < 0)
        error = text;
      return q;
    };
    h.release = [](void *event) { shardx_rt_cuda_event_destroy(event); };
    h.asyncError = [this]() -> std::string {
      std::vector<ncclComm_t> comms = {world};
      for (auto &[axes, comm] : groups)
        if (comm != world)
          comms.push_back(comm);
      for (ncclComm_t comm : comms) {
        ncclResult_t r = kNcclSuccess;
        nccl.commGetAsyncError(comm, &r);
        if (r != kNcclSuccess && r != kNcclInProgress)
          return describe(r, comm);
      }
      return "";
    };
    h.now = monotonicSeconds;
    return h;
  }

  /// The watchdog thread: polls the collectives in flight every
  /// millisecond and aborts the world on a failure or a timeout (which
  /// also ends NCCL's kernels, so that the compute stream runs on and a
  /// host waiting for it returns).
  void watch() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stopping) {
      if (!aborted && watchdog.inFlight())
        check();
      wakeup.wait_for(lock, std::chrono::milliseconds(1));
    }
  }

  /// The watchdog's poll (under the lock); a failure aborts the world.
  Status check() {
    if (Status s = watchdog.poll(); !s)
      return fail(s.message());
    return Status::ok();
  }

  /// `send`, or a copy of it in this rank's scratch buffer (queued on the
  /// communication stream) when it overlaps `recv`.
  const void *stageIfOverlapping(const void *send, size_t sendBytes,
                                 const void *recv, size_t recvBytes) {
    auto s = reinterpret_cast<uintptr_t>(send);
    auto r = reinterpret_cast<uintptr_t>(recv);
    if (!sendBytes || !recvBytes || s + sendBytes <= r || r + recvBytes <= s)
      return send;
    if (scratchBytes < sendBytes) {
      if (scratch) {
        // Freed to this thread's stream's allocator once the communication
        // stream is done with it.
        shardx_rt_cuda_stream_wait(shardx_rt_cuda_stream(), stream);
        shardx_rt_cuda_free(scratch);
      }
      scratch = shardx_rt_cuda_alloc(static_cast<int64_t>(sendBytes));
      // A fresh block may have been used on this thread's stream.
      shardx_rt_cuda_stream_wait(stream, shardx_rt_cuda_stream());
      scratchBytes = sendBytes;
    }
    shardx_rt_cuda_copy_on(scratch, send, static_cast<int64_t>(sendBytes),
                           stream);
    return scratch;
  }

  void abortLocked(const std::string &why) {
    if (aborted)
      return;
    aborted = true;
    cause = why;
    for (auto &[axes, comm] : groups)
      if (comm != world)
        nccl.commAbort(comm);
    nccl.commAbort(world);
  }

  /// Aborts every communicator of this rank and fails with `what`.
  Status fail(const std::string &what) {
    std::string message = "nccl: rank " + std::to_string(rank) + ": " + what;
    abortLocked(message);
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

  /// The enqueue of an all_reduce (blocking and started).
  std::function<ncclResult_t(ncclComm_t, int64_t)>
  allReduceCall(const void *send, void *recv, size_t count, DType type,
                ReduceOp op) {
    return [this, send, recv, count, type, op](ncclComm_t c, int64_t) {
      return nccl.allReduce(send, recv, count, ncclType(type), ncclOp(op), c,
                            stream);
    };
  }

  /// Steps 1-3 of the file comment around `enqueue(comm, groupIndex)`.
  /// `members`, unless kAnySize, is checked against the group's size. With
  /// `request`, the collective is started: the compute stream waits for it
  /// only in `wait(*request)`.
  static constexpr size_t kAnySize = ~size_t(0);
  template <typename F>
  Status run(const char *op, const std::vector<int64_t> &axes, size_t members,
             F enqueue, int64_t *request = nullptr) {
    std::lock_guard<std::mutex> lock(mutex);
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
    shardx_rt_cuda_stream_wait(stream, compute);
    // When the work queued ahead of the collective is done: the watchdog's
    // clock starts there, not at this call.
    void *began = nullptr;
    if (!synchronous) {
      began = shardx_rt_cuda_event_create();
      shardx_rt_cuda_event_record(began, stream);
    }
    ncclResult_t r = enqueue(comm, getGroupIndex(axes));
    if (r != kNcclSuccess && r != kNcclInProgress) {
      if (began)
        shardx_rt_cuda_event_destroy(began);
      return fail(std::string(op) + ": " + describe(r, comm));
    }
    // Non-blocking mode: the enqueue itself may finish later (a first call
    // connects the peers); the next NCCL call on `comm` waits for it.
    if (Status s = waitComm(comm, op); !s) {
      if (began)
        shardx_rt_cuda_event_destroy(began);
      return s;
    }
    if (synchronous)
      return hostWait(op, comm);
    void *done = shardx_rt_cuda_event_create();
    shardx_rt_cuda_event_record(done, stream);
    int64_t id = watchdog.add(op, done, began);
    if (request)
      *request = id;
    else
      shardx_rt_cuda_stream_wait_event(compute, done);
    return check();
  }

  /// SHARDX_GPU_SYNC_COLLECTIVES: the host waits for the communication
  /// stream (NCCL's errors and the timeout checked meanwhile), then the
  /// compute stream waits for it.
  Status hostWait(const char *op, ncclComm_t comm) {
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
  /// The communication stream, and the stream whose work collectives
  /// follow (the calling thread's until orderAfterStream).
  void *stream;
  void *compute;
  const Nccl &nccl;
  bool synchronous;
  std::map<std::vector<int64_t>, ncclComm_t> groups;
  /// Started all_reduces not yet waited for.
  std::set<int64_t> started;
  void *barrierBuffer = nullptr;
  void *scratch = nullptr;
  size_t scratchBytes = 0;
  bool aborted = false;
  std::string cause;

  /// Guards everything above and the watchdog: NCCL calls on this rank's
  /// communicators happen under it, from the rank's thread or the
  /// watchdog thread, never both at once.
  std::mutex mutex;
  CollectiveWatchdog watchdog;
  std::condition_variable wakeup;
  bool stopping = false;
  /// Declared last: started when the rest exists.
  std::thread watcher;
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
  if (Status s = comm->waitForInit(); !s) {
    error = s.message();
    return nullptr;
  }
  return comm;
}

std::unique_ptr<Communicator>
connectNccl(const std::vector<int64_t> &meshShape,
            std::unique_ptr<Bootstrap> bootstrap, double timeoutSeconds,
            std::string &error) {
  if (Status s = openNcclDevice(); !s) {
    error = s.message();
    return nullptr;
  }
  if (!bootstrap)
    bootstrap = createFileStoreBootstrapFromEnv(timeoutSeconds, error);
  if (!bootstrap)
    return nullptr;
  return createNcclCommunicator(meshShape, *bootstrap, timeoutSeconds, error);
}

} // namespace shardx::rt
