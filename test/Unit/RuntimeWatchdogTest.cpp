//===- RuntimeWatchdogTest.cpp - Collectives in flight on a stream --------===//
//
// Part of ShardX.
//
// The logic of CollectiveWatchdog (what the nccl communicator's watchdog
// thread polls) with its device hooks answered by the test: which events
// are done or failed, the library's asynchronous error and the clock. The
// nccl communicator's use of it runs on a GPU only (RuntimeNcclTest.cpp).
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Watchdog.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

using namespace shardx::rt;

namespace {

/// Events are the addresses of `slots`; the test sets their state.
struct FakeDevice {
  /// 0 done, 1 pending, -1 failed.
  std::map<void *, int> state;
  std::vector<void *> released;
  std::string asyncError;
  double clock = 100.0;
  char slots[16];

  void *event(int i) {
    state[&slots[i]] = 1;
    return &slots[i];
  }

  CollectiveWatchdog::Hooks hooks() {
    CollectiveWatchdog::Hooks h;
    h.query = [this](void *e, std::string &error) {
      int q = state.at(e);
      if (q < 0)
        error = "CUDA error 700 (an illegal memory access was encountered)";
      return q;
    };
    h.release = [this](void *e) { released.push_back(e); };
    h.asyncError = [this] { return asyncError; };
    h.now = [this] { return clock; };
    return h;
  }
};

TEST(CollectiveWatchdog, RetiresFinishedCollectivesInOrder) {
  FakeDevice dev;
  CollectiveWatchdog w(dev.hooks(), 60.0);
  void *a = dev.event(0), *b = dev.event(1), *c = dev.event(2);
  EXPECT_EQ(w.add("all_reduce", a), 0);
  EXPECT_EQ(w.add("all_gather", b), 1);
  EXPECT_EQ(w.add("all_reduce", c), 2);
  EXPECT_EQ(w.inFlight(), 3u);
  // The stream runs them in order: b done before a is not retired yet.
  dev.state[b] = 0;
  EXPECT_TRUE(w.poll());
  EXPECT_EQ(w.inFlight(), 3u);
  dev.state[a] = 0;
  EXPECT_TRUE(w.poll());
  EXPECT_EQ(w.inFlight(), 1u);
  EXPECT_EQ(dev.released, (std::vector<void *>{a, b}));
  dev.state[c] = 0;
  EXPECT_TRUE(w.poll());
  EXPECT_EQ(w.inFlight(), 0u);
  EXPECT_FALSE(w.hasFailed());
}

TEST(CollectiveWatchdog, LookupGivesTheEventUntilItIsDone) {
  FakeDevice dev;
  CollectiveWatchdog w(dev.hooks(), 60.0);
  void *a = dev.event(0);
  int64_t r = w.add("all_reduce", a);
  void *event = nullptr;
  ASSERT_TRUE(w.lookup(r, event));
  EXPECT_EQ(event, a);
  dev.state[a] = 0;
  ASSERT_TRUE(w.poll());
  ASSERT_TRUE(w.lookup(r, event));
  EXPECT_EQ(event, nullptr);
  Status s = w.lookup(7, event);
  EXPECT_FALSE(s);
  EXPECT_EQ(s.message(), "wait for unknown request 7");
  EXPECT_FALSE(w.lookup(-1, event));
}

TEST(CollectiveWatchdog, TheOldestCollectiveTimesOut) {
  FakeDevice dev;
  CollectiveWatchdog w(dev.hooks(), 2.5);
  w.add("all_gather", dev.event(0));
  dev.clock += 1.0;
  w.add("all_reduce", dev.event(1));
  dev.clock += 1.0;
  EXPECT_TRUE(w.poll());
  dev.clock += 1.0; // the all_gather is 3 s old
  Status s = w.poll();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "all_gather did not finish in 2.5 s (a rank died or "
                         "stopped answering)");
  // The failure sticks, even once the work completes.
  dev.state[&dev.slots[0]] = 0;
  dev.state[&dev.slots[1]] = 0;
  EXPECT_EQ(w.poll().message(), s.message());
  EXPECT_TRUE(w.hasFailed());
}

// Compute queued ahead of a collective is not a silent peer: the clock
// starts when the collective's began event completes.
TEST(CollectiveWatchdog, TheTimeoutCountsFromWhenTheCollectiveBegan) {
  FakeDevice dev;
  CollectiveWatchdog w(dev.hooks(), 2.5);
  void *began = dev.event(0), *done = dev.event(1);
  w.add("all_reduce", done, began);
  dev.clock += 10.0; // 10 s of GEMMs ahead of it
  EXPECT_TRUE(w.poll());
  dev.state[began] = 0;
  EXPECT_TRUE(w.poll()); // began now: the clock starts
  EXPECT_EQ(dev.released, (std::vector<void *>{began}));
  dev.clock += 2.0;
  EXPECT_TRUE(w.poll());
  dev.clock += 1.0;
  Status s = w.poll();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "all_reduce did not finish in 2.5 s (a rank died or "
                         "stopped answering)");
}

TEST(CollectiveWatchdog, AFinishedCollectiveReleasesItsBeganEvent) {
  FakeDevice dev;
  void *began = dev.event(0), *done = dev.event(1), *pending = dev.event(2),
       *pendingDone = dev.event(3);
  {
    CollectiveWatchdog w(dev.hooks(), 60.0);
    w.add("all_gather", done, began);
    w.add("all_reduce", pendingDone, pending);
    dev.state[began] = 0;
    dev.state[done] = 0;
    EXPECT_TRUE(w.poll());
    EXPECT_EQ(w.inFlight(), 1u);
  }
  EXPECT_EQ(dev.released,
            (std::vector<void *>{done, began, pendingDone, pending}));
}

TEST(CollectiveWatchdog, AnAsynchronousErrorNamesTheOldestInFlight) {
  FakeDevice dev;
  CollectiveWatchdog w(dev.hooks(), 60.0);
  void *a = dev.event(0);
  w.add("reduce_scatter", a);
  w.add("all_reduce", dev.event(1));
  dev.state[a] = 0;
  dev.asyncError = "remote process exited or there was a network error";
  Status s = w.poll();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(),
            "all_reduce: remote process exited or there was a network error");
}

TEST(CollectiveWatchdog, NoInFlightCollectiveNoAsynchronousCheck) {
  FakeDevice dev;
  CollectiveWatchdog w(dev.hooks(), 60.0);
  dev.asyncError = "unhandled system error";
  EXPECT_TRUE(w.poll());
}

TEST(CollectiveWatchdog, AFailedEventIsTheError) {
  FakeDevice dev;
  CollectiveWatchdog w(dev.hooks(), 60.0);
  void *a = dev.event(0);
  w.add("permute", a);
  dev.state[a] = -1;
  Status s = w.poll();
  ASSERT_FALSE(s);
  EXPECT_EQ(s.message(), "permute: CUDA error 700 (an illegal memory access "
                         "was encountered)");
}

TEST(CollectiveWatchdog, EventsStillTrackedAreReleasedAtTheEnd) {
  FakeDevice dev;
  void *a = dev.event(0), *b = dev.event(1);
  {
    CollectiveWatchdog w(dev.hooks(), 60.0);
    w.add("all_reduce", a);
    w.add("all_reduce", b);
  }
  EXPECT_EQ(dev.released, (std::vector<void *>{a, b}));
}

} // namespace
