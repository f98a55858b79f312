//===- Communicator.h - Collectives over the ranks of a mesh ----*- C++ -*-===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//
//
// The runtime's collective interface. A communicator is one rank of a mesh;
// each collective runs over the group of ranks that differ only in the
// coordinates of the given mesh axes, numbered by those coordinates
// linearized in the order the axes are given (major first), as in the
// shardx dialect.
//
// Backends implement what they support; the rest fails with "backend X does
// not support Y". Every wait is bounded: a rank that fails or stops
// answering makes every rank of its world fail with a message that names
// the rank and the cause. No MLIR/LLVM dependency.
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_RUNTIME_COMMUNICATOR_H
#define SHARDX_RUNTIME_COMMUNICATOR_H

#include "shardx/Layout/Layout.h"
#include "shardx/Runtime/DType.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shardx::rt {

/// The outcome of a runtime call: ok, or an error message.
class Status {
public:
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed = true;
    s.text = std::move(message);
    return s;
  }
  bool isOk() const { return !failed; }
  explicit operator bool() const { return !failed; }
  const std::string &message() const { return text; }

private:
  bool failed = false;
  std::string text;
};

/// Where the buffers a communicator's collectives take live: host memory
/// (`threads`, `mpi`) or the memory of the rank's GPU (`cuda-local`,
/// `nccl`). Compiled programs check it against their own buffers'.
enum class MemorySpace : uint8_t { Host, Device };

/// "host" or "device".
inline const char *stringifyMemorySpace(MemorySpace space) {
  return space == MemorySpace::Host ? "host" : "device";
}

/// Copies and zeroes of the buffers of one memory space: what a compiled
/// program's memory (ProgramMemory.h) and a threads world's data movement
/// (BufferOps) have in common. Each is used by one rank's thread.
class MemoryOps {
public:
  virtual ~MemoryOps();
  /// Where the buffers live.
  virtual MemorySpace getMemorySpace() const = 0;
  /// Copies `bytes` from `from` to `to` (either may be null when `bytes`
  /// is 0).
  virtual void copy(void *to, const void *from, size_t bytes) = 0;
  /// Sets `bytes` of `to` to zero.
  virtual void zero(void *to, size_t bytes) = 0;
};

/// Host memory's copies and zeroes, written once: `Base` (a MemoryOps)
/// with memcpy and memset. The host ProgramMemory (HostEntry.cpp) and the
/// `threads` backend's BufferOps are this over their interface.
template <typename Base> class HostMemoryOps : public Base {
public:
  MemorySpace getMemorySpace() const override { return MemorySpace::Host; }
  void copy(void *to, const void *from, size_t bytes) override {
    // memcpy's pointers must be valid even for 0 bytes; empty pieces may
    // be null.
    if (bytes && to != from)
      std::memcpy(to, from, bytes);
  }
  void zero(void *to, size_t bytes) override {
    if (bytes)
      std::memset(to, 0, bytes);
  }
};

/// One rank of a mesh.
class Communicator {
public:
  Communicator(std::vector<int64_t> meshShape, int64_t rank);
  virtual ~Communicator();

  virtual const char *getBackendName() const = 0;

  int64_t getRank() const { return rank; }
  int64_t getSize() const { return size; }
  const std::vector<int64_t> &getMeshShape() const { return meshShape; }
  /// This rank's coordinates on the mesh (row-major rank order).
  const std::vector<int64_t> &getCoords() const { return coords; }
  /// The global ranks of this rank's group over `axes`, in group order.
  std::vector<int64_t> getGroup(const std::vector<int64_t> &axes) const;
  /// This rank's index in its group over `axes`.
  int64_t getGroupIndex(const std::vector<int64_t> &axes) const;
  /// Checks `axes` (in range, distinct); an error names the collective.
  Status checkAxes(const std::vector<int64_t> &axes, const char *op) const;

  /// Concatenates the members' `counts[i]` elements, in group order, into
  /// `recv` (of sum(counts) elements). This rank sends `counts[index]`.
  virtual Status allGather(const void *send, void *recv,
                           const std::vector<size_t> &counts, DType type,
                           const std::vector<int64_t> &axes);
  /// Reduces the members' sum(counts) elements and keeps piece `index`
  /// (`counts[index]` elements, at offset sum(counts[0..index))).
  virtual Status reduceScatter(const void *send, void *recv,
                               const std::vector<size_t> &counts, DType type,
                               ReduceOp op, const std::vector<int64_t> &axes);
  virtual Status allReduce(const void *send, void *recv, size_t count,
                           DType type, ReduceOp op,
                           const std::vector<int64_t> &axes);
  /// Member i sends `sendCounts[j]` elements (consecutive in `send`) to
  /// member j, and receives `recvCounts[j]` from member j into `recv` in
  /// group order.
  virtual Status allToAll(const void *send,
                          const std::vector<size_t> &sendCounts, void *recv,
                          const std::vector<size_t> &recvCounts, DType type,
                          const std::vector<int64_t> &axes);
  /// Each (source, target) pair of group indices moves source's `count`
  /// elements to target; a member that is no target receives zeros.
  virtual Status permute(const void *send, void *recv, size_t count, DType type,
                         const std::vector<std::pair<int64_t, int64_t>> &pairs,
                         const std::vector<int64_t> &axes);
  /// Every member receives member `root`'s `count` elements in `buffer`.
  virtual Status broadcast(void *buffer, size_t count, DType type, int64_t root,
                           const std::vector<int64_t> &axes);
  virtual Status barrier(const std::vector<int64_t> &axes);

