// Tests the cuda target's lowering: GEMMs become cuBLAS runtime calls
// (transposed operands as views, f32, f16, bf16, batched), an elementwise
// chain becomes one kernel, 0-d ops and full reductions run on the device,
// and every kernel lands in one PTX module that ptxas accepts for sm_90
// without spills.

// REQUIRES: cuda-toolkit
// RUN: shardx-compile --target=cuda --emit=mlir %s -o - | FileCheck %s
// RUN: shardx-compile --target=cuda --emit=ptx %s -o %t.ptx
// RUN: FileCheck %s --check-prefix=PTX < %t.ptx
// RUN: %ptxas -arch=sm_90 -v %t.ptx -o %t.cubin > %t.log 2>&1
// RUN: FileCheck %s --check-prefix=PTXAS < %t.log
// No kernel spills a register.
// RUN: not grep -E "[1-9][0-9]* bytes spill" %t.log

// CHECK-LABEL: llvm.func @gemm_gelu(
// One cuBLAS call reading the transposed weight as a view, beta = 0.
// CHECK: llvm.call @shardx_rt_cuda_gemm_f32(
// The tanh-GELU chain (nine elementwise ops) is one kernel.
// CHECK: gpu.launch_func @shardx_kernels::@gemm_gelu_kernel
// CHECK-NOT: gpu.launch_func
// CHECK: llvm.return
func.func @gemm_gelu(%x: tensor<64x128xf32>, %w: tensor<32x128xf32>) -> tensor<64x32xf32> {
  %c0 = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %one = arith.constant 1.0 : f32
  %k0 = arith.constant 0.7978845608 : f32
  %k1 = arith.constant 0.044715 : f32
  %e = tensor.empty() : tensor<64x32xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<64x32xf32>) -> tensor<64x32xf32>
  %et = tensor.empty() : tensor<128x32xf32>
  %wt = linalg.transpose ins(%w : tensor<32x128xf32>) outs(%et : tensor<128x32xf32>) permutation = [1, 0]
  %y = linalg.matmul ins(%x, %wt : tensor<64x128xf32>, tensor<128x32xf32>) outs(%z : tensor<64x32xf32>) -> tensor<64x32xf32>
  %sh = tensor.splat %half : tensor<64x32xf32>
  %so = tensor.splat %one : tensor<64x32xf32>
  %s0 = tensor.splat %k0 : tensor<64x32xf32>
  %s1 = tensor.splat %k1 : tensor<64x32xf32>
  %y2 = arith.mulf %y, %y : tensor<64x32xf32>
  %y3 = arith.mulf %y2, %y : tensor<64x32xf32>
  %a = arith.mulf %y3, %s1 : tensor<64x32xf32>
  %b = arith.addf %y, %a : tensor<64x32xf32>
  %c = arith.mulf %b, %s0 : tensor<64x32xf32>
  %t = math.tanh %c : tensor<64x32xf32>
  %d = arith.addf %t, %so : tensor<64x32xf32>
  %f = arith.mulf %d, %sh : tensor<64x32xf32>
  %g = arith.mulf %f, %y : tensor<64x32xf32>
  return %g : tensor<64x32xf32>
}

// CHECK-LABEL: llvm.func @half_gemms(
// CHECK-DAG: llvm.call @shardx_rt_cuda_gemm_f16(
// CHECK-DAG: llvm.call @shardx_rt_cuda_gemm_batched_bf16(
// CHECK: llvm.return
func.func @half_gemms(%a: tensor<16x32xf16>, %b: tensor<32x8xf16>, %p: tensor<4x16x32xbf16>, %q: tensor<4x32x8xbf16>) -> (tensor<16x8xf16>, tensor<4x16x8xbf16>) {
  %c0 = arith.constant 0.0 : f16
  %e = tensor.empty() : tensor<16x8xf16>
  %z = linalg.fill ins(%c0 : f16) outs(%e : tensor<16x8xf16>) -> tensor<16x8xf16>
  %y = linalg.matmul ins(%a, %b : tensor<16x32xf16>, tensor<32x8xf16>) outs(%z : tensor<16x8xf16>) -> tensor<16x8xf16>
  %cb = arith.constant 0.0 : bf16
  %eb = tensor.empty() : tensor<4x16x8xbf16>
  %zb = linalg.fill ins(%cb : bf16) outs(%eb : tensor<4x16x8xbf16>) -> tensor<4x16x8xbf16>
  %yb = linalg.batch_matmul ins(%p, %q : tensor<4x16x32xbf16>, tensor<4x32x8xbf16>) outs(%zb : tensor<4x16x8xbf16>) -> tensor<4x16x8xbf16>
  return %y, %yb : tensor<16x8xf16>, tensor<4x16x8xbf16>
}

