// RUN: shardx-opt %s --split-input-file --shardx-print-plan -o /dev/null --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s

// Tests that the plan of S -> R is one all_gather at the per-rank lower
// bound: (n - 1) / n of the 16x8 f32 tensor (512 bytes) is 384 bytes.
shardx.mesh @mesh(shape = 4)
func.func @gather(%x: tensor<16x8xf32>) -> tensor<16x8xf32> {
  %0 = shardx.redistribute %x : tensor<16x8xf32> from #shardx.layout<@mesh, [S(0)]> to #shardx.layout<@mesh, [R]>
  return %0 : tensor<16x8xf32>
}
// CHECK: remark: plan [S(0)] -> [R] for tensor<16x8xf32>: 1 step, 1 collective, 384 bytes/rank, 5.001 us
// CHECK-NEXT: all_gather(axes = [0], dim = 0) -> [R]: 384 bytes/rank, 5.001 us

// -----

// Tests that a Partial over two axes into a nested Shard is one
// reduce_scatter over both axes, at (n - 1) / n of the tensor.
shardx.mesh @mesh(shape = 2x2)
func.func @partial(%x: tensor<64xf16>) -> tensor<64xf16> {
  %0 = shardx.redistribute %x : tensor<64xf16> from #shardx.layout<@mesh, [P(sum), P(sum)]> to #shardx.layout<@mesh, [S(0), S(0)]>
  return %0 : tensor<64xf16>
}
// CHECK: remark: plan [P(sum), P(sum)] -> [S(0), S(0)] for tensor<64xf16>: 1 step, 1 collective, 96 bytes/rank
// CHECK-NEXT: reduce_scatter(axes = [0, 1], dim = 0, sum) -> [S(0), S(0)]: 96 bytes/rank

// -----

// Tests that a plan with a strided intermediate lists every layout it
// passes through.
shardx.mesh @mesh(shape = 2x2)
func.func @strided(%x: tensor<4096x1024xf32>) -> tensor<4096x1024xf32> {
  %0 = shardx.redistribute %x : tensor<4096x1024xf32> from #shardx.layout<@mesh, [S(0), S(0)]> to #shardx.layout<@mesh, [R, S(0)]>
  return %0 : tensor<4096x1024xf32>
}
// CHECK: remark: plan [S(0), S(0)] -> [R, S(0)] for tensor<4096x1024xf32>: 2 steps, 2 collectives, 8388608 bytes/rank
// CHECK-NEXT: all_gather(axes = [0], dim = 0) -> [R, S(0)], strides = {0 = [2]}: 4194304 bytes/rank
// CHECK-NEXT: all_to_all(axes = [1], split_dim = 0, concat_dim = 0) -> [R, S(0)]: 4194304 bytes/rank
