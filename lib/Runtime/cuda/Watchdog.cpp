//===- Watchdog.cpp - Collectives in flight on a stream -------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Watchdog.h"

#include <sstream>

namespace shardx::rt {

CollectiveWatchdog::CollectiveWatchdog(Hooks hooks, double timeoutSeconds)
    : hooks(std::move(hooks)), timeout(timeoutSeconds) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  for (Entry &e : pending) {
    hooks.release(e.event);
    if (e.began)
      hooks.release(e.began);
  }
}

int64_t CollectiveWatchdog::add(std::string op, void *event, void *began) {
  int64_t request = nextRequest++;
  pending.push_back({request, std::move(op), event, began, hooks.now()});
  return request;
}

Status CollectiveWatchdog::begun(Entry &e, bool &started) {
  started = true;
  if (!e.began)
    return Status::ok();
  std::string error;
  int q = hooks.query(e.began, error);
  if (q < 0)
    return fail(e.op + ": " + error);
  if (q > 0) {
    started = false;
    return Status::ok();
  }
  hooks.release(e.began);
  e.began = nullptr;
  e.start = hooks.now();
  return Status::ok();
}

Status CollectiveWatchdog::lookup(int64_t request, void *&event) const {
  event = nullptr;
  if (request < 0 || request >= nextRequest)
    return Status::error("wait for unknown request " + std::to_string(request));
  for (const Entry &e : pending)
    if (e.request == request)
      event = e.event;
  return Status::ok();
}

Status CollectiveWatchdog::fail(std::string message) {
  failure = std::move(message);
  return Status::error(failure);
}

Status CollectiveWatchdog::poll() {
  if (!failure.empty())
    return Status::error(failure);
  // The stream runs its collectives in order: retire from the oldest until
  // one is still pending.
  while (!pending.empty()) {
    Entry &e = pending.front();
    std::string error;
    int q = hooks.query(e.event, error);
    if (q < 0)
      return fail(e.op + ": " + error);
    if (q > 0)
      break;
    hooks.release(e.event);
    if (e.began)
      hooks.release(e.began);
    pending.pop_front();
  }
  if (pending.empty())
    return Status::ok();
  Entry &oldest = pending.front();
  if (std::string error = hooks.asyncError(); !error.empty())
    return fail(oldest.op + ": " + error);
  bool started;
  if (Status s = begun(oldest, started); !s || !started)
    return s;
  if (hooks.now() - oldest.start > timeout) {
    std::ostringstream os;
    os << oldest.op << " did not finish in " << timeout
       << " s (a rank died or stopped answering)";
    return fail(os.str());
  }
  return Status::ok();
}

} // namespace shardx::rt
