// RUN: shardx-opt %s --split-input-file --shardx-lower-reshards | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-lower-reshards | shardx-opt --split-input-file > /dev/null

// Tests that S(i) -> S(j) is one all_to_all.
shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @shard_to_shard
// CHECK-SAME: (%[[X:.*]]: tensor<8x8xf32>)
func.func @shard_to_shard(%x: tensor<8x8xf32>) -> tensor<8x8xf32> {
  // CHECK: %[[L:.*]] = builtin.unrealized_conversion_cast %[[X]] : tensor<8x8xf32> to tensor<2x8xf32>
  // CHECK-NEXT: %[[A:.*]] = shardx.all_to_all %[[L]] on @mesh axes = [0] split_dim = 1 concat_dim = 0 : tensor<2x8xf32> -> tensor<8x2xf32>
  // CHECK-NEXT: %[[G:.*]] = builtin.unrealized_conversion_cast %[[A]] : tensor<8x2xf32> to tensor<8x8xf32>
  // CHECK-NEXT: return %[[G]]
  %0 = shardx.redistribute %x : tensor<8x8xf32> from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [S(1)]>
  return %0 : tensor<8x8xf32>
}

// -----

// Tests that P -> S is one reduce_scatter and P -> R one all_reduce, for
// every reduction.
shardx.mesh @mesh(shape = 2x4)
// CHECK-LABEL: func.func @partials
func.func @partials(%x: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  // CHECK: shardx.reduce_scatter %{{.*}} on @mesh axes = [1] dim = 0 reduction = sum : tensor<8x8xf32> -> tensor<2x8xf32>
  %0 = shardx.redistribute %x : tensor<8x8xf32> from #shardx.layout<@mesh, [R, P(sum)]> to #shardx.layout<@mesh, [R, S(0)]>
  // CHECK: shardx.all_reduce %{{.*}} on @mesh axes = [0] reduction = max : tensor<8x2xf32>
  %1 = shardx.redistribute %x : tensor<8x8xf32> from #shardx.layout<@mesh, [P(max), S(1)]> to #shardx.layout<@mesh, [R, S(1)]>
  // CHECK: shardx.all_reduce %{{.*}} on @mesh axes = [0, 1] reduction = prod : tensor<8x8xf32>
  %2 = shardx.redistribute %x : tensor<8x8xf32> from #shardx.layout<@mesh, [P(prod), P(prod)]> to #shardx.layout<@mesh, [R, R]>
  // CHECK: shardx.reduce_scatter %{{.*}} on @mesh axes = [0] dim = 1 reduction = min : tensor<8x8xf32> -> tensor<8x4xf32>
  %3 = shardx.redistribute %x : tensor<8x8xf32> from #shardx.layout<@mesh, [P(min), R]> to #shardx.layout<@mesh, [S(1), R]>
  return %0, %1, %2, %3 : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Tests that S -> R is one all_gather (over both axes when a dim is split
// twice) and R -> S a local chunk.
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @gather_and_chunk
func.func @gather_and_chunk(%x: tensor<8x6xf32>) -> (tensor<8x6xf32>, tensor<8x6xf32>) {
  // CHECK: shardx.all_gather %{{.*}} on @mesh axes = [0, 1] dim = 0 : tensor<2x6xf32> -> tensor<8x6xf32>
  %0 = shardx.redistribute %x : tensor<8x6xf32> from #shardx.layout<@mesh, [S(0), S(0)]> to #shardx.layout<@mesh, [R, R]>
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [1] dim = 1 : tensor<8x6xf32> -> tensor<8x3xf32>
  // CHECK-NOT: shardx.all
  %1 = shardx.redistribute %x : tensor<8x6xf32> from #shardx.layout<@mesh, [R, R]> to #shardx.layout<@mesh, [R, S(1)]>
  return %0, %1 : tensor<8x6xf32>, tensor<8x6xf32>
}

// -----

// Tests that R -> P is a local partition_value and P(sum) -> P(avg) a local
// rescale by the axis size.
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @to_partial
func.func @to_partial(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  // CHECK: shardx.partition_value %{{.*}} on @mesh axes = [1] reduction = sum : tensor<4xf32>
  %0 = shardx.redistribute %x : tensor<4xf32> from #shardx.layout<@mesh, [R, R]> to #shardx.layout<@mesh, [R, P(sum)]>
  // CHECK: %[[C:.*]] = arith.constant 2.000000e+00 : f32
  // CHECK: linalg.generic {{.*}} ins(%[[L:.*]] : tensor<4xf32>) outs(%[[L]] : tensor<4xf32>)
  // CHECK: arith.mulf %{{.*}}, %[[C]] : f32
  // CHECK-NOT: shardx.all
  %1 = shardx.redistribute %x : tensor<4xf32> from #shardx.layout<@mesh, [P(sum), R]> to #shardx.layout<@mesh, [P(avg), R]>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// Tests that FSDP-over-TP StridedShard <-> nested Shard is one collective
// permute of whole shards.
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @reorder
func.func @reorder(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  // CHECK: shardx.permute %{{.*}} on @mesh axes = [0, 1] pairs = {{\[\[}}2, 1], [1, 2]] : tensor<2x4xf32>
  %0 = shardx.redistribute %x : tensor<8x4xf32> from #shardx.layout<@mesh, [SS(0, 2), S(0)]> to #shardx.layout<@mesh, [S(0), S(0)]>
  return %0 : tensor<8x4xf32>
}

// -----

// Tests that steps on uneven shards (7 rows on 4 ranks: 2, 2, 2, 1) that
// move data become exchanges that carry their layouts and the global shape,
// from and to the dynamic local types; R -> S moves nothing and stays a
// local chunk with the members' sizes.
shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @uneven
func.func @uneven(%x: tensor<7x3xf32>) -> (tensor<7x3xf32>, tensor<7x3xf32>) {
  // CHECK: builtin.unrealized_conversion_cast %{{.*}} : tensor<7x3xf32> to tensor<?x3xf32>
  // CHECK-NEXT: shardx.exchange %{{.*}} on @mesh axes = [0] from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]> shape = [7, 3] : tensor<?x3xf32> -> tensor<7x3xf32>
  %0 = shardx.redistribute %x : tensor<7x3xf32> from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]>
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [0] dim = 0 sizes = [2, 2, 2, 1] : tensor<7x3xf32> -> tensor<?x3xf32>
  %1 = shardx.redistribute %x : tensor<7x3xf32> from #shardx.layout<@mesh, [R]> to #shardx.layout<@mesh, [S(0)]>
  return %0, %1 : tensor<7x3xf32>, tensor<7x3xf32>
}

// -----

// Tests that R -> S with explicit uneven sizes is a local chunk with those
// sizes, and that moving data out of such a shard is an exchange whose
// source layout carries them.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @explicit_sizes
func.func @explicit_sizes(%x: tensor<7x3xf32>) -> (tensor<7x3xf32>, tensor<7x3xf32>) {
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [0] dim = 0 sizes = [5, 2] : tensor<7x3xf32> -> tensor<?x3xf32>
  %0 = shardx.redistribute %x : tensor<7x3xf32> from #shardx.layout<@mesh, [R]> to #shardx.layout<@mesh, [S(0)], sizes = {0 = [5, 2]}>
  // CHECK: shardx.exchange %{{.*}} on @mesh axes = [0] from #shardx.layout<@mesh, [S(0)], sizes = {0 = [5, 2]}> to #shardx.layout<@mesh, [R]> shape = [7, 3] : tensor<?x3xf32> -> tensor<7x3xf32>
  %1 = shardx.redistribute %x : tensor<7x3xf32> from #shardx.layout<@mesh, [S(0)], sizes = {0 = [5, 2]}> to #shardx.layout<@mesh, [R]>
  return %0, %1 : tensor<7x3xf32>, tensor<7x3xf32>
}

// -----

// Tests that R -> S on either axis of a 2-D mesh with uneven pieces (30 rows
// on 4: 8, 8, 8, 6) is a local chunk over that axis, also after the other
// axis split another dim evenly or the same dim (nested: 15 rows on 4), or
// split another dim unevenly (an operand of dynamic shape).
shardx.mesh @mesh(shape = 2x4)
// CHECK-LABEL: func.func @uneven_2d
func.func @uneven_2d(%x: tensor<30x4xf32>) -> (tensor<30x4xf32>, tensor<30x4xf32>, tensor<30x4xf32>, tensor<30x4xf32>, tensor<30x4xf32>) {
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [1] dim = 0 sizes = [8, 8, 8, 6] : tensor<30x4xf32> -> tensor<?x4xf32>
  %0 = shardx.redistribute %x : tensor<30x4xf32> from #shardx.layout<@mesh, [R, R]> to #shardx.layout<@mesh, [R, S(0)]>
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [1] dim = 0 sizes = [8, 8, 8, 6] : tensor<30x2xf32> -> tensor<?x2xf32>
  %1 = shardx.redistribute %x : tensor<30x4xf32> from #shardx.layout<@mesh, [S(1), R]> to #shardx.layout<@mesh, [S(1), S(0)]>
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [0] dim = 1 sizes = [3, 1] : tensor<30x4xf32> -> tensor<30x?xf32>
  %2 = shardx.redistribute %x : tensor<30x4xf32> from #shardx.layout<@mesh, [R, R]> to #shardx.layout<@mesh, [S(1), R], sizes = {1 = [3, 1]}>
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [1] dim = 0 sizes = [4, 4, 4, 3] : tensor<15x4xf32> -> tensor<?x4xf32>
  %3 = shardx.redistribute %x : tensor<30x4xf32> from #shardx.layout<@mesh, [S(0), R]> to #shardx.layout<@mesh, [S(0), S(0)]>
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [0] dim = 1 sizes = [2, 2] : tensor<?x4xf32> -> tensor<?x2xf32>
  %4 = shardx.redistribute %x : tensor<30x4xf32> from #shardx.layout<@mesh, [R, S(0)]> to #shardx.layout<@mesh, [S(1), S(0)]>
  return %0, %1, %2, %3, %4 : tensor<30x4xf32>, tensor<30x4xf32>, tensor<30x4xf32>, tensor<30x4xf32>, tensor<30x4xf32>
}

// -----

// Tests that the permute of uneven nested shards on 2x2x2 ([S(0), R, S(0)]
// -> [R, S(0), S(0)] of 7 elements: source and target shards differ in size)
// is one exchange over the whole mesh.
shardx.mesh @mesh(shape = 2x2x2)
// CHECK-LABEL: func.func @uneven_permute
func.func @uneven_permute(%x: tensor<7xf32>) -> tensor<7xf32> {
  // CHECK: shardx.exchange %{{.*}} on @mesh axes = [0, 1, 2] from #shardx.layout<@mesh, [S(0), R, S(0)]> to #shardx.layout<@mesh, [R, S(0), S(0)]> shape = [7] : tensor<?xf32> -> tensor<?xf32>
  %0 = shardx.redistribute %x : tensor<7xf32> from #shardx.layout<@mesh, [S(0), R, S(0)]> to #shardx.layout<@mesh, [R, S(0), S(0)]>
  return %0 : tensor<7xf32>
}

// -----

// Tests that P(sum) -> P(avg) rescales the local terms in place by the axis
// size (the mean of n terms scaled by n is their sum) with one elementwise
// generic (no op that needs the local sizes), also on uneven shards.
shardx.mesh @mesh(shape = 2x2x2)
// CHECK-LABEL: func.func @rescale
func.func @rescale(%x: tensor<1x7xf32>) -> tensor<1x7xf32> {
  // CHECK: %[[C:.*]] = arith.constant 2.000000e+00 : f32
  // CHECK: linalg.generic {{.*}} ins(%[[L:.*]] : tensor<1x?xf32>) outs(%[[L]] : tensor<1x?xf32>)
  // CHECK: arith.mulf %{{.*}}, %[[C]] : f32
  %0 = shardx.redistribute %x : tensor<1x7xf32> from #shardx.layout<@mesh, [P(sum), S(1), R]> to #shardx.layout<@mesh, [P(avg), S(1), R]>
  return %0 : tensor<1x7xf32>
}

// -----

// Tests that strided layouts (a flattened 6x4 tensor sharded on its columns)
// chunk and gather per block.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @strided
func.func @strided(%x: tensor<24xf32>) -> (tensor<24xf32>, tensor<24xf32>) {
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [0] dim = 0 stride = 6 : tensor<24xf32> -> tensor<12xf32>
  %0 = shardx.redistribute %x : tensor<24xf32> from #shardx.layout<@mesh, [R]> to #shardx.layout<@mesh, [SS(0, 6)]>
  // CHECK: shardx.all_gather %{{.*}} on @mesh axes = [0] dim = 0 stride = 6 : tensor<12xf32> -> tensor<24xf32>
  %1 = shardx.redistribute %x : tensor<24xf32> from #shardx.layout<@mesh, [SS(0, 6)]> to #shardx.layout<@mesh, [R]>
  return %0, %1 : tensor<24xf32>, tensor<24xf32>
}

// -----

// Tests that on a large tensor [S(0), S(0)] -> [R, S(0)] gathers the major
// axis into a strided layout and moves the minor split with one all_to_all
// within the dim: two local shards per rank, where DTensor moves three.
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @nested_to_minor
func.func @nested_to_minor(%x: tensor<4096x1024xf32>) -> tensor<4096x1024xf32> {
  // CHECK: %[[G:.*]] = shardx.all_gather %{{.*}} on @mesh axes = [0] dim = 0 : tensor<1024x1024xf32> -> tensor<2048x1024xf32>
  // CHECK-NEXT: shardx.all_to_all %[[G]] on @mesh axes = [1] split_dim = 0 concat_dim = 0 : tensor<2048x1024xf32> -> tensor<2048x1024xf32>
  %0 = shardx.redistribute %x : tensor<4096x1024xf32> from #shardx.layout<@mesh, [S(0), S(0)]> to #shardx.layout<@mesh, [R, S(0)]>
  return %0 : tensor<4096x1024xf32>
}

// -----

// Tests that cost hints steer the plan: with a slow axis 0, a Partial over
// both axes is reduced with one reduce_scatter on the fast axis before the
// slow all_reduce moves a quarter of the data.
shardx.mesh @mesh(shape = 2x4, bandwidth = [1.0, 1000.0], latency = [1.0, 1.0])
// CHECK-LABEL: func.func @hints
func.func @hints(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  // CHECK: shardx.reduce_scatter %{{.*}} axes = [1]
  // CHECK: shardx.all_reduce %{{.*}} axes = [0]
  // CHECK: shardx.all_gather %{{.*}} axes = [1]
  %0 = shardx.redistribute %x : tensor<1024x1024xf32> from #shardx.layout<@mesh, [P(sum), P(sum)]> to #shardx.layout<@mesh, [R, R]>
  return %0 : tensor<1024x1024xf32>
}

// -----

// Tests that moving a split into a dim with explicit uneven sizes is one
// exchange over the group.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @all_to_all_sizes
func.func @all_to_all_sizes(%x: tensor<8x7xf32>) -> tensor<8x7xf32> {
  // CHECK: shardx.exchange %{{.*}} on @mesh axes = [0] from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [S(1)], sizes = {1 = [5, 2]}> shape = [8, 7] : tensor<4x7xf32> -> tensor<8x?xf32>
  %0 = shardx.redistribute %x : tensor<8x7xf32> from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [S(1)], sizes = {1 = [5, 2]}>
  return %0 : tensor<8x7xf32>
}
