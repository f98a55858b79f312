// Tests the cuda target on bf16 programs: a bf16 GEMM stays one cuBLAS call
// on bf16 A, B and C (the runtime passes CUBLAS_COMPUTE_32F, so cuBLAS
// accumulates in f32), an f32 GEMM of widened bf16 values is one cuBLAS
// call on the bf16 values with an f32 C (shardx-narrow-gemm-operands), a
// bf16 sum is accumulated in f32 by its kernel and rounded once, and the
// PTX of the bf16 kernels assembles for sm_90.

// REQUIRES: cuda-toolkit
// RUN: shardx-compile --target=cuda --emit=mlir %s -o - | FileCheck %s
// RUN: shardx-compile --target=cuda --emit=ptx %s -o %t.ptx
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: %ptxas -arch=sm_90 %t.ptx -o %t.cubin
// The runtime's bf16 GEMM asks cuBLAS for f32 accumulation.
// RUN: FileCheck %s --check-prefix=RT < %shardx_src_root/lib/Runtime/cuda/CudaRuntime.cpp
// The narrowing alone, on tensors after fusion.
// RUN: shardx-opt %s --pass-pipeline='builtin.module(func.func(convert-elementwise-to-linalg),shardx-fuse-tensor-ops,shardx-narrow-gemm-operands,canonicalize,cse)' | FileCheck %s --check-prefix=PASS

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
// RT: &beta, pc, cType, int(ldc), sc, int(batch), kCublasCompute32F,
// RT: &beta, pc, cType, int(ldc), sc, int(batch), kCublasCompute32F,
// RT: SHARDX_CUDA_GEMM(f16, kCudaR16F, 2, kCudaR16F, 2)
// RT: SHARDX_CUDA_GEMM(bf16, kCudaR16BF, 2, kCudaR16BF, 2)
// RT: SHARDX_CUDA_GEMM(f16_f32, kCudaR16F, 2, kCudaR32F, 4)
// RT: SHARDX_CUDA_GEMM(bf16_f32, kCudaR16BF, 2, kCudaR32F, 4)
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

// Attention scores as PyTorch's CPU attention writes them under autocast:
// q and k widened to f32, k transposed, an f32 batched GEMM. The GEMM reads
// the bf16 q and k (k through a transposed map) and widens them in its
// body; no widening kernel is left.
// CHECK-LABEL: llvm.func @scores(
// CHECK-NOT: gpu.launch_func
// CHECK: llvm.call @shardx_rt_cuda_gemm_batched_bf16_f32(
// CHECK-NOT: gpu.launch_func
// CHECK: llvm.return
// PASS-LABEL: func.func @scores(
// PASS-SAME: %[[Q:.*]]: tensor<4x8x16xbf16>, %[[K:.*]]: tensor<4x8x16xbf16>
// PASS-NOT: linalg.generic
// PASS: linalg.generic
// PASS-SAME: iterator_types = ["parallel", "parallel", "parallel", "reduction"]
// PASS-SAME: ins(%[[Q]], %[[K]] : tensor<4x8x16xbf16>, tensor<4x8x16xbf16>)
// PASS-NEXT: ^bb0(%[[A:.*]]: bf16, %[[B:.*]]: bf16, %[[OUT:.*]]: f32):
// PASS-NEXT: %[[WA:.*]] = arith.extf %[[A]] : bf16 to f32
// PASS-NEXT: %[[WB:.*]] = arith.extf %[[B]] : bf16 to f32
// PASS-NEXT: %[[M:.*]] = arith.mulf %[[WA]], %[[WB]] : f32
// PASS-NEXT: arith.addf %[[OUT]], %[[M]] : f32
// PASS-NOT: linalg.generic
// PASS: return
func.func @scores(%q: tensor<4x8x16xbf16>, %k: tensor<4x8x16xbf16>) -> tensor<4x8x8xf32> {
  %qf = arith.extf %q : tensor<4x8x16xbf16> to tensor<4x8x16xf32>
  %kf = arith.extf %k : tensor<4x8x16xbf16> to tensor<4x8x16xf32>
  %e = tensor.empty() : tensor<4x16x8xf32>
  %kt = linalg.transpose ins(%kf : tensor<4x8x16xf32>) outs(%e : tensor<4x16x8xf32>) permutation = [0, 2, 1]
  %c0 = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<4x8x8xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e2 : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  %s = linalg.batch_matmul ins(%qf, %kt : tensor<4x8x16xf32>, tensor<4x16x8xf32>) outs(%z : tensor<4x8x8xf32>) -> tensor<4x8x8xf32>
  return %s : tensor<4x8x8xf32>
}

// Probabilities rounded to bf16 and widened again (flash attention's
// precision): the rounding becomes a kernel writing bf16, which the GEMM
// reads.
// CHECK-LABEL: llvm.func @rounded(
// CHECK: gpu.launch_func
// CHECK-NOT: gpu.launch_func
// CHECK: llvm.call @shardx_rt_cuda_gemm_batched_bf16_f32(
// PASS-LABEL: func.func @rounded(
// PASS: %[[P16:.*]] = linalg.generic
// PASS: arith.truncf %{{.*}} : f32 to bf16
// PASS-NOT: arith.extf
// PASS: linalg.yield %{{.*}} : bf16
// PASS: linalg.generic
// PASS-SAME: ins(%[[P16]], %{{.*}} : tensor<4x8x8xbf16>, tensor<4x8x16xbf16>)
func.func @rounded(%p: tensor<4x8x8xf32>, %v: tensor<4x8x16xbf16>) -> tensor<4x8x16xf32> {
  %p16 = arith.truncf %p : tensor<4x8x8xf32> to tensor<4x8x8xbf16>
  %pf = arith.extf %p16 : tensor<4x8x8xbf16> to tensor<4x8x8xf32>
  %vf = arith.extf %v : tensor<4x8x16xbf16> to tensor<4x8x16xf32>
  %c0 = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<4x8x16xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e2 : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %o = linalg.batch_matmul ins(%pf, %vf : tensor<4x8x8xf32>, tensor<4x8x16xf32>) outs(%z : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return %o : tensor<4x8x16xf32>
}

// One operand a true f32 value: the GEMM stays f32 (cuBLAS takes one type
// for A and B), after the widening kernel.
// CHECK-LABEL: llvm.func @one_wide(
// CHECK: gpu.launch_func
// CHECK: llvm.call @shardx_rt_cuda_gemm_batched_f32(
// PASS-LABEL: func.func @one_wide(
// PASS: arith.extf
// PASS: linalg.generic
// PASS-SAME: ins(%{{.*}}, %{{.*}} : tensor<4x8x8xf32>, tensor<4x8x16xf32>)
func.func @one_wide(%p: tensor<4x8x8xf32>, %v: tensor<4x8x16xbf16>) -> tensor<4x8x16xf32> {
  %vf = arith.extf %v : tensor<4x8x16xbf16> to tensor<4x8x16xf32>
  %c0 = arith.constant 0.0 : f32
  %e2 = tensor.empty() : tensor<4x8x16xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e2 : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %o = linalg.batch_matmul ins(%p, %vf : tensor<4x8x8xf32>, tensor<4x8x16xf32>) outs(%z : tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  return %o : tensor<4x8x16xf32>
}
