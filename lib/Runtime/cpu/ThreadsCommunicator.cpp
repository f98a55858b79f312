//===- ThreadsCommunicator.cpp - Ranks as threads of one process ----------===//
//
// Part of ShardX.
//
// The `threads` backend: every rank is a thread, so a rank can read its
// peers' buffers directly. A collective publishes each member's buffers,
// meets the group at a barrier, then every member moves its own part of the
// data once, straight from the peers' send buffers into its own output
// (all_gather: each member copies the pieces into its output; reduce_scatter:
// each member reduces its piece across all send buffers; all_reduce: each
// member reduces a 1/n slice into its output, meets, then copies the other
// slices from the peers' outputs). A last meeting keeps every buffer alive
// and unchanged until no peer reads it.
//
// A write goes straight to the caller's output only where it cannot clobber
// a buffer some member still reads; the usual in-place forms (all_reduce
// with send == recv, all_gather with send at this member's piece of recv,
// reduce_scatter with recv at this member's piece of send) qualify. Any other
// overlap stages the result in a private buffer copied out after the last
// meeting. Barriers wait at most the timeout; a timeout or a failing rank
// aborts the whole world with a message naming the rank and the cause.
//
// The data moves through a rank's BufferOps: host copies and reductions here
// (`threads`), device copies and reduction kernels on the rank's stream for
// `cuda-local` (lib/Runtime/cuda), which completes them before each meeting.
//
// A started collective (allReduceStart, allGatherStart, reduceScatterStart)
// runs on the rank's communication thread (CommThread.h) while the rank
// computes; a synchronous collective first waits for the started ones, so
// that every rank runs its collectives in one order. On `threads` that
// thread is used only where asyncCollectivesEnabled gives each rank a spare
// core (otherwise starts take the synchronous default). On `cuda-local` it
// is always used: its device work goes to that thread's own stream (the CUDA
// runtime has one per thread), which it completes before the collective
// returns, so the rank's kernels queued between the start and the wait
// overlap the collective.
//
//===----------------------------------------------------------------------===//

#include "CommThread.h"

#include "shardx/Runtime/Communicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>

