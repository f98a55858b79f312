//===- CommThread.cpp - A rank's communication thread ---------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "CommThread.h"

namespace shardx::rt {

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopping = true;
  }
  wake.notify_all();
  if (worker.joinable())
    worker.join();
}

int64_t CommThread::submit(std::function<Status()> task) {
  std::lock_guard<std::mutex> lock(mutex);
  if (!worker.joinable())
    worker = std::thread([this] { run(); });
  int64_t id = nextId++;
  queue.emplace_back(id, std::move(task));
  ++running;
  wake.notify_all();
  return id;
}

Status CommThread::wait(int64_t id) {
  std::unique_lock<std::mutex> lock(mutex);
  if (id < 0 || id >= nextId)
    return Status::error("wait for unknown request " + std::to_string(id));
  wake.wait(lock, [&] {
    return finished.count(id) ||
           (running == 0 && !finished.count(id)); // waited for already
  });
  auto it = finished.find(id);
  if (it == finished.end())
    return Status::error("request " + std::to_string(id) +
                         " was waited for already");
  Status s = std::move(it->second);
  finished.erase(it);
  return s;
}

void CommThread::drain() {
  std::unique_lock<std::mutex> lock(mutex);
  wake.wait(lock, [&] { return running == 0; });
}

void CommThread::run() {
  std::unique_lock<std::mutex> lock(mutex);
  while (true) {
    wake.wait(lock, [&] { return stopping || !queue.empty(); });
    if (queue.empty())
      return; // stopping, nothing left
    auto [id, task] = std::move(queue.front());
    queue.pop_front();
    lock.unlock();
    Status s = task();
    lock.lock();
    finished.emplace(id, std::move(s));
    --running;
    wake.notify_all();
  }
}

} // namespace shardx::rt
