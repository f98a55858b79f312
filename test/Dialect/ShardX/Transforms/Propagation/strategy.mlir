// RUN: shardx-opt %s --shardx-propagate=strategy=greedy | FileCheck %s
// RUN: shardx-opt %s --shardx-propagate | FileCheck %s
// RUN: not shardx-opt %s --shardx-propagate=strategy=exact 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// Tests that the search is chosen by name: `greedy` is the default, and an
// unknown name is a diagnostic at the function, not a crash.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @column_parallel
// UNKNOWN: error: unknown propagation strategy 'exact' (known: greedy)
func.func @column_parallel(%x: tensor<4x8xf32>,
                           %w: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>}) -> tensor<4x16xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x16xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: linalg.matmul {{.*}}shardx.layouts = [#shardx.layout<@mesh, [S(1)]>]
  // CHECK-SAME: shardx.operand_layouts = [#shardx.layout<@mesh, [R]>, #shardx.layout<@mesh, [S(1)]>, #shardx.layout<@mesh, [S(1)]>]
  %h = linalg.matmul ins(%x, %w : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  return %h : tensor<4x16xf32>
}