namespace shardx::rt {
namespace {

/// What a rank shares with its group during one collective: the buffer its
/// peers read, the buffer it writes (to check that the two never overlap
/// across members), and its counts.
struct Slot {
  const void *send = nullptr;
  size_t sendBytes = 0;
  const void *recv = nullptr;
  size_t recvBytes = 0;
  const std::vector<size_t> *counts = nullptr;
  /// broadcast: the root this member was given.
  int64_t root = -1;
  /// all_reduce: where this member's reduced slice lies (its output or its
  /// scratch), set before the middle meeting.
  const char *reduced = nullptr;
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
  /// Ranks moving data (between the meetings of a collective): reading
  /// their peers' buffers.
  int64_t moving = 0;
  struct BarrierState {
    size_t arrived = 0;
    uint64_t generation = 0;
  };
  std::map<std::vector<int64_t>, BarrierState> barriers;
};

/// This rank's group in one collective.
struct Group {
  std::vector<int64_t> members;
  size_t me = 0;
};

bool overlaps(const void *a, size_t aBytes, const void *b, size_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a);
  auto y = reinterpret_cast<uintptr_t>(b);
  return aBytes && bBytes && x < y + bBytes && y < x + aBytes;
}

/// Byte offsets of the pieces `counts` in a buffer of their concatenation
/// (one more entry than counts: the end).
std::vector<size_t> pieceOffsets(const std::vector<size_t> &counts,
                                 size_t elem) {
  std::vector<size_t> offsets(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i)
    offsets[i + 1] = offsets[i] + counts[i] * elem;
  return offsets;
}

/// reduceAll on bf16/f16: the members' terms accumulate in f32 and are
/// rounded once.
void reduceAllHalf(void *out, const std::vector<const char *> &in, size_t count,
                   DType type, ReduceOp op) {
  constexpr size_t kBlock = 2048;
  alignas(64) float acc[kBlock], term[kBlock];
  for (size_t k = 0; k < count; k += kBlock) {
    size_t len = std::min(kBlock, count - k);
    widenToF32(acc, in[0] + 2 * k, len, type);
    for (size_t i = 1; i < in.size(); ++i) {
      widenToF32(term, in[i] + 2 * k, len, type);
      reduceInto(acc, term, len, DType::F32, op);
    }
    if (op == ReduceOp::Avg)
      divideBy(acc, len, DType::F32, static_cast<int64_t>(in.size()));
    narrowFromF32(static_cast<char *>(out) + 2 * k, acc, len, type);
  }
}

/// out = in[0] op in[1] op ... op in[n-1] over `count` elements, divided by
/// n for avg. Reduces in member order, as before, so results do not change
/// with the algorithm. Works a block at a time in a private buffer: the
/// inputs stream from memory once, the partial result stays in L1, and `out`
/// may be one of the inputs (in-place) since each block is read whole before
/// it is written.
void reduceAll(void *out, const std::vector<const char *> &in, size_t count,
               DType type, ReduceOp op) {
  if (isHalfFloat(type))
    return reduceAllHalf(out, in, count, type, op);
  constexpr size_t kBlockBytes = 16384;
  alignas(64) char block[kBlockBytes];
  size_t elem = dtypeSize(type);
  size_t perBlock = kBlockBytes / elem;
  for (size_t k = 0; k < count; k += perBlock) {
    size_t len = std::min(perBlock, count - k);
    size_t at = k * elem;
    std::memcpy(block, in[0] + at, len * elem);
    for (size_t i = 1; i < in.size(); ++i)
      reduceInto(block, in[i] + at, len, type, op);
    if (op == ReduceOp::Avg)
      divideBy(block, len, type, static_cast<int64_t>(in.size()));
    std::memcpy(static_cast<char *>(out) + at, block, len * elem);
  }
}

/// Host memory: the `threads` backend.
class HostOps : public HostMemoryOps<BufferOps> {
public:
  Status reduce(void *out, const std::vector<const char *> &in, size_t count,
                DType type, ReduceOp op) override {
    reduceAll(out, in, count, type, op);
    return Status::ok();
  }
  char *scratch(size_t bytes) override {
    if (buffer.size() < bytes)
      buffer.resize(bytes);
    return buffer.data();
  }

private:
  std::vector<char> buffer;
};

class ThreadsCommunicator : public Communicator {
  /// Per member, the all_reduce size from which each member reduces only a
  /// slice and then gathers the others' (one more meeting; below it every
  /// member reduces everything).
  static constexpr size_t kSplitAllReduceElements = 16384;

public:
  ThreadsCommunicator(World &world, int64_t rank, const char *backend,
                      std::unique_ptr<BufferOps> ops)
      : Communicator(world.meshShape, rank), world(world), backend(backend),
        ops(std::move(ops)) {}

  const char *getBackendName() const override { return backend; }
  MemorySpace getMemorySpace() const override { return ops->getMemorySpace(); }

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
    Group g;
    followStarted();
    if (Status s = enter("all_gather", axes, counts.size(), g); !s)
      return s;
    size_t elem = dtypeSize(type);
    std::vector<size_t> offsets = pieceOffsets(counts, elem);
    size_t total = offsets.back();
    char *staged = nullptr;
    return exchange(
        "all_gather", g, {send, counts[g.me] * elem, recv, total, &counts},
        [&]() -> Status {
          if (Status s = checkCounts("all_gather", g, counts); !s)
            return s;
          // In place: a member's piece already lies in its output.
          auto inPlace = [&](size_t i) {
            const Slot &s = slotOf(g, i);
            return s.send == static_cast<const char *>(s.recv) + offsets[i];
          };
          char *out = static_cast<char *>(recv);
          if (!writesAreSafe(g, inPlace))
            out = staged = ops->scratch(total);
          for (size_t i = 0; i < g.members.size(); ++i)
            if (staged || i != g.me || !inPlace(i))
              ops->copy(out + offsets[i], slotOf(g, i).send,
                        offsets[i + 1] - offsets[i]);
          return Status::ok();
        },
        [&] {
          if (staged)
            ops->copy(recv, staged, total);
        });
  }

