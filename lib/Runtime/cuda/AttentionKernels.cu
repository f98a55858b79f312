//===- AttentionKernels.cu - Fused attention on tensor cores --------------===//
//
// Part of ShardX.
//
// Compiled to PTX by nvcc at build time and embedded in the CUDA runtime
// (Attention.cpp loads it with cuModuleLoadData and launches on the calling
// thread's stream). Flash-style attention: the scores of a tile of queries
// and a tile of keys are computed, used and dropped, never stored in global
// memory. Every product runs on the tensor cores (nvcuda::wmma 16x16x16,
// operands of the 16-bit type T, bf16 or f16, f32 accumulators); every
// operand is rounded to T once (round to nearest even) and everything else
// is f32. One kernel per pass, type and head width D (32, 64, 128):
//
//   shardx_attention_fwd_<t>_<D>   out, lse            grid (B*H, Sq/64)
//   shardx_attention_dq_<t>_<D>    dq                  grid (B*H, Sq/64)
//   shardx_attention_dkv_<t>_<D>   dk, dv              grid (B*Hk, Sk/64)
//   shardx_attention_delta         delta = rowsum(dout * out), f32
//
// A block is 4 warps; each warp owns 16 rows of the block's 64 (queries, or
// keys for dkv) and loops over tiles of the other side (kTile(D) rows).
// Elementwise work on a 16 x tile block of scores goes through shared
// memory: two lanes per row, each half the columns.
//
// The forward is two passes over the keys: the first finds each row's max
// m and sum l of exp(s - m) (online, f32), the second computes
// p = exp(s - lse), lse = m + log(l), rounds it to T and accumulates P V.
// So P is normalized before it is rounded, exactly the reference's
// r(p_ij) (a one-pass kernel rounds exp(s - m_running) and rescales, which
// differs from it by up to an ulp of T per term), for a third more tensor
// work than a one-pass kernel. The backward recomputes P the same way.
//
// Causal masking (key j hidden from query i when kpos[j] > qpos[i]) is per
// element; a tile wholly hidden from the block's rows is skipped. A row
// that sees no key gets out 0, lse -inf and no gradient.
//
//===----------------------------------------------------------------------===//

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <mma.h>
#include <stdint.h>

#include "AttentionLayout.h"


namespace shardx_attention {

using namespace nvcuda;

// Per-row loops over a tile's rows (at most kRows, AttentionLayout.h) are
// one `if (threadIdx.x < rows)`: a thread per row.
constexpr float kNegInf = -__builtin_huge_valf();


extern __shared__ __align__(128) unsigned char smem[];

template <typename T> __device__ __forceinline__ T toT(float x);
template <> __device__ __forceinline__ __nv_bfloat16 toT(float x) {
  return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half toT(float x) {
  return __float2half_rn(x);
}

template <typename T>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <typename T>
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// Traps when the launch gave less dynamic shared memory than `bytes`.
__device__ __forceinline__ void requireSmem(unsigned bytes) {
#if defined(__CUDA_ARCH__)
  unsigned given;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(given));
  if (given < bytes)
    __trap();
#endif
}

/// Four elements of T, stored at once.
template <typename T> struct alignas(8) Quad { T e[4]; };

/// Rows [r0, r0 + R) of the [rows, D] f32 matrix `src` into `dst` (rows
/// of D + 8) as T; rows past `rows` are zero. Four elements a load where
/// `src` is 16-byte aligned, else one (a descriptor's offset may be any:
/// the slow path, not unrolled, to keep the PTX small).
template <typename T, int D, int R>
__device__ __noinline__ void loadRows(T *dst, const float *src, long long r0,
                                      long long rows) {
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0) {
#pragma unroll 4
    for (int e = threadIdx.x; e < R * D / 4; e += kThreads) {
      int r = e / (D / 4), c = e % (D / 4) * 4;
      float4 x = r0 + r < rows
                     ? *reinterpret_cast<const float4 *>(src + (r0 + r) * D + c)
                     : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<Quad<T> *>(dst + r * (D + 8) + c) =
          Quad<T>{{toT<T>(x.x), toT<T>(x.y), toT<T>(x.z), toT<T>(x.w)}};
    }
    return;
  }
#pragma unroll 1
  for (int e = threadIdx.x; e < R * D; e += kThreads) {
    int r = e / D, c = e % D;
    float x = r0 + r < rows ? src[(r0 + r) * D + c] : 0.f;
    dst[r * (D + 8) + c] = toT<T>(x);
  }
}

/// The key/value head (`b * Hk + hk`) that query head `bh` (`b * H + h`)
/// reads: grouped-query attention's `h / (H / Hk)`.
__device__ __forceinline__ long long kvHeadOf(const AttentionArgs &a,
                                              long long bh) {
  const long long H = a.heads, G = H / a.kvHeads;
  return bh / H * a.kvHeads + bh % H / G;
}

/// The least (`least`) or greatest position of pos[from, to), the same in
/// every lane (each lane scans every 32nd; the warp combines).
__device__ __noinline__ long long
extremePos(const long long *pos, long long from, long long to, bool least) {
  long long e = least ? LLONG_MAX : LLONG_MIN;
  for (long long j = from + threadIdx.x % 32; j < to; j += 32)
    e = least ? min(e, pos[j]) : max(e, pos[j]);
  for (int o = 16; o > 0; o /= 2) {
    long long other = __shfl_xor_sync(0xffffffffu, e, o);
    e = least ? min(e, other) : max(e, other);
  }
  return e;
}

/// s (16 x N f32, row stride lds) = a (16 x D) b^T, b N rows of D; a and b
/// rows of D + 8.
template <typename T, int D, int N>
__device__ __noinline__ void scores(const T *a, const T *b, float *s, int lds) {
#pragma unroll 1
  for (int n = 0; n < N / 16; ++n) {
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA<T> fa;
      FragBCol<T> fb;
      wmma::load_matrix_sync(fa, a + kk * 16, D + 8);
      wmma::load_matrix_sync(fb, b + n * 16 * (D + 8) + kk * 16, D + 8);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(s + n * 16, acc, lds, wmma::mem_row_major);
  }
}

