//===- FaultInjection.cpp - Failures on purpose, for the tests ------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/FaultInjection.h"

#include <cstdlib>

namespace shardx::rt {
namespace {

/// Forwards to `inner`; the `nth` wait fails (see failAtWait).
class FailingWaits : public Communicator {
public:
  FailingWaits(Communicator &inner, int64_t nth, std::string message)
      : Communicator(inner.getMeshShape(), inner.getRank()), inner(inner),
        nth(nth), message(std::move(message)) {}

  const char *getBackendName() const override { return inner.getBackendName(); }
  MemorySpace getMemorySpace() const override {
    return inner.getMemorySpace();
  }
  void abort(const std::string &cause) override { inner.abort(cause); }

  Status allGather(const void *send, void *recv,
                   const std::vector<size_t> &counts, DType type,
                   const std::vector<int64_t> &axes) override {
    return inner.allGather(send, recv, counts, type, axes);
  }
  Status reduceScatter(const void *send, void *recv,
                       const std::vector<size_t> &counts, DType type,
                       ReduceOp op, const std::vector<int64_t> &axes) override {
    return inner.reduceScatter(send, recv, counts, type, op, axes);
  }
  Status allReduce(const void *send, void *recv, size_t count, DType type,
                   ReduceOp op, const std::vector<int64_t> &axes) override {
    return inner.allReduce(send, recv, count, type, op, axes);
  }
  Status allToAll(const void *send, const std::vector<size_t> &sendCounts,
                  void *recv, const std::vector<size_t> &recvCounts, DType type,
                  const std::vector<int64_t> &axes) override {
    return inner.allToAll(send, sendCounts, recv, recvCounts, type, axes);
  }
  Status permute(const void *send, void *recv, size_t count, DType type,
                 const std::vector<std::pair<int64_t, int64_t>> &pairs,
                 const std::vector<int64_t> &axes) override {
    return inner.permute(send, recv, count, type, pairs, axes);
  }
  Status broadcast(void *buffer, size_t count, DType type, int64_t root,
                   const std::vector<int64_t> &axes) override {
    return inner.broadcast(buffer, count, type, root, axes);
  }
  Status barrier(const std::vector<int64_t> &axes) override {
    return inner.barrier(axes);
  }
  Status allReduceStart(const void *send, void *recv, size_t count, DType type,
                        ReduceOp op, const std::vector<int64_t> &axes,
                        int64_t &request) override {
    return inner.allReduceStart(send, recv, count, type, op, axes, request);
  }
  Status allGatherStart(const void *send, void *recv,
                        const std::vector<size_t> &counts, DType type,
                        const std::vector<int64_t> &axes,
                        int64_t &request) override {
    return inner.allGatherStart(send, recv, counts, type, axes, request);
  }
  Status reduceScatterStart(const void *send, void *recv,
                            const std::vector<size_t> &counts, DType type,
                            ReduceOp op, const std::vector<int64_t> &axes,
                            int64_t &request) override {
    return inner.reduceScatterStart(send, recv, counts, type, op, axes,
                                    request);
  }
  Status wait(int64_t request) override {
    if (++waits != nth)
      return inner.wait(request);
    // The world fails while this collective is in flight; it ends (failed)
    // before the caller may reuse its buffers.
    inner.abort("rank " + std::to_string(getRank()) + ": " + message);
    (void)inner.wait(request);
    return Status::error(message);
  }
  bool orderAfterStream(void *stream) override {
    return inner.orderAfterStream(stream);
  }
  Status finish() override { return inner.finish(); }

private:
  Communicator &inner;
  int64_t nth;
  int64_t waits = 0;
  std::string message;
};

int64_t rankFromEnvironment(const char *name) {
  const char *value = std::getenv(name);
  return value && *value ? std::atoll(value) : -1;
}

} // namespace

FaultPlan FaultPlan::fromEnvironment() {
  FaultPlan plan;
  plan.failBeforeRun = rankFromEnvironment("SHARDX_TEST_FAIL_RANK");
  plan.failInFlight = rankFromEnvironment("SHARDX_TEST_FAIL_IN_FLIGHT");
  return plan;
}

std::string FaultPlan::failureBeforeRun(int64_t rank) const {
  return rank == failBeforeRun ? "injected failure (SHARDX_TEST_FAIL_RANK)"
                               : "";
}

std::unique_ptr<Communicator> failAtWait(Communicator &inner, int64_t nth,
                                         std::string message) {
  return std::make_unique<FailingWaits>(inner, nth, std::move(message));
}

std::unique_ptr<Communicator> injectFaults(Communicator &comm,
                                           const FaultPlan &plan) {
  if (comm.getRank() != plan.failInFlight)
    return nullptr;
  return failAtWait(comm, plan.failAtWait,
                    "injected failure with a collective in flight "
                    "(SHARDX_TEST_FAIL_IN_FLIGHT)");
}

} // namespace shardx::rt
