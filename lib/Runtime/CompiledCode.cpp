//===- CompiledCode.cpp - Runtime entry points of compiled programs -------===//
//
// Part of ShardX.
//
// Compiled programs call `shardx_rt_cg_*` with 1-D memrefs (expanded to
// allocated pointer, aligned pointer, offset, size, stride) and run on the
// communicator that `shardx_rt_invoke` installed for the calling thread.
//
// Written once for every artifact: where the program's buffers live (host
// memory on CPU artifacts, device memory of the artifact's CUDA runtime on
// CUDA ones) is the run's ProgramMemory (ProgramMemory.h), whose
// implementation the artifact's `shardx_rt_invoke` passes (HostEntry.cpp,
// cuda/DeviceEntry.cpp). The communicator must take buffers of the same
// memory space; the steps that pack and unpack on the host (the uneven
// all-to-all and the exchange) stage device buffers through host memory.
//
// Errors are values. A failed call records its error in the run and aborts
// the world (so that no rank waits for this one); from then on every call
// of the run moves nothing (a started collective is still waited for, so
// that no collective uses a buffer the program frees) and zeroes its
// outputs, so the program runs to its end on numbers nobody sees: the run
// returns the error, and a failed run's outputs are never the caller's.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"
#include "shardx/Runtime/Communicator.h"
#include "shardx/Runtime/Exchange.h"
#include "shardx/Runtime/FaultInjection.h"
#include "shardx/Runtime/HalfFloat.h"
#include "shardx/Runtime/ProgramMemory.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using shardx::ReduceOp;
using shardx::rt::Communicator;
using shardx::rt::DType;
using shardx::rt::MemorySpace;
using shardx::rt::ProgramMemory;
using shardx::rt::Status;

