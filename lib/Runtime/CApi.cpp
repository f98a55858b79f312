//===- CApi.cpp - The runtime's stable C ABI ------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"

using namespace shardx;
using namespace shardx::rt;

// The opaque handle is the communicator itself.
shardx_rt_comm *shardx::rt::getCHandle(Communicator &comm) {
  return reinterpret_cast<shardx_rt_comm *>(&comm);
}

static Communicator &unwrap(shardx_rt_comm *comm) {
  return *reinterpret_cast<Communicator *>(comm);
}
static const Communicator &unwrap(const shardx_rt_comm *comm) {
  return *reinterpret_cast<const Communicator *>(comm);
}


// The C ABI's reduction codes are the layout algebra's ReduceOp (and so the
// dialect's ReductionKind, checked in ShardXAttrs.cpp).
static_assert(SHARDX_RT_SUM == static_cast<int>(shardx::ReduceOp::Sum) &&
                  SHARDX_RT_AVG == static_cast<int>(shardx::ReduceOp::Avg) &&
                  SHARDX_RT_MAX == static_cast<int>(shardx::ReduceOp::Max) &&
                  SHARDX_RT_MIN == static_cast<int>(shardx::ReduceOp::Min) &&
                  SHARDX_RT_PROD == static_cast<int>(shardx::ReduceOp::Prod),
              "SHARDX_RT_* reduction codes must match shardx::ReduceOp");
namespace {

/// Validates the C enums and arrays, then runs `call`; records failures.
template <typename Call>
int run(shardx_rt_comm *handle, const char *op, int32_t dtype, int32_t reduce,
        Call call) {
  Communicator &comm = unwrap(handle);
  auto fail = [&](const std::string &message) {
    comm.setLastError(message);
    return 1;
  };
  if (dtype < SHARDX_RT_F32 || dtype > SHARDX_RT_F16)
    return fail(std::string(op) + ": unknown dtype " + std::to_string(dtype));
  if (reduce < SHARDX_RT_SUM || reduce > SHARDX_RT_PROD)
    return fail(std::string(op) + ": unknown reduction " +
                std::to_string(reduce));
  Status s = call(static_cast<DType>(dtype), static_cast<ReduceOp>(reduce));
  if (!s)
    return fail(s.message());
  comm.setLastError("");
  return 0;
}

std::vector<int64_t> toVector(const int64_t *data, int64_t n) {
  return n > 0 ? std::vector<int64_t>(data, data + n) : std::vector<int64_t>();
}

std::vector<size_t> toCounts(const int64_t *data, int64_t n) {
  std::vector<size_t> counts;
  for (int64_t i = 0; i < n; ++i)
    counts.push_back(data[i] < 0 ? 0 : static_cast<size_t>(data[i]));
  return counts;
}

} // namespace

