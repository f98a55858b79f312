//===- Attention.cpp - Fused attention entry points of CUDA artifacts -----===//
//
// Part of ShardX.
//
// What compiled GPU programs call for a fused attention (the forward and
// the two backward halves), with bf16 or f16 tensor-core products:
// `_mlir_ciface_shardx_rt_cuda_attention{,_dq,_dkv}_{bf16,f16}`, taking
// memref descriptors of f32 device buffers. They launch the kernels of
// AttentionKernels.cu (built by nvcc and ptxas, embedded as a fat binary,
// loaded on first use) on the calling thread's stream, asynchronously, like
// the runtime's other device work. The contract (shapes, masking, rounding) is in
// docs/Runtime.md, "Fused attention kernels".
//
//===----------------------------------------------------------------------===//

#include "AttentionLayout.h"

#include "shardx/Runtime/Cuda.h"

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace {

// kAttentionKernelsImage: AttentionKernels.cu's fat binary (or PTX), only a
// NUL when nvcc was not found at configure time (CMakeLists.txt).
#include "AttentionKernels.image.inc"

using namespace shardx_attention;

/// The kernels the entry points launch: 2 (v2, register-resident; the
/// default) or 1 (v1, when SHARDX_ATTENTION_KERNELS=v1 is set; read once).
std::atomic<int> &kernelVersion() {
  static std::atomic<int> version{[] {
    const char *e = std::getenv("SHARDX_ATTENTION_KERNELS");
    return e && std::string(e) == "v1" ? 1 : 2;
  }()};
  return version;
}

template <typename T> struct MemRef1 {
  T *allocated;
  T *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
};

using shardx::rt::cudaFatal;

struct Shape {
  const char *entry;
  int64_t batch, heads, kvHeads, queries, keys, width;
  bool causal;
};

Shape shapeOf(const char *entry, int64_t batch, int64_t heads, int64_t kvHeads,
              int64_t queries, int64_t keys, int64_t width, int32_t causal) {
  return {entry, batch, heads, kvHeads, queries, keys, width, causal != 0};
}

/// Fails unless the kernels cover `s`.
void validate(const Shape &s) {
  if (s.width != 32 && s.width != 64 && s.width != 128)
    cudaFatal("%s: head width %lld is not supported (32, 64 or 128)", s.entry,
              (long long)s.width);
  if (s.batch < 0 || s.queries < 0 || s.keys < 0 || s.heads <= 0 ||
      s.kvHeads <= 0 || s.heads % s.kvHeads)
    cudaFatal("%s: bad shape (batch %lld, heads %lld, kv heads %lld, queries "
              "%lld, keys %lld): heads must be a positive multiple of kv heads",
              s.entry, (long long)s.batch, (long long)s.heads,
              (long long)s.kvHeads, (long long)s.queries, (long long)s.keys);
  // Grid y counts tiles of 64 rows (at most 65535), grid x heads.
  if ((s.queries + kRows - 1) / kRows > 65535 ||
      (s.keys + kRows - 1) / kRows > 65535 || s.batch * s.heads > INT32_MAX)
    cudaFatal("%s: %lld queries, %lld keys, %lld batch x heads exceed the "
              "kernels' grid",
              s.entry, (long long)s.queries, (long long)s.keys,
              (long long)(s.batch * s.heads));
}

/// The element data of `m`, checked to hold at least `count` elements.
template <typename T>
T *data(const Shape &s, const MemRef1<T> *m, const char *name, int64_t count) {
  if (m->sizes[0] < count)
    cudaFatal("%s: %s has %lld elements, %lld needed", s.entry, name,
              (long long)m->sizes[0], (long long)count);
  return m->aligned + m->offset;
}

/// The positions of a causal call (not read otherwise).
const long long *positions(const Shape &s, const MemRef1<int64_t> *m,
                           const char *name, int64_t count) {
  if (!s.causal)
    return nullptr;
  return reinterpret_cast<const long long *>(data(s, m, name, count));
}

/// The kernel `name`, allowed `smem` bytes of dynamic shared memory.
void *kernel(const std::string &name, int smem) {
  static std::mutex mutex;
  static void *module = nullptr;
  static std::map<std::string, void *> kernels;
  std::lock_guard<std::mutex> lock(mutex);
  if (sizeof(kAttentionKernelsImage) <= 1)
    cudaFatal("fused attention: this runtime was built without nvcc, so it has "
              "no attention kernels");
  if (!module)
    module = mgpuModuleLoad(const_cast<unsigned char *>(kAttentionKernelsImage),
                            sizeof(kAttentionKernelsImage));
  void *&fn = kernels[name];
  if (!fn) {
    fn = mgpuModuleGetFunction(module, name.c_str());
    // Up to 89 KiB (dkv at width 64): above the default 48 KiB only with
    // the attribute; two blocks still fit an sm_90 SM (227 KiB).
    if (smem > 48 * 1024)
      shardx::rt::setMaxDynamicSmem(fn, smem);
  }
  return fn;
}

/// Launches the pass's kernel of the chosen version (`smem` is v1's
/// shared memory, `smem2` v2's).
void launch(const char *pass, const char *type, const Shape &s, int smem,
            int smem2, int64_t gridX, int64_t gridY, AttentionArgs &args) {
  bool v2 = kernelVersion().load() == 2;
  if (v2)
    smem = smem2;
  std::string name = std::string("shardx_attention_") + (v2 ? "v2_" : "") +
                     pass + "_" + type + "_" + std::to_string(s.width);
  void *params[] = {&args};
  mgpuLaunchKernel(kernel(name, smem), gridX, gridY, 1, kThreads, 1, 1, smem,
                   mgpuStreamCreate(), params, nullptr, 1);
}

AttentionArgs argsOf(const Shape &s, double scale) {
  AttentionArgs a{};
  a.batch = s.batch;
  a.heads = s.heads;
  a.kvHeads = s.kvHeads;
  a.queries = s.queries;
  a.keys = s.keys;
  a.width = s.width;
  a.causal = s.causal;
  a.scale = static_cast<float>(scale);
  return a;
}

int64_t tiles(int64_t n) { return (n + kRows - 1) / kRows; }

void forward(const char *type, MemRef1<float> *q, MemRef1<float> *k,
             MemRef1<float> *v, MemRef1<int64_t> *qpos, MemRef1<int64_t> *kpos,
             MemRef1<float> *out, MemRef1<float> *lse, const Shape &s,
             double scale) {
  validate(s);
  int64_t bh = s.batch * s.heads, bhk = s.batch * s.kvHeads;
  AttentionArgs a = argsOf(s, scale);
  a.q = data(s, q, "q", bh * s.queries * s.width);
  a.k = data(s, k, "k", bhk * s.keys * s.width);
  a.v = data(s, v, "v", bhk * s.keys * s.width);
  a.qpos = positions(s, qpos, "qpos", s.queries);
  a.kpos = positions(s, kpos, "kpos", s.keys);
  a.outW = data(s, out, "out", bh * s.queries * s.width);
  a.lseW = data(s, lse, "lse", bh * s.queries);
  launch("fwd", type, s, fwdSmem(s.width), v2::fwdSmem(s.width), bh,
         tiles(s.queries), a);
}

/// The inputs of both backward halves.
AttentionArgs backwardArgs(const Shape &s, double scale, MemRef1<float> *q,
                           MemRef1<float> *k, MemRef1<float> *v,
                           MemRef1<float> *out, MemRef1<float> *lse,
                           MemRef1<float> *dout, MemRef1<int64_t> *qpos,
                           MemRef1<int64_t> *kpos) {
  validate(s);
  int64_t bh = s.batch * s.heads, bhk = s.batch * s.kvHeads;
  AttentionArgs a = argsOf(s, scale);
  a.q = data(s, q, "q", bh * s.queries * s.width);
  a.k = data(s, k, "k", bhk * s.keys * s.width);
  a.v = data(s, v, "v", bhk * s.keys * s.width);
  a.out = data(s, out, "out", bh * s.queries * s.width);
  a.lse = data(s, lse, "lse", bh * s.queries);
  a.dout = data(s, dout, "dout", bh * s.queries * s.width);
  a.qpos = positions(s, qpos, "qpos", s.queries);
  a.kpos = positions(s, kpos, "kpos", s.keys);
  return a;
}

void gradQ(const char *type, MemRef1<float> *q, MemRef1<float> *k,
           MemRef1<float> *v, MemRef1<float> *out, MemRef1<float> *lse,
           MemRef1<float> *dout, MemRef1<int64_t> *qpos, MemRef1<int64_t> *kpos,
           MemRef1<float> *dq, const Shape &s, double scale) {
  AttentionArgs a = backwardArgs(s, scale, q, k, v, out, lse, dout, qpos, kpos);
  int64_t bh = s.batch * s.heads;
  a.dq = data(s, dq, "dq", bh * s.queries * s.width);
  launch("dq", type, s, dqSmem(s.width), v2::dqSmem(s.width), bh,
         tiles(s.queries), a);
}

void gradKV(const char *type, MemRef1<float> *q, MemRef1<float> *k,
            MemRef1<float> *v, MemRef1<float> *out, MemRef1<float> *lse,
            MemRef1<float> *dout, MemRef1<int64_t> *qpos,
            MemRef1<int64_t> *kpos, MemRef1<float> *dk, MemRef1<float> *dv,
            const Shape &s, double scale) {
  AttentionArgs a = backwardArgs(s, scale, q, k, v, out, lse, dout, qpos, kpos);
  int64_t bhk = s.batch * s.kvHeads, rows = s.batch * s.heads * s.queries;
  a.dk = data(s, dk, "dk", bhk * s.keys * s.width);
  a.dv = data(s, dv, "dv", bhk * s.keys * s.width);
  if (bhk == 0 || s.keys == 0)
    return;
  // delta = rowsum(dout * out), read by every key tile: computed once into
  // a block of the caching allocator (free again, in stream order, once the
  // kernels that read it are queued).
  void *stream = mgpuStreamCreate();
  if (rows > 0) {
    a.delta = static_cast<float *>(mgpuMemAlloc(rows * 4, stream, false));
    void *params[] = {&a};
    mgpuLaunchKernel(kernel("shardx_attention_delta", 0),
                     (rows + kThreads / 32 - 1) / (kThreads / 32), 1, 1,
                     kThreads, 1, 1, 0, stream, params, nullptr, 1);
  }
  launch("dkv", type, s, dkvSmem(s.width), v2::dkvSmem(s.width), bhk,
         tiles(s.keys), a);
  if (a.delta)
    mgpuMemFree(a.delta, stream);
}

} // namespace

