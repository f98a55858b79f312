// RUN: shardx-opt %s --shardx-spmd --canonicalize | FileCheck %s
// RUN: shardx-run %s --check --int-range 6 | FileCheck %s --check-prefix=RAN
// RAN: check passed

// Tests that a gather along dim 0 (`torch.gather`: the index reads the
// column loop as well) from a column-split table is not taken for an
// embedding lookup, whose rule splits the result's columns with the
// table's but not the index's: that plan split the op and left its index
// whole, and the partitioned generic did not verify. It is an aligned
// gather (EmbeddingRule.h): the table's columns are read at the column
// loop, so the index and the result split their columns with the table's
// and each rank reads its own columns, no collective (before that rule the
// table was all-gathered).
// CHECK-LABEL: func.func @gather
// CHECK-NOT: shardx.all_gather
// CHECK: %[[IDX:.*]] = shardx.chunk %arg1 on @mesh axes = [0] dim = 1 : tensor<30x4xi64> -> tensor<30x2xi64>
// CHECK: linalg.generic {{.*}} ins(%[[IDX]] : tensor<30x2xi64>) outs(%{{.*}} : tensor<30x2xf32>)
// CHECK: %[[COL:.*]] = linalg.index 1 : index
// CHECK: tensor.extract %arg0[%{{.*}}, %[[COL]]] : tensor<6x2xf32>
shardx.mesh @mesh(shape = 2)
func.func @gather(%t: tensor<6x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>},
                  %idx: tensor<30x4xi64>) -> tensor<30x4xf32> {
  %e = tensor.empty() : tensor<30x4xf32>
  %v = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%idx : tensor<30x4xi64>) outs(%e : tensor<30x4xf32>) {
  ^bb0(%i: i64, %o: f32):
    %r = arith.index_cast %i : i64 to index
    %c = linalg.index 1 : index
    %x = tensor.extract %t[%r, %c] : tensor<6x4xf32>
    linalg.yield %x : f32
  } -> tensor<30x4xf32>
  return %v : tensor<30x4xf32>
}