  Status reduceScatter(const void *send, void *recv,
                       const std::vector<size_t> &counts, DType type,
                       ReduceOp op, const std::vector<int64_t> &axes) override {
    Group g;
    followStarted();
    if (Status s = enter("reduce_scatter", axes, counts.size(), g); !s)
      return s;
    size_t elem = dtypeSize(type);
    std::vector<size_t> offsets = pieceOffsets(counts, elem);
    size_t mine = offsets[g.me + 1] - offsets[g.me];
    char *staged = nullptr;
    return exchange(
        "reduce_scatter", g, {send, offsets.back(), recv, mine, &counts},
        [&]() -> Status {
          if (Status s = checkCounts("reduce_scatter", g, counts); !s)
            return s;
          // In place: a member's output is its own piece of its input, which
          // only it reads.
          auto inPlace = [&](size_t i) {
            const Slot &s = slotOf(g, i);
            return s.recv == static_cast<const char *>(s.send) + offsets[i];
          };
          void *out = recv;
          if (!writesAreSafe(g, inPlace))
            out = staged = ops->scratch(mine);
          std::vector<const char *> in;
          for (size_t i = 0; i < g.members.size(); ++i)
            in.push_back(static_cast<const char *>(slotOf(g, i).send) +
                         offsets[g.me]);
          return ops->reduce(out, in, counts[g.me], type, op);
        },
        [&] {
          if (staged)
            ops->copy(recv, staged, mine);
        });
  }

  Status allReduce(const void *send, void *recv, size_t count, DType type,
                   ReduceOp op, const std::vector<int64_t> &axes) override {
    Group g;
    followStarted();
    if (Status s = enter("all_reduce", axes, 0, g); !s)
      return s;
    size_t n = g.members.size();
    size_t elem = dtypeSize(type);
    size_t bytes = count * elem;
    std::vector<size_t> counts = {count};
    char *staged = nullptr;
    // Large messages: each member reduces one slice (n times less
    // arithmetic and reading than reducing everything), then copies the
    // others' slices.
    bool split = n > 1 && count >= kSplitAllReduceElements * n;
    return exchange(
        "all_reduce", g, {send, bytes, recv, bytes, &counts},
        [&]() -> Status {
          if (Status s = checkCounts("all_reduce", g, counts); !s)
            return s;
          // In place, a split all_reduce writes a member's own slice while
          // the others read other slices. Unsplit, every member reads all of
          // every input, so no output may overlap any (a lone member reads
          // only its own).
          auto inPlace = [&](size_t i) {
            const Slot &s = slotOf(g, i);
            return (split || n == 1) && s.recv == s.send;
          };
          char *out = static_cast<char *>(recv);
          if (!writesAreSafe(g, inPlace, /*outputsAreRead=*/split))
            out = staged = ops->scratch(bytes);
          std::vector<const char *> in;
          for (size_t i = 0; i < n; ++i)
            in.push_back(static_cast<const char *>(slotOf(g, i).send));
          if (!split) {
            return ops->reduce(out, in, count, type, op);
          }
          // Slices start at multiples of 16 elements (whole cache lines).
          auto start = [&](size_t i) {
            return i == n ? count : count * i / n / 16 * 16;
          };
          size_t lo = start(g.me), hi = start(g.me + 1);
          for (const char *&p : in)
            p += lo * elem;
          if (Status s = ops->reduce(out + lo * elem, in, hi - lo, type, op);
              !s)
            return s;
          // Peers read `reduced` after the meeting, which orders this write
          // (completed) before their reads.
          if (Status s = ops->complete(); !s)
            return s;
          world.slots[rank].reduced = out;
          if (Status s = meet(g.members, "all_reduce"); !s)
            return s;
          for (size_t i = 0; i < n; ++i)
            if (i != g.me)
              ops->copy(out + start(i) * elem,
                        slotOf(g, i).reduced + start(i) * elem,
                        (start(i + 1) - start(i)) * elem);
          return Status::ok();
        },
        [&] {
          if (staged)
            ops->copy(recv, staged, bytes);
        });
  }

