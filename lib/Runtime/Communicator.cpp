//===- Communicator.cpp - Collectives over the ranks of a mesh ------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Communicator.h"
#include "shardx/Runtime/HalfFloat.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

#ifdef __linux__
#include <sched.h>
#endif

namespace shardx::rt {

Communicator::Communicator(std::vector<int64_t> meshShape, int64_t rank)
    : meshShape(std::move(meshShape)), rank(rank) {
  size = 1;
  for (int64_t n : this->meshShape)
    size *= n;
  coords.resize(this->meshShape.size());
  int64_t r = rank;
  for (int64_t a = static_cast<int64_t>(this->meshShape.size()) - 1; a >= 0;
       --a) {
    coords[a] = r % this->meshShape[a];
    r /= this->meshShape[a];
  }
}

Communicator::~Communicator() = default;

MemoryOps::~MemoryOps() = default;

std::vector<int64_t>
Communicator::getGroup(const std::vector<int64_t> &axes) const {
  int64_t n = 1;
  for (int64_t a : axes)
    n *= meshShape[a];
  std::vector<int64_t> members;
  members.reserve(n);
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> c = coords;
    int64_t rest = i;
    for (int64_t k = static_cast<int64_t>(axes.size()) - 1; k >= 0; --k) {
      c[axes[k]] = rest % meshShape[axes[k]];
      rest /= meshShape[axes[k]];
    }
    int64_t global = 0;
    for (size_t a = 0; a < c.size(); ++a)
      global = global * meshShape[a] + c[a];
    members.push_back(global);
  }
  return members;
}

int64_t Communicator::getGroupIndex(const std::vector<int64_t> &axes) const {
  return linearizeCoords(meshShape, axes, coords);
}

Status Communicator::checkAxes(const std::vector<int64_t> &axes,
                               const char *op) const {
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= static_cast<int64_t>(meshShape.size()))
      return Status::error(std::string(op) + " on rank " +
                           std::to_string(rank) + ": mesh axis " +
                           std::to_string(axes[i]) + " is out of range");
    for (size_t j = 0; j < i; ++j)
      if (axes[i] == axes[j])
        return Status::error(std::string(op) + " on rank " +
                             std::to_string(rank) + ": mesh axis " +
                             std::to_string(axes[i]) + " is listed twice");
  }
  return Status::ok();
}

Status Communicator::unsupported(const char *op) const {
  return Status::error(std::string("backend ") + getBackendName() +
                       " does not support " + op);
}

Status Communicator::allGather(const void *, void *,
                               const std::vector<size_t> &, DType,
                               const std::vector<int64_t> &) {
  return unsupported("all_gather");
}
Status Communicator::reduceScatter(const void *, void *,
                                   const std::vector<size_t> &, DType, ReduceOp,
                                   const std::vector<int64_t> &) {
  return unsupported("reduce_scatter");
}
Status Communicator::allReduce(const void *, void *, size_t, DType, ReduceOp,
                               const std::vector<int64_t> &) {
  return unsupported("all_reduce");
}
Status Communicator::allToAll(const void *, const std::vector<size_t> &, void *,
                              const std::vector<size_t> &, DType,
                              const std::vector<int64_t> &) {
  return unsupported("all_to_all");
}
Status Communicator::permute(const void *, void *, size_t, DType,
                             const std::vector<std::pair<int64_t, int64_t>> &,
                             const std::vector<int64_t> &) {
  return unsupported("permute");
}
Status Communicator::broadcast(void *, size_t, DType, int64_t,
                               const std::vector<int64_t> &) {
  return unsupported("broadcast");
}
Status Communicator::barrier(const std::vector<int64_t> &) {
  return unsupported("barrier");
}

Status Communicator::allReduceStart(const void *send, void *recv, size_t count,
                                    DType type, ReduceOp op,
                                    const std::vector<int64_t> &axes,
                                    int64_t &request) {
  request = -1; // done: wait has nothing to wait for
  return allReduce(send, recv, count, type, op, axes);
}

Status Communicator::allGatherStart(const void *send, void *recv,
                                    const std::vector<size_t> &counts,
                                    DType type,
                                    const std::vector<int64_t> &axes,
                                    int64_t &request) {
  request = -1;
  return allGather(send, recv, counts, type, axes);
}

Status Communicator::reduceScatterStart(const void *send, void *recv,
                                        const std::vector<size_t> &counts,
                                        DType type, ReduceOp op,
                                        const std::vector<int64_t> &axes,
                                        int64_t &request) {
  request = -1;
  return reduceScatter(send, recv, counts, type, op, axes);
}

bool asyncCollectivesEnabled(int64_t localRanks) {
  if (const char *mode = std::getenv("SHARDX_ASYNC_COLLECTIVES")) {
    if (std::strcmp(mode, "on") == 0)
      return true;
    if (std::strcmp(mode, "off") == 0)
      return false;
  }
  int64_t cpus = 0;
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    cpus = CPU_COUNT(&set);
#endif
  if (cpus <= 0)
    cpus = std::thread::hardware_concurrency();
  return cpus >= 2 * std::max<int64_t>(localRanks, 1);
}

