// RUN: shardx-opt --shardx-fuse-tensor-ops=recompute-math=true --split-input-file %s | FileCheck %s
// RUN: shardx-opt --shardx-fuse-tensor-ops --split-input-file %s | FileCheck %s --check-prefix=CPU

// The cuda target's option: GELU's erf term of bf16 activations, read by
// the forward's product and by the backward, is computed again in each (a
// GPU's elementwise kernels are bound by memory) instead of written as f32
// and read back twice. Without the option (the cpu target) it is written
// once.
// CHECK-LABEL: func.func @erf_term
// CHECK-NOT: tensor<8x16xf32>) outs
// CHECK: linalg.generic {{.*}} ins(%arg0 : tensor<8x16xbf16>)
// CHECK: math.erf
// CHECK: arith.mulf
// CHECK: linalg.generic {{.*}} ins(%arg1, %arg0 : tensor<8x16xf32>, tensor<8x16xbf16>)
// CHECK: math.erf
// CHECK: arith.mulf
// CPU-LABEL: func.func @erf_term
// CPU: %[[ERF:.*]] = linalg.generic {{.*}} ins(%arg0 : tensor<8x16xbf16>)
// CPU: linalg.generic {{.*}} ins(%arg0, %[[ERF]] :
// CPU: linalg.generic {{.*}} ins(%arg1, %[[ERF]] :
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @erf_term(%x: tensor<8x16xbf16>, %dy: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
  %e = tensor.empty() : tensor<8x16xf32>
  %erf = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<8x16xbf16>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %w = arith.extf %a : bf16 to f32
    %v = math.erf %w : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %y = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %erf : tensor<8x16xbf16>, tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: bf16, %r: f32, %o: f32):
    %w = arith.extf %a : bf16 to f32
    %v = arith.mulf %w, %r : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %dx = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]} ins(%dy, %erf : tensor<8x16xf32>, tensor<8x16xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%g: f32, %r: f32, %o: f32):
    %v = arith.mulf %g, %r : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  return %y, %dx : tensor<8x16xf32>, tensor<8x16xf32>
}

// -----

// A reader that reads a math function's result broadcast (a per-row log
// read by every element of the row) does not get a copy: it would compute
// the function once per element instead of once per row.
// CHECK-LABEL: func.func @broadcast_reader
// CHECK: %[[LOG:.*]] = linalg.generic {{.*}} ins(%arg0 : tensor<8xbf16>)
// CHECK: math.log
// CHECK: linalg.generic {{.*}} ins(%arg1, %[[LOG]] : tensor<8x16xf32>, tensor<8xf32>)
// CHECK: linalg.generic {{.*}} ins(%arg0 : tensor<8xbf16>)
// CHECK: math.log
// CHECK-NEXT: arith.mulf
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
#r1 = affine_map<(d0) -> (d0)>
func.func @broadcast_reader(%s: tensor<8xbf16>, %x: tensor<8x16xf32>) -> (tensor<8x16xf32>, tensor<8xf32>) {
  %er = tensor.empty() : tensor<8xf32>
  %log = linalg.generic {indexing_maps = [#r1, #r1], iterator_types = ["parallel"]} ins(%s : tensor<8xbf16>) outs(%er : tensor<8xf32>) {
  ^bb0(%a: bf16, %o: f32):
    %w = arith.extf %a : bf16 to f32
    %v = math.log %w : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  %e = tensor.empty() : tensor<8x16xf32>
  %y = linalg.generic {indexing_maps = [#id, #row, #id], iterator_types = ["parallel", "parallel"]} ins(%x, %log : tensor<8x16xf32>, tensor<8xf32>) outs(%e : tensor<8x16xf32>) {
  ^bb0(%a: f32, %l: f32, %o: f32):
    %v = arith.subf %a, %l : f32
    linalg.yield %v : f32
  } -> tensor<8x16xf32>
  %z = linalg.generic {indexing_maps = [#r1, #r1], iterator_types = ["parallel"]} ins(%log : tensor<8xf32>) outs(%er : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %v = arith.mulf %a, %a : f32
    linalg.yield %v : f32
  } -> tensor<8xf32>
  return %y, %z : tensor<8x16xf32>, tensor<8xf32>
}