/// acc (16 x D, D/16 fragments) += a (16 x K, row stride lda) b, b K rows
/// of D (rows of D + 8).
template <typename T, int D, int K>
__device__ void accumulate(FragC *acc, const T *a, int lda, const T *b) {
#pragma unroll 1
  for (int kk = 0; kk < K / 16; ++kk) {
    FragA<T> fa;
    wmma::load_matrix_sync(fa, a + kk * 16, lda);
    for (int n = 0; n < D / 16; ++n) {
      FragBRow<T> fb;
      wmma::load_matrix_sync(fb, b + kk * 16 * (D + 8) + n * 16, D + 8);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

/// The warp's staged 16 x D result (`stage`, rows of D + 4 f32) times
/// `scale` into rows [row0, row0 + 16) of the [rows, D] matrix `dst` (rows
/// past `rows` dropped). Not inlined: one copy per width in the module.
template <int D>
__device__ __noinline__ void copyStaged(const float *stage, float *dst,
                                        long long row0, long long rows,
                                        float scale) {
  const int lane = threadIdx.x % 32;
  __syncwarp();
#pragma unroll 4
  for (int e = lane; e < 16 * D; e += 32) {
    int r = e / D, c = e % D;
    if (row0 + r < rows)
      dst[(row0 + r) * D + c] = stage[r * (D + 4) + c] * scale;
  }
  __syncwarp();
}

/// The warp's 16 x D result `acc` into rows [row0, row0 + 16) of the
/// [rows, D] matrix `dst` (rows past `rows` dropped), through `stage`
/// (16 rows of D + 4 f32).
template <int D>
__device__ void storeRows(const FragC *acc, float *stage, float *dst,
                          long long row0, long long rows) {
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(stage + n * 16, acc[n], D + 4, wmma::mem_row_major);
  copyStaged<D>(stage, dst, row0, rows, 1.f);
}

/// pos[j0 + t] for t < R (0 past `count`), into `dst`.
template <int R>
__device__ void loadPos(long long *dst, const long long *pos, long long j0,
                        long long count) {
  if (int t = threadIdx.x; t < R)
    dst[t] = j0 + t < count ? pos[j0 + t] : 0;
}

//===----------------------------------------------------------------------===//
// Forward: out, lse
//===----------------------------------------------------------------------===//

template <typename T, int D> __device__ void forward(const AttentionArgs &a) {
  constexpr int BK = kTile(D), LdT = D + 8, LdS = BK + 4, LdP = BK + 8;
  static_assert(kRows * (D + 4) * 4 <= (kRows + 2 * BK) * LdT * 2,
                "the output staging fits in the Q, K and V tiles");
  T *qs = reinterpret_cast<T *>(smem);
  T *ks = qs + kRows * LdT;
  T *vs = ks + BK * LdT;
  float *ss = reinterpret_cast<float *>(vs + BK * LdT);
  T *ps = reinterpret_cast<T *>(ss + kRows * LdS);
  long long *kp = reinterpret_cast<long long *>(ps + kRows * LdP);
  requireSmem(fwdSmem(D));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, c0 = (lane % 2) * (BK / 2);
  const long long Sq = a.queries, Sk = a.keys, bh = blockIdx.x;
  const long long kvh = kvHeadOf(a, bh);
  const long long q0 = (long long)blockIdx.y * kRows;
  const float *k = a.k + kvh * Sk * D, *v = a.v + kvh * Sk * D;
  loadRows<T, D, kRows>(qs, a.q + bh * Sq * D, q0, Sq);

  // This lane's row, and the block's last query position.
  const long long i = q0 + warp * 16 + r;
  const long long qp = a.causal && i < Sq ? a.qpos[i] : 0;
  const long long lastQ =
      a.causal ? extremePos(a.qpos, q0, min(q0 + kRows, Sq), false) : 0;
  const T *qw = qs + warp * 16 * LdT;
  float *sw = ss + warp * 16 * LdS;
  T *pw = ps + warp * 16 * LdP;

  // The masked, scaled score of this lane's row and tile column c.
  auto score = [&](long long k0, int c) {
    bool keep = k0 + c < Sk && !(a.causal && kp[c] > qp);
    return keep ? sw[r * LdS + c] * a.scale : kNegInf;
  };

  // Pass 1: m and l.
  float m = kNegInf, l = 0.f;
  for (long long k0 = 0; k0 < Sk; k0 += BK) {
    if (a.causal && extremePos(a.kpos, k0, min(k0 + BK, Sk), true) > lastQ)
      continue;
    __syncthreads();
    loadRows<T, D, BK>(ks, k, k0, Sk);
    loadPos<BK>(kp, a.kpos, k0, a.causal ? Sk : 0);
    __syncthreads();
    scores<T, D, BK>(qw, ks, sw, LdS);
    __syncwarp();
    float tileMax = kNegInf;
#pragma unroll 4
    for (int c = c0; c < c0 + BK / 2; ++c)
      tileMax = fmaxf(tileMax, score(k0, c));
    tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 1));
    float mNew = fmaxf(m, tileMax);
    // While the row has seen no key, every term is exp(-inf) = 0.
    float base = mNew == kNegInf ? 0.f : mNew;
    float sum = 0.f;
#pragma unroll 4
    for (int c = c0; c < c0 + BK / 2; ++c)
      sum += __expf(score(k0, c) - base);
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * __expf(m - base) + sum;
    m = mNew;
    __syncwarp();
  }
  const float rowLse = m == kNegInf ? kNegInf : m + logf(l);

  // Pass 2: out = r(exp(s - lse)) V.
  FragC o[D / 16];
  for (int n = 0; n < D / 16; ++n)
    wmma::fill_fragment(o[n], 0.f);
  for (long long k0 = 0; k0 < Sk; k0 += BK) {
    if (a.causal && extremePos(a.kpos, k0, min(k0 + BK, Sk), true) > lastQ)
      continue;
    __syncthreads();
    loadRows<T, D, BK>(ks, k, k0, Sk);
    loadRows<T, D, BK>(vs, v, k0, Sk);
    loadPos<BK>(kp, a.kpos, k0, a.causal ? Sk : 0);
    __syncthreads();
    scores<T, D, BK>(qw, ks, sw, LdS);
    __syncwarp();
#pragma unroll 4
    for (int c = c0; c < c0 + BK / 2; ++c) {
      float s = score(k0, c);
      pw[r * LdP + c] = toT<T>(s == kNegInf ? 0.f : __expf(s - rowLse));
    }
    __syncwarp();
    accumulate<T, D, BK>(o, pw, LdP, vs);
  }

  // The tiles are no longer read: the output is staged over them.
  __syncthreads();
  float *stage = reinterpret_cast<float *>(smem) + warp * 16 * (D + 4);
  storeRows<D>(o, stage, a.outW + bh * Sq * D, q0 + warp * 16, Sq);
  if (lane % 2 == 0 && i < Sq)
    a.lseW[bh * Sq + i] = rowLse;
}

//===----------------------------------------------------------------------===//
// Backward: delta, dq, dk and dv
//===----------------------------------------------------------------------===//

/// delta[row] = sum_d dout[row, d] out[row, d] for the B*H*Sq rows, a warp
/// per row.
__device__ void delta(const AttentionArgs &a) {
  const long long rows = a.batch * a.heads * a.queries, D = a.width;
  const long long row =
      (long long)blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  float sum = 0.f;
  for (long long d = lane; d < D; d += 32)
    sum += a.dout[row * D + d] * a.out[row * D + d];
  for (int o = 16; o > 0; o /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0)
    a.delta[row] = sum;
}

/// dq = scale * r(ds) K, ds = p (dp - delta), p = exp(s - lse),
/// dp = r(dout) r(v)^T; delta of each row computed here.
template <typename T, int D> __device__ void gradQ(const AttentionArgs &a) {
  constexpr int BK = kTile(D), LdT = D + 8, LdS = BK + 4, LdP = BK + 8;
  T *qs = reinterpret_cast<T *>(smem);
  T *dos = qs + kRows * LdT;
  T *ks = dos + kRows * LdT;
  T *vs = ks + BK * LdT;
  float *ss = reinterpret_cast<float *>(vs + BK * LdT);
  float *dps = ss + kRows * LdS;
  T *dss = reinterpret_cast<T *>(dps + kRows * LdS);
  long long *kp = reinterpret_cast<long long *>(dss + kRows * LdP);
  requireSmem(dqSmem(D));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, c0 = (lane % 2) * (BK / 2);
  const long long Sq = a.queries, Sk = a.keys, bh = blockIdx.x;
  const long long kvh = kvHeadOf(a, bh);
  const long long q0 = (long long)blockIdx.y * kRows;
  const float *k = a.k + kvh * Sk * D, *v = a.v + kvh * Sk * D;
  loadRows<T, D, kRows>(qs, a.q + bh * Sq * D, q0, Sq);
  loadRows<T, D, kRows>(dos, a.dout + bh * Sq * D, q0, Sq);

  // This lane's row: its lse, delta and position.
  const long long i = q0 + warp * 16 + r;
  const float rowLse = i < Sq ? a.lse[bh * Sq + i] : kNegInf;
  float rowDelta = 0.f;
  if (i < Sq)
    for (int d = (lane % 2) * (D / 2); d < (lane % 2 + 1) * (D / 2); ++d)
      rowDelta += a.dout[(bh * Sq + i) * D + d] * a.out[(bh * Sq + i) * D + d];
  rowDelta += __shfl_xor_sync(0xffffffffu, rowDelta, 1);
  const long long qp = a.causal && i < Sq ? a.qpos[i] : 0;
  const long long lastQ =
      a.causal ? extremePos(a.qpos, q0, min(q0 + kRows, Sq), false) : 0;
  const T *qw = qs + warp * 16 * LdT, *dow = dos + warp * 16 * LdT;
  float *sw = ss + warp * 16 * LdS, *dpw = dps + warp * 16 * LdS;
  T *dsw = dss + warp * 16 * LdP;

  FragC dq[D / 16];
  for (int n = 0; n < D / 16; ++n)
    wmma::fill_fragment(dq[n], 0.f);
  for (long long k0 = 0; k0 < Sk; k0 += BK) {
    if (a.causal && extremePos(a.kpos, k0, min(k0 + BK, Sk), true) > lastQ)
      continue;
    __syncthreads();
    loadRows<T, D, BK>(ks, k, k0, Sk);
    loadRows<T, D, BK>(vs, v, k0, Sk);
    loadPos<BK>(kp, a.kpos, k0, a.causal ? Sk : 0);
    __syncthreads();
    scores<T, D, BK>(qw, ks, sw, LdS);
    scores<T, D, BK>(dow, vs, dpw, LdS);
    __syncwarp();
#pragma unroll 4
    for (int c = c0; c < c0 + BK / 2; ++c) {
      bool keep = k0 + c < Sk && !(a.causal && kp[c] > qp) && rowLse != kNegInf;
      float p = keep ? __expf(sw[r * LdS + c] * a.scale - rowLse) : 0.f;
      dsw[r * LdP + c] = toT<T>(p * (dpw[r * LdS + c] - rowDelta));
    }
    __syncwarp();
    accumulate<T, D, BK>(dq, dsw, LdP, ks);
  }
  for (int n = 0; n < D / 16; ++n)
    for (int t = 0; t < dq[n].num_elements; ++t)
      dq[n].x[t] *= a.scale;

  __syncthreads();
  float *stage = reinterpret_cast<float *>(smem) + warp * 16 * (D + 4);
  storeRows<D>(dq, stage, a.dq + bh * Sq * D, q0 + warp * 16, Sq);
}

/// dk = scale * sum r(ds)^T Q and dv = sum r(p)^T dO over the query heads of
/// the block's key/value head and their queries: each warp owns 16 keys and
/// works on transposed tiles (keys x queries).
template <typename T, int D> __device__ void gradKV(const AttentionArgs &a) {
  constexpr int BQ = kTile(D), LdT = D + 8, LdS = BQ + 4, LdP = BQ + 8;
  static_assert(kRows * (D + 4) * 4 <= 2 * kRows * LdT * 2,
                "the output staging fits in the K and V tiles");
  T *ks = reinterpret_cast<T *>(smem);
  T *vs = ks + kRows * LdT;
  T *qs = vs + kRows * LdT;
  T *dos = qs + BQ * LdT;
  float *sts = reinterpret_cast<float *>(dos + BQ * LdT);
  float *dpts = sts + kRows * LdS;
  T *pts = reinterpret_cast<T *>(dpts + kRows * LdS);
  T *dsts = pts + kRows * LdP;
  float *lses = reinterpret_cast<float *>(dsts + kRows * LdP);
  float *deltas = lses + BQ;
  long long *qps = reinterpret_cast<long long *>(deltas + BQ);
  requireSmem(dkvSmem(D));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = lane / 2, c0 = (lane % 2) * (BQ / 2);
  const long long H = a.heads, Hk = a.kvHeads, G = H / Hk, Sq = a.queries,
                  Sk = a.keys;
  const long long kvh = blockIdx.x, b = kvh / Hk, hk = kvh % Hk;
  const long long k0 = (long long)blockIdx.y * kRows;
  loadRows<T, D, kRows>(ks, a.k + kvh * Sk * D, k0, Sk);
  loadRows<T, D, kRows>(vs, a.v + kvh * Sk * D, k0, Sk);

  // This lane's key, and the block's first key position.
  const long long j = k0 + warp * 16 + r;
  const long long kp = a.causal && j < Sk ? a.kpos[j] : 0;
  const long long firstK =
      a.causal ? extremePos(a.kpos, k0, min(k0 + kRows, Sk), true) : 0;
  const T *kw = ks + warp * 16 * LdT, *vw = vs + warp * 16 * LdT;
  float *stw = sts + warp * 16 * LdS, *dptw = dpts + warp * 16 * LdS;
  T *ptw = pts + warp * 16 * LdP, *dstw = dsts + warp * 16 * LdP;

  FragC dk[D / 16], dv[D / 16];
  for (int n = 0; n < D / 16; ++n) {
    wmma::fill_fragment(dk[n], 0.f);
    wmma::fill_fragment(dv[n], 0.f);
  }
  for (long long g = 0; g < G; ++g) {
    const long long bh = b * H + hk * G + g;
    for (long long q0 = 0; q0 < Sq; q0 += BQ) {
      if (a.causal && extremePos(a.qpos, q0, min(q0 + BQ, Sq), false) < firstK)
        continue;
      __syncthreads();
      loadRows<T, D, BQ>(qs, a.q + bh * Sq * D, q0, Sq);
      loadRows<T, D, BQ>(dos, a.dout + bh * Sq * D, q0, Sq);
      if (int t = threadIdx.x; t < BQ) {
        bool in = q0 + t < Sq;
        lses[t] = in ? a.lse[bh * Sq + q0 + t] : kNegInf;
        deltas[t] = in ? a.delta[bh * Sq + q0 + t] : 0.f;
        qps[t] = in && a.causal ? a.qpos[q0 + t] : 0;
      }
      __syncthreads();
      scores<T, D, BQ>(kw, qs, stw, LdS);
      scores<T, D, BQ>(vw, dos, dptw, LdS);
      __syncwarp();
#pragma unroll 4
      for (int c = c0; c < c0 + BQ / 2; ++c) {
        bool keep = j < Sk && lses[c] != kNegInf && !(a.causal && kp > qps[c]);
        float p = keep ? __expf(stw[r * LdS + c] * a.scale - lses[c]) : 0.f;
        ptw[r * LdP + c] = toT<T>(p);
        dstw[r * LdP + c] = toT<T>(p * (dptw[r * LdS + c] - deltas[c]));
      }
      __syncwarp();
      accumulate<T, D, BQ>(dv, ptw, LdP, dos);
      accumulate<T, D, BQ>(dk, dstw, LdP, qs);
    }
  }
  for (int n = 0; n < D / 16; ++n)
    for (int t = 0; t < dk[n].num_elements; ++t)
      dk[n].x[t] *= a.scale;

  __syncthreads();
  float *stage = reinterpret_cast<float *>(smem) + warp * 16 * (D + 4);
  storeRows<D>(dk, stage, a.dk + kvh * Sk * D, k0 + warp * 16, Sk);
  storeRows<D>(dv, stage, a.dv + kvh * Sk * D, k0 + warp * 16, Sk);
}

} // namespace shardx_attention

