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

// -----

// Tests that on a local program the remark per function gives the schedule
// summary: the modeled communication, the exposed communication of the
// function as given and of a scheduled copy, and the started collectives
// with their bytes (an all-reduce, then an all-gather of 64 bytes into
// 256). Exposed before: both collectives (5.005 + 5.001 us at the default
// 5 us latency); after: the all-reduce overlaps the second matmul (4.096
// us), the all-gather starts behind it on the one channel.
shardx.mesh @mesh(shape = 4)
func.func @local(%x: tensor<16x16xf32>, %w: tensor<16x16xf32>, %v: tensor<16xf32>)
    -> (tensor<16x16xf32>, tensor<16x16xf32>, tensor<64xf32>) {
  %e = tensor.empty() : tensor<16x16xf32>
  %g = linalg.matmul ins(%x, %w : tensor<16x16xf32>, tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %h = linalg.matmul ins(%x, %x : tensor<16x16xf32>, tensor<16x16xf32>) outs(%e : tensor<16x16xf32>) -> tensor<16x16xf32>
  %r = shardx.all_reduce %g on @mesh axes = [0] reduction = sum : tensor<16x16xf32>
  %a = shardx.all_gather %v on @mesh axes = [0] dim = 0 : tensor<16xf32> -> tensor<64xf32>
  return %r, %h, %a : tensor<16x16xf32>, tensor<16x16xf32>, tensor<64xf32>
}
// CHECK: remark: schedule of @local: 2 collectives (2 async), 10.006 us communication; exposed 10.006 us before, 5.910 us after scheduling
// CHECK-NEXT: all_reduce_start of 1024 bytes
// CHECK-NEXT: all_gather_start of 256 bytes
