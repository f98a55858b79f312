//===- RankThreads.cpp - Persistent rank threads of a world ---------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Exec/RankThreads.h"

#include <algorithm>

using namespace shardx;
using namespace shardx::exec;
using shardx::rt::Communicator;
using shardx::rt::Status;

RankThreads::RankThreads(std::vector<int64_t> meshShape, double timeoutSeconds,
                         RankWorld world)
    : meshShape(std::move(meshShape)), timeoutSeconds(timeoutSeconds),
      world(std::move(world)) {
  for (int64_t n : this->meshShape)
    size *= n;
}

RankThreads::~RankThreads() { stop(); }

void RankThreads::start() {
  // Called with no world running.
  {
    std::lock_guard<std::mutex> lock(mutex);
    running = true;
    stopping = false;
    worldEnded = false;
    worldStatuses.clear();
    ++worldsStarted;
  }
  uint64_t first = generation;
  driver = std::thread([this, first] {
    std::vector<Status> ended = world(
        meshShape,
        [this, first](Communicator &comm) -> Status {
          uint64_t seen = first;
          while (true) {
            const std::function<Status(Communicator &)> *fn;
            {
              std::unique_lock<std::mutex> lock(mutex);
              wakeRanks.wait(lock,
                             [&] { return stopping || generation != seen; });
              if (stopping)
                return Status::ok();
              seen = generation;
              fn = job;
            }
            Status s = (*fn)(comm);
            bool failed = !s;
            {
              std::lock_guard<std::mutex> lock(mutex);
              statuses[comm.getRank()] = s;
              reported[comm.getRank()] = 1;
              if (--pending == 0)
                wakeCaller.notify_all();
            }
            // A failed rank leaves the world, which aborts it: every peer's
            // collective fails instead of waiting.
            if (failed)
              return s;
          }
        },
        timeoutSeconds);
    // The world ended: stopped, failed on a rank, or never started (no CUDA
    // driver: every rank fails before running anything). A run waiting on
    // ranks that will never report gets the world's statuses instead of
    // hanging.
    std::lock_guard<std::mutex> lock(mutex);
    worldEnded = true;
    worldStatuses = std::move(ended);
    if (pending > 0) {
      failUnreported();
      pending = 0;
      wakeCaller.notify_all();
    }
  });
}

void RankThreads::failUnreported() {
  // Called with `mutex` held, a run posted and the world ended.
  for (int64_t r = 0; r < size; ++r) {
    if (reported[r])
      continue;
    const Status *why =
        static_cast<size_t>(r) < worldStatuses.size() && !worldStatuses[r]
            ? &worldStatuses[r]
            : nullptr;
    statuses[r] = why ? *why
                      : Status::error("rank " + std::to_string(r) +
                                      ": its thread ended before the run");
  }
}

void RankThreads::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!running)
      return;
    stopping = true;
  }
  wakeRanks.notify_all();
  driver.join();
  std::lock_guard<std::mutex> lock(mutex);
  running = false;
}

std::vector<Status>
RankThreads::run(const std::function<Status(Communicator &)> &body) {
  if (!running)
    start();
  std::vector<Status> result;
  {
    std::unique_lock<std::mutex> lock(mutex);
    statuses.assign(size, Status::ok());
    reported.assign(size, 0);
    if (worldEnded) {
      // The world is gone already (it could not start): nothing runs.
      failUnreported();
    } else {
      pending = size;
      job = &body;
      ++generation;
      wakeRanks.notify_all();
      wakeCaller.wait(lock, [&] { return pending == 0; });
    }
    job = nullptr;
    result = statuses;
  }
  bool failed = std::any_of(result.begin(), result.end(),
                            [](const Status &s) { return !s; });
  if (failed)
    stop();
  return result;
}