namespace {

/// One run of a compiled program on one rank.
struct Invocation {
  /// The launcher's communicator (its blocked seconds count the run's).
  Communicator *comm = nullptr;
  /// What the collectives run on: `comm`, or a fault-injecting wrapper.
  Communicator *active = nullptr;
  ProgramMemory *memory = nullptr;
  /// Whether the communicator's memory space was checked (at the first
  /// collective: a program without any runs on every backend).
  bool spaceChecked = false;
  /// Ok until the first failure of the run.
  Status status;
};

thread_local Invocation *current = nullptr;

Invocation &invocation() {
  if (!current || !current->comm) {
    std::fprintf(stderr, "shardx: a compiled program ran a collective outside "
                         "shardx_rt_invoke\n");
    std::abort();
  }
  return *current;
}

ProgramMemory &memory() { return *invocation().memory; }

/// Whether the run has failed (its calls then move nothing).
bool failed() { return !invocation().status; }

/// Fails the run with `what` (the first failure wins) and aborts the world.
void fail(const std::string &what) {
  Invocation &inv = invocation();
  if (!inv.status)
    return;
  std::string msg = "rank " + std::to_string(inv.comm->getRank()) + ": " + what;
  inv.status = Status::error(msg);
  inv.active->abort(msg);
}

/// The communicator of the run's collectives, or null once the run has
/// failed.
Communicator *collectives() {
  Invocation &inv = invocation();
  if (!inv.status)
    return nullptr;
  if (!inv.spaceChecked) {
    inv.spaceChecked = true;
    // A host backend would read device buffers as host memory, and a device
    // backend (cuda-local, nccl) run kernels on host buffers.
    if (inv.comm->getMemorySpace() != inv.memory->getMemorySpace()) {
      const char *backend = inv.comm->getBackendName();
      fail(inv.memory->getMemorySpace() == MemorySpace::Device
               ? std::string("a CUDA artifact's collectives take device "
                             "buffers: run it on the cuda-local or nccl "
                             "backend (shardx-gpu-exec), not ") +
                     backend
               : std::string("a CPU artifact's collectives take host "
                             "buffers: run it on the threads or mpi backend, "
                             "not ") +
                     backend);
      return nullptr;
    }
  }
  inv.memory->attach(*inv.active);
  return inv.active;
}

/// `op`'s error fails the run (a wait's error is its collective's, which
/// names the collective itself: `op` is null).
void check(const Status &s, const char *op) {
  if (!s)
    fail(op ? std::string(op) + ": " + s.message() : s.message());
}

/// Runs the collective `move` on the run's communicator, after the
/// program's work on its buffers.
template <typename Move> void collective(const char *op, Move move) {
  if (Communicator *c = collectives()) {
    memory().settle();
    check(move(*c), op);
  }
}

/// Starts a collective; the request to wait for, or -1 where nothing runs.
template <typename Start> int64_t startCollective(const char *op, Start start) {
  int64_t request = -1;
  if (Communicator *c = collectives()) {
    memory().settle();
    Status s = start(*c, request);
    if (!s)
      request = -1;
    check(s, op);
  }
  return request;
}

/// Zeroes the `count` elements of an output of a call of a failed run.
template <typename T> void zeroIfFailed(T *out, int64_t count) {
  if (failed() && count > 0)
    memory().zero(out, sizeof(T) * static_cast<size_t>(count));
}

std::vector<int64_t> toVector(const int64_t *data, int64_t n) {
  return std::vector<int64_t>(data, data + n);
}

ReduceOp toReduce(int32_t r) {
  switch (r) {
  case SHARDX_RT_AVG:
    return ReduceOp::Avg;
  case SHARDX_RT_MAX:
    return ReduceOp::Max;
  case SHARDX_RT_MIN:
    return ReduceOp::Min;
  case SHARDX_RT_PROD:
    return ReduceOp::Prod;
  default:
    return ReduceOp::Sum;
  }
}

#define MEMREF1(T, name)                                                       \
  T *name##_alloc, T *name, int64_t name##_off, int64_t name##_size,           \
      int64_t name##_stride
#define AXES MEMREF1(int64_t, axes)
#define AXES_VEC toVector(axes + axes_off, axes_size)

template <typename T> DType dtypeOf();
template <> DType dtypeOf<float>() { return DType::F32; }
template <> DType dtypeOf<double>() { return DType::F64; }
template <> DType dtypeOf<int32_t>() { return DType::I32; }
template <> DType dtypeOf<int64_t>() { return DType::I64; }
template <> DType dtypeOf<shardx::rt::BFloat16>() { return DType::BF16; }
template <> DType dtypeOf<shardx::rt::Float16>() { return DType::F16; }

/// The group size over `axes` (geometry: valid on a failed run too).
size_t groupSize(const std::vector<int64_t> &axes) {
  return invocation().comm->getGroup(axes).size();
}

/// This rank's index in its group over `axes`.
int64_t groupIndex(const std::vector<int64_t> &axes) {
  return invocation().comm->getGroupIndex(axes);
}

/// `n` counts of `count` elements, one per member of the group over `axes`.
std::vector<size_t> evenCounts(int64_t count,
                               const std::vector<int64_t> &axes) {
  return std::vector<size_t>(groupSize(axes), static_cast<size_t>(count));
}

/// Waits for `request` (-1: a collective that ran at its start). Also on a
/// failed run, where a started collective fails at once (the world is
/// aborted), so that the program may free its buffers; a start skipped
/// there has nothing to wait for.
void waitFor(int64_t request) {
  if (Communicator *c = collectives())
    check(c->wait(request), nullptr);
  else if (request >= 0)
    (void)invocation().active->wait(request);
}

/// Adds the time from its construction to its destruction to the calling
/// rank's blocked time (each collective, start and wait of a program: a
/// start that runs its collective synchronously blocks for all of it).
struct BlockedTimer {
  std::chrono::steady_clock::time_point start =
      std::chrono::steady_clock::now();
  ~BlockedTimer() {
    if (current && current->comm)
      current->comm->addWaitSeconds(std::chrono::duration<double>(
                                        std::chrono::steady_clock::now() -
                                        start)
                                        .count());
  }
};

/// All-to-all with uneven pieces: splits the input along `splitDim` into
/// `splitSizes` pieces (one per member), exchanges, and concatenates the
/// received pieces along `concatDim` (member i's piece has `concatSizes[i]`
/// there). `inShape` has -1 for the (dynamic) concat dim. Packs and unpacks
/// on the host (from and to host copies of device buffers).
template <typename T>
void allToAllV(const T *in, T *out, const int64_t *inShapeIn, int64_t rank,
               const int64_t *splitSizes, const int64_t *concatSizes,
               int64_t n, int64_t splitDim, int64_t concatDim,
               std::vector<int64_t> axes) {
  Communicator *c = collectives();
  if (!c)
    return;
  memory().settle();
  bool onHost = memory().getMemorySpace() == MemorySpace::Host;
  int64_t me = groupIndex(axes);
  std::vector<int64_t> inShape(inShapeIn, inShapeIn + rank);
  if (inShape[concatDim] < 0)
    inShape[concatDim] = concatSizes[me];
  auto prod = [](const std::vector<int64_t> &s, int64_t lo, int64_t hi) {
    int64_t p = 1;
    for (int64_t i = lo; i < hi; ++i)
      p *= s[i];
    return p;
  };
  // Pack: the pieces along splitDim, one after another.
  int64_t outer = prod(inShape, 0, splitDim), mid = inShape[splitDim],
          inner = prod(inShape, splitDim + 1, rank);
  std::vector<T> hostIn;
  if (!onHost) {
    hostIn.resize(static_cast<size_t>(outer * mid * inner));
    memory().copy(hostIn.data(), in, sizeof(T) * hostIn.size());
    in = hostIn.data();
  }
  std::vector<T> send(static_cast<size_t>(outer * mid * inner));
  std::vector<size_t> sendCounts, recvCounts;
  size_t pos = 0;
  int64_t off = 0;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t o = 0; o < outer; ++o) {
      std::memcpy(send.data() + pos, in + (o * mid + off) * inner,
                  sizeof(T) * splitSizes[j] * inner);
      pos += splitSizes[j] * inner;
    }
    sendCounts.push_back(splitSizes[j] * outer * inner);
    off += splitSizes[j];
  }
  // Receive: member i's piece has splitSizes[me] along splitDim and
  // concatSizes[i] along concatDim.
  std::vector<int64_t> piece = inShape;
  piece[splitDim] = splitSizes[me];
  int64_t pieceElems = 1;
  for (int64_t i = 0; i < rank; ++i)
    if (i != concatDim)
      pieceElems *= piece[i];
  size_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    recvCounts.push_back(pieceElems * concatSizes[i]);
    total += recvCounts.back();
  }
  std::vector<T> recv(total + 1);
  std::unique_ptr<Communicator> staged = memory().stageHost(*c);
  check((staged ? *staged : *c)
            .allToAll(send.data(), sendCounts, recv.data(), recvCounts,
                      dtypeOf<T>(), axes),
        "all_to_all");
  if (failed())
    return;
  // Unpack along concatDim (on the host, then one copy to a device output).
  std::vector<int64_t> outShape = piece;
  int64_t concatTotal = 0;
  for (int64_t i = 0; i < n; ++i)
    concatTotal += concatSizes[i];
  outShape[concatDim] = concatTotal;
  int64_t cOuter = prod(outShape, 0, concatDim),
          cInner = prod(outShape, concatDim + 1, rank);
  T *programOut = out;
  std::vector<T> hostOut;
  if (!onHost) {
    hostOut.resize(static_cast<size_t>(cOuter * concatTotal * cInner));
    out = hostOut.data();
  }
  size_t src = 0;
  int64_t coff = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < cOuter; ++o) {
      std::memcpy(out + (o * concatTotal + coff) * cInner, recv.data() + src,
                  sizeof(T) * concatSizes[i] * cInner);
      src += concatSizes[i] * cInner;
    }
    coff += concatSizes[i];
  }
  if (!onHost)
    memory().copy(programOut, hostOut.data(), sizeof(T) * hostOut.size());
}

