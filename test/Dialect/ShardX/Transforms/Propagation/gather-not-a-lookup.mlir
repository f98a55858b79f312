// RUN: shardx-opt %s --shardx-spmd | FileCheck %s

// Tests that a gather along dim 0 (`torch.gather`: the index reads the
// column loop as well) from a column-split table is not taken for an
// embedding lookup, whose rule splits the result's columns with the
// table's but not the index's: that plan split the op and left its index
// whole, and the partitioned generic did not verify. The table is gathered
// (a split of the index with the columns would need no collective; no rule
// does that yet).
// CHECK-LABEL: func.func @gather
// CHECK: %[[T:.*]] = shardx.all_gather %arg0 on @mesh axes = [0] dim = 1 : tensor<6x2xf32> -> tensor<6x4xf32>
// CHECK: linalg.generic {{.*}} ins(%arg1 : tensor<30x4xi64>) outs(%{{.*}} : tensor<30x4xf32>)
// CHECK: tensor.extract %[[T]][{{.*}}] : tensor<6x4xf32>
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