extern "C" {

int64_t shardx_rt_rank(const shardx_rt_comm *comm) {
  return unwrap(comm).getRank();
}

int64_t shardx_rt_size(const shardx_rt_comm *comm) {
  return unwrap(comm).getSize();
}

int64_t shardx_rt_axis_index(const shardx_rt_comm *comm, const int64_t *axes,
                             int64_t num_axes) {
  return unwrap(comm).getGroupIndex(toVector(axes, num_axes));
}

const char *shardx_rt_last_error(const shardx_rt_comm *comm) {
  return unwrap(comm).getLastError().c_str();
}

int shardx_rt_all_gather(shardx_rt_comm *comm, const void *send, void *recv,
                         const int64_t *counts, int64_t num_counts,
                         int32_t dtype, const int64_t *axes, int64_t num_axes) {
  return run(
      comm, "all_gather", dtype, SHARDX_RT_SUM, [&](DType type, ReduceOp) {
        return unwrap(comm).allGather(send, recv, toCounts(counts, num_counts),
                                      type, toVector(axes, num_axes));
      });
}

int shardx_rt_reduce_scatter(shardx_rt_comm *comm, const void *send, void *recv,
                             const int64_t *counts, int64_t num_counts,
                             int32_t dtype, int32_t reduce, const int64_t *axes,
                             int64_t num_axes) {
  return run(
      comm, "reduce_scatter", dtype, reduce, [&](DType type, ReduceOp op) {
        return unwrap(comm).reduceScatter(send, recv,
                                          toCounts(counts, num_counts), type,
                                          op, toVector(axes, num_axes));
      });
}

int shardx_rt_all_reduce(shardx_rt_comm *comm, const void *send, void *recv,
                         int64_t count, int32_t dtype, int32_t reduce,
                         const int64_t *axes, int64_t num_axes) {
  return run(comm, "all_reduce", dtype, reduce, [&](DType type, ReduceOp op) {
    return unwrap(comm).allReduce(send, recv, static_cast<size_t>(count), type,
                                  op, toVector(axes, num_axes));
  });
}

int shardx_rt_all_to_all(shardx_rt_comm *comm, const void *send,
                         const int64_t *send_counts, void *recv,
                         const int64_t *recv_counts, int64_t num_counts,
                         int32_t dtype, const int64_t *axes, int64_t num_axes) {
  return run(
      comm, "all_to_all", dtype, SHARDX_RT_SUM, [&](DType type, ReduceOp) {
        return unwrap(comm).allToAll(send, toCounts(send_counts, num_counts),
                                     recv, toCounts(recv_counts, num_counts),
                                     type, toVector(axes, num_axes));
      });
}

int shardx_rt_permute(shardx_rt_comm *comm, const void *send, void *recv,
                      int64_t count, int32_t dtype, const int64_t *pairs,
                      int64_t num_pairs, const int64_t *axes,
                      int64_t num_axes) {
  return run(comm, "permute", dtype, SHARDX_RT_SUM, [&](DType type, ReduceOp) {
    std::vector<std::pair<int64_t, int64_t>> moves;
    for (int64_t i = 0; i < num_pairs; ++i)
      moves.push_back({pairs[2 * i], pairs[2 * i + 1]});
    return unwrap(comm).permute(send, recv, static_cast<size_t>(count), type,
                                moves, toVector(axes, num_axes));
  });
}

int shardx_rt_broadcast(shardx_rt_comm *comm, void *buffer, int64_t count,
                        int32_t dtype, int64_t root, const int64_t *axes,
                        int64_t num_axes) {
  return run(
      comm, "broadcast", dtype, SHARDX_RT_SUM, [&](DType type, ReduceOp) {
        return unwrap(comm).broadcast(buffer, static_cast<size_t>(count), type,
                                      root, toVector(axes, num_axes));
      });
}

int shardx_rt_barrier(shardx_rt_comm *comm, const int64_t *axes,
                      int64_t num_axes) {
  return run(comm, "barrier", SHARDX_RT_F32, SHARDX_RT_SUM,
             [&](DType, ReduceOp) {
               return unwrap(comm).barrier(toVector(axes, num_axes));
             });
}

int shardx_rt_all_reduce_start(shardx_rt_comm *comm, const void *send,
                               void *recv, int64_t count, int32_t dtype,
                               int32_t reduce, const int64_t *axes,
                               int64_t num_axes, int64_t *request) {
  return run(comm, "all_reduce", dtype, reduce, [&](DType type, ReduceOp op) {
    if (!request)
      return Status::error("all_reduce: no request to write");
    return unwrap(comm).allReduceStart(send, recv, static_cast<size_t>(count),
                                       type, op, toVector(axes, num_axes),
                                       *request);
  });
}

int shardx_rt_all_gather_start(shardx_rt_comm *comm, const void *send,
                               void *recv, const int64_t *counts,
                               int64_t num_counts, int32_t dtype,
                               const int64_t *axes, int64_t num_axes,
                               int64_t *request) {
  return run(
      comm, "all_gather", dtype, SHARDX_RT_SUM, [&](DType type, ReduceOp) {
        if (!request)
          return Status::error("all_gather: no request to write");
        return unwrap(comm).allGatherStart(send, recv,
                                           toCounts(counts, num_counts), type,
                                           toVector(axes, num_axes), *request);
      });
}

int shardx_rt_reduce_scatter_start(shardx_rt_comm *comm, const void *send,
                                   void *recv, const int64_t *counts,
                                   int64_t num_counts, int32_t dtype,
                                   int32_t reduce, const int64_t *axes,
                                   int64_t num_axes, int64_t *request) {
  return run(comm, "reduce_scatter", dtype, reduce,
             [&](DType type, ReduceOp op) {
               if (!request)
                 return Status::error("reduce_scatter: no request to write");
               return unwrap(comm).reduceScatterStart(
                   send, recv, toCounts(counts, num_counts), type, op,
                   toVector(axes, num_axes), *request);
             });
}

int shardx_rt_wait(shardx_rt_comm *comm, int64_t request) {
  return run(comm, "wait", SHARDX_RT_F32, SHARDX_RT_SUM,
             [&](DType, ReduceOp) { return unwrap(comm).wait(request); });
}

double shardx_rt_wait_seconds(const shardx_rt_comm *comm) {
  return comm ? reinterpret_cast<const Communicator *>(comm)->getWaitSeconds()
              : 0.0;
}

} // extern "C"
