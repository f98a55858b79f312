//===- CompiledCode.cpp - Runtime entry points of compiled programs -------===//
//
// Part of ShardX.
//
// Compiled programs call `shardx_rt_cg_*` with 1-D memrefs (expanded to
// allocated pointer, aligned pointer, offset, size, stride) and run on the
// communicator that `shardx_rt_invoke` installed for the calling thread. A
// failed collective aborts the world (so that no rank waits for this one)
// and unwinds this rank's program back to `shardx_rt_invoke`, which returns
// the error.
//
// Compiled twice: for CPU artifacts (ShardXRuntime; host buffers) and, with
// SHARDX_CG_DEVICE, for CUDA artifacts (ShardXRuntimeCudaCode), whose
// buffers are device memory of this artifact's CUDA runtime. There the
// communicator is told the rank's stream (orderAfterStream): a
// stream-ordered one (nccl) orders its collectives after the stream's work
// and the stream after them with events, and the run ends with its
// `finish` (the errors of collectives still in flight); for the others
// (cuda-local) every collective first waits for the rank's stream. The
// communicator gets device buffers, the program's own copies
// are device copies, and the two reshard steps that pack and unpack
// (the uneven all-to-all and the exchange) stage through host memory.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"
#include "shardx/Runtime/Communicator.h"
#include "shardx/Runtime/Exchange.h"
#include "shardx/Runtime/HalfFloat.h"
#ifdef SHARDX_CG_DEVICE
#include "shardx/Runtime/Cuda.h"
#include "shardx/Runtime/CudaLocal.h"
#endif

#include <chrono>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using shardx::ReduceOp;
using shardx::rt::Communicator;
using shardx::rt::DType;
using shardx::rt::Status;