// A full reduction and a 0-d op run on the device, not on the host: three
// kernels (the zero fill, the sum, the scale) and no GEMM; the f32 sum runs
// on many threads that add their partial sums atomically (PTX below).
// CHECK-LABEL: llvm.func @full_reduction(
// CHECK-NOT: shardx_rt_cuda_gemm
// CHECK-COUNT-3: gpu.launch_func @shardx_kernels::
// CHECK-NOT: gpu.launch_func
// CHECK: llvm.return
func.func @full_reduction(%x: tensor<64x32xf32>) -> tensor<f32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<f32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<f32>) -> tensor<f32>
  %s = linalg.reduce ins(%x : tensor<64x32xf32>) outs(%z : tensor<f32>) dimensions = [0, 1]
    (%a: f32, %b: f32) {
      %r = arith.addf %a, %b : f32
      linalg.yield %r : f32
    }
  %scale = arith.constant dense<0.5> : tensor<f32>
  %m = arith.mulf %s, %scale : tensor<f32>
  return %m : tensor<f32>
}

// A sum over the leading dim (a bias gradient) is one kernel with a thread
// per column, not a host loop launching a kernel per row: no branch in the
// host function.
// CHECK-LABEL: llvm.func @column_sum(
// CHECK-NOT: llvm.cond_br
// CHECK: gpu.launch_func @shardx_kernels::
// CHECK-NOT: llvm.cond_br
// CHECK: gpu.launch_func @shardx_kernels::
// CHECK-NOT: llvm.cond_br
// CHECK: llvm.return
func.func @column_sum(%x: tensor<64x32xf32>) -> tensor<32xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<32xf32>) -> tensor<32xf32>
  %s = linalg.reduce ins(%x : tensor<64x32xf32>) outs(%z : tensor<32xf32>) dimensions = [0]
    (%a: f32, %b: f32) {
      %r = arith.addf %a, %b : f32
      linalg.yield %r : f32
    }
  return %s : tensor<32xf32>
}

// A long column sum (8192 rows, 768 columns: a GPT-2 bias gradient) is two
// kernels after the fill: chunks of rows summed in parallel into a
// temporary, then each column plus its chunks' partial sums; the
// temporary is freed after.
// CHECK-LABEL: llvm.func @long_column_sum(
// CHECK: gpu.launch_func @shardx_kernels::@{{.*}} blocks
// CHECK: %[[T:.*]] = llvm.call @_mlir_memref_to_llvm_alloc(
// CHECK: gpu.launch_func @shardx_kernels::@{{.*}} blocks
// CHECK: gpu.launch_func @shardx_kernels::@{{.*}} blocks
// CHECK: llvm.call @_mlir_memref_to_llvm_free(%[[T]])
// CHECK: llvm.return
func.func @long_column_sum(%x: tensor<8192x768xf32>) -> tensor<768xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<768xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<768xf32>) -> tensor<768xf32>
  %s = linalg.reduce ins(%x : tensor<8192x768xf32>) outs(%z : tensor<768xf32>) dimensions = [0]
    (%a: f32, %b: f32) {
      %r = arith.addf %a, %b : f32
      linalg.yield %r : f32
    }
  return %s : tensor<768xf32>
}

// A constant GEMM operand is copied from its host global to the device
// before cuBLAS reads it.
// CHECK-LABEL: llvm.func @constant_weight(
// CHECK: llvm.mlir.addressof @__constant_
// CHECK: llvm.call @shardx_rt_cuda_memcpy(
// CHECK: llvm.call @shardx_rt_cuda_gemm_f32(
// CHECK: llvm.return
func.func @constant_weight(%x: tensor<4x2xf32>) -> tensor<4x3xf32> {
  %w = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x3xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x3xf32>) -> tensor<4x3xf32>
  %y = linalg.matmul ins(%x, %w : tensor<4x2xf32>, tensor<2x3xf32>) outs(%z : tensor<4x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}

// The kernels are in one module with the PTX of sm_90; tanh comes from
// libdevice (no unresolved .extern).
// CHECK: gpu.binary @shardx_kernels
// CHECK-SAME: chip = "sm_90"

// PTX: .target sm_90
// PTX-NOT: .extern
// PTX: .entry gemm_gelu_kernel(
// PTX: .entry full_reduction_kernel_0(
// PTX: atom.global.add.f32

// PTXAS-NOT: error
// PTXAS: Compiling entry function 'gemm_gelu_kernel' for 'sm_90'
// PTXAS-NEXT: Function properties for gemm_gelu_kernel
// PTXAS-NEXT: 0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