//===----------------------------------------------------------------------===//
// v2: register-resident kernels (mma.sync m16n8k16, ldmatrix)
//===----------------------------------------------------------------------===//
//
// The same passes, with the products' operands and results in registers:
// fragments are loaded from the shared tiles with ldmatrix.x4 (.trans for
// an operand stored k-major), the scores are mma.sync m16n8k16 accumulators
// (f32), the softmax works on them in place (a row's four lanes combine
// with two xor shuffles), and P or dS becomes the A operand of the next
// product without leaving the registers (the accumulator layout of two
// adjacent 8-column tiles is the A layout of one 16-deep chunk). Fragment
// layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"): with g = lane/4
// and t = lane%4, A's registers hold (row g, k 2t..2t+1), (g+8, 2t..),
// (g, 2t+8..), (g+8, 2t+8..); B's (k 2t..2t+1, col g), (k 2t+8.., g); the
// accumulators (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1); the lower half
// of a register holds the lower index.
//
// The forward is one pass (FA2): P V takes r(exp(s - m)) for the running
// row max m, the accumulators are rescaled when m grows, and out = acc / l
// at the end (so out's terms differ from r(p) v by up to an ulp of T each;
// lse is the same). The backward rounds exactly as v1. A block is 4 warps
// of 16 rows; tiles of 64 keys (fwd, dq) or queries (dkv), 32 at D 128.
// The next tile's f32 rows are copied into a staging area with cp.async
// while the current tile is used, then rounded to T into the tiles.

