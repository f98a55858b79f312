//===- CApi.cpp - The runtime's stable C ABI ------------------------------===//
//
// Part of ShardX.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"

#include <cblas.h>

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
  if (dtype < SHARDX_RT_F32 || dtype > SHARDX_RT_I64)
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

} // extern "C"

// GEMMs: OpenBLAS through CBLAS. Leading dimensions are checked so that a
// bad call is an error, not an out-of-bounds read.
namespace {

void cblasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
               int64_t k, float alpha, const float *a, int64_t lda,
               const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

void cblasGemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t m, int64_t n,
               int64_t k, double alpha, const double *a, int64_t lda,
               const double *b, int64_t ldb, double beta, double *c,
               int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c,
              ldc);
}

/// `batch` row-major GEMMs stepping A, B and C by their strides.
template <typename T>
int gemmBatched(int64_t batch, int32_t transA, int32_t transB, int64_t m,
                int64_t n, int64_t k, T alpha, const T *a, int64_t lda,
                int64_t strideA, const T *b, int64_t ldb, int64_t strideB,
                T beta, T *c, int64_t ldc, int64_t strideC) {
  int64_t aCols = transA ? m : k, bCols = transB ? k : n;
  if (batch < 0 || m < 0 || n < 0 || k < 0 ||
      lda < std::max<int64_t>(1, aCols) || ldb < std::max<int64_t>(1, bCols) ||
      ldc < std::max<int64_t>(1, n))
    return 1;
  for (int64_t i = 0; i < batch; ++i)
    cblasGemm(transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a + i * strideA, lda, b + i * strideB, ldb, beta, c + i * strideC,
              ldc);
  return 0;
}

} // namespace

// OpenBLAS's own API (cblas.h may be another implementation's header).
extern "C" void openblas_set_num_threads(int);
extern "C" int openblas_get_num_threads(void);

extern "C" {

int shardx_rt_set_compute_threads(int threads) {
  int previous = openblas_get_num_threads();
  openblas_set_num_threads(threads < 1 ? 1 : threads);
  return previous;
}

int shardx_rt_sgemm(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n,
                    int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc) {
  return gemmBatched(1, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0,
                     beta, c, ldc, 0);
}

int shardx_rt_dgemm(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n,
                    int64_t k, double alpha, const double *a, int64_t lda,
                    const double *b, int64_t ldb, double beta, double *c,
                    int64_t ldc) {
  return gemmBatched(1, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0,
                     beta, c, ldc, 0);
}

int shardx_rt_sgemm_batched(int64_t batch, int32_t trans_a, int32_t trans_b,
                            int64_t m, int64_t n, int64_t k, float alpha,
                            const float *a, int64_t lda, int64_t stride_a,
                            const float *b, int64_t ldb, int64_t stride_b,
                            float beta, float *c, int64_t ldc,
                            int64_t stride_c) {
  return gemmBatched(batch, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
                     b, ldb, stride_b, beta, c, ldc, stride_c);
}

int shardx_rt_dgemm_batched(int64_t batch, int32_t trans_a, int32_t trans_b,
                            int64_t m, int64_t n, int64_t k, double alpha,
                            const double *a, int64_t lda, int64_t stride_a,
                            const double *b, int64_t ldb, int64_t stride_b,
                            double beta, double *c, int64_t ldc,
                            int64_t stride_c) {
  return gemmBatched(batch, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a,
                     b, ldb, stride_b, beta, c, ldc, stride_c);
}

} // extern "C"
