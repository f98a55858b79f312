//===- Blas.cpp - The runtime's GEMMs on OpenBLAS -------------------------===//
//
// Part of ShardX.
//
// The GEMM half of the C ABI (shardx_rt_[sd]gemm[_batched],
// shardx_rt_set_compute_threads), in its own library (ShardXRuntimeBlas) so
// that only CPU artifacts and their tests link OpenBLAS: the executors and
// the CUDA artifacts do not.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"

#include <algorithm>
#include <cblas.h>

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
