// RUN: shardx-opt %s --split-input-file --shardx-inline-calls | FileCheck %s

// Tests that shardx-inline-calls (the first pass of shardx-spmd) inlines a
// call, and leaves a module without calls as it is (its private function
// too: the inliner does not run).

// CHECK-LABEL: func.func @step
// CHECK-NOT: call
// CHECK: arith.mulf
// CHECK-NOT: call
func.func private @scale(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = arith.mulf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = func.call @scale(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func private @unused
// CHECK-LABEL: func.func @plain
func.func private @unused(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @plain(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
