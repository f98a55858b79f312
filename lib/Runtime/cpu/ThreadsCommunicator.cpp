//===- ThreadsCommunicator.cpp - Ranks as threads of one process ----------===//
//
// Part of ShardX.
//
// The `threads` backend: every rank is a thread; a collective publishes each
// member's buffers, meets the group at a barrier, reads the peers' buffers
// into a private result, meets again (so no buffer changes while a peer
// reads it), then writes the result. Barriers wait at most the timeout;
// a timeout or a failing rank aborts the whole world with a message naming
// the rank and the cause.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Communicator.h"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

namespace shardx::rt {
namespace {

/// What a rank shares with its group during one collective.
struct Slot {
  const void *send = nullptr;
  const std::vector<size_t> *counts = nullptr;
};

/// State shared by all ranks of one threads world.
struct World {
  std::vector<int64_t> meshShape;
  std::chrono::duration<double> timeout;
  std::mutex mutex;
  std::condition_variable wake;
  bool aborted = false;
  std::string abortMessage;
  std::vector<Slot> slots;
  struct BarrierState {
    size_t arrived = 0;
    uint64_t generation = 0;
  };
  std::map<std::vector<int64_t>, BarrierState> barriers;
};

class ThreadsCommunicator : public Communicator {
  /// Per member, the all_reduce size above which it runs as reduce_scatter
  /// plus all_gather.
  static constexpr size_t kSplitAllReduceElements = 16384;

public:
  ThreadsCommunicator(World &world, int64_t rank)
      : Communicator(world.meshShape, rank), world(world) {}

  const char *getBackendName() const override { return "threads"; }

  void abort(const std::string &cause) override {
    std::lock_guard<std::mutex> lock(world.mutex);
    if (!world.aborted) {
      world.aborted = true;
      world.abortMessage = cause;
    }
    world.wake.notify_all();
  }

  Status allGather(const void *send, void *recv,
                   const std::vector<size_t> &counts, DType type,
                   const std::vector<int64_t> &axes) override {
    size_t elem = dtypeSize(type);
    size_t total = 0;
    for (size_t c : counts)
      total += c * elem;
    char *result = scratchOf(total);
    return exchange(
        "all_gather", axes, {send, &counts}, counts.size(),
        [&](const std::vector<int64_t> &members) -> Status {
          size_t offset = 0;
          for (size_t i = 0; i < members.size(); ++i) {
            const Slot &peer = world.slots[members[i]];
            if (*peer.counts != counts)
              return mismatch("all_gather", members[i]);
            std::memcpy(result + offset, peer.send, counts[i] * elem);
            offset += counts[i] * elem;
          }
          return Status::ok();
        },
        [&] { std::memcpy(recv, result, total); });
  }

  Status reduceScatter(const void *send, void *recv,
                       const std::vector<size_t> &counts, DType type,
                       ReduceOp op, const std::vector<int64_t> &axes) override {
    size_t elem = dtypeSize(type);
    std::vector<char> &result = scratch;
    return exchange(
        "reduce_scatter", axes, {send, &counts}, counts.size(),
        [&](const std::vector<int64_t> &members) -> Status {
          size_t me = static_cast<size_t>(getGroupIndex(axes));
          size_t offset = 0;
          for (size_t i = 0; i < me; ++i)
            offset += counts[i];
          result.resize(counts[me] * elem);
          for (size_t i = 0; i < members.size(); ++i) {
            const Slot &peer = world.slots[members[i]];
            if (*peer.counts != counts)
              return mismatch("reduce_scatter", members[i]);
            const char *p =
                static_cast<const char *>(peer.send) + offset * elem;
            if (i == 0)
              std::memcpy(result.data(), p, result.size());
            else
              reduceInto(result.data(), p, counts[me], type, op);
          }
          if (op == ReduceOp::Avg)
            divideBy(result.data(), counts[me], type,
                     static_cast<int64_t>(members.size()));
          return Status::ok();
        },
        [&] { std::memcpy(recv, result.data(), result.size()); });
  }