namespace shardx_attention::v2 {


__device__ __forceinline__ unsigned short bitsOf(__nv_bfloat16 x) {
  return __bfloat16_as_ushort(x);
}
__device__ __forceinline__ unsigned short bitsOf(__half x) {
  return __half_as_ushort(x);
}
/// lo and hi rounded to T, packed (lo in the lower half).
template <typename T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  return uint32_t(bitsOf(toT<T>(lo))) | uint32_t(bitsOf(toT<T>(hi))) << 16;
}

template <typename T> struct IsBf16 { static constexpr bool value = false; };
template <> struct IsBf16<__nv_bfloat16> {
  static constexpr bool value = true;
};

/// c += a b (m16n8k16, f32 accumulators).
template <typename T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4],
                                    uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__)
  if constexpr (IsBf16<T>::value)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
  else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0),
                   "r"(b1));
#elif defined(SHARDX_ATTENTION_EMU)
  emuMma<T>(c, a, b0, b1);
#endif
}

/// ldmatrix.x4 (.trans when `Trans`): lane l gives the address of row l%8
/// of matrix l/8 (16-byte aligned), here as `off`, the byte offset of that
/// row in smem; register i gets matrix i's (row l/4, cols 2(l%4)..+1), or
/// with .trans its (rows 2(l%4)..+1, col l/4).
template <bool Trans>
__device__ __forceinline__ void ldsm(uint32_t (&r)[4], unsigned off) {
#if defined(__CUDA_ARCH__)
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem)) + off;
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
                 "{%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
                 "{%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
#elif defined(SHARDX_ATTENTION_EMU)
  emuLdmatrix(r, smem + off, Trans);
#endif
}

// Tiles of 16-bit elements are named by their element offset in smem
// (32-bit arithmetic; byte offset twice that) and their row stride ld.

/// A operand: rows [0, 16), cols [0, 16) of the row-major tile at p.
__device__ __forceinline__ void loadA(uint32_t (&a)[4], unsigned p, int ld) {
  const int l = threadIdx.x % 32, m = l / 8;
  ldsm<false>(a, 2 * (p + ((m % 2) * 8 + l % 8) * ld + (m / 2) * 8));
}

/// B operands of two 8-column tiles (b[0..1] columns 0-7, b[2..3] columns
/// 8-15), k [0, 16), from p stored n-major: p[n * ld + k].
__device__ __forceinline__ void loadBnk(uint32_t (&b)[4], unsigned p, int ld) {
  const int l = threadIdx.x % 32, m = l / 8;
  ldsm<false>(b, 2 * (p + ((m / 2) * 8 + l % 8) * ld + (m % 2) * 8));
}

