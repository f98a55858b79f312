// RUN: shardx-opt %s --shardx-propagate --shardx-partition | FileCheck %s

// Tests that shardx-partition handles a module with an external
// declaration, an unsharded function and two sharded functions on two
// meshes.

shardx.mesh @line(shape = 2)
shardx.mesh @grid(shape = 2x2)

// CHECK: func.func private @external(tensor<4xf32>) -> tensor<4xf32>
func.func private @external(tensor<4xf32>) -> tensor<4xf32>

// CHECK-LABEL: func.func @unsharded
// CHECK-SAME: (%{{[^:]*}}: tensor<4xf32>) -> tensor<4xf32>
// CHECK-NOT: shardx.signature
func.func @unsharded(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// CHECK-LABEL: func.func @on_line
// CHECK-SAME: tensor<4x8xf32>
// CHECK-SAME: shardx.signature = {{.*}}mesh = @line
// CHECK: shardx.all_gather
func.func @on_line(%x: tensor<8x8xf32> {shardx.layout = #shardx.layout<@line, [S(0)]>})
    -> (tensor<8x8xf32> {shardx.layout = #shardx.layout<@line, [R]>}) {
  %y = arith.mulf %x, %x : tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}

// CHECK-LABEL: func.func @on_grid
// CHECK-SAME: tensor<4x4xf32>
// CHECK-SAME: shardx.signature = {{.*}}mesh = @grid
// CHECK: shardx.permute
func.func @on_grid(%x: tensor<8x8xf32> {shardx.layout = #shardx.layout<@grid, [S(0), S(1)]>})
    -> (tensor<8x8xf32> {shardx.layout = #shardx.layout<@grid, [S(1), S(0)]>}) {
  %y = arith.addf %x, %x : tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}
