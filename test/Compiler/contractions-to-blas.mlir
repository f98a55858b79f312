// RUN: shardx-opt --shardx-contractions-to-blas --split-input-file %s | FileCheck %s

// A GEMM after a zero fill of its result: one BLAS call with beta = 0 (flag
// 0), the fill is gone.
// CHECK-LABEL: func.func @fill_then_matmul
// CHECK-NOT: linalg.fill
// CHECK: %[[Z:.*]] = arith.constant 0 : i32
// CHECK: call @shardx_rt_matmul_f32(%{{.*}}, %{{.*}}, %{{.*}}, %[[Z]])
// CHECK-NOT: linalg
func.func @fill_then_matmul(%a: memref<4x8xf32>, %b: memref<8x16xf32>, %c: memref<4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<4x16xf32>)
  linalg.matmul ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>)
  return
}

// -----

// Accumulating into a buffer that was not just zeroed keeps beta = 1; a
// fill of another value is not folded.
// CHECK-LABEL: func.func @accumulate
// CHECK: linalg.fill
// CHECK: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK: call @shardx_rt_matmul_f64(%{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]])
func.func @accumulate(%a: memref<4x8xf64>, %b: memref<8x16xf64>, %c: memref<4x16xf64>) {
  %one = arith.constant 1.0 : f64
  linalg.fill ins(%one : f64) outs(%c : memref<4x16xf64>)
  linalg.matmul ins(%a, %b : memref<4x8xf64>, memref<8x16xf64>) outs(%c : memref<4x16xf64>)
  return
}

// -----

// Transposed operands and a transposed result become memref.transpose views
// (BLAS takes them through its transpose flags and leading dimensions).
// CHECK-LABEL: func.func @transposed
// CHECK-DAG: %[[AT:.*]] = memref.transpose %arg0 (d0, d1) -> (d1, d0)
// CHECK-DAG: %[[BT:.*]] = memref.transpose %arg1 (d0, d1) -> (d1, d0)
// CHECK-DAG: %[[CT:.*]] = memref.transpose %arg2 (d0, d1) -> (d1, d0)
// CHECK-DAG: %[[A:.*]] = memref.cast %[[AT]]
// CHECK-DAG: %[[B:.*]] = memref.cast %[[BT]]
// CHECK-DAG: %[[C:.*]] = memref.cast %[[CT]]
// CHECK: call @shardx_rt_matmul_f32(%[[A]], %[[B]], %[[C]],
func.func @transposed(%a: memref<8x4xf32>, %b: memref<16x8xf32>, %c: memref<16x4xf32>) {
  linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (k, m)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (n, m)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %b : memref<8x4xf32>, memref<16x8xf32>) outs(%c : memref<16x4xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// A batched GEMM with B transposed.
// CHECK-LABEL: func.func @batched
// CHECK: memref.transpose %arg1 (d0, d1, d2) -> (d0, d2, d1)
// CHECK: call @shardx_rt_batch_matmul_f32(
func.func @batched(%a: memref<3x4x5xf32>, %b: memref<3x2x5xf32>, %c: memref<3x4x2xf32>) {
  linalg.generic {indexing_maps = [affine_map<(b, m, n, k) -> (b, m, k)>, affine_map<(b, m, n, k) -> (b, n, k)>, affine_map<(b, m, n, k) -> (b, m, n)>], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%a, %b : memref<3x4x5xf32>, memref<3x2x5xf32>) outs(%c : memref<3x4x2xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Not a GEMM for BLAS: a contraction with a broadcast operand, a mixed
// precision one, and an integer one stay linalg (lowered to loops).
// CHECK-LABEL: func.func @not_blas
// CHECK-NOT: call
// CHECK: linalg.generic
// CHECK: linalg.matmul ins(%arg3, %arg4
// CHECK: linalg.matmul ins(%arg5, %arg6
// CHECK-NOT: call
func.func @not_blas(%a: memref<4x8xf32>, %v: memref<8xf32>, %c: memref<4x16xf32>,
                    %h: memref<4x8xf16>, %hb: memref<8x16xf16>, %i: memref<4x8xi32>,
                    %ib: memref<8x16xi32>, %ic: memref<4x16xi32>) {
  linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %v : memref<4x8xf32>, memref<8xf32>) outs(%c : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  }
  linalg.matmul ins(%h, %hb : memref<4x8xf16>, memref<8x16xf16>) outs(%c : memref<4x16xf32>)
  linalg.matmul ins(%i, %ib : memref<4x8xi32>, memref<8x16xi32>) outs(%ic : memref<4x16xi32>)
  return
}

// -----

// Tests that a contraction whose operands are rounded to bf16 and widened
// back in its body (f32 tensors cast to bf16 before a matmul, fused) stays
// loops: a BLAS call would multiply the unrounded f32 values.
// CHECK-LABEL: func.func @rounded_operands
// CHECK-NOT: call @shardx_rt_matmul
// CHECK: linalg.generic
// CHECK: arith.truncf
func.func @rounded_operands(%a: memref<4x8xf32>, %b: memref<8x16xf32>, %c: memref<4x16xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%c : memref<4x16xf32>)
  linalg.generic {indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%a, %b : memref<4x8xf32>, memref<8x16xf32>) outs(%c : memref<4x16xf32>) {
  ^bb0(%x: f32, %y: f32, %o: f32):
    %xr = arith.truncf %x : f32 to bf16
    %yr = arith.truncf %y : f32 to bf16
    %xw = arith.extf %xr : bf16 to f32
    %yw = arith.extf %yr : bf16 to f32
    %p = arith.mulf %xw, %yw : f32
    %s = arith.addf %o, %p : f32
    linalg.yield %s : f32
  }
  return
}