  Status allToAll(const void *send, const std::vector<size_t> &sendCounts,
                  void *recv, const std::vector<size_t> &recvCounts, DType type,
                  const std::vector<int64_t> &axes) override {
    if (sendCounts.size() != recvCounts.size())
      return Status::error("all_to_all on rank " + std::to_string(rank) +
                           ": send and receive counts differ in length");
    Group g;
    followStarted();
    if (Status s = enter("all_to_all", axes, sendCounts.size(), g); !s)
      return s;
    size_t elem = dtypeSize(type);
    size_t sendBytes = pieceOffsets(sendCounts, elem).back();
    size_t total = pieceOffsets(recvCounts, elem).back();
    char *staged = nullptr;
    return exchange(
        "all_to_all", g, {send, sendBytes, recv, total, &sendCounts},
        [&]() -> Status {
          // Check every peer before reading any: a wrong count would read
          // past its buffer.
          for (size_t j = 0; j < g.members.size(); ++j) {
            const std::vector<size_t> &theirs = *slotOf(g, j).counts;
            if (theirs[g.me] != recvCounts[j])
              return Status::error(
                  "all_to_all on rank " + std::to_string(rank) + ": expects " +
                  std::to_string(recvCounts[j]) + " elements from rank " +
                  std::to_string(g.members[j]) + ", which sends " +
                  std::to_string(theirs[g.me]));
          }
          char *out = static_cast<char *>(recv);
          if (!writesAreSafe(g, [](size_t) { return false; }))
            out = staged = ops->scratch(total);
          size_t written = 0;
          for (size_t j = 0; j < g.members.size(); ++j) {
            const Slot &peer = slotOf(g, j);
            size_t offset = pieceOffsets(*peer.counts, elem)[g.me];
            ops->copy(out + written,
                      static_cast<const char *>(peer.send) + offset,
                      recvCounts[j] * elem);
            written += recvCounts[j] * elem;
          }
          return Status::ok();
        },
        [&] {
          if (staged)
            ops->copy(recv, staged, total);
        });
  }

  Status permute(const void *send, void *recv, size_t count, DType type,
                 const std::vector<std::pair<int64_t, int64_t>> &pairs,
                 const std::vector<int64_t> &axes) override {
    Group g;
    followStarted();
    if (Status s = enter("permute", axes, 0, g); !s)
      return s;
    size_t bytes = count * dtypeSize(type);
    std::vector<size_t> counts = {count};
    char *staged = nullptr;
    return exchange(
        "permute", g, {send, bytes, recv, bytes, &counts},
        [&]() -> Status {
          int64_t n = static_cast<int64_t>(g.members.size());
          // The last pair that targets this member wins, as if each were
          // received in turn.
          const void *source = nullptr;
          for (auto [from, to] : pairs) {
            if (from < 0 || to < 0 || from >= n || to >= n)
              return Status::error("permute on rank " + std::to_string(rank) +
                                   ": pair index out of range");
            if (to != static_cast<int64_t>(g.me))
              continue;
            const Slot &peer = slotOf(g, static_cast<size_t>(from));
            if (*peer.counts != counts)
              return mismatch("permute", g.members[from]);
            source = peer.send;
          }
          char *out = static_cast<char *>(recv);
          if (!writesAreSafe(g, [](size_t) { return false; }))
            out = staged = ops->scratch(bytes);
          if (source)
            ops->copy(out, source, bytes);
          else
            ops->zero(out, bytes);
          return Status::ok();
        },
        [&] {
          if (staged)
            ops->copy(recv, staged, bytes);
        });
  }