  /// Starts an all_reduce and sets `request` to what `wait` takes. `send`
  /// and `recv` stay untouched by the caller until `wait` returns. Every
  /// rank of the group starts its collectives (and runs its synchronous
  /// ones) in the same order. The default runs the all_reduce now and
  /// `wait` returns at once (the GPU communicators use it).
  virtual Status allReduceStart(const void *send, void *recv, size_t count,
                                DType type, ReduceOp op,
                                const std::vector<int64_t> &axes,
                                int64_t &request);
  /// The started forms of allGather and reduceScatter, with the same
  /// contract as allReduceStart (`counts` is copied; the buffers stay
  /// untouched until `wait`). The defaults run the collective now.
  virtual Status allGatherStart(const void *send, void *recv,
                                const std::vector<size_t> &counts, DType type,
                                const std::vector<int64_t> &axes,
                                int64_t &request);
  virtual Status reduceScatterStart(const void *send, void *recv,
                                    const std::vector<size_t> &counts,
                                    DType type, ReduceOp op,
                                    const std::vector<int64_t> &axes,
                                    int64_t &request);
  /// Waits for the collective `request` names; its error if it failed.
  /// On a stream-ordered communicator (nccl) the wait is the compute
  /// stream's: the calling thread does not block.
  virtual Status wait(int64_t request);

  /// GPU communicators: makes the collectives this rank calls from now on
  /// run after the work queued on `stream` (a CUstream) when they are
  /// called, and makes `stream` wait for their results. True where the
  /// communicator does so without the host waiting (nccl); false where the
  /// caller has to wait for `stream` before each collective (the default).
  virtual bool orderAfterStream(void *stream);
  /// Waits (at most the timeout) for this rank's collectives still in
  /// flight: ok, or the error that failed (and aborted) the world. Ends
  /// every run on a stream-ordered communicator, whose collectives report
  /// their errors late; the others return ok at once (the default).
  virtual Status finish();

  /// Seconds this rank spent blocked in collectives and waits of compiled
  /// programs (the exposed communication), counted by the callers.
  double getWaitSeconds() const { return waitSeconds; }
  void addWaitSeconds(double seconds) { waitSeconds += seconds; }
  void resetWaitSeconds() { waitSeconds = 0; }

  /// Makes every rank of the world fail its current and next collectives
  /// with `cause` (a rank that hits an error calls this before returning).
  virtual void abort(const std::string &cause) = 0;

  /// Where the buffers its collectives read and write live. (Declared after
  /// the others: artifacts compiled before it call the earlier virtual
  /// functions at the same places.)
  virtual MemorySpace getMemorySpace() const = 0;

  /// The message of the last failed call through the C ABI.
  const std::string &getLastError() const { return lastError; }
  void setLastError(std::string message) { lastError = std::move(message); }

protected:
  Status unsupported(const char *op) const;

  std::vector<int64_t> meshShape;
  int64_t rank;
  int64_t size;
  std::vector<int64_t> coords;
  std::string lastError;
  double waitSeconds = 0;
};

/// Whether started collectives run asynchronously (a communication thread
/// per rank on `threads`, a progress thread per process on `mpi`) when
/// `localRanks` ranks share this host: SHARDX_ASYNC_COLLECTIVES=on or off
/// decides; unset or `auto`, only when the CPUs this process may run on
/// number at least twice the local ranks (a spare core each for its
/// communication). Otherwise a start runs its collective synchronously and
/// no extra thread exists, so a scheduled program costs what an
/// unscheduled one does.
bool asyncCollectivesEnabled(int64_t localRanks);

/// Reduces `count` elements of `in` into `inout` with `op` (avg sums; the
/// caller divides).
void reduceInto(void *inout, const void *in, size_t count, DType type,
                ReduceOp op);
/// Divides `count` elements by `n` (the end of an avg).
void divideBy(void *buffer, size_t count, DType type, int64_t n);
/// bf16/f16 to f32 and back (rounding to nearest even), `count` elements:
/// how backends accumulate 16-bit floats in f32.
void widenToF32(float *out, const void *in, size_t count, DType type);
void narrowFromF32(void *out, const float *in, size_t count, DType type);

/// How the ranks of a threads world move and reduce data: host memory (the
/// `threads` backend) or one GPU's memory (`cuda-local`). One per rank, used
/// by its rank's thread only.
class BufferOps : public MemoryOps {
public:
  ~BufferOps() override;
  /// out = in[0] op in[1] op ... op in[n-1] over `count` elements, in member
  /// order, divided by n for avg; `out` may be one of `in`.
  virtual Status reduce(void *out, const std::vector<const char *> &in,
                        size_t count, DType type, ReduceOp op) = 0;
  /// A private buffer of at least `bytes`, kept across calls.
  virtual char *scratch(size_t bytes) = 0;
  /// Waits for this rank's queued copies and reductions (before a meeting
  /// after which peers read what they wrote, and before a collective
  /// returns).
  virtual Status complete() { return Status::ok(); }
};

/// Runs `body` on every rank of a mesh as threads of this process (the
/// `threads` backend) and returns each rank's status. A collective that
/// waits longer than `timeoutSeconds` fails on every rank.
std::vector<Status>
runThreads(const std::vector<int64_t> &meshShape,
           const std::function<Status(Communicator &)> &body,
           double timeoutSeconds = 60.0);

/// The same with the data moved by `makeOps(rank)`'s operations; the
/// communicators report `backend` as their name.
std::vector<Status> runThreadsWith(
    const std::vector<int64_t> &meshShape, const char *backend,
    const std::function<std::unique_ptr<BufferOps>(int64_t rank)> &makeOps,
    const std::function<Status(Communicator &)> &body,
    double timeoutSeconds = 60.0);

} // namespace shardx::rt

#endif // SHARDX_RUNTIME_COMMUNICATOR_H