  Status allReduce(const void *send, void *recv, size_t count, DType type,
                   ReduceOp op, const std::vector<int64_t> &axes) override {
    // Large messages: reduce_scatter then all_gather, so each rank reduces
    // only its piece (n times less arithmetic than reducing everything).
    if (Status s = checkAxes(axes, "all_reduce"); !s)
      return s;
    size_t n = getGroup(axes).size();
    if (n > 1 && count >= kSplitAllReduceElements * n) {
      std::vector<size_t> counts(n, count / n);
      counts.back() += count % n;
      std::vector<char> piece(counts[getGroupIndex(axes)] * dtypeSize(type));
      if (Status s = reduceScatter(send, piece.data(), counts, type, op, axes);
          !s)
        return s;
      return allGather(piece.data(), recv, counts, type, axes);
    }
    std::vector<size_t> counts = {count};
    size_t elem = dtypeSize(type);
    std::vector<char> &result = scratch;
    result.resize(count * elem);
    return exchange(
        "all_reduce", axes, {send, &counts}, 0,
        [&](const std::vector<int64_t> &members) -> Status {
          for (size_t i = 0; i < members.size(); ++i) {
            const Slot &peer = world.slots[members[i]];
            if (*peer.counts != counts)
              return mismatch("all_reduce", members[i]);
            if (i == 0)
              std::memcpy(result.data(), peer.send, result.size());
            else
              reduceInto(result.data(), peer.send, count, type, op);
          }
          if (op == ReduceOp::Avg)
            divideBy(result.data(), count, type,
                     static_cast<int64_t>(members.size()));
          return Status::ok();
        },
        [&] { std::memcpy(recv, result.data(), result.size()); });
  }

  Status allToAll(const void *send, const std::vector<size_t> &sendCounts,
                  void *recv, const std::vector<size_t> &recvCounts, DType type,
                  const std::vector<int64_t> &axes) override {
    size_t elem = dtypeSize(type);
    size_t total = 0;
    for (size_t c : recvCounts)
      total += c * elem;
    char *result = scratchOf(total);
    if (sendCounts.size() != recvCounts.size())
      return Status::error("all_to_all on rank " + std::to_string(rank) +
                           ": send and receive counts differ in length");
    return exchange(
        "all_to_all", axes, {send, &sendCounts}, sendCounts.size(),
        [&](const std::vector<int64_t> &members) -> Status {
          size_t me = static_cast<size_t>(getGroupIndex(axes));
          size_t written = 0;
          for (size_t j = 0; j < members.size(); ++j) {
            const Slot &peer = world.slots[members[j]];
            const std::vector<size_t> &theirs = *peer.counts;
            if (theirs[me] != recvCounts[j])
              return Status::error(
                  "all_to_all on rank " + std::to_string(rank) + ": expects " +
                  std::to_string(recvCounts[j]) + " elements from rank " +
                  std::to_string(members[j]) + ", which sends " +
                  std::to_string(theirs[me]));
            size_t offset = 0;
            for (size_t k = 0; k < me; ++k)
              offset += theirs[k];
            const char *p =
                static_cast<const char *>(peer.send) + offset * elem;
            std::memcpy(result + written, p, theirs[me] * elem);
            written += theirs[me] * elem;
          }
          return Status::ok();
        },
        [&] { std::memcpy(recv, result, total); });
  }

  Status permute(const void *send, void *recv, size_t count, DType type,
                 const std::vector<std::pair<int64_t, int64_t>> &pairs,
                 const std::vector<int64_t> &axes) override {
    std::vector<size_t> counts = {count};
    std::vector<char> result(count * dtypeSize(type), 0);
    return exchange(
        "permute", axes, {send, &counts}, 0,
        [&](const std::vector<int64_t> &members) -> Status {
          int64_t me = getGroupIndex(axes);
          for (auto [source, target] : pairs) {
            if (source < 0 || target < 0 ||
                source >= static_cast<int64_t>(members.size()) ||
                target >= static_cast<int64_t>(members.size()))
              return Status::error("permute on rank " + std::to_string(rank) +
                                   ": pair index out of range");
            if (target != me)
              continue;
            if (Status s = readPeer("permute", members[source], counts, result);
                !s)
              return s;
          }
          return Status::ok();
        },
        [&] { std::memcpy(recv, result.data(), result.size()); });
  }

  Status broadcast(void *buffer, size_t count, DType type, int64_t root,
                   const std::vector<int64_t> &axes) override {
    std::vector<size_t> counts = {count};
    std::vector<char> result(count * dtypeSize(type));
    return exchange(
        "broadcast", axes, {buffer, &counts}, 0,
        [&](const std::vector<int64_t> &members) -> Status {
          if (root < 0 || root >= static_cast<int64_t>(members.size()))
            return Status::error("broadcast on rank " + std::to_string(rank) +
                                 ": root " + std::to_string(root) +
                                 " is out of range");
          return readPeer("broadcast", members[root], counts, result);
        },
        [&] { std::memcpy(buffer, result.data(), result.size()); });
  }

