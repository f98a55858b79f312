// Tests shardx-fuse-tensor-ops{recompute-elementwise=true} (the cuda
// target's fusion): an elementwise producer of a few ops read by several
// ops is computed again in each reader instead of stored; without the
// option (the CPU target) it stays one loop nest that the readers read.

// RUN: shardx-opt %s --pass-pipeline='builtin.module(func.func(convert-elementwise-to-linalg),shardx-fuse-tensor-ops{recompute-elementwise=true},canonicalize,cse)' | FileCheck %s --check-prefix=GPU
// RUN: shardx-opt %s --pass-pipeline='builtin.module(func.func(convert-elementwise-to-linalg),shardx-fuse-tensor-ops,canonicalize,cse)' | FileCheck %s --check-prefix=CPU

// A softmax's scaled scores t = s * c: read by the row max and by the
// exponential. On the GPU both readers scale s themselves (two loop nests,
// each reading s); on the CPU t is stored once (three loop nests).
// GPU-LABEL: func.func @scaled_softmax_numerator(
// GPU-SAME: %[[S:.*]]: tensor<4x64xf32>
// GPU: linalg.generic
// GPU-SAME: iterator_types = ["parallel", "reduction"]
// GPU-SAME: ins(%[[S]] : tensor<4x64xf32>)
// GPU: arith.mulf
// GPU: arith.maximumf
// GPU: linalg.generic
// GPU-SAME: iterator_types = ["parallel", "parallel"]
// GPU-SAME: ins(%[[S]], %{{.*}} : tensor<4x64xf32>, tensor<4xf32>)
// GPU: arith.mulf
// GPU: arith.subf
// GPU: math.exp
// GPU-NOT: linalg.generic
// GPU: return
// CPU-LABEL: func.func @scaled_softmax_numerator(
// CPU-COUNT-3: linalg.generic
// CPU-NOT: linalg.generic
func.func @scaled_softmax_numerator(%s: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %c = arith.constant dense<0.125> : tensor<4x64xf32>
  %t = arith.mulf %s, %c : tensor<4x64xf32>
  %ninf = arith.constant 0xFF800000 : f32
  %e = tensor.empty() : tensor<4xf32>
  %init = linalg.fill ins(%ninf : f32) outs(%e : tensor<4xf32>) -> tensor<4xf32>
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>], iterator_types = ["parallel", "reduction"]} ins(%t : tensor<4x64xf32>) outs(%init : tensor<4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %x = arith.maximumf %in, %acc : f32
    linalg.yield %x : f32
  } -> tensor<4xf32>
  %e2 = tensor.empty() : tensor<4x64xf32>
  %mb = linalg.broadcast ins(%m : tensor<4xf32>) outs(%e2 : tensor<4x64xf32>) dimensions = [1]
  %d = arith.subf %t, %mb : tensor<4x64xf32>
  %x = math.exp %d : tensor<4x64xf32>
  return %x : tensor<4x64xf32>
}
