// RUN: shardx-opt %s --inline | FileCheck %s

// Tests that calls of functions holding ShardX ops (an attention op and a
// layout constraint, as in a traced region's function) are inlined: the
// dialect's inliner interface. Without it the call stayed, and
// propagation ran it replicated.

shardx.mesh @mesh(shape = 2)

// CHECK-LABEL: func.func @step
// CHECK-NOT: call
// CHECK: shardx.annotate
// CHECK: shardx.attention
func.func @step(%q: tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32> {
  %o = func.call @layer(%q) : (tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  return %o : tensor<1x2x8x4xf32>
}

func.func private @layer(%q: tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32> {
  %a = shardx.annotate %q : tensor<1x2x8x4xf32> to #shardx.layout<@mesh, [S(1)]>
  %o, %l = shardx.attention %a, %a, %a scale = 0.5
      : tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>
      -> tensor<1x2x8x4xf32>, tensor<1x2x8xf32>
  return %o : tensor<1x2x8x4xf32>
}