//===----------------------------------------------------------------------===//
// C entry points
//===----------------------------------------------------------------------===//

extern "C" {

/// Chooses the kernels of later calls (1: v1, 2: v2; anything else leaves
/// the choice) and returns the previous choice: the GPU test's A/B timing.
int32_t shardx_rt_cuda_attention_kernels(int32_t version) {
  return version == 1 || version == 2 ? kernelVersion().exchange(version)
                                      : kernelVersion().load();
}

#define SHARDX_CUDA_ATTENTION(SUFFIX)                                          \
  void _mlir_ciface_shardx_rt_cuda_attention_##SUFFIX(                         \
      MemRef1<float> *q, MemRef1<float> *k, MemRef1<float> *v,                 \
      MemRef1<int64_t> *qpos, MemRef1<int64_t> *kpos, MemRef1<float> *out,     \
      MemRef1<float> *lse, int64_t batch, int64_t heads, int64_t kvHeads,      \
      int64_t queries, int64_t keys, int64_t width, int32_t causal,            \
      double scale) {                                                          \
    Shape s = shapeOf("shardx_rt_cuda_attention_" #SUFFIX, batch, heads,       \
                      kvHeads, queries, keys, width, causal);                  \
    forward(#SUFFIX, q, k, v, qpos, kpos, out, lse, s, scale);                 \
  }                                                                            \
  void _mlir_ciface_shardx_rt_cuda_attention_dq_##SUFFIX(                      \
      MemRef1<float> *q, MemRef1<float> *k, MemRef1<float> *v,                 \
      MemRef1<float> *out, MemRef1<float> *lse, MemRef1<float> *dout,          \
      MemRef1<int64_t> *qpos, MemRef1<int64_t> *kpos, MemRef1<float> *dq,      \
      int64_t batch, int64_t heads, int64_t kvHeads, int64_t queries,          \
      int64_t keys, int64_t width, int32_t causal, double scale) {             \
    Shape s = shapeOf("shardx_rt_cuda_attention_dq_" #SUFFIX, batch, heads,    \
                      kvHeads, queries, keys, width, causal);                  \
    gradQ(#SUFFIX, q, k, v, out, lse, dout, qpos, kpos, dq, s, scale);         \
  }                                                                            \
  void _mlir_ciface_shardx_rt_cuda_attention_dkv_##SUFFIX(                     \
      MemRef1<float> *q, MemRef1<float> *k, MemRef1<float> *v,                 \
      MemRef1<float> *out, MemRef1<float> *lse, MemRef1<float> *dout,          \
      MemRef1<int64_t> *qpos, MemRef1<int64_t> *kpos, MemRef1<float> *dk,      \
      MemRef1<float> *dv, int64_t batch, int64_t heads, int64_t kvHeads,       \
      int64_t queries, int64_t keys, int64_t width, int32_t causal,            \
      double scale) {                                                          \
    Shape s = shapeOf("shardx_rt_cuda_attention_dkv_" #SUFFIX, batch, heads,   \
                      kvHeads, queries, keys, width, causal);                  \
    gradKV(#SUFFIX, q, k, v, out, lse, dout, qpos, kpos, dk, dv, s, scale);    \
  }

SHARDX_CUDA_ATTENTION(bf16)
SHARDX_CUDA_ATTENTION(f16)

#undef SHARDX_CUDA_ATTENTION

} // extern "C"
