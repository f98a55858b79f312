/*===- CApi.h - The runtime's stable C ABI ------------------------*- C -*-===*\
|*                                                                            *|
|* Part of ShardX.                                                            *|
|*                                                                            *|
|* What compiled programs call: rank queries, collectives on a communicator  *|
|* handle, and GEMMs (OpenBLAS on CPU). Every call returns 0 on success and   *|
|* non-zero on failure; shardx_rt_last_error() then says why. Arrays are     *|
|* row-major; counts, axes and pairs are int64 arrays with their length.     *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/

#ifndef SHARDX_RUNTIME_CAPI_H
#define SHARDX_RUNTIME_CAPI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One rank's communicator (owned by the runtime that created it). */
typedef struct shardx_rt_comm shardx_rt_comm;

/* bf16 and f16 reduce by accumulating in f32. */
enum { SHARDX_RT_F32 = 0, SHARDX_RT_F64 = 1, SHARDX_RT_I32 = 2,
       SHARDX_RT_I64 = 3, SHARDX_RT_BF16 = 4, SHARDX_RT_F16 = 5 };
enum { SHARDX_RT_SUM = 0, SHARDX_RT_AVG = 1, SHARDX_RT_MAX = 2,
       SHARDX_RT_MIN = 3, SHARDX_RT_PROD = 4 };

int64_t shardx_rt_rank(const shardx_rt_comm *comm);
int64_t shardx_rt_size(const shardx_rt_comm *comm);
/* This rank's index in its group over `axes` (shardx.axis_index). */
int64_t shardx_rt_axis_index(const shardx_rt_comm *comm, const int64_t *axes,
                             int64_t num_axes);
/* The message of the last failed call on this communicator ("" if none). */
const char *shardx_rt_last_error(const shardx_rt_comm *comm);

int shardx_rt_all_gather(shardx_rt_comm *comm, const void *send, void *recv,
                         const int64_t *counts, int64_t num_counts,
                         int32_t dtype, const int64_t *axes, int64_t num_axes);
int shardx_rt_reduce_scatter(shardx_rt_comm *comm, const void *send,
                             void *recv, const int64_t *counts,
                             int64_t num_counts, int32_t dtype,
                             int32_t reduce, const int64_t *axes,
                             int64_t num_axes);
int shardx_rt_all_reduce(shardx_rt_comm *comm, const void *send, void *recv,
                         int64_t count, int32_t dtype, int32_t reduce,
                         const int64_t *axes, int64_t num_axes);
int shardx_rt_all_to_all(shardx_rt_comm *comm, const void *send,
                         const int64_t *send_counts, void *recv,
                         const int64_t *recv_counts, int64_t num_counts,
                         int32_t dtype, const int64_t *axes, int64_t num_axes);
/* pairs: num_pairs (source, target) group indices, flattened. */
int shardx_rt_permute(shardx_rt_comm *comm, const void *send, void *recv,
                      int64_t count, int32_t dtype, const int64_t *pairs,
                      int64_t num_pairs, const int64_t *axes,
                      int64_t num_axes);
int shardx_rt_broadcast(shardx_rt_comm *comm, void *buffer, int64_t count,
                        int32_t dtype, int64_t root, const int64_t *axes,
                        int64_t num_axes);
int shardx_rt_barrier(shardx_rt_comm *comm, const int64_t *axes,
                      int64_t num_axes);

/* Asynchronous all_reduce: starts it and sets *request; send and recv stay
 * untouched until shardx_rt_wait(comm, *request) returns. Every rank starts
 * its collectives in the same order as its synchronous ones. */
int shardx_rt_all_reduce_start(shardx_rt_comm *comm, const void *send,
                               void *recv, int64_t count, int32_t dtype,
                               int32_t reduce, const int64_t *axes,
                               int64_t num_axes, int64_t *request);
/* The same for all_gather and reduce_scatter (counts as in the blocking
 * forms; copied at the start). */
int shardx_rt_all_gather_start(shardx_rt_comm *comm, const void *send,
                               void *recv, const int64_t *counts,
                               int64_t num_counts, int32_t dtype,
                               const int64_t *axes, int64_t num_axes,
                               int64_t *request);
