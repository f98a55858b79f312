//===- FaultInjection.h - Failures on purpose, for the tests ----*- C++ -*-===//
//
// Part of ShardX.
//
// How the failure tests make one rank fail: a plan chosen once when a run
// is set up (from the test's options or environment), and a communicator
// that forwards every call to the real one and fails the one the plan
// names. Nothing here runs in a run that injects nothing: the launcher's
// communicator is used as it is.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_FAULTINJECTION_H
#define SHARDX_RUNTIME_FAULTINJECTION_H

#include "shardx/Runtime/Communicator.h"

#include <memory>
#include <string>

namespace shardx::rt {

/// Which rank fails, and where.
struct FaultPlan {
  /// The rank that fails before its program runs, or -1.
  int64_t failBeforeRun = -1;
  /// The rank whose `failAtWait`-th wait (counted from 1) fails while its
  /// collective is in flight, or -1.
  int64_t failInFlight = -1;
  int64_t failAtWait = 1;

  /// The plan of the failure tests' environment: SHARDX_TEST_FAIL_RANK=r
  /// (r fails before running) and SHARDX_TEST_FAIL_IN_FLIGHT=r (r fails at
  /// its first wait). Read when a run is set up, never per collective.
  static FaultPlan fromEnvironment();

  /// The error `rank` fails with before running ("" when it runs).
  std::string failureBeforeRun(int64_t rank) const;
};

/// A communicator that forwards every call to `inner` (which must outlive
/// it) and fails the `nth` wait (counted from 1): it aborts `inner`'s world
/// with "rank R: <message>", then waits for the request on `inner` (which
/// fails at once, and after which no collective uses its buffers), and
/// returns `message`.
std::unique_ptr<Communicator> failAtWait(Communicator &inner, int64_t nth,
                                         std::string message);

/// `comm` wrapped as `plan` says for its rank, or null where the plan
/// injects nothing there.
std::unique_ptr<Communicator> injectFaults(Communicator &comm,
                                           const FaultPlan &plan);

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_FAULTINJECTION_H
