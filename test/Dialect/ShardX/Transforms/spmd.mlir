// RUN: shardx-opt %s --split-input-file --shardx-spmd --verify-diagnostics | FileCheck %s

// Tests that even shards give static local types, the signature keeps the
// global types and layouts, and the reduction over the split dim becomes an
// all-reduce.
shardx.mesh @mesh(shape = 2x2)
// CHECK-LABEL: func.func @even
// CHECK-SAME: (%arg0: tensor<2x4xf32>) -> tensor<4xf32>
// CHECK-SAME: shardx.signature = {arg_layouts = [#shardx.layout<@mesh, [S(0), S(0)]>], arg_types = [tensor<8x4xf32>]
func.func @even(%x: tensor<8x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0), S(0)]>}) -> tensor<4xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  // CHECK: linalg.reduce ins(%arg0 : tensor<2x4xf32>) outs(%{{.*}} : tensor<4xf32>)
  %s = linalg.reduce ins(%x : tensor<8x4xf32>) outs(%f : tensor<4xf32>) dimensions = [0]
    (%in: f32, %acc: f32) {
      %r = arith.addf %in, %acc : f32
      linalg.yield %r : f32
    }
  // CHECK: shardx.all_reduce %{{.*}} on @mesh axes = [0, 1] reduction = sum : tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// Tests that uneven shards (7 rows on 4 ranks: 2, 2, 2, 1) give dynamic local
// dims whose sizes follow torch.chunk from the rank's coordinate, and that
// linalg.index of the split loop gets the rank's offset.
shardx.mesh @mesh(shape = 4)
// CHECK-LABEL: func.func @uneven
// CHECK-SAME: (%arg0: tensor<?x3xf32>) -> tensor<?x3xf32>
func.func @uneven(%x: tensor<7x3xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>})
    -> (tensor<7x3xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}) {
  // The piece of rank j: [min(2j, 7), min(2j + 2, 7)).
  // CHECK-DAG: %[[C2:.*]] = arith.constant 2 : index
  // CHECK-DAG: %[[C7:.*]] = arith.constant 7 : index
  // CHECK: %[[J:.*]] = shardx.axis_index on @mesh axes = [0] : index
  // CHECK: %[[LO0:.*]] = arith.muli %[[J]], %[[C2]] : index
  // CHECK: %[[LO:.*]] = arith.minui %[[LO0]], %[[C7]] : index
  // CHECK: tensor.empty(%{{.*}}) : tensor<?x3xf32>
  %e = tensor.empty() : tensor<7x3xf32>
  // CHECK: linalg.generic
  // CHECK: %[[I:.*]] = linalg.index 0 : index
  // CHECK: arith.addi %[[I]], %[[LO]] : index
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<7x3xf32>) outs(%e : tensor<7x3xf32>) {
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

// Tests that a constant stays whole and each rank keeps its chunk of it.
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @constant
func.func @constant() -> tensor<4xf32> {
  // CHECK: %[[C:.*]] = arith.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xf32>
  // CHECK: shardx.chunk %[[C]] on @mesh axes = [0] dim = 0 : tensor<4xf32> -> tensor<2xf32>
  %c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %a = shardx.annotate %c : tensor<4xf32> to #shardx.layout<@mesh, [S(0)]>
  %y = arith.addf %a, %a : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Tests that a sharded function of several blocks whose join argument is
// dead is simplified to one block before propagation (by the pipeline's
// canonicalizer; a function that stays multi-block is rejected by
// propagation).
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @dead_join
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2xf32>, %{{[^:]*}}: i1) -> tensor<2xf32>
// CHECK-NEXT: return %[[X]] : tensor<2xf32>
// CHECK-NEXT: }
func.func @dead_join(%x: tensor<4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %c: i1) -> tensor<4xf32> {
  cf.cond_br %c, ^bb1, ^bb2
^bb1:
  %p = arith.addf %x, %x : tensor<4xf32>
  cf.br ^bb3(%p : tensor<4xf32>)
^bb2:
  %q = arith.mulf %x, %x : tensor<4xf32>
  cf.br ^bb3(%q : tensor<4xf32>)
^bb3(%y: tensor<4xf32>):
  return %x : tensor<4xf32>
}

// -----

// Tests that a replicated tensor of dynamic global shape in a sharded
// function is its own local tensor: tensor.empty and tensor.expand_shape
// keep their sizes (they asked the layout for a split of the dynamic dim
// and dereferenced none: a segfault, found by fuzzing shardx-auto-shard on
// test/Exec/Inputs/async-uneven.mlir).
shardx.mesh @mesh(shape = 2)
// CHECK-LABEL: func.func @replicated_dynamic
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[N:.*]]: index, %[[Y:.*]]: tensor<?xf32>)
// CHECK: %[[E:.*]] = tensor.empty(%[[N]]) : tensor<?x4xf32>
// CHECK: linalg.fill {{.*}} outs(%[[E]] : tensor<?x4xf32>)
// CHECK: tensor.expand_shape %[[Y]] {{\[\[}}0, 1]] output_shape [%[[N]], 4] : tensor<?xf32> into tensor<?x4xf32>
func.func @replicated_dynamic(%x: tensor<8xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>}, %n: index, %y: tensor<?xf32>) -> (tensor<8xf32>, tensor<?x4xf32>, tensor<?x4xf32>) {
  %c = arith.constant 1.0 : f32
  %e = tensor.empty(%n) : tensor<?x4xf32>
  %f = linalg.fill ins(%c : f32) outs(%e : tensor<?x4xf32>) -> tensor<?x4xf32>
  %g = tensor.expand_shape %y [[0, 1]] output_shape [%n, 4] : tensor<?xf32> into tensor<?x4xf32>
  return %x, %f, %g : tensor<8xf32>, tensor<?x4xf32>, tensor<?x4xf32>
}
