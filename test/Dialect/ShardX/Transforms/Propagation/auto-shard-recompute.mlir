// RUN: shardx-opt %s --shardx-auto-shard="compute-rate=1e9 memory-budget=1000000000 auto-json=%t.calls.json" -o /dev/null
// RUN: FileCheck %s --input-file=%t.calls.json --check-prefix=CALLS
// RUN: sed -e 's/func.call @region(%x, %w) :.*$/linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x32xf32>) outs(%x0 : tensor<16x32xf32>) -> tensor<16x32xf32>/' %s \
// RUN:   | shardx-opt --shardx-auto-shard="compute-rate=1e9 memory-budget=1000000000 auto-json=%t.inline.json" -o /dev/null
// RUN: FileCheck %s --input-file=%t.inline.json --check-prefix=INLINE
// RUN: shardx-opt %s --shardx-auto-shard="compute-rate=1e9 auto-json=%t.free.json" -o /dev/null
// RUN: FileCheck %s --input-file=%t.free.json --check-prefix=FREE

// Tests that under a budget a plan's recomputation is priced for a step
// without calls, not for one that calls a region (code generation outlines
// the layers again and recomputes nothing across calls), nor without a
// budget; and that a plan that fits needs none.
// CALLS: "recompute": "none"
// CALLS: "recompute_considered": false
// INLINE: "recompute": "none"
// INLINE: "recompute_considered": true
// FREE: "recompute": "none"
// FREE: "recompute_considered": false
shardx.mesh @mesh(shape = 2, axes = ["x"])

func.func private @region(%x: tensor<16x64xf32>, %w: tensor<64x32xf32>) -> tensor<16x32xf32> {
  %e = tensor.empty() : tensor<16x32xf32>
  %z = arith.constant 0.0 : f32
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<16x32xf32>) -> tensor<16x32xf32>
  %y = linalg.matmul ins(%x, %w : tensor<16x64xf32>, tensor<64x32xf32>) outs(%f : tensor<16x32xf32>) -> tensor<16x32xf32>
  return %y : tensor<16x32xf32>
}
func.func @calls(%w: tensor<64x32xf32>,
                 %m: tensor<64x32xf32> {torch.state = "momentum_buffer"},
                 %x: tensor<16x64xf32>)
    -> (tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>) {
  %e0 = tensor.empty() : tensor<16x32xf32>
  %z0 = arith.constant 0.0 : f32
  %x0 = linalg.fill ins(%z0 : f32) outs(%e0 : tensor<16x32xf32>) -> tensor<16x32xf32>
  %y = func.call @region(%x, %w) : (tensor<16x64xf32>, tensor<64x32xf32>) -> tensor<16x32xf32>
  %m2 = arith.addf %m, %w : tensor<64x32xf32>
  %w2 = arith.subf %w, %m2 : tensor<64x32xf32>
  return %y, %w2, %m2 : tensor<16x32xf32>, tensor<64x32xf32>, tensor<64x32xf32>
}
