// RUN: shardx-opt %s --shardx-convert-to-runtime --one-shot-bufferize="bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map" | FileCheck %s

// Tests that a synchronous collective reads its input's buffer in place
// where that buffer is contiguous (an argument, a fresh result), and that
// bufferization copies only a strided slice's rows into a contiguous
// buffer. (A started collective, which reads its input until its wait
// while later ops may write that buffer, reads a private copy: async.mlir.)

shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @inputs
// CHECK-SAME: (%[[X:.*]]: memref<4x4xf32>)
func.func @inputs(%x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x2xf32>, tensor<4x4xf32>) {
  // The argument: no copy.
  // CHECK-NOT: memref.copy
  // CHECK: %[[XF:.*]] = memref.collapse_shape %[[X]]
  // CHECK: %[[XC:.*]] = memref.cast %[[XF]]
  // CHECK: call @shardx_rt_cg_all_reduce_f32(%[[XC]],
  %a = shardx.all_reduce %x on @mesh axes = [0] reduction = sum : tensor<4x4xf32>
  // A slice of columns: copied into a contiguous buffer.
  // CHECK: %[[S:.*]] = memref.subview %[[X]][0, 1] [4, 2] [1, 1]
  // CHECK: %[[SC:.*]] = memref.alloc() {{.*}} : memref<4x2xf32>
  // CHECK: memref.copy %[[S]], %[[SC]]
  // CHECK: memref.collapse_shape %[[SC]]
  // CHECK: call @shardx_rt_cg_all_reduce_f32(
  %s = tensor.extract_slice %x[0, 1] [4, 2] [1, 1] : tensor<4x4xf32> to tensor<4x2xf32>
  %b = shardx.all_reduce %s on @mesh axes = [0] reduction = sum : tensor<4x2xf32>
  return %a, %b, %x : tensor<4x4xf32>, tensor<4x2xf32>, tensor<4x4xf32>
}
