// RUN: shardx-opt %s --shardx-print-plan -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests that the memory model's size arithmetic reads an i1 `true` as 1 (a
// comparison's result is 0 or 1) and zero-extends it: on a local program of
// 3 ranks, the result has (1 + rank) * 2 elements, 6 at the last rank (24
// bytes). Before, the constant was sign-extended to -1: 8 bytes.
// CHECK: memory of @flags per rank: peak 40 B (40 bytes)
// CHECK-NEXT: arguments 16 B: inputs 16 B
// CHECK-NEXT: allocated at the peak 24 B (24 bytes): results 24 B
// CHECK-NOT: dynamic size
shardx.mesh @mesh(shape = 3)
func.func @flags(%x: tensor<4xf32>) -> tensor<?xf32> attributes {shardx.signature = {arg_layouts = [#shardx.layout<@mesh, [R]>], arg_types = [tensor<4xf32>], mesh = @mesh, result_layouts = [#shardx.layout<@mesh, [R]>], result_types = [tensor<4xf32>]}} {
  %true = arith.constant true
  %c2 = arith.constant 2 : index
  %i = shardx.axis_index on @mesh axes = [0] : index
  %w = arith.extui %true : i1 to i64
  %one = arith.index_cast %w : i64 to index
  %n = arith.addi %one, %i : index
  %m = arith.muli %n, %c2 : index
  %e = tensor.empty(%m) : tensor<?xf32>
  return %e : tensor<?xf32>
}
