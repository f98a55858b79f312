// RUN: shardx-opt --shardx-fuse-tensor-ops --split-input-file %s | FileCheck %s

// A transposed GEMM operand becomes an indexing map (later a BLAS view), and
// the elementwise epilogue (bias add + ReLU) fuses into one loop nest; the
// GEMM itself stays a pure multiply-add.
// CHECK-DAG: #[[$A:.*]] = affine_map<(d0, d1, d2) -> (d0, d2)>
// CHECK-DAG: #[[$BT:.*]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-DAG: #[[$C:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @linear
// CHECK-NOT: linalg.transpose
// CHECK: %[[MM:.*]] = linalg.generic {indexing_maps = [#[[$A]], #[[$BT]], #[[$C]]]
// CHECK-SAME: ins(%arg0, %arg1 :
// CHECK: arith.mulf
// CHECK-NEXT: arith.addf
// CHECK-NEXT: linalg.yield
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[MM]], %arg2 :
// CHECK: arith.addf
// CHECK-NEXT: arith.maximumf
// CHECK-NEXT: linalg.yield
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @linear(%x: tensor<4x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %e = tensor.empty() : tensor<8x16xf32>
  %wt = linalg.transpose ins(%w : tensor<16x8xf32>) outs(%e : tensor<8x16xf32>) permutation = [1, 0]
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<4x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e1 : tensor<4x16xf32>) -> tensor<4x16xf32>
  %mm = linalg.matmul ins(%x, %wt : tensor<4x8xf32>, tensor<8x16xf32>) outs(%f : tensor<4x16xf32>) -> tensor<4x16xf32>
  %e2 = tensor.empty() : tensor<4x16xf32>
  %add = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%mm, %b : tensor<4x16xf32>, tensor<16xf32>) outs(%e2 : tensor<4x16xf32>) {
  ^bb0(%a: f32, %c: f32, %o: f32):
    %s = arith.addf %a, %c : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  %e3 = tensor.empty() : tensor<4x16xf32>
  %relu = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%add : tensor<4x16xf32>) outs(%e3 : tensor<4x16xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.maximumf %a, %zero : f32
    linalg.yield %s : f32
  } -> tensor<4x16xf32>
  return %relu : tensor<4x16xf32>
}

// -----

// A weight gradient x^T dy transposed back to the weight's layout is
// computed transposed: the GEMM writes (n, m), no transpose remains.
// CHECK-DAG: #[[$AT:.*]] = affine_map<(d0, d1, d2) -> (d2, d0)>
// CHECK-DAG: #[[$B:.*]] = affine_map<(d0, d1, d2) -> (d2, d1)>
// CHECK-DAG: #[[$CT:.*]] = affine_map<(d0, d1, d2) -> (d1, d0)>
// CHECK-LABEL: func.func @weight_grad
// CHECK: %[[F:.*]] = linalg.fill {{.*}} -> tensor<16x8xf32>
// CHECK: linalg.generic {indexing_maps = [#[[$AT]], #[[$B]], #[[$CT]]]
// CHECK-SAME: ins(%arg0, %arg1 : tensor<4x8xf32>, tensor<4x16xf32>) outs(%[[F]] : tensor<16x8xf32>)
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @weight_grad(%x: tensor<4x8xf32>, %dy: tensor<4x16xf32>) -> tensor<16x8xf32> {
  %e = tensor.empty() : tensor<8x4xf32>
  %xt = linalg.transpose ins(%x : tensor<4x8xf32>) outs(%e : tensor<8x4xf32>) permutation = [1, 0]
  %zero = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<8x16xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e1 : tensor<8x16xf32>) -> tensor<8x16xf32>
  %g = linalg.matmul ins(%xt, %dy : tensor<8x4xf32>, tensor<4x16xf32>) outs(%f : tensor<8x16xf32>) -> tensor<8x16xf32>
  %e2 = tensor.empty() : tensor<16x8xf32>
  %gt = linalg.transpose ins(%g : tensor<8x16xf32>) outs(%e2 : tensor<16x8xf32>) permutation = [1, 0]
  return %gt : tensor<16x8xf32>
}

// -----

// An elementwise value read twice is not duplicated into both readers, and
// nothing elementwise fuses into a GEMM (it must stay a BLAS call).
// CHECK-LABEL: func.func @shared
// CHECK: %[[T:.*]] = linalg.generic
// CHECK: math.tanh
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[T]], %arg1 :
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[T]] :
// CHECK: arith.addf
func.func @shared(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %e = tensor.empty() : tensor<4x4xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%x : tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) {
  ^bb0(%a: f32, %o: f32):
    %s = math.tanh %a : f32
    linalg.yield %s : f32
  } -> tensor<4x4xf32>
  %zero = arith.constant 0.0 : f32
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
  %mm = linalg.matmul ins(%t, %w : tensor<4x4xf32>, tensor<4x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
  %sum = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]} ins(%t, %t : tensor<4x4xf32>, tensor<4x4xf32>) outs(%e : tensor<4x4xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<4x4xf32>
  return %mm, %sum : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// A row's log (attention's log-sum-exp) read broadcast by every element of
// the row stays its own loop: fused, the log would run once per element.
// A row's plain arithmetic still fuses.

#rows = affine_map<(d0, d1) -> (d0)>
#all = affine_map<(d0, d1) -> (d0, d1)>
#one = affine_map<(d0) -> (d0)>

// CHECK-LABEL: func.func @broadcast_log
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel"]
// CHECK: math.log
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
// CHECK-NOT: math.log
// CHECK: math.exp
func.func @broadcast_log(%l: tensor<8xf32>, %s: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %lse = linalg.generic {indexing_maps = [#one, #one], iterator_types = ["parallel"]}
      ins(%l : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = math.log %x : f32
    linalg.yield %y : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %p = linalg.generic {indexing_maps = [#all, #rows, #all], iterator_types = ["parallel", "parallel"]}
      ins(%s, %lse : tensor<8x16xf32>, tensor<8xf32>) outs(%e2 : tensor<8x16xf32>) {
  ^bb0(%x: f32, %r: f32, %o: f32):
    %d = arith.subf %x, %r : f32
    %y = math.exp %d : f32
    linalg.yield %y : f32
  } -> tensor<8x16xf32>
  return %p : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @broadcast_add
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]
// CHECK: arith.addf
// CHECK: arith.subf
// CHECK-NOT: linalg.generic
func.func @broadcast_add(%l: tensor<8xf32>, %s: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %b = linalg.generic {indexing_maps = [#one, #one], iterator_types = ["parallel"]}
      ins(%l : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<8xf32>
  %e2 = tensor.empty() : tensor<8x16xf32>
  %p = linalg.generic {indexing_maps = [#all, #rows, #all], iterator_types = ["parallel", "parallel"]}
      ins(%s, %b : tensor<8x16xf32>, tensor<8xf32>) outs(%e2 : tensor<8x16xf32>) {
  ^bb0(%x: f32, %r: f32, %o: f32):
    %d = arith.subf %x, %r : f32
    linalg.yield %d : f32
  } -> tensor<8x16xf32>
  return %p : tensor<8x16xf32>
}
