// RUN: shardx-opt %s --split-input-file --shardx-lower-halos | FileCheck %s

// Tests that a two-sided halo becomes the edge slices, one permute per side
// with non-cyclic neighbour pairs, and a concat whose received pieces are
// empty at the ends of the group.
shardx.mesh @mesh(shape = 3x2)
// CHECK-LABEL: func.func @both_sides
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>
func.func @both_sides(%x: tensor<4x8xf32>) -> tensor<?x8xf32> {
  // CHECK: %[[J:.*]] = shardx.axis_index on @mesh axes = [0] : index
  // CHECK: %[[TAIL:.*]] = tensor.extract_slice %[[X]][%{{.*}}, 0] [1, 8] [1, 1] : tensor<4x8xf32> to tensor<1x8xf32>
  // CHECK: %[[LO:.*]] = shardx.permute %[[TAIL]] on @mesh axes = [0] pairs = {{\[\[}}0, 1], [1, 2]] : tensor<1x8xf32>
  // CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[J]], %[[C0:.*]] : index
  // CHECK: %[[NLO:.*]] = arith.select %[[FIRST]], %{{.*}}, %{{.*}} : index
  // CHECK: %[[RLO:.*]] = tensor.extract_slice %[[LO]][0, 0] [%[[NLO]], 8] [1, 1] : tensor<1x8xf32> to tensor<?x8xf32>
  // CHECK: %[[HEAD:.*]] = tensor.extract_slice %[[X]][%{{.*}}, 0] [1, 8] [1, 1] : tensor<4x8xf32> to tensor<1x8xf32>
  // CHECK: %[[HI:.*]] = shardx.permute %[[HEAD]] on @mesh axes = [0] pairs = {{\[\[}}1, 0], [2, 1]] : tensor<1x8xf32>
  // CHECK: %[[LAST:.*]] = arith.cmpi eq, %[[J]], %[[C2:.*]] : index
  // CHECK: %[[NHI:.*]] = arith.select %[[LAST]], %{{.*}}, %{{.*}} : index
  // CHECK: %[[RHI:.*]] = tensor.extract_slice %[[HI]][0, 0] [%[[NHI]], 8] [1, 1] : tensor<1x8xf32> to tensor<?x8xf32>
  // CHECK: %[[CAT:.*]] = tensor.concat dim(0) %[[RLO]], %[[X]], %[[RHI]]
  // CHECK-NOT: shardx.halo
  // CHECK: return %[[CAT]]
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// Tests that a two-sided halo in a group of two is one permute both ways:
// member 0 sends its last max(low, high) = 2 rows, member 1 its first 2;
// member 1 keeps the last `low` = 1 received row, member 0 the first
// `high` = 2 rows.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @pair
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>
func.func @pair(%x: tensor<4x8xf32>) -> tensor<?x8xf32> {
  // CHECK: %[[J:.*]] = shardx.axis_index on @mesh axes = [0] : index
  // CHECK: %[[TAIL:.*]] = arith.subi %{{.*}}, %[[C2:.*]] : index
  // CHECK: %[[FIRST:.*]] = arith.cmpi eq, %[[J]], %{{.*}} : index
  // CHECK: %[[OFF:.*]] = arith.select %[[FIRST]], %[[TAIL]], %{{.*}} : index
  // CHECK: %[[EDGE:.*]] = tensor.extract_slice %[[X]][%[[OFF]], 0] [2, 8] [1, 1] : tensor<4x8xf32> to tensor<2x8xf32>
  // CHECK: %[[R:.*]] = shardx.permute %[[EDGE]] on @mesh axes = [0] pairs = {{\[\[}}0, 1], [1, 0]] : tensor<2x8xf32>
  // CHECK-NOT: shardx.permute
  // CHECK: %[[RLO:.*]] = tensor.extract_slice %[[R]][1, 0] [%{{.*}}, 8] [1, 1] : tensor<2x8xf32> to tensor<?x8xf32>
  // CHECK: %[[RHI:.*]] = tensor.extract_slice %[[R]][0, 0] [%{{.*}}, 8] [1, 1] : tensor<2x8xf32> to tensor<?x8xf32>
  // CHECK: %[[CAT:.*]] = tensor.concat dim(0) %[[RLO]], %[[X]], %[[RHI]]
  // CHECK: return %[[CAT]]
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = 1 high = 2 : tensor<4x8xf32> -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// Tests that a one-sided halo permutes one side only, over the named axis.
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @high_only
func.func @high_only(%x: tensor<2x5xf32>) -> tensor<?x?xf32> {
  // CHECK: tensor.extract_slice %{{.*}}[0, %{{.*}}] [2, 2] [1, 1]
  // CHECK: shardx.permute %{{.*}} on @mesh axes = [1] pairs = {{\[\[}}1, 0]] : tensor<2x2xf32>
  // CHECK-NOT: shardx.permute
  // CHECK: tensor.concat dim(1)
  %0 = shardx.halo %x on @mesh axes = [1] dim = 1 low = 0 high = 2 : tensor<2x5xf32> -> tensor<2x?xf32>
  %1 = tensor.cast %0 : tensor<2x?xf32> to tensor<?x?xf32>
  return %1 : tensor<?x?xf32>
}

// -----

// Tests that a group of one member needs no exchange.
shardx.mesh @mesh(shape = 1x2)
// CHECK-LABEL: func.func @alone
func.func @alone(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // CHECK-NOT: shardx.permute
  // CHECK: return %{{.*}} : tensor<4x8xf32>
  %0 = shardx.halo %x on @mesh axes = [0] dim = 0 low = 1 high = 1 : tensor<4x8xf32> -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}