Status Communicator::wait(int64_t request) {
  if (request != -1)
    return Status::error(std::string("backend ") + getBackendName() +
                         ": wait for unknown request " +
                         std::to_string(request));
  return Status::ok();
}

bool Communicator::orderAfterStream(void *) { return false; }

Status Communicator::finish() { return Status::ok(); }

namespace {
/// The element rule is the layout algebra's (max and min propagate NaN
/// whatever the order of the members, as arith.maximumf/minimumf do); one
/// loop per op, so that each inlines a constant op.
template <ReduceOp Op, typename T>
void reduceLoop(T *inout, const T *in, size_t count) {
  for (size_t i = 0; i < count; ++i)
    ::shardx::reduceInto(inout[i], in[i], Op);
}

template <typename T>
void reduceTyped(T *inout, const T *in, size_t count, ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Avg:
    return reduceLoop<ReduceOp::Sum>(inout, in, count);
  case ReduceOp::Max:
    return reduceLoop<ReduceOp::Max>(inout, in, count);
  case ReduceOp::Min:
    return reduceLoop<ReduceOp::Min>(inout, in, count);
  case ReduceOp::Prod:
    return reduceLoop<ReduceOp::Prod>(inout, in, count);
  }
}

template <typename T> void divideTyped(T *buffer, size_t count, int64_t n) {
  for (size_t i = 0; i < count; ++i)
    buffer[i] /= static_cast<T>(n);
}

/// inout op= in on bf16/f16 elements, each combined in f32 and rounded
/// once, a block at a time.
void reduceHalf(void *inout, const void *in, size_t count, DType type,
                ReduceOp op) {
  constexpr size_t kBlock = 1024;
  float acc[kBlock], other[kBlock];
  auto *io = static_cast<char *>(inout);
  auto *src = static_cast<const char *>(in);
  for (size_t k = 0; k < count; k += kBlock) {
    size_t len = std::min(kBlock, count - k);
    widenToF32(acc, io + 2 * k, len, type);
    widenToF32(other, src + 2 * k, len, type);
    reduceTyped(acc, other, len, op);
    narrowFromF32(io + 2 * k, acc, len, type);
  }
}
} // namespace

void widenToF32(float *out, const void *in, size_t count, DType type) {
  auto *h = static_cast<const uint16_t *>(in);
  if (type == DType::BF16)
    for (size_t i = 0; i < count; ++i)
      out[i] = bf16ToFloat(h[i]);
  else
    for (size_t i = 0; i < count; ++i)
      out[i] = f16ToFloat(h[i]);
}

void narrowFromF32(void *out, const float *in, size_t count, DType type) {
  auto *h = static_cast<uint16_t *>(out);
  if (type == DType::BF16)
    for (size_t i = 0; i < count; ++i)
      h[i] = floatToBf16(in[i]);
  else
    for (size_t i = 0; i < count; ++i)
      h[i] = floatToF16(in[i]);
}

void reduceInto(void *inout, const void *in, size_t count, DType type,
                ReduceOp op) {
  switch (type) {
  case DType::F32:
    return reduceTyped(static_cast<float *>(inout),
                       static_cast<const float *>(in), count, op);
  case DType::F64:
    return reduceTyped(static_cast<double *>(inout),
                       static_cast<const double *>(in), count, op);
  case DType::I32:
    return reduceTyped(static_cast<int32_t *>(inout),
                       static_cast<const int32_t *>(in), count, op);
  case DType::I64:
    return reduceTyped(static_cast<int64_t *>(inout),
                       static_cast<const int64_t *>(in), count, op);
  case DType::BF16:
  case DType::F16:
    return reduceHalf(inout, in, count, type, op);
  case DType::I16:
  case DType::I8:
  case DType::I1:
  case DType::Index: // not collective types (isCollectiveType)
    return;
  }
}

void divideBy(void *buffer, size_t count, DType type, int64_t n) {
  switch (type) {
  case DType::F32:
    return divideTyped(static_cast<float *>(buffer), count, n);
  case DType::F64:
    return divideTyped(static_cast<double *>(buffer), count, n);
  case DType::I32:
    return divideTyped(static_cast<int32_t *>(buffer), count, n);
  case DType::I64:
    return divideTyped(static_cast<int64_t *>(buffer), count, n);
  case DType::BF16:
  case DType::F16: {
    constexpr size_t kBlock = 1024;
    float acc[kBlock];
    auto *b = static_cast<char *>(buffer);
    for (size_t k = 0; k < count; k += kBlock) {
      size_t len = std::min(kBlock, count - k);
      widenToF32(acc, b + 2 * k, len, type);
      divideTyped(acc, len, n);
      narrowFromF32(b + 2 * k, acc, len, type);
    }
    return;
  }
  case DType::I16:
  case DType::I8:
  case DType::I1:
  case DType::Index: // not collective types (isCollectiveType)
    return;
  }
}

} // namespace shardx::rt
