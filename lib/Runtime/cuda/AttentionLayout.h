//===- AttentionLayout.h - What the attention kernels and launcher share --===//
//
// Part of ShardX.
//
// Included by AttentionKernels.cu (compiled by nvcc) and by Attention.cpp,
// which launches its kernels: the kernels' one parameter, the block shape
// and each kernel's shared memory in bytes, written once so that the
// launcher gives every kernel what it lays out (a kernel traps on less,
// requireSmem).
//
//===----------------------------------------------------------------------===//

#ifndef SHARDX_LIB_RUNTIME_CUDA_ATTENTIONLAYOUT_H
#define SHARDX_LIB_RUNTIME_CUDA_ATTENTIONLAYOUT_H

#ifdef __CUDACC__
#define SHARDX_HOST_DEVICE __host__ __device__
#else
#define SHARDX_HOST_DEVICE
#endif

/// The kernels' one parameter. Every matrix is row-major and contiguous:
/// q, out, dout, dq [B, H, Sq, D]; k, v, dk, dv [B, Hk, Sk, D]; lse, delta
/// [B, H, Sq]; qpos [Sq], kpos [Sk] (read only when causal). `outW` and
/// `lseW` are the forward's outputs.
struct AttentionArgs {
  const float *q, *k, *v, *out, *lse, *dout;
  const long long *qpos, *kpos;
  float *outW, *lseW, *dq, *dk, *dv, *delta;
  long long batch, heads, kvHeads, queries, keys, width;
  int causal;
  float scale;
};
static_assert(sizeof(AttentionArgs) == 168,
              "the kernels' parameter is 168 bytes on host and device");

namespace shardx_attention {

/// A block: 4 warps of 16 rows, 64 rows (queries for fwd and dq, keys for
/// dkv).
constexpr int kThreads = 128;
constexpr int kRows = 64;

/// v1 (`shardx_attention_*`): the other side's tile, keys per step of fwd
/// and dq, queries per step of dkv (32 at D = 128 keeps dq and dkv near 80
/// KiB of shared memory, two blocks per SM).
SHARDX_HOST_DEVICE constexpr int kTile(int d) { return d == 128 ? 32 : 64; }

// v1's shared memory. Every region is a multiple of 128 bytes, so each
// starts 128-byte aligned (wmma pointers need 32). Rows of T have D + 8
// elements, rows of f32 scores tile + 4, rows of T scores tile + 8
// (bank-conflict padding; wmma's ldm is a multiple of 8 for 16-bit, 4 for
// f32).
SHARDX_HOST_DEVICE constexpr int fwdSmem(int d) {
  return (kRows + 2 * kTile(d)) * (d + 8) * 2 + kRows * (kTile(d) + 4) * 4 +
         kRows * (kTile(d) + 8) * 2 + kTile(d) * 8;
}
SHARDX_HOST_DEVICE constexpr int dqSmem(int d) {
  return (2 * kRows + 2 * kTile(d)) * (d + 8) * 2 +
         2 * kRows * (kTile(d) + 4) * 4 + kRows * (kTile(d) + 8) * 2 +
         kTile(d) * 8;
}
SHARDX_HOST_DEVICE constexpr int dkvSmem(int d) {
  return (2 * kRows + 2 * kTile(d)) * (d + 8) * 2 +
         2 * kRows * (kTile(d) + 4) * 4 + 2 * kRows * (kTile(d) + 8) * 2 +
         kTile(d) * (4 + 4 + 8);
}

namespace v2 {
/// v2 (`shardx_attention_v2_*`): the other side's tile, keys per step of
/// fwd and dq, queries per step of dkv.
SHARDX_HOST_DEVICE constexpr int kTile2(int d) { return d == 128 ? 32 : 64; }
// v2's shared memory: the tiles of T (rows of D + 8), the f32 staging of
// the next tile (rows of D, filled by cp.async while the current one is
// used), then positions (and for dkv lse and delta) with their staging.
SHARDX_HOST_DEVICE constexpr int fwdSmem(int d) {
  return (kRows + 2 * kTile2(d)) * (d + 8) * 2 + 2 * kTile2(d) * d * 4 +
         2 * kTile2(d) * 8;
}
SHARDX_HOST_DEVICE constexpr int dqSmem(int d) {
  return (2 * kRows + 2 * kTile2(d)) * (d + 8) * 2 + 2 * kTile2(d) * d * 4 +
         2 * kTile2(d) * 8;
}
SHARDX_HOST_DEVICE constexpr int dkvSmem(int d) {
  return (2 * kRows + 2 * kTile2(d)) * (d + 8) * 2 + 2 * kTile2(d) * d * 4 +
         2 * kTile2(d) * (8 + 4 + 4);
}
} // namespace v2

} // namespace shardx_attention

#undef SHARDX_HOST_DEVICE

#endif // SHARDX_LIB_RUNTIME_CUDA_ATTENTIONLAYOUT_H
