// RUN: shardx-opt %s --split-input-file --shardx-propagate --shardx-insert-reshards --shardx-verify-layouts --verify-diagnostics | FileCheck %s

// Tests that a column-parallel matmul keeps the column split and a
// row-parallel one leaves a pending sum that the result reduces.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @megatron
func.func @megatron(%x: tensor<4x8xf32>,
                    %w1: tensor<8x16xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>},
                    %w2: tensor<16x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> tensor<4x8xf32> {
  %z = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4x16xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: linalg.matmul {{.*}}shardx.layouts = [#shardx.layout<@mesh, [S(1)]>]
  %h = linalg.matmul ins(%x, %w1 : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f1 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %e2 = tensor.empty() : tensor<4x8xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: linalg.matmul {{.*}}shardx.layouts = [#shardx.layout<@mesh, [P(sum)]>]
  %y = linalg.matmul ins(%h, %w2 : tensor<4x16xf32>, tensor<16x8xf32>) outs(%f2 : tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: shardx.redistribute {{.*}} from #shardx.layout<@mesh, [P(sum)]> to #shardx.layout<@mesh, [R]>
  return %y : tensor<4x8xf32>
}

// -----

// Tests that a max-reduction over a sharded dim gives P(max), and that a
// non-linear op reduces it first.
shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @amax
func.func @amax(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>}) -> tensor<4xf32> {
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%ninf : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  // CHECK: linalg.reduce {{.*}}shardx.layouts = [#shardx.layout<@mesh, [P(max)]>]
  %m = linalg.reduce ins(%x : tensor<4x8xf32>) outs(%f : tensor<4xf32>) dimensions = [1]
    (%in: f32, %acc: f32) {
      %r = arith.maximumf %in, %acc : f32
      linalg.yield %r : f32
    }
  // CHECK: shardx.redistribute {{.*}} from #shardx.layout<@mesh, [P(max)]> to #shardx.layout<@mesh, [R]>
  // CHECK: linalg.exp
  %o = linalg.exp ins(%m : tensor<4xf32>) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  return %o : tensor<4xf32>
}

// -----

// Tests that a sum whose init is not the identity is not sharded over its
// reduced dim (the init would be counted once per rank).
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @init_not_identity
func.func @init_not_identity(%x: tensor<4x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>}, %acc: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK: shardx.redistribute {{.*}} from #shardx.layout<@mesh, [S(1)]> to #shardx.layout<@mesh, [R]>
  // CHECK: linalg.reduce {{.*}}shardx.layouts = [#shardx.layout<@mesh, [R]>]
  %m = linalg.reduce ins(%x : tensor<4x8xf32>) outs(%acc : tensor<4xf32>) dimensions = [1]
    (%in: f32, %a: f32) {
      %r = arith.addf %in, %a : f32
      linalg.yield %r : f32
    }
  return %m : tensor<4xf32>
}

// -----

// Tests that a split dim merged by a reshape stays split when the split
// falls on the major factor, and that an odd size that cannot stay split
// gets a reshard instead of a wrong layout.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @reshape
func.func @reshape(%x: tensor<4x3xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
                   %y: tensor<3x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> (tensor<12xf32>, tensor<12xf32>) {
  // 3 rows on 2 ranks: 2 + 1 rows are 8 + 4 elements, not torch.chunk's 6 + 6.
  // CHECK: %[[G:.*]] = shardx.redistribute %arg1 {{.*}} from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]>
  // CHECK: tensor.collapse_shape %arg0 {{.*}}shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]
  %a = tensor.collapse_shape %x [[0, 1]] : tensor<4x3xf32> into tensor<12xf32>
  // CHECK: tensor.collapse_shape %[[G]] {{.*}}shardx.layouts = [#shardx.layout<@mesh, [R]>]
  %b = tensor.collapse_shape %y [[0, 1]] : tensor<3x4xf32> into tensor<12xf32>
  return %a, %b : tensor<12xf32>, tensor<12xf32>
}

// -----

// Tests that a split of the minor factor of a merged dim becomes a strided
// split (DTensor's _StridedShard) of the merged dim.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @strided
func.func @strided(%x: tensor<3x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>}) -> tensor<12xf32> {
  // CHECK: tensor.collapse_shape {{.*}}shardx.layouts = [#shardx.layout<@mesh, [S(0)], strides = {0 = [3]}>]
  %a = tensor.collapse_shape %x [[0, 1]] : tensor<3x4xf32> into tensor<12xf32>
  return %a : tensor<12xf32>
}

// -----

// Tests nested sharding of one dim through reshapes on a 2-D mesh: both
// factors of a merged dim split (batch over dp, sequence over tp) give one
// dim split twice, tp strided inside dp's blocks (DTensor: [Shard(0),
// _StridedShard(0, 2)]; python/tests/test_dtensor_layouts.py compares every
// rank's indices with DTensor's view rules); unmerging gives the two splits
// back; a split that falls across two new factors is resharded.
shardx.mesh @mesh(shape = 2x2, axes = ["dp", "tp"])
// CHECK-LABEL: func.func @flatten
// CHECK-SAME: -> (tensor<24x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)], strides = {0 = [1, 2]}>})
func.func @flatten(%x: tensor<4x6x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(1)]>}) -> tensor<24x8xf32> {
  // CHECK-NOT: shardx.redistribute
  %0 = tensor.collapse_shape %x [[0, 1], [2]] : tensor<4x6x8xf32> into tensor<24x8xf32>
  return %0 : tensor<24x8xf32>
}
// CHECK-LABEL: func.func @unflatten
// CHECK-SAME: -> (tensor<4x6x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(1)]>})
func.func @unflatten(%x: tensor<24x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), SS(0, 2)]>}) -> tensor<4x6x8xf32> {
  // CHECK-NOT: shardx.redistribute
  %0 = tensor.expand_shape %x [[0, 1], [2]] output_shape [4, 6, 8] : tensor<24x8xf32> into tensor<4x6x8xf32>
  return %0 : tensor<4x6x8xf32>
}
// CHECK-LABEL: func.func @across
func.func @across(%x: tensor<4x6x8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(1)]>}) -> tensor<4x3x16xf32> {
  // 48 in halves is 1.5 rows of 16 each: tp's split is made whole first.
  // CHECK: tensor.collapse_shape {{.*}}shardx.layouts = [#shardx.layout<@mesh, [S(0), S(1)]>]
  // CHECK: shardx.redistribute {{.*}} from #shardx.layout<@mesh, [S(0), S(1)]> to #shardx.layout<@mesh, [S(0), R]>
  // CHECK: tensor.expand_shape {{.*}}shardx.layouts = [#shardx.layout<@mesh, [S(0), R]>]
  %0 = tensor.collapse_shape %x [[0], [1, 2]] : tensor<4x6x8xf32> into tensor<4x48xf32>
  %1 = tensor.expand_shape %0 [[0], [1, 2]] output_shape [4, 3, 16] : tensor<4x48xf32> into tensor<4x3x16xf32>
  return %1 : tensor<4x3x16xf32>
}

