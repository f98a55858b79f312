// RUN: shardx-opt %s --split-input-file --shardx-propagate --shardx-insert-reshards --shardx-verify-layouts \
// RUN:   | shardx-opt --split-input-file --shardx-print-plan -o /dev/null 2>&1 | FileCheck %s

// Tests that a lookup of a table pending a sum (a row-parallel matmul's
// output) reads it as it is and pends the same sum: the all-reduce moves to
// the lookup's [8, 32] result, not the [16, 32] table
// (shardx/Rules/EmbeddingRule.h).
shardx.mesh @mesh(shape = 2)
// CHECK: remark: plan [P(sum)] -> [R] for tensor<8x32xf32>: 1 step, 1 collective, 1024 bytes/rank
// CHECK-NOT: remark: plan
func.func @sum_table(%a: tensor<16x64xf32> {shardx.layout = #shardx.layout<@mesh, [S(1)]>},
                     %b: tensor<64x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
                     %idx: tensor<8xi64>) -> tensor<8x32xf32> {
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<16x32xf32>
  %f = linalg.fill ins(%z : f32) outs(%e0 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %table = linalg.matmul ins(%a, %b : tensor<16x64xf32>, tensor<64x32xf32>) outs(%f : tensor<16x32xf32>) -> tensor<16x32xf32>
  %e = tensor.empty() : tensor<8x32xf32>
  %v = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%idx : tensor<8xi64>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%i: i64, %o: f32):
    %r = arith.index_cast %i : i64 to index
    %c = linalg.index 1 : index
    %x = tensor.extract %table[%r, %c] : tensor<16x32xf32>
    linalg.yield %x : f32
  } -> tensor<8x32xf32>
  return %v : tensor<8x32xf32>
}

// -----

// Tests that a table pending a max is reduced before the lookup (a max does
// not pass through the lookup's rule): the all-reduce is the [16, 32]
// table's.
shardx.mesh @mesh(shape = 2)
// CHECK: remark: plan [P(max)] -> [R] for tensor<16x32xf32>: 1 step, 1 collective
// CHECK-NOT: remark: plan
func.func @max_table(%t: tensor<4x16x32xf32> {shardx.layout = #shardx.layout<@mesh, [S(0)]>},
                     %idx: tensor<8xi64>) -> tensor<8x32xf32> {
  %lo = arith.constant 0xFF800000 : f32
  %e0 = tensor.empty() : tensor<16x32xf32>
  %f = linalg.fill ins(%lo : f32) outs(%e0 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %table = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>], iterator_types = ["reduction", "parallel", "parallel"]} ins(%t : tensor<4x16x32xf32>) outs(%f : tensor<16x32xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %m = arith.maximumf %x, %acc : f32
    linalg.yield %m : f32
  } -> tensor<16x32xf32>
  %e = tensor.empty() : tensor<8x32xf32>
  %v = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%idx : tensor<8xi64>) outs(%e : tensor<8x32xf32>) {
  ^bb0(%i: i64, %o: f32):
    %r = arith.index_cast %i : i64 to index
    %c = linalg.index 1 : index
    %x = tensor.extract %table[%r, %c] : tensor<16x32xf32>
    linalg.yield %x : f32
  } -> tensor<8x32xf32>
  return %v : tensor<8x32xf32>
}
