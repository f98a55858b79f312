// RUN: shardx-opt %s --split-input-file | shardx-opt --split-input-file | FileCheck %s
// RUN: shardx-opt %s --split-input-file --mlir-print-op-generic | shardx-opt --split-input-file | FileCheck %s

// Tests that meshes of every rank round-trip with names and cost hints.
// CHECK: shardx.mesh @line(shape = 4)
// CHECK: shardx.mesh @mesh(shape = 2x4, axes = ["dp", "tp"])
// CHECK: shardx.mesh @hinted(shape = 2x2, bandwidth = [1.000000e+02, 4.000000e+02], latency = [5.000000e+00, 1.000000e+00])
// CHECK: shardx.mesh @cube(shape = 2x2x2x3, axes = ["a", "b", "c", "d"])
shardx.mesh @line(shape = 4)
shardx.mesh @mesh(shape = 2x4, axes = ["dp", "tp"])
shardx.mesh @hinted(shape = 2x2, bandwidth = [100.0, 400.0], latency = [5.0, 1.0])
shardx.mesh @cube(shape = 2x2x2x3, axes = ["a", "b", "c", "d"])

// -----

// Tests that every placement kind round-trips on function arguments and
// results.
shardx.mesh @mesh(shape = 2x4, axes = ["dp", "tp"])
// CHECK-LABEL: func.func @placements
// CHECK-SAME: {shardx.layout = #shardx.layout<@mesh, [S(0), R]>}
// CHECK-SAME: {shardx.layout = #shardx.layout<@mesh, [R, S(1)]>}
// CHECK-SAME: {shardx.layout = #shardx.layout<@mesh, [P(sum), S(1)]>}
// CHECK-SAME: {shardx.layout = #shardx.layout<@mesh, [P(avg), P(max)]>}
// CHECK-SAME: {shardx.layout = #shardx.layout<@mesh, [P(min), P(prod)]>}
// CHECK-SAME: {shardx.layout = #shardx.layout<@mesh, [R, R]>}
func.func @placements(
    %a: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R]>},
    %b: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [R, S(1)]>},
    %c: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [P(sum), S(1)]>},
    %d: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [P(avg), P(max)]>},
    %e: tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [P(min), P(prod)]>})
    -> (tensor<8x8xf32> {shardx.layout = #shardx.layout<@mesh, [R, R]>}) {
  return %a : tensor<8x8xf32>
}

// -----

// Tests that nested splits of one dim print in mesh order by default and with
// an explicit order otherwise, and that StridedShard is resolved into the
// canonical order/strides form.
shardx.mesh @mesh(shape = 2x4, axes = ["dp", "tp"])
// CHECK-LABEL: func.func @nested
// CHECK-SAME: #shardx.layout<@mesh, [S(0), S(0)]>
// CHECK-SAME: #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}>
// CHECK-SAME: #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}>
// CHECK-SAME: #shardx.layout<@mesh, [S(0), R], strides = {0 = [6]}>
// CHECK-SAME: #shardx.layout<@mesh, [S(1), S(1)], order = {1 = [1, 0]}, strides = {1 = [1, 2]}>
func.func @nested(
    %a: tensor<16x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)]>},
    %b: tensor<16x4xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 4), S(0)]>},
    %c: tensor<16x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}>},
    %d: tensor<24xf32> {shardx.layout = #shardx.layout<@mesh, [SS(0, 6), R]>},
    %e: tensor<4x32xf32> {shardx.layout = #shardx.layout<@mesh, [SS(1, 8), S(1)]>}) {
  return
}

// -----

// Tests that explicit uneven shard sizes round-trip, on one and two axes.
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @uneven
// CHECK-SAME: #shardx.layout<@mesh, [S(0), R], sizes = {0 = [5, 2]}>
// CHECK-SAME: #shardx.layout<@mesh, [S(1), S(1)], order = {1 = [1, 0]}, sizes = {1 = [1, 2, 3, 1]}>
// CHECK-SAME: #shardx.layout<@mesh, [S(0), R]>
func.func @uneven(
    %a: tensor<7x3xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R], sizes = {0 = [5, 2]}>},
    %b: tensor<3x7xf32> {shardx.layout = #shardx.layout<@mesh, [S(1), S(1)], order = {1 = [1, 0]}, sizes = {1 = [1, 2, 3, 1]}>},
    %c: tensor<7x3xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), R]>}) {
  return
}