  Status broadcast(void *buffer, size_t count, DType type, int64_t root,
                   const std::vector<int64_t> &axes) override {
    Group g;
    followStarted();
    if (Status s = enter("broadcast", axes, 0, g); !s)
      return s;
    size_t bytes = count * dtypeSize(type);
    std::vector<size_t> counts = {count};
    bool isRoot = root == static_cast<int64_t>(g.me);
    // The root writes nothing; the others write what only they read.
    Slot mine{buffer, bytes, buffer, isRoot ? 0 : bytes, &counts, root};
    char *staged = nullptr;
    return exchange(
        "broadcast", g, mine,
        [&]() -> Status {
          if (root < 0 || root >= static_cast<int64_t>(g.members.size()))
            return Status::error("broadcast on rank " + std::to_string(rank) +
                                 ": root " + std::to_string(root) +
                                 " is out of range");
          const Slot &from = slotOf(g, static_cast<size_t>(root));
          if (*from.counts != counts)
            return mismatch("broadcast", g.members[root]);
          if (isRoot)
            return Status::ok();
          // Safe in place only where every member names the same root, so
          // that no one reads a buffer being written.
          bool sameRoot = true;
          for (size_t i = 0; i < g.members.size(); ++i)
            sameRoot &= slotOf(g, i).root == root;
          char *out = static_cast<char *>(buffer);
          if (!sameRoot || !writesAreSafe(g, [&](size_t i) {
                return i != static_cast<size_t>(root);
              }))
            out = staged = ops->scratch(bytes);
          ops->copy(out, from.send, bytes);
          return Status::ok();
        },
        [&] {
          if (staged)
            ops->copy(buffer, staged, bytes);
        });
  }

  Status barrier(const std::vector<int64_t> &axes) override {
    followStarted();
    if (Status s = checkAxes(axes, "barrier"); !s)
      return s;
    return meet(getGroup(axes), "barrier");
  }

  Status allReduceStart(const void *send, void *recv, size_t count,
                        DType type, ReduceOp op,
                        const std::vector<int64_t> &axes,
                        int64_t &request) override {
    if (!asynchronous)
      return Communicator::allReduceStart(send, recv, count, type, op, axes,
                                          request);
    if (Status s = checkAxes(axes, "all_reduce"); !s)
      return s;
    request = comm.submit([this, send, recv, count, type, op, axes] {
      return allReduce(send, recv, count, type, op, axes);
    });
    return Status::ok();
  }

  Status allGatherStart(const void *send, void *recv,
                        const std::vector<size_t> &counts, DType type,
                        const std::vector<int64_t> &axes,
                        int64_t &request) override {
    if (!asynchronous)
      return Communicator::allGatherStart(send, recv, counts, type, axes,
                                          request);
    if (Status s = checkAxes(axes, "all_gather"); !s)
      return s;
    request = comm.submit([this, send, recv, counts, type, axes] {
      return allGather(send, recv, counts, type, axes);
    });
    return Status::ok();
  }

  Status reduceScatterStart(const void *send, void *recv,
                            const std::vector<size_t> &counts, DType type,
                            ReduceOp op, const std::vector<int64_t> &axes,
                            int64_t &request) override {
    if (!asynchronous)
      return Communicator::reduceScatterStart(send, recv, counts, type, op,
                                              axes, request);
    if (Status s = checkAxes(axes, "reduce_scatter"); !s)
      return s;
    request = comm.submit([this, send, recv, counts, type, op, axes] {
      return reduceScatter(send, recv, counts, type, op, axes);
    });
    return Status::ok();
  }

  Status wait(int64_t request) override {
    if (!asynchronous)
      return Communicator::wait(request);
    return comm.wait(request);
  }

private:
  /// Before a synchronous collective on the rank's thread: the started ones
  /// run first, as on every other rank.
  void followStarted() {
    if (asynchronous && !comm.isWorker())
      comm.drain();
  }

  const Slot &slotOf(const Group &g, size_t i) const {
    return world.slots[g.members[i]];
  }

