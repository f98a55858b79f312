//===- AttentionKernelTest.cpp - The fused attention kernels on a GPU -----===//
//
// Part of ShardX.
//
// Calls the fused attention entry points (lib/Runtime/cuda/Attention.cpp)
// on device buffers of random f32 inputs (fixed seed, not pre-rounded, so
// the kernels' rounding to bf16/f16 is exercised) and compares out, lse,
// dq, dk and dv with a CPU reference in double that rounds every product's
// operands as the contract says (docs/Runtime.md, "Fused attention
// kernels"). Cases: both types, widths 32, 64 and 128, causal with
// positions 0..S-1, offset, shuffled and with rows that see no key,
// non-causal, grouped-query heads, sizes off the tiles, one query, one key,
// batch 2. The backward halves get the reference's out and lse, so each
// pass is checked alone. Every case runs both kernel versions (v2, the
// default, then v1; shardx_rt_cuda_attention_kernels chooses), v2's out
// against a reference of its one-pass forward. A timing case (B 8, H 12,
// S 1024, D 64, causal, bf16) prints milliseconds and TFLOP/s of both and
// checks nothing.
//
// Runs only with a GPU: without a usable driver every test fails with the
// driver's reason (it is not a unit test of build/unittests; scripts/
// gpu_check.sh runs it on the GPU host).
//
//===----------------------------------------------------------------------===//

#include "shardx/Runtime/Cuda.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

template <typename T> struct MemRef1 {
  T *allocated;
  T *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
};

} // namespace

extern "C" {
#define SHARDX_ATTENTION_DECLS(SUFFIX)                                         \
  void _mlir_ciface_shardx_rt_cuda_attention_##SUFFIX(                         \
      MemRef1<float> *, MemRef1<float> *, MemRef1<float> *,                    \
      MemRef1<int64_t> *, MemRef1<int64_t> *, MemRef1<float> *,                \
      MemRef1<float> *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,  \
      int32_t, double);                                                        \
  void _mlir_ciface_shardx_rt_cuda_attention_dq_##SUFFIX(                      \
      MemRef1<float> *, MemRef1<float> *, MemRef1<float> *, MemRef1<float> *,  \
      MemRef1<float> *, MemRef1<float> *, MemRef1<int64_t> *,                  \
      MemRef1<int64_t> *, MemRef1<float> *, int64_t, int64_t, int64_t,         \
      int64_t, int64_t, int64_t, int32_t, double);                             \
  void _mlir_ciface_shardx_rt_cuda_attention_dkv_##SUFFIX(                     \
      MemRef1<float> *, MemRef1<float> *, MemRef1<float> *, MemRef1<float> *,  \
      MemRef1<float> *, MemRef1<float> *, MemRef1<int64_t> *,                  \
      MemRef1<int64_t> *, MemRef1<float> *, MemRef1<float> *, int64_t,         \
      int64_t, int64_t, int64_t, int64_t, int64_t, int32_t, double);
SHARDX_ATTENTION_DECLS(bf16)
SHARDX_ATTENTION_DECLS(f16)
#undef SHARDX_ATTENTION_DECLS
int32_t shardx_rt_cuda_attention_kernels(int32_t version);
}

namespace {

//===----------------------------------------------------------------------===//
// The problem
//===----------------------------------------------------------------------===//

enum class Type { BF16, F16 };

/// The positions of a causal case.
enum class Positions {
  None,     // not causal
  Iota,     // qpos = kpos = 0, 1, ...
  Offset,   // qpos = 100, 101, ...; kpos = 0, 1, ...
  Shuffled, // random permutations of 0..Sq-1 and 0..Sk-1
  Late,     // qpos = 0, 1, ...; kpos = 10, 11, ...: queries 0..9 see no key
};

struct Case {
  const char *name;
  Type type;
  int64_t batch, heads, kvHeads, queries, keys, width;
  Positions positions;
  /// Buffers at offsets of 1 to 5 elements into their allocations (the
  /// kernels' unaligned loads); else at their start (compiled programs').
  bool misaligned = false;
};

std::ostream &operator<<(std::ostream &os, const Case &c) {
  return os << c.name;
}

struct Problem {
  Case c;
  double scale;
  std::vector<float> q, k, v, dout;
  std::vector<int64_t> qpos, kpos;