namespace {

struct Invocation {
  Communicator *comm = nullptr;
  std::jmp_buf *jump = nullptr;
  std::string error;
  /// Whether the communicator orders its collectives after the rank's
  /// stream itself (CUDA artifacts).
  bool streamOrdered = false;
};

thread_local Invocation *current = nullptr;

[[noreturn]] void fail(const std::string &what) {
  Invocation *inv = current;
  std::string msg = "rank " + std::to_string(inv->comm->getRank()) + ": " + what;
  inv->error = msg;
  inv->comm->abort(msg);
  std::longjmp(*inv->jump, 1);
}

Communicator &comm() {
  if (!current || !current->comm) {
    std::fprintf(stderr, "shardx: a compiled program ran a collective outside "
                         "shardx_rt_invoke\n");
    std::abort();
  }
  // A host backend would read device buffers as host memory, and a device
  // backend (cuda-local, nccl) run kernels on host buffers.
  const char *backend = current->comm->getBackendName();
  bool device = std::strcmp(backend, "cuda-local") == 0 ||
                std::strcmp(backend, "nccl") == 0;
#ifdef SHARDX_CG_DEVICE
  if (!device)
    fail(std::string("a CUDA artifact's collectives take device buffers: run "
                     "it on the cuda-local or nccl backend (shardx-gpu-exec), "
                     "not ") +
         backend);
  // The rank's stream is this artifact's runtime's (the launcher's copy of
  // the runtime has its own).
  current->streamOrdered =
      current->comm->orderAfterStream(shardx_rt_cuda_stream());
#else
  if (device)
    fail(std::string("a CPU artifact's collectives take host buffers: run it "
                     "on the threads or mpi backend, not ") +
         backend);
#endif
  return *current->comm;
}

//===----------------------------------------------------------------------===//
// The program's buffers: host memory, or device memory on CUDA artifacts
//===----------------------------------------------------------------------===//

/// Waits for the program's queued work on this rank's buffers (before a
/// collective reads or writes them), unless the communicator orders its
/// collectives after that work on the device.
void settle() {
#ifdef SHARDX_CG_DEVICE
  comm();
  if (!current->streamOrdered)
    shardx_rt_cuda_synchronize();
#endif
}

void copyBuffer(void *to, const void *from, size_t bytes) {
  if (!bytes || to == from)
    return;
#ifdef SHARDX_CG_DEVICE
  shardx_rt_cuda_copy(to, from, static_cast<int64_t>(bytes));
#else
  std::memcpy(to, from, bytes);
#endif
}

/// `count` elements of a buffer of the program, readable on the host.
template <typename T> std::vector<T> toHost(const T *data, size_t count) {
  std::vector<T> host(count);
  copyBuffer(host.data(), data, sizeof(T) * count);
  return host;
}

/// Runs `fn` on a communicator that takes host buffers (the program's own on
/// CPU artifacts; device copies of host buffers on CUDA artifacts).
template <typename Fn> void withHostCommunicator(Communicator &c, Fn fn) {
#ifdef SHARDX_CG_DEVICE
  std::unique_ptr<Communicator> staged = shardx::rt::stageHostBuffers(c);
  fn(*staged);
#else
  fn(c);
#endif
}

void check(const Status &s, const char *op) {
  if (!s)
    fail(std::string(op) + ": " + s.message());
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

template <typename T>
void allReduce(const T *in, T *out, int64_t count, int32_t reduce,
               std::vector<int64_t> axes) {
  settle();
  check(comm().allReduce(in, out, count, dtypeOf<T>(), toReduce(reduce), axes),
        "all_reduce");
}

/// Starts an all_reduce; the program keeps `in` and `out` alive and
/// untouched until it waits (it passes them to shardx_rt_cg_wait_*).
template <typename T>
int64_t allReduceStart(const T *in, T *out, int64_t count, int32_t reduce,
                       std::vector<int64_t> axes) {
  settle();
  int64_t request = -1;
  check(comm().allReduceStart(in, out, count, dtypeOf<T>(), toReduce(reduce),
                              axes, request),
        "all_reduce");
  return request;
}

template <typename T>
int64_t allGatherStart(const T *in, T *out, std::vector<size_t> counts,
                       std::vector<int64_t> axes) {
  settle();
  int64_t request = -1;
  check(comm().allGatherStart(in, out, counts, dtypeOf<T>(), axes, request),
        "all_gather");
  return request;
}

template <typename T>
int64_t reduceScatterStart(const T *in, T *out, std::vector<size_t> counts,
                           int32_t reduce, std::vector<int64_t> axes) {
  settle();
  int64_t request = -1;
  check(comm().reduceScatterStart(in, out, counts, dtypeOf<T>(),
                                  toReduce(reduce), axes, request),
        "reduce_scatter");
  return request;
}

/// `n` counts of `count` elements, one per member of the group over `axes`.
std::vector<size_t> evenCounts(int64_t count,
                               const std::vector<int64_t> &axes) {
  return std::vector<size_t>(comm().getGroup(axes).size(),
                             static_cast<size_t>(count));
}

void waitFor(int64_t request) {
  // Fault injection for the failure tests: this rank fails at its first
  // wait, while its peers' collectives (and its own) are in flight.
  if (const char *failRank = std::getenv("SHARDX_TEST_FAIL_IN_FLIGHT"))
    if (std::atoll(failRank) == comm().getRank())
      fail("injected failure with a collective in flight "
           "(SHARDX_TEST_FAIL_IN_FLIGHT)");
  check(comm().wait(request), "wait");
}

/// Adds the time from its construction to its destruction to the calling
/// rank's blocked time (each collective, start and wait of a program: a
/// start that runs its collective synchronously blocks for all of it; a
/// failure unwinds past it, uncounted).
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

template <typename T>
void allGather(const T *in, int64_t count, T *out,
               std::vector<int64_t> axes) {
  settle();
  int64_t n = static_cast<int64_t>(comm().getGroup(axes).size());
  check(comm().allGather(in, out, std::vector<size_t>(n, count), dtypeOf<T>(),
                         axes),
        "all_gather");
}

template <typename T>
void allGatherV(const T *in, T *out, const int64_t *counts, int64_t n,
                std::vector<int64_t> axes) {
  settle();
  check(comm().allGather(in, out, std::vector<size_t>(counts, counts + n),
                         dtypeOf<T>(), axes),
        "all_gather");
}

template <typename T>
void reduceScatterV(const T *in, T *out, const int64_t *counts, int64_t n,
                    int32_t reduce, std::vector<int64_t> axes) {
  settle();
  check(comm().reduceScatter(in, out, std::vector<size_t>(counts, counts + n),
                             dtypeOf<T>(), toReduce(reduce), axes),
        "reduce_scatter");
}

/// All-to-all with uneven pieces: splits the input along `splitDim` into
/// `splitSizes` pieces (one per member), exchanges, and concatenates the
/// received pieces along `concatDim` (member i's piece has `concatSizes[i]`
/// there). `inShape` has -1 for the (dynamic) concat dim.
template <typename T>
void allToAllV(const T *in, T *out, const int64_t *inShapeIn, int64_t rank,
               const int64_t *splitSizes, const int64_t *concatSizes,
               int64_t n, int64_t splitDim, int64_t concatDim,
               std::vector<int64_t> axes) {
  int64_t me = comm().getGroupIndex(axes);
  std::vector<int64_t> inShape(inShapeIn, inShapeIn + rank);
  if (inShape[concatDim] < 0)
    inShape[concatDim] = concatSizes[me];
  auto prod = [](const std::vector<int64_t> &s, int64_t lo, int64_t hi) {
    int64_t p = 1;
    for (int64_t i = lo; i < hi; ++i)
      p *= s[i];
    return p;
  };
  // Pack: the pieces along splitDim, one after another (from a host copy of
  // a device input).
  int64_t outer = prod(inShape, 0, splitDim), mid = inShape[splitDim],
          inner = prod(inShape, splitDim + 1, rank);
#ifdef SHARDX_CG_DEVICE
  settle();
  std::vector<T> hostIn = toHost(in, static_cast<size_t>(outer * mid * inner));
  in = hostIn.data();
#endif
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
  withHostCommunicator(comm(), [&](Communicator &c) {
    check(c.allToAll(send.data(), sendCounts, recv.data(), recvCounts,
                     dtypeOf<T>(), axes),
          "all_to_all");
  });
  // Unpack along concatDim.
  std::vector<int64_t> outShape = piece;
  int64_t concatTotal = 0;
  for (int64_t i = 0; i < n; ++i)
    concatTotal += concatSizes[i];
  outShape[concatDim] = concatTotal;
  int64_t cOuter = prod(outShape, 0, concatDim),
          cInner = prod(outShape, concatDim + 1, rank);
#ifdef SHARDX_CG_DEVICE
  // Unpack on the host, then one copy to the device output.
  T *deviceOut = out;
  std::vector<T> hostOut(static_cast<size_t>(cOuter * concatTotal * cInner));
  out = hostOut.data();
#endif
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
#ifdef SHARDX_CG_DEVICE
  copyBuffer(deviceOut, hostOut.data(), sizeof(T) * hostOut.size());
#endif
}

template <typename T>
void reduceScatter(const T *in, T *out, int64_t recvCount, int32_t reduce,
                   std::vector<int64_t> axes) {
  settle();
  int64_t n = static_cast<int64_t>(comm().getGroup(axes).size());
  check(comm().reduceScatter(in, out, std::vector<size_t>(n, recvCount),
                             dtypeOf<T>(), toReduce(reduce), axes),
        "reduce_scatter");
}

template <typename T>
void allToAll(const T *in, int64_t count, T *out, std::vector<int64_t> axes) {
  settle();
  int64_t n = static_cast<int64_t>(comm().getGroup(axes).size());
  std::vector<size_t> counts(n, count / n);
  check(comm().allToAll(in, counts, out, counts, dtypeOf<T>(), axes),
        "all_to_all");
}

template <typename T>
void permute(const T *in, int64_t count, T *out, const int64_t *pairs,
             int64_t numPairs, std::vector<int64_t> axes) {
  std::vector<std::pair<int64_t, int64_t>> p;
  for (int64_t i = 0; i + 1 < numPairs; i += 2)
    p.push_back({pairs[i], pairs[i + 1]});
  settle();
  check(comm().permute(in, out, count, dtypeOf<T>(), p, axes), "permute");
  // shardx.permute: a member that is no pair's target keeps its tensor (the
  // communicator gives it zeros).
  int64_t me = comm().getGroupIndex(axes);
  bool target = false;
  for (auto [source, t] : p)
    target |= t == me;
  if (!target)
    copyBuffer(out, in, sizeof(T) * count);
}

/// Decodes a `shardx.exchange` descriptor (see encodeExchange).
void decodeStep(const int64_t *desc, int64_t size, std::vector<int64_t> &shape,
                shardx::Layout &source, shardx::Layout &target) {
  std::string error;
  if (!shardx::rt::decodeExchange(desc, static_cast<size_t>(size), shape,
                                  source, target, error))
    fail("exchange: " + error);
}

template <typename T>
void exchangeStep(const T *in, T *out, const int64_t *desc, int64_t size,
                  std::vector<int64_t> axes) {
  std::vector<int64_t> shape;
  shardx::Layout source, target;
  decodeStep(desc, size, shape, source, target);
#ifdef SHARDX_CG_DEVICE
  // Through host memory: the local shards' sizes from the layouts.
  const std::vector<int64_t> &mesh = comm().getMeshShape();
  auto elements = [&](const shardx::Layout &l) {
    size_t n = 1;
    for (int64_t d : l.getLocalShard(mesh, shape, comm().getCoords()).shape)
      n *= static_cast<size_t>(d);
    return n;
  };
  settle();
  std::vector<T> hostIn = toHost(in, elements(source));
  std::vector<T> hostOut(elements(target) + 1);
  withHostCommunicator(comm(), [&](Communicator &c) {
    check(shardx::rt::exchange(c, hostIn.data(), hostOut.data(), dtypeOf<T>(),
                               shape, source, target, axes),
          "exchange");
  });
  copyBuffer(out, hostOut.data(), sizeof(T) * (hostOut.size() - 1));
#else
  check(shardx::rt::exchange(comm(), in, out, dtypeOf<T>(), shape, source,
                             target, axes),
        "exchange");
#endif
}

template <typename T>
void broadcast(const T *in, int64_t count, T *out, int64_t root,
               std::vector<int64_t> axes) {
  settle();
  copyBuffer(out, in, sizeof(T) * count);
  check(comm().broadcast(out, count, dtypeOf<T>(), root, axes), "broadcast");
}

template <typename T>
void partitionValue(const T *in, int64_t count, T *out, int32_t reduce,
                    std::vector<int64_t> axes) {
  if (comm().getGroupIndex(axes) == 0 || reduce == SHARDX_RT_AVG ||
      reduce == SHARDX_RT_MAX || reduce == SHARDX_RT_MIN) {
    copyBuffer(out, in, sizeof(T) * count);
    return;
  }
  T identity = reduce == SHARDX_RT_PROD ? T(1) : T(0);
#ifdef SHARDX_CG_DEVICE
  std::vector<T> host(static_cast<size_t>(count), identity);
  copyBuffer(out, host.data(), sizeof(T) * host.size());
#else
  for (int64_t i = 0; i < count; ++i)
    out[i] = identity;
#endif
}

} // namespace

extern "C" {

int shardx_rt_invoke(void (*entry)(void **), void **args, shardx_rt_comm *c,
                     char *error, int64_t errorSize) {
#ifdef SHARDX_CG_DEVICE
  // No usable GPU: the driver's error, before anything runs.
  if (shardx_rt_cuda_init(error, errorSize))
    return 1;
#endif
  Invocation inv;
  inv.comm = c ? reinterpret_cast<Communicator *>(c) : nullptr;
  std::jmp_buf jump;
  inv.jump = &jump;
  Invocation *saved = current;
  current = &inv;
  if (setjmp(jump) == 0) {
    // Fault injection for the failure tests: this rank fails before running.
    if (const char *failRank = std::getenv("SHARDX_TEST_FAIL_RANK"))
      if (inv.comm && std::atoll(failRank) == inv.comm->getRank())
        fail("injected failure (SHARDX_TEST_FAIL_RANK)");
    entry(args);
#ifdef SHARDX_CG_DEVICE
    // The collectives still in flight end the run: their errors fail it
    // (the communicator aborted the world), before the host waits for the
    // rank's stream, which waits for them.
    if (inv.comm)
      if (Status s = inv.comm->finish(); !s)
        fail(s.message());
    shardx_rt_cuda_synchronize();
#endif
    current = saved;
    return 0;
  }
  current = saved;
  if (error && errorSize > 0) {
    std::strncpy(error, inv.error.c_str(), errorSize - 1);
    error[errorSize - 1] = '\0';
  }
  return 1;
}

int64_t shardx_rt_cg_axis_index(AXES) {
  return comm().getGroupIndex(AXES_VEC);
}

/// The size of dim `dim` of this rank's target shard of an exchange.
int64_t shardx_rt_cg_exchange_dim(MEMREF1(int64_t, desc), int64_t dim) {
  std::vector<int64_t> shape;
  shardx::Layout source, target;
  decodeStep(desc + desc_off, desc_size, shape, source, target);
  if (dim < 0 || dim >= static_cast<int64_t>(shape.size()))
    fail("exchange: dim out of range");
  return target.getLocalShard(comm().getMeshShape(), shape, comm().getCoords())
      .shape[dim];
}

#define DEFINE_CG(SUFFIX, T)                                                   \
  void shardx_rt_cg_all_reduce_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),       \
                                        int32_t reduce, AXES) {                \
    BlockedTimer blocked;                                                      \
    allReduce(in + in_off, out + out_off, in_size, reduce, AXES_VEC);         \
  }                                                                            \
  int64_t shardx_rt_cg_all_reduce_start_##SUFFIX(                              \
      MEMREF1(T, in), MEMREF1(T, out), int32_t reduce, AXES) {                 \
    BlockedTimer blocked;                                                      \
    return allReduceStart(in + in_off, out + out_off, in_size, reduce,         \
                          AXES_VEC);                                           \
  }                                                                            \
  void shardx_rt_cg_wait_##SUFFIX(int64_t request, MEMREF1(T, in),             \
                                  MEMREF1(T, out)) {                           \
    BlockedTimer blocked;                                                      \
    waitFor(request);                                                          \
  }                                                                            \
  int64_t shardx_rt_cg_all_gather_start_##SUFFIX(                              \
      MEMREF1(T, in), MEMREF1(T, out), AXES) {                                 \
    BlockedTimer blocked;                                                      \
    return allGatherStart(in + in_off, out + out_off,                          \
                          evenCounts(in_size, AXES_VEC), AXES_VEC);            \
  }                                                                            \
  int64_t shardx_rt_cg_reduce_scatter_start_##SUFFIX(                          \
      MEMREF1(T, in), MEMREF1(T, out), int32_t reduce, AXES) {                 \
    BlockedTimer blocked;                                                      \
    return reduceScatterStart(in + in_off, out + out_off,                      \
                              evenCounts(out_size, AXES_VEC), reduce,          \
                              AXES_VEC);                                       \
  }                                                                            \
  int64_t shardx_rt_cg_all_gather_v_start_##SUFFIX(                            \
      MEMREF1(T, in), MEMREF1(T, out), MEMREF1(int64_t, counts), AXES) {       \
    BlockedTimer blocked;                                                      \
    return allGatherStart(                                                     \
        in + in_off, out + out_off,                                            \
        std::vector<size_t>(counts + counts_off,                               \
                            counts + counts_off + counts_size),                \
        AXES_VEC);                                                             \
  }                                                                            \
  int64_t shardx_rt_cg_reduce_scatter_v_start_##SUFFIX(                        \
      MEMREF1(T, in), MEMREF1(T, out), int32_t reduce,                         \
      MEMREF1(int64_t, counts), AXES) {                                        \
    BlockedTimer blocked;                                                      \
    return reduceScatterStart(                                                 \
        in + in_off, out + out_off,                                            \
        std::vector<size_t>(counts + counts_off,                               \
                            counts + counts_off + counts_size),                \
        reduce, AXES_VEC);                                                     \
  }                                                                            \
  void shardx_rt_cg_all_gather_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),       \
                                        AXES) {                                \
    BlockedTimer blocked;                                                      \
    allGather(in + in_off, in_size, out + out_off, AXES_VEC);                 \
  }                                                                            \
  void shardx_rt_cg_reduce_scatter_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),   \
                                            int32_t reduce, AXES) {            \
    BlockedTimer blocked;                                                      \
    reduceScatter(in + in_off, out + out_off, out_size, reduce, AXES_VEC);    \
  }                                                                            \
  void shardx_rt_cg_all_gather_v_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),     \
                                          MEMREF1(int64_t, counts), AXES) {    \
    BlockedTimer blocked;                                                      \
    allGatherV(in + in_off, out + out_off, counts + counts_off, counts_size,  \
               AXES_VEC);                                                      \
  }                                                                            \
  void shardx_rt_cg_reduce_scatter_v_##SUFFIX(                                 \
      MEMREF1(T, in), MEMREF1(T, out), int32_t reduce,                         \
      MEMREF1(int64_t, counts), AXES) {                                        \
    BlockedTimer blocked;                                                      \
    reduceScatterV(in + in_off, out + out_off, counts + counts_off,           \
                   counts_size, reduce, AXES_VEC);                             \
  }                                                                            \
  void shardx_rt_cg_all_to_all_v_##SUFFIX(                                     \
      MEMREF1(T, in), MEMREF1(T, out), MEMREF1(int64_t, shape),                \
      MEMREF1(int64_t, split), MEMREF1(int64_t, concat), int64_t splitDim,     \
      int64_t concatDim, AXES) {                                               \
    BlockedTimer blocked;                                                      \
    allToAllV(in + in_off, out + out_off, shape + shape_off, shape_size,      \
              split + split_off, concat + concat_off, split_size, splitDim,    \
              concatDim, AXES_VEC);                                            \
  }                                                                            \
  void shardx_rt_cg_all_to_all_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),       \
                                        AXES) {                                \
    BlockedTimer blocked;                                                      \
    allToAll(in + in_off, in_size, out + out_off, AXES_VEC);                  \
  }                                                                            \
  void shardx_rt_cg_permute_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),          \
                                     MEMREF1(int64_t, pairs), AXES) {          \
    BlockedTimer blocked;                                                      \
    permute(in + in_off, in_size, out + out_off, pairs + pairs_off,           \
            pairs_size, AXES_VEC);                                             \
  }                                                                            \
  void shardx_rt_cg_broadcast_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),        \
                                       int64_t root, AXES) {                   \
    BlockedTimer blocked;                                                      \
    broadcast(in + in_off, in_size, out + out_off, root, AXES_VEC);           \
  }                                                                            \
  void shardx_rt_cg_exchange_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),         \
                                      MEMREF1(int64_t, desc), AXES) {          \
    BlockedTimer blocked;                                                      \
    exchangeStep(in + in_off, out + out_off, desc + desc_off, desc_size,      \
                 AXES_VEC);                                                    \
  }                                                                            \
  void shardx_rt_cg_partition_value_##SUFFIX(MEMREF1(T, in), MEMREF1(T, out),  \
                                             int32_t reduce, AXES) {           \
    BlockedTimer blocked;                                                      \
    partitionValue(in + in_off, in_size, out + out_off, reduce, AXES_VEC);    \
  }

DEFINE_CG(f32, float)
DEFINE_CG(f64, double)
DEFINE_CG(i32, int32_t)
DEFINE_CG(i64, int64_t)
DEFINE_CG(bf16, shardx::rt::BFloat16)
DEFINE_CG(f16, shardx::rt::Float16)

} // extern "C"