  /// Whether every member may write its output while the others read: no
  /// output overlaps another member's input, nor (where outputs are read
  /// too) another member's output; a member's output overlaps its own input
  /// only where `inPlace(member)` says the collective allows it. Every
  /// member decides the same from the same slots.
  template <typename InPlace>
  bool writesAreSafe(const Group &g, InPlace inPlace,
                     bool outputsAreRead = false) const {
    for (size_t i = 0; i < g.members.size(); ++i) {
      const Slot &w = slotOf(g, i);
      for (size_t j = 0; j < g.members.size(); ++j) {
        const Slot &r = slotOf(g, j);
        if (overlaps(w.recv, w.recvBytes, r.send, r.sendBytes) &&
            (i != j || !inPlace(i)))
          return false;
        if (outputsAreRead && i != j &&
            overlaps(w.recv, w.recvBytes, r.recv, r.recvBytes))
          return false;
      }
    }
    return true;
  }

  /// Checks that every member published `counts` (before reading any: a
  /// peer with other counts would be read past its end).
  Status checkCounts(const char *op, const Group &g,
                     const std::vector<size_t> &counts) const {
    for (size_t i = 0; i < g.members.size(); ++i)
      if (*slotOf(g, i).counts != counts)
        return mismatch(op, g.members[i]);
    return Status::ok();
  }

  Status mismatch(const char *op, int64_t peer) const {
    return Status::error(std::string(op) + " on rank " + std::to_string(rank) +
                         ": rank " + std::to_string(peer) +
                         " passed different sizes");
  }

  /// Waits until every member of `members` arrives, the world aborts, or
  /// the timeout passes (which aborts the world). A meeting that completed
  /// succeeds on every member, even where the world aborts before a member
  /// wakes: its peers go on past it. Where `startsMoving`, the member that
  /// completes the meeting counts the whole group in `world.moving` before
  /// any member wakes, so that no member's `quiesce` returns while a peer
  /// that passed the meeting may still read its buffers; each member then
  /// leaves with `setMoving(-1)`.
  Status meet(const std::vector<int64_t> &members, const char *op,
              bool startsMoving = false) {
    std::unique_lock<std::mutex> lock(world.mutex);
    if (world.aborted)
      return Status::error("rank " + std::to_string(rank) + " stopped in " +
                           op + ": " + world.abortMessage);
    World::BarrierState &b = world.barriers[members];
    uint64_t generation = b.generation;
    if (++b.arrived == members.size()) {
      b.arrived = 0;
      ++b.generation;
      if (startsMoving)
        world.moving += static_cast<int64_t>(members.size());
      world.wake.notify_all();
      return Status::ok();
    }
    world.wake.wait_for(lock, world.timeout, [&] {
      return b.generation != generation || world.aborted;
    });
    if (b.generation != generation)
      return Status::ok();
    if (world.aborted)
      return Status::error("rank " + std::to_string(rank) + " stopped in " +
                           op + ": " + world.abortMessage);
    // Neither met nor aborted: the wait timed out.
    world.aborted = true;
    world.abortMessage = "rank " + std::to_string(rank) + " timed out after " +
                         std::to_string(world.timeout.count()) +
                         " s waiting for its group in " + op;
    world.wake.notify_all();
    return Status::error(world.abortMessage);
  }

  void setMoving(int delta) {
    std::lock_guard<std::mutex> lock(world.mutex);
    world.moving += delta;
    if (!world.moving)
      world.wake.notify_all();
  }

  /// A collective that failed at a meeting (the world is aborted) returns
  /// `s` once no rank moves data any more: no peer reads or writes this
  /// rank's buffers after it returns, so the caller may free them. No
  /// timeout: a moving rank only copies, reduces, or waits at a meeting,
  /// which the abort ends.
  Status quiesce(Status s) {
    std::unique_lock<std::mutex> lock(world.mutex);
    world.wake.wait(lock, [&] { return world.moving == 0; });
    return s;
  }

  /// Checks `axes` and the number of counts, and finds this rank's group.
  Status enter(const char *op, const std::vector<int64_t> &axes,
               size_t expectedMembers, Group &g) const {
    if (Status s = checkAxes(axes, op); !s)
      return s;
    g.members = getGroup(axes);
    g.me = static_cast<size_t>(getGroupIndex(axes));
    if (expectedMembers && expectedMembers != g.members.size())
      return Status::error(
          std::string(op) + " on rank " + std::to_string(rank) + ": " +
          std::to_string(expectedMembers) + " counts for a group of " +
          std::to_string(g.members.size()));
    return Status::ok();
  }