// -----

// Tests that annotate, redistribute and the per-op layouts attribute
// round-trip, including dynamic dims.
shardx.mesh @mesh(shape = 2x4, axes = ["dp", "tp"])
// CHECK-LABEL: func.func @global_ops
// CHECK-SAME: (%[[X:.*]]: tensor<8x?xf32>
func.func @global_ops(%x: tensor<8x?xf32>) -> tensor<8x?xf32> {
  // CHECK: %[[A:.*]] = shardx.annotate %[[X]] : tensor<8x?xf32> to #shardx.layout<@mesh, [S(0), S(1)]>
  %0 = shardx.annotate %x : tensor<8x?xf32> to #shardx.layout<@mesh, [S(0), S(1)]>
  // CHECK: %[[R:.*]] = shardx.redistribute %[[A]] : tensor<8x?xf32> from #shardx.layout<@mesh, [S(0), S(1)]> to #shardx.layout<@mesh, [S(1), S(0)]>
  %1 = shardx.redistribute %0 : tensor<8x?xf32> from #shardx.layout<@mesh, [S(0), S(1)]> to #shardx.layout<@mesh, [S(1), S(0)]>
  // CHECK: math.exp %[[R]] {shardx.layouts = [#shardx.layout<@mesh, [S(1), S(0)]>]}
  %2 = math.exp %1 {shardx.layouts = [#shardx.layout<@mesh, [S(1), S(0)]>]} : tensor<8x?xf32>
  return %2 : tensor<8x?xf32>
}

// -----

// Tests that every collective round-trips, with even and uneven groups.
shardx.mesh @mesh(shape = 2x4, axes = ["dp", "tp"])
// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: tensor<8x4xf32>, %u: tensor<?x4xf32>) {
  // CHECK: shardx.all_gather %{{.*}} on @mesh axes = [1] dim = 0 : tensor<8x4xf32> -> tensor<32x4xf32>
  %0 = shardx.all_gather %x on @mesh axes = [1] dim = 0 : tensor<8x4xf32> -> tensor<32x4xf32>
  // CHECK: shardx.all_gather %{{.*}} on @mesh axes = [0] dim = 0 sizes = [4, 3] : tensor<?x4xf32> -> tensor<7x4xf32>
  %1 = shardx.all_gather %u on @mesh axes = [0] dim = 0 sizes = [4, 3] : tensor<?x4xf32> -> tensor<7x4xf32>
  // CHECK: shardx.reduce_scatter %{{.*}} on @mesh axes = [1, 0] dim = 0 reduction = sum : tensor<8x4xf32> -> tensor<1x4xf32>
  %2 = shardx.reduce_scatter %x on @mesh axes = [1, 0] dim = 0 reduction = sum : tensor<8x4xf32> -> tensor<1x4xf32>
  // CHECK: shardx.reduce_scatter %{{.*}} on @mesh axes = [0] dim = 1 reduction = max sizes = [3, 1] : tensor<8x4xf32> -> tensor<8x?xf32>
  %3 = shardx.reduce_scatter %x on @mesh axes = [0] dim = 1 reduction = max sizes = [3, 1] : tensor<8x4xf32> -> tensor<8x?xf32>
  // CHECK: shardx.all_reduce %{{.*}} on @mesh axes = [0, 1] reduction = avg : tensor<8x4xf32>
  %4 = shardx.all_reduce %x on @mesh axes = [0, 1] reduction = avg : tensor<8x4xf32>
  // CHECK: shardx.all_reduce %{{.*}} on @mesh axes = [0] reduction = min : tensor<8x4xf32>
  %5 = shardx.all_reduce %x on @mesh axes = [0] reduction = min : tensor<8x4xf32>
  // CHECK: shardx.all_reduce %{{.*}} on @mesh axes = [1] reduction = prod : tensor<8x4xf32>
  %6 = shardx.all_reduce %x on @mesh axes = [1] reduction = prod : tensor<8x4xf32>
  // CHECK: shardx.all_to_all %{{.*}} on @mesh axes = [1] split_dim = 0 concat_dim = 1 : tensor<8x4xf32> -> tensor<2x16xf32>
  %7 = shardx.all_to_all %x on @mesh axes = [1] split_dim = 0 concat_dim = 1 : tensor<8x4xf32> -> tensor<2x16xf32>
  // CHECK: shardx.permute %{{.*}} on @mesh axes = [1] pairs = {{\[\[}}0, 1], [1, 2], [2, 3], [3, 0]] : tensor<8x4xf32>
  %8 = shardx.permute %x on @mesh axes = [1] pairs = [[0, 1], [1, 2], [2, 3], [3, 0]] : tensor<8x4xf32>
  // CHECK: shardx.broadcast %{{.*}} on @mesh axes = [0, 1] root = 5 : tensor<8x4xf32>
  %9 = shardx.broadcast %x on @mesh axes = [0, 1] root = 5 : tensor<8x4xf32>
  // CHECK: %[[P:.*]] = shardx.all_reduce_start %{{.*}} on @mesh axes = [1, 0] reduction = max : tensor<8x4xf32>
  %10 = shardx.all_reduce_start %x on @mesh axes = [1, 0] reduction = max : tensor<8x4xf32>
  // CHECK: shardx.wait %[[P]] : tensor<8x4xf32>
  %11 = shardx.wait %10 : tensor<8x4xf32>
  // CHECK: %[[G:.*]] = shardx.all_gather_start %{{.*}} on @mesh axes = [1] dim = 0 sizes = [3, 3, 1, 1] : tensor<?x4xf32> -> tensor<8x4xf32>
  %12 = shardx.all_gather_start %u on @mesh axes = [1] dim = 0 sizes = [3, 3, 1, 1] : tensor<?x4xf32> -> tensor<8x4xf32>
  // CHECK: shardx.wait %[[G]] : tensor<8x4xf32>
  %13 = shardx.wait %12 : tensor<8x4xf32>
  // CHECK: %[[R:.*]] = shardx.reduce_scatter_start %{{.*}} on @mesh axes = [0] dim = 0 reduction = avg stride = 2 : tensor<8x4xf32> -> tensor<4x4xf32>
  %14 = shardx.reduce_scatter_start %x on @mesh axes = [0] dim = 0 reduction = avg stride = 2 : tensor<8x4xf32> -> tensor<4x4xf32>
  // CHECK: shardx.wait %[[R]] : tensor<4x4xf32>
  %15 = shardx.wait %14 : tensor<4x4xf32>
  return
}

// -----

// Tests that the local steps and index queries round-trip.
shardx.mesh @mesh(shape = 2x4, axes = ["dp", "tp"])
// CHECK-LABEL: func.func @local_steps
func.func @local_steps(%x: tensor<8x4xf32>, %y: tensor<7x4xf32>) -> (index, index, index) {
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [1] dim = 0 : tensor<8x4xf32> -> tensor<2x4xf32>
  %0 = shardx.chunk %x on @mesh axes = [1] dim = 0 : tensor<8x4xf32> -> tensor<2x4xf32>
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [0] dim = 0 stride = 2 : tensor<8x4xf32> -> tensor<4x4xf32>
  %1 = shardx.chunk %x on @mesh axes = [0] dim = 0 stride = 2 : tensor<8x4xf32> -> tensor<4x4xf32>
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [1] dim = 0 : tensor<7x4xf32> -> tensor<?x4xf32>
  %2 = shardx.chunk %y on @mesh axes = [1] dim = 0 : tensor<7x4xf32> -> tensor<?x4xf32>
  // CHECK: shardx.chunk %{{.*}} on @mesh axes = [0] dim = 0 sizes = [6, 1] : tensor<7x4xf32> -> tensor<?x4xf32>
  %3 = shardx.chunk %y on @mesh axes = [0] dim = 0 sizes = [6, 1] : tensor<7x4xf32> -> tensor<?x4xf32>
  // CHECK: shardx.partition_value %{{.*}} on @mesh axes = [0] reduction = sum : tensor<8x4xf32>
  %4 = shardx.partition_value %x on @mesh axes = [0] reduction = sum : tensor<8x4xf32>
  // CHECK: shardx.axis_index on @mesh axes = [0, 1] : index
  %5 = shardx.axis_index on @mesh axes = [0, 1] : index
  // CHECK: shardx.local_size #shardx.layout<@mesh, [S(0), R]> shape = [7, 4] dim = 0 : index
  %6 = shardx.local_size #shardx.layout<@mesh, [S(0), R]> shape = [7, 4] dim = 0 : index
  // CHECK: shardx.local_size #shardx.layout<@mesh, [S(0), S(0)], order = {0 = [1, 0]}> shape = [7, 4] dim = 0 : index
  %7 = shardx.local_size #shardx.layout<@mesh, [SS(0, 4), S(0)]> shape = [7, 4] dim = 0 : index
  return %5, %6, %7 : index, index, index
}

// -----

// Tests that a ragged all-to-all round-trips with its run-time counts, on
// one axis and on a group of two axes.
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @ragged_all_to_all
func.func @ragged_all_to_all(%x: tensor<8x4xf32>, %c: tensor<2xi64>, %d: tensor<4xi64>) -> (tensor<16x4xf32>, tensor<4xi64>) {
  // CHECK: %{{.*}}, %{{.*}} = shardx.ragged_all_to_all %{{.*}}, %{{.*}} on @mesh axes = [1] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf32>, tensor<2xi64>
  %0, %1 = shardx.ragged_all_to_all %x, %c on @mesh axes = [1] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf32>, tensor<2xi64>
  // CHECK: shardx.ragged_all_to_all %{{.*}}, %{{.*}} on @mesh axes = [0, 1] : tensor<16x4xf32>, tensor<4xi64> -> tensor<32x4xf32>, tensor<4xi64>
  %2, %3 = shardx.ragged_all_to_all %0, %d on @mesh axes = [0, 1] : tensor<16x4xf32>, tensor<4xi64> -> tensor<32x4xf32>, tensor<4xi64>
  return %0, %3 : tensor<16x4xf32>, tensor<4xi64>
}

// -----

// Tests that a ragged all-to-all given the counts it receives round-trips
// with them and one result (the way back of a dispatch).
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @ragged_all_to_all_known
// CHECK-SAME: (%[[X:.*]]: tensor<8x4xf32>, %[[C:.*]]: tensor<2xi64>)
func.func @ragged_all_to_all_known(%x: tensor<8x4xf32>, %c: tensor<2xi64>) -> tensor<8x4xf32> {
  // CHECK: %[[Y:.*]], %[[R:.*]] = shardx.ragged_all_to_all %[[X]], %[[C]] on @mesh axes = [1] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf32>, tensor<2xi64>
  %y, %r = shardx.ragged_all_to_all %x, %c on @mesh axes = [1] : tensor<8x4xf32>, tensor<2xi64> -> tensor<16x4xf32>, tensor<2xi64>
  // CHECK: %[[B:.*]] = shardx.ragged_all_to_all %[[Y]], %[[R]] recv_counts = %[[C]] on @mesh axes = [1] : tensor<16x4xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<8x4xf32>
  %b = shardx.ragged_all_to_all %y, %r recv_counts = %c on @mesh axes = [1] : tensor<16x4xf32>, tensor<2xi64>, tensor<2xi64> -> tensor<8x4xf32>
  // CHECK: return %[[B]]
  return %b : tensor<8x4xf32>
}

// -----

// Tests that an exchange round-trips with its layouts and global shape.
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @exchange
func.func @exchange(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {
  // CHECK: shardx.exchange %{{.*}} on @mesh axes = [0] from #shardx.layout<@mesh, [S(0), S(0)]> to #shardx.layout<@mesh, [R, S(0)]> shape = [5, 3] : tensor<?x3xf32> -> tensor<?x3xf32>
  %0 = shardx.exchange %x on @mesh axes = [0] from #shardx.layout<@mesh, [S(0), S(0)]> to #shardx.layout<@mesh, [R, S(0)]> shape = [5, 3] : tensor<?x3xf32> -> tensor<?x3xf32>
  return %0 : tensor<?x3xf32>
}
