// RUN: shardx-opt --shardx-split-shared-empty-tensors --split-input-file %s | FileCheck %s

// Tests that a zero fill of a fresh tensor used by two ops is cloned for
// each, right before it, each clone with its own tensor.empty, so that
// bufferization need not copy one buffer both ops write into and each GEMM
// has its zero fill right before it (beta = 0 in shardx-contractions-to-blas;
// before, the second GEMM kept the first fill, with the first GEMM between).
// CHECK-LABEL: func.func @shared_fill
// CHECK:      %[[E0:.*]] = tensor.empty() : tensor<4x4xf32>
// CHECK-NEXT: %[[F0:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E0]] : tensor<4x4xf32>)
// CHECK-NEXT: %[[M0:.*]] = linalg.matmul ins(%arg0, %arg1 : {{.*}}) outs(%[[F0]] : tensor<4x4xf32>)
// CHECK-NEXT: %[[E1:.*]] = tensor.empty() : tensor<4x4xf32>
// CHECK-NEXT: %[[F1:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E1]] : tensor<4x4xf32>)
// CHECK-NEXT: %[[M1:.*]] = linalg.matmul ins(%arg1, %arg0 : {{.*}}) outs(%[[F1]] : tensor<4x4xf32>)
// CHECK-NEXT: return %[[M0]], %[[M1]]
func.func @shared_fill(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %m0 = linalg.matmul ins(%a, %b : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  %m1 = linalg.matmul ins(%b, %a : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %m0, %m1 : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// Tests that a tensor.empty with one use is left alone.
// CHECK-LABEL: func.func @single_use
// CHECK-COUNT-1: tensor.empty
// CHECK-NOT: tensor.empty
func.func @single_use(%a: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %0 = linalg.copy ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Tests that a fill with one use moves right before its reader (its empty
// tensor, used once, stays).
// CHECK-LABEL: func.func @far_fill
// CHECK:      %[[E:.*]] = tensor.empty() : tensor<4x4xf32>
// CHECK:      %[[S:.*]] = linalg.exp
// CHECK-NEXT: %[[F:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E]] : tensor<4x4xf32>)
// CHECK-NEXT: linalg.matmul ins(%[[S]], %arg1 : {{.*}}) outs(%[[F]] : tensor<4x4xf32>)
func.func @far_fill(%a: tensor<4x4xf32>, %b: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x4xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %e2 = tensor.empty() : tensor<4x4xf32>
  %s = linalg.exp ins(%a : tensor<4x4xf32>) outs(%e2 : tensor<4x4xf32>) -> tensor<4x4xf32>
  %m = linalg.matmul ins(%s, %b : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  return %m : tensor<4x4xf32>
}