/// The same from p stored k-major: p[k * ld + n].
__device__ __forceinline__ void loadBkn(uint32_t (&b)[4], unsigned p, int ld) {
  const int l = threadIdx.x % 32, m = l / 8;
  ldsm<true>(b, 2 * (p + ((m % 2) * 8 + l % 8) * ld + (m / 2) * 8));
}

/// acc (16 x N) += a (16 x K, row-major in shared memory) b^T, b N rows of
/// K (row-major); both row strides ld.
template <typename T, int K, int N>
__device__ __forceinline__ void productABt(float (&acc)[N / 8][4], unsigned a,
                                           unsigned b, int ld) {
  // Not unrolled over k from K 64 (the accumulators are indexed by n
  // only): less PTX.
#pragma unroll(K >= 64 ? 1 : K / 16)
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t af[4];
    loadA(af, a + kk * 16, ld);
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      uint32_t bf[4];
      loadBnk(bf, b + n * 16 * ld + kk * 16, ld);
      mma<T>(acc[2 * n], af, bf[0], bf[1]);
      mma<T>(acc[2 * n + 1], af, bf[2], bf[3]);
    }
  }
}

/// The accumulators s (16 x K) rounded to T as A operands of K/16 chunks.
template <typename T, int K>
__device__ __forceinline__ void toA(uint32_t (&p)[K / 16][4],
                                    const float (&s)[K / 8][4]) {
#pragma unroll
  for (int c = 0; c < K / 16; ++c) {
    p[c][0] = pack<T>(s[2 * c][0], s[2 * c][1]);
    p[c][1] = pack<T>(s[2 * c][2], s[2 * c][3]);
    p[c][2] = pack<T>(s[2 * c + 1][0], s[2 * c + 1][1]);
    p[c][3] = pack<T>(s[2 * c + 1][2], s[2 * c + 1][3]);
  }
}

/// acc (16 x N) += p (16 x K, A operands) b, b K rows of N (row-major,
/// stride ld).
template <typename T, int K, int N>
__device__ __forceinline__ void productPB(float (&acc)[N / 8][4],
                                          const uint32_t (&p)[K / 16][4],
                                          unsigned b, int ld) {
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk)
#pragma unroll
    for (int n = 0; n < N / 16; ++n) {
      uint32_t bf[4];
      loadBkn(bf, b + kk * 16 * ld + n * 16, ld);
      mma<T>(acc[2 * n], p[kk], bf[0], bf[1]);
      mma<T>(acc[2 * n + 1], p[kk], bf[2], bf[3]);
    }
}

/// loadRows, not inlined: one copy of each instantiation in the module,
/// called by every kernel that loads such tiles (the PTX stays smaller).
template <typename T, int D, int R>
__device__ __noinline__ void loadTile(T *dst, const float *src, long long r0,
                                      long long rows) {
  loadRows<T, D, R>(dst, src, r0, rows);
}

/// cp.async of N bytes (4, 8 or 16; src and dst aligned to N) from global
/// memory to shared memory; complete, for this thread, after cpAsyncWait.
template <int N>
__device__ __forceinline__ void cpAsync(void *dst, const void *src) {
#if defined(__CUDA_ARCH__)
  unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if constexpr (N == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src)
                 : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(d), "l"(src),
                 "n"(N)
                 : "memory");
#elif defined(SHARDX_ATTENTION_EMU)
  emuCpAsync(dst, src, N);
#endif
}

__device__ __forceinline__ void cpAsyncWait() {
#if defined(__CUDA_ARCH__)
  asm volatile("cp.async.wait_all;" ::: "memory");
#elif defined(SHARDX_ATTENTION_EMU)
  emuCpAsyncWait();
#endif
}

/// Starts copying rows [r0, r0 + R) of the [rows, D] f32 matrix src into
/// stage (R rows of D); rows past `rows` are not copied. 16 bytes a copy
/// where src is 16-byte aligned, else 4.
template <int D, int R>
__device__ __noinline__ void stageRows(float *stage, const float *src,
                                       long long r0, long long rows) {
  if (reinterpret_cast<uintptr_t>(src) % 16 == 0) {
#pragma unroll 4
    for (int e = threadIdx.x; e < R * D / 4; e += kThreads) {
      int r = e / (D / 4), c = e % (D / 4) * 4;
      if (r0 + r < rows)
        cpAsync<16>(stage + r * D + c, src + (r0 + r) * D + c);
    }
    return;
  }
#pragma unroll 1
  for (int e = threadIdx.x; e < R * D; e += kThreads) {
    int r = e / D, c = e % D;
    if (r0 + r < rows)
      cpAsync<4>(stage + e, src + (r0 + r) * D + c);
  }
}

/// The staged rows rounded to T into dst (rows of D + 8); rows past
/// `rows` (not staged) are zero.
template <typename T, int D, int R>
__device__ __noinline__ void convertRows(T *dst, const float *stage,
                                         long long r0, long long rows) {
#pragma unroll 4
  for (int e = threadIdx.x; e < R * D / 4; e += kThreads) {
    int r = e / (D / 4), c = e % (D / 4) * 4;
    float4 x = r0 + r < rows
                   ? *reinterpret_cast<const float4 *>(stage + r * D + c)
                   : make_float4(0.f, 0.f, 0.f, 0.f);
    *reinterpret_cast<Quad<T> *>(dst + r * (D + 8) + c) =
        Quad<T>{{toT<T>(x.x), toT<T>(x.y), toT<T>(x.z), toT<T>(x.w)}};
  }
}

/// Starts copying pos[k0 + t], t < R, into stage where k0 + t < count.
template <int R>
__device__ void stagePos(long long *stage, const long long *pos, long long k0,
                         long long count) {
  if (int t = threadIdx.x; t < R)
    if (k0 + t < count)
      cpAsync<8>(stage + t, pos + k0 + t);
}

/// The positions of keys [k0, k0 + R) for the mask "hidden when kp > qp":
/// kpos (staged) when causal, LLONG_MIN (never hidden) when not, LLONG_MAX
/// (always hidden) past `count` keys.
template <int R>
__device__ void keyPos(long long *dst, const long long *stage, long long k0,
                       long long count, bool causal) {
  if (int t = threadIdx.x; t < R)
    dst[t] = k0 + t >= count ? LLONG_MAX : causal ? stage[t] : LLONG_MIN;
}

