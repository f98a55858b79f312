//===- MemRefKernels.cpp - Kernels compiled programs call on memrefs -------===//
//
// Part of ShardX.
//
// Compiled CPU programs call these with MLIR's C interface: a pointer to each
// memref's descriptor (allocated and aligned pointers, offset, sizes,
// strides). Matmul-family ops go to OpenBLAS; any operand layout that BLAS
// cannot take directly (no unit stride in either dim) is copied first.
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/CApi.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

template <typename T, int N>
struct MemRef {
  T *allocated;
  T *aligned;
  int64_t offset;
  int64_t sizes[N];
  int64_t strides[N];
};

/// A BLAS view of a 2-D operand (last two dims of `m`): base pointer,
/// transpose flag and leading dimension; copies into `scratch` when neither
/// dim has unit stride.
template <typename T, int N>
const T *blasView(const MemRef<T, N> *m, int64_t batchOffset, int32_t &trans,
                  int64_t &ld, std::vector<T> &scratch) {
  int64_t rows = m->sizes[N - 2], cols = m->sizes[N - 1];
  int64_t sr = m->strides[N - 2], sc = m->strides[N - 1];
  const T *base = m->aligned + m->offset + batchOffset;
  if (sc == 1 && sr >= std::max<int64_t>(1, cols)) {
    trans = 0;
    ld = sr;
    return base;
  }
  if (sr == 1 && sc >= std::max<int64_t>(1, rows)) {
    trans = 1;
    ld = sc;
    return base;
  }
  scratch.resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      scratch[i * cols + j] = base[i * sr + j * sc];
  trans = 0;
  ld = std::max<int64_t>(1, cols);
  return scratch.data();
}

int gemm(int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k,
         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
         float *c, int64_t ldc) {
  return shardx_rt_sgemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}
int gemm(int32_t ta, int32_t tb, int64_t m, int64_t n, int64_t k,
         const double *a, int64_t lda, const double *b, int64_t ldb,
         double beta, double *c, int64_t ldc) {
  return shardx_rt_dgemm(ta, tb, m, n, k, 1.0, a, lda, b, ldb, beta, c, ldc);
}

/// C = A * B (+ C when `accumulate`) over the batch dims (N = 2: none;
/// N = 3: one). Without `accumulate` C is not read: the compiler folded a
/// zero fill of C into this call.
template <typename T, int N>
void matmul(MemRef<T, N> *a, MemRef<T, N> *b, MemRef<T, N> *c,
            int32_t accumulate) {
  int64_t batch = N == 3 ? c->sizes[0] : 1;
  int64_t m = c->sizes[N - 2], n = c->sizes[N - 1], k = a->sizes[N - 1];
  if (m == 0 || n == 0)
    return;
  T beta = accumulate ? T(1) : T(0);
  if (k == 0) {
    // No terms: C keeps its value or becomes zero.
    if (!accumulate)
      for (int64_t i = 0; i < batch; ++i)
        for (int64_t r = 0; r < m; ++r)
          for (int64_t s = 0; s < n; ++s)
            c->aligned[c->offset + (N == 3 ? i * c->strides[0] : 0) +
                       r * c->strides[N - 2] + s * c->strides[N - 1]] = T(0);
    return;
  }
  std::vector<T> sa, sb, sc;
  for (int64_t i = 0; i < batch; ++i) {
    int64_t offA = N == 3 ? i * a->strides[0] : 0;
    int64_t offB = N == 3 ? i * b->strides[0] : 0;
    int64_t offC = N == 3 ? i * c->strides[0] : 0;
    int32_t ta, tb, tc;
    int64_t lda, ldb, ldc;
    const T *pa = blasView(a, offA, ta, lda, sa);
    const T *pb = blasView(b, offB, tb, ldb, sb);
    T *pc = c->aligned + c->offset + offC;
    if (c->strides[N - 1] == 1 && c->strides[N - 2] >= n) {
      gemm(ta, tb, m, n, k, pa, lda, pb, ldb, beta, pc, c->strides[N - 2]);
      continue;
    }
    if (c->strides[N - 2] == 1 && c->strides[N - 1] >= m) {
      // A column-major C: compute C^T = B^T A^T in place.
      gemm(!tb, !ta, n, m, k, pb, ldb, pa, lda, beta, pc, c->strides[N - 1]);
      continue;
    }
    // A strided output: compute into a packed copy.
    std::vector<T> packed(static_cast<size_t>(m * n), T(0));
    if (accumulate) {
      const T *pcv = blasView(c, offC, tc, ldc, sc);
      for (int64_t r = 0; r < m; ++r)
        for (int64_t s = 0; s < n; ++s)
          packed[r * n + s] = tc ? pcv[s * ldc + r] : pcv[r * ldc + s];
    }
    gemm(ta, tb, m, n, k, pa, lda, pb, ldb, beta, packed.data(), n);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t s = 0; s < n; ++s)
        pc[r * c->strides[N - 2] + s * c->strides[N - 1]] = packed[r * n + s];
  }
}

