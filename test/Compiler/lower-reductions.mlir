// RUN: shardx-opt --shardx-lower-reductions --split-input-file %s | FileCheck %s

// Tests that a row sum (softmax / layer-norm denominator) becomes a loop over
// rows that loads the accumulator once, carries it through the reduction
// loop in a register and stores it once; the add is marked reassoc.
// CHECK-LABEL: func.func @row_sum
// CHECK-SAME: %[[X:.*]]: memref<64x1024xf32>, %[[OUT:.*]]: memref<64xf32>
// CHECK: scf.for %[[I:.*]] =
// CHECK:   %[[INIT:.*]] = memref.load %[[OUT]][%[[I]]]
// CHECK:   %[[SUM:.*]] = scf.for %[[J:.*]] = {{.*}} iter_args(%[[ACC:.*]] = %[[INIT]]) -> (f32)
// CHECK:     %[[A:.*]] = memref.load %[[X]][%[[I]], %[[J]]]
// CHECK:     %[[S:.*]] = arith.addf %[[ACC]], %[[A]] fastmath<reassoc> : f32
// CHECK:     scf.yield %[[S]]
// CHECK:   memref.store %[[SUM]], %[[OUT]][%[[I]]]
// CHECK-NOT: linalg.generic
func.func @row_sum(%x: memref<64x1024xf32>, %out: memref<64xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<64x1024xf32>) outs(%out : memref<64xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}

// -----

// Tests that a row max on dynamic shapes keeps its maximumf unflagged (an
// exact, order-free combiner) and that a sum of squares with two outputs
// (a fused mean/variance) carries both accumulators; only the combining
// adds get reassoc, not the square.
// CHECK-LABEL: func.func @row_max
// CHECK: memref.dim
// CHECK: scf.for
// CHECK:   scf.for {{.*}} iter_args({{.*}}) -> (f32)
// CHECK:     arith.maximumf %{{[^ ]*}}, %{{[^ ]*}} : f32
func.func @row_max(%x: memref<?x?xf32>, %out: memref<?xf32>) {
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<?x?xf32>) outs(%out : memref<?xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.maximumf %acc, %a : f32
    linalg.yield %s : f32
  }
  return
}

// CHECK-LABEL: func.func @two_sums_3d
// CHECK: scf.for %[[B:.*]] =
// CHECK:   scf.for %[[S:.*]] =
// CHECK:     %[[I0:.*]] = memref.load %{{.*}}[%[[B]], %[[S]]]
// CHECK:     %[[I1:.*]] = memref.load %{{.*}}[%[[B]], %[[S]]]
// CHECK:     %{{.*}}:2 = scf.for {{.*}} iter_args(%[[A0:.*]] = %[[I0]], %[[A1:.*]] = %[[I1]]) -> (f64, f64)
// CHECK:       %[[SQ:.*]] = arith.mulf %{{.*}}, %{{.*}} : f64
// CHECK:       arith.addf %[[A0]], %{{.*}} fastmath<reassoc> : f64
// CHECK:       arith.addf %[[A1]], %[[SQ]] fastmath<reassoc> : f64
func.func @two_sums_3d(%x: memref<2x8x32xf64>, %sum: memref<2x8xf64>, %sq: memref<2x8xf64>) {
  linalg.generic {indexing_maps = [affine_map<(b, s, d) -> (b, s, d)>,
                                   affine_map<(b, s, d) -> (b, s)>,
                                   affine_map<(b, s, d) -> (b, s)>],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x : memref<2x8x32xf64>) outs(%sum, %sq : memref<2x8xf64>, memref<2x8xf64>) {
  ^bb0(%a: f64, %acc0: f64, %acc1: f64):
    %m = arith.mulf %a, %a : f64
    %s0 = arith.addf %acc0, %a : f64
    %s1 = arith.addf %acc1, %m : f64
    linalg.yield %s0, %s1 : f64, f64
  }
  return
}

// -----

// Tests that a full reduction to a 0-d buffer (no parallel loop) becomes one
// reduction loop nest, and that an integer sum needs no flag.
// CHECK-LABEL: func.func @full_sum_i32
// CHECK: %[[INIT:.*]] = memref.load %{{.*}}[] : memref<i32>
// CHECK: scf.for {{.*}} iter_args(%{{.*}} = %[[INIT]]) -> (i32)
// CHECK:   scf.for {{.*}} -> (i32)
// CHECK:     arith.addi
// CHECK: memref.store %{{.*}}, %{{.*}}[] : memref<i32>
func.func @full_sum_i32(%x: memref<4x5xi32>, %out: memref<i32>) {
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> ()>],
                  iterator_types = ["reduction", "reduction"]}
      ins(%x : memref<4x5xi32>) outs(%out : memref<i32>) {
  ^bb0(%a: i32, %acc: i32):
    %s = arith.addi %acc, %a : i32
    linalg.yield %s : i32
  }
  return
}

// -----

// Tests what stays for convert-linalg-to-loops: a column sum (reduction loop
// outside the parallel one: its inner loop is elementwise already), an op on
// tensors, an op reading linalg.index, and a reduction whose input is a view
// of its output buffer (the accumulator must be stored every iteration).
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-4: linalg.generic
// CHECK-NOT: scf.for
func.func @left_alone(%x: memref<4x16xf32>, %col: memref<16xf32>, %t: tensor<4x16xf32>,
                      %row: memref<4xf32>, %buf: memref<4x16xf32>) -> tensor<4xf32> {
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>],
                  iterator_types = ["reduction", "parallel"]}
      ins(%x : memref<4x16xf32>) outs(%col : memref<16xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  %e = tensor.empty() : tensor<4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%t : tensor<4x16xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<4x16xf32>) outs(%row : memref<4xf32>) {
  ^bb0(%a: f32, %acc: f32):
    %j = linalg.index 1 : index
    %ji = arith.index_cast %j : index to i32
    %jf = arith.sitofp %ji : i32 to f32
    %m = arith.mulf %a, %jf : f32
    %s = arith.addf %acc, %m : f32
    linalg.yield %s : f32
  }
  %first = memref.subview %buf[0, 0] [4, 1] [1, 1] : memref<4x16xf32> to memref<4xf32, strided<[16]>>
  linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i)>],
                  iterator_types = ["parallel", "reduction"]}
      ins(%buf : memref<4x16xf32>) outs(%first : memref<4xf32, strided<[16]>>) {
  ^bb0(%a: f32, %acc: f32):
    %s = arith.addf %acc, %a : f32
    linalg.yield %s : f32
  }
  return %r : tensor<4xf32>
}