/// The first tile x in [x, n) that the causal mask does not wholly hide,
/// n if none: tile x is rows [r0, r0 + R) of `count`, r0 = x % per * R;
/// key tiles (`keys`) are visible when their least position is at most
/// `bound` (the block's greatest query position), query tiles when their
/// greatest is at least `bound` (the block's least key position).
__device__ __noinline__ long long visibleTile(const long long *pos, long long x,
                                              long long n, long long per, int R,
                                              long long count, long long bound,
                                              bool keys) {
  for (; x < n; ++x) {
    long long r0 = x % per * R;
    long long e = extremePos(pos, r0, min(r0 + R, count), keys);
    if (keys ? e <= bound : e >= bound)
      return x;
  }
  return n;
}

/// The element offset of p (a tile in smem) from smem.
template <typename T> __device__ __forceinline__ unsigned at(const T *p) {
  return static_cast<unsigned>(p - reinterpret_cast<const T *>(smem));
}

template <int N> __device__ __forceinline__ void zero(float (&acc)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
    acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
}

/// The warp's accumulators (16 x D: rows g and g + 8 of each 8-column
/// tile) times `scale[half]` into `stage` (16 rows of D + 4 f32).
template <int D>
__device__ __forceinline__ void
stageAcc(const float (&acc)[D / 8][4], const float (&scale)[2], float *stage) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2 *>(stage + (g + 8 * h) * (D + 4) + n * 8 +
                                  2 * t) =
          make_float2(acc[n][2 * h] * scale[h], acc[n][2 * h + 1] * scale[h]);
}

/// Forward, one pass: out = (sum_j r(exp(s_j - m)) v_j) / l, lse = m +
/// log l.
template <typename T, int D> __device__ void forward(const AttentionArgs &a) {
  constexpr int BK = kTile2(D), Ld = D + 8;
  T *qs = reinterpret_cast<T *>(smem);
  T *ks = qs + kRows * Ld;
  T *vs = ks + BK * Ld;
  float *kst = reinterpret_cast<float *>(vs + BK * Ld);
  float *vst = kst + BK * D;
  long long *kp = reinterpret_cast<long long *>(vst + BK * D);
  long long *kpst = kp + BK;
  requireSmem(fwdSmem(D));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const long long Sq = a.queries, Sk = a.keys, bh = blockIdx.x;
  const long long kvh = kvHeadOf(a, bh);
  // The last query tiles (most keys when causal) first.
  const long long q0 = (long long)(gridDim.y - 1 - blockIdx.y) * kRows;
  const float *k = a.k + kvh * Sk * D, *v = a.v + kvh * Sk * D;
  const long long lastQ =
      a.causal ? extremePos(a.qpos, q0, min(q0 + kRows, Sq), false) : 0;
  // Key tiles x < nk: the first visible one from x on.
  const long long nk = (Sk + BK - 1) / BK;
  auto next = [&](long long x) {
    return a.causal ? visibleTile(a.kpos, x, nk, nk, BK, Sk, lastQ, true) : x;
  };

  const long long row0 = q0 + warp * 16;
  long long qp[2];
  for (int hf = 0; hf < 2; ++hf) {
    long long i = row0 + g + 8 * hf;
    qp[hf] = a.causal && i < Sq ? a.qpos[i] : 0;
  }
  const unsigned qw = at(qs + warp * 16 * Ld), kt = at(ks), vt = at(vs);

  float o[D / 8][4];
  zero(o);
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
  // Tile x is in ks, vs and kp (nk: none yet), tile xs in the staging (nk:
  // none left). Each step starts copying xs, uses x (the first step loads
  // the block's queries instead), then, once xs has arrived and every warp
  // is done with x, rounds xs into the tiles.
  for (long long x = nk, xs = next(0);; x = xs, xs = next(xs + 1)) {
    if (xs < nk) {
      stageRows<D, BK>(kst, k, xs * BK, Sk);
      stageRows<D, BK>(vst, v, xs * BK, Sk);
      stagePos<BK>(kpst, a.kpos, xs * BK, a.causal ? Sk : 0);
    }
    if (x == nk) {
      loadTile<T, D, kRows>(qs, a.q + bh * Sq * D, q0, Sq);
    } else {
      float s[BK / 8][4];
      zero(s);
      productABt<T, D, BK>(s, qw, kt, Ld);
      float mx[2] = {m[0], m[1]};
#pragma unroll
      for (int n = 0; n < BK / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int c = n * 8 + 2 * t + e % 2;
          s[n][e] = kp[c] > qp[e / 2] ? kNegInf : s[n][e] * a.scale;
          mx[e / 2] = fmaxf(mx[e / 2], s[n][e]);
        }
      float base[2], alpha[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 1));
        mx[hf] = fmaxf(mx[hf], __shfl_xor_sync(0xffffffffu, mx[hf], 2));
        // While the row has seen no key, every term is exp(-inf) = 0.
        base[hf] = mx[hf] == kNegInf ? 0.f : mx[hf];
        alpha[hf] = __expf(m[hf] - base[hf]);
        m[hf] = mx[hf];
        l[hf] *= alpha[hf];
      }
#pragma unroll
      for (int n = 0; n < BK / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[n][e] = __expf(s[n][e] - base[e / 2]);
          l[e / 2] += s[n][e];
        }
#pragma unroll
      for (int n = 0; n < D / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          o[n][e] *= alpha[e / 2];
      uint32_t p[BK / 16][4];
      toA<T, BK>(p, s);
      productPB<T, BK, D>(o, p, vt, Ld);
    }
    if (xs == nk)
      break;
    cpAsyncWait();
    __syncthreads();
    convertRows<T, D, BK>(ks, kst, xs * BK, Sk);
    convertRows<T, D, BK>(vs, vst, xs * BK, Sk);
    keyPos<BK>(kp, kpst, xs * BK, Sk, a.causal);
    __syncthreads();
  }

  float inv[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 1);
    l[hf] += __shfl_xor_sync(0xffffffffu, l[hf], 2);
    inv[hf] = m[hf] == kNegInf ? 0.f : 1.f / l[hf];
    long long i = row0 + g + 8 * hf;
    if (t == 0 && i < Sq)
      a.lseW[bh * Sq + i] = m[hf] == kNegInf ? kNegInf : m[hf] + logf(l[hf]);
  }
  // Every warp is done with the tiles (no copy is in flight): the output
  // is staged over them.
  static_assert(kRows * (D + 4) * 4 <= fwdSmem(D), "out staged");
  __syncthreads();
  float *stageW = reinterpret_cast<float *>(smem) + warp * 16 * (D + 4);
  stageAcc<D>(o, inv, stageW);
  copyStaged<D>(stageW, a.outW + bh * Sq * D, row0, Sq, 1.f);
}

