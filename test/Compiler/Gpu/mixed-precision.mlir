// Tests the cuda target on bf16 programs: a bf16 GEMM stays one cuBLAS call
// on bf16 A, B and C (the runtime passes CUBLAS_COMPUTE_32F, so cuBLAS
// accumulates in f32), a bf16 sum is accumulated in f32 by its kernel and
// rounded once, and the PTX of the bf16 kernels assembles for sm_90.

// REQUIRES: cuda-toolkit
// RUN: shardx-compile --target=cuda --emit=mlir %s -o - | FileCheck %s
// RUN: shardx-compile --target=cuda --emit=ptx %s -o %t.ptx
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// The runtime's bf16 GEMM asks cuBLAS for f32 accumulation.
// RUN: FileCheck %s --check-prefix=RT < %shardx_src_root/lib/Runtime/cuda/CudaRuntime.cpp

// CHECK-LABEL: llvm.func @gemm_then_sum(
// CHECK: llvm.call @shardx_rt_cuda_gemm_bf16(
// CHECK-NOT: llvm.call @shardx_rt_cuda_gemm
// CHECK: gpu.launch_func
// CHECK: llvm.return

// The sum's kernel extends bf16 loads to f32, adds in f32 and rounds to
// bf16 once per output element.
// PTX: cvt.f32.bf16
// PTX: add.rn.f32
// PTX: cvt.rn.bf16.f32

// RT: constexpr int kCublasCompute32F = 68;
// RT: &beta, pc, type, int(ldc), sc, int(batch), kCublasCompute32F,
// RT: &beta, pc, type, int(ldc), sc, int(batch), kCublasCompute32F,
// RT: SHARDX_CUDA_GEMM(f16, kCudaR16F, 2)
// RT: SHARDX_CUDA_GEMM(bf16, kCudaR16BF, 2)
func.func @gemm_then_sum(%a: tensor<64x128xbf16>, %b: tensor<128x32xbf16>) -> tensor<32xbf16> {
  %c0 = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<64x32xbf16>
  %z = linalg.fill ins(%c0 : bf16) outs(%e : tensor<64x32xbf16>) -> tensor<64x32xbf16>
  %y = linalg.matmul ins(%a, %b : tensor<64x128xbf16>, tensor<128x32xbf16>) outs(%z : tensor<64x32xbf16>) -> tensor<64x32xbf16>
  %es = tensor.empty() : tensor<32xbf16>
  %zs = linalg.fill ins(%c0 : bf16) outs(%es : tensor<32xbf16>) -> tensor<32xbf16>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>], iterator_types = ["reduction", "parallel"]} ins(%y : tensor<64x32xbf16>) outs(%zs : tensor<32xbf16>) {
  ^bb0(%in: bf16, %out: bf16):
    %t = arith.addf %in, %out : bf16
    linalg.yield %t : bf16
  } -> tensor<32xbf16>
  return %s : tensor<32xbf16>
}
