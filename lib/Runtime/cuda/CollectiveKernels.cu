//===- CollectiveKernels.cu - Reductions of the cuda-local collectives ----===//
//
// Part of ShardX.
//
// Compiled to PTX by nvcc at build time and embedded in the cuda-local
// communicator (loaded with cuModuleLoadData), so the runtime has no CUDA
// link dependency. One kernel per element type and reduction:
// out[i] = in[0][i] op in[1][i] op ... op in[n-1][i], in member order as on
// the CPU backends (avg sums and divides by n; integer avg truncates; max
// and min propagate NaN like reduceInto in shardx/Layout/Layout.h). Each
// element is read from every input before it is written, so `out` may be
// one of the inputs. bf16 and f16 accumulate in f32 across the members and
// are rounded once.
//
//===----------------------------------------------------------------------===//

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/// The members' buffers, by value in the kernel's parameters.
constexpr int kMaxMembers = 16;
struct Inputs {
  const void *p[kMaxMembers];
};

enum Op { Sum, Avg, Max, Min, Prod };

template <typename T, Op op> __device__ T combine(T acc, T v) {
  if (op == Sum || op == Avg)
    return acc + v;
  if (op == Prod)
    return acc * v;
  if (op == Max)
    return (v > acc || v != v) ? v : acc;
  return (v < acc || v != v) ? v : acc;
}

template <typename T, Op op>
__device__ void reduce(T *out, const Inputs &in, int n, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    T acc = static_cast<const T *>(in.p[0])[i];
    for (int k = 1; k < n; ++k)
      acc = combine<T, op>(acc, static_cast<const T *>(in.p[k])[i]);
    if (op == Avg)
      acc = acc / static_cast<T>(n);
    out[i] = acc;
  }
}

/// The 16-bit float types' f32 image and rounding back.
__device__ float toFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ float toFloat(__half v) { return __half2float(v); }
template <typename H> __device__ H fromFloat(float v);
template <> __device__ __nv_bfloat16 fromFloat(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __half fromFloat(float v) { return __float2half_rn(v); }

template <typename H, Op op>
__device__ void reduceHalf(H *out, const Inputs &in, int n, int64_t count) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count;
       i += int64_t(gridDim.x) * blockDim.x) {
    float acc = toFloat(static_cast<const H *>(in.p[0])[i]);
    for (int k = 1; k < n; ++k)
      acc =
          combine<float, op>(acc, toFloat(static_cast<const H *>(in.p[k])[i]));
    if (op == Avg)
      acc = acc / float(n);
    out[i] = fromFloat<H>(acc);
  }
}

#define SHARDX_REDUCE_HALF(H, TNAME, OP, OPNAME)                               \
  extern "C" __global__ void shardx_reduce_##TNAME##_##OPNAME(                 \
      H *out, const __grid_constant__ Inputs in, int n, int64_t count) {       \
    reduceHalf<H, OP>(out, in, n, count);                                      \
  }

#define SHARDX_REDUCE(T, TNAME, OP, OPNAME)                                    \
  extern "C" __global__ void shardx_reduce_##TNAME##_##OPNAME(                 \
      T *out, const __grid_constant__ Inputs in, int n, int64_t count) {       \
    reduce<T, OP>(out, in, n, count);                                          \
  }
#define SHARDX_REDUCE_ALL(T, TNAME)                                            \
  SHARDX_REDUCE(T, TNAME, Sum, sum)                                            \
  SHARDX_REDUCE(T, TNAME, Avg, avg)                                            \
  SHARDX_REDUCE(T, TNAME, Max, max)                                            \
  SHARDX_REDUCE(T, TNAME, Min, min)                                            \
  SHARDX_REDUCE(T, TNAME, Prod, prod)

SHARDX_REDUCE_ALL(float, f32)
SHARDX_REDUCE_ALL(double, f64)
SHARDX_REDUCE_ALL(int32_t, i32)
SHARDX_REDUCE_ALL(int64_t, i64)

SHARDX_REDUCE_HALF(__nv_bfloat16, bf16, Sum, sum)
SHARDX_REDUCE_HALF(__nv_bfloat16, bf16, Avg, avg)
SHARDX_REDUCE_HALF(__nv_bfloat16, bf16, Max, max)
SHARDX_REDUCE_HALF(__nv_bfloat16, bf16, Min, min)
SHARDX_REDUCE_HALF(__nv_bfloat16, bf16, Prod, prod)
SHARDX_REDUCE_HALF(__half, f16, Sum, sum)
SHARDX_REDUCE_HALF(__half, f16, Avg, avg)
SHARDX_REDUCE_HALF(__half, f16, Max, max)
SHARDX_REDUCE_HALF(__half, f16, Min, min)
SHARDX_REDUCE_HALF(__half, f16, Prod, prod)