/// dq = scale * sum_j r(ds_ij) k_j, ds = p (dp - delta), p = exp(s - lse),
/// dp = r(dout) r(v)^T; delta of each row computed here.
template <typename T, int D> __device__ void gradQ(const AttentionArgs &a) {
  constexpr int BK = kTile2(D), Ld = D + 8;
  T *qs = reinterpret_cast<T *>(smem);
  T *dos = qs + kRows * Ld;
  T *ks = dos + kRows * Ld;
  T *vs = ks + BK * Ld;
  float *kst = reinterpret_cast<float *>(vs + BK * Ld);
  float *vst = kst + BK * D;
  long long *kp = reinterpret_cast<long long *>(vst + BK * D);
  long long *kpst = kp + BK;
  requireSmem(dqSmem(D));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const long long Sq = a.queries, Sk = a.keys, bh = blockIdx.x;
  const long long kvh = kvHeadOf(a, bh);
  const long long q0 = (long long)(gridDim.y - 1 - blockIdx.y) * kRows;
  const float *k = a.k + kvh * Sk * D, *v = a.v + kvh * Sk * D;
  const long long lastQ =
      a.causal ? extremePos(a.qpos, q0, min(q0 + kRows, Sq), false) : 0;
  const long long nk = (Sk + BK - 1) / BK;
  auto next = [&](long long x) {
    return a.causal ? visibleTile(a.kpos, x, nk, nk, BK, Sk, lastQ, true) : x;
  };

  // This lane's rows (g, g + 8): lse, delta (the row's four lanes each sum
  // a quarter) and position.
  const long long row0 = q0 + warp * 16;
  float rowLse[2], rowDelta[2];
  long long qp[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    long long i = row0 + g + 8 * hf;
    // A row that sees no key (lse -inf) gets p = exp(s - inf) = 0.
    rowLse[hf] = i < Sq ? a.lse[bh * Sq + i] : kNegInf;
    if (rowLse[hf] == kNegInf)
      rowLse[hf] = -kNegInf;
    qp[hf] = a.causal && i < Sq ? a.qpos[i] : 0;
    float sum = 0.f;
    if (i < Sq) {
      const float *x = a.dout + (bh * Sq + i) * D,
                  *y = a.out + (bh * Sq + i) * D;
#pragma unroll 4
      for (int d = t * (D / 4); d < (t + 1) * (D / 4); ++d)
        sum += x[d] * y[d];
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    rowDelta[hf] = sum;
  }
  const unsigned qw = at(qs + warp * 16 * Ld), dow = at(dos + warp * 16 * Ld),
                 kt = at(ks), vt = at(vs);

  float dq[D / 8][4];
  zero(dq);
  // As in the forward.
  for (long long x = nk, xs = next(0);; x = xs, xs = next(xs + 1)) {
    if (xs < nk) {
      stageRows<D, BK>(kst, k, xs * BK, Sk);
      stageRows<D, BK>(vst, v, xs * BK, Sk);
      stagePos<BK>(kpst, a.kpos, xs * BK, a.causal ? Sk : 0);
    }
    if (x == nk) {
      loadTile<T, D, kRows>(qs, a.q + bh * Sq * D, q0, Sq);
      loadTile<T, D, kRows>(dos, a.dout + bh * Sq * D, q0, Sq);
    } else {
      float s[BK / 8][4], dp[BK / 8][4];
      zero(s);
      zero(dp);
      productABt<T, D, BK>(s, qw, kt, Ld);
      productABt<T, D, BK>(dp, dow, vt, Ld);
#pragma unroll
      for (int n = 0; n < BK / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int c = n * 8 + 2 * t + e % 2, hf = e / 2;
          float p =
              kp[c] > qp[hf] ? 0.f : __expf(s[n][e] * a.scale - rowLse[hf]);
          s[n][e] = p * (dp[n][e] - rowDelta[hf]);
        }
      uint32_t ds[BK / 16][4];
      toA<T, BK>(ds, s);
      productPB<T, BK, D>(dq, ds, kt, Ld);
    }
    if (xs == nk)
      break;
    cpAsyncWait();
    __syncthreads();
    convertRows<T, D, BK>(ks, kst, xs * BK, Sk);
    convertRows<T, D, BK>(vs, vst, xs * BK, Sk);
    keyPos<BK>(kp, kpst, xs * BK, Sk, a.causal);
    __syncthreads();
  }
  const float one[2] = {1.f, 1.f};
  __syncthreads();
  float *stageW = reinterpret_cast<float *>(smem) + warp * 16 * (D + 4);
  stageAcc<D>(dq, one, stageW);
  copyStaged<D>(stageW, a.dq + bh * Sq * D, row0, Sq, a.scale);
}

/// dk = scale * sum r(ds)^T q and dv = sum r(p)^T dout over the query heads
/// of the block's key/value head: each warp owns 16 keys and works on
/// transposed scores (keys x queries); delta from the delta kernel.
template <typename T, int D> __device__ void gradKV(const AttentionArgs &a) {
  constexpr int BQ = kTile2(D), Ld = D + 8;
  T *ks = reinterpret_cast<T *>(smem);
  T *vs = ks + kRows * Ld;
  T *qs = vs + kRows * Ld;
  T *dos = qs + BQ * Ld;
  float *qst = reinterpret_cast<float *>(dos + BQ * Ld);
  float *dost = qst + BQ * D;
  long long *qps = reinterpret_cast<long long *>(dost + BQ * D);
  long long *qpst = qps + BQ;
  float *lses = reinterpret_cast<float *>(qpst + BQ);
  float *deltas = lses + BQ;
  float *lsest = deltas + BQ;
  float *deltast = lsest + BQ;
  requireSmem(dkvSmem(D));

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const long long H = a.heads, Hk = a.kvHeads, G = H / Hk, Sq = a.queries,
                  Sk = a.keys;
  const long long kvh = blockIdx.x, b = kvh / Hk, hk = kvh % Hk;
  const long long k0 = (long long)blockIdx.y * kRows;
  const long long firstK =
      a.causal ? extremePos(a.kpos, k0, min(k0 + kRows, Sk), true) : 0;
  // Query tiles x < n are numbered over the key/value head's query heads:
  // tile x is tile x % nq of head x / nq.
  const long long nq = (Sq + BQ - 1) / BQ, n = G * nq;
  auto next = [&](long long x) {
    return a.causal ? visibleTile(a.qpos, x, n, nq, BQ, Sq, firstK, false) : x;
  };

  const long long row0 = k0 + warp * 16;
  // Keys past Sk are zero rows whose results are dropped.
  long long kp[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    long long j = row0 + g + 8 * hf;
    kp[hf] = a.causal && j < Sk ? a.kpos[j] : 0;
  }
  const unsigned kw = at(ks + warp * 16 * Ld), vw = at(vs + warp * 16 * Ld),
                 qt = at(qs), dot = at(dos);

  float dk[D / 8][4], dv[D / 8][4];
  zero(dk);
  zero(dv);
  // As in the forward, over query tiles.
  for (long long x = n, xs = next(0);; x = xs, xs = next(xs + 1)) {
    const long long bhs = b * H + hk * G + xs / nq, qs0 = xs % nq * BQ;
    if (xs < n) {
      stageRows<D, BQ>(qst, a.q + bhs * Sq * D, qs0, Sq);
      stageRows<D, BQ>(dost, a.dout + bhs * Sq * D, qs0, Sq);
      if (int r = threadIdx.x; r < BQ)
        if (qs0 + r < Sq) {
          cpAsync<4>(lsest + r, a.lse + bhs * Sq + qs0 + r);
          cpAsync<4>(deltast + r, a.delta + bhs * Sq + qs0 + r);
          if (a.causal)
            cpAsync<8>(qpst + r, a.qpos + qs0 + r);
        }
    }
    if (x == n) {
      loadTile<T, D, kRows>(ks, a.k + kvh * Sk * D, k0, Sk);
      loadTile<T, D, kRows>(vs, a.v + kvh * Sk * D, k0, Sk);
    } else {
      float st[BQ / 8][4], dpt[BQ / 8][4];
      zero(st);
      zero(dpt);
      productABt<T, D, BQ>(st, kw, qt, Ld);
      productABt<T, D, BQ>(dpt, vw, dot, Ld);
#pragma unroll
      for (int c8 = 0; c8 < BQ / 8; ++c8)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int c = c8 * 8 + 2 * t + e % 2, hf = e / 2;
          float p =
              kp[hf] > qps[c] ? 0.f : __expf(st[c8][e] * a.scale - lses[c]);
          st[c8][e] = p;
          dpt[c8][e] = p * (dpt[c8][e] - deltas[c]);
        }
      uint32_t pf[BQ / 16][4];
      toA<T, BQ>(pf, st);
      productPB<T, BQ, D>(dv, pf, dot, Ld);
      toA<T, BQ>(pf, dpt);
      productPB<T, BQ, D>(dk, pf, qt, Ld);
    }
    if (xs == n)
      break;
    cpAsyncWait();
    __syncthreads();
    convertRows<T, D, BQ>(qs, qst, qs0, Sq);
    convertRows<T, D, BQ>(dos, dost, qs0, Sq);
    if (int r = threadIdx.x; r < BQ) {
      // Queries past Sq and those that see no key (lse -inf) get lse +inf:
      // p = exp(s - inf) = 0. Not causal: never hidden.
      bool in = qs0 + r < Sq;
      float lse = in ? lsest[r] : kNegInf;
      lses[r] = lse == kNegInf ? -kNegInf : lse;
      deltas[r] = in ? deltast[r] : 0.f;
      qps[r] = in && a.causal ? qpst[r] : LLONG_MAX;
    }
    __syncthreads();
  }
  const float one[2] = {1.f, 1.f};
  __syncthreads();
  // Both staged before either is copied (nothing live across the calls).
  static_assert(2 * kRows * (D + 4) * 4 <= dkvSmem(D), "dk and dv staged");
  float *dkW = reinterpret_cast<float *>(smem) + warp * 16 * (D + 4);
  float *dvW = dkW + kRows * (D + 4);
  stageAcc<D>(dk, one, dkW);
  stageAcc<D>(dv, one, dvW);
  copyStaged<D>(dkW, a.dk + kvh * Sk * D, row0, Sk, a.scale);
  copyStaged<D>(dvW, a.dv + kvh * Sk * D, row0, Sk, 1.f);
}

} // namespace shardx_attention::v2

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

