// RUN: shardx-opt %s --split-input-file --shardx-localize --verify-diagnostics | FileCheck %s

// Tests that shardx-localize alone (on the output of shardx-lower-reshards)
// gives arguments, results and ops their local types, keeps the global
// types and layouts in shardx.signature, resizes a sharded splat, drops the
// casts around a lowered reshard and the layout attributes, and leaves a
// function without layouts as it is.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @gather
// CHECK-SAME: (%[[X:[^:]*]]: tensor<4x4xf32>) -> tensor<8x4xf32>
// CHECK-SAME: shardx.signature = {arg_layouts = [#shardx.layout<@mesh, [S(0)]>], arg_types = [tensor<8x4xf32>], mesh = @mesh, result_layouts = [#shardx.layout<@mesh, [R]>], result_types = [tensor<8x4xf32>]}
func.func @gather(%x: tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  // CHECK-NEXT: %[[C:.*]] = arith.constant dense<1.000000e+00> : tensor<4x4xf32>
  %c = arith.constant {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]} dense<1.0> : tensor<8x4xf32>
  // CHECK-NEXT: %[[Y:.*]] = arith.addf %[[X]], %[[C]] : tensor<4x4xf32>
  %y = arith.addf %x, %c {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>],
      shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>, #shardx.layout<@mesh, [S(0)]>]} : tensor<8x4xf32>
  %l = builtin.unrealized_conversion_cast %y : tensor<8x4xf32> to tensor<4x4xf32>
  // CHECK-NEXT: %[[G:.*]] = shardx.all_gather %[[Y]] on @mesh axes = [0] dim = 0 : tensor<4x4xf32> -> tensor<8x4xf32>
  %g = shardx.all_gather %l on @mesh axes = [0] dim = 0 : tensor<4x4xf32> -> tensor<8x4xf32>
  %r = builtin.unrealized_conversion_cast %g : tensor<8x4xf32> to tensor<8x4xf32>
  // CHECK-NEXT: return %[[G]] : tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}
// CHECK-LABEL: func.func @unsharded
// CHECK-SAME: (%{{[^:]*}}: tensor<8xf32>) -> tensor<8xf32> {
// CHECK-NEXT: arith.addf %{{.*}} : tensor<8xf32>
func.func @unsharded(%x: tensor<8xf32>) -> tensor<8xf32> {
  %y = arith.addf %x, %x : tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

// Tests that uneven shards (7 rows on 4 ranks: 2, 2, 2, 1) give dynamic
// local dims whose sizes follow torch.chunk from the rank's coordinate, and
// that linalg.index of the split loop gets the rank's offset.
shardx.mesh @mesh(shape = 4)
#map = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @uneven
// CHECK-SAME: (%[[X:[^:]*]]: tensor<?x3xf32>) -> tensor<?x3xf32>
func.func @uneven(%x: tensor<7x3xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<7x3xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  // The piece of rank j: [min(2j, 7), min(2j + 2, 7)), 2 = ceil(7 / 4).
  // CHECK: %[[C7:.*]] = arith.constant 7 : index
  // CHECK: %[[J:.*]] = shardx.axis_index on @mesh axes = [0] : index
  // CHECK: %[[CHUNK:.*]] = arith.ceildivui %[[C7]], %{{.*}} : index
  // CHECK: %[[LO0:.*]] = arith.muli %[[J]], %[[CHUNK]] : index
  // CHECK: %[[LO:.*]] = arith.minui %[[LO0]], %[[C7]] : index
  // CHECK: %[[HI0:.*]] = arith.addi %[[LO]], %[[CHUNK]] : index
  // CHECK: %[[HI:.*]] = arith.minui %[[HI0]], %[[C7]] : index
  // CHECK: %[[N:.*]] = arith.subi %[[HI]], %[[LO]] : index
  // CHECK: %[[E:.*]] = tensor.empty(%[[N]]) : tensor<?x3xf32>
  %e = tensor.empty() {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]} : tensor<7x3xf32>
  // The generic's offset, computed the same way: 0 + min(2j, 7).
  // CHECK: %[[OFF:.*]] = arith.addi %c0{{[_0-9]*}}, %{{.*}} : index
  // CHECK-NEXT: arith.subi
  // CHECK-NEXT: linalg.generic
  // CHECK-SAME: ins(%[[X]] : tensor<?x3xf32>) outs(%[[E]] : tensor<?x3xf32>)
  // CHECK-NOT: shardx.
  // CHECK: %[[I:.*]] = linalg.index 0 : index
  // CHECK-NEXT: arith.addi %[[I]], %[[OFF]] : index
  // CHECK: } -> tensor<?x3xf32>
  %r = linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<7x3xf32>) outs(%e : tensor<7x3xf32>)
      attrs = {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>],
               shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>, #shardx.layout<@mesh, [S(0)]>]} {
  ^bb0(%a: f32, %o: f32):
    %i = linalg.index 0 : index
    %ii = arith.index_cast %i : index to i64
    %f = arith.sitofp %ii : i64 to f32
    %s = arith.addf %a, %f : f32
    linalg.yield %s : f32
  } -> tensor<7x3xf32>
  return %r : tensor<7x3xf32>
}

// -----

// Tests that tensor.expand_shape takes the local output shape.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @expand
// CHECK: tensor.expand_shape %{{.*}} {{\[\[}}0, 1], [2]] output_shape [2, 2, 4] : tensor<4x4xf32> into tensor<2x2x4xf32>
func.func @expand(%x: tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<4x2x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  %y = tensor.expand_shape %x [[0, 1], [2]] output_shape [4, 2, 4]
      {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>],
       shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>]} : tensor<8x4xf32> into tensor<4x2x4xf32>
  return %y : tensor<4x2x4xf32>
}

// -----

// Tests that a reshard left unlowered is an error that names the passes to
// run first.
shardx.mesh @mesh(shape = 2)
func.func @unlowered(%x: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [R]>}) {
  // expected-error @+1 {{run shardx-insert-reshards and shardx-lower-reshards before shardx-localize}}
  %y = shardx.redistribute %x : tensor<8xf32> from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]>
  return %y : tensor<8xf32>
}

// -----

// Tests that a sharded constant that is not a splat is an error.
shardx.mesh @mesh(shape = 2)
func.func @dense(%x: tensor<4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  // expected-error @+1 {{a sharded non-splat constant cannot be expanded}}
  %c = arith.constant {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>]} dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %y = arith.addf %x, %c {shardx.layouts = [#shardx.layout<@mesh, [S(0)]>],
      shardx.operand_layouts = [#shardx.layout<@mesh, [S(0)]>, #shardx.layout<@mesh, [S(0)]>]} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// A sharded function with control flow between blocks is an error, not a
// crash (the local body is built as one block).
shardx.mesh @mesh(shape = 2)
// expected-error @+1 {{cannot expand a sharded function with 3 blocks}}
func.func @branches(%x: tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %p: i1)
    -> (tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  cf.cond_br %p, ^a, ^b
^a:
  return %x : tensor<8x4xf32>
^b:
  return %x : tensor<8x4xf32>
}