template <typename T>
void permute(const T *in, int64_t count, T *out, const int64_t *pairs,
             int64_t numPairs, std::vector<int64_t> axes) {
  std::vector<std::pair<int64_t, int64_t>> p;
  for (int64_t i = 0; i + 1 < numPairs; i += 2)
    p.push_back({pairs[i], pairs[i + 1]});
  collective("permute", [&](Communicator &c) {
    return c.permute(in, out, count, dtypeOf<T>(), p, axes);
  });
  if (failed())
    return;
  // shardx.permute: a member that is no pair's target keeps its tensor (the
  // communicator gives it zeros).
  int64_t me = groupIndex(axes);
  bool target = false;
  for (auto [source, t] : p)
    target |= t == me;
  if (!target)
    memory().copy(out, in, sizeof(T) * count);
}

/// Decodes a `shardx.exchange` descriptor (see encodeExchange).
bool decodeStep(const int64_t *desc, int64_t size, std::vector<int64_t> &shape,
                shardx::Layout &source, shardx::Layout &target) {
  std::string error;
  if (shardx::rt::decodeExchange(desc, static_cast<size_t>(size), shape,
                                 source, target, error))
    return true;
  fail("exchange: " + error);
  return false;
}

template <typename T>
void exchangeStep(const T *in, T *out, const int64_t *desc, int64_t size,
                  std::vector<int64_t> axes) {
  Communicator *c = collectives();
  std::vector<int64_t> shape;
  shardx::Layout source, target;
  if (!c || !decodeStep(desc, size, shape, source, target))
    return;
  if (memory().getMemorySpace() == MemorySpace::Host) {
    check(shardx::rt::exchange(*c, in, out, dtypeOf<T>(), shape, source,
                               target, axes),
          "exchange");
    return;
  }
  // Through host memory: the local shards' sizes from the layouts.
  const std::vector<int64_t> &mesh = c->getMeshShape();
  auto elements = [&](const shardx::Layout &l) {
    size_t n = 1;
    for (int64_t d : l.getLocalShard(mesh, shape, c->getCoords()).shape)
      n *= static_cast<size_t>(d);
    return n;
  };
  memory().settle();
  std::vector<T> hostIn(elements(source));
  memory().copy(hostIn.data(), in, sizeof(T) * hostIn.size());
  std::vector<T> hostOut(elements(target) + 1);
  std::unique_ptr<Communicator> staged = memory().stageHost(*c);
  check(shardx::rt::exchange(staged ? *staged : *c, hostIn.data(),
                             hostOut.data(), dtypeOf<T>(), shape, source,
                             target, axes),
        "exchange");
  if (!failed())
    memory().copy(out, hostOut.data(), sizeof(T) * (hostOut.size() - 1));
}

