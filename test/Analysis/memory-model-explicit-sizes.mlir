// RUN: shardx-opt %s --shardx-spmd --shardx-print-plan -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s
// RUN: shardx-opt %s --shardx-spmd --shardx-print-plan=memory-level=buffers -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests an explicit uneven shard over a group of 100 ranks (3 rows, then 2,
// then 1): the local program computes a rank's rows as a chain of 100
// selects, which the memory model follows in a loop. The result is at most
// 3 x 4 x 4 = 48 bytes, at both levels. Before, the chain went deeper than
// the evaluation's depth bound: the result counted 0 bytes (with a remark).
// CHECK: memory of @explicit per rank: peak 96 B (96 bytes)
// CHECK-NEXT: arguments 48 B: inputs 48 B
// CHECK-NEXT: allocated at the peak 48 B (48 bytes): results 48 B
// CHECK-NOT: dynamic size
shardx.mesh @mesh(shape = 100)
func.func @explicit(%x: tensor<200x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)], sizes = {0 = [3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1]}>})
    -> (tensor<200x4xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)], sizes = {0 = [3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1]}>}) {
  %e = tensor.empty() : tensor<200x4xf32>
  %y = linalg.exp ins(%x : tensor<200x4xf32>) outs(%e : tensor<200x4xf32>) -> tensor<200x4xf32>
  return %y : tensor<200x4xf32>
}