int shardx_rt_reduce_scatter_start(shardx_rt_comm *comm, const void *send,
                                   void *recv, const int64_t *counts,
                                   int64_t num_counts, int32_t dtype,
                                   int32_t reduce, const int64_t *axes,
                                   int64_t num_axes, int64_t *request);
int shardx_rt_wait(shardx_rt_comm *comm, int64_t request);
/* Seconds this rank's compiled programs spent blocked in collectives and
 * waits since the communicator was made (exposed communication). */
double shardx_rt_wait_seconds(const shardx_rt_comm *comm);

/* C[m x n] = alpha * op(A) * op(B) + beta * C, row-major; op transposes
 * when trans_* is non-zero. Batched forms step A, B and C by their
 * strides (in elements) `batch` times. */
int shardx_rt_sgemm(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n,
                    int64_t k, float alpha, const float *a, int64_t lda,
                    const float *b, int64_t ldb, float beta, float *c,
                    int64_t ldc);
int shardx_rt_dgemm(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n,
                    int64_t k, double alpha, const double *a, int64_t lda,
                    const double *b, int64_t ldb, double beta, double *c,
                    int64_t ldc);
int shardx_rt_sgemm_batched(int64_t batch, int32_t trans_a, int32_t trans_b,
                            int64_t m, int64_t n, int64_t k, float alpha,
                            const float *a, int64_t lda, int64_t stride_a,
                            const float *b, int64_t ldb, int64_t stride_b,
                            float beta, float *c, int64_t ldc,
                            int64_t stride_c);
int shardx_rt_dgemm_batched(int64_t batch, int32_t trans_a, int32_t trans_b,
                            int64_t m, int64_t n, int64_t k, double alpha,
                            const double *a, int64_t lda, int64_t stride_a,
                            const double *b, int64_t ldb, int64_t stride_b,
                            double beta, double *c, int64_t ldc,
                            int64_t stride_c);

/* Runs a compiled entry point `entry(args)` (see docs/Compiler.md) on
 * communicator `comm` for the calling thread. Returns 0, or non-zero with
 * "rank R: cause" in `error` when a collective of the program failed (the
 * world is then aborted, so no rank waits for this one). */
int shardx_rt_invoke(void (*entry)(void **), void **args, shardx_rt_comm *comm,
                     char *error, int64_t error_size);

/* Sets how many threads each BLAS call of this process may use (OpenBLAS's
 * setting is per process, shared by every rank it runs) and returns the
 * previous count. Launchers call it with cores / ranks per machine. */
int shardx_rt_set_compute_threads(int threads);

/* Buffers of CPU programs (lib/Runtime/cpu/BufferCache.cpp, in
 * ShardXRuntimeBlas): the generated code allocates and frees every buffer
 * with MLIR's `_mlir_memref_to_llvm_alloc` / `_aligned_alloc` / `_free`,
 * which keep freed blocks of 1 MiB or more for the next allocation of about
 * their size, up to SHARDX_BUFFER_CACHE_MB (default 2048; 0 disables the
 * cache). Every buffer is a malloc block, so free() releases it too.
 * `shardx_rt_host_free` frees a buffer the program returned (into the
 * cache); `_cache_trim` frees the cached blocks; `_cached_bytes` is their
 * usable size; `_cache_set_limit` replaces the bound (blocks already cached
 * stay). */
void shardx_rt_host_free(void *ptr);
void shardx_rt_host_cache_trim(void);
uint64_t shardx_rt_host_cached_bytes(void);
void shardx_rt_host_cache_set_limit(uint64_t bytes);

/* The same functions count, per thread, the usable bytes of the program
 * buffers alive and their high-water mark (docs/Memory.md). `_mem_reset`
 * zeroes the counts; `_mem_peaks` returns how many threads allocated since,
 * writing the first `n` peaks and live counts (either may be null) in the
 * order the threads first allocated. */
void shardx_rt_host_mem_reset(void);
int64_t shardx_rt_host_mem_peaks(int64_t *peaks, int64_t *live, int64_t n);

#ifdef __cplusplus
} /* extern "C" */

#include "shardx/Runtime/Communicator.h"

namespace shardx::rt {
/// The C handle of `comm` (valid while `comm` lives; owned by `comm`).
shardx_rt_comm *getCHandle(Communicator &comm);
} // namespace shardx::rt
#endif

#endif /* SHARDX_RUNTIME_CAPI_H */