/// Copies a strided memref of any rank element by element (bytes).
void copyStrided(int64_t elemSize, int64_t rank, const int64_t *sizes,
                 const char *src, const int64_t *srcStrides, char *dst,
                 const int64_t *dstStrides) {
  if (rank == 0) {
    std::memcpy(dst, src, static_cast<size_t>(elemSize));
    return;
  }
  for (int64_t i = 0; i < sizes[0]; ++i)
    copyStrided(elemSize, rank - 1, sizes + 1,
                src + i * srcStrides[0] * elemSize, srcStrides + 1,
                dst + i * dstStrides[0] * elemSize, dstStrides + 1);
}

struct UnrankedMemRef {
  int64_t rank;
  void *descriptor;
};

} // namespace

extern "C" {

/// memref.copy between layouts that are not both contiguous lowers to this
/// call (the same contract as MLIR's C runner utilities, which artifacts do
/// not depend on).
void memrefCopy(int64_t elemSize, UnrankedMemRef *src, UnrankedMemRef *dst) {
  // Ranked descriptor: allocated, aligned, offset, sizes[rank], strides[rank].
  struct Header {
    char *allocated;
    char *aligned;
    int64_t offset;
  };
  auto *s = static_cast<Header *>(src->descriptor);
  auto *d = static_cast<Header *>(dst->descriptor);
  const int64_t *sizes = reinterpret_cast<const int64_t *>(s + 1);
  const int64_t *srcStrides = sizes + src->rank;
  const int64_t *dstStrides =
      reinterpret_cast<const int64_t *>(d + 1) + dst->rank;
  copyStrided(elemSize, src->rank, sizes, s->aligned + s->offset * elemSize,
              srcStrides, d->aligned + d->offset * elemSize, dstStrides);
}

void _mlir_ciface_shardx_rt_matmul_f32(MemRef<float, 2> *a, MemRef<float, 2> *b,
                                       MemRef<float, 2> *c,
                                       int32_t accumulate) {
  matmul(a, b, c, accumulate);
}
void _mlir_ciface_shardx_rt_matmul_f64(MemRef<double, 2> *a,
                                       MemRef<double, 2> *b,
                                       MemRef<double, 2> *c,
                                       int32_t accumulate) {
  matmul(a, b, c, accumulate);
}
void _mlir_ciface_shardx_rt_batch_matmul_f32(MemRef<float, 3> *a,
                                             MemRef<float, 3> *b,
                                             MemRef<float, 3> *c,
                                             int32_t accumulate) {
  matmul(a, b, c, accumulate);
}
void _mlir_ciface_shardx_rt_batch_matmul_f64(MemRef<double, 3> *a,
                                             MemRef<double, 3> *b,
                                             MemRef<double, 3> *c,
                                             int32_t accumulate) {
  matmul(a, b, c, accumulate);
}

} // extern "C"