/// The counts of shardx.ragged_all_to_all, read from the program's buffer:
/// each non-negative and their sum at most `rows` (checked count by count,
/// so that no sum can overflow); an error naming the first one that is not,
/// `what` saying whose counts they are ("send", "receive") and `of` whose
/// rows ("the operand's", "the result's"). `rows` < 0: no bound (rows of
/// no elements).
bool checkCounts(const std::vector<int64_t> &counts, int64_t rows,
                 const char *what, const char *of) {
  int64_t sum = 0;
  for (size_t j = 0; j < counts.size(); ++j) {
    if (counts[j] < 0) {
      fail(std::string("ragged_all_to_all: ") + what + " count " +
           std::to_string(counts[j]) + " for member " + std::to_string(j) +
           " is negative");
      return false;
    }
    if (rows >= 0 && counts[j] > rows - sum) {
      fail(std::string("ragged_all_to_all: the ") + what +
           " counts up to member " + std::to_string(j) + " sum to more than " +
           of + " " + std::to_string(rows) + " rows");
      return false;
    }
    sum += counts[j];
  }
  return true;
}

/// shardx.ragged_all_to_all on rows of `row` elements: unless `known`, the
/// counts are exchanged first (one int64 per member) and written to
/// `recvCounts`; with `known`, `recvCounts` is the program's operand (the
/// counts each member sends this rank, as the program knows them) and
/// nothing is exchanged but the rows. Then one variable-count all-to-all
/// moves only the counted rows; `out`'s rows after the received ones are
/// zeroed. Counts live where the program's buffers do, so they are read and
/// written through the run's memory; device buffers are staged through
/// host memory. A failed call writes nothing but zeros: `out` (the caller's
/// SYNC_CALL) and, unless `known`, the received counts.
template <typename T>
void raggedAllToAll(const T *in, int64_t inSize, T *out, int64_t outSize,
                    const int64_t *sendCounts, int64_t *recvCounts, int64_t n,
                    int64_t row, bool known, std::vector<int64_t> axes) {
  auto zeroCounts = [&] {
    if (!known)
      memory().zero(recvCounts, sizeof(int64_t) * static_cast<size_t>(n));
  };
  Communicator *c = collectives();
  if (!c)
    return zeroCounts();
  memory().settle();
  std::vector<int64_t> send(static_cast<size_t>(n)), recv(send.size());
  memory().copy(send.data(), sendCounts, sizeof(int64_t) * send.size());
  int64_t inRows = row > 0 ? inSize / row : -1;
  int64_t outRows = row > 0 ? outSize / row : -1;
  if (!checkCounts(send, inRows, "send", "the operand's"))
    return zeroCounts();
  std::unique_ptr<Communicator> staged = memory().stageHost(*c);
  Communicator &comm = staged ? *staged : *c;
  if (known) {
    // The senders' counts are not seen here: a count that is not what its
    // member sends fails the rows' all-to-all (threads: which member sends
    // how many; MPI: a truncation error where it sends more).
    memory().copy(recv.data(), recvCounts, sizeof(int64_t) * recv.size());
    if (!checkCounts(recv, outRows, "receive", "the result's"))
      return;
  } else {
    std::vector<size_t> ones(send.size(), 1);
    check(comm.allToAll(send.data(), ones, recv.data(), ones, DType::I64, axes),
          "ragged_all_to_all (counts)");
    if (failed())
      return zeroCounts();
    // Each sender checked its own counts: none is negative or past its
    // operand's rows, so no sum of them overflows before the check fails.
    if (!checkCounts(recv, outRows, "received", "the result's"))
      return zeroCounts();
  }
  int64_t received = 0;
  for (int64_t v : recv)
    received += v;
  int64_t sent = 0;
  for (int64_t v : send)
    sent += v;
  std::vector<size_t> sendElems, recvElems;
  for (int64_t j = 0; j < n; ++j) {
    sendElems.push_back(static_cast<size_t>(send[j] * row));
    recvElems.push_back(static_cast<size_t>(recv[j] * row));
  }
  bool onHost = memory().getMemorySpace() == MemorySpace::Host;
  std::vector<T> hostIn, hostOut;
  const T *from = in;
  T *to = out;
  if (!onHost) {
    hostIn.resize(static_cast<size_t>(sent * row) + 1);
    memory().copy(hostIn.data(), in, sizeof(T) * (hostIn.size() - 1));
    hostOut.assign(static_cast<size_t>(outSize) + 1, T());
    from = hostIn.data();
    to = hostOut.data();
  }
  check(comm.allToAll(from, sendElems, to, recvElems, dtypeOf<T>(), axes),
        "ragged_all_to_all");
  if (failed())
    return zeroCounts();
  if (onHost)
    std::fill(out + received * row, out + outSize, T());
  else
    memory().copy(out, hostOut.data(),
                  sizeof(T) * static_cast<size_t>(outSize));
  if (!known)
    memory().copy(recvCounts, recv.data(), sizeof(int64_t) * recv.size());
}

