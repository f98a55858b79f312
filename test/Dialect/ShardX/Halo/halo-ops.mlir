// RUN: shardx-opt %s --split-input-file | shardx-opt --split-input-file | FileCheck %s

// Tests that halos round-trip: even shards (static operand, dynamic result:
// the end members receive one side only), uneven shards with `sizes`, a
// one-sided halo, and a group of one member (no neighbours).
shardx.mesh @mesh(shape = 2x2, axes = ["h", "w"])
// CHECK-LABEL: func.func @halos
func.func @halos(%x: tensor<2x3x4x4xf32>, %u: tensor<?x8xf32>, %v: tensor<4x8xf32>) {
  // CHECK: shardx.halo %{{.*}} on @mesh axes = [0] dim = 2 low = 1 high = 1 : tensor<2x3x4x4xf32> -> tensor<2x3x?x4xf32>
  %0 = shardx.halo %x on @mesh axes = [0] dim = 2 low = 1 high = 1 : tensor<2x3x4x4xf32> -> tensor<2x3x?x4xf32>
  // CHECK: shardx.halo %{{.*}} on @mesh axes = [1] dim = 0 low = 2 high = 0 sizes = [4, 3] : tensor<?x8xf32> -> tensor<?x8xf32>
  %1 = shardx.halo %u on @mesh axes = [1] dim = 0 low = 2 high = 0 sizes = [4, 3] : tensor<?x8xf32> -> tensor<?x8xf32>
  // Members 0 and 1 both end with 4 + 1 rows: the result can be static.
  // CHECK: shardx.halo %{{.*}} on @mesh axes = [0] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<5x8xf32>
  %2 = shardx.halo %v on @mesh axes = [0] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<5x8xf32>
  return
}

// -----

// Tests that a halo over a group of one member keeps the operand's size.
shardx.mesh @one(shape = 1x2)
// CHECK-LABEL: func.func @single
func.func @single(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK: shardx.halo %{{.*}} on @one axes = [0] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<4x8xf32>
  %0 = shardx.halo %x on @one axes = [0] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