  /// One collective: publish `mine`, meet, `move` the data (reading the
  /// peers' published buffers, writing this rank's output or a staged
  /// copy), meet again so that no buffer changes while a peer reads it,
  /// then `finish` (copy out a staged result). Every member must fail
  /// `move` alike, or pass its meetings alike.
  template <typename Move, typename Finish>
  Status exchange(const char *op, const Group &g, Slot mine, Move move,
                  Finish finish) {
    {
      std::lock_guard<std::mutex> lock(world.mutex);
      world.slots[rank] = mine;
    }
    // Passing this meeting counts every member as moving (see meet).
    if (Status s = meet(g.members, op, /*startsMoving=*/true); !s)
      return quiesce(s);
    Status moved = move();
    if (moved)
      moved = ops->complete();
    setMoving(-1);
    if (Status s = meet(g.members, op); !s)
      return quiesce(s);
    if (!moved) {
      abort(moved.message());
      return moved;
    }
    finish();
    return ops->complete();
  }

  World &world;
  const char *backend;
  /// This rank's copies, reductions and private (scratch) buffer.
  std::unique_ptr<BufferOps> ops;
  /// Whether started collectives run on `comm`: on device memory always
  /// (cuda-local: device work, no host core needed), on host memory where
  /// the policy gives each rank a spare core. The rank's BufferOps are used
  /// by one thread at a time: a synchronous collective drains the started
  /// ones first.
  bool asynchronous = ops->getMemorySpace() == MemorySpace::Device ||
                      asyncCollectivesEnabled(world.slots.size());
  /// Declared last: destroyed (joined) first, while the rest still lives.
  CommThread comm;
};

} // namespace

BufferOps::~BufferOps() = default;

std::vector<Status>
runThreads(const std::vector<int64_t> &meshShape,
           const std::function<Status(Communicator &)> &body,
           double timeoutSeconds) {
  return runThreadsWith(
      meshShape, "threads",
      [](int64_t) -> std::unique_ptr<BufferOps> {
        return std::make_unique<HostOps>();
      },
      body, timeoutSeconds);
}

std::vector<Status> runThreadsWith(
    const std::vector<int64_t> &meshShape, const char *backend,
    const std::function<std::unique_ptr<BufferOps>(int64_t rank)> &makeOps,
    const std::function<Status(Communicator &)> &body, double timeoutSeconds) {
  World world;
  world.meshShape = meshShape;
  world.timeout = std::chrono::duration<double>(timeoutSeconds);
  int64_t size = 1;
  for (int64_t n : meshShape)
    size *= n;
  world.slots.resize(size);
  std::vector<Status> statuses(size);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < size; ++r) {
    try {
      threads.emplace_back([&, r] {
        ThreadsCommunicator comm(world, r, backend, makeOps(r));
        Status s = body(comm);
        if (!s)
          comm.abort("rank " + std::to_string(r) + " failed: " + s.message());
        statuses[r] = std::move(s);
      });
    } catch (const std::system_error &e) {
      // Out of threads (a mesh of 65536 devices): an error for this rank
      // and the ones not started, and the world aborted so that the
      // started ones leave their collectives (an uncaught exception
      // aborted the process).
      std::string cause = "cannot start the thread of rank " +
                          std::to_string(r) + " of " + std::to_string(size) +
                          ": " + e.what() + " (the " + backend +
                          " backend runs a thread per rank)";
      {
        std::lock_guard<std::mutex> lock(world.mutex);
        if (!world.aborted) {
          world.aborted = true;
          world.abortMessage = cause;
        }
        world.wake.notify_all();
      }
      for (int64_t q = r; q < size; ++q)
        statuses[q] = Status::error(cause);
      break;
    }
  }
  for (std::thread &t : threads)
    t.join();
  return statuses;
}

} // namespace shardx::rt