template <typename T>
void broadcast(const T *in, int64_t count, T *out, int64_t root,
               std::vector<int64_t> axes) {
  collective("broadcast", [&](Communicator &c) {
    memory().copy(out, in, sizeof(T) * count);
    return c.broadcast(out, count, dtypeOf<T>(), root, axes);
  });
}

template <typename T>
void partitionValue(const T *in, int64_t count, T *out, int32_t reduce,
                    std::vector<int64_t> axes) {
  if (!collectives())
    return;
  if (groupIndex(axes) == 0 || reduce == SHARDX_RT_AVG ||
      reduce == SHARDX_RT_MAX || reduce == SHARDX_RT_MIN) {
    memory().copy(out, in, sizeof(T) * count);
    return;
  }
  T identity = reduce == SHARDX_RT_PROD ? T(1) : T(0);
  if (memory().getMemorySpace() == MemorySpace::Host) {
    std::fill(out, out + count, identity);
    return;
  }
  std::vector<T> host(static_cast<size_t>(count), identity);
  memory().copy(out, host.data(), sizeof(T) * host.size());
}

} // namespace

namespace shardx::rt {

ProgramMemory::~ProgramMemory() = default;

Status invokeProgram(void (*entry)(void **), void **args, Communicator *comm,
                     ProgramMemory &programMemory, const FaultPlan &faults) {
  // No usable memory (no GPU): the driver's error, before anything runs.
  if (Status s = programMemory.open(); !s)
    return s;
  Invocation inv;
  inv.comm = inv.active = comm;
  inv.memory = &programMemory;
  Invocation *saved = current;
  current = &inv;
  // The failure tests' faults, chosen once for the run.
  std::unique_ptr<Communicator> faulty;
  if (comm) {
    if (std::string why = faults.failureBeforeRun(comm->getRank());
        !why.empty())
      fail(why);
    else if ((faulty = injectFaults(*comm, faults)))
      inv.active = faulty.get();
  }
  if (inv.status)
    entry(args);
  // The collectives still in flight end the run: their errors fail it
  // (the communicator aborted the world), then the program's work. A
  // failed run closes too (its status is the first error, close's is
  // dropped): the device work it queued is drained before it returns.
  Status closed = programMemory.close(comm ? inv.active : nullptr);
  if (inv.status && !closed) {
    if (comm)
      fail(closed.message());
    else
      inv.status = closed;
  }
  current = saved;
  return inv.status;
}

int reportInvocation(const Status &status, char *error, int64_t errorSize) {
  if (status)
    return 0;
  if (error && errorSize > 0) {
    std::strncpy(error, status.message().c_str(), errorSize - 1);
    error[errorSize - 1] = '\0';
  }
  return 1;
}

} // namespace shardx::rt