extern "C" __global__ void __launch_bounds__(shardx_attention::kThreads, 1)
    shardx_attention_delta(AttentionArgs a) {
  shardx_attention::delta(a);
}

#define SHARDX_ATTENTION_KERNELS(NAME, T, D)                                   \
  extern "C" __global__ void __launch_bounds__(shardx_attention::kThreads, 1)  \
      shardx_attention_fwd_##NAME##_##D(AttentionArgs a) {                     \
    shardx_attention::forward<T, D>(a);                                        \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(shardx_attention::kThreads, 1)  \
      shardx_attention_dq_##NAME##_##D(AttentionArgs a) {                      \
    shardx_attention::gradQ<T, D>(a);                                          \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(shardx_attention::kThreads, 1)  \
      shardx_attention_dkv_##NAME##_##D(AttentionArgs a) {                     \
    shardx_attention::gradKV<T, D>(a);                                         \
  }

#define SHARDX_ATTENTION_KERNELS_V2(NAME, T, D)                                \
  extern "C" __global__ void __launch_bounds__(shardx_attention::kThreads, 1)  \
      shardx_attention_v2_fwd_##NAME##_##D(AttentionArgs a) {                  \
    shardx_attention::v2::forward<T, D>(a);                                    \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(shardx_attention::kThreads, 1)  \
      shardx_attention_v2_dq_##NAME##_##D(AttentionArgs a) {                   \
    shardx_attention::v2::gradQ<T, D>(a);                                      \
  }                                                                            \
  extern "C" __global__ void __launch_bounds__(shardx_attention::kThreads, 1)  \
      shardx_attention_v2_dkv_##NAME##_##D(AttentionArgs a) {                  \
    shardx_attention::v2::gradKV<T, D>(a);                                     \
  }

SHARDX_ATTENTION_KERNELS(bf16, __nv_bfloat16, 32)
SHARDX_ATTENTION_KERNELS(bf16, __nv_bfloat16, 64)
SHARDX_ATTENTION_KERNELS(bf16, __nv_bfloat16, 128)
SHARDX_ATTENTION_KERNELS(f16, __half, 32)
SHARDX_ATTENTION_KERNELS(f16, __half, 64)
SHARDX_ATTENTION_KERNELS(f16, __half, 128)

SHARDX_ATTENTION_KERNELS_V2(bf16, __nv_bfloat16, 32)
SHARDX_ATTENTION_KERNELS_V2(bf16, __nv_bfloat16, 64)
SHARDX_ATTENTION_KERNELS_V2(bf16, __nv_bfloat16, 128)
SHARDX_ATTENTION_KERNELS_V2(f16, __half, 32)
SHARDX_ATTENTION_KERNELS_V2(f16, __half, 64)
SHARDX_ATTENTION_KERNELS_V2(f16, __half, 128)

#undef SHARDX_ATTENTION_KERNELS
#undef SHARDX_ATTENTION_KERNELS_V2