  bool causal() const { return c.positions != Positions::None; }
};

Problem makeProblem(const Case &c, uint32_t seed) {
  Problem p{c, 1.0 / std::sqrt(double(c.width)), {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto fill = [&](std::vector<float> &x, int64_t n) {
    x.resize(n);
    for (float &e : x)
      e = normal(rng);
  };
  int64_t rows = c.batch * c.heads * c.queries;
  int64_t kvRows = c.batch * c.kvHeads * c.keys;
  fill(p.q, rows * c.width);
  fill(p.k, kvRows * c.width);
  fill(p.v, kvRows * c.width);
  fill(p.dout, rows * c.width);
  p.qpos.resize(c.queries);
  p.kpos.resize(c.keys);
  std::iota(p.qpos.begin(), p.qpos.end(), 0);
  std::iota(p.kpos.begin(), p.kpos.end(), 0);
  if (c.positions == Positions::Offset)
    std::iota(p.qpos.begin(), p.qpos.end(), 100);
  if (c.positions == Positions::Late)
    std::iota(p.kpos.begin(), p.kpos.end(), 10);
  if (c.positions == Positions::Shuffled) {
    std::shuffle(p.qpos.begin(), p.qpos.end(), rng);
    std::shuffle(p.kpos.begin(), p.kpos.end(), rng);
  }
  if (!p.causal()) {
    p.qpos.assign(1, 0); // a dummy: not read
    p.kpos.assign(1, 0);
  }
  return p;
}

//===----------------------------------------------------------------------===//
// CPU reference
//===----------------------------------------------------------------------===//

/// x rounded to nearest even with `bits` significant bits, the least
/// exponent of a unit in the last place `minExp` (subnormals), and no
/// exponent limit above (f16 overflow is handled by the caller).
double roundBits(double x, int bits, int minExp) {
  if (x == 0 || !std::isfinite(x))
    return x;
  int e;
  std::frexp(std::fabs(x), &e);
  double ulp = std::ldexp(1.0, std::max(e - bits, minExp));
  return std::copysign(std::nearbyint(std::fabs(x) / ulp) * ulp, x);
}

/// r(x): the f32 x rounded to the 16-bit type and back.
double r(Type t, float x) {
  if (t == Type::BF16)
    return roundBits(x, 8, -133);
  if (std::fabs(x) >= 65520.f)
    return std::copysign(std::numeric_limits<double>::infinity(), x);
  return roundBits(x, 11, -24);
}

std::vector<double> rounded(Type t, const std::vector<float> &x) {
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    y[i] = r(t, x[i]);
  return y;
}

struct Reference {
  /// out as v1 computes it (r(p) with p normalized) and as v2 does (one
  /// pass over tiles of v2KeyTile(D) keys: r(exp(s - m)) for the running max
  /// m, rescaled, the sum divided by l at the end).
  std::vector<double> out, out2, lse, dq, dk, dv;
};

/// v2's forward tile of keys (AttentionKernels.cu).
int64_t v2KeyTile(int64_t width) { return width == 128 ? 32 : 64; }

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The scores s[i][j] of head (b, h), -inf where masked.
std::vector<double> scores(const Problem &p, const std::vector<double> &qr,
                           const std::vector<double> &kr, int64_t b,
                           int64_t h) {
  const Case &c = p.c;
  int64_t D = c.width, hk = h / (c.heads / c.kvHeads);
  const double *q = &qr[((b * c.heads + h) * c.queries) * D];
  const double *k = &kr[((b * c.kvHeads + hk) * c.keys) * D];
  std::vector<double> s(c.queries * c.keys);
  for (int64_t i = 0; i < c.queries; ++i)
    for (int64_t j = 0; j < c.keys; ++j) {
      if (p.causal() && p.kpos[j] > p.qpos[i]) {
        s[i * c.keys + j] = -kInf;
        continue;
      }
      double dot = 0;
      for (int64_t d = 0; d < D; ++d)
        dot += q[i * D + d] * k[j * D + d];
      s[i * c.keys + j] = p.scale * dot;
    }
  return s;
}

/// out and lse: p = exp(s - m) / l, out = sum_j r(p) r(v_j); out2 = sum_j
/// r(exp(s_j - m_t)) exp(m_t - m) r(v_j) / l, m_t the max of the keys of
/// j's tile and those before it.
void referenceForward(const Problem &p, Reference &ref) {
  const Case &c = p.c;
  int64_t D = c.width, Sq = c.queries, Sk = c.keys;
  std::vector<double> qr = rounded(c.type, p.q), kr = rounded(c.type, p.k),
                      vr = rounded(c.type, p.v);
  ref.out.assign(c.batch * c.heads * Sq * D, 0);
  ref.out2.assign(c.batch * c.heads * Sq * D, 0);
  ref.lse.assign(c.batch * c.heads * Sq, 0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h) {
      int64_t bh = b * c.heads + h, hk = h / (c.heads / c.kvHeads);
      const double *v = &vr[((b * c.kvHeads + hk) * Sk) * D];
      std::vector<double> s = scores(p, qr, kr, b, h);
      for (int64_t i = 0; i < Sq; ++i) {
        double m = -kInf, l = 0;
        for (int64_t j = 0; j < Sk; ++j)
          m = std::max(m, s[i * Sk + j]);
        if (m == -kInf) {
          ref.lse[bh * Sq + i] = -kInf;
          continue;
        }
        for (int64_t j = 0; j < Sk; ++j)
          l += std::exp(s[i * Sk + j] - m);
        ref.lse[bh * Sq + i] = m + std::log(l);
        double *o = &ref.out[(bh * Sq + i) * D];
        for (int64_t j = 0; j < Sk; ++j) {
          double pr = r(c.type, float(std::exp(s[i * Sk + j] - m) / l));
          for (int64_t d = 0; d < D; ++d)
            o[d] += pr * v[j * D + d];
        }
        double *o2 = &ref.out2[(bh * Sq + i) * D], mt = -kInf;
        for (int64_t j0 = 0; j0 < Sk; j0 += v2KeyTile(D)) {
          int64_t j1 = std::min(j0 + v2KeyTile(D), Sk);
          for (int64_t j = j0; j < j1; ++j)
            mt = std::max(mt, s[i * Sk + j]);
          if (mt == -kInf)
            continue;
          for (int64_t j = j0; j < j1; ++j) {
            double pr = r(c.type, float(std::exp(s[i * Sk + j] - mt))) *
                        std::exp(mt - m) / l;
            for (int64_t d = 0; d < D; ++d)
              o2[d] += pr * v[j * D + d];
          }
        }
      }
    }
}

/// dq, dk and dv from `out` and `lse` (f32, as the kernels get them).
void referenceBackward(const Problem &p, const std::vector<float> &out,
                       const std::vector<float> &lse, Reference &ref) {
  const Case &c = p.c;
  int64_t D = c.width, Sq = c.queries, Sk = c.keys;
  int64_t G = c.heads / c.kvHeads;
  std::vector<double> qr = rounded(c.type, p.q), kr = rounded(c.type, p.k),
                      vr = rounded(c.type, p.v), dor = rounded(c.type, p.dout);
  ref.dq.assign(c.batch * c.heads * Sq * D, 0);
  ref.dk.assign(c.batch * c.kvHeads * Sk * D, 0);
  ref.dv.assign(c.batch * c.kvHeads * Sk * D, 0);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t h = 0; h < c.heads; ++h) {
      int64_t bh = b * c.heads + h, bhk = b * c.kvHeads + h / G;
      std::vector<double> s = scores(p, qr, kr, b, h);
      for (int64_t i = 0; i < Sq; ++i) {
        int64_t row = bh * Sq + i;
        double delta = 0;
        for (int64_t d = 0; d < D; ++d)
          delta += double(p.dout[row * D + d]) * double(out[row * D + d]);
        for (int64_t j = 0; j < Sk; ++j) {
          double sij = s[i * Sk + j];
          double pij = sij == -kInf || lse[row] == -kInf
                           ? 0
                           : std::exp(sij - double(lse[row]));
          double dp = 0;
          for (int64_t d = 0; d < D; ++d)
            dp += dor[row * D + d] * vr[(bhk * Sk + j) * D + d];
          double ds = r(c.type, float(pij * (dp - delta)));
          double pr = r(c.type, float(pij));
          for (int64_t d = 0; d < D; ++d) {
            ref.dq[row * D + d] += p.scale * ds * kr[(bhk * Sk + j) * D + d];
            ref.dk[(bhk * Sk + j) * D + d] += p.scale * ds * qr[row * D + d];
            ref.dv[(bhk * Sk + j) * D + d] += pr * dor[row * D + d];
          }
        }
      }
    }
}

//===----------------------------------------------------------------------===//
// Device buffers
//===----------------------------------------------------------------------===//

/// The driver's error, or empty when a GPU can be used.
std::string noDevice() {
  char error[4096];
  return shardx_rt_cuda_init(error, sizeof(error)) ? error : "";
}

#define REQUIRE_GPU()                                                          \
  if (std::string why = noDevice(); !why.empty())                              \
  FAIL() << "no usable GPU: " << why

/// A device buffer of `count` elements at element offset `offset` of its
/// allocation (descriptors with an offset, as the ABI allows), filled with
/// NaN (outputs must be overwritten) or `init`.
template <typename T> struct DeviceBuffer {
  MemRef1<T> desc{};
  int64_t count;

  DeviceBuffer(int64_t count, int64_t offset = 0) : count(count) {
    int64_t bytes = (count + offset) * int64_t(sizeof(T));
    T *p = static_cast<T *>(shardx_rt_cuda_alloc(std::max<int64_t>(bytes, 4)));
    desc = {p, p, offset, {count}, {1}};
    mgpuMemset32(p, 0x7fc00000u, size_t(bytes / 4), nullptr);
  }
  DeviceBuffer(const std::vector<T> &init, int64_t offset = 0)
      : DeviceBuffer(int64_t(init.size()), offset) {
    shardx_rt_cuda_copy(data(), init.data(), count * int64_t(sizeof(T)));
  }
  ~DeviceBuffer() { shardx_rt_cuda_free(desc.allocated); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  T *data() { return desc.aligned + desc.offset; }
  std::vector<T> read() {
    std::vector<T> host(count);
    shardx_rt_cuda_copy(host.data(), data(), count * int64_t(sizeof(T)));
    return host;
  }
};

struct Entries {
  decltype(&_mlir_ciface_shardx_rt_cuda_attention_bf16) forward;
  decltype(&_mlir_ciface_shardx_rt_cuda_attention_dq_bf16) dq;
  decltype(&_mlir_ciface_shardx_rt_cuda_attention_dkv_bf16) dkv;
};

Entries entriesOf(Type t) {
  if (t == Type::BF16)
    return {_mlir_ciface_shardx_rt_cuda_attention_bf16,
            _mlir_ciface_shardx_rt_cuda_attention_dq_bf16,
            _mlir_ciface_shardx_rt_cuda_attention_dkv_bf16};
  return {_mlir_ciface_shardx_rt_cuda_attention_f16,
          _mlir_ciface_shardx_rt_cuda_attention_dq_f16,
          _mlir_ciface_shardx_rt_cuda_attention_dkv_f16};
}

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

// Tolerances, relative to the largest |reference| of each tensor. The
// kernels round the same values as the reference, so what differs is f32
// against double arithmetic and summation order, plus an operand that lies
// within that error of a rounding tie and rounds the other way (an ulp of
// bf16, 2^-8 relative, on one term of a sum): the forward's terms are
// positive and its rows' maxima are large, the gradients' ds = p (dp -
// delta) are differences of nearby numbers and rounded again, so they get
// more room.
constexpr double kForwardTolerance = 2e-3;
constexpr double kGradTolerance = 1e-2;

/// The largest difference of `got` from `want` relative to max |want|;
/// fails on NaN, on -inf where `want` is finite and back, and on a
/// nonzero where `want` is exactly zero (rows that see no key, keys no
/// query sees).
double compare(const char *what, const std::vector<float> &got,
               const std::vector<double> &want, double tolerance) {
  EXPECT_EQ(got.size(), want.size()) << what;
  double largest = 0, worst = 0;
  size_t worstAt = 0;
  for (double w : want)
    if (std::isfinite(w))
      largest = std::max(largest, std::fabs(w));
  int reported = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    double g = got[i], w = want[i];
    bool bad =
        std::isnan(g) || (std::isinf(w) != std::isinf(g)) || (w == 0 && g != 0);
    if (bad && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << g << ", want " << w;
    if (std::isfinite(w) && std::isfinite(g) && std::fabs(g - w) > worst) {
      worst = std::fabs(g - w);
      worstAt = i;
    }
  }
  double relative = largest > 0 ? worst / largest : worst;
  EXPECT_LE(relative, tolerance)
      << what << ": max abs error " << worst << " at [" << worstAt
      << "] (max |ref| " << largest << ")";
  std::printf("  %-4s max abs error %.3e, relative %.3e (max |ref| %.3e)\n",
              what, worst, relative, largest);
  std::fflush(stdout);
  return relative;
}

class Attention : public ::testing::TestWithParam<Case> {};

TEST_P(Attention, MatchesReference) {
  REQUIRE_GPU();
  const Case &c = GetParam();
  Problem p = makeProblem(c, 1234);
  Reference ref;
  referenceForward(p, ref);
  std::vector<float> refOut(ref.out.begin(), ref.out.end()),
      refLse(ref.lse.begin(), ref.lse.end());
  referenceBackward(p, refOut, refLse, ref);

  int64_t rows = c.batch * c.heads * c.queries;
  int64_t kvRows = c.batch * c.kvHeads * c.keys;
  int64_t o = c.misaligned;
  DeviceBuffer<float> q(p.q, o), k(p.k, 3 * o), v(p.v, 2 * o),
      dout(p.dout, 5 * o);
  DeviceBuffer<int64_t> qpos(p.qpos, o), kpos(p.kpos, 3 * o);
  DeviceBuffer<float> refOutD(refOut, 2 * o), refLseD(refLse, o);
  Entries e = entriesOf(c.type);
  int32_t causal = p.causal();
  // Both kernel versions (v2 the default, then v1), each on fresh outputs.
  int32_t before = shardx_rt_cuda_attention_kernels(0);
  for (int32_t version : {2, 1}) {
    shardx_rt_cuda_attention_kernels(version);
    DeviceBuffer<float> out(rows * c.width, o), lse(rows, 3 * o);
    DeviceBuffer<float> dq(rows * c.width, 5 * o), dk(kvRows * c.width, o),
        dv(kvRows * c.width, 3 * o);
    e.forward(&q.desc, &k.desc, &v.desc, &qpos.desc, &kpos.desc, &out.desc,
              &lse.desc, c.batch, c.heads, c.kvHeads, c.queries, c.keys,
              c.width, causal, p.scale);
    e.dq(&q.desc, &k.desc, &v.desc, &refOutD.desc, &refLseD.desc, &dout.desc,
         &qpos.desc, &kpos.desc, &dq.desc, c.batch, c.heads, c.kvHeads,
         c.queries, c.keys, c.width, causal, p.scale);
    e.dkv(&q.desc, &k.desc, &v.desc, &refOutD.desc, &refLseD.desc, &dout.desc,
          &qpos.desc, &kpos.desc, &dk.desc, &dv.desc, c.batch, c.heads,
          c.kvHeads, c.queries, c.keys, c.width, causal, p.scale);
    shardx_rt_cuda_synchronize();

    std::printf("%s v%d (%s, B %lld H %lld Hk %lld Sq %lld Sk %lld D %lld)\n",
                c.name, version, c.type == Type::BF16 ? "bf16" : "f16",
                (long long)c.batch, (long long)c.heads, (long long)c.kvHeads,
                (long long)c.queries, (long long)c.keys, (long long)c.width);
    compare("out", out.read(), version == 2 ? ref.out2 : ref.out,
            kForwardTolerance);
    compare("lse", lse.read(), ref.lse, kForwardTolerance);
    compare("dq", dq.read(), ref.dq, kGradTolerance);
    compare("dk", dk.read(), ref.dk, kGradTolerance);
    compare("dv", dv.read(), ref.dv, kGradTolerance);
  }
  shardx_rt_cuda_attention_kernels(before);
}

constexpr Type kBF16 = Type::BF16, kF16 = Type::F16;

INSTANTIATE_TEST_SUITE_P(
    Cases, Attention,
    ::testing::Values(
        // name, type, batch, heads, kvHeads, queries, keys, width, positions
        Case{"causal_bf16_32", kBF16, 2, 4, 2, 77, 77, 32, Positions::Iota},
        Case{"causal_bf16_64", kBF16, 2, 4, 2, 77, 77, 64, Positions::Iota},
        Case{"causal_bf16_128", kBF16, 2, 4, 2, 77, 77, 128, Positions::Iota},
        Case{"causal_f16_32", kF16, 2, 4, 2, 77, 77, 32, Positions::Iota},
        Case{"causal_f16_64", kF16, 2, 4, 2, 77, 77, 64, Positions::Iota},
        Case{"causal_f16_128", kF16, 2, 4, 2, 77, 77, 128, Positions::Iota,
             true},
        Case{"offset_bf16_64", kBF16, 1, 2, 2, 45, 130, 64, Positions::Offset,
             true},
        Case{"offset_f16_128", kF16, 1, 4, 1, 77, 130, 128, Positions::Offset},
        Case{"shuffled_bf16_128", kBF16, 2, 4, 2, 77, 45, 128,
             Positions::Shuffled},
        Case{"shuffled_f16_32", kF16, 1, 4, 1, 45, 77, 32, Positions::Shuffled,
             true},
        Case{"no_key_rows_f16_64", kF16, 2, 4, 2, 77, 45, 64, Positions::Late,
             true},
        Case{"no_key_rows_bf16_32", kBF16, 1, 2, 1, 20, 45, 32,
             Positions::Late},
        Case{"full_f16_128", kF16, 2, 4, 4, 77, 45, 128, Positions::None},
        Case{"full_bf16_64", kBF16, 2, 4, 1, 77, 45, 64, Positions::None, true},
        Case{"full_bf16_32", kBF16, 1, 4, 2, 130, 200, 32, Positions::None},
        Case{"gqa_one_kv_head_bf16_64", kBF16, 1, 4, 1, 100, 100, 64,
             Positions::Iota},
        Case{"one_query_bf16_64", kBF16, 2, 4, 2, 1, 77, 64, Positions::None},
        Case{"one_query_f16_128", kF16, 1, 2, 1, 1, 45, 128,
             Positions::Shuffled},
        Case{"one_key_f16_32", kF16, 2, 4, 2, 45, 1, 32, Positions::Iota, true},
        Case{"one_key_bf16_128", kBF16, 1, 2, 2, 77, 1, 128, Positions::None},
        Case{"long_bf16_64", kBF16, 1, 2, 1, 300, 300, 64, Positions::Iota}),
    [](const ::testing::TestParamInfo<Case> &info) {
      return std::string(info.param.name);
    });

//===----------------------------------------------------------------------===//
// Timing (not counted)
//===----------------------------------------------------------------------===//

// A parameterized suite, so that it runs after the cases (gtest runs plain
// tests first).
class AttentionTiming : public ::testing::TestWithParam<int> {};

TEST_P(AttentionTiming, CausalBf16) {
  REQUIRE_GPU();
  const int64_t B = 8, H = 12, S = 1024, D = 64, iterations = 20;
  Case c{"timing", kBF16, B, H, H, S, S, D, Positions::Iota};
  Problem p = makeProblem(c, 7);
  int64_t n = B * H * S * D;
  DeviceBuffer<float> q(p.q), k(p.k), v(p.v), dout(p.dout), out(n),
      lse(B * H * S), dq(n), dk(n), dv(n);
  DeviceBuffer<int64_t> qpos(p.qpos), kpos(p.kpos);
  auto forward = [&] {
    _mlir_ciface_shardx_rt_cuda_attention_bf16(
        &q.desc, &k.desc, &v.desc, &qpos.desc, &kpos.desc, &out.desc, &lse.desc,
        B, H, H, S, S, D, 1, p.scale);
  };
  auto dqPass = [&] {
    _mlir_ciface_shardx_rt_cuda_attention_dq_bf16(
        &q.desc, &k.desc, &v.desc, &out.desc, &lse.desc, &dout.desc, &qpos.desc,
        &kpos.desc, &dq.desc, B, H, H, S, S, D, 1, p.scale);
  };
  auto dkvPass = [&] {
    _mlir_ciface_shardx_rt_cuda_attention_dkv_bf16(
        &q.desc, &k.desc, &v.desc, &out.desc, &lse.desc, &dout.desc, &qpos.desc,
        &kpos.desc, &dk.desc, &dv.desc, B, H, H, S, S, D, 1, p.scale);
  };
  // One product of the causal half: S x S x D / 2 multiply-adds per head.
  double gemm = 2.0 * B * H * S * S * D / 2;
  auto time = [&](const char *what, auto &&pass, double gemms,
                  const char *counted) {
    pass(); // warm-up (module load, first launch)
    shardx_rt_cuda_synchronize();
    auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iterations; ++i)
      pass();
    shardx_rt_cuda_synchronize();
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count() /
                iterations;
    std::printf("%-8s %8.3f ms  %7.1f TFLOP/s (%s)\n", what, ms,
                gemms * gemm / (ms * 1e-3) / 1e12, counted);
    std::fflush(stdout);
  };
  int32_t before = shardx_rt_cuda_attention_kernels(0);
  for (int32_t version : {1, 2}) {
    shardx_rt_cuda_attention_kernels(version);
    std::printf("causal bf16 attention, kernels v%d, B %lld H %lld S %lld D "
                "%lld, %lld iterations each\n",
                version, (long long)B, (long long)H, (long long)S, (long long)D,
                (long long)iterations);
    time("forward", forward, 2,
         version == 1 ? "QK^T and PV; the kernel runs QK^T twice"
                      : "QK^T and PV, one pass");
    time("dq", dqPass, 3, "QK^T, dO V^T, dS K");
    time("dkv", dkvPass, 4, "KQ^T, V dO^T, P^T dO, dS^T Q");
    time(
        "backward",
        [&] {
          dqPass();
          dkvPass();
        },
        7, "dq and dkv");
    std::vector<float> o = out.read();
    EXPECT_TRUE(std::none_of(o.begin(), o.end(),
                             [](float x) { return std::isnan(x); }));
  }
  shardx_rt_cuda_attention_kernels(before);
}

INSTANTIATE_TEST_SUITE_P(Last, AttentionTiming, ::testing::Values(0));

} // namespace