  Status barrier(const std::vector<int64_t> &axes) override {
    if (Status s = checkAxes(axes, "barrier"); !s)
      return s;
    return meet(getGroup(axes), "barrier");
  }

private:
  /// A private result buffer kept across calls (no page faults per call).
  char *scratchOf(size_t bytes) {
    if (scratch.size() < bytes)
      scratch.resize(bytes);
    return scratch.data();
  }

  /// Copies all of `peer`'s published buffer into `result` after checking
  /// that it published the same counts.
  Status readPeer(const char *op, int64_t peer,
                  const std::vector<size_t> &counts,
                  std::vector<char> &result) const {
    const Slot &slot = world.slots[peer];
    if (*slot.counts != counts)
      return mismatch(op, peer);
    std::memcpy(result.data(), slot.send, result.size());
    return Status::ok();
  }

  Status mismatch(const char *op, int64_t peer) const {
    return Status::error(std::string(op) + " on rank " + std::to_string(rank) +
                         ": rank " + std::to_string(peer) +
                         " passed different sizes");
  }

  /// Waits until every member of `members` arrives, the world aborts, or
  /// the timeout passes (which aborts the world).
  Status meet(const std::vector<int64_t> &members, const char *op) {
    std::unique_lock<std::mutex> lock(world.mutex);
    if (world.aborted)
      return Status::error("rank " + std::to_string(rank) + " stopped in " +
                           op + ": " + world.abortMessage);
    World::BarrierState &b = world.barriers[members];
    uint64_t generation = b.generation;
    if (++b.arrived == members.size()) {
      b.arrived = 0;
      ++b.generation;
      world.wake.notify_all();
      return Status::ok();
    }
    bool met = world.wake.wait_for(lock, world.timeout, [&] {
      return b.generation != generation || world.aborted;
    });
    if (world.aborted)
      return Status::error("rank " + std::to_string(rank) + " stopped in " +
                           op + ": " + world.abortMessage);
    if (!met) {
      world.aborted = true;
      world.abortMessage = "rank " + std::to_string(rank) +
                           " timed out after " +
                           std::to_string(world.timeout.count()) +
                           " s waiting for its group in " + op;
      world.wake.notify_all();
      return Status::error(world.abortMessage);
    }
    return Status::ok();
  }

  /// One collective: publish `mine`, meet, `read` the peers into a private
  /// result, meet again, `write` the result.
  template <typename Read, typename Write>
  Status exchange(const char *op, const std::vector<int64_t> &axes, Slot mine,
                  size_t expectedMembers, Read read, Write write) {
    if (Status s = checkAxes(axes, op); !s)
      return s;
    std::vector<int64_t> members = getGroup(axes);
    if (expectedMembers && expectedMembers != members.size())
      return Status::error(
          std::string(op) + " on rank " + std::to_string(rank) + ": " +
          std::to_string(expectedMembers) + " counts for a group of " +
          std::to_string(members.size()));
    {
      std::lock_guard<std::mutex> lock(world.mutex);
      world.slots[rank] = mine;
    }
    if (Status s = meet(members, op); !s)
      return s;
    Status readStatus = read(members);
    if (Status s = meet(members, op); !s)
      return s;
    if (!readStatus) {
      abort(readStatus.message());
      return readStatus;
    }
    write();
    return Status::ok();
  }

  World &world;
  std::vector<char> scratch;
};

} // namespace

std::vector<Status>
runThreads(const std::vector<int64_t> &meshShape,
           const std::function<Status(Communicator &)> &body,
           double timeoutSeconds) {
  World world;
  world.meshShape = meshShape;
  world.timeout = std::chrono::duration<double>(timeoutSeconds);
  int64_t size = 1;
  for (int64_t n : meshShape)
    size *= n;
  world.slots.resize(size);
  std::vector<Status> statuses(size);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      ThreadsCommunicator comm(world, r);
      Status s = body(comm);
      if (!s)
        comm.abort("rank " + std::to_string(r) + " failed: " + s.message());
      statuses[r] = std::move(s);
    });
  for (std::thread &t : threads)
    t.join();
  return statuses;
}

} // namespace shardx::rt