// -----

// Tests that annotations are hard constraints at their program point: two
// that disagree on one value are both honored (one reshard each, the
// Partial one made by partition_value, never dropped), and the declared
// result layout after them is a third.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @constraints
func.func @constraints(%x: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) -> (tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  // CHECK-DAG: %[[P:.*]] = shardx.redistribute %arg0 {{.*}} from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [P(sum)]>
  // CHECK-DAG: %[[R:.*]] = shardx.redistribute %arg0 {{.*}} from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]>
  // CHECK: %[[PS:.*]] = shardx.redistribute %[[P]] {{.*}} from #shardx.layout<@mesh, [P(sum)]> to #shardx.layout<@mesh, [S(0)]>
  // CHECK: return %[[PS]], %[[R]]
  %p = shardx.annotate %x : tensor<8xf32> to #shardx.layout<@mesh, [P(sum)]>
  %r = shardx.annotate %x : tensor<8xf32> to #shardx.layout<@mesh, [R]>
  return %p, %r : tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that an op without a rule runs replicated, with one warning.
shardx.mesh @mesh(shape = 2)
func.func @norule(%x: tensor<4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %s: tensor<1xi64>) -> tensor<4xf32> {
  // expected-warning @+1 {{no sharding rule for 'tensor.reshape': it runs replicated}}
  %a = tensor.reshape %x(%s) : (tensor<4xf32>, tensor<1xi64>) -> tensor<4xf32>
  %b = tensor.reshape %a(%s) : (tensor<4xf32>, tensor<1xi64>) -> tensor<4xf32>
  return %b : tensor<4xf32>
}

// -----

// Tests slicing, concatenation and padding: a dim taken whole keeps its
// split, a sliced, concatenated or padded dim is whole first.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @slices
func.func @slices(%x: tensor<8x6xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
                  %y: tensor<8x6xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>}) -> (tensor<8x6xf32>, tensor<4x6xf32>) {
  // Rows 2..5 of a row-split tensor are whole first. Columns 3..5 of a
  // column-split one feed a row-split concat: the whole-graph refinement
  // moves the tensor to rows with one all-to-all (cheaper than gathering it
  // and chunking the slice) and slices there.
  // CHECK: %[[XR:.*]] = shardx.redistribute %arg0 {{.*}} from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]>
  // CHECK: %[[YS:.*]] = shardx.redistribute %arg1 {{.*}} from #shardx.layout<@mesh, [S(1)]> to #shardx.layout<@mesh, [S(0)]>
  // A whole dim keeps its split.
  // CHECK: tensor.extract_slice %arg0{{.*}}shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]
  %a = tensor.extract_slice %x[0, 0] [8, 3] [1, 1] : tensor<8x6xf32> to tensor<8x3xf32>
  // CHECK: %[[B:.*]] = tensor.extract_slice %[[YS]]{{.*}}shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]
  %b = tensor.extract_slice %y[0, 3] [8, 3] [1, 1] : tensor<8x6xf32> to tensor<8x3xf32>
  // CHECK-NOT: shardx.redistribute
  // CHECK: tensor.concat dim(1) %{{.*}}, %[[B]] {{.*}}shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]
  %c = tensor.concat dim(1) %a, %b : (tensor<8x3xf32>, tensor<8x3xf32>) -> tensor<8x6xf32>
  // CHECK: tensor.extract_slice %[[XR]]{{.*}}shardx.layouts = [#shardx.layout<@mesh, [R]>]
  %d = tensor.extract_slice %x[2, 0] [4, 6] [1, 1] : tensor<8x6xf32> to tensor<4x6xf32>
  return %c, %d : tensor<8x6xf32>, tensor<4x6xf32>
}

// -----

shardx.mesh @a(shape = 2)
shardx.mesh @b(shape = 2)
// expected-note @+1 {{first layout here}}
func.func @mesh_mismatch(%x: tensor<4xf32> {shardx.layout = #shardx.layout<@a, [S(0)]>}) -> tensor<4xf32> {
  // expected-error @+1 {{mesh mismatch: layout on @b where the function uses @a}}
  %y = shardx.annotate %x : tensor<4xf32> to #shardx.layout<@b, [S(0)]>
  return %y : tensor<4xf32>
}
