//===- RankThreads.h - Persistent rank threads of a world -------*- C++ -*-===//
//
// Part of ShardX.
//
// The threads of a `threads` or `cuda-local` world kept alive between runs:
// a Session posts each run's body to every rank's thread instead of starting
// a world per run. Needs no MLIR.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_EXEC_RANKTHREADS_H
#define SHARDX_EXEC_RANKTHREADS_H

#include "shardx/Exec/Executor.h"

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace shardx::exec {

/// One thread per rank of `meshShape`, started by `world` (rt::runThreads,
/// rt::runCudaLocal) at the first run and kept between runs. A run that fails
/// on any rank ends the world (its collectives abort); the next run starts a
/// fresh one.
class RankThreads {
public:
  RankThreads(std::vector<int64_t> meshShape, double timeoutSeconds,
              RankWorld world);
  ~RankThreads();
  RankThreads(const RankThreads &) = delete;
  RankThreads &operator=(const RankThreads &) = delete;

  /// Worlds started so far (1 after the first run; +1 after each failure).
  int64_t getWorldsStarted() const { return worldsStarted; }
  /// Runs `body` on every rank and returns each rank's status. A world that
  /// ends under the run (it could not start: no CUDA driver) fails the ranks
  /// that have not reported instead of hanging.
  std::vector<rt::Status>
  run(const std::function<rt::Status(rt::Communicator &)> &body);
  /// Ends the world, if one runs; the next run starts a fresh one.
  void stop();

private:
  void start();
  /// Gives each rank that has not reported its status the world's (the
  /// world ended under a posted run).
  void failUnreported();

  std::vector<int64_t> meshShape;
  int64_t size = 1;
  double timeoutSeconds;
  RankWorld world;
  int64_t worldsStarted = 0;

  std::mutex mutex;
  std::condition_variable wakeRanks, wakeCaller;
  std::thread driver;
  bool running = false, stopping = false;
  uint64_t generation = 0;
  int64_t pending = 0;
  /// Per rank of the posted run: whether it has reported its status.
  std::vector<char> reported;
  /// The world's thread has returned, with these statuses.
  bool worldEnded = false;
  std::vector<rt::Status> worldStatuses;
  const std::function<rt::Status(rt::Communicator &)> *job = nullptr;
  std::vector<rt::Status> statuses;
};

} // namespace shardx::exec

#endif // SHARDX_EXEC_RANKTHREADS_H
