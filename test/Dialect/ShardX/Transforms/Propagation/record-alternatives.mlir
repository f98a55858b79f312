// RUN: shardx-opt %s --split-input-file --shardx-propagate=record-alternatives | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-propagate | FileCheck %s --check-prefix=OFF

// Tests that each op the search chose a strategy for records the strategies
// it did not take, each with what the function's modeled time would gain if
// only that op took it: the Megatron matmuls would both pay a collective
// (about 5 us on the default mesh) to run replicated.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @megatron
// OFF-LABEL: func.func @megatron
// OFF-NOT: shardx.alternatives
func.func @megatron(%x: tensor<4x8xf32>,
                    %w1: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>},
                    %w2: tensor<16x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> tensor<4x8xf32> {
  %z = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4x16xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: linalg.matmul {shardx.alternatives = [{cost = 5.0{{[0-9]*}} : f64,
  // CHECK-SAME: operands = [#shardx.layout<@mesh, [R]>, #shardx.layout<@mesh, [R]>, #shardx.layout<@mesh, [R]>],
  // CHECK-SAME: results = [#shardx.layout<@mesh, [R]>]}],
  // CHECK-SAME: shardx.layouts = [#shardx.layout<@mesh, [S(1)]>]
  %h = linalg.matmul ins(%x, %w1 : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f1 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: linalg.matmul {shardx.alternatives = [{cost = 5.0{{[0-9]*}} : f64,
  // CHECK-SAME: shardx.layouts = [#shardx.layout<@mesh, [P(sum)]>]
  %y = linalg.matmul ins(%h, %w2 : tensor<4x16xf32>, tensor<16x8xf32>) outs(%f2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
