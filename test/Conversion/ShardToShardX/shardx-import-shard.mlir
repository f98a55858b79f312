// RUN: shardx-opt %s --split-input-file --shardx-import-shard | FileCheck %s
// RUN: shardx-opt %s --split-input-file --shardx-import-shard=lower-tosa=false | FileCheck %s --check-prefix=KEEP

// Tests that a grid becomes a mesh of the same name and shape, with its axes
// named by their indices, and that a replicated sharding is all R.

// CHECK-NOT: shard.grid
// CHECK: shardx.mesh @grid(shape = 2x4, axes = ["0", "1"])
shard.grid @grid(shape = 2x4)
// CHECK-LABEL: func.func @replicated
// CHECK-SAME: tensor<8x16xf32> {shardx.layout = #shardx.layout<@grid, [R, R]>}
func.func @replicated(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %s = shard.sharding @grid split_axes = [[]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x16xf32>
  // CHECK-NOT: shard.
  // CHECK: return %arg0
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that each tensor dim's split axes become placements on those mesh
// axes.

shard.grid @grid(shape = 2x4)
// CHECK-LABEL: func.func @one_axis_per_dim
// CHECK-SAME: {shardx.layout = #shardx.layout<@grid, [S(1), S(0)]>}
func.func @one_axis_per_dim(%arg0: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %s = shard.sharding @grid split_axes = [[1], [0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// Tests that several grid axes on one dim split it in the order listed
// (upstream: outer to inner; ShardX: major to minor): [[0, 1]] is the default
// order and [[1, 0]] an explicit one.

shard.grid @grid(shape = 2x2)
// CHECK-LABEL: func.func @two_axes_on_one_dim
// CHECK-SAME: %{{.*}}: tensor<8x4xf32> {shardx.layout = #shardx.layout<@grid, [S(0), S(0)]>}
// CHECK-SAME: %{{.*}}: tensor<8x4xf32> {shardx.layout = #shardx.layout<@grid, [S(0), S(0)], order = {0 = [1, 0]}>}
// CHECK-SAME: %{{.*}}: tensor<2x8x4xf32> {shardx.layout = #shardx.layout<@grid, [S(2), S(1)]>}
func.func @two_axes_on_one_dim(%a: tensor<8x4xf32>, %b: tensor<8x4xf32>, %c: tensor<2x8x4xf32>)
    -> (tensor<8x4xf32>, tensor<8x4xf32>, tensor<2x8x4xf32>) {
  %s01 = shard.sharding @grid split_axes = [[0, 1]] : !shard.sharding
  %s10 = shard.sharding @grid split_axes = [[1, 0]] : !shard.sharding
  %s = shard.sharding @grid split_axes = [[], [1], [0]] : !shard.sharding
  %0 = shard.shard %a to %s01 : tensor<8x4xf32>
  %1 = shard.shard %b to %s10 : tensor<8x4xf32>
  %2 = shard.shard %c to %s : tensor<2x8x4xf32>
  return %0, %1, %2 : tensor<8x4xf32>, tensor<8x4xf32>, tensor<2x8x4xf32>
}

// -----

// Tests that sharded_dims_offsets become explicit shard sizes (the
// differences of the offsets), per sharded dim in dim order.

shard.grid @grid(shape = 4)
shard.grid @grid2(shape = 2x2)
// CHECK-LABEL: func.func @offsets
// CHECK-SAME: {shardx.layout = #shardx.layout<@grid, [S(1)], sizes = {1 = [2, 3, 4, 5]}>}
// CHECK-SAME: {shardx.layout = #shardx.layout<@grid2, [S(0), S(1)], sizes = {0 = [1, 5], 1 = [4, 2]}>}
func.func @offsets(%a: tensor<4x14xf32>, %b: tensor<6x6xf32>) -> (tensor<4x14xf32>, tensor<6x6xf32>) {
  %s = shard.sharding @grid split_axes = [[], [0]] sharded_dims_offsets = [0, 2, 5, 9, 14] : !shard.sharding
  %0 = shard.shard %a to %s : tensor<4x14xf32>
  %t = shard.sharding @grid2 split_axes = [[0], [1]] sharded_dims_offsets = [0, 1, 6, 0, 4, 6] : !shard.sharding
  %1 = shard.shard %b to %t : tensor<6x6xf32>
  return %0, %1 : tensor<4x14xf32>, tensor<6x6xf32>
}

// -----

// Tests that an argument whose only shard.shard is for its users gets that
// layout (upstream's partitioner gives it that local type), and that the
// returned value's shard.shard gives the result layout.

shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @on_use
// CHECK-SAME: (%[[ARG:.*]]: tensor<8xf32> {shardx.layout = #shardx.layout<@grid, [S(0)]>})
// CHECK-SAME: -> (tensor<8xf32> {shardx.layout = #shardx.layout<@grid, [R]>})
func.func @on_use(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s annotate_for_users : tensor<8xf32>
  // CHECK: %[[ABS:.*]] = math.absf %[[ARG]]
  %1 = math.absf %0 : tensor<8xf32>
  %r = shard.sharding @grid split_axes = [[]] : !shard.sharding
  // CHECK: %[[R:.*]] = shardx.annotate %[[ABS]] : tensor<8xf32> to #shardx.layout<@grid, [R]>
  %2 = shard.shard %1 to %r : tensor<8xf32>
  // CHECK: return %[[R]]
  return %2 : tensor<8xf32>
}

// -----

// Tests that a result sharding (no annotate_for_users) is read by every user
// of the value, ops before the shard.shard included, and that a use sharding
// of another layout becomes a second annotation for its users only.

shard.grid @grid(shape = 2x2)
// CHECK-LABEL: func.func @def_and_use
// CHECK-SAME: (%[[ARG:.*]]: tensor<8x4xf32>)
func.func @def_and_use(%arg0: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  // CHECK: %[[T:.*]] = math.tanh %[[ARG]]
  // CHECK-NEXT: %[[D:.*]] = shardx.annotate %[[T]] : tensor<8x4xf32> to #shardx.layout<@grid, [S(0), S(1)]>
  // CHECK-NEXT: %[[A:.*]] = math.absf %[[D]]
  %0 = math.tanh %arg0 : tensor<8x4xf32>
  %1 = math.absf %0 : tensor<8x4xf32>
  %s = shard.sharding @grid split_axes = [[0], [1]] : !shard.sharding
  %2 = shard.shard %0 to %s : tensor<8x4xf32>
  %t = shard.sharding @grid split_axes = [[1]] : !shard.sharding
  // CHECK-NEXT: %[[U:.*]] = shardx.annotate %[[D]] : tensor<8x4xf32> to #shardx.layout<@grid, [R, S(0)]>
  %3 = shard.shard %2 to %t annotate_for_users : tensor<8x4xf32>
  // CHECK-NEXT: %[[E:.*]] = math.exp %[[U]]
  %4 = math.exp %3 : tensor<8x4xf32>
  // CHECK-NEXT: return %[[A]], %[[E]]
  return %1, %4 : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// Tests that a use sharding equal to the value's result sharding adds no
// second annotation (upstream writes such pairs around every op), and that
// an argument's result sharding is its layout, not an annotation.

shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @pairs
// CHECK-SAME: (%[[ARG:.*]]: tensor<8xf32> {shardx.layout = #shardx.layout<@grid, [S(0)]>})
// CHECK-SAME: -> (tensor<8xf32> {shardx.layout = #shardx.layout<@grid, [S(0)]>})
func.func @pairs(%arg0: tensor<8xf32>) -> tensor<8xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8xf32>
  %1 = shard.shard %0 to %s annotate_for_users : tensor<8xf32>
  // CHECK-NEXT: %[[N:.*]] = math.absf %[[ARG]]
  %2 = math.absf %1 : tensor<8xf32>
  // CHECK-NEXT: %[[D:.*]] = shardx.annotate %[[N]] : tensor<8xf32> to #shardx.layout<@grid, [S(0)]>
  %3 = shard.shard %2 to %s : tensor<8xf32>
  %4 = shard.shard %3 to %s annotate_for_users : tensor<8xf32>
  // CHECK-NEXT: return %[[D]]
  return %4 : tensor<8xf32>
}

// -----

// Tests that an argument's result sharding wins over the use shardings of
// its users, which stay annotations.

shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @arg_def_then_use
// CHECK-SAME: (%[[ARG:.*]]: tensor<8x2xf32> {shardx.layout = #shardx.layout<@grid, [S(0)]>})
func.func @arg_def_then_use(%arg0: tensor<8x2xf32>) -> tensor<8x2xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<8x2xf32>
  %t = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  // CHECK: %[[U:.*]] = shardx.annotate %[[ARG]] : tensor<8x2xf32> to #shardx.layout<@grid, [S(1)]>
  %1 = shard.shard %0 to %t annotate_for_users : tensor<8x2xf32>
  // CHECK: return %[[U]]
  return %1 : tensor<8x2xf32>
}

// -----

// Tests that arguments without shard.shard, and arguments whose users ask
// for different shardings, get no layout (ShardX's propagation picks one);
// the use shardings stay annotations, and give the layouts of the results
// that return them.

shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @unannotated
// CHECK-SAME: (%[[A:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8x2xf32>) -> (tensor<8xf32>,
// CHECK-SAME: tensor<8x2xf32> {shardx.layout = #shardx.layout<@grid, [S(0)]>}, tensor<8x2xf32> {shardx.layout = #shardx.layout<@grid, [S(1)]>})
func.func @unannotated(%a: tensor<8xf32>, %b: tensor<8x2xf32>) -> (tensor<8xf32>, tensor<8x2xf32>, tensor<8x2xf32>) {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %t = shard.sharding @grid split_axes = [[], [0]] : !shard.sharding
  // CHECK-DAG: shardx.annotate %[[B]] : tensor<8x2xf32> to #shardx.layout<@grid, [S(0)]>
  // CHECK-DAG: shardx.annotate %[[B]] : tensor<8x2xf32> to #shardx.layout<@grid, [S(1)]>
  %0 = shard.shard %b to %s annotate_for_users : tensor<8x2xf32>
  %1 = shard.shard %b to %t annotate_for_users : tensor<8x2xf32>
  %2 = math.absf %a : tensor<8xf32>
  return %2, %0, %1 : tensor<8xf32>, tensor<8x2xf32>, tensor<8x2xf32>
}

// -----

// Tests that TOSA ops are lowered to linalg after the import, shape
// constants that nobody reads removed, and annotations kept in place; with
// lower-tosa=false they stay.

shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @tosa
// KEEP-LABEL: func.func @tosa
// KEEP: %[[S:.*]] = tosa.sigmoid
// KEEP: shardx.annotate %[[S]] : tensor<8x4xf32> to #shardx.layout<@grid, [S(0)]>
// KEEP: tosa.reshape
func.func @tosa(%arg0: tensor<8x4xf32>) -> tensor<32xf32> {
  // CHECK-NOT: tosa.
  // CHECK: %[[G:.*]] = linalg.generic
  // CHECK: math.exp
  // CHECK: %[[A:.*]] = shardx.annotate %[[G]] : tensor<8x4xf32> to #shardx.layout<@grid, [S(0)]>
  // CHECK: tensor.collapse_shape %[[A]]
  // CHECK-NOT: tosa.
  %0 = tosa.sigmoid %arg0 : (tensor<8x4xf32>) -> tensor<8x4xf32>
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %1 = shard.shard %0 to %s : tensor<8x4xf32>
  %shape = tosa.const_shape {values = dense<[32]> : tensor<1xindex>} : () -> !tosa.shape<1>
  %2 = tosa.reshape %1, %shape : (tensor<8x4xf32>, !tosa.shape<1>) -> tensor<32xf32>
  return %2 : tensor<32xf32>
}

// -----

// Tests that the import works on every function of the module and inside
// nested regions.

shard.grid @grid(shape = 2)
// CHECK-LABEL: func.func @first
// CHECK-SAME: {shardx.layout = #shardx.layout<@grid, [S(0)]>}
func.func @first(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
  %0 = shard.shard %arg0 to %s : tensor<4xf32>
  return %0 : tensor<4xf32>
}
// CHECK-LABEL: func.func @nested
func.func @nested(%arg0: tensor<4xf32>, %n: index) -> tensor<4xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // CHECK: scf.for
  %r = scf.for %i = %c0 to %n step %c1 iter_args(%acc = %arg0) -> tensor<4xf32> {
    %s = shard.sharding @grid split_axes = [[0]] : !shard.sharding
    // CHECK: shardx.annotate %{{.*}} : tensor<4xf32> to #shardx.layout<@grid, [S(0)]>
    %0 = shard.shard %acc to %s annotate_for_users : tensor<4xf32>
    %1 = math.absf %0 : tensor<4xf32>
    scf.yield %1 : tensor<4xf32>
  }
  return %r : tensor<4xf32>
}
