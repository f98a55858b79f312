//===- Watchdog.h - Collectives in flight on a stream -----------*- C++ -*-===//
//
// Part of ShardX.
//
// The bookkeeping of a stream-ordered communicator (nccl): the collectives
// it queued on its communication stream and has not yet seen finish, each
// with the event recorded after it. It hands out the requests that `wait`
// takes and turns a failed collective, an asynchronous error of the
// library or a collective older than the timeout into an error. The device
// and the library are reached only through hooks, so the logic runs (and
// is tested) without a GPU. No MLIR/LLVM dependency.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_WATCHDOG_H
#define SHARDX_RUNTIME_WATCHDOG_H

#include "shardx/Runtime/Communicator.h"

#include <cstdint>
#include <deque>
#include <functional>
#include <string>

namespace shardx::rt {

/// Not thread-safe: its owner serializes the calls (the nccl communicator
/// calls it under its lock, from the rank's thread and its watchdog
/// thread).
class CollectiveWatchdog {
public:
  struct Hooks {
    /// 0 when `event` has completed, 1 while it is pending, -1 on an error
    /// (the reason in `error`).
    std::function<int(void *event, std::string &error)> query;
    /// Frees an event that is no longer tracked.
    std::function<void(void *event)> release;
    /// The library's asynchronous error, "" when there is none.
    std::function<std::string()> asyncError;
    /// Seconds on a monotonic clock.
    std::function<double()> now;
  };

  CollectiveWatchdog(Hooks hooks, double timeoutSeconds);
  /// Releases the events still tracked.
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog &) = delete;
  CollectiveWatchdog &operator=(const CollectiveWatchdog &) = delete;

  /// Tracks the collective `op` whose completion `event` records; returns
  /// its request (0, 1, 2, ... in the order of the calls). `began`, when
  /// given, is an event recorded just before the collective on its stream:
  /// the timeout counts from when it is seen complete, so that compute
  /// queued ahead of the collective is not taken for a silent peer;
  /// without it the timeout counts from the call.
  int64_t add(std::string op, void *event, void *began = nullptr);
  /// Sets `event` to the done event of `request` while it is tracked, to
  /// null once it finished; an error for a request never handed out.
  Status lookup(int64_t request, void *&event) const;
  /// Retires the finished collectives (oldest first, as they were queued)
  /// and returns the first failure: an event's error ("<op>: <error>"),
  /// the library's asynchronous error ("<op>: <error>", <op> the oldest in
  /// flight), or the oldest collective in flight for longer than the
  /// timeout since it began ("<op> did not finish in T s (a rank died or stopped
  /// answering)"). After a failure every call returns it again.
  Status poll();
  /// Collectives in flight (tracked and not yet seen finish).
  size_t inFlight() const { return pending.size(); }
  bool hasFailed() const { return !failure.empty(); }

private:
  struct Entry {
    int64_t request;
    std::string op;
    void *event;
    /// Pending until the work queued before the collective is done; null
    /// once seen complete (or when none was given).
    void *began;
    double start;
  };
  /// Whether the oldest entry has begun (its clock started); an error when
  /// its began event failed.
  Status begun(Entry &e, bool &started);
  Status fail(std::string message);

  Hooks hooks;
  double timeout;
  std::deque<Entry> pending;
  int64_t nextRequest = 0;
  std::string failure;
};

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_WATCHDOG_H
