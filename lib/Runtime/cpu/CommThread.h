//===- CommThread.h - A rank's communication thread -------------*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// Runs the collectives a rank started (`Communicator::allReduceStart`) on a
// thread of its own, one at a time in the order started, so that the rank's
// thread computes meanwhile. Started lazily: a rank that starts nothing
// never has one. Internal to the threads backend.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_RUNTIME_CPU_COMMTHREAD_H
#define SHARDX_LIB_RUNTIME_CPU_COMMTHREAD_H

#include "shardx/Runtime/Communicator.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

namespace shardx::rt {

class CommThread {
public:
  CommThread() = default;
  CommThread(const CommThread &) = delete;
  CommThread &operator=(const CommThread &) = delete;
  /// Runs what is queued (a collective of an aborted world fails at once),
  /// then joins the thread.
  ~CommThread();

  /// Queues `task`; returns the request `wait` takes.
  int64_t submit(std::function<Status()> task);
  /// Blocks until request `id` has run and returns its status (once).
  Status wait(int64_t id);
  /// Blocks until every queued task has run (before a synchronous
  /// collective, which must follow the started ones on every rank).
  void drain();
  /// Whether the caller is the communication thread itself.
  bool isWorker() const {
    return worker.joinable() && std::this_thread::get_id() == worker.get_id();
  }

private:
  void run();

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<std::pair<int64_t, std::function<Status()>>> queue;
  /// Finished and not yet waited for.
  std::map<int64_t, Status> finished;
  int64_t nextId = 0;
  /// Submitted and not yet finished.
  int64_t running = 0;
  bool stopping = false;
  std::thread worker;
};

} // namespace shardx::rt

#endif // SHARDX_LIB_RUNTIME_CPU_COMMTHREAD_H