extern "C" {

int64_t shardx_rt_cg_axis_index(AXES) {
  collectives(); // a communicator of the wrong memory space fails the run
  return groupIndex(AXES_VEC);
}

/// The size of dim `dim` of this rank's target shard of an exchange (0 where
/// it cannot be decoded: the run has failed).
int64_t shardx_rt_cg_exchange_dim(MEMREF1(int64_t, desc), int64_t dim) {
  collectives();
  std::vector<int64_t> shape;
  shardx::Layout source, target;
  if (!decodeStep(desc + desc_off, desc_size, shape, source, target))
    return 0;
  if (dim < 0 || dim >= static_cast<int64_t>(shape.size())) {
    fail("exchange: dim out of range");
    return 0;
  }
  Communicator &c = *invocation().comm;
  return target.getLocalShard(c.getMeshShape(), shape, c.getCoords())
      .shape[dim];
}

/// The body of each synchronous call: blocked time counted, the outputs of
/// a failed run zeroed.
#define SYNC_CALL(CALL)                                                        \
  BlockedTimer blocked;                                                        \
  CALL;                                                                        \
  zeroIfFailed(out + out_off, out_size)

#define COUNTS_VEC                                                             \
  std::vector<size_t>(counts + counts_off, counts + counts_off + counts_size)

#define DEFINE_CG(SUFFIX, T)                                                   \
  void shardx_rt_cg_all_reduce_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),       \
                                        int32_t reduce, AXES) {                \
    SYNC_CALL(collective("all_reduce", [&](Communicator &c) {                  \
      return c.allReduce(in + in_off, out + out_off, in_size, dtypeOf<T>(),    \
                         toReduce(reduce), AXES_VEC);                          \
    }));                                                                       \
  }                                                                            \
  int64_t shardx_rt_cg_all_reduce_start_##SUFFIX(                              \
      MEMREF1(T, in), MEMREF1(T, out), int32_t reduce, AXES) {                 \
    BlockedTimer blocked;                                                      \
    return startCollective("all_reduce", [&](Communicator &c, int64_t &r) {    \
      return c.allReduceStart(in + in_off, out + out_off, in_size,             \
                              dtypeOf<T>(), toReduce(reduce), AXES_VEC, r);    \
    });                                                                        \
  }                                                                            \
  void shardx_rt_cg_wait_##SUFFIX(int64_t request, MEMREF1(T, in),             \
                                  MEMREF1(T, out)) {                           \
    SYNC_CALL(waitFor(request));                                               \
  }                                                                            \
  int64_t shardx_rt_cg_all_gather_start_##SUFFIX(MEMREF1(T, in),               \
                                                 MEMREF1(T, out), AXES) {      \
    BlockedTimer blocked;                                                      \
    return startCollective("all_gather", [&](Communicator &c, int64_t &r) {    \
      return c.allGatherStart(in + in_off, out + out_off,                      \
                              evenCounts(in_size, AXES_VEC), dtypeOf<T>(),     \
                              AXES_VEC, r);                                    \
    });                                                                        \
  }                                                                            \
  int64_t shardx_rt_cg_reduce_scatter_start_##SUFFIX(                          \
      MEMREF1(T, in), MEMREF1(T, out), int32_t reduce, AXES) {                 \
    BlockedTimer blocked;                                                      \
    return startCollective(                                                    \
        "reduce_scatter", [&](Communicator &c, int64_t &r) {                   \
          return c.reduceScatterStart(                                         \
              in + in_off, out + out_off, evenCounts(out_size, AXES_VEC),      \
              dtypeOf<T>(), toReduce(reduce), AXES_VEC, r);                    \
        });                                                                    \
  }                                                                            \
  int64_t shardx_rt_cg_all_gather_v_start_##SUFFIX(                            \
      MEMREF1(T, in), MEMREF1(T, out), MEMREF1(int64_t, counts), AXES) {       \
    BlockedTimer blocked;                                                      \
    return startCollective("all_gather", [&](Communicator &c, int64_t &r) {    \
      return c.allGatherStart(in + in_off, out + out_off, COUNTS_VEC,          \
                              dtypeOf<T>(), AXES_VEC, r);                      \
    });                                                                        \
  }                                                                            \
  int64_t shardx_rt_cg_reduce_scatter_v_start_##SUFFIX(                        \
      MEMREF1(T, in), MEMREF1(T, out), int32_t reduce,                         \
      MEMREF1(int64_t, counts), AXES) {                                        \
    BlockedTimer blocked;                                                      \
    return startCollective(                                                    \
        "reduce_scatter", [&](Communicator &c, int64_t &r) {                   \
          return c.reduceScatterStart(in + in_off, out + out_off, COUNTS_VEC,  \
                                      dtypeOf<T>(), toReduce(reduce),          \
                                      AXES_VEC, r);                            \
        });                                                                    \
  }                                                                            \
  void shardx_rt_cg_all_gather_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),       \
                                        AXES) {                                \
    SYNC_CALL(collective("all_gather", [&](Communicator &c) {                  \
      return c.allGather(in + in_off, out + out_off,                           \
                         evenCounts(in_size, AXES_VEC), dtypeOf<T>(),          \
                         AXES_VEC);                                            \
    }));                                                                       \
  }                                                                            \
  void shardx_rt_cg_reduce_scatter_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),   \
                                            int32_t reduce, AXES) {            \
    SYNC_CALL(collective("reduce_scatter", [&](Communicator &c) {              \
      return c.reduceScatter(in + in_off, out + out_off,                       \
                             evenCounts(out_size, AXES_VEC), dtypeOf<T>(),     \
                             toReduce(reduce), AXES_VEC);                      \
    }));                                                                       \
  }                                                                            \
  void shardx_rt_cg_all_gather_v_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),     \
                                          MEMREF1(int64_t, counts), AXES) {    \
    SYNC_CALL(collective("all_gather", [&](Communicator &c) {                  \
      return c.allGather(in + in_off, out + out_off, COUNTS_VEC, dtypeOf<T>(), \
                         AXES_VEC);                                            \
    }));                                                                       \
  }                                                                            \
  void shardx_rt_cg_reduce_scatter_v_##SUFFIX(                                 \
      MEMREF1(T, in), MEMREF1(T, out), int32_t reduce,                         \
      MEMREF1(int64_t, counts), AXES) {                                        \
    SYNC_CALL(collective("reduce_scatter", [&](Communicator &c) {              \
      return c.reduceScatter(in + in_off, out + out_off, COUNTS_VEC,           \
                             dtypeOf<T>(), toReduce(reduce), AXES_VEC);        \
    }));                                                                       \
  }                                                                            \
  void shardx_rt_cg_all_to_all_v_##SUFFIX(                                     \
      MEMREF1(T, in), MEMREF1(T, out), MEMREF1(int64_t, shape),                \
      MEMREF1(int64_t, split), MEMREF1(int64_t, concat), int64_t splitDim,     \
      int64_t concatDim, AXES) {                                               \
    SYNC_CALL(allToAllV(in + in_off, out + out_off, shape + shape_off,         \
                        shape_size, split + split_off, concat + concat_off,    \
                        split_size, splitDim, concatDim, AXES_VEC));           \
  }                                                                            \
  void shardx_rt_cg_all_to_all_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),       \
                                        AXES) {                                \
    SYNC_CALL(collective("all_to_all", [&](Communicator &c) {                  \
      std::vector<size_t> counts = evenCounts(                                 \
          in_size / static_cast<int64_t>(groupSize(AXES_VEC)), AXES_VEC);      \
      return c.allToAll(in + in_off, counts, out + out_off, counts,            \
                        dtypeOf<T>(), AXES_VEC);                               \
    }));                                                                       \
  }                                                                            \
  void shardx_rt_cg_permute_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),          \
                                     MEMREF1(int64_t, pairs), AXES) {          \
    SYNC_CALL(permute(in + in_off, in_size, out + out_off, pairs + pairs_off,  \
                      pairs_size, AXES_VEC));                                  \
  }                                                                            \
  void shardx_rt_cg_broadcast_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),        \
                                       int64_t root, AXES) {                   \
    SYNC_CALL(broadcast(in + in_off, in_size, out + out_off, root, AXES_VEC)); \
  }                                                                            \
  void shardx_rt_cg_exchange_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),         \
                                      MEMREF1(int64_t, desc), AXES) {          \
    SYNC_CALL(exchangeStep(in + in_off, out + out_off, desc + desc_off,        \
                           desc_size, AXES_VEC));                              \
  }                                                                            \
  void shardx_rt_cg_ragged_all_to_all_##SUFFIX(                                \
      MEMREF1(T, in), MEMREF1(T, out), MEMREF1(int64_t, send),                 \
      MEMREF1(int64_t, recv), int64_t row, AXES) {                             \
    SYNC_CALL(raggedAllToAll(in + in_off, in_size, out + out_off, out_size,    \
                             send + send_off, recv + recv_off, send_size, row, \
                             /*known=*/false, AXES_VEC));                      \
  }                                                                            \
  void shardx_rt_cg_ragged_all_to_all_known_##SUFFIX(                          \
      MEMREF1(T, in), MEMREF1(T, out), MEMREF1(int64_t, send),                 \
      MEMREF1(int64_t, recv), int64_t row, AXES) {                             \
    SYNC_CALL(raggedAllToAll(in + in_off, in_size, out + out_off, out_size,    \
                             send + send_off, recv + recv_off, send_size, row, \
                             /*known=*/true, AXES_VEC));                       \
  }                                                                            \
  void shardx_rt_cg_partition_value_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),  \
                                             int32_t reduce, AXES) {           \
    SYNC_CALL(partitionValue(in + in_off, in_size, out + out_off, reduce,      \
                             AXES_VEC));                                       \
  }

DEFINE_CG(f32, float)
DEFINE_CG(f64, double)
DEFINE_CG(i32, int32_t)
DEFINE_CG(i64, int64_t)
DEFINE_CG(bf16, shardx::rt::BFloat16)
DEFINE_CG(f16, shardx::rt::Float16)

} // extern "C"
